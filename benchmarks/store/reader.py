"""Reading runs back from a tracking store for the results commands, cheaply.

Importing this module imports neither MLflow nor torch (together about 2 s and 800 MB), so
``leaderboard`` and ``compare`` answer in about a second. Three readers, one interface:

- :class:`SqliteReader`: a SQLite store read directly, read-only, a few SQL queries;
- :class:`RestReader`: an http(s) tracking server through its REST API (JSON over urllib);
- :class:`ClientReader`: any other store through the MLflow client.

All three return the same :class:`StoredRun` values (tests compare them). Only ``final/``
metrics are read: the leaderboard and ``compare`` use no others.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from sys import intern
from typing import Protocol

from benchmarks.store.bulk import (
    FEW_RUNS,
    OWN_TAGS,
    RUN_TAGS,
    ColumnMetrics,
    ConfigParams,
    MetricColumns,
    SharedParams,
    SharedTags,
)
from mesabench_core import RUN_LOCAL_SETTINGS, ConfigError

log = logging.getLogger("mesabench")

#: Page size for server reads (MLflow's largest allowed for a run search).
PAGE = 50_000
#: The configuration a run belongs to: runs of one share its plan's tags and params.
CONFIG_TAG = "mesabench.config_hash"
#: A ``tune`` run's role (JSON: a trial, or the selected configuration and its budget).
TUNING_TAG = "mesabench.tuning"
#: The method settings a preset or the user chose (``RunPlan.departures``), as a JSON
#: object of field name -> value as recorded: what a board shows beside a row.
DEPARTURES_TAG = "mesabench.departures"
#: How a run computed where its method chose for the device (``RunPlan.execution_choices``,
#: e.g. ``{"task_batching": "loop"}``), as a JSON object: the run's own, like its device.
EXECUTION_TAG = "mesabench.execution"
#: Indexes our SQLite stores add to MLflow's schema (``client.open_store``), each holding
#: every column its reads need (SQLite then never visits the table):
#: - tags by key and value, with the run: the runs of given cells are found without reading
#:   every run's tags, and one tag of every run is read in one pass (a board's seeds);
#: - final metrics by key, with the run and value: a board reads one metric of every run.
#: It replaces the (key, value) index of stores made before.
STORE_INDEXES = (
    "CREATE INDEX IF NOT EXISTS mesabench_tags_key_value_run ON tags (key, value, run_uuid)",
    "DROP INDEX IF EXISTS mesabench_tags_key_value",
    "CREATE INDEX IF NOT EXISTS mesabench_latest_metrics_key_run ON latest_metrics "
    "(key, run_uuid, value, is_nan)",
)


def default_tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` if set, else SQLite under ``./runs`` (absolute path)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{(Path.cwd() / 'runs' / 'mlflow.db').resolve()}"


def sqlite_path(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :])


#: The stores the suite reads and writes: SQLite (claims and readers use SQL on it), an
#: MLflow tracking server, or a database MLflow's SQLAlchemy store supports.
SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql")


def check_scheme(uri: str) -> None:
    """Refuse, in one line, a tracking URI of a scheme the suite cannot use (MLflow's own
    refusal is two tracebacks, one of them about its model registry)."""
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""
    sqlite_file = uri.startswith(("sqlite:///", "sqlite+"))
    if scheme not in SCHEMES or (scheme == "sqlite" and not sqlite_file):
        what = f"scheme {scheme + ':'!r}" if scheme else "no scheme"
        raise StoreUnreachable(
            f"tracking URI {uri!r} is not a store the suite can use ({what}); give "
            "sqlite:///PATH/mlflow.db, http(s)://HOST:PORT (an MLflow server), or a "
            "postgresql://, mysql:// or mssql:// database"
        )


def normalise_uri(uri: str) -> str:
    """A ``sqlite:///relative/path`` made absolute against the working directory (MLflow
    refuses relative SQLite paths); any other URI unchanged. A URI of a scheme the suite
    cannot use is refused (:func:`check_scheme`)."""
    check_scheme(uri)
    db = sqlite_path(uri)
    if db is None or db.is_absolute():
        return uri
    return f"sqlite:///{(Path.cwd() / db).resolve()}"


class StoreUnreachable(ConfigError):
    """The tracking store cannot be reached or opened (reported in one line, exit 2)."""


def folder_writable(db: Path) -> bool:
    """Whether a SQLite store's folder can be written: on a read-only filesystem (or a
    folder this user may not write) SQLite cannot create the lock and WAL-index files a
    normal read makes, so the store is read as immutable instead."""
    return os.access(db.parent, os.W_OK | os.X_OK)


def immutable_uri(db: Path) -> str:
    """The MLflow URI of a SQLite store read as an immutable file (SQLite's URI parameter):
    correct where nothing can write the folder, which is when it is used. The driver is
    named: MLflow makes the parent folder of a ``sqlite:///`` path, which for a ``file:``
    URI is a folder named ``file:`` in the working directory."""
    return f"sqlite+pysqlite:///file:{db}?immutable=1&uri=true"


def connect_read_only(db: Path) -> sqlite3.Connection:
    """A read-only connection to the store ``db``; as an immutable file where its folder
    cannot be written (then a write-ahead log left beside it cannot be read: said once)."""
    if folder_writable(db):
        return sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=30)
    wal = db.with_name(db.name + "-wal")
    if wal.exists() and wal.stat().st_size and db not in _WAL_WARNED:
        _WAL_WARNED.add(db)
        log.warning("store %s is on a read-only filesystem with an unmerged write-ahead log "
                    "(%s): its newest writes may be missing here", db, wal)  # fmt: skip
    return sqlite3.connect(f"{db.as_uri()}?immutable=1", uri=True, timeout=30)


_WAL_WARNED: set[Path] = set()


def check_sqlite_store(db: Path, writing: bool) -> None:
    """Refuse, in one line and at once, a SQLite store that cannot be opened: the path is a
    folder, the file is not a SQLite database, or (``writing``) the store or the folder a
    new one would go into cannot be written. (Such a store is no outage: retrying cannot
    help.)

    The file is only ever opened through SQLite: a plain ``open()`` and ``close()`` of a
    database file drops every POSIX lock this process holds on it (SQLite's own
    connections keep track of that), and another connection's write could then corrupt it.
    """
    uri = f"sqlite:///{db}"
    if db.is_dir():
        raise StoreUnreachable(f"store {uri}: {db} is a folder, not a SQLite file (name a file "
                               f"in it, e.g. sqlite:///{db / 'mlflow.db'})")  # fmt: skip
    if db.exists():
        connection = connect_read_only(db)
        try:
            connection.execute("PRAGMA schema_version").fetchone()
        except sqlite3.DatabaseError as err:
            if "not a database" in str(err):
                raise StoreUnreachable(f"store {uri}: {db} is not a SQLite database") from None
        finally:
            connection.close()
        if writing and not (folder_writable(db) and os.access(db, os.W_OK)):
            raise StoreUnreachable(f"store {uri} cannot be written: {db} or its folder is "
                                   "read-only (leaderboard, report, runs and compare can still "
                                   "read it)")  # fmt: skip
        return
    if writing:
        folder = db.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise StoreUnreachable(f"store {uri} cannot be created: {folder} is not a "
                                   "writable folder")  # fmt: skip


@dataclass(frozen=True)
class StoredRun:
    """One run as the results commands need it."""

    run_id: str
    name: str
    status: str
    start_ms: int | None
    #: A dict, or a :class:`~benchmarks.store.bulk.SharedTags` (a board's bulk read).
    tags: Mapping[str, str]
    #: A dict, or a :class:`SharedParams` (runs of one configuration share its mapping).
    params: Mapping[str, str]
    #: The run's ``final/`` metrics (NaN as float NaN): a dict, or a
    #: :class:`~benchmarks.store.bulk.ColumnMetrics` (a board's bulk read).
    metrics: Mapping[str, float]


#: A filter on one tag: runs whose tag ``key`` has one of ``values``.
TagFilter = tuple[str, Collection[str]]


@dataclass(frozen=True)
class Only:
    """What a reader may leave out, for speed on large stores: tags other than the suite's
    (``mesabench.*``, ``mlflow.parentRunId``) and ``tag_keys``, and the run-local settings
    (seed, device, data root params) unless ``run_local``. A reader may return more."""

    tag_keys: frozenset[str] = frozenset()
    run_local: bool = False


class StoreReader(Protocol):
    uri: str

    def experiment_id(self, name: str) -> str | None: ...

    def experiment_names(self) -> list[str]: ...

    def runs(
        self, experiment_id: str, where: TagFilter | None = None, only: Only | None = None
    ) -> list[StoredRun]:
        """The experiment's active runs (only those passing ``where``; all of each run, or
        at least what ``only`` keeps)."""
        ...

    def run(self, run_id: str) -> StoredRun | None: ...


class _Strings:
    """One copy of each repeated string: 100,000 runs share a few thousand distinct param
    keys and values, and holding each once keeps a large store's read in memory."""

    def __init__(self):
        self._seen: dict[str, str] = {}

    def __call__(self, value: str) -> str:
        return self._seen.setdefault(value, value)


