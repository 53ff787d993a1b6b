"""Drills on the store's disk, against a real filesystem: one that fills while a run trains,
and a store on a read-only filesystem.

Both mount a small tmpfs (root, or a user allowed to mount). Where this process cannot
mount, the drills are skipped with that reason.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import leaderboard_json, python_env
from tests.skip_policy import skip_for_hardware

pytestmark = pytest.mark.slow


def _mount(folder: Path, size: str = "8m") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        skip_for_hardware("no mount command here")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        skip_for_hardware(f"this process cannot mount a tmpfs: {done.stderr.strip()[:100]}")


@pytest.fixture
def small_disk(tmp_path):
    folder = tmp_path / "disk"
    _mount(folder)
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path) -> None:
    """Write until the filesystem refuses: no byte left for anyone."""
    with open(folder / "filler", "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 16))
                handle.flush()
        except OSError:
            pass


def test_a_disk_that_fills_while_training_closes_the_run_failed_keeping_its_metrics(
    small_disk, tmp_path
):
    """Before: the run stayed RUNNING with none of its final metrics, after seven
    tracebacks. Now: FAILED with the reason in one line, every metric kept (in a local file
    named in that line, and in the store once the run's reserve is given up)."""
    from benchmarks.planning.plan import plan_run
    from benchmarks.protocols.recording import MemoryRecorder
    from benchmarks.running.execute import execute
    from benchmarks.store.client import open_store

    store = f"sqlite:///{small_disk / 'mlflow.db'}"
    settings = {"iterations": "600", "val_every": "100", "checkpoint_every": "200",
                "test_tasks": "200"}  # fmt: skip
    unsaved = tmp_path / "tmp"
    unsaved.mkdir()
    command = [sys.executable, "-m", "benchmarks", "run", "--method", "maml", "--tracking-uri",
               store, *(f"--set={k}={v}" for k, v in settings.items())]  # fmt: skip
    process = subprocess.Popen(command, env=python_env(TMPDIR=str(unsaved)), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    for line in process.stdout:  # progress lines; the disk fills half-way through training
        done = re.search(r"\((\d+)%\)", line)
        if done and int(done.group(1)) >= 50:
            # Paused while the disk fills: it is full before the run trains another step,
            # however fast the machine (the drill once relied on 3,000 more iterations).
            process.send_signal(signal.SIGSTOP)
            _fill(small_disk)
            process.send_signal(signal.SIGCONT)
            break
    out, err = process.communicate(timeout=300)
    assert process.returncode == 1, out[-2000:] + err[-2000:]
    assert "Traceback" not in err
    told = [line for line in err.splitlines() if line.startswith("run failed:")]
    assert len(told) == 1 and "the store ran out of space" in told[0] and "marked FAILED" in told[0]
    kept = Path(told[0].split("kept in ")[1].split(" ")[0])
    assert kept.parent == unsaved / "mesabench-unsaved" and kept.exists()

    client = open_store(store)
    (run,) = client.search_runs([client.get_experiment_by_name("sinusoid-5shot").experiment_id])
    assert run.info.status == "FAILED" and "ran out of space" in run.data.tags["error"]
    assert not list(small_disk.glob(".mesabench-reserve-*"))  # given up, not left behind
    body = json.loads(kept.read_text())
    assert body["run_id"] == run.info.run_id
    final = {m["key"]: m["value"] for m in body["metrics"] if m["key"].startswith("final/")}
    # The same seed and settings on a healthy store give the same numbers: what was kept is
    # what the run measured.
    again = execute(plan_run("maml", "sinusoid-5shot", 0, settings, device="cpu"),
                    MemoryRecorder())  # fmt: skip
    assert final["final/test_loss"] == pytest.approx(again["final/test_loss"], rel=1e-9)
    assert final["final/test_loss_steps1"] == pytest.approx(again["final/test_loss_steps1"])
    # Freed, the reserve made room for them in the store as well.
    assert run.data.metrics["final/test_loss"] == pytest.approx(again["final/test_loss"])
    steps = {(m["key"], m["step"]) for m in body["metrics"]}
    assert len(steps) == len(body["metrics"])  # each kept once


def test_a_store_on_a_read_only_filesystem_is_read_and_refuses_writes_in_one_line(
    tmp_path, capsys, monkeypatch
):
    """Before: leaderboard, report and runs gave SQLAlchemy tracebacks on a store whose
    filesystem is read-only (SQLite could not create its lock files)."""
    from benchmarks.cli.main import main

    here = tmp_path / "cwd"  # reading leaves nothing in the working directory
    here.mkdir()
    monkeypatch.chdir(here)

    folder = tmp_path / "archive"
    _mount(folder, "64m")
    try:
        store = f"sqlite:///{folder / 'mlflow.db'}"
        # Recorded by another process, which closes the store: a filesystem with files
        # open for writing cannot be made read-only.
        script = ("import sys; from tests.helpers import fake_run; print(*(fake_run(sys.argv[1], "
                  "m, 0, {'final/test_loss': v}) for m, v in (('maml', 0.5), ('fomaml', 0.6))))")
        made = subprocess.run([sys.executable, "-c", script, store], env=python_env(),
                              capture_output=True, text=True, check=True)  # fmt: skip
        kept, other = made.stdout.split()
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        time.sleep(0.2)
        with pytest.raises(OSError):
            (folder / "probe").write_text("x")
        board = leaderboard_json(store, capsys)
        assert [(r["method"], r["stats"]["final/test_loss"]["mean"]) for r in board["rows"]
                if r["rank"]] == [("maml", 0.5), ("fomaml", 0.6)]  # fmt: skip
        capsys.readouterr()
        assert main(["runs", "--tracking-uri", store]) == 0
        assert "0 unfinished run(s)" in capsys.readouterr().out
        assert main(["compare", kept, other, "--tracking-uri", store]) == 0
        assert "+0.1000" in capsys.readouterr().out  # fomaml - maml, read back
        report = tmp_path / "report"
        assert main(["report", "--all", "--output", str(report), "--tracking-uri", store]) == 0
        assert "maml" in (report / "index.html").read_text()
        # Writing is refused in one line, before anything runs.
        capsys.readouterr()
        assert main(["run", "--method", "maml", "--set", "iterations=5",
                     "--tracking-uri", store]) == 2  # fmt: skip
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "cannot be written" in line and "read-only" in line
        # Its runs export (reading), and a bundle imported into it is refused alike.
        bundle = tmp_path / "archive.mesabundle"
        assert main(["export", str(bundle), "--tracking-uri", store]) == 0
        capsys.readouterr()
        assert main(["import", str(bundle), "--tracking-uri", store]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "cannot be written" in line and "read-only" in line
        assert list(here.iterdir()) == []  # before: a folder named "file:" (MLflow's)
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
