"""Fault drills: real sweeps and runs, real signals, a real SQLite store and a real local Ray.

After each drill the store must hold exactly one FINISHED run per cell, no run RUNNING
without being flagged, and every metric row a FINISHED run should have. Each drill's
accounting is appended to the JSON-lines file named by ``MESABENCH_DRILL_REPORT`` when it
is set (docs/RESULTS.md, "Fault drills").
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from benchmarks.store.client import open_store
from benchmarks.store.hold import HOLD_ENV
from benchmarks.store.lifecycle import INTERVAL_ENV, is_stale
from benchmarks.sweeps.in_store import SWEEP_TAG
from tests.helpers import python_env, stored_runs, wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]

#: A cell short enough to cost little: a drill catches it mid-training at its hold point
#: (:mod:`benchmarks.store.hold`), not by training long enough to be caught, which was a
#: bet on the machine's speed that a loaded or a fast machine lost.
ITERATIONS, LOG_EVERY, VAL_EVERY = 300, 50, 100
CELL = ["--set", f"iterations={ITERATIONS}", "--set", f"val_every={VAL_EVERY}",
        "--set", "test_tasks=50", "--set", f"log_every={LOG_EVERY}",
        "--set", "checkpoint_every=100"]  # fmt: skip
#: Heartbeats every second, so a lost run is stale after 5 s rather than 150.
ENV = {INTERVAL_ENV: "1"}


@pytest.fixture(autouse=True)
def hold(tmp_path, monkeypatch) -> Path:
    """The drill's hold file, named to every process it starts: while it exists, each run
    waits after each metric record it wrote (``hold.touch()`` before starting what is to be
    caught; ``hold.unlink()`` once the fault is in, to let the rest go on)."""
    path = tmp_path / "hold"
    monkeypatch.setenv(HOLD_ENV, str(path))
    return path


def _sweep(store, *extra, seeds="0-1", workers=2):
    return [sys.executable, "-m", "benchmarks", "sweep", "--benchmark", "sinusoid-5shot",
            "--methods", "fomaml", "--seeds", seeds, "--workers", str(workers),
            "--tracking-uri", store, *CELL, *extra]  # fmt: skip


def _start(command):
    return subprocess.Popen(command, env=python_env(**ENV), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip


def _all_runs(store):
    return open_store(store), stored_runs(store)


def _cell_runs(store):
    client, runs = _all_runs(store)
    return client, [r for r in runs if SWEEP_TAG not in r.data.tags]


#: The suite's poll for an observable event, at a drill's pace: the store is read every
#: 0.3 s (each read is a query beside the cells' writes), for up to 3 minutes.
_wait = functools.partial(wait_for, timeout=180, every=0.3)


def _training_cells(store, count, sweep=None):
    """Cell runs that are RUNNING and have logged training metrics (mid-cell: held there
    while the drill's hold file exists). If none come, the failure carries what ``sweep``
    (the drill's process) said."""

    def ready():
        client, runs = _cell_runs(store)
        live = [r for r in runs if r.info.status == "RUNNING" and "train/loss" in r.data.metrics]
        return live if len(live) >= count else None

    try:
        return _wait(ready, what=f"{count} training cell(s)")
    except AssertionError as err:
        if sweep is None:
            raise
        sweep.kill()
        raise AssertionError(f"{err}; the sweep said:\n{sweep.communicate()[0][-3000:]}") from None


def _processes_running(store):
    """The cell processes of this drill (``benchmarks run`` with this drill's store)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "run" in cmdline and store in cmdline and "benchmarks" in cmdline:
            found.append(process)
    return found


def _account(drill, store, cells, launched_note=""):
    """Runs per cell, duplicates, stale and lost metric rows, written to the drill report."""
    client, runs = _cell_runs(store)
    by_cell: dict[tuple[str, str], list] = {}
    for run in runs:
        key = (run.data.tags["mesabench.config_hash"], run.data.tags["mesabench.seed"])
        by_cell.setdefault(key, []).append(run)
    finished = [r for r in runs if r.info.status == "FINISHED"]
    per_cell = [sum(r.info.status == "FINISHED" for r in rs) for rs in by_cell.values()]
    running = [r for r in runs if r.info.status == "RUNNING"]
    stale = [r for r in running if is_stale("RUNNING", r.data.tags, r.info.start_time)]
    expected = {"train/loss": ITERATIONS // LOG_EVERY, "val/loss": ITERATIONS // VAL_EVERY}
    lost = 0
    for run in finished:
        for key, count in expected.items():
            lost += count - len(client.get_metric_history(run.info.run_id, key))
        lost += "final/test_loss" not in run.data.metrics
    _, everything = _all_runs(store)
    parents_running = [r for r in everything if SWEEP_TAG in r.data.tags
                       and r.info.status == "RUNNING"]  # fmt: skip
    summary = {
        "drill": drill,
        "cells": cells,
        "runs_launched": len(runs),
        "finished": len(finished),
        "duplicates": sum(max(0, n - 1) for n in per_cell),
        "cells_without_finished": cells - sum(1 for n in per_cell if n),
        "running_unflagged": len(running) - len(stale),
        "stale_detected": len(stale),
        "failed": sum(r.info.status == "FAILED" for r in runs),
        "killed": sum(r.info.status == "KILLED" for r in runs),
        "sweep_runs_running": len(parents_running),
        "metric_rows_lost": lost,
        "note": launched_note,
    }
    report = os.environ.get("MESABENCH_DRILL_REPORT")
    if report:
        with open(report, "a", encoding="utf-8") as out:
            out.write(json.dumps(summary) + "\n")
    return summary


def _assert_clean(summary):
    assert summary["duplicates"] == 0, summary
    assert summary["cells_without_finished"] == 0, summary
    assert summary["running_unflagged"] == 0 and summary["stale_detected"] == 0, summary
    assert summary["metric_rows_lost"] == 0, summary


def test_two_sweeps_of_one_grid_started_at_once(store):
    first, second = _start(_sweep(store)), _start(_sweep(store))
    outputs = [p.communicate(timeout=400)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    summary = _account("two sweeps of one grid at once", store, cells=2)
    _assert_clean(summary)
    assert summary["runs_launched"] == 2  # the losing attempts never created a run
    said = "\n".join(outputs)
    assert said.count("done    fomaml") + said.count("elsewhere fomaml") == 4, said


def _cell_killed_then_swept_again(store, hold, drill: str, *extra: str) -> None:
    """Start a one-worker sweep, SIGKILL its running cell (what the kernel's OOM killer
    does), and check that cell alone FAILED as lost with its logged metrics kept, and that
    the sweep run again completes."""
    hold.touch()
    sweep = _start(_sweep(store, *extra, workers=1))
    (victim,) = _training_cells(store, 1)
    if "--warm" in extra:  # a child of the launcher, itself a child of the sweep
        (launcher,) = [
            p for p in psutil.Process(sweep.pid).children()
            if "benchmarks.sweeps.warm_cells" in " ".join(p.cmdline())
        ]  # fmt: skip
        (process,) = _wait(launcher.children, what="the warm cell")
    else:
        (process,) = _processes_running(store)
    process.send_signal(signal.SIGKILL)
    hold.unlink()
    out, _ = sweep.communicate(timeout=400)
    assert sweep.returncode == 1, out
    assert "killed by signal 9" in out
    client = MlflowClient(store)
    lost = client.get_run(victim.info.run_id)
    assert lost.info.status == "FAILED"
    assert lost.data.tags["error"] == "lost: its process died by signal 9"
    assert client.get_metric_history(victim.info.run_id, "train/loss")  # logged rows kept
    again = subprocess.run(_sweep(store, *extra, workers=1), env=python_env(**ENV),
                           capture_output=True, text=True, timeout=400)  # fmt: skip
    assert again.returncode == 0, again.stdout
    summary = _account(drill, store, cells=2)
    _assert_clean(summary)
    assert summary["failed"] == 1 and summary["finished"] == 2


def test_sigkill_of_a_running_cell(store, hold):
    _cell_killed_then_swept_again(store, hold, "SIGKILL of a running cell, then the sweep again")


def test_sigkill_of_a_warm_cell(store, hold):
    """A cell forked from the warm launcher is its own process: killing it fails that cell
    alone (recorded as lost), the launcher and the sweep go on, and a rerun completes."""
    _cell_killed_then_swept_again(store, hold, "SIGKILL of a warm cell, then the sweep again",
                                  "--warm")


def test_sigterm_of_one_cell_while_the_sweep_goes_on(store, hold):
    """A polite kill of one cell (not of the sweep): that cell closes KILLED with its rows,
    the sweep finishes the others but does not call the grid a success, and a rerun runs
    only the killed cell."""
    hold.touch()
    sweep = _start(_sweep(store, workers=1))
    (victim,) = _training_cells(store, 1)
    (process,) = _processes_running(store)
    process.send_signal(signal.SIGTERM)
    hold.unlink()
    out, _ = sweep.communicate(timeout=400)
    assert sweep.returncode == 1 and "killed 1" in out, out
    client, _ = _all_runs(store)
    assert client.get_run(victim.info.run_id).info.status == "KILLED"
    again = subprocess.run(_sweep(store, workers=1), env=python_env(**ENV),
                           capture_output=True, text=True, timeout=400)  # fmt: skip
    assert again.returncode == 0 and "1 to run, 1 already finished" in again.stdout, again.stdout
    summary = _account("SIGTERM of one cell, then the sweep again", store, cells=2)
    _assert_clean(summary)
    assert summary["killed"] == 1 and summary["finished"] == 2, summary


def test_sigkill_of_the_sweep_driver(store, hold):
    hold.touch()
    sweep = _start(_sweep(store, workers=2))
    _training_cells(store, 2, sweep)  # both cells mid-training, held there
    os.kill(sweep.pid, signal.SIGKILL)
    sweep.communicate(timeout=30)
    hold.unlink()

    # The orphaned cells write to files, not to the dead driver's pipe: they finish.
    def cells_done():
        _, runs = _cell_runs(store)
        return len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)

    _wait(cells_done, what="orphaned cells to finish")
    # The driver's own run lost its heartbeat: flagged stale, then listed by 'runs --stale'.
    client, everything = _all_runs(store)
    (parent,) = [r for r in everything if SWEEP_TAG in r.data.tags]

    def parent_stale():
        run = client.get_run(parent.info.run_id)
        return is_stale(run.info.status, run.data.tags, run.info.start_time)

    _wait(parent_stale, what="the sweep run to go stale")
    listed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "runs", "--stale", "--tracking-uri", store],
        env=python_env(COLUMNS="200"), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert parent.info.run_id in listed.stdout and "1 stale run(s)" in listed.stdout
    again = subprocess.run(_sweep(store), env=python_env(**ENV), capture_output=True, text=True,
                           timeout=400)  # fmt: skip
    assert again.returncode == 0 and "0 to run, 2 already finished" in again.stdout
    summary = _account("SIGKILL of the sweep driver, then the sweep again", store, cells=2)
    _assert_clean(summary)
    assert summary["sweep_runs_running"] == 0


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_ctrl_c_to_a_sweep_started_in_the_background_is_ignored_by_its_cells_too(store, warm,
                                                                                 hold):
    """A script's ``sweep ... &`` inherits SIGINT ignored (POSIX), and a Ctrl-C at the
    terminal still reaches its whole process group. Cold cells inherit the ignore; warm ones
    must too, or they close KILLED one by one while the sweep goes on to the next cell."""

    def background_job():
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    hold.touch()
    sweep = subprocess.Popen(
        _sweep(store, *(["--warm"] if warm else [])), env=python_env(**ENV),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=background_job, start_new_session=True,
    )  # fmt: skip
    # Both cells held mid-training at once (the hold point, on any machine's speed), then
    # one Ctrl-C to the whole group, as the terminal sends it.
    training = _training_cells(store, 2, sweep)
    # kill() leaves the signal pending in each process before it returns: a cell that does
    # not ignore it takes it as soon as it runs again, long before its training ends.
    os.killpg(sweep.pid, signal.SIGINT)
    hold.unlink()
    out, _ = sweep.communicate(timeout=400)
    assert sweep.returncode == 0, out
    assert len(training) == 2
    summary = _account(f"Ctrl-C to a background {'warm ' if warm else ''}sweep", store, cells=2)
    _assert_clean(summary)
    assert summary["finished"] == 2 and summary["killed"] == 0, summary


@pytest.mark.xdist_group("ray")  # one worker: a drill's `ray stop --force` ends every local Ray
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_ray_worker_killed_mid_cell(store, warm, hold):
    pytest.importorskip("ray")
    hold.touch()
    sweep = _start(_sweep(store, "--backend", "ray", *(["--warm"] if warm else []), workers=2))
    _training_cells(store, 1, sweep)
    if warm:  # the cell is a fork of the launcher that the task's worker started
        launchers = [
            p for p in psutil.process_iter(["cmdline"])
            if "benchmarks.sweeps.warm_cells" in " ".join(p.info["cmdline"] or [])
            and p.parent() is not None and p.parent().name().startswith("ray::")
        ]  # fmt: skip
        cell = _wait(lambda: [c for p in launchers for c in p.children()], what="a warm cell")[0]
        worker = cell.parent().parent()
    else:
        worker = _processes_running(store)[0].parent()
    assert worker is not None and worker.name().startswith("ray::")  # the task's worker
    worker.send_signal(signal.SIGKILL)  # the node's worker process dies; Ray retries the task
    hold.unlink()
    out, _ = sweep.communicate(timeout=600)
    assert sweep.returncode == 0, out
    mode = "warm cells" if warm else "cold cells"
    summary = _account(f"Ray worker killed mid-cell (task retried; {mode})", store, cells=2)
    _assert_clean(summary)


@pytest.mark.xdist_group("ray")  # one worker: a drill's `ray stop --force` ends every local Ray
def test_ten_thousand_cell_sweep_on_two_ray_nodes_at_a_smaller_size(tmp_path):
    """bench/ray_sweep_scale.py (issue 19's simulated large sweep) at 40 cells: a Ray
    cluster of 2 local nodes, warm one-iteration cells, then the store counted with plain
    SQL: exactly one FINISHED run per cell and nothing else."""
    pytest.importorskip("ray")
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "bench/ray_sweep_scale.py", "--cells", "40", "--nodes", "2",
         "--work", str(tmp_path / "work"), "--json", str(out)],
        cwd=ROOT, env=python_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["exit_code"] == 0, result["summary"]
    assert result["summary"].endswith("done 40, failed 0, skipped 0"), result["summary"]
    assert result["runs_by_status"] == {"FINISHED": 40}
    assert result["cells_by_finished_runs"] == {"1": 40}


def test_sighup_of_a_run_then_resume(store, hold):
    hold.touch()
    run = _start([sys.executable, "-m", "benchmarks", "run", "--method", "fomaml", *CELL,
                  "--tracking-uri", store])  # fmt: skip
    _training_cells(store, 1, run)  # mid-training, held at its first record
    run.send_signal(signal.SIGHUP)  # the terminal closed
    hold.unlink()
    out, _ = run.communicate(timeout=60)
    assert run.returncode == 130, out
    (victim,) = _cell_runs(store)[1]
    client = MlflowClient(store)
    assert client.get_run(victim.info.run_id).info.status == "KILLED"
    resumed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "run", "--resume", victim.info.run_id,
         "--tracking-uri", store],
        env=python_env(**ENV), capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    history = client.get_metric_history(victim.info.run_id, "train/loss")
    steps = [m.step for m in history]
    assert sorted(steps) == list(range(LOG_EVERY, ITERATIONS + 1, LOG_EVERY))  # none twice
    summary = _account("SIGHUP of a run, then --resume", store, cells=1)
    _assert_clean(summary)


# -- a tracking server that goes away --------------------------------------------------------
OUTAGE_ITERATIONS, OUTAGE_LOG_EVERY = 300, 20
OUTAGE_RUN = ["--method", "fomaml", "--set", f"iterations={OUTAGE_ITERATIONS}",
              "--set", f"log_every={OUTAGE_LOG_EVERY}", "--set", "val_every=100",
              "--set", "test_tasks=50"]  # fmt: skip


def _history(db, run_id: str) -> list[tuple[int, float]]:
    import sqlite3

    with sqlite3.connect(db) as connection:
        return connection.execute(
            "SELECT step, value FROM metrics WHERE run_uuid = ? AND key = 'train/loss' "
            "ORDER BY step",
            (run_id,),
        ).fetchall()


def _only_run(db):
    import sqlite3

    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT run_uuid, status FROM runs").fetchall()


def _run_through_server(store, port, patience: str | None):
    command = [sys.executable, "-m", "benchmarks", "run", *OUTAGE_RUN,
               "--tracking-uri", f"http://127.0.0.1:{port}"]  # fmt: skip
    env = python_env(**ENV)
    env.pop("MESABENCH_SERVER_PATIENCE_S", None)
    if patience is not None:
        env["MESABENCH_SERVER_PATIENCE_S"] = patience
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip


def test_a_server_outage_within_the_patience_loses_nothing(store, tmp_path, hold):
    """The server is stopped mid-run for 45 s (longer than MLflow's own retries last;
    ``MESABENCH_DRILL_OUTAGE_S`` lengthens it, e.g. 570 for the 10-minute drill in
    docs/RESULTS.md) and started again on the same port: the run waits, then FINISHES with
    every metric value an undisturbed run of the same plan logs, and says so in two lines."""
    from tests.helpers import free_port, serve_store, stop_server

    db = store[len("sqlite:///") :]
    port = free_port()
    server = serve_store(store, port)
    outage = float(os.environ.get("MESABENCH_DRILL_OUTAGE_S", "45"))
    hold.touch()
    run = _run_through_server(store, port, patience=None)  # the default: 10 minutes
    try:
        _wait(lambda: _only_run(db) and _history(db, _only_run(db)[0][0]),
              what="the run's first metrics")  # fmt: skip
        stop_server(server)  # the run is held mid-training: its next write meets the outage
        hold.unlink()
        time.sleep(outage)  # the outage's length (what the drill is about), not a wait
        server = serve_store(store, port)
        out, err = run.communicate(timeout=600)
    finally:
        run.kill()
        stop_server(server)
    assert run.returncode == 0, err[-3000:]
    (run_id, status), = _only_run(db)  # fmt: skip
    assert status == "FINISHED"
    assert "tracking server not answering" in err and "tracking server back after" in err
    reference = f"sqlite:///{tmp_path / 'reference' / 'mlflow.db'}"
    done = subprocess.run([sys.executable, "-m", "benchmarks", "run", *OUTAGE_RUN,
                           "--tracking-uri", reference], env=python_env(**ENV),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    ref_db = reference[len("sqlite:///") :]
    (ref_id, _), = _only_run(ref_db)  # fmt: skip
    expected = _history(ref_db, ref_id)
    assert len(expected) == OUTAGE_ITERATIONS // OUTAGE_LOG_EVERY
    assert _history(db, run_id) == expected


def test_a_server_away_longer_than_the_patience_fails_the_run_in_one_line(store, hold):
    """Past the patience the run stops with one line saying why; what reached the store
    before the outage stays, and the run is left RUNNING with a heartbeat that goes stale
    (flagged lost), not silently FINISHED."""
    from tests.helpers import free_port, serve_store, stop_server

    db = store[len("sqlite:///") :]
    port = free_port()
    server = serve_store(store, port)
    hold.touch()
    run = _run_through_server(store, port, patience="15")
    try:
        _wait(lambda: _only_run(db) and _history(db, _only_run(db)[0][0]),
              what="the run's first metrics")  # fmt: skip
        logged = len(_history(db, _only_run(db)[0][0]))
        stop_server(server)  # the run is held mid-training: its next write meets the outage
        began = time.monotonic()
        hold.unlink()
        out, err = run.communicate(timeout=300)
        waited = time.monotonic() - began
    finally:
        run.kill()
        stop_server(server)
    assert run.returncode == 1, err[-3000:]
    assert 15 <= waited < 120
    lines = [line for line in err.splitlines() if line.startswith("run failed:")]
    assert len(lines) == 1 and "tracking server unreachable for" in lines[0]
    assert "could not be closed" in lines[0]
    (run_id, status), = _only_run(db)  # fmt: skip
    assert status == "RUNNING" and len(_history(db, run_id)) >= logged
    from benchmarks.store.reader import open_reader

    reader = open_reader(store)
    (stored,) = reader.runs(reader.experiment_id("sinusoid-5shot"))
    # Heartbeats every second here: stale after five missed (waited for, with a deadline).
    _wait(lambda: is_stale(stored.status, stored.tags, stored.start_ms),
          what="the run to go stale")  # fmt: skip


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_cell_paused_past_the_stale_limit_is_not_taken_over(store, warm, hold):
    """SIGSTOP (a suspended laptop, a swapping node, a debugger) is silence, not death: the
    paused cell's process still exists here, so neither `runs --stale --mark-failed` nor a
    second sweep of the same cell closes or repeats it; after SIGCONT it finishes, and the
    cell has exactly one FINISHED run."""
    hold.touch()
    first = _start(_sweep(store, seeds="0", workers=1))
    (holder,) = _training_cells(store, 1)
    (cell,) = [p for p in _processes_running(store)]
    cell.suspend()
    hold.unlink()  # it goes on once it is resumed
    paused = time.monotonic()
    _wait(lambda: is_stale("RUNNING", _only(store, holder).data.tags, holder.info.start_time),
          what="the paused cell to go stale (5 heartbeats of 1 s missed)")  # fmt: skip
    swept = subprocess.run([sys.executable, "-m", "benchmarks", "runs", "--stale",
                            "--mark-failed", "--tracking-uri", store],
                           env=python_env(**ENV, COLUMNS="250"),
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "its process is alive (paused?): not closed" in swept.stdout, swept.stdout
    assert _only(store, holder).info.status == "RUNNING"
    second = _start(_sweep(store, *(["--warm"] if warm else []), seeds="0", workers=1))
    # The second sweep's cell reaches the claim, finds a live holder and says it waits.
    _wait(lambda: _cell_said(second, "waiting: fomaml seed 0"), what="the second sweep to wait")
    assert second.poll() is None
    cell.resume()
    paused_for = time.monotonic() - paused
    out_first, _ = first.communicate(timeout=400)
    out_second, _ = second.communicate(timeout=400)
    assert first.returncode == 0, out_first
    assert second.returncode == 0, out_second
    assert "elsewhere fomaml" in out_second, out_second  # it waited, then did not repeat it
    summary = _account("paused past the stale limit (SIGSTOP, SIGCONT)", store, 1)
    _assert_clean(summary)
    assert summary["runs_launched"] == 1 and summary["failed"] == 0, summary
    # Training time leaves out the time the process was stopped (13 s or more), less the
    # pause watch's last tick (0.25 s) and a margin for the test's own reading of it.
    done = _only(store, holder)
    wall = (done.info.end_time - done.info.start_time) / 1000
    assert done.data.metrics["final/train_time_s"] < wall - (paused_for - 2.5), (
        wall, paused_for, done.data.metrics)  # fmt: skip


def _cell_said(sweep, text: str) -> bool:
    """Whether a cell of ``sweep`` (cold: its child; warm: a fork of its launcher) has
    written ``text`` so far: a cell's output goes to a file, read here through /proc."""
    import stat

    for process in psutil.Process(sweep.pid).children(recursive=True):
        output = f"/proc/{process.pid}/fd/1"
        try:
            if stat.S_ISREG(os.stat(output).st_mode) and text in Path(output).read_text(
                encoding="utf-8", errors="replace"
            ):
                return True
        except (OSError, psutil.Error):
            continue  # gone, or not a file (the warm launcher's pipe is never read here)
    return False


def _only(store, run):
    client, _ = _all_runs(store)
    return client.get_run(run.info.run_id)


def test_a_run_closed_as_lost_while_paused_stays_closed(store, hold):
    """Where the pause cannot be seen (the process on another host), a run closed as lost
    while silent never turns FINISHED afterwards: it keeps what it measured, says so in
    one line and exits 1; the cell can then be run again."""
    from benchmarks.store.lifecycle import mark_lost

    hold.touch()
    run = _start([sys.executable, "-m", "benchmarks", "run", "--method", "fomaml", *CELL,
                  "--tracking-uri", store])  # fmt: skip
    (holder,) = _training_cells(store, 1, run)
    process = psutil.Process(run.pid)
    process.suspend()
    client, _ = _all_runs(store)
    mark_lost(client, holder.info.run_id, "lost: no heartbeat since (another host's view)")
    hold.unlink()
    process.resume()
    out, _ = run.communicate(timeout=400)
    assert run.returncode == 1, out
    assert f"run {holder.info.run_id} was closed FAILED by another process while this one " \
           "was silent" in out  # fmt: skip
    after = client.get_run(holder.info.run_id)
    assert after.info.status == "FAILED"
    assert "final/test_loss" in after.data.metrics  # what it measured is kept
    assert after.data.tags["mesabench.closed_while_running"] == "FINISHED after it was " \
                                                              "closed FAILED"  # fmt: skip