class SqliteReader:
    """A SQLite store read directly (MLflow's schema), read-only; never creates the file. A
    schema it does not know (another MLflow version's) is read through the MLflow client."""

    #: A bulk read of at most this many runs asks for their tags by id; a larger one scans
    #: each tag's index (:meth:`_select_bulk`).
    few_runs = FEW_RUNS

    def __init__(self, db: Path):
        self.db = db
        self.uri = f"sqlite:///{db}"
        self._client_reader: ClientReader | None = None

    def _connect(self) -> sqlite3.Connection | None:
        """Read-only, unless the store holds a hot journal (a writer was killed mid-write):
        rolling it back needs a writable connection, which SQLite then does by itself."""
        if not self.db.exists():
            return None
        check_sqlite_store(self.db, writing=False)  # through SQLite only: no lock is lost
        connection = connect_read_only(self.db)
        try:
            connection.execute("SELECT count(*) FROM experiments").fetchone()
        except sqlite3.OperationalError as err:
            connection.close()
            if "readonly" not in str(err):
                raise
            return sqlite3.connect(self.db, timeout=30)
        return connection

    def _read(self, direct, through_client, empty):
        """``direct(connection)``; ``empty`` where there is no store yet; the same read
        through the MLflow client where SQL fails (a schema this reader does not know)."""
        try:
            connection = self._connect()
            if connection is None:
                return empty
            try:
                return direct(connection)
            finally:
                connection.close()
        except sqlite3.Error as err:
            log.info("reading %s through MLflow (%s)", self.db, err)
            if self._client_reader is None:
                from mlflow.tracking import MlflowClient

                uri = self.uri if folder_writable(self.db) else immutable_uri(self.db)
                self._client_reader = ClientReader(MlflowClient(uri), self.uri)
            return through_client(self._client_reader)

    def experiment_id(self, name: str) -> str | None:
        def direct(connection):
            row = connection.execute(
                "SELECT experiment_id FROM experiments WHERE name = ? AND lifecycle_stage = "
                "'active'",
                (name,),
            ).fetchone()
            return None if row is None else str(row[0])

        return self._read(direct, lambda reader: reader.experiment_id(name), None)

    def experiment_names(self) -> list[str]:
        def direct(connection):
            query = "SELECT name FROM experiments WHERE lifecycle_stage = 'active'"
            return [r[0] for r in connection.execute(query)]

        return self._read(direct, lambda reader: reader.experiment_names(), [])

    def runs(
        self, experiment_id: str, where: TagFilter | None = None, only: Only | None = None
    ) -> list[StoredRun]:
        return self._read(
            lambda connection: self._runs(connection, int(experiment_id), where, only),
            lambda reader: reader.runs(experiment_id, where, only),
            [],
        )

    def run(self, run_id: str) -> StoredRun | None:
        def direct(connection):
            found = self._select(connection, "run_uuid = ?", (run_id,))
            return found[0] if found else None

        return self._read(direct, lambda reader: reader.run(run_id), None)

    def _runs(
        self, connection, experiment: int, where: TagFilter | None, only: Only | None
    ) -> list[StoredRun]:
        condition, args = "experiment_id = ? AND lifecycle_stage = 'active'", [experiment]
        if where is not None:
            # The matching runs first, through the (key, value) index our stores carry
            # (STORE_INDEXES): a sweep's few cells cost the same in any size of store.
            key, values = where
            values = sorted(set(values))
            if not values:
                return []
            ids = [
                row[0]
                for row in connection.execute(
                    "SELECT t.run_uuid FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
                    f"WHERE t.key = ? AND t.value IN ({','.join('?' * len(values))}) AND "
                    "r.experiment_id = ? AND r.lifecycle_stage = 'active'",
                    (key, *values, experiment),
                )
            ]
            if not ids:
                return []
            condition, args = f"run_uuid IN ({','.join('?' * len(ids))})", ids
        if only is not None:
            return self._select_bulk(connection, condition, tuple(args), only)
        return self._select(connection, condition, tuple(args))

    def _select_bulk(self, connection, condition: str, args: tuple, only: Only) -> list[StoredRun]:
        """The runs matching ``condition`` as a board reads them (:mod:`.bulk`): per run,
        its :data:`~.bulk.RUN_TAGS` and those ``only`` names (every suite tag of a run not
        FINISHED: its heartbeat says whether it is stale); per configuration, the tags,
        params and metric names of one FINISHED run of it; metrics by column, when asked."""
        text = _Strings()
        rows = connection.execute(
            f"SELECT run_uuid, name, status, start_time FROM runs WHERE {condition}", args
        ).fetchall()
        own: dict[str, dict] = {r[0]: {} for r in rows}
        bucket_of, by_id = own.get, len(own) <= self.few_runs
        if by_id:  # a few runs (a filter's): asked for by id, not found by scanning
            query = ("SELECT value, run_uuid FROM tags WHERE key = ? AND run_uuid IN "
                     f"(SELECT run_uuid FROM runs WHERE {condition})")  # fmt: skip
        else:
            # Each distinct value once with its runs, in the (key, value, run_uuid) index's
            # order (STORE_INDEXES): ~10x fewer rows into Python than one per run and tag.
            query = "SELECT value, group_concat(run_uuid) FROM tags WHERE key = ? GROUP BY value"
        # A tag with one value that every run has (a suite version, a benchmark's headline,
        # often a code digest) is left to each configuration's carrier, which has it too:
        # not handed to 100,000 runs one dict at a time. The config hash, which finds the
        # carrier, stays each run's.
        common: set[str] = set()
        for key in sorted({*RUN_TAGS, *only.tag_keys}):
            key = intern(key)
            groups = connection.execute(query, (key, *args) if by_id else (key,)).fetchall()
            if (key != CONFIG_TAG and len(groups) == 1
                    and own.keys() <= set(groups[0][1].split(","))):  # fmt: skip
                common.add(key)
                continue
            for value, run_ids in groups:
                value = text(value)
                for run_id in run_ids.split(","):
                    bucket = bucket_of(run_id)
                    if bucket is not None:
                        bucket[key] = value
        carrier = _carriers(rows, own)
        unfinished = [r[0] for r in rows if r[2] != "FINISHED"]
        suite_tags = ("(key >= 'mesabench.' AND key < 'mesabench/') OR key IN "
                      f"({','.join('?' * (1 + len(only.tag_keys)))})")  # fmt: skip
        suite_args = ("mlflow.parentRunId", *sorted(only.tag_keys))

        def suite_tags_of(ids: list[str]):
            """The suite's tags (and a filter's) of ``ids``: (run, key, value) rows."""
            for chunk in _chunks(ids):
                query = (f"SELECT run_uuid, key, value FROM tags WHERE run_uuid IN "
                         f"({','.join('?' * len(chunk))}) AND ({suite_tags})")  # fmt: skip
                yield from connection.execute(query, (*chunk, *suite_args))

        carriers = list(carrier.values())
        config_tags: dict[str, dict] = {run_id: {} for run_id in carriers}
        for run_id, key, value in suite_tags_of(carriers):
            config_tags[run_id][intern(key)] = text(value)
        full = _params_of(connection, carriers, text)
        names: dict[str, set] = {run_id: set() for run_id in carriers}
        for chunk in _chunks(carriers):
            # One row per carrier (metric keys hold no comma: MLflow's names are letters,
            # digits and _-./ and space).
            query = (f"SELECT run_uuid, group_concat(key) FROM latest_metrics WHERE run_uuid "
                     f"IN ({','.join('?' * len(chunk))}) AND key >= 'final/' AND "
                     "key < 'final0' GROUP BY run_uuid")  # fmt: skip
            for run_id, keys in connection.execute(query, chunk):
                names[run_id].update(map(intern, keys.split(",")))
        # A metric some run logged that no carrier did (a GPU's peak memory, a metric a later
        # version added): added to the names of each configuration with a run that has it.
        extra = set(_final_metric_keys(connection)) - set().union(*names.values())
        for run_id, key, value in suite_tags_of(unfinished):
            own[run_id].setdefault(intern(key), value)
        # A run's own seed, device and data root, where asked for.
        local = (_run_local_params(connection, condition, args, own, text) if only.run_local
                 else {})  # fmt: skip
        shared = _config_params(carrier, full)
        columns = MetricColumns(self._connect, own, self.few_runs)
        for name in sorted(extra):
            for run_id in columns.column(name):
                config = own[run_id].get(CONFIG_TAG, run_id)
                names[carrier[config]].add(intern(name))
        tuples: dict[tuple, tuple] = {}  # one tuple per distinct set of metric names
        metric_names = {config: tuples.setdefault(t, t) for config, run_id in carrier.items()
                        for t in [tuple(sorted(names[run_id]))]}  # fmt: skip
        own_keys = (OWN_TAGS | only.tag_keys) - common
        runs = []
        for run_id, name, status, start in rows:
            config = own[run_id].get(CONFIG_TAG, run_id)
            # A run not FINISHED had every suite tag of its own read: none is another run's.
            shared_tags = config_tags[carrier[config]] if status == "FINISHED" else {}
            runs.append(StoredRun(
                run_id, name or "", status, start,
                SharedTags(shared_tags, own[run_id], own_keys),
                SharedParams(shared[config], local.get(run_id, _NO_PARAMS)),
                ColumnMetrics(run_id, metric_names[config], columns),
            ))  # fmt: skip
        return runs

    @staticmethod
    def _select(connection, condition: str, args: tuple) -> list[StoredRun]:
        """The runs matching ``condition``, their tags and ``final/`` metrics, and their
        params: each configuration's read once (from one FINISHED run of it) and only the
        run-local settings per run, which holds 100,000 runs in memory and time."""
        text = _Strings()
        rows = connection.execute(
            f"SELECT run_uuid, name, status, start_time FROM runs WHERE {condition}", args
        ).fetchall()
        tags: dict[str, dict] = {r[0]: {} for r in rows}
        metrics: dict[str, dict] = {r[0]: {} for r in rows}
        selected = f"SELECT run_uuid FROM runs WHERE {condition}"
        query = f"SELECT run_uuid, key, value FROM tags WHERE run_uuid IN ({selected})"
        for run_id, key, value in connection.execute(query, args):
            bucket = tags.get(run_id)
            if bucket is not None:  # keys repeat in every run: one copy of each
                bucket[intern(key)] = value
        # MLflow stores NaN as value 0 with is_nan set.
        query = (
            "SELECT run_uuid, key, CASE WHEN is_nan THEN 'nan' ELSE value END FROM "
            f"latest_metrics WHERE key >= 'final/' AND key < 'final0' AND run_uuid IN ({selected})"
        )
        for run_id, key, value in connection.execute(query, args):
            bucket = metrics.get(run_id)
            if bucket is not None:
                bucket[intern(key)] = float(value)
        carrier = _carriers(rows, tags)
        full = _params_of(connection, list(carrier.values()), text)
        own = _run_local_params(connection, condition, args, tags, text)
        shared = _config_params(carrier, full)
        runs = []
        for run_id, name, status, start in rows:
            config = tags[run_id].get("mesabench.config_hash", run_id)
            params = (full[run_id] if run_id in full
                      else SharedParams(shared[config], own.get(run_id, _NO_PARAMS)))  # fmt: skip
            runs.append(StoredRun(run_id, name or "", status, start, tags[run_id], params,
                                  metrics[run_id]))  # fmt: skip
        return runs


