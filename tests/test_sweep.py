"""Sweeps: cells, validation before anything runs, resumability, failure isolation, Ray."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from benchmarks.cli.main import main
from benchmarks.planning.config import ConfigError
from benchmarks.store.hold import HOLD_ENV
from benchmarks.sweeps.backends import cell_env
from benchmarks.sweeps.in_store import SWEEP_TAG
from benchmarks.sweeps.spec import parse_seeds, plan_cells, spec_from_args, spec_from_file
from tests.helpers import (
    ROOT,
    finished_runs,
    free_port,
    python_env,
    runs_recording,
    stored_runs,
    wait_for,
)

FAST = ["--set", "iterations=20", "--set", "val_every=10", "--set", "val_tasks=20",
        "--set", "test_tasks=50"]  # fmt: skip


def _cells(runs):
    return [r for r in runs if SWEEP_TAG not in r.data.tags]


@pytest.mark.slow  # a fault drill: four processes racing to create one store
def test_processes_opening_a_fresh_store_at_once_all_succeed(tmp_path, unopened_store):
    # MLflow builds a new SQLite store's schema on first open; unguarded, four openers
    # at once collide mid-migration (table already exists / alembic version mismatch).
    code = "import sys; from benchmarks.store.client import open_store; open_store(sys.argv[1])"
    openers = [
        subprocess.Popen(
            [sys.executable, "-c", code, unopened_store],
            env=python_env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=120)[1] for p in openers]
    assert [p.returncode for p in openers] == [0] * 4, errors[0][-1500:]
    assert MlflowClient(unopened_store).search_experiments() is not None


def test_seeds_cells_and_sweep_files(tmp_path):
    assert parse_seeds("0-2,7") == (0, 1, 2, 7)
    with pytest.raises(ConfigError):
        parse_seeds("a-b")
    spec = spec_from_args("sinusoid-5shot", "maml,fomaml", "0-1", ["inner_lr=0.01,0.1"])
    assert len(spec.cells()) == 2 * 2 * 2
    assert (
        spec.sweep_id()
        == spec_from_args("sinusoid-5shot", "maml,fomaml", "0-1", ["inner_lr=0.01,0.1"]).sweep_id()
    )
    grid = spec_from_file(ROOT / "sweeps" / "sparse_lamaml_grid.yaml")
    assert grid.benchmark == "mnist-rotations" and len(grid.cells()) == 12
    bad = tmp_path / "bad.yaml"
    bad.write_text("benchmark: sinusoid-5shot\nmethods: [maml]\nseeds: 0\nworkers: 3\n")
    with pytest.raises(ConfigError, match="unknown keys"):
        spec_from_file(bad)


def test_cell_threads_share_the_cores_and_respect_the_users_cap(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cell_env(8)["OMP_NUM_THREADS"] == "8"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert cell_env(8)["OMP_NUM_THREADS"] == "2"  # the user's setting caps it ...
    assert cell_env(1)["OMP_NUM_THREADS"] == "1"  # ... but never raises it
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    assert cell_env(4)["OMP_NUM_THREADS"] == "4"  # not a count: ignored
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert cell_env(4, remote=True)["OMP_NUM_THREADS"] == "4"  # a node's cpus, not ours


def test_a_bad_cell_stops_the_sweep_before_anything_runs(store, capsys):
    args = ["sweep", "--benchmark", "sinusoid-5shot", "--methods", "maml", "--seeds", "0-1"]
    assert main([*args, "--grid", "inner_lr=0.1,fast", "--tracking-uri", store]) == 2
    assert "inner_lr" in capsys.readouterr().err
    assert stored_runs(store) == []


def test_an_unknown_key_in_a_sweep_file_names_the_file_the_layer_and_close_matches(
    store, tmp_path, capsys
):
    sweep = tmp_path / "typo.yaml"
    sweep.write_text("benchmark: sinusoid-5shot\nmethods: [maml]\nseeds: [0]\n"
                     "set: {iterations: 5}\ngrid: {inner_lrr: [0.01, 0.1]}\n")  # fmt: skip
    assert main(["sweep", str(sweep), "--tracking-uri", store]) == 2
    err = capsys.readouterr().err
    assert f"sweep file {sweep}, grid: unknown setting 'inner_lrr'; did you mean " in err
    assert "method.inner_lr" in err and len(err.strip().splitlines()) == 1
    assert stored_runs(store) == []


@pytest.mark.slow  # end to end through several real CLI processes: with the long checks
def test_local_sweep_isolates_failures_and_skips_finished_cells_on_rerun(store, capsys):
    args = ["sweep", "--benchmark", "sinusoid-5shot", "--methods", "maml,fomaml", "--seeds",
            "0-1", "--grid", "inner_lr=0.01,1e9", *FAST, "--workers", "2", "--warm",
            "--tracking-uri", store]  # fmt: skip
    # Warm cells (forks of one launcher): the bookkeeping is the question here; cold
    # cells failing alone is asserted in the warm-versus-cold test below.
    assert main(args) == 1  # the inner_lr=1e9 cells diverge
    out = capsys.readouterr().out
    assert "done 4, failed 4, skipped 0" in out and "diverged at iteration" in out
    runs = stored_runs(store)
    (parent,) = [r for r in runs if SWEEP_TAG in r.data.tags]
    assert parent.info.status == "FAILED"
    cells = _cells(runs)
    assert len(cells) == 8
    assert {r.data.tags["mlflow.parentRunId"] for r in cells} == {parent.info.run_id}
    assert sorted(r.info.status for r in cells) == ["FAILED"] * 4 + ["FINISHED"] * 4

    # Again: finished cells are skipped, failed ones run again (and fail again).
    assert main(args) == 1
    assert "done 0, failed 4, skipped 4" in capsys.readouterr().out
    cells = _cells(stored_runs(store))
    assert len(cells) == 12 and sum(r.info.status == "FINISHED" for r in cells) == 4
    (parent,) = [r for r in stored_runs(store) if SWEEP_TAG in r.data.tags]  # the same parent
    # Its settings as params, the counts of the last invocation, one summary per invocation.
    assert parent.data.params["sweep.methods"] == "maml,fomaml"
    assert json.loads(parent.data.params["sweep.grid"]) == {"inner_lr": ["0.01", "1e9"]}
    assert parent.data.params["sweep.cells"] == "8"
    client = MlflowClient(store)
    done = [m.value for m in client.get_metric_history(parent.info.run_id, "sweep/done")]
    assert done == [4.0, 0.0] and parent.data.metrics["sweep/skipped"] == 4.0
    summaries = [a.path for a in client.list_artifacts(parent.info.run_id, "summaries")]
    assert len(summaries) == 2
    # The summary names each method's best configuration, its mean over seeds by the
    # ranked metric (the mean of the finished runs' own values, computed here apart).
    text = Path(client.download_artifacts(parent.info.run_id, sorted(summaries)[-1])).read_text()
    assert "best per method by final/test_loss" in text
    for method in ("maml", "fomaml"):
        losses = [
            r.data.metrics["final/test_loss"]
            for r in cells
            if r.info.status == "FINISHED" and r.data.tags["mesabench.method"] == method
        ]
        line = next(x for x in text.splitlines() if x.strip().startswith(f"{method}:"))
        assert f"{sum(losses) / len(losses):.6g} (n=2, 95% CI" in line and "inner_lr=0.01" in line
    # Grid points have names of their own.
    names = [r.info.run_name for r in cells if r.info.status == "FINISHED"]
    assert len(set(names)) == len(names) == 4

    # The sweep's parent never shows up as a leaderboard row.
    assert main(["leaderboard", "--tracking-uri", store, "--format", "json"]) == 0
    assert '"method": "?"' not in capsys.readouterr().out


def test_sweeps_run_together_share_the_workers_and_keep_their_own_parents(
    store, tmp_path, monkeypatch
):
    """Two one-cell sweeps through one pool of two workers: their cells run at the same
    time (both are held at a record at once, which one worker could not do), each under
    its own parent, both parents kept alive by one heartbeat, and a second call runs
    nothing."""
    import threading

    from benchmarks.store.tracking import MlflowTracker
    from benchmarks.sweeps.sweep import run_sweeps

    tracker = MlflowTracker(store)
    specs = [
        spec_from_args("sinusoid-5shot", method, "0", [], [*FAST[1::2], "iterations=60"])
        for method in ("maml", "fomaml")
    ]
    hold = tmp_path / "hold"
    monkeypatch.setenv(HOLD_ENV, str(hold))  # the cells' environment is ours
    hold.touch()
    out: list = []
    beating_before = set(threading.enumerate())
    # Warm: both cells forked from one launcher (cold cells are the [cold] drills' subject).
    sweeping = threading.Thread(target=lambda: out.append(
        run_sweeps(specs, tracker, workers=2, warm=True)))  # fmt: skip
    sweeping.start()
    try:
        db = Path(store.removeprefix("sqlite:///"))
        wait_for(lambda: runs_recording(db) >= 2 or not sweeping.is_alive(),
                 "both cells held at their first record", timeout=300)  # fmt: skip
        # One heartbeat thread beats for both parents (one per parent exhausted the
        # client's connection pool on a table of 34 lines). Counted against those alive
        # before: earlier tests in this process may have left theirs.
        beats = [t for t in threading.enumerate()
                 if t.name == "mesabench-heartbeat" and t not in beating_before]  # fmt: skip
        assert len(beats) == 1, beats
    finally:
        hold.unlink()
        sweeping.join(timeout=600)
    (results,) = out
    assert [len(r.done) for r in results] == [1, 1] and not any(r.failed for r in results)
    runs = stored_runs(store)
    parents = {r.data.tags[SWEEP_TAG]: r for r in runs if SWEEP_TAG in r.data.tags}
    assert set(parents) == {spec.sweep_id() for spec in specs}
    assert all(p.info.status == "FINISHED" for p in parents.values())
    for spec in specs:
        (cell,) = [r for r in _cells(runs) if r.data.tags["mesabench.method"] == spec.methods[0]]
        assert cell.data.tags["mlflow.parentRunId"] == parents[spec.sweep_id()].info.run_id
    cells = _cells(runs)
    assert max(r.info.start_time for r in cells) < min(r.info.end_time for r in cells)
    again = run_sweeps(specs, tracker, workers=2, warm=True)
    assert [(len(r.done), len(r.skipped)) for r in again] == [(0, 1), (0, 1)]


@pytest.mark.slow  # a real launcher process and two cells forked from it (~14 s)
def test_a_kept_pool_forks_every_call_from_one_warm_launcher(store):
    """``tune`` runs a sweep per trial round through one pool: the warm launcher (the
    imports a cell would pay) starts once, serves each call, and ends with the pool."""
    from benchmarks.store.tracking import MlflowTracker
    from benchmarks.sweeps.backends import LocalBackend
    from benchmarks.sweeps.sweep import run_sweeps

    tracker = MlflowTracker(store)
    pids = []
    with LocalBackend(1, warm=True) as pool:
        for method in ("maml", "fomaml"):
            spec = spec_from_args("sinusoid-5shot", method, "0", [], [*FAST[1::2], "iterations=5"])
            (result,) = run_sweeps([spec], tracker, pool=pool)
            assert len(result.done) == 1 and not result.failed
            pids.append(pool._launcher.process.pid)
        launcher = pool._launcher.process
    assert pids[0] == pids[1] and launcher.returncode == 0 and pool._launcher is None
    assert len(_cells(stored_runs(store))) == 2


@pytest.mark.slow  # a fault drill: a sweep's pool failing mid-sweep, then resumed
def test_sweeps_stopped_by_an_error_close_every_parent_killed_and_resume(store, monkeypatch):
    """The pool fails after one cell (as a lost Ray head would): the error goes on up, both
    parents are closed KILLED (none left RUNNING) with the finished cell counted, and the
    next call runs only the cell that did not finish."""
    from benchmarks.store.tracking import MlflowTracker
    from benchmarks.sweeps.backends import LocalBackend
    from benchmarks.sweeps.sweep import run_sweeps

    tracker = MlflowTracker(store)
    specs = [
        spec_from_args("sinusoid-5shot", method, "0", [], [*FAST[1::2], "iterations=60"])
        for method in ("maml", "fomaml")
    ]
    first_only = LocalBackend.run

    def run_one_then_fail(self, jobs, env, report):
        first_only(self, jobs[:1], env, report)
        raise RuntimeError("lost the pool")

    monkeypatch.setattr(LocalBackend, "run", run_one_then_fail)
    with pytest.raises(RuntimeError, match="lost the pool"):
        run_sweeps(specs, tracker, workers=1)
    monkeypatch.undo()
    runs = stored_runs(store)
    parents = [r for r in runs if SWEEP_TAG in r.data.tags]
    assert sorted(p.info.status for p in parents) == ["KILLED", "KILLED"]
    assert sorted(p.data.metrics["sweep/done"] for p in parents) == [0.0, 1.0]
    assert [r.data.tags["mesabench.method"] for r in _cells(runs)] == ["maml"]
    again = run_sweeps(specs, tracker, workers=1)
    assert [(len(r.done), len(r.skipped)) for r in again] == [(0, 1), (1, 0)]


def _finished_keys(store):
    return [
        (
            r.data.tags["mesabench.method"],
            r.data.tags["mesabench.config_hash"],
            r.data.tags["mesabench.seed"],
        )  # fmt: skip
        for r in _cells(stored_runs(store))
        if r.info.status == "FINISHED"
    ]


@pytest.mark.slow  # a fault drill: a real sweep interrupted mid-cell, then resumed
def test_a_killed_sweep_resumes_with_the_remaining_cells_only(store, tmp_path):
    args = [sys.executable, "-m", "benchmarks", "sweep", "--benchmark", "sinusoid-5shot",
            "--methods", "maml", "--seeds", "0-3", "--set", "iterations=400",
            "--set", "val_every=200", "--set", "test_tasks=50", "--set", "val_tasks=20",
            "--workers", "1", "--warm", "--tracking-uri", store]  # fmt: skip
    # Once a cell has finished, the next is held at its next record (the hold file,
    # benchmarks.store.hold) until the SIGTERM has landed: the other three take seconds,
    # and a sweep that finished between two looks would exit 0.
    hold = tmp_path / "hold"
    process = subprocess.Popen(args, env=python_env(**{HOLD_ENV: str(hold)}), cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)  # fmt: skip
    wait_for(lambda: finished_runs(Path(store.removeprefix("sqlite:///")))
             or process.poll() is not None, "a finished cell", timeout=300, every=0.05)  # fmt: skip
    hold.touch()
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=120)[0]
    hold.unlink()
    assert process.returncode == 130, output[-2000:]
    assert "(interrupted)" in output and "failed 0" in output  # killed cells are not failures
    first = _finished_keys(store)
    assert 1 <= len(first) < 4
    statuses = [r.info.status for r in _cells(stored_runs(store))]
    assert "KILLED" in statuses or len(statuses) == len(first)

    resumed = subprocess.run(args, env=python_env(), cwd=tmp_path, capture_output=True,
                             text=True, timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout[-2000:]
    assert f"done {4 - len(first)}, failed 0, skipped {len(first)}" in resumed.stdout
    finished = _finished_keys(store)
    assert len(finished) == 4 and len(set(finished)) == 4  # nothing finished twice


@pytest.mark.xdist_group("ray")  # one worker: a drill's `ray stop --force` ends every local Ray
@pytest.mark.slow
def test_ray_backend_gives_the_local_leaderboard(tmp_path, capsys):
    """The same sweep on the local pool (warm cells), as Ray tasks, and as warm cells on
    Ray (forked from each Ray worker's launcher) gives the same board."""
    boards = {}
    for name, backend, warm in (("local", "local", ("--warm",)), ("ray", "ray", ()),
                                ("ray-warm", "ray", ("--warm",))):  # fmt: skip
        store = f"sqlite:///{tmp_path / name / 'mlflow.db'}"
        # One seed, two methods: two cells per backend (each Ray sweep starts an instance;
        # a second seed only repeated what the first checks).
        args = ["sweep", "--benchmark", "sinusoid-5shot", "--methods", "maml,fomaml",
                "--seeds", "0", *FAST, "--workers", "2", "--backend", backend,
                "--tracking-uri", store, *warm]  # fmt: skip
        assert main(args) == 0
        capsys.readouterr()
        assert main(["leaderboard", "--tracking-uri", store, "--format", "json"]) == 0
        rows = __import__("json").loads(capsys.readouterr().out)[0]["rows"]
        boards[name] = {
            (r["method"], r["n"]): r["stats"]["final/test_loss"]["mean"]
            for r in rows
            if not r["reference"]
        }
    assert boards["ray"] == boards["local"] == boards["ray-warm"] and len(boards["ray"]) == 2


@pytest.mark.xdist_group("ray")  # one worker: a drill's `ray stop --force` ends every local Ray
@pytest.mark.slow
def test_a_ray_sweep_starts_its_own_instance_beside_a_cluster_left_running(tmp_path):
    """Before: with a Ray cluster left running on the machine (a killed sweep's, another
    user's), ray.init joined it and refused the local pool's size: a ValueError traceback."""
    import shutil

    pytest.importorskip("ray")
    ray = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    subprocess.run([ray, "start", "--head", "--num-cpus", "1", "--disable-usage-stats"],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    try:
        store = f"sqlite:///{tmp_path / 'mlflow.db'}"
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks", "sweep", "--benchmark", "sinusoid-5shot",
             "--methods", "fomaml", "--seeds", "0-1", *FAST, "--workers", "2", "--backend",
             "ray", "--tracking-uri", store],
            env=python_env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert "done 2, failed 0" in done.stdout + done.stderr
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, timeout=120)


