"""Per-task losses shared by inner loops, outer loops and the protocols' scoring."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from mesabench_datasets.tasks import UNSCORED, LossKind


def task_loss(prediction: Tensor, target: Tensor, kind: LossKind) -> Tensor:
    """Mean loss over the points of one task (no task dimension); shapes must agree."""
    _check_shapes(prediction, target, kind)
    if kind == "mse":
        return F.mse_loss(prediction, target)
    if kind == "half_mse":
        return 0.5 * F.mse_loss(prediction, target)
    if kind == "half_sse":
        return 0.5 * (prediction - target).pow(2).sum(-1).mean()
    if kind == "cross_entropy":
        return F.cross_entropy(prediction, target)
    raise ValueError(f"unknown loss kind {kind!r}")


def per_task_loss(prediction: Tensor, target: Tensor, kind: LossKind) -> Tensor:
    """Loss of each task in a batch: ``prediction [T, Q, out]`` -> ``[T]``. Shapes must
    agree exactly (a loss never broadcasts a prediction over its targets)."""
    _check_shapes(prediction, target, kind)
    if kind == "cross_entropy":
        logits = prediction.flatten(0, 1)
        losses = F.cross_entropy(logits, target.flatten(), reduction="none").view(target.shape)
        scored = _scored(target)
        return losses.sum(dim=1) / scored.sum(dim=1) if scored is not None else losses.mean(1)
    if kind == "half_sse":  # 0.5 ||error||^2 per point, averaged over points
        return 0.5 * (prediction - target).pow(2).sum(-1).flatten(1).mean(dim=1)
    squared = (prediction - target).pow(2).flatten(1).mean(dim=1)
    return 0.5 * squared if kind == "half_mse" else squared


def _check_shapes(prediction: Tensor, target: Tensor, kind: LossKind) -> None:
    expected = (*target.shape, prediction.shape[-1]) if kind == "cross_entropy" else target.shape
    if prediction.shape != expected:
        raise ValueError(f"a {kind} loss needs predictions of shape {list(expected)} for "
                         f"targets {list(target.shape)}, got {list(prediction.shape)}")  # fmt: skip


def per_task_loss_gradient(prediction: Tensor, target: Tensor, kind: LossKind) -> Tensor:
    """``d sum_t per_task_loss_t / d prediction`` for ``prediction [T, N, out]``, in closed
    form (differentiable, so a meta-gradient can flow through it)."""
    points = prediction.shape[1]
    if kind == "cross_entropy":
        onehot = F.one_hot(target, prediction.shape[-1]).to(prediction.dtype)
        return (prediction.softmax(dim=-1) - onehot) / points
    error = prediction - target
    if kind == "half_sse":
        return error / points
    scale = 2.0 if kind == "mse" else 1.0  # half_mse
    return error * (scale / (points * prediction.shape[-1]))


def per_task_accuracy(prediction: Tensor, target: Tensor) -> Tensor:
    """Fraction of correct queries per task: ``[T, Q, classes]`` -> ``[T]`` (over the scored
    queries, where some targets are :data:`UNSCORED`)."""
    correct = (prediction.argmax(dim=-1) == target).float()
    scored = _scored(target)
    return correct.sum(dim=1) / scored.sum(dim=1) if scored is not None else correct.mean(1)


def _scored(target: Tensor) -> Tensor | None:
    """Which targets are scored, where some are not (None: all are)."""
    scored = target != UNSCORED
    return None if bool(scored.all()) else scored


def is_classification(kind: LossKind) -> bool:
    return kind == "cross_entropy"


__all__ = [
    "task_loss",
    "per_task_loss",
    "per_task_loss_gradient",
    "per_task_accuracy",
    "is_classification",
]
