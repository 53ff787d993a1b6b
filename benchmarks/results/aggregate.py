"""Aggregates across benchmarks, as rliable defines them (Agarwal et al., NeurIPS 2021).

Every run's score is normalised by its benchmark's anchors (``catalog.anchors``): 0 at the
no-adaptation baseline, 1 at the ideal. Per method, over all its runs on all the benchmarks:

- the **interquartile mean** (IQM: the mean of the middle 50% of scores, scipy's
  ``trim_mean`` at 25%, rliable's definition) and the **mean**;
- **95% stratified-bootstrap intervals** of both: seeds are resampled with replacement
  within each benchmark (the benchmarks themselves are fixed), percentile intervals;
- the **probability of improvement** of each method over each other, P(X > Y): on each
  benchmark the Mann-Whitney U statistic over the two methods' seeds divided by their
  product (ties count half), averaged over the benchmarks, with its bootstrap interval
  (each method's seeds resampled independently within each benchmark);
- **performance profiles**: the fraction of runs whose normalised score exceeds tau, each
  benchmark weighing the same, for a grid of tau, with bootstrap bands.

The bootstrap is written here because rliable pins arch < 8 (it cannot be installed beside
current packages) and scipy's ``bootstrap`` does not stratify; the statistics it resamples
are scipy's or closed forms, and the tests check every number against scipy or by hand.
Benchmarks may have different numbers of seeds (rliable requires equal ones; with equal
ones the two agree). The bootstrap's generator is seeded: the same store gives the same
intervals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

#: Bootstrap resamples per interval, and the generator's seed.
REPS = 2000
SEED = 0
#: Where the performance profile is evaluated (normalised scores).
TAUS = tuple(float(t) for t in np.linspace(0.0, 1.0, 101))
#: The left end of the figure's score axis (estimates past it are marked at the edge).
FLOOR = -0.5

#: benchmark -> the normalised scores of one method's runs (one per seed).
Scores = Mapping[str, np.ndarray]


def iqm(scores: Scores) -> float:
    """The interquartile mean of all runs' scores, pooled over benchmarks."""
    return float(stats.trim_mean(np.concatenate([np.asarray(v) for v in scores.values()]), 0.25))


def mean(scores: Scores) -> float:
    return float(np.mean(np.concatenate([np.asarray(v) for v in scores.values()])))


def probability_of_improvement(x: Scores, y: Scores) -> float:
    """P(X > Y) + P(X = Y) / 2 per benchmark, averaged over the benchmarks both have."""
    shared = sorted(set(x) & set(y))
    return float(np.mean([_pairwise_wins(np.asarray(x[b]), np.asarray(y[b])) for b in shared]))


def _pairwise_wins(a: np.ndarray, b: np.ndarray) -> float:
    # The Mann-Whitney U statistic of a against b over n * m (the test checks it is scipy's).
    greater = (a[:, None] > b[None, :]).mean()
    return float(greater + 0.5 * (a[:, None] == b[None, :]).mean())


def profile(scores: Scores, taus: Sequence[float] = TAUS) -> np.ndarray:
    """For each tau, the fraction of runs scoring above it, each benchmark weighing the same."""
    grid = np.asarray(taus)[:, None]
    return np.mean([(np.asarray(v)[None, :] > grid).mean(axis=1) for v in scores.values()],
                   axis=0)  # fmt: skip


