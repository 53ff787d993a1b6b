"""Leaderboards read back from MLflow: final metrics per configuration, statistics over seeds.

A ranked board holds only runs of one task and protocol setting (every ``task.*`` and
``protocol.*`` param equal) and of one kind (training runs, or evaluations of learners
trained on one benchmark): method settings may differ between its rows, and are shown. The
runs of any other setting are listed apart, unranked, each row saying what differs;
``--param`` picks the setting to rank. Which setting a board ranks, when several are in the
store: the benchmark's own defaults where runs have them, else the setting with the most
(method, seed) cells.

Runs that differ only by seed (same ``mesabench.config_hash``) form one row unless
``group_by`` says otherwise; a row that pools different settings says which, and counts
each seed once (a seed's runs are averaged). Runs of a plugin method whose code differs
(``mesabench.method_code``) are never pooled into one row. Each (configuration, seed)
counts once: of repeated FINISHED runs the latest is kept and the others are counted as
dropped. Only FINISHED runs are ranked; failed, killed, running and stale ones (RUNNING
without a heartbeat) are counted. A row whose ranked metric diverged is listed with its
diverged fraction, never ranked. Each reference row sits beside ours when the settings it
declares match the board's (its method settings against our rows of its method); otherwise
it is listed apart with what differs. The ranking direction comes from
:mod:`benchmarks.metrics.catalog`, never from a metric's name. The tracker is the only
writer of results; this module only reads them.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from benchmarks.catalog.references import ReferenceRow, references_for
from benchmarks.metrics import catalog as metric_catalog
from benchmarks.planning.config import ConfigError
from benchmarks.results.multiple_tests import holm, seeds_for_power
from benchmarks.results.statistics import PairedTest, SeedStats, paired_t_test, seed_stats
from benchmarks.store.lifecycle import is_stale
from benchmarks.store.reader import (
    RUN_LOCAL_SETTINGS,
    TUNING_TAG,
    Only,
    StoredRun,
    StoreReader,
    TagFilter,
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
#: and protocol settings are the benchmark's own defaults, and a plugin method's code digest.
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
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, float]
    stale: bool = False

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

    @property
    def code(self) -> str:
        """A plugin method's code digest ('' for built-ins and runs recorded before it)."""
        return self.tags.get(CODE_TAG, "")

    @functools.cached_property
    def setting(self) -> tuple[tuple[str, str], ...]:
        """What a ranked board holds equal: the run's kind (training, or evaluation of a
        learner trained on some benchmark) and every task and protocol setting."""
        kind = ("kind", f"evaluation of a learner trained on "
                        f"{self.tags.get('mesabench.trained_on', '?')}"
                if self.evaluation else "training")  # fmt: skip
        compared = sorted((k, v) for k, v in self.params.items() if k.startswith(COMPARED_SECTIONS))
        return (kind, *compared)


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
    #: Where the board placed the row: ``ranked``, ``reference`` (ranked beside ours),
    #: ``diverged`` or ``missing`` (listed unranked), ``other settings`` (runs of another
    #: task or protocol setting, listed apart), ``reference, settings differ``.
    status: str = "ranked"
    #: Statistics already computed, per metric (a row's runs are fixed once it is built).
    _stats: dict[str, SeedStats] = field(default_factory=dict, repr=False, compare=False)

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
    def is_reference(self) -> bool:
        return self.reference is not None

    def by_seed(self, metric: str) -> dict[int, float]:
        """The metric keyed by seed, for pairing. A row of one configuration has one run
        per seed; a row that pools configurations is paired on each seed's mean."""
        grouped: dict[int, list[float]] = {}
        for run in self.runs:
            if metric in run.metrics:
                grouped.setdefault(run.seed, []).append(run.metrics[metric])
        return {seed: sum(v) / len(v) for seed, v in grouped.items()}

    def values(self, metric: str) -> list[float]:
        """One value per seed of the row, in seed order (a row that pools configurations
        averages each seed's runs, so that n counts seeds), or the reference's number."""
        if self.reference is not None:
            value = self.reference.metrics.get(metric)
            return [] if value is None else [value]
        by_seed = self.by_seed(metric)
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
        """The plugin code digest its runs share ('' for built-ins): rows never pool two."""
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

    def config_label(self, row: LeaderboardRow) -> str:
        if row.is_reference:
            kind = row.reference.kind
            return f"{kind} ({row.reference.source})"
        same_method = [r for r in self.ours if r.method == row.method]
        codes = {r.code for r in same_method}
        parts = []
        if self.config_keys:
            first = row.runs[0].params
            parts.append(", ".join(f"{_short_key(k)}={first.get(k, '-')}"
                                   for k in self.config_keys if k not in row.pooled))  # fmt: skip
        elif not row.other_setting and len(codes) < 2:  # nothing else tells the row apart
            parts.append(row.runs[0].config_hash)
        if row.pooled:
            parts.append("pooled " + "; ".join(f"{_short_key(k)}={'/'.join(v)}"
                                               for k, v in row.pooled.items()))  # fmt: skip
        if len(codes) > 1:  # a plugin's code changed between runs of this method
            parts.append(f"code {row.code[:8] or 'unrecorded'}")
        if row.other_setting:
            parts.append(other_setting_text(row.other_setting))
        tuned = tuned_text(row)
        if tuned:
            parts.append(tuned)
        return "; ".join(part for part in parts if part)


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


