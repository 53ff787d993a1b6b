"""Runs read in bulk for a board: what a configuration shares is held once, and each final
metric is read as one column for every run when it is first asked for.

A board of 100,000 runs reads ~20 tags, ~40 params and ~25 final metrics per run: 8.5
million values, of which a board shows a few per run. Runs of one configuration (one
``mesabench.config_hash``) share their plan's tags and params, so those are read once per
configuration (:class:`SharedTags`, :class:`SharedParams`); only the tags that
can differ between its runs (:data:`RUN_TAGS`) are read per run. Metrics are read by name
(:class:`MetricColumns`): the columns a board ranks and shows, each one SQL query over an
index, not every metric of every run.
"""

from __future__ import annotations

import contextlib
import gc
import sqlite3
from collections.abc import Callable, Collection, Iterator, Mapping


class SharedParams(Mapping[str, str]):
    """A run's params: its configuration's (one mapping shared by every run of that config
    hash, read once) with its own :data:`RUN_LOCAL_SETTINGS` on top."""

    __slots__ = ("shared", "own")

    def __init__(self, shared: dict[str, str], own: dict[str, str]):
        self.shared, self.own = shared, own

    def __getitem__(self, key: str) -> str:
        return self.own[key] if key in self.own else self.shared[key]

    # Mapping's own get and ``in`` go through __getitem__ and a raised KeyError for each
    # key a run lacks (a board asks every run for ``evaluation.*``): dict lookups instead.
    def __contains__(self, key: object) -> bool:
        return key in self.own or key in self.shared

    def get(self, key: str, default=None):
        own = self.own
        return own[key] if key in own else self.shared.get(key, default)

    def __iter__(self):
        yield from self.own
        yield from (k for k in self.shared if k not in self.own)

    def __len__(self) -> int:
        return len(self.shared) + sum(1 for k in self.own if k not in self.shared)

    def __repr__(self) -> str:
        return repr(dict(self))


def plain_params(params: Mapping[str, str]) -> Mapping[str, str]:
    """``params`` as a plain dict where it is one configuration's shared mapping with no
    run-local settings on top (what a board reads of one run per row, key by key)."""
    if isinstance(params, SharedParams) and not params.own:
        return params.shared
    return params


