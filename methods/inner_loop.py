"""One differentiable inner loop for every gradient-based learner.

Built on ``torch.func.functional_call`` and ``torch.func.grad`` for a single task, then
vectorised over the task batch with ``torch.func.vmap``. Second-order by default; with
``first_order`` the inner gradients are detached, which leaves the outer gradient equal to
the query gradient at the adapted weights (plus, for learned modulations, the first-order
gradient through the step). With ``modulation_first_order`` the two are mixed, as the thesis'
sparse-MAML rule has it (eq. 4.4: the mask's gradient ignores second-order terms, following
FOMAML): the weights get the second-order meta-gradient, with the modulation's values as
constants, and the modulation's parameters the first-order one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager, nullcontext

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from mesabench_datasets.tasks import LossKind, TaskBatch
from methods.losses import per_task_loss, task_loss
from methods.modulation import GradientModulation

Params = dict[str, Tensor]


def _detached(params: Params) -> Params:
    return {n: p.detach() for n, p in params.items()}


class _Steps:
    """The modulated steps of one adaptation: ``w <- w - modulation.step(name, g)``.

    Mixed order (thesis eq. 4.4) keeps two parts: the weights' path, stepped with the
    modulation's parameters as constants (so the weights' meta-gradient is the full second
    order one at the masks' values), and a sum of terms whose value is zero and whose gradient
    to the modulation's parameters is the first-order one: ``step(m, g) - step(m', g)`` with
    ``g`` and ``m'`` detached. Gradients are taken on the weights' path alone, so no second-
    order term reaches the modulation through later steps."""

    def __init__(self, modulation: GradientModulation, mixed: bool):
        self.modulation, self.mixed = modulation, mixed
        self.constant: Params = {}
        if mixed:
            self.constant = {n: p.detach() for n, p in modulation.named_parameters()}
        self.zero_valued: Params = {}

    def take(self, fast: Params, grads: Params) -> Params:
        if not self.mixed:
            return {n: fast[n] - self.modulation.step(n, grads[n]) for n in fast}
        out = {}
        for n in fast:
            g, held = grads[n], grads[n].detach()
            out[n] = fast[n] - functional_call(self.modulation, self.constant, (n, g))
            first = self.modulation.step(n, held) - functional_call(
                self.modulation, self.constant, (n, held))  # fmt: skip
            self.zero_valued[n] = self.zero_valued[n] - first if n in self.zero_valued else -first
        return out

    def result(self, fast: Params) -> Params:
        return {n: w + self.zero_valued[n] if n in self.zero_valued else w
                for n, w in fast.items()}  # fmt: skip


class InnerLoop:
    """Adapts a network's parameters to a task's support set by modulated gradient steps."""

    def __init__(
        self,
        network: nn.Module,
        modulation: GradientModulation,
        loss: LossKind,
        adapted: Collection[str],
        first_order: bool = False,
        vectorize: bool = True,
        modulation_first_order: bool = False,
    ):
        self.network = network
        self.modulation = modulation
        self.loss = loss
        self.adapted = list(adapted)
        self.first_order = first_order
        self.mixed_order = modulation_first_order and not first_order
        # vmap over tasks, or a Python loop over the same single-task function. vmap wins for
        # small networks; on a CPU, per-task convolutions stay in cache and a loop is faster.
        self.vectorize = vectorize
        self._flat: dict[tuple, dict[str, tuple[Tensor, Params]]] = {}  # lookahead vectors

    def forward(self, params: Params, buffers: Params, x: Tensor) -> Tensor:
        functional = getattr(self.network, "functional_forward", None)
        if functional is not None and not buffers:
            return functional(params, x)
        return functional_call(self.network, (params, buffers), (x,))

    def _support_loss(self, fast: Params, frozen: Params, buffers: Params, x: Tensor, y: Tensor):
        return task_loss(self.forward({**frozen, **fast}, buffers, x), y, self.loss)

    def adapt(self, params: Params, buffers: Params, x: Tensor, y: Tensor, steps: int) -> Params:
        """Parameters after ``steps`` modulated gradient steps on one task's support set."""
        fast = {n: params[n] for n in self.adapted}
        frozen = {n: p for n, p in params.items() if n not in fast}
        steps_of = _Steps(self.modulation, self.mixed_order)
        for _ in range(steps):
            if self.first_order:
                # The inner gradient is a constant to the outer loop: compute it on detached
                # weights so that no graph is built for it at all.
                grads = grad(self._support_loss)(_detached(fast), _detached(frozen), buffers, x, y)
            else:
                grads = grad(self._support_loss)(fast, frozen, buffers, x, y)
            fast = steps_of.take(fast, grads)
        return {**frozen, **steps_of.result(fast)}

    def query_loss(
        self,
        params: Params,
        buffers: Params,
        sx: Tensor,
        sy: Tensor,
        qx: Tensor,
        qy: Tensor,
        steps: int,
    ) -> Tensor:
        """Query loss of one task after adaptation (the MAML meta-objective)."""
        adapted = self.adapt(params, buffers, sx, sy, steps)
        return task_loss(self.forward(adapted, buffers, qx), qy, self.loss)

    def predict(
        self, params: Params, buffers: Params, sx: Tensor, sy: Tensor, qx: Tensor, steps: int
    ) -> Tensor:
        """Predictions on one task's queries after adaptation."""
        return self.forward(self.adapt(params, buffers, sx, sy, steps), buffers, qx)

    def batched_adapt(
        self, params: Params, buffers: Params, sx: Tensor, sy: Tensor, steps: int
    ) -> Params:
        """Each task's adapted parameters: every tensor gets a leading task dimension
        ``[T, ...]`` (tensors that are not adapted are repeated)."""
        if self._batches_by_hand(buffers):
            return self._adapt_all(params, sx, sy, steps)
        if self.vectorize:
            return vmap(self.adapt, in_dims=(None, None, 0, 0, None))(
                params, buffers, sx, sy, steps
            )
        per_task = [self.adapt(params, buffers, x, y, steps) for x, y in zip(sx, sy, strict=True)]
        return {n: torch.stack([task[n] for task in per_task]) for n in per_task[0]}

    # -- all tasks at once, by batched matrix products (networks that write them out) -----
    def _batches_by_hand(self, buffers: Params) -> bool:
        """Whether the batched path applies: a network that runs every task's weights at
        once and writes out their gradients (the MLP's ``batched_forward`` and
        ``batched_gradients``), no buffers, vectorising asked for. It computes what vmap
        does without torch.func's per-task transforms, which cost most on tiny networks."""
        network = self.network
        return (
            self.vectorize
            and not buffers
            and hasattr(network, "batched_forward")
            and hasattr(network, "batched_gradients")
        )

    @contextmanager
    def threads(self, buffers: Params) -> Iterator[None]:
        """One intra-op thread while the batched path runs (restored after). Its operations
        are too small to gain from splitting, and splitting them stalls whenever another
        process holds a core: 40x slower on two cores with one busy."""
        if not self._batches_by_hand(buffers) or torch.get_num_threads() == 1:
            yield
            return
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def _adapt_all(self, params: Params, sx: Tensor, sy: Tensor, steps: int) -> Params:
        """Every task's adapted weights ``[T, ...]`` by ``steps`` modulated steps."""
        tasks = sx.shape[0]
        per_task = {n: p.expand(tasks, *p.shape) for n, p in params.items()}
        fast = {n: per_task[n] for n in self.adapted}
        frozen = {n: w for n, w in per_task.items() if n not in fast}
        second_order = not self.first_order and any(p.requires_grad for p in params.values())
        steps_of = _Steps(self.modulation, self.mixed_order)
        for _ in range(steps if fast else 0):  # nothing adapted (no_adaptation): no steps
            # Plain differentiable operations: the graph is kept for the second order (in
            # grad mode), not built at all for the first.
            with nullcontext() if second_order else torch.no_grad():
                every = self.network.batched_gradients({**frozen, **fast}, sx, sy, self.loss)
            fast = steps_of.take(fast, {n: every[n] for n in fast})
        return {**frozen, **steps_of.result(fast)}

    def _over_tasks(self, fn, params: Params, buffers: Params, tasks: tuple, steps: int):
        if self.vectorize:
            in_dims = (None, None, *([0] * len(tasks)), None)
            return vmap(fn, in_dims=in_dims)(params, buffers, *tasks, steps)
        return torch.stack([fn(params, buffers, *task, steps) for task in zip(*tasks, strict=True)])

    def batched_query_loss(self, params: Params, buffers: Params, batch: TaskBatch, steps: int):
        """Per-task query losses ``[T]`` over the task batch."""
        if self._batches_by_hand(buffers):
            adapted = self._adapt_all(params, batch.support_x, batch.support_y, steps)
            prediction = self.network.batched_forward(adapted, batch.query_x)
            return per_task_loss(prediction, batch.query_y, self.loss)
        return self._over_tasks(self.query_loss, params, buffers, tuple(batch), steps)

    def batched_predict(
        self, params: Params, buffers: Params, sx: Tensor, sy: Tensor, qx: Tensor, steps: int
    ) -> Tensor:
        """Query predictions ``[T, Q, out]`` after adapting to each task's support set."""
        if self._batches_by_hand(buffers):
            return self.network.batched_forward(self._adapt_all(params, sx, sy, steps), qx)
        return self._over_tasks(self.predict, params, buffers, (sx, sy, qx), steps)

    def lookahead_first_order(
        self, params: Params, buffers: Params, x: Tensor, y: Tensor, meta_x: Tensor, meta_y: Tensor
    ) -> tuple[Tensor, Params, Params]:
        """La-MAML's online meta-objective, first order, without unrolling a graph.

        Takes one modulated step per sample of ``(x, y)``, ``phi_i = phi_{i-1} - step(g_i)``,
        and scores every ``phi_i`` on the meta-batch. With first-order inner gradients the
        mean meta-loss ``L`` has ``dL/dparams = mean_i G_i`` (``G_i`` the meta-gradient at
        ``phi_i``) and ``dL/drate = -mean_i G_i * sum_{k <= i} g_k``, so two plain gradients
        per step give the exact same derivatives as backpropagating through the unrolled
        trajectory, at a fraction of the cost.

        Returns the mean meta-loss, ``dL/dparams`` and ``dL/drate`` per adapted tensor.
        """

        names = self.adapted
        grouped = getattr(self.network, "grouped_gradients", None)
        if grouped is None or self.loss != "cross_entropy" or set(names) != set(params):
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
                torch.as_tensor(self.modulation.rate(n), device=x.device).expand(shape).reshape(-1)
                for n, shape in zip(names, shapes, strict=True)
            ]
            torch.cat(rates, out=rate)
            torch.cat([params[n].reshape(-1) for n in names], out=fast)
            for vector in (steps_taken, param_grads, rate_grads):
                vector.zero_()

        def gradient(xb: Tensor, yb: Tensor, into: Tensor) -> Tensor:
            with torch.enable_grad():
                leaves = {n: w.detach().requires_grad_() for n, w in fast_views.items()}
                loss = task_loss(self.forward({**frozen, **leaves}, buffers, xb), yb, self.loss)
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
