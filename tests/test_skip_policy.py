"""CI fails on a skipped test unless the skip is the hardware's (tests/skip_policy.py)."""

from __future__ import annotations

import pytest

TESTS = """
import pytest
from tests.skip_policy import skip_for_hardware

def test_needs_a_gpu():
    skip_for_hardware("no CUDA device")

def test_passes():
    assert True
"""

#: The policy as a plugin of the inner run (pytester's folder has no conftest of ours).
ARGS = ("-p", "tests.skip_policy", "-p", "no:cacheprovider")

PEER_MISSING = """
import pytest

def test_compares_with_a_peer():
    pytest.importorskip("a_peer_that_is_not_installed")
"""


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
def test_a_skip_other_than_the_hardwares_fails_a_strict_run(pytester, monkeypatch, strict):
    if strict:
        monkeypatch.setenv("MESABENCH_STRICT_SKIPS", "1")
    else:
        monkeypatch.delenv("MESABENCH_STRICT_SKIPS", raising=False)
    pytester.makepyfile(test_hardware=TESTS)
    hardware_only = pytester.runpytest_inprocess(*ARGS)
    hardware_only.assert_outcomes(passed=1, skipped=1)
    assert hardware_only.ret == 0  # a documented hardware skip passes, strict or not

    pytester.makepyfile(test_peer=PEER_MISSING)
    both = pytester.runpytest_inprocess(*ARGS)
    both.assert_outcomes(passed=1, skipped=2)
    if strict:
        assert both.ret == 1
        both.stdout.fnmatch_lines([
            "*MESABENCH_STRICT_SKIPS is set: 1 test(s) skipped for a reason other than hardware",
            "*test_peer.py::test_compares_with_a_peer: could not import "
            "'a_peer_that_is_not_installed'*",
        ])  # fmt: skip
    else:
        assert both.ret == 0