class ConfigParams(dict):
    """One configuration's params (shared by its runs' :class:`SharedParams`), with a memo
    for what is computed from them once for all those runs (a board's compared settings)."""

    __slots__ = ("memo",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.memo: dict = {}


#: The tags read for every run of a bulk read: those that tell runs of one configuration
#: apart (seed, the suite version and a plugin's code that made it, where it came from, a
#: tune's role) and those that group runs. A configuration's other tags are its carrier's.
RUN_TAGS = (
    "mesabench.seed", "mesabench.config_hash", "mesabench.method", "mesabench.version",
    "mesabench.method_code", "mesabench.tuning", "mesabench.departures", "mlflow.parentRunId",
    # a bundle's runs (benchmarks.store.bundles) and what verify found of them
    "mesabench.imported_from", "mesabench.imported_at", "mesabench.bundle_digest",
    "mesabench.source_run", "mesabench.verified",
    # the protocol linter's (benchmarks.planning.lint): data files can differ between seeds
    "mesabench.lint", "mesabench.selected_on", "mesabench.data_digest",
    # what a suite version records beside an unchanged plan (a board reads the newest run's)
    "mesabench.headline", "mesabench.metrics", "mesabench.default_settings",
    "mesabench.benchmark_source",
)  # fmt: skip
#: Tags of one run's process and machine, which no board of FINISHED runs reads: never
#: taken from the configuration's carrier (a run not FINISHED has its own, read whole).
PROCESS_TAGS = (
    "mesabench.heartbeat", "mesabench.heartbeat_utc", "mesabench.heartbeat_interval_s",
    "mesabench.host", "mesabench.pid", "mesabench.process_start", "mesabench.machine",
    "mesabench.torch_version", "mesabench.execution",
)  # fmt: skip
#: Tags a run has only if read for it: never its configuration's.
OWN_TAGS = frozenset(RUN_TAGS + PROCESS_TAGS)
_NAN = float("nan")


class SharedTags(Mapping[str, str]):
    """A run's tags: its configuration's (one mapping shared by its runs, read from one
    FINISHED run of it) with the run's own on top. ``own_keys`` are the keys read for each
    run (:data:`RUN_TAGS`, :data:`PROCESS_TAGS` and a filter's): absent from ``own``, the
    run has none, whatever its configuration's carrier has."""

    __slots__ = ("shared", "own", "own_keys")

    def __init__(self, shared: Mapping[str, str], own: dict[str, str],
                 own_keys: frozenset[str] = OWN_TAGS):  # fmt: skip
        self.shared, self.own, self.own_keys = shared, own, own_keys

    def __getitem__(self, key: str) -> str:
        if key in self.own:
            return self.own[key]
        if key in self.own_keys:  # read for the run, or not at all: never another run's
            raise KeyError(key)
        return self.shared[key]

    def __contains__(self, key: object) -> bool:
        return key in self.own or (key not in self.own_keys and key in self.shared)

    def get(self, key: str, default=None):
        # Called for several tags of every run of a board: dict lookups only.
        own = self.own
        if key in own:
            return own[key]
        return default if key in self.own_keys else self.shared.get(key, default)

    def __iter__(self) -> Iterator[str]:
        yield from self.own
        yield from (k for k in self.shared if k not in self.own and k not in self.own_keys)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(dict(self))


#: A read of at most this many runs asks for their rows by id; a larger one scans an
#: index and keeps its own runs' rows (:class:`MetricColumns`, ``SqliteReader``).
FEW_RUNS = 500


class MetricColumns:
    """The final metrics of a read's runs, one metric (for all of them) at a time: read
    when first asked for, through ``connect`` (a new read-only connection), and kept."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], ids: Collection[str],
                 few_runs: int = FEW_RUNS):  # fmt: skip
        self._connect, self._few_runs = connect, few_runs
        self._ids = ids if isinstance(ids, (set, frozenset)) else set(ids)
        self._columns: dict[str, dict[str, float]] = {}

    def column(self, name: str) -> dict[str, float]:
        found = self._columns.get(name)
        if found is None:
            found = self._columns[name] = self._read(name)
        return found

    def _read(self, name: str) -> dict[str, float]:
        if not name.startswith("final/"):  # a reader's runs carry their final metrics only
            return {}
        # MLflow stores NaN as value 0 with is_nan set. Over the (key, run_uuid) index, all
        # runs that logged the metric, kept where they are this read's (a read of a few
        # runs asks for them by id instead).
        query = "SELECT run_uuid, value FROM latest_metrics WHERE key = ? AND is_nan = ?"
        ids, args = self._ids, [name]
        if len(ids) <= self._few_runs:
            query += f" AND run_uuid IN ({','.join('?' * len(ids))})"
            args += list(ids)
        connection = self._connect()
        if connection is None:  # the store is gone since the runs were read
            return {}
        try:
            # The rows straight into a dict (built in C), NaN rows apart (they are few).
            found = dict(connection.execute(query, (args[0], False, *args[1:])))
            found.update((run_id, _NAN) for run_id, _ in
                         connection.execute(query, (args[0], True, *args[1:])))  # fmt: skip
        finally:
            connection.close()
        if not found.keys() <= ids:  # other experiments' runs logged it too
            found = {run_id: found[run_id] for run_id in found.keys() & ids}
        return found


class ColumnMetrics(Mapping[str, float]):
    """One run's final metrics, read from the shared :class:`MetricColumns`. ``names`` are
    its configuration's (one tuple shared by its runs): iterating checks which this run has
    (which reads those columns); looking one metric up reads only that one."""

    __slots__ = ("run_id", "names", "columns")

    def __init__(self, run_id: str, names: tuple[str, ...], columns: MetricColumns):
        self.run_id, self.names, self.columns = run_id, names, columns

    def __getitem__(self, name: str) -> float:
        return self.columns.column(name)[self.run_id]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.run_id in self.columns.column(name)

    def get(self, name: str, default=None):
        return self.columns.column(name).get(self.run_id, default)

    def __iter__(self) -> Iterator[str]:
        return (n for n in self.names if self.run_id in self.columns.column(n))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(dict(self))


def values_of(metrics: list[Mapping[str, float]], name: str,
              columns: MetricColumns | None = None) -> list[float | None]:  # fmt: skip
    """The metric ``name`` of each of ``metrics`` (None where a run has none): one column
    read where they are bulk-read runs of one read (``columns``, from
    :func:`shared_columns`, where the caller keeps it), not a lookup through each mapping."""
    if columns is None:
        columns = shared_columns(metrics)
    if columns is not None:
        column = columns.column(name)
        return [column.get(m.run_id) for m in metrics]
    return [m.get(name) for m in metrics]


def shared_columns(metrics: list[Mapping[str, float]]) -> MetricColumns | None:
    """The one :class:`MetricColumns` all of ``metrics`` read from, or None."""
    first = metrics[0] if metrics else None
    if isinstance(first, ColumnMetrics) and all(
        isinstance(m, ColumnMetrics) and m.columns is first.columns for m in metrics
    ):
        return first.columns
    return None


def param_keys(params: Collection[Mapping[str, str]]) -> set[str]:
    """The param names over many runs' ``params``: each configuration's shared mapping
    walked once where the runs share one (``SharedParams``), not once per run."""
    return _keys_over(params, lambda m: (m.own, m.shared) if isinstance(m, SharedParams)
                      else None)  # fmt: skip


def metric_names(metrics: Collection[Mapping[str, float]]) -> set[str]:
    """The metric names over many runs' ``metrics``: from each configuration's names where
    the runs were read in bulk (one tuple per configuration, not one walk per run)."""
    return _keys_over(metrics, lambda m: ((), m.names) if isinstance(m, ColumnMetrics)
                      else None)  # fmt: skip


def _keys_over(mappings: Collection[Mapping], parts) -> set[str]:
    """The keys over ``mappings``; ``parts(mapping)`` is (its own keys, a collection many
    mappings share, walked once) or None (the mapping walked whole)."""
    keys: set[str] = set()
    seen: set[int] = set()
    for mapping in mappings:
        split = parts(mapping)
        if split is None:
            keys.update(mapping)
            continue
        own, shared = split
        keys.update(own)
        if id(shared) not in seen:
            seen.add(id(shared))
            keys.update(shared)
    return keys


@contextlib.contextmanager
def cycles_collected_after():
    """Python's cycle collector paused while a board reads and builds: a 100,000-run board
    allocates millions of objects, and each time the heap grows by a quarter the collector
    walks all of it (13% of the board's time). Whatever cycles the board made are collected
    when it is done."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
