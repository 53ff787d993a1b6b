"""Many paired comparisons on one board: Holm's adjustment of their p-values, and the seeds
a paired t-test would need to detect an observed difference.

Holm's step-down adjustment is four lines and written here (scipy has Benjamini-Hochberg,
not Holm; statsmodels, which has it, is a large dependency for four lines); the tests check
it against statsmodels. The power of a paired t-test needs the noncentral t distribution:
scipy's (a dependency of MLflow's already).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from benchmarks.results.statistics import seed_stats

#: The power a comparison should have (the conventional 80%), at the suite's 5% level.
POWER, ALPHA = 0.8, 0.05
#: Beyond this many seeds the answer is "more than" it: the difference is too small to chase.
MOST_SEEDS = 10_000


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values, in the order given (None stays None): the i-th
    smallest of m is multiplied by m - i + 1, then made non-decreasing, capped at 1."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m, running = len(tested), 0.0
    adjusted: list[float | None] = [None] * len(p_values)
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def seeds_for_power(differences: Sequence[float], power: float = POWER,
                    alpha: float = ALPHA) -> int | None:  # fmt: skip
    """The fewest pairs (seeds) for a two-sided paired t-test at ``alpha`` to detect the mean
    of ``differences`` with probability ``power``, taking their mean and standard deviation
    (ddof 1) as the truth. None when that is undefined (fewer than 2 pairs, no spread, or
    no difference); :data:`MOST_SEEDS` + 1 when more than that would be needed."""
    from scipy import stats

    summary = seed_stats(list(differences))
    if summary.n < 2 or not summary.std or not summary.mean:
        return None  # fewer than 2 pairs, no spread, or no difference
    effect = abs(summary.mean) / summary.std

    def achieved(k: int) -> float:
        critical = stats.t.ppf(1.0 - alpha / 2, k - 1)
        shift = effect * math.sqrt(k)
        return float(stats.nct.sf(critical, k - 1, shift) + stats.nct.cdf(-critical, k - 1, shift))

    low, high = 2, 2
    while achieved(high) < power:  # double, then bisect: power rises with k
        if high > MOST_SEEDS:
            return MOST_SEEDS + 1
        low, high = high, high * 2
    while low < high:
        middle = (low + high) // 2
        if achieved(middle) >= power:
            high = middle
        else:
            low = middle + 1
    return high
