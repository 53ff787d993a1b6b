"""A hold point: a run that waits, alive, at a known place, for whoever watches it.

A fault drill must catch a run mid-training (to kill, stop or interrupt it there), and a
run that simply trains long enough to be caught makes the drill a bet on the machine's
speed: a loaded machine or a fast one loses it. With ``MESABENCH_HOLD_FILE`` naming a file,
a run waits after each metric record it has written to its store, for as long as that file
exists; its heartbeat goes on and signals reach it as anywhere else. The watcher sees the
record in the store, does what it came to do, and removes the file to let every held run
go on. Without the variable (every real run) nothing waits.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

HOLD_ENV = "MESABENCH_HOLD_FILE"
#: Seconds between looks at the file while held: short beside any drill's wait.
POLL_SECONDS = 0.05


def hold_file() -> Path | None:
    """The file this process holds on, if the variable names one."""
    named = os.environ.get(HOLD_ENV, "").strip()
    return Path(named) if named else None


def held() -> bool:
    """Whether a run should wait now (the named file exists)."""
    path = hold_file()
    return path is not None and path.exists()


def wait_while_held() -> None:
    """Return once the hold file is gone (at once when none is named or it is absent)."""
    while held():
        time.sleep(POLL_SECONDS)
