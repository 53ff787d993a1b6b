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
from functools import partial

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from mesabench_datasets.tasks import LossKind, TaskBatch
from methods.common.losses import per_task_loss, task_loss
from methods.common.threads import intra_op_threads
from methods.gradient.modulation import GradientModulation

Params = dict[str, Tensor]


def vectorizes(convolutional: bool, device: torch.device | str) -> bool:
    """Whether ``vmap`` over tasks is the faster form, by measurement (docs/RESULTS.md,
    bench/conv4_throughput.py and bench/maml_throughput.py): yes for MLPs anywhere and for
    convolutions on a GPU (4-18x a per-task loop on an H100); no for convolutions on a CPU,
    where vmapped 64-channel convolutions fall out of cache (0.39x the loop). The MAML
    family's ``task_batching=auto`` and :class:`InnerLoop`'s default both follow it."""
    return not (convolutional and torch.device(device).type == "cpu")


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

    def take(self, fast: Params, grads: Params, index: int) -> Params:
        """One step (the ``index``-th of the adaptation, from 0)."""
        modulation = self.modulation
        if not self.mixed:
            return {n: fast[n] - modulation.step_at(n, grads[n], index) for n in fast}
        told = (index,) if modulation.step_aware else ()
        out = {}
        for n in fast:
            g, held = grads[n], grads[n].detach()
            out[n] = fast[n] - functional_call(modulation, self.constant, (n, g, *told))
            first = modulation.step_at(n, held, index) - functional_call(
                modulation, self.constant, (n, held, *told))  # fmt: skip
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
        vectorize: bool | None = None,
        modulation_first_order: bool = False,
    ):
        self.network = network
        self.modulation = modulation
        self.loss = loss
        self.adapted = list(adapted)
        self.first_order = first_order
        self.mixed_order = modulation_first_order and not first_order
        # vmap over tasks, or a Python loop over the same single-task function; by default the
        # faster form for the network where its parameters are (:func:`vectorizes`).
        if vectorize is None:
            convolutional = any(isinstance(m, nn.Conv2d) for m in network.modules())
            device = next(iter(network.parameters()), torch.empty(0)).device
            vectorize = vectorizes(convolutional, device)
        self.vectorize = vectorize

    def forward(self, params: Params, buffers: Params, x: Tensor) -> Tensor:
        functional = getattr(self.network, "functional_forward", None)
        if functional is not None and not buffers:
            return functional(params, x)
        return functional_call(self.network, (params, buffers), (x,))

    def _support_loss(self, fast: Params, frozen: Params, buffers: Params, x: Tensor, y: Tensor):
        return task_loss(self.forward({**frozen, **fast}, buffers, x), y, self.loss)

    def adapt(self, params: Params, buffers: Params, x: Tensor, y: Tensor, steps: int) -> Params:
        """Parameters after ``steps`` modulated gradient steps on one task's support set."""
        return self._adapted(params, buffers, x, y, steps, keep_each=False)[-1]

    def adapt_each_step(
        self, params: Params, buffers: Params, x: Tensor, y: Tensor, steps: int
    ) -> list[Params]:
        """The parameters after each of ``steps`` steps (before any when ``steps`` is 0):
        one pass, every step's weights kept for a loss that reads them all (MAML++'s MSL)."""
        return self._adapted(params, buffers, x, y, steps, keep_each=True)

    def _adapted(self, params: Params, buffers: Params, x: Tensor, y: Tensor, steps: int,
                 keep_each: bool) -> list[Params]:  # fmt: skip
        """The weights after each step (``keep_each``), else after the last alone: a step's
        weights are assembled only where a loss reads them."""
        fast = {n: params[n] for n in self.adapted}
        frozen = {n: p for n, p in params.items() if n not in fast}
        steps_of = _Steps(self.modulation, self.mixed_order)
        each: list[Params] = []
        for index in range(steps):
            if self.first_order:
                # The inner gradient is a constant to the outer loop: compute it on detached
                # weights so that no graph is built for it at all.
                grads = grad(self._support_loss)(_detached(fast), _detached(frozen), buffers, x, y)
            else:
                grads = grad(self._support_loss)(fast, frozen, buffers, x, y)
            fast = steps_of.take(fast, grads, index)
            if keep_each:
                each.append({**frozen, **steps_of.result(fast)})
        return each or [{**frozen, **steps_of.result(fast)}]

    def query_loss(
        self,
        params: Params,
        buffers: Params,
        sx: Tensor,
        sy: Tensor,
        qx: Tensor,
        qy: Tensor,
        steps: int,
        every_step: bool = False,
    ) -> Tensor:
        """Query loss of one task after adaptation (the MAML meta-objective); with
        ``every_step``, the losses after each step ``[steps]``, from the same pass."""
        if not every_step:
            adapted = self.adapt(params, buffers, sx, sy, steps)
            return task_loss(self.forward(adapted, buffers, qx), qy, self.loss)
        each = self.adapt_each_step(params, buffers, sx, sy, steps)
        return torch.stack([task_loss(self.forward(a, buffers, qx), qy, self.loss) for a in each])

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
        with intra_op_threads(1 if self._batches_by_hand(buffers) else None):
            yield

    def _adapt_all(self, params: Params, sx: Tensor, sy: Tensor, steps: int) -> Params:
        """Every task's adapted weights ``[T, ...]`` by ``steps`` modulated steps."""
        return self._adapt_all_each_step(params, sx, sy, steps, keep_each=False)[-1]

    def _adapt_all_each_step(
        self, params: Params, sx: Tensor, sy: Tensor, steps: int, keep_each: bool = True
    ) -> list[Params]:
        """Every task's weights ``[T, ...]`` after each step (before any when none is taken;
        after the last alone unless ``keep_each``)."""
        tasks = sx.shape[0]
        per_task = {n: p.expand(tasks, *p.shape) for n, p in params.items()}
        fast = {n: per_task[n] for n in self.adapted}
        frozen = {n: w for n, w in per_task.items() if n not in fast}
        second_order = not self.first_order and any(p.requires_grad for p in params.values())
        steps_of = _Steps(self.modulation, self.mixed_order)
        taken = steps if fast else 0  # nothing adapted (no_adaptation): no steps
        each: list[Params] = []
        for index in range(taken):
            # Plain differentiable operations: the graph is kept for the second order (in
            # grad mode), not built at all for the first.
            with nullcontext() if second_order else torch.no_grad():
                every = self.network.batched_gradients({**frozen, **fast}, sx, sy, self.loss)
            fast = steps_of.take(fast, {n: every[n] for n in fast}, index)
            if keep_each:
                each.append({**frozen, **steps_of.result(fast)})
        return each or [{**frozen, **steps_of.result(fast)}]

    def _over_tasks(self, fn, params: Params, buffers: Params, tasks: tuple, steps: int):
        if self.vectorize:
            in_dims = (None, None, *([0] * len(tasks)), None)
            return vmap(fn, in_dims=in_dims)(params, buffers, *tasks, steps)
        return torch.stack([fn(params, buffers, *task, steps) for task in zip(*tasks, strict=True)])

    def batched_query_loss(self, params: Params, buffers: Params, batch: TaskBatch, steps: int,
                           every_step: bool = False):  # fmt: skip
        """Per-task query losses ``[T]`` over the task batch; with ``every_step``, after each
        step ``[T, steps]`` (MAML++'s multi-step loss), from one pass."""
        if self._batches_by_hand(buffers):
            sx, sy, qx, qy = batch.support_x, batch.support_y, batch.query_x, batch.query_y
            if not every_step:
                adapted = self._adapt_all(params, sx, sy, steps)
                return per_task_loss(self.network.batched_forward(adapted, qx), qy, self.loss)
            each = self._adapt_all_each_step(params, sx, sy, steps)
            return torch.stack([per_task_loss(self.network.batched_forward(a, qx), qy, self.loss)
                                for a in each], dim=1)  # fmt: skip
        loss = partial(self.query_loss, every_step=every_step) if every_step else self.query_loss
        return self._over_tasks(loss, params, buffers, tuple(batch), steps)

    def batched_predict(
        self, params: Params, buffers: Params, sx: Tensor, sy: Tensor, qx: Tensor, steps: int
    ) -> Tensor:
        """Query predictions ``[T, Q, out]`` after adapting to each task's support set."""
        if self._batches_by_hand(buffers):
            return self.network.batched_forward(self._adapt_all(params, sx, sy, steps), qx)
        return self._over_tasks(self.predict, params, buffers, (sx, sy, qx), steps)
