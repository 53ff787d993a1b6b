"""What a run says when its output is a file or a pipe: progress lines every few percent,
and where a resumed run goes on from."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest

from tests.helpers import ROOT, only_run, python_env


def test_progress_is_written_as_lines_when_the_output_is_not_a_terminal(store, run_cli):
    done = run_cli("run", "--method", "fomaml", "--set", "iterations=200", "--set",
                   "val_every=100", "--set", "test_tasks=50", "--tracking-uri", store)  # fmt: skip
    assert done.returncode == 0, done.stderr
    steps = [int(m.group(1)) for m in re.finditer(r"^fomaml: (\d+)/200 \(\d+%\), loss ",
                                                  done.stdout, flags=re.M)]  # fmt: skip
    assert steps == list(range(10, 201, 10))  # every 5% of the run, to its end


@pytest.mark.slow  # pip installs or real processes: with the long checks
def test_a_resume_before_the_first_checkpoint_says_it_starts_over(store, cli):
    command = [sys.executable, "-m", "benchmarks", "run", "--method", "fomaml", "--set",
               "iterations=20000", "--set", "checkpoint_every=20000", "--tracking-uri",
               store]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, env=python_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    for line in process.stdout:  # the first progress line: training has begun
        if line.startswith("fomaml: "):
            break
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    killed = only_run(store)
    assert killed.info.status == "KILLED"
    resumed = cli("run", "--resume", killed.info.run_id, "--set", "x=1", "--tracking-uri", store)
    assert resumed.returncode == 2  # (a resume takes no settings: refused, nothing changed)
    resumed = subprocess.Popen([sys.executable, "-m", "benchmarks", "run", "--resume",
                                killed.info.run_id, "--tracking-uri", store], cwd=ROOT,
                               env=python_env(), stdout=subprocess.PIPE, text=True)  # fmt: skip
    first = resumed.stdout.readline()
    resumed.send_signal(signal.SIGINT)
    resumed.communicate(timeout=120)
    assert first.strip() == f"resuming run {killed.info.run_id}: no checkpoint yet: from the start"


def _words(text: str) -> set[str]:
    return set(text.split())


def test_tables_stay_whole_at_80_columns(store, capsys, monkeypatch):
    """A pipe is 80 columns: every table the commands print keeps its identifiers whole
    (no "…", no name cut): table names in `reproduce --list`, sparsity columns in a
    leaderboard, metric names and run ids in `compare`, method names in `list`."""
    from benchmarks.cli.main import main
    from benchmarks.published.tables import TABLES
    from tests.helpers import fake_run

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and set(TABLES) <= _words(out)
    assert max(len(line) for line in out.splitlines()) <= 80

    sparsity = {f"final/sparsity/layer{i}.long_parameter_name.weight": 0.1 * i for i in range(6)}
    for seed in (0, 1):
        fake_run(store, "sparse_maml", seed, {"final/test_loss": 0.5 + seed, **sparsity})
    fake_run(store, "maml", 0, {"final/test_loss": 0.6, "final/test_loss_steps10": 0.4})
    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--columns", "final/sparsity/"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and {"sparse_maml", "maml"} <= _words(out)
    for name in sparsity:
        assert name.removeprefix("final/") + ":" in _words(out), name

    from tests.helpers import stored_runs

    a, b = (r.info.run_id for r in stored_runs(store)[:2])
    assert main(["compare", a, b, "--tracking-uri", store]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and {a, b} <= {w.rstrip(":") for w in _words(out)}
    assert "final/test_loss_steps10" in out

    assert main(["list", "methods"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and {"sparse_relu_cmaml", "causal_gd_ssm"} <= _words(out)
