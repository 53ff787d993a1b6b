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
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone

log = logging.getLogger("mesabench")

HEARTBEAT_TAG = "mesabench.heartbeat"
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
    return {HEARTBEAT_TAG: f"{now:.3f}", INTERVAL_TAG: f"{interval:g}"}


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
