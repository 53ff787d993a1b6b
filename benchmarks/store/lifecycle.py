"""A run's signs of life: its heartbeat, and how a run that lost it is found and closed.

Every run writes the tag ``mesabench.heartbeat`` (unix seconds) when it starts and then at
least every :func:`heartbeat_interval` seconds from a background thread, and records that
interval beside it. A run still RUNNING whose heartbeat is older than :data:`STALE_BEATS`
intervals is *stale*: its process died without closing it (SIGKILL, out of memory, a lost
node). The leaderboard shows stale runs apart and never ranks them; ``runs --stale
--mark-failed`` and every sweep start close them as FAILED with the reason "lost: no
heartbeat since T".
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone

log = logging.getLogger("mesabench")

HEARTBEAT_TAG = "mesabench.heartbeat"
#: The same moment for a person reading the MLflow UI (UTC, ISO 8601); the epoch tag is
#: the one the suite reads.
HEARTBEAT_UTC_TAG = "mesabench.heartbeat_utc"
INTERVAL_TAG = "mesabench.heartbeat_interval_s"
#: A run is stale once this many heartbeat intervals passed without one.
STALE_BEATS = 5
#: Environment variable that shortens the interval (the fault drills use a second).
INTERVAL_ENV = "MESABENCH_HEARTBEAT_SECONDS"
DEFAULT_INTERVAL = 30.0


def heartbeat_interval() -> float:
    """Seconds between heartbeats: ``MESABENCH_HEARTBEAT_SECONDS`` if set, else 30."""
    text = os.environ.get(INTERVAL_ENV, "")
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_INTERVAL
    return value if value > 0 else DEFAULT_INTERVAL


def heartbeat_tags(now: float | None = None, interval: float | None = None) -> dict[str, str]:
    """The tags of one heartbeat."""
    now = time.time() if now is None else now
    interval = heartbeat_interval() if interval is None else interval
    readable = datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return {HEARTBEAT_TAG: f"{now:.3f}", HEARTBEAT_UTC_TAG: readable,
            INTERVAL_TAG: f"{interval:g}"}  # fmt: skip


def last_heartbeat(tags: Mapping[str, str]) -> float | None:
    try:
        return float(tags[HEARTBEAT_TAG])
    except (KeyError, ValueError):
        return None


def is_stale(status: str, tags: Mapping[str, str], started_ms: int | None,
             now: float | None = None) -> bool:  # fmt: skip
    """Whether a run is RUNNING without a recent heartbeat.

    A run from before heartbeats existed has none: its start time stands in, so an old
    RUNNING run is stale too.
    """
    if status != "RUNNING":
        return False
    now = time.time() if now is None else now
    try:
        interval = float(tags.get(INTERVAL_TAG, DEFAULT_INTERVAL))
    except ValueError:
        interval = DEFAULT_INTERVAL
    beat = last_heartbeat(tags)
    if beat is None:
        beat = (started_ms or 0) / 1000
    return now - beat > STALE_BEATS * interval


HOST_TAG = "mesabench.host"
PID_TAG = "mesabench.pid"
PROCESS_START_TAG = "mesabench.process_start"


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (Linux: clock ticks since boot), to tell it from a later
    process that reuses its number; None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return fields[19]  # field 22 of stat(5), counted after the command name
    except (OSError, IndexError):
        return None


def process_tags() -> dict[str, str]:
    """Who runs this run: host, process id and its start, so that a silent run can be told
    apart as paused (its process still exists) or dead."""
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    start = _process_start(os.getpid())
    if start is not None:
        tags[PROCESS_START_TAG] = start
    return tags


def process_alive(tags: Mapping[str, str]) -> bool:
    """Whether the run's own process still exists on this host (stopped, swapping, under a
    debugger: silent, not dead). False where that cannot be known from here (another host,
    a run from before these tags): silence then stands for death, as before."""
    if tags.get(HOST_TAG) != socket.gethostname():
        return False
    try:
        pid = int(tags.get(PID_TAG, ""))
    except ValueError:
        return False
    if pid == os.getpid():  # ours: if its run went silent, nothing here drives it any more
        return False
    start = _process_start(pid)
    if start is None:
        return False
    return tags.get(PROCESS_START_TAG) in (None, start)


def is_lost(status: str, tags: Mapping[str, str], started_ms: int | None,
            now: float | None = None) -> bool:  # fmt: skip
    """Stale, and not a process of this host that is only paused: may be closed as lost."""
    return is_stale(status, tags, started_ms, now) and not process_alive(tags)


def lost_reason(tags: Mapping[str, str], started_ms: int | None) -> str:
    beat = last_heartbeat(tags) or (started_ms or 0) / 1000
    stamp = datetime.fromtimestamp(beat, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"lost: no heartbeat since {stamp}"


def mark_lost(client, run_id: str, reason: str) -> None:
    """Close a run whose process is gone as FAILED, with ``reason`` in its ``error`` tag."""
    client.set_tag(run_id, "error", reason)
    client.set_terminated(run_id, status="FAILED")


class Heartbeat:
    """A daemon thread that writes a run's heartbeat every interval until stopped.

    It only sets a tag: it shares nothing with the training loop, and a failed write (a
    store that is briefly away) is logged and tried again at the next beat.
    """

    def __init__(self, beat: Callable[[dict[str, str]], None], interval: float | None = None):
        self._beat = beat
        self.interval = heartbeat_interval() if interval is None else interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        self._write()
        self._thread = threading.Thread(target=self._loop, name="mesabench-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _write(self) -> None:
        try:
            self._beat(heartbeat_tags(interval=self.interval))
        except Exception as err:  # the next beat tries again; the run goes on
            log.warning("heartbeat not written: %s", str(err).splitlines()[0][:200])

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._write()
