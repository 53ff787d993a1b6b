"""Leaderboards read back from MLflow: final metrics per configuration, mean +- std over seeds.

Runs that differ only by seed (same ``mesabench.config_hash``) form one row unless
``group_by`` says otherwise. Only FINISHED runs are ranked; failed, killed and still-running
ones are counted. Published reference rows sit beside ours, marked, outside our statistics.
The tracker is the only writer of results; this module only reads them.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import benchmarks
from benchmarks.metrics import mean_std
from benchmarks.references import ReferenceRow, references_for

log = logging.getLogger("mesabench")

#: Columns shown by default, by what the runs logged (first match wins; first column ranks).
CONTINUAL_COLUMNS = ("final/ra", "final/bti", "final/bwt", "final/la", "final/fwt")
ONLINE_COLUMNS = (
    "final/cumulative_accuracy",
    "final/accuracy/omniglot",
    "final/accuracy/mnist",
    "final/accuracy/fashion_mnist",
    "final/boundary_precision",
    "final/boundary_recall",
)
#: Grouping keys besides run params (``method.inner_lr``, ``task.shots``, ...).
GROUP_KEYS = ("method", "config_hash", "version")
#: Keys that never distinguish configurations.
_NOT_CONFIG = {"seed", "device", "method_name", "benchmark"}


def higher_is_better(metric: str) -> bool:
    """Accuracy-like metrics go up; losses, errors and times go down."""
    lowered = metric.lower()
    return not any(word in lowered for word in ("loss", "error", "time", "diverged"))


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

    def group_value(self, key: str) -> str:
        if key == "method":
            return self.method
        if key == "config_hash":
            return self.config_hash
        if key == "version":
            return self.version
        return self.params.get(key, "-")


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

    @property
    def seeds(self) -> list[int]:
        return sorted(r.seed for r in self.runs)

    @property
    def is_reference(self) -> bool:
        return self.reference is not None

    def values(self, metric: str) -> list[float]:
        if self.reference is not None:
            value = self.reference.metrics.get(metric)
            return [] if value is None else [value]
        return [r.metrics[metric] for r in self.runs if metric in r.metrics]

    def stat(self, metric: str) -> tuple[float, float]:
        """Mean and standard deviation over seeds (NaN when absent)."""
        return mean_std(self.values(metric))

    def ci95(self, metric: str) -> float | None:
        """Mean of the runs' own 95% CI half-widths, where the protocol defines one."""
        values = self.values(f"{metric}_ci95")
        return sum(values) / len(values) if values else None

    def versions(self) -> set[str]:
        return {r.version for r in self.runs}


@dataclass
class Leaderboard:
    benchmark: str
    metric: str
    higher: bool
    columns: list[str]
    rows: list[LeaderboardRow]  # ranked ours and references, interleaved by the metric
    excluded: dict[str, int]
    config_keys: list[str]
    version: str = benchmarks.__version__

    @property
    def ours(self) -> list[LeaderboardRow]:
        return [r for r in self.rows if not r.is_reference]

    def flagged(self, row: LeaderboardRow) -> bool:
        """Whether the row holds runs made by another suite version."""
        return not row.is_reference and row.versions() != {self.version}

    def config_label(self, row: LeaderboardRow) -> str:
        if row.is_reference:
            return f"published ({row.reference.source})"
        if not self.config_keys:
            return row.runs[0].config_hash
        first = row.runs[0].params
        return ", ".join(f"{k.split('.', 1)[-1]}={first.get(k, '-')}" for k in self.config_keys)


# -- reading ------------------------------------------------------------------------------
def _record(
    run_id: str,
    status: str,
    start_ms: int | None,
    tags: dict[str, str],
    params: dict[str, str],
    metrics: dict[str, float],
) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        benchmark=tags.get("mesabench.benchmark", "?"),
        method=tags.get("mesabench.method", "?"),
        config_hash=tags.get("mesabench.config_hash", "?"),
        seed=int(tags.get("mesabench.seed", -1)),
        status=status,
        version=tags.get("mesabench.version", "?"),
        start_time=datetime.fromtimestamp((start_ms or 0) / 1000, tz=timezone.utc),
        params=params,
        tags=tags,
        metrics={k: float(v) for k, v in metrics.items() if k.startswith("final/")},
    )


def read_runs(client, experiment_id: str, sqlite_db: Path | None = None) -> list[RunRecord]:
    """Every run of one experiment (benchmark).

    From a SQLite store the rows are read directly (read-only, three queries): MLflow's
    ``search_runs`` loads every run object and takes about 2 s per 1000 runs. Any other
    store, or a schema this reader does not know, goes through the MLflow client.
    """
    if sqlite_db is not None:
        try:
            return _read_sqlite(sqlite_db, experiment_id)
        except sqlite3.Error as err:
            log.info("reading %s through MLflow (%s)", sqlite_db, err)
    records, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        records.extend(
            _record(
                run.info.run_id,
                run.info.status,
                run.info.start_time,
                dict(run.data.tags),
                dict(run.data.params),
                run.data.metrics,
            )
            for run in page
        )
        token = page.token
        if not token:
            return records


