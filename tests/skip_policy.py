"""A skipped check is no check: with ``MESABENCH_STRICT_SKIPS`` set (``.ci/run`` sets it),
a run that skipped any test for a reason other than the machine's hardware fails.

A test that may rightly skip on some machines (no GPU, no rights to mount a filesystem)
says so through :func:`skip_for_hardware`; every other skip (a peer not installed, a
browser missing) is a check CI would silently lose, so the run fails, naming each.
"""

from __future__ import annotations

import os

import pytest

STRICT = "MESABENCH_STRICT_SKIPS"
HARDWARE = "hardware: "


def skip_for_hardware(reason: str):
    """Skip the calling test because this machine lacks a device or a right (documented)."""
    pytest.skip(HARDWARE + reason)


def _reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


class SkipPolicy:
    """Collects the skips that are not the hardware's and fails the session on them."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report) -> None:
        # Called in the controller for reports from xdist's workers as well.
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = _reason(report)
            if not reason.startswith(HARDWARE):
                self.found.append((report.nodeid, reason))

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if not os.environ.get(STRICT) or not self.found or exitstatus != 0:
            return
        session.exitstatus = 1
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"{STRICT} is set: {len(self.found)} test(s) skipped for a "
                                "reason other than hardware", red=True)  # fmt: skip
            for nodeid, reason in self.found:
                reporter.write_line(f"  {nodeid}: {reason}", red=True)


def pytest_configure(config) -> None:
    config.pluginmanager.register(SkipPolicy(), "mesabench-skip-policy")
