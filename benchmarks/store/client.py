"""Opening a store: the client every writer uses, which waits out a locked SQLite store
and a tracking server away (within its patience), and says when the disk is full; a new
SQLite store's schema created under a lock, then tuned (write-ahead log)."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from benchmarks.store.mlflow_settings import configure_mlflow
from benchmarks.store.reader import (
    StoreUnreachable,
    check_sqlite_store,
    default_tracking_uri,
    folder_writable,
    immutable_uri,
    normalise_uri,
    sqlite_path,
)

log = logging.getLogger("mesabench")
#: How long a write waits out other writers holding the SQLite lock (parallel sweeps).
LOCK_RETRY_SECONDS = 60.0
#: How long a tracking server may take to answer its health check before we give up.
SERVER_PROBE_SECONDS = 8.0


def probe_server(uri: str, timeout: float = SERVER_PROBE_SECONDS) -> None:
    """Fail fast, in one line, when an http(s) tracking server does not answer."""
    import urllib.error
    import urllib.request

    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            if response.status == 200:
                return
            problem = f"HTTP {response.status}"
    except urllib.error.HTTPError as err:
        problem = f"HTTP {err.code}"
    except (OSError, ValueError) as err:
        problem = str(getattr(err, "reason", err))
    raise StoreUnreachable(
        f"tracking server {uri} is not reachable ({problem}); start it or pass another "
        "--tracking-uri"
    )


#: How long calls wait out a tracking server that does not answer (retrying with backoff)
#: before the run fails with the reason. ``MESABENCH_SERVER_PATIENCE_S`` changes it (the
#: fault drills shorten it); it changes no result, only how long a run waits.
SERVER_PATIENCE_SECONDS = 600.0
#: Signs of a server that is away (refused, reset, timed out, or a proxy's 502-504), as
#: MLflow's HTTP client words them.
_OUTAGE_SIGNS = (
    "Max retries exceeded", "Connection refused", "Connection aborted", "Connection reset",
    "Failed to establish a new connection", "Read timed out", "RemoteDisconnected",
    "502 Server Error", "503 Server Error", "504 Server Error", "too many 50",
)  # fmt: skip


def server_patience() -> float:
    return float(os.environ.get("MESABENCH_SERVER_PATIENCE_S", SERVER_PATIENCE_SECONDS))


def out_of_space(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it) is a write that found the store's disk full."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "database or disk is full" in str(err) or "No space left on device" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


class OutOfSpace(RuntimeError):
    """The store's disk filled while a run recorded. The run is closed FAILED with the
    reason (``closed``), or, where even that could not be written, left to show as lost
    once its heartbeat is stale; the metrics it could not write are kept elsewhere (the
    message says where)."""

    def __init__(self, message: str, closed: bool):
        super().__init__(message)
        self.closed = closed


class ServerGone(StoreUnreachable):
    """The tracking server stayed away longer than the patience allows."""


class RetryingClient:
    """An ``MlflowClient`` whose calls wait out other writers and short server outages.

    SQLite admits one writer at a time; with parallel runs a write can find the lock taken
    for longer than the driver waits. A tracking server may restart or drop off the network
    for minutes. Either way the call is retried with backoff (up to a minute for a lock,
    :func:`server_patience` for a server), which loses nothing: every call we make is
    idempotent or fails before it writes, and metrics wait in the tracker's buffer. A server
    away for longer raises :class:`ServerGone`; later calls then try once and fail at once,
    so that recording the failure does not wait the whole patience again.
    """

    def __init__(self, client: MlflowClient):
        self._client = client
        self._gone = False
        self._outage_lock = threading.Lock()
        self._away_since: float | None = None

    def __getattr__(self, name: str):
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def call(*args, **kwargs):
            delay, began = 0.05, time.monotonic()
            while True:
                try:
                    result = attribute(*args, **kwargs)
                except Exception as err:
                    text = str(err)
                    if "database is locked" in text:
                        if time.monotonic() - began > LOCK_RETRY_SECONDS:
                            raise
                    elif any(sign in text for sign in _OUTAGE_SIGNS):
                        self._server_away(text)
                    else:
                        raise
                    time.sleep(delay)
                    delay = min(delay * 2, 2.0 if "locked" in text else 15.0)
                    continue
                self._server_back()
                return result

        return call

    def _server_away(self, text: str) -> None:
        with self._outage_lock:
            now = time.monotonic()
            if self._away_since is None:
                self._away_since = now
                log.warning("tracking server not answering; retrying for up to %.0f s (%s)",
                            server_patience(), text.splitlines()[0][:160])  # fmt: skip
            away = now - self._away_since
            if self._gone or away > server_patience():
                self._gone = True
                raise ServerGone(
                    f"tracking server unreachable for {away:.0f} s (patience "
                    f"{server_patience():.0f} s): {text.splitlines()[0][:160]}"
                )

    def _server_back(self) -> None:
        if self._away_since is None:
            return
        with self._outage_lock:
            if self._away_since is not None:
                log.warning(
                    "tracking server back after %.0f s", time.monotonic() - self._away_since
                )
            self._away_since, self._gone = None, False


def open_store(uri: str | None = None) -> RetryingClient:
    """A client on ``uri`` (default: the suite's default store) whose store exists and
    whose schema is complete.

    MLflow creates a SQLite store's tables on first use; two processes doing that at once
    (a sweep's first runs, the UI opened beside them) collide mid-migration. Creating the
    schema while holding an exclusive lock on the store's folder makes the first opener
    do it and the others wait, then find it done.
    """
    configure_mlflow()
    uri = normalise_uri(uri or default_tracking_uri())
    if uri.startswith(("http://", "https://")):
        probe_server(uri)
    db = sqlite_path(uri)
    if db is None:
        return RetryingClient(MlflowClient(tracking_uri=uri))
    check_sqlite_store(db, writing=True)
    db.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(db.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        new = not db.exists()
        client = MlflowClient(tracking_uri=uri)  # runs the schema migrations if needed
        if new:
            # MLflow makes an empty "Default" experiment in every new store; ours hold one
            # experiment per benchmark, and an empty extra one in the UI only puzzles.
            client.delete_experiment(client.get_experiment("0").experiment_id)
        _tune_sqlite(db)
    finally:
        os.close(folder)  # closing releases the lock
    return RetryingClient(client)


def open_for_reading(uri: str | None = None) -> RetryingClient:
    """A client for commands that only read (``report``, ``runs``): a SQLite store whose
    folder cannot be written (a read-only filesystem, an archived store) is opened as an
    immutable file, without the schema check and tuning :func:`open_store` writes; any
    other store as :func:`open_store` opens it."""
    uri = normalise_uri(uri or default_tracking_uri())
    db = sqlite_path(uri)
    if db is not None and db.exists() and not folder_writable(db):
        check_sqlite_store(db, writing=False)
        return RetryingClient(MlflowClient(tracking_uri=immutable_uri(db)))
    return open_store(uri)


def _tune_sqlite(db: Path) -> None:
    """Two changes to a SQLite store, both kept in the file and both optional:

    - SQLite's write-ahead log: readers (the leaderboard, the UI) then never wait for a
      sweep's writers, nor writers for them, and a commit costs one append. Not possible on
      some network filesystems (no shared memory): the store then keeps its rollback
      journal, which is correct, only slower;
    - indexes of tags by key and value and of final metrics by key
      (``store_reader.STORE_INDEXES``), so that a sweep finds its own cells' runs at a cost
      that does not grow with the store, and a board reads one tag or metric of every run
      in one pass. MLflow ignores indexes it did not make.
    """
    import sqlite3

    from benchmarks.store.reader import STORE_INDEXES

    try:
        with sqlite3.connect(db, timeout=LOCK_RETRY_SECONDS) as connection:
            if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                connection.execute("PRAGMA journal_mode=WAL")
            for statement in STORE_INDEXES:
                connection.execute(statement)
        connection.close()
    except sqlite3.Error as err:
        log.info("store %s left as it is (%s)", db, err)
