"""One differentiable inner loop for every gradient-based learner.

Built on ``torch.func.functional_call`` and ``torch.func.grad`` for a single task, then
vectorised over the task batch with ``torch.func.vmap``. Second-order by default; with
``first_order`` the inner gradients are detached, which leaves the outer gradient equal to
the query gradient at the adapted weights (plus, for learned modulations, the first-order
gradient through the step).
"""

from __future__ import annotations

from collections.abc import Collection

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from datasets.tasks import LossKind, TaskBatch
from methods.losses import task_loss
from methods.modulation import GradientModulation

Params = dict[str, Tensor]


def _detached(params: Params) -> Params:
    return {n: p.detach() for n, p in params.items()}


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
    ):
        self.network = network
        self.modulation = modulation
        self.loss = loss
        self.adapted = list(adapted)
        self.first_order = first_order
        # vmap over tasks, or a Python loop over the same single-task function. vmap wins for
        # small networks; on a CPU, per-task convolutions stay in cache and a loop is faster.
        self.vectorize = vectorize

    def forward(self, params: Params, buffers: Params, x: Tensor) -> Tensor:
        return functional_call(self.network, (params, buffers), (x,))

    def _support_loss(self, fast: Params, frozen: Params, buffers: Params, x: Tensor, y: Tensor):
        return task_loss(self.forward({**frozen, **fast}, buffers, x), y, self.loss)

    def adapt(self, params: Params, buffers: Params, x: Tensor, y: Tensor, steps: int) -> Params:
        """Parameters after ``steps`` modulated gradient steps on one task's support set."""
        fast = {n: params[n] for n in self.adapted}
        frozen = {n: p for n, p in params.items() if n not in fast}
        for _ in range(steps):
            if self.first_order:
                # The inner gradient is a constant to the outer loop: compute it on detached
                # weights so that no graph is built for it at all.
                grads = grad(self._support_loss)(_detached(fast), _detached(frozen), buffers, x, y)
            else:
                grads = grad(self._support_loss)(fast, frozen, buffers, x, y)
            fast = {n: fast[n] - self.modulation.step(n, grads[n]) for n in fast}
        return {**frozen, **fast}

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

    def _over_tasks(self, fn, params: Params, buffers: Params, tasks: tuple, steps: int):
        if self.vectorize:
            in_dims = (None, None, *([0] * len(tasks)), None)
            return vmap(fn, in_dims=in_dims)(params, buffers, *tasks, steps)
        return torch.stack([fn(params, buffers, *task, steps) for task in zip(*tasks, strict=True)])

    def batched_query_loss(self, params: Params, buffers: Params, batch: TaskBatch, steps: int):
        """Per-task query losses ``[T]`` over the task batch."""
        return self._over_tasks(self.query_loss, params, buffers, tuple(batch), steps)

    def batched_predict(
        self, params: Params, buffers: Params, sx: Tensor, sy: Tensor, qx: Tensor, steps: int
    ) -> Tensor:
        """Query predictions ``[T, Q, out]`` after adapting to each task's support set."""
        return self._over_tasks(self.predict, params, buffers, (sx, sy, qx), steps)
