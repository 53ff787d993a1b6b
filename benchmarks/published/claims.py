"""Published tables and claims as lines the suite can run and judge.

A :class:`Table` is a list of :class:`Claim` lines. Each line is one configuration of one
method on one benchmark (run over the table's seeds as an ordinary sweep, so cells already
FINISHED in the store are reused) and one metric of it, held to a target: a number (from
the paper's text or table, read off one of its figures, taken from its public code, or
derived by the suite), or another line's value (a relation such as "GD-SSM equals one GD
step" or "sparse-C-MAML is at least C-MAML"). A line with neither is a basis for other
lines. Every target says where it comes from (:data:`Provenance`, and ``cite``: the table,
figure or section).

The verdict of a line compares ``ours - target`` with the line's band, per seed and paired
(a relation pairs the two lines' runs over the seeds both have; the same seed draws the
same test tasks for every method of a benchmark), by the 95% Student-t interval of the mean
difference (two one-sided tests at 2.5% each, the equivalence test):

- **reproduced**: the whole interval lies inside the band;
- **not reproduced**: the whole interval lies outside it, or a run of the line diverged
  (its metric is not finite);
- **inconclusive**: the interval straddles an edge of the band, or there is no interval
  (one seed). The line says how many seeds would settle it: the smallest n whose interval,
  at the observed mean and standard deviation, would lie wholly inside or wholly outside
  the band (a plug-in estimate, not a power calculation; none when the mean sits on the
  edge or one seed gives no spread);
- **not run**: no FINISHED run of the line (or of the line it is compared with).

Presets set the budget: ``quick`` (minutes on a laptop, a smoke check: verdicts at this
budget say little about the paper), ``cpu`` (the budget docs/RESULTS.md reports on a 2-core
CPU; each table's note says what it shrinks) and ``paper`` (the published settings).
``cost_s`` gives the wall seconds of one run at a preset on the 2-core CPU, measured or
extrapolated from a measured run (absent: unknown).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from benchmarks.results.statistics import CONFIDENCE, SeedStats, seed_stats, t_quantile

if TYPE_CHECKING:  # the figure's types only (published.figures imports no claims)
    from benchmarks.published.figures import TableFigure

PRESETS = ("quick", "cpu", "paper")
Check = Literal["within", "at_least", "at_most"]
Verdict = Literal["reproduced", "inconclusive", "not reproduced", "not run", "basis"]
#: Where a target comes from: the paper's text or a table (``published``), read off one of
#: its figures (``figure``), its public code or notebooks (``public code``), or computed by
#: the suite (``derived``: a closed form or a simulation, named in ``cite``).
Provenance = Literal["published", "figure", "public code", "derived"]


@dataclass(frozen=True)
class Claim:
    """One line of a table: a configuration's metric held to a target."""

    label: str
    benchmark: str
    method: str
    metric: str
    #: Settings of every preset (``--set`` keys), then each preset's own on top.
    settings: Mapping[str, str] = field(default_factory=dict)
    budget: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: The benchmark's own preset (``--preset``) to use at each of ours, if any.
    benchmark_preset: Mapping[str, str] = field(default_factory=dict)
    #: Another benchmark at some presets: the paper's dataset at ``paper`` where the CPU
    #: presets run a labelled substitute (``benchmark``) that this machine has.
    benchmark_at: Mapping[str, str] = field(default_factory=dict)
    #: The number the line is held to (a fraction for accuracies, as ours), or None.
    target: float | None = None
    #: The presets whose benchmark ``target`` was published for (empty: all). At the others
    #: the line runs a substitute the number says nothing of: it is measured (a basis),
    #: not judged against it.
    target_presets: tuple[str, ...] = ()
    #: Or the label of another line of the table, whose value is the target.
    versus: str | None = None
    check: Check = "within"
    #: The band's width: a fraction of the target (``relative``) or in the metric's units.
    #: For ``at_least`` / ``at_most`` a negative width is a margin to clear: ``at_most`` with
    #: -0.05 asks for at least 0.05 below the target.
    tolerance: float = 0.0
    relative: bool = False
    #: Where the target (or the relation, for ``versus``) comes from, and where exactly.
    provenance: Provenance = "published"
    cite: str = ""
    #: Wall seconds of one run on the 2-core CPU (one core each), per preset: measured, or
    #: extrapolated linearly in iterations from a measured run of the same line.
    cost_s: Mapping[str, float] = field(default_factory=dict)

    def benchmark_for(self, preset: str) -> str:
        return self.benchmark_at.get(preset, self.benchmark)

    def at(self, preset: str) -> Claim:
        """The line as ``preset`` judges it: without its target where that target was
        published for another benchmark than the preset runs."""
        if self.target_presets and preset not in self.target_presets:
            return dataclasses.replace(self, target=None)
        return self

    def overrides(self, preset: str) -> dict[str, str]:
        return {**self.settings, **self.budget.get(preset, {})}

    def band_text(self) -> str:
        if self.target is None and self.versus is None:
            return "-"
        size = abs(self.tolerance)
        width = f"{size * 100:g}%" if self.relative else f"{size:g}"
        if self.check == "within":
            return f"within ±{width}"
        # A negative tolerance is a margin the relation must clear ("above it by 2.5").
        slack = self.tolerance > 0
        if self.check == "at_least":
            sign = "-" if slack else "+"
            return f"at least target {sign} {width}" if self.tolerance else "at least target"
        sign = "+" if slack else "-"
        return f"at most target {sign} {width}" if self.tolerance else "at most target"

    def source_text(self) -> str:
        """``published (ICML'23 sec. 3)``: where the target or relation comes from."""
        if self.target is None and self.versus is None:
            return "-"
        return f"{self.provenance} ({self.cite})" if self.cite else self.provenance


