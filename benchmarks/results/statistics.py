"""Statistics over seeds and paired comparisons (Student's t in closed form for whole
degrees of freedom, else from scipy.special).

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


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if _whole(df):
        return 0.5 + math.copysign(_two_sided(abs(t), int(df)), t) / 2
    from scipy.special import stdtr  # scipy.special alone: a third of scipy.stats' import

    return float(stdtr(df, t))


@functools.lru_cache(maxsize=1024)  # a board asks for the same few (p, df) many times
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1) (got {p})")
    if not _whole(df):
        from scipy.special import stdtrit

        return float(stdtrit(df, p))
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    # P(|T| <= t) = 2p - 1, solved by bisection on the closed form (monotone in t) to the
    # last bit of a float: ~100 halvings, once per (p, df) thanks to the cache.
    target, low, high = 2.0 * p - 1.0, 0.0, 1.0
    while _two_sided(high, int(df)) < target:
        high *= 2.0
    while True:
        middle = (low + high) / 2
        if middle in (low, high):
            return middle
        if _two_sided(middle, int(df)) < target:
            low = middle
        else:
            high = middle


def _whole(df: float) -> bool:
    return float(df).is_integer() and 1 <= df <= 10_000


def _two_sided(t: float, df: int) -> float:
    """P(|T| <= t) for t >= 0 and whole ``df``: the finite series of Abramowitz & Stegun
    26.7.3-4 in theta = atan(t / sqrt(df)). Written here because the seeds' degrees of
    freedom are whole, and importing scipy.special (~0.3 s) is most of a 10,000-row board's
    statistics otherwise; the tests hold it to scipy's ``stdtr`` / ``stdtrit``."""
    theta = math.atan2(t, math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    term, total = 1.0, 1.0
    if df % 2:  # odd: 2/pi * (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
        if df == 1:
            return 2.0 * theta / math.pi
        for k in range(1, (df - 1) // 2):
            term *= cos2 * (2 * k) / (2 * k + 1)
            total += term
        return 2.0 / math.pi * (theta + sin * math.cos(theta) * total)
    for k in range(1, df // 2):  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
        term *= cos2 * (2 * k - 1) / (2 * k)
        total += term
    return sin * total


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
