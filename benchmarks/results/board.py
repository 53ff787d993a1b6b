"""What a leaderboard is: a run's record as a board reads it, a row (the runs of one
configuration, with statistics over seeds), the board (ranked rows, rows listed apart,
references, counts), and the filter that picks its runs. Built by
:mod:`benchmarks.results.leaderboards`."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from benchmarks.catalog.references import ReferenceRow
from benchmarks.planning.config import ConfigError
from benchmarks.results.statistics import PairedTest, SeedStats, seed_stats
from benchmarks.store.bulk import (
    ConfigParams,
    MetricColumns,
    SharedParams,
    shared_columns,
    values_of,
)
from benchmarks.store.bundles import IMPORTED_FROM_TAG, VERIFIED_TAG
from benchmarks.store.reader import (
    DEPARTURES_TAG,
    TUNING_TAG,
)
from mesabench_core import __version__

log = logging.getLogger("mesabench")

#: Grouping keys besides run params (``method.inner_lr``, ``task.shots``, ...).
GROUP_KEYS = ("method", "config_hash", "version")
#: Keys that never distinguish configurations.
_NOT_CONFIG = {"seed", "device", "method_name", "benchmark"}
#: The run params a ranked board holds equal: the task's and the protocol's settings.
COMPARED_SECTIONS = ("task.", "protocol.")
#: Tags the tracker writes at a run's start (benchmarks.store.tracking): whether its task
#: and protocol settings are the benchmark's own defaults, and its method's code digest.
DEFAULTS_TAG = "mesabench.default_settings"
CODE_TAG = "mesabench.method_code"


class LeaderboardError(ConfigError):
    """A leaderboard that cannot be built as asked (e.g. ranking by an undeclared metric)."""


@dataclass(frozen=True)
class RunRecord:
    """What the leaderboard needs of one MLflow run."""

    run_id: str
    benchmark: str
    method: str
    config_hash: str
    seed: int
    status: str
    version: str
    start_time: datetime
    params: Mapping[str, str]
    tags: Mapping[str, str]
    metrics: Mapping[str, float]
    stale: bool = False
    #: The method's code digest ('' for runs recorded before every run had one); a field,
    #: not a lookup in the tags, as a board keys every run by it.
    code: str = ""

    def group_value(self, key: str) -> str:
        if key == "method":
            return self.method
        if key == "config_hash":
            return self.config_hash
        if key == "version":
            return self.version
        return self.params.get(key, "-")

    @functools.cached_property
    def tuning(self) -> dict[str, Any] | None:
        """The run's role in a ``tune`` (a trial, or the configuration it selected)."""
        text = self.tags.get(TUNING_TAG)
        try:
            return json.loads(text) if text else None
        except ValueError:
            return None

    @property
    def evaluation(self) -> bool:
        """Whether the run scores a saved learner (``evaluate``) rather than training one."""
        return "evaluation.learner_from" in self.params

    @functools.cached_property
    def setting(self) -> tuple[tuple[str, str], ...]:
        """What a ranked board holds equal: the run's kind (training, or evaluation of a
        learner trained on some benchmark) and every task and protocol setting."""
        kind = ("kind", f"evaluation of a learner trained on "
                        f"{self.tags.get('mesabench.trained_on', '?')}"
                if self.evaluation else "training")  # fmt: skip
        return (kind, *_compared(self.params))