@pytest.mark.slow  # end to end through several real CLI processes: with the long checks
def test_warm_cells_give_the_numbers_of_cold_ones_and_keep_failures_apart(tmp_path, capsys):
    """--warm forks each cell from one launcher: every cell's final metrics equal the same
    cell's run as its own process (bit for bit), a diverging cell fails alone, and a rerun
    skips the finished ones."""
    finals = {}
    for mode in ("cold", "warm"):
        store = f"sqlite:///{tmp_path / mode / 'mlflow.db'}"
        # One seed (the cold sweep of two seeds is the test above): 4 cells per mode.
        args = ["sweep", "--benchmark", "sinusoid-5shot", "--methods", "maml,fomaml",
                "--seeds", "0", "--grid", "inner_lr=0.01,1e9", *FAST, "--workers", "2",
                "--tracking-uri", store, *(["--warm"] if mode == "warm" else [])]  # fmt: skip
        assert main(args) == 1  # the inner_lr=1e9 cells diverge
        out = capsys.readouterr().out
        assert "done 2, failed 2, skipped 0" in out and "diverged at iteration" in out
        finals[mode] = {
            (r.data.tags["mesabench.method"], r.data.params["method.inner_lr"],
             r.data.tags["mesabench.seed"], r.info.status): r.data.metrics.get("final/test_loss")
            for r in _cells(stored_runs(store))
        }  # fmt: skip
        if mode == "warm":
            assert main(args) == 1
            assert "done 0, failed 2, skipped 2" in capsys.readouterr().out
    assert len(finals["warm"]) == 4 and finals["warm"] == finals["cold"]


