"""Summary statistics of one run, used by the protocols (the leaderboard's statistics over
seeds are in :mod:`benchmarks.results.statistics`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch


def mean_ci95(values: torch.Tensor | Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of the normal-approximation 95% confidence interval.

    NaN for both if any value is not finite (a diverged task has no meaningful loss).
    """
    t = torch.as_tensor(values, dtype=torch.float64).flatten()
    if t.numel() == 0:
        return math.nan, math.nan
    if not torch.isfinite(t).all():
        return math.nan, math.nan
    if t.numel() == 1:
        return t.item(), 0.0
    return t.mean().item(), 1.96 * t.std(unbiased=True).item() / math.sqrt(t.numel())


def continual_metrics(
    matrix: torch.Tensor, initial: torch.Tensor | None = None
) -> dict[str, float]:
    """Scores of a continual run from its accuracy matrix.

    ``matrix[t, j]`` is the accuracy on task ``j`` after training on tasks ``0..t``;
    ``initial[j]`` the accuracy of the untrained learner on task ``j`` (for forward transfer).

    - ``ra``: retained accuracy, mean of the last row;
    - ``bti``: backward transfer and interference, ``mean_j (R[T-1, j] - R[j, j])`` over all
      ``T`` tasks (La-MAML's convention);
    - ``bwt``: the same over the first ``T - 1`` tasks (GEM's convention; 0 for one task);
    - ``la``: learning accuracy, ``mean_t R[t, t]``;
    - ``fwt``: forward transfer, ``mean_{j >= 1} (R[j-1, j] - initial[j])`` (GEM's).

    Entries outside those (a run with ``evaluate="metrics"``) may be NaN.
    """
    r = torch.as_tensor(matrix, dtype=torch.float64)
    if r.ndim != 2 or r.shape[0] != r.shape[1]:
        raise ValueError(f"accuracy matrix must be square [T, T], got {tuple(r.shape)}")
    tasks = r.shape[0]
    read = [r[-1], r.diagonal()] + ([r.diagonal(offset=1)] if initial is not None else [])
    if any(part.isnan().any() for part in read):  # only entries nobody scored are NaN
        raise ValueError("the accuracy matrix lacks an entry the metrics read "
                         "(R[t, t], R[t, t+1] or the last row)")
    diagonal = r.diagonal()
    forgetting = r[-1] - diagonal
    out = {
        "ra": r[-1].mean().item(),
        "bti": forgetting.mean().item(),
        "bwt": forgetting[:-1].mean().item() if tasks > 1 else 0.0,
        "la": diagonal.mean().item(),
    }
    if initial is not None and tasks > 1:
        b = torch.as_tensor(initial, dtype=torch.float64)
        out["fwt"] = (r.diagonal(offset=1) - b[1:]).mean().item()
    return out


def sparsity_rises(history: Sequence[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """How steadily each tensor's sparsity rose over training, at the points the protocol
    recorded it (a continual run: before the first task and after each): the share of
    consecutive points at which it did not fall, or 0 where it ended no higher than it began
    (flat is not rising). Keyed by tensor, and ``least``, the smallest (1 there: every
    tensor rose, never falling). A tensor that saturates (every gate off) counts as not
    falling, where a rank correlation would read its ties as disorder. Empty with fewer than
    three points."""
    if len(history) < 3:
        return {}
    tensors = sorted(set().union(*(per for _, per in history)))
    rises = {}
    for name in tensors:
        if not all(name in per for _, per in history):
            continue
        values = [per[name] for _, per in history]
        held = sum(b >= a for a, b in itertools.pairwise(values))
        rises[name] = held / (len(values) - 1) if values[-1] > values[0] else 0.0
    if rises:
        rises["least"] = min(rises.values())
    return rises


def sparsity_settling(passes: Sequence[dict[str, float]], epochs: int) -> dict[str, float]:
    """Whether sparsity settles within each task of a multi-pass stream (thesis figure 4.4):
    ``passes`` holds the sparsity (by tensor, and overall) before training and after every
    pass over a task's samples, ``epochs`` passes per task. Per key: the rise over each
    task's last pass as a share of the rise over its first (the first measured from where
    the task began), summed over tasks: near 0 where it settles within each task and rises
    when the next begins, about 1 where it rises at the same pace throughout. A key whose
    first passes did not rise is left out (nothing to settle). Empty for one pass per task
    or a stream with no sparsity recorded."""
    if epochs < 2 or len(passes) < 1 + epochs or (len(passes) - 1) % epochs:
        return {}
    tasks = (len(passes) - 1) // epochs
    settling = {}
    for key in passes[0]:
        first = sum(passes[t * epochs + 1][key] - passes[t * epochs][key] for t in range(tasks))
        last = sum(passes[(t + 1) * epochs][key] - passes[(t + 1) * epochs - 1][key]
                   for t in range(tasks))  # fmt: skip
        if first > 0:
            settling[key] = last / first
    return settling
