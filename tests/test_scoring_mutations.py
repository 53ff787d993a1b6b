"""The known-answer tests catch wrong scoring lines (pytest -m slow).

Each case copies the repository, changes one scoring line as a plausible bug would (an
accuracy scaled by 0.98, a CI with 1.80 in place of 1.96, a per-source accuracy taken over
all sources, ...), and runs the fast tests that pin that number: they must fail. A case
whose line no longer exists fails too, so the list follows the code.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, python_env

pytestmark = pytest.mark.slow

FEWSHOT = "tests/test_fewshot_runs.py"
OSAKA = "tests/test_osaka.py"
CONTINUAL = "tests/test_continual.py"

MUTATIONS = {
    "accuracy scaled by 0.98": (
        "methods/common/losses.py",
        "correct = (prediction.argmax(dim=-1) == target).float()",
        "correct = (prediction.argmax(dim=-1) == target).float() * 0.98",
        [FEWSHOT, "-k", "known_answers"],
    ),
    "CI with 1.80 for 1.96": (
        "benchmarks/protocols/summary.py",
        "1.96 * t.std(unbiased=True)",
        "1.80 * t.std(unbiased=True)",
        [FEWSHOT, "-k", "known_answers"],
    ),
    "per-source accuracy over all sources": (
        "benchmarks/protocols/online.py",
        "correct_by_step[steps_of_source].mean().item()",
        "correct_by_step.mean().item()",
        [OSAKA, "-k", "known_answers"],
    ),
    "cumulative accuracy scaled by 0.98": (
        "benchmarks/protocols/online.py",
        "cumulative = correct_by_step.mean().item()",
        "cumulative = 0.98 * correct_by_step.mean().item()",
        [OSAKA, "-k", "known_answers"],
    ),
    "boundary recall over all steps": (
        "benchmarks/protocols/online.py",
        'scores = boundary_scores(p["detected"][1:], tasks.switched[1:])',
        'scores = boundary_scores(p["detected"], tasks.switched)',
        [OSAKA, "-k", "through_the_protocol"],
    ),
    "overall sparsity unweighted": (
        "benchmarks/protocols/base.py",
        "sizes = method.tensor_sizes() or dict.fromkeys(per_tensor, 1)",
        "sizes = dict.fromkeys(per_tensor, 1)",
        [FEWSHOT, "-k", "sparsity_by_layer"],
    ),
    "retained accuracy from the wrong row": (
        "benchmarks/protocols/summary.py",
        '"ra": r[-1].mean().item()',
        '"ra": r[-2].mean().item()',
        [CONTINUAL],
    ),
}


def _copy(tmp_path, change=None):
    copy = tmp_path / "repo"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(
        ".git", "runs", "__pycache__", "*.egg-info", "mlartifacts"))  # fmt: skip
    if change is not None:
        path, line, wrong = change
        source = (copy / path).read_text()
        assert source.count(line) == 1, f"{path} no longer has the line this case changes"
        (copy / path).write_text(source.replace(line, wrong))
    return copy


def _pytest(copy, tests, basetemp) -> subprocess.CompletedProcess:
    # The copy's packages come first on the path (the editable install points at ROOT). Its
    # tests' CPU is this test's (a child's): not reported again as tests of the suite's own.
    env = python_env(PYTHONPATH=str(copy))
    env.pop("MESABENCH_TEST_CPU_REPORT", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", *tests, "-q", "-x", "-p", "no:cacheprovider",
         "--basetemp", str(basetemp)],
        cwd=copy, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_a_wrong_scoring_line_fails_the_fast_tests(name, tmp_path):
    path, line, wrong, tests = MUTATIONS[name]
    done = _pytest(_copy(tmp_path, (path, line, wrong)), tests, tmp_path / "pt")
    assert done.returncode == 1, f"{name}: the fast tests passed\n{done.stdout[-1500:]}"
    assert "failed" in done.stdout


def _every_selection() -> list[str]:
    """Every case's tests as one pytest selection: the files, and a ``-k`` that takes from
    each file what its cases take (a module's name selects all of it)."""
    files, terms = set(), set()
    for *_, tests in MUTATIONS.values():
        files.add(tests[0])
        module = Path(tests[0]).stem
        terms.add(f"({module} and ({tests[2]}))" if len(tests) == 3 else module)
    return [*sorted(files), "-k", " or ".join(sorted(terms))]


def test_the_same_tests_pass_in_an_unchanged_copy(tmp_path):
    """The control: the copy itself is sound, so the failures above are the mutations'.
    One pytest process for every case's tests (a process each cost a minute more)."""
    selection = _every_selection()
    done = _pytest(_copy(tmp_path), [*selection, "-rA"], tmp_path / "pt")
    assert done.returncode == 0, f"{selection}: {done.stdout[-2000:]}"
    # Each case's own tests were among them (-rA lists every test that passed).
    passed = [line for line in done.stdout.splitlines() if line.startswith("PASSED ")]
    for *_, tests in MUTATIONS.values():
        chosen = tests[2] if len(tests) == 3 else ""
        assert any(tests[0] in line and chosen in line for line in passed), tests
