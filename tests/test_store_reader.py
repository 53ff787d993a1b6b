"""The results commands' store reading: cheap (no MLflow, no torch), and robust to a store
a killed writer left mid-transaction."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from benchmarks.store.reader import SqliteReader, open_reader, sqlite_path
from tests.helpers import fake_run, python_env


def test_leaderboard_and_compare_import_neither_mlflow_nor_torch(store):
    a = fake_run(store, "maml", 0, {"final/test_loss": 0.5})
    b = fake_run(store, "fomaml", 0, {"final/test_loss": 0.25})
    probe = textwrap.dedent(
        f"""
        import sys
        from benchmarks.cli.main import main
        assert main(["leaderboard", "--tracking-uri", {store!r}, "--format", "csv"]) == 0
        assert main(["compare", {a!r}, {b!r}, "--tracking-uri", {store!r}]) == 0
        heavy = sorted(m for m in ("torch", "mlflow") if m in sys.modules)
        print("HEAVY", heavy)
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=python_env(), timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout
    assert "fomaml" in out.stdout and "0.25" in out.stdout  # the board and the comparison


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_a_writer_killed_mid_transaction_leaves_a_readable_store(store, journal):
    """Our stores use the write-ahead log; MLflow alone, or a filesystem without shared
    memory, leaves the rollback journal, whose hot journal a read-only connection cannot
    roll back. Either way the reader sees the last committed state."""
    import sqlite3

    fake_run(store, "maml", 0, {"final/test_loss": 0.5})
    db = sqlite_path(store)
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        if journal == "delete":  # a copy no one else has open, in rollback-journal mode
            db = db.parent / "copy.db"
            with sqlite3.connect(db) as copy:
                connection.backup(copy)
                copy.execute("PRAGMA journal_mode=DELETE")
            copy.close()
            store = f"sqlite:///{db}"
    connection.close()
    writer = textwrap.dedent(
        f"""
        import os, signal, sqlite3
        connection = sqlite3.connect({str(db)!r})
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("UPDATE runs SET name = 'half-written'")
        connection.execute("DELETE FROM latest_metrics")
        connection.commit  # never called: the process dies mid-transaction
        # Spill the change to the database file, so that only the journal can undo it.
        connection.execute("PRAGMA cache_size = 1")
        connection.execute("CREATE TABLE ballast AS SELECT * FROM params")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    killed = subprocess.run([sys.executable, "-c", writer], timeout=60)
    assert killed.returncode == -signal.SIGKILL
    assert os.path.exists(f"{db}-journal" if journal == "delete" else f"{db}-wal")
    reader = open_reader(store)
    assert isinstance(reader, SqliteReader)
    (run,) = reader.runs(reader.experiment_id("sinusoid-5shot"))
    assert run.name != "half-written" and run.metrics == {"final/test_loss": 0.5}


def test_a_sweeps_start_up_check_reads_only_its_cells_through_the_tag_index(store):
    """store_state asks for the runs of its own config hashes; the SQLite reader finds them
    through the (key, value) index our stores carry, so the cost follows the cells, not the
    store (bench/leaderboard_speed.py times it at 1k and 100k runs)."""
    import sqlite3

    from benchmarks.store.tracking import MlflowTracker
    from benchmarks.sweeps.in_store import store_state

    mine = fake_run(store, "maml", 0, {"final/test_loss": 0.5})
    fake_run(store, "fomaml", 0, {"final/test_loss": 0.5})  # another cell, not this sweep's
    tracker = MlflowTracker(store)
    reader = open_reader(store)
    experiment = reader.experiment_id("sinusoid-5shot")
    (run,) = [r for r in reader.runs(experiment) if r.run_id == mine]
    config = run.tags["mesabench.config_hash"]
    asked = []
    original = SqliteReader.runs

    def spy(self, experiment_id, where=None, only=None):
        asked.append(where)
        return original(self, experiment_id, where, only)

    SqliteReader.runs = spy
    try:
        finished, closed = store_state(tracker, "sinusoid-5shot", {("maml", config, 0)})
    finally:
        SqliteReader.runs = original
    assert asked == [("mesabench.config_hash", {config})]
    assert finished == {("maml", config, 0)} and closed == 0
    db = sqlite_path(store)
    with sqlite3.connect(db) as connection:
        plan = connection.execute(
            "EXPLAIN QUERY PLAN SELECT run_uuid FROM tags WHERE key = ? AND value IN (?)",
            ("mesabench.config_hash", config),
        ).fetchall()
    connection.close()
    assert any("mesabench_tags_key_value_run" in str(step) for step in plan), plan


def test_runs_of_one_configuration_share_its_params_but_never_each_others_seed(store):
    from benchmarks.store.reader import Only

    first = fake_run(store, "maml", 0, {"final/test_loss": 0.5})
    second = fake_run(store, "maml", 1, {"final/test_loss": 0.25})
    reader = open_reader(store)
    experiment = reader.experiment_id("sinusoid-5shot")
    runs = {r.run_id: r for r in reader.runs(experiment)}
    assert runs[first].params["seed"] == "0" and runs[second].params["seed"] == "1"
    assert runs[first].params["method.inner_lr"] == runs[second].params["method.inner_lr"]
    assert dict(runs[first].params).keys() == dict(runs[second].params).keys()
    lean = {r.run_id: r for r in reader.runs(experiment, only=Only())}
    for run_id in (first, second):
        assert "seed" not in lean[run_id].params and "device" not in lean[run_id].params
        assert lean[run_id].params["method.inner_lr"] == runs[run_id].params["method.inner_lr"]
        assert "mesabench.method" in lean[run_id].tags
        assert "mlflow.user" not in lean[run_id].tags and "mlflow.user" in runs[run_id].tags


def test_a_boards_bulk_read_keeps_what_differs_between_runs_of_one_configuration(store):
    """The bulk read (``Only``: a configuration's tags, params and metric names read once,
    from a FINISHED run of it) gives each run its own seed, version, data digest, import
    marks and metrics (NaN and missing ones too), where runs of one configuration differ
    in them; a RUNNING run keeps its own heartbeat; a board of either read is the same."""
    from mlflow.tracking import MlflowClient

    from benchmarks.results.formats import render
    from benchmarks.results.leaderboards import build_leaderboard, read_runs
    from benchmarks.store.bulk import PROCESS_TAGS, RUN_TAGS, metric_names
    from benchmarks.store.reader import Only

    first = fake_run(store, "maml", 0, {"final/test_loss": 0.5, "final/test_loss_ci95": 0.1})
    second = fake_run(store, "maml", 1, {"final/test_loss": float("nan")}, version="0.0.9")
    third = fake_run(store, "maml", 2, {"final/test_loss": 0.75, "final/test_loss_ci95": 0.2})
    running = fake_run(store, "maml", 3, {}, status="RUNNING")
    other = fake_run(store, "fomaml", 0, {"final/test_loss": 0.6})
    # Another benchmark's run with the same metrics and tags: a scan must leave it out.
    fake_run(store, "maml", 0, {"final/test_loss": 0.4, "final/peak_gpu_mib": 3.0},
             benchmark="sinusoid-10shot")  # fmt: skip
    client = MlflowClient(store)
    client.set_tag(third, "mesabench.data_digest", "other-data")
    client.set_tag(first, "mesabench.data_digest", "data")
    client.set_tag(third, "mesabench.imported_from", "lab.mesabundle")
    client.set_tag(third, "mesabench.source_run", "abc")
    client.set_tag(third, "mesabench.headline", '["final/test_loss"]')  # a newer version's
    client.set_tag(first, "lab", "a")  # a --tag filter's key, on one run of the three
    client.log_metric(third, "final/peak_gpu_mib", 12.0)  # one run's only (its device's)
    client.log_metric(third, "train/loss", 1.0)  # not a final metric: no reader has it
    reader = open_reader(store)
    experiment = reader.experiment_id("sinusoid-5shot")
    full = {r.run_id: r for r in reader.runs(experiment)}
    bulk = {r.run_id: r for r in reader.runs(experiment, only=Only(frozenset({"lab"})))}
    reader.few_runs = 0  # a large store's read: each tag's index scanned, not asked by id
    scanned = {r.run_id: r for r in reader.runs(experiment, only=Only(frozenset({"lab"})))}
    assert {k: dict(r.tags) for k, r in scanned.items()} == {
        k: dict(r.tags) for k, r in bulk.items()}  # fmt: skip
    assert {k: dict(r.params) for k, r in scanned.items()} == {
        k: dict(r.params) for k, r in bulk.items()}  # fmt: skip
    assert {k: repr(dict(r.metrics)) for k, r in scanned.items()} == {
        k: repr(dict(r.metrics)) for k, r in bulk.items()}  # fmt: skip (NaN != NaN: as text)
    assert full.keys() == bulk.keys() == {first, second, third, running, other}
    for run_id, run in full.items():
        lean = bulk[run_id]
        suite = {k: v for k, v in run.tags.items() if k.startswith("mesabench.") or k == "lab"}
        if run.status == "FINISHED":  # its process's tags are not read: absent, not another's
            suite = {k: v for k, v in suite.items() if k not in PROCESS_TAGS}
        assert dict(lean.tags) == suite, run_id
        for key in (*RUN_TAGS, "mesabench.no_such_tag"):
            assert lean.tags.get(key) == run.tags.get(key) and (key in lean.tags) == (
                key in run.tags), (run_id, key)  # fmt: skip
        assert dict(lean.metrics).keys() == run.metrics.keys()
        for name, value in run.metrics.items():
            assert lean.metrics[name] == value or (value != value and lean.metrics[name] != (
                lean.metrics[name]))  # fmt: skip
        assert "final/test_loss_ci95" in lean.metrics or "final/test_loss_ci95" not in run.metrics
    assert bulk[running].tags["mesabench.heartbeat"] == full[running].tags["mesabench.heartbeat"]
    assert bulk[first].tags["lab"] == "a" and "lab" not in bulk[second].tags
    assert "final/peak_gpu_mib" in dict(bulk[third].metrics)
    assert "final/peak_gpu_mib" in metric_names([r.metrics for r in bulk.values()])
    assert "train/loss" not in bulk[third].metrics and bulk[third].metrics.get("train/loss") is None
    assert bulk[third].tags["mesabench.data_digest"] == "other-data"
    assert bulk[second].tags["mesabench.version"] == "0.0.9"
    assert "mesabench.imported_from" not in bulk[first].tags
    boards = [build_leaderboard(read_runs(reader, experiment, only=only), "sinusoid-5shot")
              for only in (None, Only())]  # fmt: skip
    assert render(boards[:1], "json") == render(boards[1:], "json")
    assert "different data" in render(boards[1:], "json")


def test_a_schema_the_direct_reader_does_not_know_is_read_through_mlflow(store, monkeypatch):
    """Another MLflow version may change its tables: a failing SQL read falls back to the
    MLflow client, which gives the same runs."""
    import sqlite3

    run_id = fake_run(store, "maml", 0, {"final/test_loss": 0.5})
    reader = open_reader(store)
    experiment = reader.experiment_id("sinusoid-5shot")
    direct = reader.runs(experiment)

    def unknown_schema(*args, **kwargs):
        raise sqlite3.OperationalError("no such column: runs.start_time")

    monkeypatch.setattr(SqliteReader, "_runs", unknown_schema)
    monkeypatch.setattr(SqliteReader, "_select", unknown_schema)
    (through_client,) = reader.runs(experiment)
    assert [through_client] == direct and through_client.run_id == run_id
    assert reader.run(run_id) == through_client


@pytest.mark.parametrize("kind", ["folder", "not sqlite", "under a file"])
def test_a_store_that_cannot_be_opened_is_one_line_and_exit_2_at_once(tmp_path, capsys, kind):
    """No retrying a store that cannot be opened: that is bad input, not an outage. (The CLI
    in-process: the answer and what is written are the question, not the process.)"""
    import time

    from benchmarks.cli.main import main

    if kind == "folder":
        (tmp_path / "a-folder").mkdir()
        path, why = tmp_path / "a-folder", "is a folder, not a SQLite file"
    elif kind == "not sqlite":
        path, why = tmp_path / "notes.db", "is not a SQLite database"
        path.write_text("my notes\n")
    else:
        (tmp_path / "a-file").write_text("x")
        path, why = tmp_path / "a-file" / "runs" / "mlflow.db", "is not a writable folder"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for command in (["run", "--method", "maml"], ["leaderboard"]):
        began = time.monotonic()
        capsys.readouterr()
        code = main([*command, "--tracking-uri", f"sqlite:///{path}"])
        err = capsys.readouterr().err
        if command[0] == "leaderboard" and kind == "under a file":
            assert code == 0  # nothing to read: an empty board, as for a new store
            continue
        assert code == 2, err
        assert time.monotonic() - began < 30  # retrying took two minutes; no retry, no wait
        (line,) = err.strip().splitlines()
        assert line.startswith("error: store sqlite:///") and why in line
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written