def _read_sqlite(db: Path, experiment_id: str) -> list[RunRecord]:
    connection = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        runs = connection.execute(
            "SELECT run_uuid, status, start_time FROM runs "
            "WHERE experiment_id = ? AND lifecycle_stage = 'active'",
            (int(experiment_id),),
        ).fetchall()
        selected = "SELECT run_uuid FROM runs WHERE experiment_id = ?"
        by_run: dict[str, dict[str, dict]] = {
            r[0]: {"tags": {}, "params": {}, "metrics": {}} for r in runs
        }
        queries = {
            "tags": f"SELECT run_uuid, key, value FROM tags WHERE run_uuid IN ({selected})",
            "params": f"SELECT run_uuid, key, value FROM params WHERE run_uuid IN ({selected})",
            # MLflow stores NaN as value 0 with is_nan set.
            "metrics": "SELECT run_uuid, key, CASE WHEN is_nan THEN 'nan' ELSE value END "
            f"FROM latest_metrics WHERE key LIKE 'final/%' AND run_uuid IN ({selected})",
        }
        for kind, query in queries.items():
            for run_id, key, value in connection.execute(query, (int(experiment_id),)):
                if run_id in by_run:
                    by_run[run_id][kind][key] = value
    finally:
        connection.close()
    return [
        _record(run_id, status, start_time, **by_run[run_id]) for run_id, status, start_time in runs
    ]


def benchmarks_in_store(client) -> list[str]:
    """Names of the experiments that hold runs of this suite, sorted."""
    names = []
    for experiment in client.search_experiments():
        if experiment.name != "Default":
            names.append(experiment.name)
    return sorted(names)


# -- building -----------------------------------------------------------------------------
def default_columns(metric_names: Iterable[str]) -> list[str]:
    names = set(metric_names)
    if "final/ra" in names:
        return [c for c in CONTINUAL_COLUMNS if c in names]
    if "final/cumulative_accuracy" in names:
        return [c for c in ONLINE_COLUMNS if c in names]
    if "final/test_accuracy" in names:
        return ["final/test_accuracy"]
    return ["final/test_loss"]


def _config_keys(rows: Sequence[LeaderboardRow]) -> list[str]:
    """The run params whose values differ between rows of one method: what tells them apart."""
    keys: set[str] = set()
    by_method: dict[str, list[LeaderboardRow]] = {}
    for row in rows:
        by_method.setdefault(row.method, []).append(row)
    for group in by_method.values():
        if len(group) < 2:
            continue
        params = [row.runs[0].params for row in group]
        for key in set().union(*params):
            if key.split(".", 1)[-1] in _NOT_CONFIG:
                continue
            if len({p.get(key) for p in params}) > 1:
                keys.add(key)
    return sorted(keys)


def build_leaderboard(
    records: Sequence[RunRecord],
    benchmark: str,
    metric: str | None = None,
    group_by: Sequence[str] = ("method", "config_hash"),
    run_filter: RunFilter | None = None,
    extra_prefixes: Sequence[str] = (),
    references: bool = True,
) -> Leaderboard:
    """Rank the FINISHED runs in ``records`` that pass ``run_filter``."""
    run_filter = run_filter or RunFilter()
    excluded = {"FAILED": 0, "KILLED": 0, "RUNNING": 0}
    groups: dict[tuple[str, ...], LeaderboardRow] = {}
    for run in records:
        if run.method == "?" or not run_filter.admits(run):
            continue  # not a method run (e.g. a sweep's parent), or filtered out
        if run.status != "FINISHED":
            excluded[run.status] = excluded.get(run.status, 0) + 1
            continue
        key = tuple(run.group_value(k) for k in group_by)
        row = groups.setdefault(key, LeaderboardRow(run.method))
        row.runs.append(run)
    ours = list(groups.values())
    published = references_for(benchmark) if references else []
    names = {m for row in ours for r in row.runs for m in r.metrics}
    names |= {m for ref in published for m in ref.metrics}
    columns = default_columns(names)
    if metric is not None:
        columns = [metric, *[c for c in columns if c != metric]]
    for name in sorted(names):
        wanted = any(name.startswith(p) for p in extra_prefixes) and not name.endswith("_ci95")
        if wanted and name not in columns:
            columns.append(name)
    ranking = columns[0]
    higher = higher_is_better(ranking)
    rows = ours + [LeaderboardRow(ref.method, reference=ref) for ref in published]

    def rank_key(row: LeaderboardRow) -> tuple[float, int]:
        mean = row.stat(ranking)[0]
        if not math.isfinite(mean):
            return (math.inf, row.is_reference)  # missing or diverged: last
        return (-mean if higher else mean, row.is_reference)

    rows.sort(key=rank_key)
    config_keys = [k for k in _config_keys(ours) if k not in group_by]
    return Leaderboard(benchmark, ranking, higher, columns, rows, excluded, config_keys)


def leaderboard_from_store(tracker, benchmark: str, **options) -> Leaderboard:
    from benchmarks.tracking import sqlite_path

    experiment_id = tracker.experiment_id(benchmark, create=False)
    if experiment_id is None:
        return build_leaderboard([], benchmark, **options)
    records = read_runs(tracker.client, experiment_id, sqlite_path(tracker.uri))
    return build_leaderboard(records, benchmark, **options)
