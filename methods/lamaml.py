"""La-MAML (Gupta et al. 2020) and sparse-La-MAML: look-ahead meta-learning on a stream.

For every incoming batch, ``glances`` times: take one single-sample inner step per sample
(first order, through the shared :class:`~methods.inner_loop.InnerLoop`), score the
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
from methods.continual import StreamLearner, own_seed, stream_network
from methods.inner_loop import InnerLoop
from methods.modulation import ModulationSettings, build_modulation, check_modulation
from methods.registry import register_method
from methods.replay import ReservoirBuffer


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
        optimizer = torch.optim.Adam if config.modulation_optimizer == "adam" else torch.optim.SGD
        rates = list(self.modulation.parameters())  # none for a fixed rate
        self.modulation_optimizer = optimizer(rates, lr=config.modulation_lr) if rates else None
        self.replay = ReservoirBuffer(config.buffer_size, problem.input_shape, device, own_seed())
        self.generator = torch.Generator().manual_seed(own_seed())

    def observe(self, x: Tensor, y: Tensor) -> dict[str, float]:
        c = self.config
        for glance in range(c.glances):
            order = torch.randperm(len(x), generator=self.generator).to(x.device)
            xs, ys = x[order], y[order]
            if c.replay_batch > 0 and len(self.replay) > 0:
                rx, ry = self.replay.sample(c.replay_batch)
                meta_x, meta_y = torch.cat([xs, rx]), torch.cat([ys, ry])
            else:
                meta_x, meta_y = xs, ys
            loss, param_grads, rate_grads = self.inner.lookahead_first_order(
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
    # From a grid over alpha0 x mask lr on mnist-rotations, seed 100 (docs/RESULTS.md).
    fixed_rate=0.1,
    modulation_lr=0.1,
)
