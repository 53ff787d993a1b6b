"""Statistics over seeds and paired comparisons, in plain Python (no torch, no scipy).

The leaderboard reports, for every row: n (seeds), the mean, the sample standard deviation
(ddof 1) and the 95% confidence interval of the mean by Student's t with n - 1 degrees of
freedom. Comparisons between two methods are paired over the seeds both have (a paired
t-test). A single seed has no spread: std and CI are ``None``, never 0.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Confidence level of every interval the suite prints.
CONFIDENCE = 0.95


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (Lentz's method)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.lru_cache(maxsize=1024)  # a board asks for the same few (p, df) many times
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on the CDF)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1) (got {p})")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-13 * max(1.0, high):
            break
    return 0.5 * (low + high)


@dataclass(frozen=True)
class SeedStats:
    """Summary of one metric over the seeds of a leaderboard row."""

    n: int
    mean: float | None
    std: float | None  # sample standard deviation over seeds (ddof 1); None for n < 2
    ci95: float | None  # half-width of the 95% t-interval of the mean; None for n < 2

    @property
    def ci_low(self) -> float | None:
        return None if self.ci95 is None or self.mean is None else self.mean - self.ci95

    @property
    def ci_high(self) -> float | None:
        return None if self.ci95 is None or self.mean is None else self.mean + self.ci95


def seed_stats(values: Sequence[float]) -> SeedStats:
    """n, mean, std (ddof 1) and the Student-t 95% CI half-width of ``values``.

    A non-finite value (a diverged run) makes the mean ``None``: no number is invented.
    """
    n = len(values)
    if n == 0 or not all(math.isfinite(v) for v in values):
        return SeedStats(n, None, None, None)
    mean = math.fsum(values) / n
    if n < 2:
        return SeedStats(n, mean, None, None)
    std, half = _spread(values, mean)
    return SeedStats(n, mean, std, half)


def _spread(values: Sequence[float], mean: float) -> tuple[float, float]:
    """Sample standard deviation (ddof 1) and the Student-t CI half-width of the mean."""
    n = len(values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return std, t_quantile(0.5 + CONFIDENCE / 2, n - 1) * std / math.sqrt(n)


@dataclass(frozen=True)
class PairedTest:
    """A paired t-test of ``a - b`` over the seeds both rows have."""

    n: int
    difference: float | None  # mean of a - b
    ci95: float | None  # half-width of the t-interval of the mean difference
    p_value: float | None  # two-sided; None when fewer than 2 pairs

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < 1.0 - CONFIDENCE


def paired_t_test(a: Sequence[float], b: Sequence[float]) -> PairedTest:
    """Two-sided paired t-test of the mean of ``a[i] - b[i]`` against 0."""
    if len(a) != len(b):
        raise ValueError("paired samples must have equal lengths")
    summary = seed_stats([x - y for x, y in zip(a, b, strict=True)])
    n, mean, std, half = summary.n, summary.mean, summary.std, summary.ci95
    if mean is None or std is None or half is None:
        return PairedTest(n, mean, None, None)
    if std == 0.0:
        return PairedTest(n, mean, 0.0, 1.0 if mean == 0.0 else 0.0)
    t = mean / (std / math.sqrt(n))
    p = 2.0 * (1.0 - t_cdf(abs(t), n - 1))
    return PairedTest(n, mean, half, min(1.0, max(0.0, p)))