@dataclass(frozen=True)
class Table:
    """A published table or claim, as lines the suite can run and judge."""

    name: str
    title: str
    source: str
    claims: tuple[Claim, ...]
    seeds: str = "0-2"
    note: str = ""
    #: The paper's figure, drawn from the store (``report``, ``reproduce --figure``).
    figure: TableFigure | None = None

    def runs_per_seed(self, preset: str) -> int:
        """Distinct runs per seed (lines that read other metrics of one run share it)."""
        return len({run_key(c, preset) for c in self.claims})

    def cost_s(self, preset: str, seeds: int,
               measured: Mapping[tuple, float] | None = None) -> tuple[float, int]:  # fmt: skip
        """Wall seconds of the table's runs whose cost is known (one core each, all seeds),
        and the number of runs whose cost is not. ``measured`` (by :func:`run_key`) takes
        the place of a line's ``cost_s``: the shipped runs' own times."""
        measured = measured or {}
        per_run: dict[tuple, float | None] = {}
        for claim in self.claims:
            key = run_key(claim, preset)
            per_run[key] = measured.get(key, claim.cost_s.get(preset))
        known = [cost for cost in per_run.values() if cost is not None]
        return seeds * math.fsum(known), seeds * (len(per_run) - len(known))


def run_key(claim: Claim, preset: str) -> tuple:
    """What makes two lines read the same runs."""
    return (claim.benchmark_for(preset), claim.method,
            tuple(sorted(claim.overrides(preset).items())),
            claim.benchmark_preset.get(preset))  # fmt: skip


# -- judging --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Judged:
    """A line's numbers and verdict."""

    claim: Claim
    ours: SeedStats
    target: float | None  # the line's number or the other line's mean
    difference: SeedStats  # of ours - target, paired per seed
    verdict: Verdict
    #: For an inconclusive line: the seeds that would settle it (see the module's text).
    settle_seeds: int | None = None

    def verdict_text(self) -> str:
        """The verdict as tables print it: an inconclusive line with its seeds to settle."""
        if self.verdict != "inconclusive":
            return self.verdict
        if self.difference.n < 2:
            return "inconclusive (1 seed: no interval)"
        if self.settle_seeds is None:
            return f"inconclusive (no n up to {MAX_SEEDS:,} settles it)"
        return f"inconclusive (~{self.settle_seeds} seeds would settle it)"


