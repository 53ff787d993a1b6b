"""La-MAML (Gupta et al. 2020) and sparse-La-MAML: look-ahead meta-learning on a stream.

For every incoming batch, ``glances`` times: take one single-sample inner step per sample
(first order, through the shared :class:`~methods.gradient.inner_loop.InnerLoop`), score the
look-ahead weights on the meta-batch (the incoming batch plus replayed samples) after each
step, and average. The meta-loss updates the modulation first (La-MAML's rates
``relu(alpha)``, or sparse-La-MAML's masks ``alpha0 * 1[m >= 0]``), then the weights move by
the same modulated step: ``theta <- theta - rate * grad``. Both rates and masks are the
gradient modulations of sparse-MAML; nothing here is specific to either.

This follows the authors' MNIST code (``model/lamaml.py``), which produced the published
MNIST numbers. Avalanche's ``LaMAML`` (``lamaml_v2``) follows their CIFAR code instead and
differs in two ways: its inner step uses ``alpha`` itself where ours uses ``relu(alpha)``
(a rate below zero stays frozen here, and keeps learning there), and it clamps each inner
gradient entry to ``grad_clip``, which the MNIST code does not. Otherwise the two agree
update for update (tests/test_lamaml_peer.py, which names every difference).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from mesabench_core import param
from mesabench_datasets.tasks import Problem
from methods.common.losses import task_loss
from methods.continual.baselines import StreamLearner, own_seed, stream_network
from methods.continual.replay import ReservoirBuffer
from methods.gradient.inner_loop import InnerLoop, Params
from methods.gradient.modulation import ModulationSettings, build_modulation, check_modulation
from methods.registry import register_method


class LookAhead:
    """La-MAML's online meta-objective, first order, without unrolling a graph, over the
    weights, network and modulation of a (first-order) :class:`InnerLoop`.

    Takes one modulated step per sample of ``(x, y)``, ``phi_i = phi_{i-1} - step(g_i)``,
    and scores every ``phi_i`` on the meta-batch. With first-order inner gradients the
    mean meta-loss ``L`` has ``dL/dparams = mean_i G_i`` (``G_i`` the meta-gradient at
    ``phi_i``) and ``dL/drate = -mean_i G_i * sum_{k <= i} g_k``, so two plain gradients
    per step give the exact same derivatives as backpropagating through the unrolled
    trajectory, at a fraction of the cost.

    A call returns the mean meta-loss, ``dL/dparams`` and ``dL/drate`` per adapted tensor.
    """

    def __init__(self, inner: InnerLoop):
        self.inner = inner
        self._flat: dict[tuple, dict[str, tuple[Tensor, Params]]] = {}  # kept between calls

    def __call__(
        self, params: Params, buffers: Params, x: Tensor, y: Tensor, meta_x: Tensor, meta_y: Tensor
    ) -> tuple[Tensor, Params, Params]:
        inner = self.inner
        names = inner.adapted
        grouped = getattr(inner.network, "grouped_gradients", None)
        if grouped is None or inner.loss != "cross_entropy" or set(names) != set(params):
            grouped = None
        frozen = {n: p.detach() for n, p in params.items() if n not in names}
        # Every per-tensor quantity lives in one flat vector (with per-tensor views), so the
        # bookkeeping of a step is four vector operations, not four per tensor: on tiny
        # batches it would otherwise cost as much as the gradients themselves.
        shapes = [params[n].shape for n in names]
        sizes = [params[n].numel() for n in names]

        def flat_and_views() -> tuple[Tensor, Params]:
            flat = torch.zeros(sum(sizes), dtype=params[names[0]].dtype, device=x.device)
            views = {
                n: v.view(shape)
                for n, v, shape in zip(names, flat.split(sizes), shapes, strict=True)
            }
            return flat, views

        # The vectors are kept between calls (allocating seven per batch is measurable): the
        # returned gradients are valid until the next call.
        key = (tuple(names), x.device, params[names[0]].dtype)
        if key not in self._flat:
            roles = ("fast", "rate", "sample", "meta", "steps", "params", "rates")
            self._flat[key] = {role: flat_and_views() for role in roles}
        vectors = self._flat[key]
        (fast, fast_views), (rate, _) = vectors["fast"], vectors["rate"]
        (sample_grad, sample_views), (meta_grad, meta_views) = vectors["sample"], vectors["meta"]
        (steps_taken, _), (param_grads, param_views) = vectors["steps"], vectors["params"]
        rate_grads, rate_views = vectors["rates"]
        with torch.no_grad():  # the rates are constant along the trajectory
            rates = [
                torch.as_tensor(inner.modulation.rate(n), device=x.device).expand(shape).reshape(-1)
                for n, shape in zip(names, shapes, strict=True)
            ]
            torch.cat(rates, out=rate)
            torch.cat([params[n].reshape(-1) for n in names], out=fast)
            for vector in (steps_taken, param_grads, rate_grads):
                vector.zero_()

        def gradient(xb: Tensor, yb: Tensor, into: Tensor) -> Tensor:
            with torch.enable_grad():
                leaves = {n: w.detach().requires_grad_() for n, w in fast_views.items()}
                loss = task_loss(inner.forward({**frozen, **leaves}, buffers, xb), yb, inner.loss)
                grads = torch.autograd.grad(loss, list(leaves.values()))
            torch.cat([g.reshape(-1) for g in grads], out=into)
            return loss.detach()

        count = len(x)
        if grouped is not None:
            # Row i: sample i, then the meta-batch; built once rather than once per step.
            rows = torch.cat([x[:, None], meta_x.expand(count, *meta_x.shape)], dim=1)
            labels = torch.cat([y[:, None], meta_y.expand(count, *meta_y.shape)], dim=1)
            weights = {**frozen, **fast_views}

        def sample_and_meta(i: int) -> Tensor:
            """Meta-loss at the current weights; sample ``i``'s and the meta-batch's gradients
            land in ``sample_grad`` and ``meta_grad``."""
            if grouped is not None:  # one pass for both (a network that offers it)
                return grouped(weights, rows[i], labels[i], 1, out=(sample_views, meta_views))[1]
            gradient(x[i : i + 1], y[i : i + 1], sample_grad)
            return gradient(meta_x, meta_y, meta_grad)

        meta_losses = []
        # Inference mode skips autograd's bookkeeping on every small op; the generic path
        # needs autograd for its gradients.
        with torch.inference_mode() if grouped is not None else torch.no_grad():
            sample_and_meta(0)
            for i in range(count):
                # sample_grad holds sample i's gradient at phi_{i-1}: step, then score phi_i
                # (the sample gradient computed there is the next step's; unused at the end).
                steps_taken += sample_grad
                fast.addcmul_(rate, sample_grad, value=-1.0)
                meta_losses.append(sample_and_meta((i + 1) % count))
                param_grads += meta_grad
                rate_grads.addcmul_(meta_grad, steps_taken, value=-1.0)
            param_grads /= count
            rate_grads /= count
            mean_loss = torch.stack(meta_losses).mean()
        return mean_loss, param_views, rate_views


@dataclass(frozen=True)
class LaMAMLConfig:
    hidden: tuple[int, ...] = param((100, 100), min=1, help="hidden widths of the MLP")
    glances: int = param(5, min=1, help="repetitions of the meta-update per incoming batch")
    replay_batch: int = param(10, min=0, help="replayed samples in each meta-batch")
    buffer_size: int = param(200, min=0, help="reservoir buffer size")
    modulation: str = param(
        "relu_rates",
        help="a registered gradient modulation: relu_rates (La-MAML: relu(alpha)), binary_mask "
        "(alpha0 * 1[m >= 0], sparse), fixed, learned_rates, or a plugin's",
    )
    rate_init: float = param(0.15, help="initial alpha of every weight (relu_rates)")
    fixed_rate: float = param(0.15, min=0.0, help="alpha0, the masked rate (binary_mask)")
    mask_init: float = param(0.01, help="initial m of every weight (binary_mask; >= 0: on)")
    mask_init_mode: Literal["constant", "centred"] = param(
        "constant", help="every m = mask_init, or uniform in (-mask_init, mask_init) (half off)"
    )
    modulation_lr: float = param(0.3, min=0.0, help="rate of the optimiser of alpha (or of m)")
    modulation_optimizer: Literal["sgd", "adam"] = param(
        "sgd", help="optimiser of alpha / m (La-MAML: SGD; sparse-MAML's masks: Adam)"
    )
    learn_modulation: bool = param(True, help="update alpha / m (False: fixed rates)")
    grad_clip: float = param(2.0, min=0.0, help="norm clip of the weight and alpha gradients")

    def check(self) -> None:
        check_modulation(self.modulation)


class LookAheadMetaLearner(StreamLearner):
    """La-MAML's online meta-update with a pluggable gradient modulation."""

    Config = LaMAMLConfig

    def __init__(self, config: LaMAMLConfig, problem: Problem, device: torch.device):
        super().__init__(config, problem, device)
        self.network = stream_network(problem, config.hidden, device)
        self.params = dict(self.network.named_parameters())
        self.buffers = dict(self.network.named_buffers())
        shapes = {n: p.shape for n, p in self.params.items()}
        settings = ModulationSettings(shapes, lr=config.fixed_rate, rate_init=config.rate_init,
                                      mask_init=config.mask_init,
                                      mask_init_mode=config.mask_init_mode,
                                      rectified="direct")  # fmt: skip
        self.modulation = build_modulation(config.modulation, settings).to(device)
        self.inner = InnerLoop(
            self.network, self.modulation, problem.loss, list(self.params), first_order=True
        )
        self.lookahead = LookAhead(self.inner)
        optimizer = torch.optim.Adam if config.modulation_optimizer == "adam" else torch.optim.SGD
        rates = list(self.modulation.parameters())  # none for a fixed rate
        self.modulation_optimizer = optimizer(rates, lr=config.modulation_lr) if rates else None
        self.replay = ReservoirBuffer(config.buffer_size, problem.input_shape, device, own_seed())
        self.generator = torch.Generator().manual_seed(own_seed())

    def observe(self, x: Tensor, y: Tensor) -> dict[str, float]:
        c = self.config
        for glance in range(c.glances):
            order = torch.randperm(len(x), generator=self.generator, device="cpu")
            order = order.to(x.device, non_blocking=True)  # host generator: any device alike
            xs, ys = x[order], y[order]
            if c.replay_batch > 0 and len(self.replay) > 0:
                rx, ry = self.replay.sample(c.replay_batch)
                meta_x, meta_y = torch.cat([xs, rx]), torch.cat([ys, ry])
            else:
                meta_x, meta_y = xs, ys
            loss, param_grads, rate_grads = self.lookahead(
                self.params, self.buffers, xs, ys, meta_x, meta_y
            )
            for name, p in self.params.items():
                p.grad = param_grads[name]
            # The modulation's gradient by the chain rule through its own rate function
            # (exact relu for La-MAML, straight-through for the masks).
            self.modulation.zero_grad(set_to_none=True)
            for name in self.params:
                self.modulation.add_rate_gradient(name, rate_grads[name])
            if c.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.network.parameters(), c.grad_clip)
                torch.nn.utils.clip_grad_norm_(self.modulation.parameters(), c.grad_clip)
            if c.learn_modulation and self.modulation_optimizer is not None:
                self.modulation_optimizer.step()  # the rates move first ...
            with torch.no_grad():  # ... then the weights take the step they now prescribe
                weights = list(self.params.values())
                rates = [torch.as_tensor(self.modulation.rate(n), dtype=p.dtype,
                                         device=p.device).expand_as(p)
                         for n, p in self.params.items()]  # fmt: skip
                torch._foreach_addcmul_(weights, rates, [p.grad for p in weights], value=-1.0)
            if glance == 0 and c.buffer_size > 0:
                # Once per sample (the public code re-adds it on every glance).
                self.replay.add(x, y)
        return {"loss": loss.item()}

    def sparsity(self) -> dict[str, float]:
        return self.modulation.sparsity()

    def tensor_sizes(self) -> dict[str, int]:
        return {n: p.numel() for n, p in self.params.items()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "network": self.network.state_dict(),
            "modulation": self.modulation.state_dict(),
            "modulation_optimizer": (
                self.modulation_optimizer and self.modulation_optimizer.state_dict()
            ),
            "replay": self.replay.state_dict(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.network.load_state_dict(state["network"])
        self.modulation.load_state_dict(state["modulation"])
        if self.modulation_optimizer is not None:
            self.modulation_optimizer.load_state_dict(state["modulation_optimizer"])
        self.replay.load_state_dict(state["replay"])
        self.generator.set_state(state["generator"])


register_method(
    "lamaml",
    LookAheadMetaLearner,
    "La-MAML: look-ahead meta-learning with per-weight rates relu(alpha) (Gupta et al. 2020)",
)
register_method(
    "sparse_lamaml",
    LookAheadMetaLearner,
    "sparse-La-MAML: La-MAML with binary gradient masks alpha0 * 1[m >= 0], straight-through",
    modulation="binary_mask",
    # From a grid over alpha0 x mask lr on mnist-rotations, seed 100 (docs/earlier-results.md).
    fixed_rate=0.1,
    modulation_lr=0.1,
)
