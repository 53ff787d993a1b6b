"""Every run accounted for: heartbeats and stale runs, signals and closed pipes, atomic cell
claims, and bad input refused before anything is recorded (real processes, real SQLite)."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from benchmarks.cli.main import main
from benchmarks.planning.plan import plan_run
from benchmarks.store import claims
from benchmarks.store.lifecycle import HEARTBEAT_TAG, INTERVAL_ENV, is_stale
from benchmarks.store.tracking import MlflowTracker
from benchmarks.sweeps.backends import check_ray_resources
from tests.helpers import (
    CONTINUAL_TINY,
    ROOT,
    TINY,
    complete_checkpoint,
    free_port,
    python_env,
    stored_runs,
    wait_for,
)
from tests.image_fixtures import write_mnist

# A budget no machine finishes while a drill looks on: the signal it sends must find the
# run training, however fast the machine (3,000 steps left a fast one a second or two).
LONG = ["--set", "iterations=10000000", "--set", "val_every=1000", "--set", "test_tasks=50",
        "--set", "log_every=50", "--set", "checkpoint_every=100"]  # fmt: skip


def _db(store: str) -> Path:
    return Path(store.removeprefix("sqlite:///"))


def _start(store, *extra, **env):
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "run", "--method", "fomaml", *LONG, *extra,
         "--tracking-uri", store],
        env=python_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


def _wait_for_checkpoint(store, process, timeout=120):
    artifacts = _db(store).parent / "artifacts" / "sinusoid-5shot"
    deadline = time.monotonic() + timeout
    while not complete_checkpoint(artifacts):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.2)


def _stale_run(store: str, run_id: str):
    """The run, if the store shows it RUNNING without a recent heartbeat; else None."""
    run = MlflowClient(store).get_run(run_id)
    return run if is_stale(run.info.status, run.data.tags, run.info.start_time) else None


def _claimed(result):
    """``result`` of ``claims.acquire`` if it is the claim itself, else None."""
    return result if isinstance(result, claims.Claim) else None


# -- heartbeats and stale runs -----------------------------------------------------------------
def test_a_held_run_waits_after_its_record_is_in_the_store_until_the_file_goes(
    store, tmp_path, monkeypatch
):
    """The drills' hold point (benchmarks/store/hold.py): the record is readable in the
    store while the run waits, its heartbeat goes on, and removing the file lets it go."""
    from benchmarks.store.hold import HOLD_ENV

    hold = tmp_path / "hold"
    hold.touch()
    monkeypatch.setenv(HOLD_ENV, str(hold))
    monkeypatch.setenv(INTERVAL_ENV, "0.2")
    tracker = MlflowTracker(store)
    run_id = tracker.start(plan_run("maml", "sinusoid-5shot", 0, device="cpu"), "built-in")
    client = MlflowClient(store)
    logging = threading.Thread(target=tracker.log_metrics, args=({"train/loss": 0.5}, 1))
    logging.start()
    wait_for(lambda: client.get_metric_history(run_id, "train/loss"), "the held record")
    beat = float(client.get_run(run_id).data.tags[HEARTBEAT_TAG])
    wait_for(lambda: float(client.get_run(run_id).data.tags[HEARTBEAT_TAG]) > beat,
             "a heartbeat while held")  # fmt: skip
    assert logging.is_alive()  # still held
    hold.unlink()
    logging.join(timeout=60)
    assert not logging.is_alive()
    tracker.log_metrics({"train/loss": 0.4}, 2)  # no file: no wait
    tracker.finish("FINISHED")
    assert [m.step for m in client.get_metric_history(run_id, "train/loss")] == [1, 2]


def test_a_run_records_a_heartbeat_and_a_dead_one_is_shown_stale_then_closed(
    store, capsys, monkeypatch
):
    monkeypatch.setenv(INTERVAL_ENV, "0.2")
    plan = plan_run("maml", "sinusoid-5shot", 0, device="cpu")
    tracker = MlflowTracker(store)
    run_id = tracker.start(plan, "built-in")
    client = MlflowClient(store)
    first = float(client.get_run(run_id).data.tags[HEARTBEAT_TAG])

    def later_beat():  # the thread beats while the run lives
        tags = client.get_run(run_id).data.tags
        return tags if float(tags[HEARTBEAT_TAG]) > first else None

    tags = wait_for(later_beat, "a heartbeat after the start's")
    second = float(tags[HEARTBEAT_TAG])
    # The same moment, readable in the UI: the epoch tag's second, in UTC.
    from datetime import datetime, timezone

    from benchmarks.store.lifecycle import HEARTBEAT_UTC_TAG

    shown = datetime.strptime(tags[HEARTBEAT_UTC_TAG], "%Y-%m-%d %H:%M:%S UTC")
    assert shown.replace(tzinfo=timezone.utc).timestamp() == int(second)
    tracker._heartbeat.stop()  # the process "dies": no finish, no more beats
    # Stale once 5 intervals pass without a beat: waited for, not slept through.
    run = wait_for(lambda: _stale_run(store, run_id), "the dead run to go stale")
    assert run.info.status == "RUNNING"

    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--format", "json"]) == 0
    (board,) = json.loads(capsys.readouterr().out)
    assert board["excluded"]["STALE"] == 1 and board["excluded"]["RUNNING"] == 0
    assert board["rows"] == [] or all(r["reference"] for r in board["rows"])
    assert main(["leaderboard", "--tracking-uri", store, "--format", "markdown"]) == 0
    assert "not ranked: 1 stale" in capsys.readouterr().out
    assert main(["compare", run_id, run_id, "--tracking-uri", store]) == 0
    assert "stale (lost: no heartbeat since" in capsys.readouterr().out

    assert main(["runs", "--stale", "--tracking-uri", store]) == 0
    out = capsys.readouterr().out
    assert run_id in out and "1 stale run(s)" in out
    assert MlflowClient(store).get_run(run_id).info.status == "RUNNING"  # listing changes nothing
    assert main(["runs", "--stale", "--mark-failed", "--tracking-uri", store]) == 0
    assert "1 marked FAILED" in capsys.readouterr().out
    closed = MlflowClient(store).get_run(run_id)
    assert closed.info.status == "FAILED"
    assert closed.data.tags["error"].startswith("lost: no heartbeat since 20")
    assert main(["runs", "--mark-failed", "--tracking-uri", store]) == 2


def test_a_live_run_is_not_stale(store, capsys, monkeypatch):
    # Judged on what the store shows, not after a fixed sleep: the thread's beats are polled
    # for until two have come after the start's (so beating goes on), and the run is then
    # judged at once. Two-second beats leave a busy host 10 s between a beat and its
    # reading before a live run could look dead (at 0.2 s beats CI once missed by a second).
    monkeypatch.setenv(INTERVAL_ENV, "2")
    tracker = MlflowTracker(store)
    run_id = tracker.start(plan_run("maml", "sinusoid-5shot", 0, device="cpu"), "built-in")
    client = MlflowClient(store)
    beats = [float(client.get_run(run_id).data.tags[HEARTBEAT_TAG])]

    def second_later_beat():
        run = client.get_run(run_id)
        beat = float(run.data.tags[HEARTBEAT_TAG])
        if beat > beats[-1]:
            beats.append(beat)
        return run if len(beats) >= 3 else None

    run = wait_for(second_later_beat, "two heartbeats after the start's")
    beat = float(run.data.tags[HEARTBEAT_TAG])
    assert not is_stale(run.info.status, run.data.tags, run.info.start_time), (
        f"last beat {time.time() - beat:.1f} s ago")
    capsys.readouterr()
    assert main(["runs", "--stale", "--tracking-uri", store]) == 0
    assert "0 stale run(s)" in capsys.readouterr().out
    tracker.finish("FINISHED")


# -- signals and pipes ---------------------------------------------------------------------
@pytest.mark.slow  # a fault drill: a real run process signalled
@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM])
def test_sighup_and_sigterm_mark_the_run_killed_and_resumable(store, signum):
    process = _start(store)
    _wait_for_checkpoint(store, process)
    process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    (run,) = stored_runs(store)
    assert run.info.status == "KILLED"
    assert f"resume with --resume {run.info.run_id}" in err


@pytest.mark.slow  # a fault drill: a real run process's output pipe closed
def test_a_closed_output_pipe_loses_nothing_and_says_so_in_one_line(store, tmp_path):
    # Piped output is not a terminal: nothing is drawn while training, so the closed pipe
    # shows only at the end. The trained run must be recorded FINISHED (before: a
    # SystemExit left it RUNNING forever, exit 1, silently).
    command = (
        f"{sys.executable} -m benchmarks run --method fomaml {' '.join(TINY)} "
        f"--tracking-uri {store} | head -1; echo status=${{PIPESTATUS[0]}} >&2"
    )
    done = subprocess.run(["bash", "-c", command], env=python_env(), capture_output=True,
                          text=True, timeout=240)  # fmt: skip
    assert done.stdout.startswith("fomaml on sinusoid-5shot seed 0")
    assert "status=0" in done.stderr
    (run,) = stored_runs(store)
    assert run.info.status == "FINISHED" and "final/test_loss" in run.data.metrics
    said = [line for line in done.stderr.splitlines() if "output closed early" in line]
    assert said == [f"output closed early; run {run.info.run_id} FINISHED and is recorded"]
    assert "Traceback" not in done.stderr


def test_a_pipe_closed_while_training_ends_the_run_killed(store):
    """Where output is drawn while training (the watcher notices the closed reader), the
    training loop stops at its next step: KILLED and resumable."""
    from rich.console import Console

    from benchmarks.running.console import TrainingProgress, WatchedOutput
    from benchmarks.running.execute import RunInterrupted, execute_recorded

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError

        def fileno(self):
            raise OSError("no descriptor")

    console = Console(file=WatchedOutput(ClosedPipe()), force_terminal=True)
    overrides = dict(item.split("=") for item in TINY[1::2])
    plan = plan_run("fomaml", "sinusoid-5shot", 0, overrides, device="cpu")
    tracker = MlflowTracker(store)
    run_id = tracker.start(plan, "built-in")
    console.print("first line")  # the reader is gone
    with (
        pytest.raises(RunInterrupted, match="output pipe closed"),
        TrainingProgress(20, 0, "fomaml", console) as progress,
    ):
        execute_recorded(plan, tracker, progress=progress)
    run = MlflowClient(store).get_run(run_id)
    assert run.info.status == "KILLED" and run.data.tags["error"] == "output pipe closed"


@pytest.mark.parametrize("opening", ["start", "resume"])
def test_a_signal_while_the_run_is_written_still_closes_it_killed(store, capsys, monkeypatch,
                                                                 opening):  # fmt: skip
    """SIGTERM landing while the store writes the run (a sweep stopped just as its next cell
    opens its run) is held until the run can be closed: KILLED and resumable, never left
    RUNNING with no process to close it."""
    if opening == "resume":
        assert main(["run", "--method", "fomaml", *TINY, "--tracking-uri", store]) == 0
        (done,) = stored_runs(store)  # as if killed after its last checkpoint
        MlflowClient(store).set_terminated(done.info.run_id, status="KILLED")
    original = getattr(MlflowTracker, opening)

    def signalled(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        signal.raise_signal(signal.SIGTERM)  # after the store wrote it, before it returns
        return result

    monkeypatch.setattr(MlflowTracker, opening, signalled)
    capsys.readouterr()
    args = ["run", "--method", "fomaml", *TINY] if opening == "start" else [
        "run", "--resume", done.info.run_id]  # fmt: skip
    assert main([*args, "--tracking-uri", store]) == 130
    (run,) = stored_runs(store)
    assert run.info.status == "KILLED" and run.data.tags["error"] == "interrupted"
    assert f"resume with --resume {run.info.run_id}" in capsys.readouterr().err


def test_a_lost_run_resumed_to_its_end_no_longer_reads_lost(store, capsys):
    """A run closed FAILED as lost (its process died), then resumed to FINISHED: its old
    reason goes, or ``runs`` and the UI would show "FINISHED (lost: ...)"."""
    from benchmarks.store.lifecycle import mark_lost

    assert main(["run", "--method", "fomaml", *TINY, "--tracking-uri", store]) == 0
    (run,) = stored_runs(store)
    client = MlflowClient(store)
    client.set_terminated(run.info.run_id, status="RUNNING")
    mark_lost(client, run.info.run_id, "lost: no heartbeat since 12:00")
    assert client.get_run(run.info.run_id).data.tags["error"].startswith("lost")
    assert main(["run", "--resume", run.info.run_id, "--tracking-uri", store]) == 0
    again = client.get_run(run.info.run_id)
    assert again.info.status == "FINISHED" and "error" not in again.data.tags


def test_held_interruptions_act_once_released_and_at_once_when_asked_twice():
    from benchmarks.running.console import InterruptionsHeld

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    ignored = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        held = InterruptionsHeld()
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGHUP)  # ignored before: ignored still
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        with pytest.raises(KeyboardInterrupt):
            held.release()
        assert signal.getsignal(signal.SIGTERM) is interrupt
        held.release()  # once only
        held = InterruptionsHeld()
        signal.raise_signal(signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)  # asked twice: at once
        assert signal.getsignal(signal.SIGTERM) is interrupt
        held = InterruptionsHeld()
        signal.raise_signal(signal.SIGTERM)
        held.release(deliver=False)  # the run never executed: dropped, handlers back
        assert signal.getsignal(signal.SIGTERM) is interrupt
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGHUP, ignored)


def test_resume_of_a_finished_run_is_refused_and_leaves_it_finished(store, capsys):
    assert main(["run", "--method", "fomaml", *TINY, "--tracking-uri", store]) == 0
    (run,) = stored_runs(store)
    capsys.readouterr()
    assert main(["run", "--resume", run.info.run_id, "--tracking-uri", store]) == 2
    err = capsys.readouterr().err
    assert "is FINISHED" in err and len(err.strip().splitlines()) == 1
    (again,) = stored_runs(store)
    assert again.info.status == "FINISHED" and again.info.end_time == run.info.end_time


def test_a_checkpoint_save_cut_short_leaves_the_one_before_usable(store):
    """Checkpoints alternate between two files: a save killed mid-upload (here: the file it
    was writing, truncated as a kill would leave it) spoils only that file, and loading
    falls back to the previous checkpoint; the next save goes to the other slot again."""
    from benchmarks.planning.plan import plan_run
    from benchmarks.store.tracking import CHECKPOINT_SLOTS, MlflowTracker

    tracker = MlflowTracker(store)
    run_id = tracker.start(plan_run("fomaml", "sinusoid-5shot", 0, device="cpu"), "built-in")
    for iteration in (1, 2, 3):
        tracker.save_checkpoint({"iteration": iteration, "payload": list(range(5000))})
    tracker.finish("KILLED", error="interrupted")
    reopened = MlflowTracker(store)
    reopened.run_id = run_id
    assert reopened.load_checkpoint()["iteration"] == 3
    # The third save went to slot a (1: b, 2: a... counting from 1): cut it short.
    artifacts = Path(store.removeprefix("sqlite:///")).parent / "artifacts" / "sinusoid-5shot"
    newest = artifacts / run_id / "artifacts" / CHECKPOINT_SLOTS[3 % 2]
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    again = MlflowTracker(store)
    again.run_id = run_id
    assert again.load_checkpoint()["iteration"] == 2  # the one before, whole
    again.save_checkpoint({"iteration": 4})  # overwrites the spoilt slot, not the good one
    last = MlflowTracker(store)
    last.run_id = run_id
    assert last.load_checkpoint()["iteration"] == 4


@pytest.mark.parametrize("written_by", [None, "online"])
def test_a_checkpoint_this_version_cannot_continue_is_refused_and_the_run_left_killed(
    store, capsys, written_by
):
    """A checkpoint from before the shared protocol skeleton (no protocol named) or of
    another protocol: one line, exit 2, and the run stays KILLED and resumable by the
    version that wrote it (it used to be reopened, then FAILED)."""
    from benchmarks.planning.plan import plan_run
    from benchmarks.store.tracking import MlflowTracker

    plan = plan_run("fomaml", "sinusoid-5shot", 0, device="cpu")
    tracker = MlflowTracker(store)
    run_id = tracker.start(plan, "built-in")
    old = {"iteration": 5, "method": {}, **({"protocol": written_by} if written_by else {})}
    tracker.save_checkpoint(old)
    tracker.finish("KILLED", error="interrupted")
    before = MlflowClient(store).get_run(run_id)
    capsys.readouterr()
    assert main(["run", "--resume", run_id, "--tracking-uri", store]) == 2
    err = capsys.readouterr().err.strip()
    words = "by an older mesabench" if written_by is None else "by the online protocol"
    assert len(err.splitlines()) == 1 and words in err and "start the run afresh" in err
    after = MlflowClient(store).get_run(run_id)
    assert after.info.status == "KILLED" and after.info.end_time == before.info.end_time


# -- refused before anything is written ------------------------------------------------------
@pytest.mark.parametrize(
    "setting, words",
    [
        ("iterations=0", "iterations must be >= 1"),
        ("inner_lr=nan", "must be a finite number"),
        ("inner_lr=inf", "must be a finite number"),
        ("outer_lr=-inf", "must be a finite number"),
    ],
)
def test_bad_numbers_are_refused_in_one_line(unopened_store, capsys, setting, words):
    argv = ["run", "--method", "maml", "--set", setting, "--tracking-uri", unopened_store]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1
    assert not _db(unopened_store).exists()


def test_a_truncated_data_file_is_refused_in_one_line(unopened_store, tmp_path, capsys):
    path = write_mnist(tmp_path / "data")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a half-written copy
    args = ["run", "--method", "online_sgd", "--benchmark", "mnist-rotations", *CONTINUAL_TINY,
            "--data-root", str(path.parent), "--tracking-uri", unopened_store]  # fmt: skip
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "truncated or corrupt" in err and len(err.strip().splitlines()) == 1
    assert not _db(unopened_store).exists()
    np.savez(path, x_train=np.zeros((2, 28, 28), np.uint8))  # readable, but lacking keys
    assert main(args) == 2
    assert "lacks keys" in capsys.readouterr().err
    # Labels out of range (before: a FAILED run with an IndexError from deep in the stream).
    images = np.zeros((300, 28, 28), np.uint8)
    good = np.arange(300, dtype=np.uint8) % 10
    for labels, said in ((np.where(good == 3, 37, good).astype(np.uint8), "label 37"),
                         (good.astype(np.float64), "float64")):  # fmt: skip
        np.savez(path, x_train=images, y_train=labels, x_test=images, y_test=labels)
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "y_train must hold integer labels 0-9" in err and said in err, err
        assert len(err.strip().splitlines()) == 1 and not _db(unopened_store).exists()


@pytest.mark.slow  # a fault drill: a real process and no tracking server
def test_an_unreachable_tracking_server_is_reported_within_seconds(run_cli):
    began = time.monotonic()
    done = run_cli("run", "--method", "maml", "--tracking-uri", f"http://127.0.0.1:{free_port()}")
    # Seconds, not MLflow's minutes of retries: most of it is the interpreter's start,
    # which a loaded machine stretches (8-15 s seen); a retry loop would take minutes.
    assert time.monotonic() - began < 60
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: tracking server http://")
    assert "Traceback" not in done.stderr


def test_a_relative_sqlite_uri_is_resolved_against_the_working_directory(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # in-process: the working directory is the question
    code = main(["run", "--method", "fomaml", *TINY, "--tracking-uri", "sqlite:///rel/m.db"])
    out = capsys.readouterr().out
    assert code == 0
    assert (tmp_path / "rel" / "m.db").exists()
    assert f"sqlite:///{tmp_path.resolve()}/rel/m.db" in out.replace("\n", "")


@pytest.mark.parametrize("uri", ["ftp://host/store", "file:///tmp/store", "bogus:x", "runs"])
@pytest.mark.parametrize("command", [["leaderboard"], ["run", "--method", "fomaml", *TINY]])
def test_a_tracking_uri_the_suite_cannot_use_is_one_line_and_writes_nothing(
    uri, command, tmp_path, capsys, monkeypatch
):
    """Before: MLflow's two tracebacks (one about its model registry), exit 1."""
    monkeypatch.chdir(tmp_path)
    assert main([*command, "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: tracking URI {uri!r} is not a store the suite can use")
    assert "sqlite:///PATH/mlflow.db" in err and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_runs_reads_the_default_store_without_making_one_and_closes_lost_runs_in_it(
    tmp_path, store, capsys, monkeypatch
):
    """Before: `runs --stale` made ./runs/mlflow.db in an empty folder, and `runs --stale
    --mark-failed` with no --tracking-uri (the documented way to close a killed sweep's
    runs) ended in an AttributeError."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for extra in ([], ["--mark-failed"]):
        assert main(["runs", "--stale", *extra]) == 0
        assert capsys.readouterr().out.startswith("no store at sqlite:///")
        assert list(empty.iterdir()) == []
    # The default store named by MLFLOW_TRACKING_URI: a lost run in it is closed.
    dead = MlflowTracker(store)
    dead.start(plan_run("fomaml", "sinusoid-5shot", 0, {}, device="cpu"), "built-in")
    dead._heartbeat.stop()  # the process "dies"
    dead.client.set_tag(dead.run_id, HEARTBEAT_TAG, "1.0")  # its last beat: long ago
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    assert main(["runs", "--stale", "--mark-failed"]) == 0
    assert "1 stale run(s); 1 marked FAILED" in capsys.readouterr().out
    assert MlflowClient(store).get_run(dead.run_id).info.status == "FAILED"


def test_ray_resources_beyond_the_cluster_are_refused():
    from benchmarks.planning.config import ConfigError

    check_ray_resources({"CPU": 2.0}, 1.0, 0.0)
    with pytest.raises(ConfigError, match="gpus_per_cell is 1 but the Ray cluster has 0 GPUs"):
        check_ray_resources({"CPU": 2.0}, 1.0, 1.0)
    with pytest.raises(ConfigError, match="cpus_per_cell is 4"):
        check_ray_resources({"CPU": 2.0}, 4.0, 0.0)


# -- claims ---------------------------------------------------------------------------------
def test_a_cell_is_claimed_by_exactly_one_of_many_contenders(store):
    client = MlflowTracker(store).client
    results, barrier = [], threading.Barrier(6)

    def contend():
        barrier.wait()
        results.append(claims.acquire(client, "sinusoid-5shot", "abc123", 0))

    threads = [threading.Thread(target=contend) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [r for r in results if isinstance(r, claims.Claim)]
    assert len(won) == 1 and len(results) == 6
    # The claim hides from the leaderboard's benchmark list.
    from benchmarks.results.leaderboards import benchmarks_in_store
    from benchmarks.store.reader import ClientReader

    assert benchmarks_in_store(ClientReader(client)) == []
    won[0].release()
    again = claims.acquire(client, "sinusoid-5shot", "abc123", 0)
    assert isinstance(again, claims.Claim)


def test_a_dead_holders_claim_is_taken_over(store, monkeypatch):
    # One-second beats (dead after 5 s): the live holder must be seen alive even if a beat
    # comes late on a busy host, which 0.2 s beats (dead after 1 s) did not allow for.
    monkeypatch.setenv(INTERVAL_ENV, "1")
    tracker = MlflowTracker(store)
    plan = plan_run("maml", "sinusoid-5shot", 0, device="cpu")
    claim = claims.acquire(tracker.client, plan.benchmark, plan.config_hash(), 0)
    run_id = tracker.start(plan, "built-in")
    claim.hold(run_id)
    held = claims.acquire(tracker.client, plan.benchmark, plan.config_hash(), 0)
    assert isinstance(held, claims.Holder) and held.run_id == run_id
    assert "running as run" in held.describe()
    tracker._heartbeat.stop()  # the holder dies without releasing
    # Taken over once the holder is 5 beats late: polled for, not slept through.
    cell = (plan.benchmark, plan.config_hash(), 0)
    # A resume of that very run takes the claim over and leaves the run as it is ...
    resumed = wait_for(
        lambda: _claimed(claims.acquire(tracker.client, *cell, resuming=run_id)),
        "the dead holder's claim to be taken over",
    )
    assert isinstance(resumed, claims.Claim)
    assert tracker.client.get_run(run_id).info.status == "RUNNING"
    resumed.hold(run_id)  # ... and the resume died too, holding the claim
    taken = claims.acquire(tracker.client, *cell)
    assert isinstance(taken, claims.Claim)
    # Any other taker closes the dead holder's run, not left RUNNING for a later sweep.
    dead = tracker.client.get_run(run_id)
    assert dead.info.status == "FAILED"
    assert dead.data.tags["error"].startswith("lost: no heartbeat since")


def test_exclusive_runs_never_repeat_a_finished_cell(store, capsys):
    args = ["run", "--method", "fomaml", *TINY, "--tracking-uri", store, "--exclusive"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 3
    (run,) = stored_runs(store)
    assert run.info.status == "FINISHED"
    # A plain run is the user's call: allowed, and the leaderboard counts the cell once.
    assert main(args[:-1]) == 0
    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--format", "json"]) == 0
    (board,) = json.loads(capsys.readouterr().out)
    assert board["duplicates_dropped"] == 1
    assert [r["n"] for r in board["rows"] if r["method"] == "fomaml"] == [1]


@pytest.mark.slow  # a fault drill: runs left without a heartbeat, then a sweep
def test_a_sweep_closes_its_own_lost_cells_when_it_starts(store, capsys, monkeypatch):
    monkeypatch.setenv(INTERVAL_ENV, "0.2")
    overrides = dict(item.split("=") for item in TINY[1::2])
    tracker = MlflowTracker(store)
    lost = tracker.start(plan_run("fomaml", "sinusoid-5shot", 0, overrides, device="cpu"), "x")
    other = MlflowTracker(store)  # a lost run of a cell outside the sweep: left alone
    stranger = other.start(plan_run("anil", "sinusoid-5shot", 0, overrides, device="cpu"), "x")
    tracker._heartbeat.stop()
    other._heartbeat.stop()
    for run_id in (lost, stranger):  # stale after 5 missed beats: waited for, not slept
        wait_for(lambda run_id=run_id: _stale_run(store, run_id), "the lost runs to go stale")
    capsys.readouterr()
    code = main(["sweep", "--benchmark", "sinusoid-5shot", "--methods", "fomaml", "--seeds", "0",
                 *TINY, "--tracking-uri", store])  # fmt: skip
    assert code == 0
    assert "1 lost run(s) closed as FAILED" in capsys.readouterr().out
    client = MlflowClient(store)
    assert client.get_run(lost).info.status == "FAILED"
    assert client.get_run(lost).data.tags["error"].startswith("lost: no heartbeat since")
    assert client.get_run(stranger).info.status == "RUNNING"
    cells = [r for r in stored_runs(store) if r.data.tags.get("mesabench.method") == "fomaml"]
    assert sorted(r.info.status for r in cells) == ["FAILED", "FINISHED"]


@pytest.mark.slow  # end to end through several real CLI processes: with the long checks
def test_the_data_root_and_the_files_read_are_recorded_with_the_run(
    store, tmp_path, cli, monkeypatch
):
    import hashlib

    data = write_mnist(tmp_path / "data")
    args = ["--method", "online_sgd", "--benchmark", "mnist-rotations", *CONTINUAL_TINY,
            "--tracking-uri", store]  # fmt: skip
    # No MESABENCH_DATA in the environment (the sweep's cell processes inherit it): only
    # the plan says where the data is.
    monkeypatch.delenv("MESABENCH_DATA", raising=False)
    done = cli("run", *args, "--data-root", str(data.parent))
    assert done.returncode == 0, done.stderr
    client = MlflowClient(store)
    (run,) = stored_runs(store, "mnist-rotations")
    assert run.data.params["data_root"] == str(data.parent.resolve())
    local = client.download_artifacts(run.info.run_id, "data_files.json", str(tmp_path))
    (record,) = json.loads(Path(local).read_text())
    assert record["path"] == str(data.resolve())
    assert record["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    # A sweep hands its data root to every cell, which records it.
    swept = cli("sweep", "--benchmark", "mnist-rotations", "--methods", "online_sgd",
                "--seeds", "1", *CONTINUAL_TINY, "--data-root", str(data.parent),
                "--tracking-uri", store)  # fmt: skip
    assert swept.returncode == 0, swept.stdout + swept.stderr
    roots = {r.data.params.get("data_root") for r in stored_runs(store, "mnist-rotations")
             if r.data.tags.get("mesabench.method") == "online_sgd"}  # fmt: skip
    assert roots == {str(data.parent.resolve())}


def test_a_synthetic_run_records_no_data_files(store, monkeypatch):
    monkeypatch.delenv("MESABENCH_DATA", raising=False)
    assert main(["run", "--method", "fomaml", *TINY, "--tracking-uri", store]) == 0
    (run,) = stored_runs(store)
    names = {a.path for a in MlflowClient(store).list_artifacts(run.info.run_id)}
    assert "data_files.json" not in names and run.data.params["data_root"] == "-"


@pytest.mark.slow  # a fault drill: Ctrl-C to a real process waiting for a claim
def test_ctrl_c_while_waiting_for_a_claim_says_one_line_and_records_nothing(store):
    overrides = dict(item.split("=") for item in TINY[1::2])
    plan = plan_run("fomaml", "sinusoid-5shot", 0, overrides, device="cpu")
    holder = MlflowTracker(store)
    claim = claims.acquire(holder.client, plan.benchmark, plan.config_hash(), 0)
    holder_run = holder.start(plan, "built-in")
    claim.hold(holder_run)  # a live holder: the second attempt must wait
    waiting = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "run", "--method", "fomaml", *TINY,
         "--tracking-uri", store, "--exclusive"],
        env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    line = waiting.stderr.readline()
    while line and "waiting:" not in line:
        line = waiting.stderr.readline()
    assert f"is running as run {holder_run}" in line
    waiting.send_signal(signal.SIGINT)
    _, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 130
    assert err.strip() == "interrupted" and "Traceback" not in err
    assert [r.info.run_id for r in stored_runs(store)] == [holder_run]  # no second run
    holder.finish("FINISHED")
    claim.release()


def _started(command: list[str]) -> subprocess.Popen:
    """A real run process, returned once it has said which run it trains (the run is in the
    store and RUNNING: its header line is printed after that, before the first step)."""
    process = subprocess.Popen(command, cwd=ROOT, env=python_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    for line in process.stdout:
        if line.startswith("fomaml on "):
            return process
    raise AssertionError(process.communicate())


@pytest.mark.slow  # a drill: real processes, a real store
def test_one_writer_per_run_a_live_run_and_a_second_resume_are_refused(store, cli):
    base = [sys.executable, "-m", "benchmarks", "run"]
    # A budget no machine finishes while the test looks on: each SIGINT below must find its
    # run still training (at 20,000 steps a loaded machine's in-process refusals took long
    # enough for a resumed run to finish, exit 0 instead of 130). No progress line is
    # printed before 5% of it: nothing fills the pipe nobody reads.
    first = _started([*base, "--method", "fomaml", "--set", "iterations=10000000",
                      "--set", "checkpoint_every=500", "--tracking-uri", store])  # fmt: skip
    (live,) = stored_runs(store)
    # The refusals are called in-process: the writers they are refused beside are processes.
    refused = cli("run", "--resume", live.info.run_id, "--tracking-uri", store)
    assert refused.returncode == 2
    assert f"cannot resume run {live.info.run_id}: it is still running" in refused.stderr
    first.send_signal(signal.SIGINT)
    assert first.wait(timeout=120) == 130
    # Two resumes of the KILLED run at once: the second is refused, the first goes on.
    resumed = _started([*base, "--resume", live.info.run_id, "--tracking-uri", store])
    second = cli("run", "--resume", live.info.run_id, "--tracking-uri", store)
    assert second.returncode == 2, second.stderr
    assert f"cannot resume run {live.info.run_id}: " in second.stderr
    assert "still running" in second.stderr or "its cell is" in second.stderr
    resumed.send_signal(signal.SIGINT)
    assert resumed.wait(timeout=120) == 130
    (run,) = stored_runs(store)  # one run, written by one process at a time
    assert run.info.status == "KILLED"
    # Once nobody holds it, a resume goes on (and is let go at the end).
    again = _started([*base, "--resume", live.info.run_id, "--tracking-uri", store])
    again.send_signal(signal.SIGINT)
    assert again.wait(timeout=120) == 130


def test_runs_that_record_the_same_data_at_one_moment_all_record_it(store):
    """Cells of one sweep start together and log the same datasets: MLflow checks for the
    dataset, then inserts it, so all but one found it missing and failed on its unique
    constraint (a table's cell left RUNNING, seen under load). Eight runs at a barrier,
    three times over: every one records its three splits."""
    for round_ in range(3):
        trackers = []
        for seed in range(8):
            tracker = MlflowTracker(store)
            tracker.start(plan_run("maml", "sinusoid-5shot", 8 * round_ + seed, {},
                                   device="cpu"), "built-in")  # fmt: skip
            trackers.append(tracker)
        barrier, errors = threading.Barrier(len(trackers)), []

        def record(tracker, barrier=barrier, errors=errors):
            barrier.wait()
            try:
                tracker.log_datasets([])
            except Exception as err:  # noqa: BLE001  (collected, asserted below)
                errors.append(err)

        threads = [threading.Thread(target=record, args=(t,)) for t in trackers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        client = MlflowClient(store)
        for tracker in trackers:
            inputs = client.get_run(tracker.run_id).inputs.dataset_inputs
            assert sorted(i.dataset.name for i in inputs) == [
                "sinusoid-5shot:test", "sinusoid-5shot:train", "sinusoid-5shot:validation"]


def test_a_run_whose_start_cannot_be_recorded_is_closed_failed_with_the_reason(
    store, monkeypatch
):
    """The run is written, then recording what it read fails (a store error injected at
    that one write): it is closed FAILED with the error, never left RUNNING."""

    def refuse(self, files):
        raise RuntimeError("the store refused the datasets")

    monkeypatch.setattr(MlflowTracker, "log_datasets", refuse)
    with pytest.raises(RuntimeError, match="refused the datasets"):  # an error of ours: raised
        main(["run", "--method", "maml", *TINY, "--tracking-uri", store])
    (run,) = stored_runs(store)
    assert run.info.status == "FAILED"
    assert "the store refused the datasets" in run.data.tags["error"]


def test_metrics_a_full_disk_kept_aside_are_written_back_and_the_run_closed(
    store, tmp_path, capsys, monkeypatch
):
    """A run whose status did not fit on a full disk stays RUNNING, its refused metrics in
    $TMPDIR/mesabench-unsaved/RUN.json: `runs` names the file, and `runs --stale
    --mark-failed` writes the rows back (none twice), closes the run FAILED with the
    reason, and removes the file."""
    import tempfile

    from mlflow.entities import Metric

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    tracker = MlflowTracker(store)
    run_id = tracker.start(plan_run("fomaml", "sinusoid-5shot", 0, {}, device="cpu"), "built-in")
    tracker._heartbeat.stop()
    tracker.client.log_metric(run_id, "train/loss", 0.9, step=0)  # written before the disk filled
    tracker.space_problem = "database or disk is full"
    tracker._pending = [Metric("train/loss", v, 1000 + s, s) for s, v in ((0, 0.9), (1, 0.8),
                                                                        (2, 0.7))]  # fmt: skip
    kept = Path(tracker._keep_unsaved())
    assert kept.parent == tmp_path / "tmp" / "mesabench-unsaved" and kept.exists()
    capsys.readouterr()
    assert main(["runs", "--tracking-uri", store]) == 0
    assert f"run {run_id} left metrics the store could not take in {kept}" in (
        capsys.readouterr().out)  # fmt: skip
    assert kept.exists()  # listing writes nothing
    assert main(["runs", "--stale", "--mark-failed", "--tracking-uri", store]) == 0
    said = capsys.readouterr().out
    assert f"wrote 2 kept metric row(s) of run {run_id} from {kept}; closed FAILED" in said
    run = MlflowClient(store).get_run(run_id)
    assert run.info.status == "FAILED" and "ran out of space" in run.data.tags["error"]
    history = MlflowClient(store).get_metric_history(run_id, "train/loss")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.9), (1, 0.8), (2, 0.7)]
    assert not kept.exists()