def _is_setting(key: str) -> bool:
    """A run param that can tell configurations apart (``task.shots``, not ``seed``)."""
    return "." in key and _short_key(key) not in _NOT_CONFIG


# -- reading ------------------------------------------------------------------------------
def _record(run: StoredRun) -> RunRecord:
    tags = run.tags
    return RunRecord(
        run_id=run.run_id,
        benchmark=tags.get("mesabench.benchmark", "?"),
        method=tags.get("mesabench.method", "?"),
        config_hash=tags.get("mesabench.config_hash", "?"),
        seed=int(tags.get("mesabench.seed", -1)),
        status=run.status,
        version=tags.get("mesabench.version", "?"),
        start_time=datetime.fromtimestamp((run.start_ms or 0) / 1000, tz=timezone.utc),
        params=run.params,
        tags=tags,
        metrics=run.metrics,
        stale=is_stale(run.status, tags, run.start_ms),
    )


def read_runs(
    reader: StoreReader,
    experiment_id: str,
    where: TagFilter | None = None,
    only: Only | None = None,
) -> list[RunRecord]:
    """Every active run of one experiment (benchmark), or those passing ``where`` (with
    at least what ``only`` keeps of each)."""
    return [_record(run) for run in reader.runs(experiment_id, where, only)]


def benchmarks_in_store(reader: StoreReader) -> list[str]:
    """Names of the experiments that hold runs of this suite, sorted."""
    from benchmarks.store.claims import is_claim_experiment

    names = reader.experiment_names()
    return sorted(n for n in names if n != "Default" and not is_claim_experiment(n))


# -- building -----------------------------------------------------------------------------
def default_columns(metric_names: Iterable[str], headline: Sequence[str] = ()) -> list[str]:
    """The columns a board shows by default: the benchmark's declared ``headline`` (its
    protocol's), those the runs logged. ``"a|b"`` takes the first of a, b logged;
    ``"prefix/*"`` every logged metric under the prefix. The first column ranks."""
    names = set(metric_names)
    columns: list[str] = []
    for entry in headline or GENERIC_HEADLINE:
        if entry.endswith("/*"):
            columns += sorted(n for n in names if n.startswith(entry[:-1]))
        else:
            columns += [c for c in entry.split("|") if c in names][:1]
    return columns or ["final/test_loss"]


def headline_of(benchmark: str) -> tuple[str, ...]:
    """The benchmark's declared default columns (imported here, when a board needs them,
    so that reading a store whose runs recorded theirs needs no spec and no torch)."""
    from benchmarks.catalog.installed import headline_of as declared

    return declared(benchmark)


#: Columns for a benchmark whose spec is not installed (its runs remain in the store).
GENERIC_HEADLINE = ("final/test_accuracy|final/test_loss",)