def _final_metric_keys(connection) -> list[str]:
    """The distinct ``final/`` metric keys of the store: one index seek per key (a loose
    index scan over MLflow's (key, ...) primary key), not a walk over every run's metrics,
    which ``SELECT DISTINCT`` takes."""
    query = ("WITH RECURSIVE k(key) AS (SELECT min(key) FROM latest_metrics WHERE key >= "
             "'final/' AND key < 'final0' UNION ALL SELECT (SELECT min(key) FROM "
             "latest_metrics WHERE key > k.key AND key < 'final0') FROM k WHERE k.key IS NOT "
             "NULL) SELECT key FROM k WHERE key IS NOT NULL")  # fmt: skip
    return [row[0] for row in connection.execute(query)]


def _carriers(rows: list[tuple], tags: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """One run per configuration that carries its params: a FINISHED one where there is one
    (it logged them all); a run without a config hash (a sweep's parent) carries its own."""
    carrier: dict[str, str] = {}
    for run_id, *_ in sorted(rows, key=lambda r: r[2] != "FINISHED"):
        carrier.setdefault(tags[run_id].get(CONFIG_TAG, run_id), run_id)
    return carrier


def _params_of(connection, ids: list[str], text: _Strings) -> dict[str, dict[str, str]]:
    """Every param of each of ``ids``."""
    full: dict[str, dict[str, str]] = {run_id: {} for run_id in ids}
    for chunk in _chunks(ids):
        # Each (key, value) once with the runs that have it: configurations share most of
        # their settings, so ~4x fewer rows come into Python than one per run and param.
        query = (f"SELECT key, value, group_concat(run_uuid) FROM params WHERE run_uuid IN "
                 f"({','.join('?' * len(chunk))}) GROUP BY key, value")  # fmt: skip
        for key, value, run_ids in connection.execute(query, chunk):
            key, value = text(key), text(value)
            for run_id in run_ids.split(","):
                full[run_id][key] = value
    return full


def _run_local_params(connection, condition: str, args: tuple, runs: Collection[str],
                      text: _Strings) -> dict[str, dict[str, str]]:  # fmt: skip
    """The :data:`RUN_LOCAL_SETTINGS` of the runs matching ``condition`` (of those in
    ``runs``), by run; a run with none is absent."""
    local: dict[str, dict[str, str]] = {}
    query = (f"SELECT run_uuid, key, value FROM params WHERE key IN "
             f"({','.join('?' * len(RUN_LOCAL_SETTINGS))}) AND run_uuid IN "
             f"(SELECT run_uuid FROM runs WHERE {condition})")  # fmt: skip
    for run_id, key, value in connection.execute(query, (*RUN_LOCAL_SETTINGS, *args)):
        if run_id in runs:
            local.setdefault(run_id, {})[text(key)] = text(value)
    return local


def _config_params(carrier: Mapping[str, str],
                   full: Mapping[str, Mapping[str, str]]) -> dict[str, ConfigParams]:  # fmt: skip
    """Each configuration's params, without its carrier's own seed, device and data root:
    each run has its own (or, where not read, none rather than another run's)."""
    return {config: ConfigParams((k, v) for k, v in full[run_id].items()
                                 if k not in RUN_LOCAL_SETTINGS)
            for config, run_id in carrier.items()}  # fmt: skip


#: The run-local params of a run none were read for (one mapping for all; never written).
_NO_PARAMS: dict[str, str] = {}


def _chunks(items: list, size: int = 500):
    """``items`` in slices SQLite's parameter limit takes."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


class RestReader:
    """A tracking server through its REST API: plain JSON, no MLflow import on our side."""

    def __init__(self, uri: str, timeout: float = 60.0):
        self.uri = uri.rstrip("/")
        self.timeout = timeout

    def _call(self, path: str, body: dict | None = None) -> dict:
        url = f"{self.uri}/api/2.0/mlflow/{path}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            url, data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return {}
            raise StoreUnreachable(
                f"tracking server {self.uri}: HTTP {err.code} on {path}"
            ) from None
        except (OSError, ValueError) as err:
            problem = getattr(err, "reason", err)
            raise StoreUnreachable(
                f"tracking server {self.uri} is not reachable ({problem}); start it or pass "
                "another --tracking-uri"
            ) from None

    def experiment_id(self, name: str) -> str | None:
        from urllib.parse import quote

        found = self._call(f"experiments/get-by-name?experiment_name={quote(name)}")
        experiment = found.get("experiment")
        if not experiment or experiment.get("lifecycle_stage") != "active":
            return None
        return str(experiment["experiment_id"])

    def experiment_names(self) -> list[str]:
        names, token = [], None
        while True:
            body = {"max_results": 1000, **({"page_token": token} if token else {})}
            page = self._call("experiments/search", body)
            names += [e["name"] for e in page.get("experiments", [])]
            token = page.get("next_page_token")
            if not token:
                return names

    def runs(
        self, experiment_id: str, where: TagFilter | None = None, only: Only | None = None
    ) -> list[StoredRun]:
        if where is None:
            return self._search(experiment_id, "")
        key, values = where
        # MLflow's filter has no OR: one query per value (a sweep's own cells, a few).
        return [
            run
            for value in sorted(set(values))
            for run in self._search(experiment_id, f"tags.`{key}` = '{value}'")
        ]

    def run(self, run_id: str) -> StoredRun | None:
        found = self._call(f"runs/get?run_id={run_id}")
        return _from_json(found["run"], _Strings()) if found.get("run") else None

    def _search(self, experiment_id: str, filter_string: str) -> list[StoredRun]:
        runs, token, text = [], None, _Strings()
        while True:
            body = {
                "experiment_ids": [experiment_id],
                "filter": filter_string,
                "max_results": PAGE,
                "run_view_type": "ACTIVE_ONLY",
                **({"page_token": token} if token else {}),
            }
            page = self._call("runs/search", body)
            runs += [_from_json(run, text) for run in page.get("runs", [])]
            token = page.get("next_page_token")
            if not token:
                return runs


def _from_json(run: dict, text: _Strings) -> StoredRun:
    info, data = run["info"], run.get("data", {})

    def pairs(kind: str) -> dict[str, str]:
        return {text(p["key"]): text(p.get("value", "")) for p in data.get(kind, [])}

    metrics = {
        text(m["key"]): float(m["value"])
        for m in data.get("metrics", [])
        if m["key"].startswith("final/")
    }
    start = info.get("start_time")
    return StoredRun(
        info["run_id"],
        info.get("run_name", ""),
        info["status"],
        int(start) if start is not None else None,
        pairs("tags"),
        pairs("params"),
        metrics,
    )


class ClientReader:
    """Any other store, through an MLflow client (imported by whoever made it)."""

    def __init__(self, client, uri: str = ""):
        self.client, self.uri = client, uri

    def experiment_id(self, name: str) -> str | None:
        experiment = self.client.get_experiment_by_name(name)
        return None if experiment is None else experiment.experiment_id

    def experiment_names(self) -> list[str]:
        return [e.name for e in self.client.search_experiments()]

    def runs(
        self, experiment_id: str, where: TagFilter | None = None, only: Only | None = None
    ) -> list[StoredRun]:
        filters = [""] if where is None else [f"tags.`{where[0]}` = '{v}'" for v in set(where[1])]
        found = []
        for filter_string in filters:
            token = None
            while True:
                page = self.client.search_runs(
                    [experiment_id], filter_string, max_results=1000, page_token=token
                )
                found += [self._stored(run) for run in page]
                token = page.token
                if not token:
                    break
        return found

    def run(self, run_id: str) -> StoredRun | None:
        try:
            return self._stored(self.client.get_run(run_id))
        except Exception:  # MLflow raises its own exception for an unknown id
            return None

    @staticmethod
    def _stored(run) -> StoredRun:
        metrics = {k: float(v) for k, v in run.data.metrics.items() if k.startswith("final/")}
        return StoredRun(
            run.info.run_id,
            run.info.run_name or "",
            run.info.status,
            run.info.start_time,
            dict(run.data.tags),
            dict(run.data.params),
            metrics,
        )


def open_reader(uri: str | None = None, client=None) -> StoreReader:
    """The cheapest reader for ``uri`` (default: the suite's default store). ``client``, an
    MLflow client already open on it, serves stores that are neither SQLite nor http(s)."""
    uri = normalise_uri(uri or default_tracking_uri())
    db = sqlite_path(uri)
    if db is not None:
        return SqliteReader(db)
    if uri.startswith(("http://", "https://")):
        return RestReader(uri)
    if client is None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
    return ClientReader(client, uri)
