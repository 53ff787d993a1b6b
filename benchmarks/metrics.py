"""Summary statistics used by every protocol and the leaderboard."""

from __future__ import annotations

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


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    t = torch.as_tensor(list(values), dtype=torch.float64)
    if t.numel() == 0:
        return math.nan, math.nan
    return t.mean().item(), (t.std(unbiased=True).item() if t.numel() > 1 else 0.0)