def _resample(scores: Scores, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One stratified resample: each benchmark's seeds drawn with replacement, on their own."""
    return {b: np.asarray(v)[rng.integers(0, len(v), len(v))] for b, v in scores.items()}


def bootstrap_interval(
    statistic: Callable[..., float | np.ndarray], *samples: Scores, reps: int = REPS,
    seed: int = SEED,
) -> tuple[np.ndarray, np.ndarray]:
    """The 95% percentile interval of ``statistic(*samples)`` under the stratified bootstrap
    (each sample resampled independently within each benchmark)."""
    rng = np.random.default_rng(seed)
    draws = np.array([statistic(*(_resample(s, rng) for s in samples)) for _ in range(reps)])
    return np.percentile(draws, 2.5, axis=0), np.percentile(draws, 97.5, axis=0)


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float


@dataclass
class MethodAggregate:
    method: str
    seeds: dict[str, int]  # benchmark -> runs
    iqm: Estimate
    mean: Estimate
    profile: np.ndarray
    profile_low: np.ndarray
    profile_high: np.ndarray


@dataclass
class Aggregate:
    """An aggregate over ``benchmarks`` of the methods that ran on every one of them."""

    benchmarks: list[str]
    methods: list[MethodAggregate]
    #: (X, Y) -> P(X > Y) with its interval.
    improvement: dict[tuple[str, str], Estimate] = field(default_factory=dict)
    #: Methods left out, with the benchmarks they have no score on.
    missing: dict[str, list[str]] = field(default_factory=dict)
    #: Why a method has no score on a benchmark where it has runs (method -> benchmark ->
    #: reason); elsewhere in ``missing``: no runs.
    reasons: dict[str, dict[str, str]] = field(default_factory=dict)
    taus: tuple[float, ...] = TAUS
    reps: int = REPS
    #: Runs that came from a bundle (and what ``verify`` found of them): method -> benchmark
    #: -> ``imported: 2 of 3 runs, from lab.mesabundle; ...``, as boards mark them.
    imported: dict[str, dict[str, str]] = field(default_factory=dict)


def aggregate(scores: Mapping[str, Scores], benchmarks: Sequence[str],
              reps: int = REPS) -> Aggregate:  # fmt: skip
    """Every statistic of the module for ``scores`` (method -> benchmark -> scores)."""
    complete = {m: s for m, s in scores.items() if all(len(s.get(b, ())) for b in benchmarks)}
    missing = {m: [b for b in benchmarks if not len(s.get(b, ()))]
               for m, s in scores.items() if m not in complete}  # fmt: skip
    rows = []
    for method, own in sorted(complete.items()):
        own = {b: np.asarray(own[b], dtype=float) for b in benchmarks}
        (iqm_lo, mean_lo, *prof_lo), (iqm_hi, mean_hi, *prof_hi) = bootstrap_interval(
            lambda s: np.array([iqm(s), mean(s), *profile(s)]), own, reps=reps)  # fmt: skip
        rows.append(MethodAggregate(
            method, {b: len(own[b]) for b in benchmarks},
            Estimate(iqm(own), float(iqm_lo), float(iqm_hi)),
            Estimate(mean(own), float(mean_lo), float(mean_hi)),
            profile(own), np.asarray(prof_lo), np.asarray(prof_hi),
        ))  # fmt: skip
    improvement = {}
    for x in rows:
        for y in rows:
            if x.method == y.method:
                continue
            sx, sy = complete[x.method], complete[y.method]
            low, high = bootstrap_interval(probability_of_improvement, sx, sy, reps=reps)
            improvement[x.method, y.method] = Estimate(
                probability_of_improvement(sx, sy), float(low), float(high))  # fmt: skip
    return Aggregate(list(benchmarks), rows, improvement, missing, reps=reps)


# -- from the store ---------------------------------------------------------------------------
def _at_task_settings(run, settings: Mapping[str, str]) -> bool:
    # A run recorded before a task field existed holds that field's default.
    return all(run.params.get(key, value) == value for key, value in settings.items())


def aggregate_from_store(reader, benchmarks: Sequence[str], run_filter=None,
                         reps: int = REPS) -> tuple[Aggregate, dict[str, str]]:  # fmt: skip
    """The aggregate of the store's FINISHED runs over ``benchmarks``, each method's one
    configuration per benchmark at the benchmark's own task settings; and what each
    benchmark's scores were normalised by (benchmark -> one line)."""
    from benchmarks.catalog.anchors import anchors_for, task_settings
    from benchmarks.results.board import LeaderboardError, imported_text, other_setting_text
    from benchmarks.results.leaderboards import build_leaderboard, read_runs

    scores: dict[str, dict[str, np.ndarray]] = {}
    anchors_text: dict[str, str] = {}
    reasons: dict[str, dict[str, str]] = {}
    imported: dict[str, dict[str, str]] = {}
    for benchmark in benchmarks:
        anchors = anchors_for(benchmark)
        if anchors is None:
            raise LeaderboardError(
                f"--aggregate: {benchmark} declares no score anchors (regression and "
                "few-shot classification benchmarks have them; a plugin declares "
                "score_anchors)")  # fmt: skip
        settings = task_settings(benchmark)
        experiment = reader.experiment_id(benchmark)
        records = [] if experiment is None else read_runs(reader, experiment)
        records = [r for r in records if _at_task_settings(r, settings) and not r.evaluation]
        board = build_leaderboard(records, benchmark, metric=anchors.metric, references=False,
                                  run_filter=run_filter)  # fmt: skip
        by_method: dict[str, list] = {}
        for row in board.rows:
            by_method.setdefault(row.method, []).append(row)
        for method, rows in by_method.items():
            if len(rows) > 1:
                configs = ", ".join(board.config_label(r) for r in rows)
                raise LeaderboardError(
                    f"--aggregate: {method} has {len(rows)} configurations on {benchmark} "
                    f"({configs}); keep one with --param or --tag")  # fmt: skip
            values = rows[0].by_seed(anchors.metric)
            if mark := imported_text(rows[0]):
                imported.setdefault(method, {})[benchmark] = mark
            scores.setdefault(method, {})[benchmark] = np.array(
                [anchors.normalise(values[s]) for s in sorted(values)])  # fmt: skip
        for row in board.unranked:
            reasons.setdefault(row.method, {})[benchmark] = "diverged"
        for row in board.elsewhere:  # runs the board does not rank: other protocol settings
            if row.method not in by_method:
                reasons.setdefault(row.method, {}).setdefault(
                    benchmark, f"runs at other settings: {other_setting_text(row.other_setting)}")
        anchors_text[benchmark] = (
            f"{anchors.metric}: 0 = {anchors.zero:.6g} ({anchors.zero_what}), "
            f"1 = {anchors.one:.6g} ({anchors.one_what})")  # fmt: skip
    result = aggregate(scores, benchmarks, reps=reps)
    pooled = {m.method for m in result.methods}
    result.imported = {m: marks for m, marks in imported.items() if m in pooled}
    for method, where in reasons.items():  # rows with no score to pool: said, not dropped
        if method not in pooled:
            result.missing[method] = [b for b in benchmarks if b not in scores.get(method, {})]
            result.reasons[method] = where
    return result, anchors_text


# -- rendering --------------------------------------------------------------------------------
def _estimate_text(e: Estimate) -> str:
    return f"{e.value:.3f} [{e.low:.3f}, {e.high:.3f}]"


def summary_rows(result: Aggregate) -> tuple[list[str], list[list[str]]]:
    """Per method: runs per benchmark, IQM and mean with their intervals (best IQM first)."""
    headers = ["method", "runs per benchmark", "IQM [95% CI, stratified bootstrap]",
               "mean [95% CI, stratified bootstrap]"]  # fmt: skip
    ordered = sorted(result.methods, key=lambda m: -m.iqm.value)
    rows = [[m.method, ", ".join(str(m.seeds[b]) for b in result.benchmarks),
             _estimate_text(m.iqm), _estimate_text(m.mean)] for m in ordered]  # fmt: skip
    return headers, rows


def improvement_rows(result: Aggregate) -> tuple[list[str], list[list[str]]]:
    headers = ["X", "Y", "P(X > Y) [95% CI, stratified bootstrap]"]
    order = [m.method for m in sorted(result.methods, key=lambda m: -m.iqm.value)]
    rows = [[x, y, _estimate_text(result.improvement[x, y])]
            for i, x in enumerate(order) for y in order[i + 1:]]  # fmt: skip
    return headers, rows


def notes(result: Aggregate, anchors_text: Mapping[str, str]) -> list[str]:
    lines = [f"Normalised per benchmark, {b}: {anchors_text[b]}." for b in result.benchmarks]
    lines.append(f"Intervals: {result.reps} stratified-bootstrap resamples (seeds within each "
                 "benchmark), percentile; runs at each benchmark's own task settings only.")
    for method, marks in sorted(result.imported.items()):
        lines.append(f"From bundles: {method} ("
                     + "; ".join(f"{b}: {marks[b]}" for b in sorted(marks)) + ").")
    for method, where in sorted(result.missing.items()):
        why = result.reasons.get(method, {})
        lines.append(f"Left out: {method} ("
                     + "; ".join(f"{b}: {why.get(b, 'no runs')}" for b in where) + ").")
    return lines


def as_markdown(result: Aggregate, anchors_text: Mapping[str, str]) -> str:
    text = [f"Aggregate over {', '.join(result.benchmarks)}", ""]
    for headers, rows in (summary_rows(result), improvement_rows(result)):
        text += ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        text += ["| " + " | ".join(row) + " |" for row in rows] + [""]
    return "\n".join(text + [f"- {line}" for line in notes(result, anchors_text)]) + "\n"


def as_json_data(result: Aggregate, anchors_text: Mapping[str, str]) -> dict:
    def est(e: Estimate) -> dict:
        return {"value": e.value, "ci95_low": e.low, "ci95_high": e.high}

    return {
        "benchmarks": result.benchmarks,
        "anchors": dict(anchors_text),
        "bootstrap": {"kind": "stratified over seeds within benchmarks", "reps": result.reps,
                      "interval": "percentile 95%"},
        "methods": [{"method": m.method, "runs": m.seeds, "iqm": est(m.iqm),
                     "mean": est(m.mean), "imported": result.imported.get(m.method, {}),
                     "profile": {"tau": list(result.taus), "fraction": m.profile.tolist(),
                                 "ci95_low": m.profile_low.tolist(),
                                 "ci95_high": m.profile_high.tolist()}}
                    for m in result.methods],
        "probability_of_improvement": [
            {"x": x, "y": y, **est(e)} for (x, y), e in result.improvement.items()],
        "left_out": result.missing,
    }  # fmt: skip


def figure(result: Aggregate):
    """IQM and mean with their intervals per method, and the performance profiles with
    their bootstrap bands; None without methods."""
    from benchmarks.results.report_figures import FONT_SIZE, Figure, plt

    if not result.methods:
        return None
    ordered = sorted(result.methods, key=lambda m: m.iqm.value)
    with plt.rc_context({"font.size": FONT_SIZE}):
        fig = Figure(figsize=(12.0, 0.5 * len(ordered) + 3.2))
        left, right = fig.subplots(1, 2)
        # Scores far below the baseline (a diverging method) would squash the others: the
        # axis stops at FLOOR, and an estimate past it is drawn at the edge with its value.
        floor = max(min(0.0, *(min(m.iqm.low, m.mean.low) for m in ordered)), FLOOR)
        for offset, (name, pick) in enumerate((("IQM", lambda m: m.iqm),
                                               ("mean", lambda m: m.mean))):  # fmt: skip
            y = np.arange(len(ordered)) + (offset - 0.5) * 0.3
            est = [pick(m) for m in ordered]
            shown = [e for e in est if e.low >= floor]
            (line, *_) = left.errorbar(
                [e.value for e in shown], [yi for yi, e in zip(y, est, strict=True) if e in shown],
                xerr=[[e.value - e.low for e in shown], [e.high - e.value for e in shown]],
                fmt="o", capsize=3, label=name)  # fmt: skip
            for yi, e in zip(y, est, strict=True):
                if e not in shown:
                    left.plot([floor], [yi], marker="<", color=line.get_color())
                    left.annotate(f"{e.value:.3g} [{e.low:.3g}, {e.high:.3g}]", (floor, yi),
                                  textcoords="offset points", xytext=(8, -3),
                                  fontsize=FONT_SIZE - 2, color=line.get_color())  # fmt: skip
        left.set_xlim(floor - 0.05, 1.05)
        left.set_yticks(np.arange(len(ordered)), [m.method for m in ordered])
        left.set_xlabel("normalised score (0: no adaptation, 1: ideal)")
        left.legend(fontsize=FONT_SIZE - 1)
        left.set_title("IQM and mean, 95% stratified-bootstrap CI")
        taus = np.asarray(result.taus)
        for m in reversed(ordered):
            (line,) = right.plot(taus, m.profile, label=m.method)
            right.fill_between(taus, m.profile_low, m.profile_high, alpha=0.2,
                               color=line.get_color())  # fmt: skip
        right.set_xlabel("normalised score tau")
        right.set_ylabel("fraction of runs with score > tau")
        right.set_title("performance profiles")
        right.legend(fontsize=FONT_SIZE - 1)
        fig.suptitle(f"aggregate over {', '.join(result.benchmarks)}", fontsize=FONT_SIZE + 1)
        fig.tight_layout()
    return fig