def _config_keys(rows: Sequence[LeaderboardRow]) -> list[str]:
    """The run params whose values differ between rows: what tells them apart.

    Task and protocol settings are compared across every row (a budget that differs
    between two methods must show); a method's own settings only between rows of that
    method (another method's config has other fields).
    """
    keys: set[str] = set()
    params = [(row.method, row.runs[0].params) for row in rows if row.runs]
    every = set().union(*(p for _, p in params)) if params else set()
    for key in filter(_is_setting, every):
        if key.startswith("method."):
            by_method: dict[str, set] = {}
            for method, p in params:
                by_method.setdefault(method, set()).add(p.get(key))
            if any(len(values) > 1 for values in by_method.values()):
                keys.add(key)
        elif len({p.get(key) for _, p in params}) > 1:
            keys.add(key)
    return sorted(keys)


def _pooled(row: LeaderboardRow) -> dict[str, list[str]]:
    """Settings whose values differ between the runs of one row."""
    out = {}
    every = set().union(*(r.params for r in row.runs))
    for key in sorted(filter(_is_setting, every)):
        values = sorted({r.params.get(key, "-") for r in row.runs})
        if len(values) > 1:
            out[key] = values
    return out


def _deduplicate(runs: list[RunRecord]) -> tuple[list[RunRecord], int]:
    """One FINISHED run per (method, configuration, seed): the latest one started."""
    latest: dict[tuple[str, str, int], RunRecord] = {}
    for run in runs:
        key = (run.method, run.config_hash, run.seed)
        if key not in latest or run.start_time > latest[key].start_time:
            latest[key] = run
    return list(latest.values()), len(runs) - len(latest)


def resolve_setting_key(key: str, recorded: Sequence[str], flag: str) -> str:
    """``key`` as the runs recorded it: itself, or the one recorded ``section.key`` a bare
    name stands for; else :class:`LeaderboardError` naming the flag and near matches."""
    if key in recorded:
        return key
    qualified = [name for name in recorded if name.rpartition(".")[2] == key]
    if len(qualified) == 1:
        return qualified[0]
    if len(qualified) > 1:
        raise LeaderboardError(f"{flag} {key} is ambiguous; write one of {', '.join(qualified)}")
    near = difflib.get_close_matches(key, recorded, n=3) or difflib.get_close_matches(
        key, sorted({name.rpartition(".")[2] for name in recorded}), n=3
    )
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    allowed = f"{', '.join(GROUP_KEYS)} or " if flag == "--group-by" else ""
    raise LeaderboardError(f"{flag} {key}: no run recorded that setting{hint} (allowed: "
                           f"{allowed}a recorded setting such as method.inner_lr)")  # fmt: skip


def ranking_direction(metric: str) -> bool:
    """True when higher is better; a metric without a declared direction cannot rank."""
    direction = metric_catalog.direction_of(metric)
    if direction is None:
        why = (
            "is not declared in benchmarks/metrics/catalog.py"
            if not metric_catalog.is_declared(metric)
            else "is descriptive (it has no better direction)"
        )
        raise LeaderboardError(f"cannot rank by {metric}: it {why}; rank by a declared score")
    return direction == "higher"


def _settings_of(rows: Sequence[LeaderboardRow]) -> dict[str, str]:
    """The settings all rows agree on (to fill the ranked metric's words). A row's runs
    share its configuration, so one run per row is compared; the run-local ones (seed,
    device, data root) describe no metric and are left out."""
    params = [row.runs[0].params for row in rows if row.runs]
    if not params:
        return {}
    agreed = {k: v for k, v in params[0].items() if k not in RUN_LOCAL_SETTINGS}
    for other in params[1:]:
        agreed = {k: v for k, v in agreed.items() if other.get(k) == v}
    return agreed