def band_limits(claim: Claim, target: float) -> tuple[float, float]:
    """The accepted interval of ``ours - target``."""
    width = claim.tolerance * abs(target) if claim.relative else claim.tolerance
    if claim.check == "within":
        return -width, width
    if claim.check == "at_least":
        return -width, math.inf
    return -math.inf, width


def judge(
    claim: Claim, ours: Mapping[int, float], versus: Mapping[int, float] | None = None
) -> Judged:
    """The verdict of ``claim`` from its values by seed (and the compared line's, if any)."""
    stats = seed_stats(list(ours.values()))
    if claim.target is None and claim.versus is None:
        return Judged(claim, stats, None, stats, "basis" if stats.n else "not run")
    if any(not math.isfinite(v) for v in ours.values()):  # a run diverged: it ran, and missed
        target = claim.target if claim.versus is None else seed_stats(
            [v for v in (versus or {}).values() if math.isfinite(v)]).mean  # fmt: skip
        return Judged(claim, stats, target, seed_stats([]), "not reproduced")
    if claim.versus is not None:
        shared = sorted(set(ours) & set(versus or {}))
        differences = [ours[s] - versus[s] for s in shared]  # type: ignore[index]
        target = seed_stats([versus[s] for s in shared]).mean  # type: ignore[index]
    else:
        differences = [value - claim.target for value in ours.values()]  # type: ignore[operator]
        target = claim.target
    difference = seed_stats(differences)
    if difference.n == 0 or difference.mean is None or target is None:
        return Judged(claim, stats, target, difference, "not run")
    low, high = band_limits(claim, target)
    verdict = interval_verdict(difference, low, high)
    settle = (seeds_to_settle(difference.mean, difference.std, low, high)
              if verdict == "inconclusive" and difference.std is not None else None)  # fmt: skip
    return Judged(claim, stats, target, difference, verdict, settle)


def interval_verdict(difference: SeedStats, low: float, high: float) -> Verdict:
    """Reproduced when the mean difference's 95% interval lies inside ``[low, high]``, not
    reproduced when it lies wholly outside, inconclusive otherwise (and with one seed)."""
    if difference.n < 2 or difference.ci95 is None or difference.mean is None:
        return "inconclusive"
    lower, upper = difference.mean - difference.ci95, difference.mean + difference.ci95
    if low <= lower and upper <= high:
        return "reproduced"
    if upper < low or lower > high:
        return "not reproduced"
    return "inconclusive"


#: Beyond this many seeds a line is reported as not settled by any feasible number.
MAX_SEEDS = 10_000


def seeds_to_settle(mean: float, std: float, low: float, high: float) -> int | None:
    """The smallest n whose 95% Student-t half-width ``t(n-1) * std / sqrt(n)`` puts the
    interval around ``mean`` wholly inside ``[low, high]`` (mean inside) or wholly outside
    it (mean outside), the mean and std held at their observed values; None when no n up to
    :data:`MAX_SEEDS` does (a mean on an edge never settles)."""
    inside = low <= mean <= high
    room = min(mean - low, high - mean) if inside else max(low - mean, mean - high)
    if room <= 0:
        return None
    if std == 0:
        return 2

    def settles(n: int) -> bool:
        half = t_quantile(0.5 + CONFIDENCE / 2, n - 1) * std / math.sqrt(n)
        return half <= room if inside else half < room

    if not settles(MAX_SEEDS):
        return None
    lo, hi = 2, MAX_SEEDS  # the half-width falls with n: the first n that settles, by bisection
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if settles(mid) else (mid + 1, hi)
    return lo


def judge_table(table: Table, values: Mapping[str, Mapping[int, float]],
                preset: str | None = None) -> list[Judged]:  # fmt: skip
    """Every line's verdict, from each line's values by seed (keyed by label), each line
    as ``preset`` judges it (:meth:`Claim.at`)."""
    return [
        judge(claim if preset is None else claim.at(preset), values.get(claim.label, {}),
              values.get(claim.versus, {}) if claim.versus else None)
        for claim in table.claims
    ]  # fmt: skip