@pytest.mark.slow
def test_eight_concurrent_writers_all_finish_with_all_metrics(tmp_path, store, capsys):
    args = ["sweep", "--benchmark", "sinusoid-5shot", "--methods", "maml", "--seeds", "0-7",
            *FAST, "--set", "log_every=1", "--workers", "8", "--warm",
            "--tracking-uri", store]  # fmt: skip
    assert main(args) == 0
    client = MlflowClient(store)
    cells = _cells(stored_runs(store))
    assert len(cells) == 8 and {r.info.status for r in cells} == {"FINISHED"}
    for run in cells:
        assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 20
        assert "final/test_loss" in run.data.metrics


def test_sweep_file_and_arguments_are_exclusive(capsys):
    path = Path(ROOT / "sweeps" / "sinusoid_two_methods.yaml")
    assert main(["sweep", str(path), "--methods", "maml"]) == 2
    assert "sweep file takes no" in capsys.readouterr().err


@pytest.mark.slow
def test_leaderboard_and_ui_keep_working_while_a_sweep_writes(tmp_path, store, capsys):
    import json
    import urllib.request
    args = [sys.executable, "-m", "benchmarks", "sweep", "--benchmark", "sinusoid-5shot",
            "--methods", "maml,fomaml", "--seeds", "0-1", "--set", "iterations=300",
            "--set", "log_every=1", "--set", "val_every=100", "--set", "test_tasks=50",
            "--workers", "2", "--tracking-uri", store]  # fmt: skip
    sweep = subprocess.Popen(args, env=python_env(), cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)  # fmt: skip
    port = free_port()
    ui = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "ui", "--tracking-uri", store, "--port", str(port)],
        env=python_env(), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        boards, ui_ok = 0, False
        # Read until three boards and the UI answered while the cells wrote, then let the
        # sweep finish unread (each further read only cost CPU beside the writers).
        while sweep.poll() is None and (boards < 3 or not ui_ok):
            capsys.readouterr()
            assert main(["leaderboard", "--tracking-uri", store, "--format", "json"]) == 0
            json.loads(capsys.readouterr().out)
            boards += 1
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    ui_ok = ui_ok or response.status == 200
            except OSError:
                pass
            time.sleep(1)
        assert boards >= 3 and ui_ok  # before the sweep ended: read while it wrote
        said = sweep.communicate(timeout=600)[0]
        assert sweep.returncode == 0, said[-2000:]
    finally:
        ui.terminate()
        ui.wait(timeout=30)
    assert len([r for r in _cells(stored_runs(store)) if r.info.status == "FINISHED"]) == 4