def _place_references(
    published: list[ReferenceRow], ours: list[LeaderboardRow],
    setting: tuple[tuple[str, str], ...],
) -> tuple[list[LeaderboardRow], list[LeaderboardRow]]:
    """Each reference on its own: beside ours (ranked) when the task and protocol settings
    it declares are the board's ``setting`` and its method settings those of some row of
    ours of its method (any, where we have no row of it); else apart, with what differs."""
    beside, apart = [], []
    board = dict(setting)
    for ref in published:
        differ = ref.differences(board) if board else {}
        differ = {k: v for k, v in differ.items() if k.startswith(COMPARED_SECTIONS)}
        method_keys = {k for k in ref.settings if not k.startswith(COMPARED_SECTIONS)}
        mine = [row for row in ours if row.method == ref.method and row.runs]
        if method_keys and mine:
            each = [{k: v for k, v in ref.differences(row.runs[0].params).items()
                     if k in method_keys} for row in mine]  # fmt: skip
            if all(each):  # no row of its method matches it
                for key in sorted(set().union(*each)):
                    values = sorted({d[key][0] for d in each if key in d})
                    differ[key] = ("/".join(values), str(ref.settings[key]))
        row = LeaderboardRow(ref.method, reference=ref)
        if differ:
            row.settings_differ = differ
            apart.append(row)
        else:
            beside.append(row)
    return beside, apart


def _rows(runs: Sequence[RunRecord], group_by: Sequence[str]) -> list[LeaderboardRow]:
    """Runs grouped into rows by ``group_by`` (and a plugin's code: never pooled across)."""
    groups: dict[tuple[str, ...], LeaderboardRow] = {}
    for run in sorted(runs, key=lambda r: (r.start_time, r.run_id)):
        key = (*(run.group_value(k) for k in group_by), run.code)
        groups.setdefault(key, LeaderboardRow(run.method)).runs.append(run)
    rows = list(groups.values())
    if "config_hash" not in group_by:
        for row in rows:
            row.pooled = _pooled(row)
    return rows


def ranked_setting(runs: Sequence[RunRecord]) -> tuple[tuple[str, str], ...]:
    """Which setting a board ranks: of training runs where there are any, the benchmark's
    defaults where runs have them, else the one with the most (method, seed) cells (then
    the one run most recently)."""
    pool = [r for r in runs if not r.evaluation] or list(runs)
    cells: dict[tuple, set[tuple[str, int]]] = {}
    newest: dict[tuple, datetime] = {}
    defaults: set[tuple] = set()
    for run in pool:
        cells.setdefault(run.setting, set()).add((run.method, run.seed))
        newest[run.setting] = max(newest.get(run.setting, run.start_time), run.start_time)
        if run.tags.get(DEFAULTS_TAG) == "true":
            defaults.add(run.setting)
    return max(cells, key=lambda s: (s in defaults, len(cells[s]), newest[s]))


def _differ(setting: tuple, ranked: tuple) -> dict[str, tuple[str, str]]:
    mine, theirs = dict(setting), dict(ranked)
    return {k: (mine.get(k, "-"), theirs.get(k, "-"))
            for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)}  # fmt: skip