def _compared(params: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The task and protocol settings among ``params``, sorted. Runs of one configuration
    read from a SQLite store share one mapping of its settings (a :class:`ConfigParams`;
    their own are seed, device and data root, none of them compared): computed once there."""
    def compared(items) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in items if k.startswith(COMPARED_SECTIONS)))

    if isinstance(params, SharedParams) and isinstance(params.shared, ConfigParams) and not any(
        k.startswith(COMPARED_SECTIONS) for k in params.own
    ):
        memo = params.shared.memo
        if "compared" not in memo:
            memo["compared"] = compared(params.shared.items())
        return memo["compared"]
    return compared(params.items())


@dataclass(frozen=True)
class RunFilter:
    """Which runs count: tag and param equalities, a start date, a suite version."""

    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    since: datetime | None = None
    version: str | None = None

    def admits(self, run: RunRecord) -> bool:
        if any(run.tags.get(k) != v for k, v in self.tags.items()):
            return False
        if any(run.params.get(k) != v for k, v in self.params.items()):
            return False
        if self.since is not None and run.start_time < self.since:
            return False
        return self.version is None or run.version == self.version


@dataclass
class LeaderboardRow:
    method: str
    runs: list[RunRecord] = field(default_factory=list)
    reference: ReferenceRow | None = None
    #: For a reference whose settings differ from ours: key -> (ours, theirs).
    settings_differ: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: Settings whose values differ between the runs this row pools: key -> values.
    pooled: dict[str, list[str]] = field(default_factory=dict)
    #: For a row of runs of another task or protocol setting than the ranked ones (listed
    #: apart): key -> (this row's value, the ranked rows' value).
    other_setting: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: The paired comparison with the baseline row (``--baseline``), if asked for.
    versus_baseline: PairedTest | None = None
    #: Its p-value adjusted for the board's other paired tests (Holm), and the seeds a
    #: paired t-test would need to detect the observed difference at 80% power.
    versus_baseline_holm: float | None = None
    seeds_for_power: int | None = None
    #: Whether the row is not significantly worse than the best ranked row of ours (a
    #: paired t-test over their shared seeds, Holm-adjusted over the board's rows, at 5%);
    #: None where it cannot be said (the best row itself, fewer than two shared seeds).
    tied_with_best: bool | None = None
    #: Where the board placed the row: ``ranked``, ``reference`` (ranked beside ours),
    #: ``diverged`` or ``missing`` (listed unranked), ``other settings`` (runs of another
    #: task or protocol setting, listed apart), ``reference, settings differ``.
    status: str = "ranked"
    #: Statistics already computed, per metric (a row's runs are fixed once it is built).
    _stats: dict[str, SeedStats] = field(default_factory=dict, repr=False, compare=False)
    _by_seed: dict[str, dict[int, float]] = field(default_factory=dict, repr=False,
                                                  compare=False)  # fmt: skip
    #: The runs' metrics, and the one column store they share where bulk-read (by_seed).
    _metrics: list | None = field(default=None, repr=False, compare=False)
    _columns: MetricColumns | None = field(default=None, repr=False, compare=False)
    _seed_list: list[int] = field(default_factory=list, repr=False, compare=False)
    _ids: list[str] = field(default_factory=list, repr=False, compare=False)
    _one_per_seed: bool = field(default=False, repr=False, compare=False)
    #: The protocol linter's findings (benchmarks.results.linter), once computed.
    _findings: list[str] | None = field(default=None, repr=False, compare=False)

    @property
    def seeds(self) -> list[int]:
        """The row's distinct seeds."""
        return sorted({r.seed for r in self.runs})

    @property
    def tuned(self) -> dict[str, Any] | None:
        """The ``tune`` that selected this row's configuration (its budget, space and
        metric; the runs of a row share it: it is part of their identity), or None."""
        tuning = self.runs[0].tuning if self.runs else None
        return tuning if tuning and tuning.get("role") == "selected" else None

    @property
    def imported(self) -> list[RunRecord]:
        """The row's runs that came from a bundle (``python -m benchmarks import``)."""
        return [r for r in self.runs if IMPORTED_FROM_TAG in r.tags]

    @property
    def is_reference(self) -> bool:
        return self.reference is not None

    def by_seed(self, metric: str) -> dict[int, float]:
        """The metric keyed by seed, for pairing. A row of one configuration has one run
        per seed; a row that pools configurations is paired on each seed's mean."""
        return dict(self._seed_means(metric))

    def _seed_means(self, metric: str) -> dict[int, float]:
        """:meth:`by_seed`, computed once per metric and kept (not a copy)."""
        found = self._by_seed.get(metric)
        if found is not None:
            return found
        if self._metrics is None:  # the runs are fixed once the row is built
            self._metrics = [run.metrics for run in self.runs]
            self._columns = shared_columns(self._metrics)
            self._seed_list = [run.seed for run in self.runs]
            self._ids = [run.run_id for run in self.runs]
            self._one_per_seed = len(set(self._seed_list)) == len(self._seed_list)
        seeds = self._seed_list
        if self._columns is not None:
            # Bulk-read runs: one column lookup per run, in C (a board reads ~6 metrics
            # of each of its 100,000 runs, in render as in ranking).
            values = list(map(self._columns.column(metric).get, self._ids))
        else:
            values = values_of(self._metrics, metric)
        if self._one_per_seed and None not in values:
            found = dict(zip(seeds, values, strict=True))
        else:
            grouped: dict[int, list[float]] = {}
            for seed, value in zip(seeds, values, strict=True):
                if value is not None:
                    grouped.setdefault(seed, []).append(value)
            found = {seed: sum(v) / len(v) for seed, v in grouped.items()}
        self._by_seed[metric] = found
        return found

    def values(self, metric: str) -> list[float]:
        """One value per seed of the row, in seed order (a row that pools configurations
        averages each seed's runs, so that n counts seeds), or the reference's number."""
        if self.reference is not None:
            value = self.reference.metrics.get(metric)
            return [] if value is None else [value]
        by_seed = self._seed_means(metric)
        return [by_seed[seed] for seed in sorted(by_seed)]

    def stats(self, metric: str) -> SeedStats:
        """n, mean, std (ddof 1) and the Student-t 95% CI of the mean, over seeds."""
        if metric not in self._stats:
            self._stats[metric] = seed_stats(self.values(metric))
        return self._stats[metric]

    def episode_ci95(self, metric: str) -> float | None:
        """Mean of the runs' own 95% CI half-widths over their test episodes, where kept.

        Not a statement about seeds: it measures how well each run's test tasks pin down
        that run's number.
        """
        values = self.values(f"{metric}_ci95")
        return sum(values) / len(values) if values else None

    def diverged_fraction(self, metric: str) -> float | None:
        """Largest fraction of diverged test tasks over the runs (None when not logged)."""
        values = self.values(f"{metric}_diverged_fraction")
        return max(values) if values else None

    def diverged(self, metric: str) -> bool:
        values = self.values(metric)
        return bool(values) and self.stats(metric).mean is None

    def versions(self) -> set[str]:
        return {r.version for r in self.runs}

    @property
    def code(self) -> str:
        """The code digest its runs share ('' where unrecorded): rows never pool two."""
        return self.runs[0].code if self.runs else ""


@dataclass
class Leaderboard:
    benchmark: str
    metric: str
    higher: bool
    columns: list[str]
    rows: list[LeaderboardRow]  # ranked: ours and matching references, by the metric
    excluded: dict[str, int]
    config_keys: list[str]
    version: str = __version__
    #: Our rows not ranked: the ranked metric diverged or is missing.
    unranked: list[LeaderboardRow] = field(default_factory=list)
    #: References whose declared settings differ from our rows'.
    apart: list[LeaderboardRow] = field(default_factory=list)
    #: Rows of runs of other task or protocol settings (or evaluations beside training
    #: runs): listed apart, never ranked with ``rows``.
    elsewhere: list[LeaderboardRow] = field(default_factory=list)
    #: The ranked rows' task and protocol settings (and run kind), as in RunRecord.setting.
    setting: tuple[tuple[str, str], ...] = ()
    #: Repeated FINISHED runs of one (configuration, seed) left out (the latest one counts).
    duplicates_dropped: int = 0
    baseline: LeaderboardRow | None = None
    #: The ranked metric in words, with its direction.
    metric_words: str = ""
    #: Why no run is on the board although the benchmark has runs: the ``--param`` filter
    #: matched none (the recorded values named). Empty when the filter admitted some.
    filtered_out: str = ""

    @property
    def ours(self) -> list[LeaderboardRow]:
        return [r for r in self.rows if not r.is_reference] + self.unranked

    @functools.cached_property
    def shows_episode_ci(self) -> bool:
        """Whether any row of ours kept the runs' own episode CI of the ranked metric (the
        board is complete when it is read: computed once, not once per printed row)."""
        return any(r.episode_ci95(self.metric) is not None for r in self.ours)

    def all_rows(self) -> list[LeaderboardRow]:
        """Ranked rows, then unranked ones, then rows of other settings, then references
        listed apart."""
        return [*self.rows, *self.unranked, *self.elsewhere, *self.apart]

    def flagged(self, row: LeaderboardRow) -> bool:
        """Whether the row holds runs made by another suite version."""
        return not row.is_reference and row.versions() != {self.version}

    @functools.cached_property
    def _codes_by_method(self) -> dict[str, set[str]]:
        """Each method's code digests over our rows, read in one pass (a pass per printed
        row made a 10,000-row board quadratic)."""
        codes: dict[str, set[str]] = {}
        for r in self.ours:
            codes.setdefault(r.method, set()).add(r.code)
        return codes

    def config_label(self, row: LeaderboardRow) -> str:
        if row.is_reference:
            kind = row.reference.kind
            return f"{kind} ({row.reference.source})"
        codes = self._codes_by_method.get(row.method, set())
        parts = []
        if self.config_keys:
            first = row.runs[0].params
            parts.append(", ".join(f"{_short_key(k)}={first.get(k, '-')}"
                                   for k in self.config_keys if k not in row.pooled))  # fmt: skip
        elif not row.other_setting and len(codes) < 2:  # nothing else tells the row apart
            parts.append(row.runs[0].config_hash)
        departures = departures_text(row, self.config_keys)
        if departures:
            parts.append(departures)
        if row.pooled:
            parts.append("pooled " + "; ".join(f"{_short_key(k)}={'/'.join(v)}"
                                               for k, v in row.pooled.items()))  # fmt: skip
        if len(codes) > 1:  # the method's code changed between runs
            parts.append(f"code {row.code[:8] or 'unrecorded'}")
        if row.other_setting:
            parts.append(other_setting_text(row.other_setting))
        tuned = tuned_text(row)
        if tuned:
            parts.append(tuned)
        parts.append(imported_text(row))
        return "; ".join(part for part in parts if part)


def departures_text(row: LeaderboardRow, shown: Collection[str] = ()) -> str:
    """``set: inner_steps=5, outer_lr=0.003``: the method settings a preset or the user
    chose for the row's runs (their ``mesabench.departures`` tag), less those the board
    already shows as columns; settings that differ between the pooled runs are listed as
    pooled, not here. Empty for runs recorded before the tag (nothing to say)."""
    texts = {r.tags.get(DEPARTURES_TAG, "") for r in row.runs}
    if len(texts) != 1 or not next(iter(texts)):
        return ""
    try:
        chosen = json.loads(next(iter(texts)))
    except ValueError:  # not this tag's form (runs of an unreleased revision wrote pairs)
        return ""
    if not isinstance(chosen, dict):
        return ""
    hidden = {_short_key(k) for k in (*shown, *row.pooled)}
    pairs = [f"{k}={_compact(str(v))}" for k, v in chosen.items() if k not in hidden]
    return "set: " + ", ".join(pairs) if pairs else ""


def _compact(value: str) -> str:
    """A float as 4 significant digits (a tune's 0.8680901962705891 as 0.8681); anything
    else as recorded. The run's params keep every digit."""
    try:
        number = float(value)
    except ValueError:
        return value
    return value if value.lstrip("-").isdigit() else f"{number:.4g}"


def imported_text(row: LeaderboardRow) -> str:
    """``imported: 3 of 5 runs, from lab.mesabundle`` for a row with runs from a bundle."""
    imported = row.imported
    if not imported:
        return ""
    sources = ", ".join(sorted({r.tags[IMPORTED_FROM_TAG] for r in imported}))
    text = f"imported: {len(imported)} of {len(row.runs)} runs, from {sources}"
    verdicts = [r.tags[VERIFIED_TAG] for r in imported if VERIFIED_TAG in r.tags]
    if verdicts:  # ``verify`` re-ran some of them here
        failed = sum(v.startswith("MISMATCH") for v in verdicts)
        text += (f"; verify: {failed} of {len(verdicts)} re-run(s) MISMATCH" if failed
                 else f"; verified: {len(verdicts)} re-run(s) agree")  # fmt: skip
    return text


def tuned_text(row: LeaderboardRow) -> str:
    """``tuned: 20 trials, selected on val/loss`` for a row of a tune's selected runs."""
    tuned = row.tuned
    if tuned is None:
        return ""
    return f"tuned: {tuned.get('trials')} trials, selected on {tuned.get('selected_on')}"


def other_setting_text(differ: dict[str, tuple[str, str]]) -> str:
    """``tasks=5 (ranked: 20)``: what sets a row of other settings apart from the ranked."""
    return ", ".join(f"{_short_key(k)}={mine} (ranked: {ranked})"
                     for k, (mine, ranked) in differ.items())  # fmt: skip


def _short_key(key: str) -> str:
    return key.split(".", 1)[-1]


def is_setting(key: str) -> bool:
    """A run param that can tell configurations apart (``task.shots``, not ``seed``)."""
    return "." in key and _short_key(key) not in _NOT_CONFIG