@pytest.mark.xdist_group("ray")  # one worker: a drill's `ray stop --force` ends every local Ray
@pytest.mark.slow
def test_ray_cells_no_node_can_place_are_refused_before_anything_runs(tmp_path, run_cli):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = tmp_path / "gpu.yaml"
    sweep.write_text("benchmark: sinusoid-5shot\nmethods: [maml]\nseeds: 0\ngpus_per_cell: 1\n")
    began = time.monotonic()
    done = run_cli("sweep", str(sweep), "--backend", "ray", "--tracking-uri", store)
    assert time.monotonic() - began < 120  # refused, not waiting for a GPU forever
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]  # Ray's own start-up notes come before it
    assert last == (
        "error: gpus_per_cell is 1 but the Ray cluster has 0 GPUs in all; lower gpus_per_cell "
        "or add nodes"
    )
    assert "Traceback" not in done.stderr
    assert stored_runs(store) == []  # no sweep run, no cell


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("grid: {inner_steps: '12'}\n",
         "grid.inner_steps: input should be a valid list (got '12'); grid takes setting: ["),
        ("grid: {inner_steps: []}\n", "grid.inner_steps needs at least one value"),
        ("set: {iterations: 5}\nset: {iterations: 6}\n", "duplicate key 'set' (line 5)"),
        ("grid: {inner_lr: [0.1], inner_lr: [0.2]}\n", "duplicate key 'inner_lr' (line 4)"),
        ("cpus_per_cell: lots\n", "cpus_per_cell: input should be a valid number"),
        ("set: [iterations, 5]\n", "set: input should be a valid dictionary"),
        ("set: {fomaml: {inner_lr: 0.1}}\n", "set.fomaml holds settings, but 'fomaml' is none"),
    ],
)
def test_sweep_files_are_read_strictly(tmp_path, text, message):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("benchmark: sinusoid-5shot\nmethods: [maml]\nseeds: 0\n" + text)
    with pytest.raises(ConfigError) as refused:
        spec_from_file(sweep)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_sweep_files_refuse_wrong_shapes_bytes_and_huge_seed_ranges(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    for body, message in [
        (b"benchmark: sinusoid-5shot\nmethods: 3\nseeds: 0\n",
         "methods: input should be a valid string (got 3); methods takes a method's name or"),
        (b"benchmark: sinusoid-5shot\nmethods: []\nseeds: 0\n", "at least one method"),
        (b"- benchmark\n- methods\n", "a sweep file is a mapping of keys"),
        (b"benchmark: sinusoid-5shot\nmethods: [maml]\nseeds: \xff\n", "not UTF-8 text"),
        (b"benchmark: sinusoid-5shot\nmethods: [maml]\nseeds: 0-1000000000000\n", "more than"),
    ]:
        sweep.write_bytes(body)
        with pytest.raises(ConfigError, match=re.escape(message)):
            spec_from_file(sweep)


def test_a_grid_key_given_twice_is_refused_and_per_method_settings_reach_their_cells(tmp_path):
    with pytest.raises(ConfigError, match=r"--grid inner_lr is given twice"):
        spec_from_args("sinusoid-5shot", "maml", "0", ["inner_lr=0.1", "inner_lr=0.2"])
    spec = spec_from_args("sinusoid-5shot", "maml,metasgd", "0", ["inner_steps=1,2"],
                          ["iterations=5", "metasgd:modulation_lr=0.3"])  # fmt: skip
    by_method = {(c.method, dict(c.overrides)["inner_steps"]): dict(c.overrides)
                 for c in spec.cells()}  # fmt: skip
    assert by_method[("metasgd", "2")] == {"iterations": "5", "modulation_lr": "0.3",
                                           "inner_steps": "2"}  # fmt: skip
    assert "modulation_lr" not in by_method[("maml", "1")]
    with pytest.raises(ConfigError, match=r"--set fomaml:inner_lr: 'fomaml' is none of"):
        spec_from_args("sinusoid-5shot", "maml", "0", [], ["fomaml:inner_lr=0.1"])
    # The same from a file; a setting one method lacks names that method.
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("benchmark: sinusoid-5shot\nmethods: [maml, lsa]\nseeds: 0\n"
                     "set: {iterations: 5, maml: {inner_steps: 3}}\n")  # fmt: skip
    from_file = spec_from_file(sweep)
    assert dict(from_file.method_settings) == {"maml": (("inner_steps", "3"),)}
    plan_cells(from_file)  # lsa has no inner_steps: set for maml only, it is never asked
    sweep.write_text("benchmark: sinusoid-5shot\nmethods: [maml, lsa]\nseeds: 0\n"
                     "set: {inner_steps: 3}\n")  # fmt: skip
    with pytest.raises(ConfigError, match=r", set, for method lsa: unknown setting"):
        plan_cells(spec_from_file(sweep))


def test_the_sweep_file_format_is_documented_key_by_key(tmp_path):
    from benchmarks.sweeps.spec import SWEEP_KEYS, SweepFile

    doc = (ROOT / "docs" / "running.md").read_text()
    section = doc[doc.index("### Sweep files"):]
    assert set(SWEEP_KEYS) == set(SweepFile.model_fields)
    for key in SweepFile.model_fields:
        assert f"`{key}`" in section, key
    example = tmp_path / "example.yaml"
    example.write_text(re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1))
    spec = spec_from_file(example)
    assert dict(spec.method_settings) == {"metasgd": (("modulation_lr", "0.003"),)}
    assert len(spec.cells()) == 2 * 2 * 3
    plan_cells(spec)  # and every cell of it is a valid run


@pytest.mark.parametrize(("origin", "how"), [
    ("sweep command line", "--set lsa:heads=2"),
    ("sweep file s.yaml", "set: {lsa: {heads: 2}}"),
])  # fmt: skip
def test_a_setting_of_one_method_given_to_all_says_how_to_give_it_to_that_one(origin, how):
    from benchmarks.sweeps.spec import SweepSpec, plan_cells

    spec = SweepSpec(benchmark="linreg-icl", methods=("lsa", "gd"), seeds=(0,),
                     settings=(("heads", "2"),), origin=origin)  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        plan_cells(spec)
    said = str(refused.value)
    assert said.startswith(f"{origin}, set, for method gd: unknown setting 'heads'")
    assert said.endswith(f"; heads is a setting of lsa only: {how}")