def build_leaderboard(
    records: Sequence[RunRecord],
    benchmark: str,
    metric: str | None = None,
    group_by: Sequence[str] = ("method", "config_hash"),
    run_filter: RunFilter | None = None,
    extra_prefixes: Sequence[str] = (),
    references: bool = True,
    baseline: str | None = None,
    headline: Sequence[str] | None = None,
    spec_references: bool = True,
) -> Leaderboard:
    """Rank the FINISHED runs in ``records`` that pass ``run_filter``.

    ``baseline`` names a method: every other row gets its paired difference to that
    method's best row over the seeds both have. ``headline`` gives the default columns
    (else the benchmark's spec is consulted); ``spec_references=False`` shows only the
    built-in published rows (no spec lookup: a built-in benchmark declares none of its own).
    """
    declare_from_runs(records)
    run_filter = run_filter or RunFilter()
    recorded = sorted({k for r in records if r.method != "?" for k in r.params})
    if records:  # a key no run recorded would silently filter out or pool everything
        run_filter = dataclasses.replace(run_filter, params={
            resolve_setting_key(k, recorded, "--param"): v for k, v in run_filter.params.items()
        })  # fmt: skip
        group_by = tuple(k if k in GROUP_KEYS else resolve_setting_key(k, recorded, "--group-by")
                         for k in group_by)  # fmt: skip
    filtered_out = _unmatched_filter(records, run_filter, benchmark)
    excluded = {"FAILED": 0, "KILLED": 0, "RUNNING": 0, "STALE": 0}
    finished = []
    for run in records:
        if run.method == "?" or not run_filter.admits(run):
            continue  # not a method run (e.g. a sweep's parent), or filtered out
        if (run.tuning or {}).get("role") == "trial":  # chose a configuration; no result
            excluded["TUNING TRIALS"] = excluded.get("TUNING TRIALS", 0) + 1
            continue
        if run.status != "FINISHED":
            status = "STALE" if run.stale else run.status
            excluded[status] = excluded.get(status, 0) + 1
            continue
        finished.append(run)
    finished, dropped = _deduplicate(finished)
    setting = ranked_setting(finished) if finished else ()
    ours = _rows([r for r in finished if r.setting == setting], group_by)
    elsewhere = []
    for other in sorted({r.setting for r in finished} - {setting}):
        for row in _rows([r for r in finished if r.setting == other], group_by):
            row.other_setting, row.status = _differ(other, setting), "other settings"
            elsewhere.append(row)
    published = references_for(benchmark, spec_references) if references else []
    names = {m for row in ours + elsewhere for r in row.runs for m in r.metrics}
    names |= {m for ref in published for m in ref.metrics}
    columns = default_columns(names, headline if headline is not None else headline_of(benchmark))
    if metric is not None:
        columns = [metric, *[c for c in columns if c != metric]]
    for name in sorted(names):
        wanted = any(name.startswith(p) for p in extra_prefixes) and not name.endswith("_ci95")
        if wanted and name not in columns:
            columns.append(name)
    ranking = columns[0]
    higher = ranking_direction(ranking)
    beside, apart = _place_references(published, ours, setting)

    def rank_key(row: LeaderboardRow) -> tuple[float, int]:
        mean = row.stats(ranking).mean
        return (-mean if higher else mean, row.is_reference)

    ranked = [row for row in ours if row.stats(ranking).mean is not None]
    unranked = [row for row in ours if row.stats(ranking).mean is None]
    rows = sorted(ranked + [r for r in beside if r.stats(ranking).mean is not None], key=rank_key)
    apart += [r for r in beside if r.stats(ranking).mean is None]
    for row in rows:
        row.status = "reference" if row.is_reference else "ranked"
    for row in unranked:
        row.status = "diverged" if row.diverged(ranking) else "missing"
    for row in apart:
        row.status = "reference, settings differ"
    config_keys = [k for k in _config_keys(ours) if k not in group_by]
    board = Leaderboard(
        benchmark, ranking, higher, columns, rows, excluded, config_keys,
        unranked=unranked, apart=apart, duplicates_dropped=dropped,
        metric_words=metric_catalog.describe(ranking, _settings_of(ours)),
        elsewhere=elsewhere, setting=setting, filtered_out=filtered_out,
    )  # fmt: skip
    if baseline is not None:
        compare_to_baseline(board, baseline)
    return board


def _unmatched_filter(records: Sequence[RunRecord], run_filter: RunFilter, benchmark: str) -> str:
    """Why ``run_filter``'s params admit no run of ``benchmark`` (it has some), naming the
    values recorded; empty when they admit one (or there are no params or no runs)."""
    runs = [r for r in records if r.method != "?"]
    if not run_filter.params or not runs:
        return ""
    params_only = RunFilter(params=run_filter.params)
    if any(params_only.admits(r) for r in runs):
        return ""
    for key, value in run_filter.params.items():
        if all(r.params.get(key) != value for r in runs):
            seen = sorted({r.params.get(key, "-") for r in runs})
            shown = ", ".join(seen[:10]) + (", ..." if len(seen) > 10 else "")
            return f"--param {key}={value}: no run of {benchmark} has it (recorded: {shown})"
    asked = ", ".join(f"{k}={v}" for k, v in run_filter.params.items())
    return f"--param {asked}: no run of {benchmark} has all of these at once"


def compare_to_baseline(board: Leaderboard, method: str) -> None:
    """Pair every row with one ranked row of the baseline over the seeds both have.

    ``method`` is a method (``maml``) or a method and a config hash prefix
    (``maml@3f2a``: that row). Of a method's rows, the one sharing the most seeds with the
    other ranked rows is taken (the best ranked among equals): its best row may share none
    (a sweep's grid over seeds 10-12 beside a default row over 0-2) and pair with nothing.
    """
    name, _, code = method.partition("@")
    candidates = [row for row in board.rows if not row.is_reference and row.method == name
                  and (not code or row.runs[0].config_hash.startswith(code))]  # fmt: skip
    if not candidates:
        have = sorted({row.method for row in board.ours})
        rows_of = [r.runs[0].config_hash[:8] for r in board.rows
                   if not r.is_reference and r.method == name]  # fmt: skip
        which = f"; its rows: {', '.join(f'{name}@{c}' for c in rows_of)}" if rows_of else ""
        raise LeaderboardError(
            f"--baseline {method}: no ranked row of that method on {board.benchmark}{which}; "
            f"methods here: {', '.join(have) or 'none'}"
        )
    others = [row for row in board.ours if row.method != name]

    def shared(row: LeaderboardRow) -> int:
        seeds = set(row.by_seed(board.metric))
        return sum(len(seeds & set(o.by_seed(board.metric))) for o in others)

    base = max(candidates, key=shared)  # max keeps the first (best ranked) among equals
    board.baseline = base
    reference = base.by_seed(board.metric)
    for row in board.ours:
        if row is base:
            continue
        mine = row.by_seed(board.metric)
        pairs = sorted(set(mine) & set(reference))
        row.versus_baseline = paired_t_test(
            [mine[s] for s in pairs], [reference[s] for s in pairs]
        )
        row.seeds_for_power = seeds_for_power([mine[s] - reference[s] for s in pairs])
    # Many rows, many tests: each p-value adjusted for the others (Holm), so that one of
    # several comparisons is not read as if it stood alone.
    tested = [row for row in board.ours if row.versus_baseline is not None]
    for row, adjusted in zip(tested, holm([r.versus_baseline.p_value for r in tested]),
                             strict=True):  # fmt: skip
        row.versus_baseline_holm = adjusted


def declare_from_runs(records: Sequence[RunRecord]) -> None:
    """Declare the metrics the runs' protocols declared (recorded with each run). A run
    recorded before runs kept them: the installed protocols declare theirs (imported here,
    only then, as they bring torch)."""
    told = {r.tags.get(metric_catalog.RECORDED_TAG) for r in records}
    missing = None in told
    for text in told - {None}:
        missing |= not metric_catalog.declare_recorded(text)
    if missing:
        import benchmarks.protocols  # noqa: F401  (declares every built-in protocol's metrics)


def recorded_headline(records: Sequence[RunRecord]) -> tuple[str, ...] | None:
    """The default columns the newest run recorded (``mesabench.headline``), if any."""
    for run in sorted(records, key=lambda r: r.start_time, reverse=True):
        recorded = run.tags.get("mesabench.headline")
        if recorded:
            try:
                return tuple(json.loads(recorded))
            except ValueError:
                continue
    return None


def leaderboard_from_store(
    reader: StoreReader, benchmark: str, where: TagFilter | None = None, **options
) -> Leaderboard:
    """The leaderboard of ``benchmark`` from the store ``reader`` reads (only its runs that
    pass ``where``, if given). Runs that recorded their headline and come from a built-in
    benchmark need no spec lookup (no torch)."""
    experiment_id = reader.experiment_id(benchmark)
    # What a board reads of each run: the suite's tags and those a filter names; the
    # run-local params only where a filter or the grouping uses them.
    run_filter = options.get("run_filter") or RunFilter()
    asked = {*run_filter.params, *options.get("group_by", ())}
    only = Only(frozenset(run_filter.tags), run_local=bool(asked & set(RUN_LOCAL_SETTINGS)))
    records = [] if experiment_id is None else read_runs(reader, experiment_id, where, only)
    builtin = bool(records) and all(
        r.tags.get("mesabench.benchmark_source") == "built-in" for r in records
    )
    headline = recorded_headline(records) if builtin else None
    return build_leaderboard(
        records, benchmark, headline=headline, spec_references=not builtin, **options
    )
