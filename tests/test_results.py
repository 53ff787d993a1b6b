"""Leaderboards, exports, the HTML report (in a real headless browser), ui and compare."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from benchmarks.cli import main
from benchmarks.runner import plan_run
from benchmarks.tracking import MlflowTracker
from tests.helpers import CONTINUAL_TINY, TINY, free_port, python_env
from tests.image_fixtures import write_mnist


def _fake_run(store, method, seed, metrics, status="FINISHED", version=None, **overrides):
    """A run recorded exactly as the runner records one, with the given final metrics."""
    plan = plan_run(method, "sinusoid-5shot", seed, overrides, device="cpu")
    tracker = MlflowTracker(store)
    run_id = tracker.start(plan, "built-in")
    if version is not None:
        tracker.client.set_tag(run_id, "mesabench.version", version)
    tracker.log_metrics(metrics, step=1)
    tracker.finish(status)
    return run_id


def _board(store, capsys, *extra):
    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--format", "json", *extra]) == 0
    (board,) = json.loads(capsys.readouterr().out)
    return board


def test_leaderboard_equals_an_independent_recomputation_from_sqlite(store, capsys):
    losses = {("maml", 0): 0.5, ("maml", 1): 0.7, ("maml", 2): 0.6, ("fomaml", 0): 0.9}
    for (method, seed), loss in losses.items():
        _fake_run(store, method, seed, {"final/test_loss": loss, "final/train_time_s": 10.0})
    _fake_run(store, "anil", 0, {"final/test_loss": 0.1}, status="FAILED")
    _fake_run(store, "anil", 1, {"final/test_loss": 0.1}, status="KILLED")
    board = _board(store, capsys)

    # Recompute from the SQLite tables directly, without MLflow's client.
    db = sqlite3.connect(store.removeprefix("sqlite:///"))
    rows = db.execute(
        """SELECT t.value, r.status, m.value FROM runs r
           JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = 'mesabench.method'
           LEFT JOIN latest_metrics m ON m.run_uuid = r.run_uuid AND m.key = 'final/test_loss'"""
    ).fetchall()
    finished: dict[str, list[float]] = {}
    for method, status, value in rows:
        if status == "FINISHED":
            finished.setdefault(method, []).append(value)
    ours = [row for row in board["rows"] if not row["reference"]]
    assert [r["method"] for r in ours] == sorted(
        finished, key=lambda m: statistics.mean(finished[m])
    )
    for row in ours:
        values = finished[row["method"]]
        stats = row["stats"]["final/test_loss"]
        assert stats["mean"] == pytest.approx(statistics.mean(values))
        expected_std = statistics.stdev(values) if len(values) > 1 else 0.0
        assert stats["std"] == pytest.approx(expected_std)
        assert row["seeds"] == len(values)
    assert board["excluded"]["FAILED"] == 1 and board["excluded"]["KILLED"] == 1
    assert board["metric"] == "final/test_loss" and board["higher_is_better"] is False


def test_grouping_filters_and_other_versions(store, capsys):
    _fake_run(store, "maml", 0, {"final/test_loss": 0.5}, inner_lr="0.01")
    _fake_run(store, "maml", 1, {"final/test_loss": 0.7}, inner_lr="0.01")
    _fake_run(store, "maml", 0, {"final/test_loss": 0.3}, inner_lr="0.05")
    _fake_run(store, "fomaml", 0, {"final/test_loss": 0.4}, version="0.0.1")

    board = _board(store, capsys)
    configs = {r["config"] for r in board["rows"] if r["method"] == "maml"}
    assert configs == {"inner_lr=0.01", "inner_lr=0.05"}  # what tells the two apart
    flagged = [r for r in board["rows"] if r["method"].endswith("*")]
    assert [r["method"] for r in flagged] == ["fomaml *"]

    merged = _board(store, capsys, "--group-by", "method")
    maml = next(r for r in merged["rows"] if r["method"] == "maml")
    assert maml["seeds"] == 3 and maml["stats"]["final/test_loss"]["mean"] == pytest.approx(0.5)

    by_lr = _board(store, capsys, "--param", "method.inner_lr=0.05")
    assert [r["method"] for r in by_lr["rows"]] == ["maml"]
    assert _board(store, capsys, "--version", "0.0.1")["rows"][0]["method"] == "fomaml *"
    assert _board(store, capsys, "--since", "2999-01-01")["rows"] == []
    assert len(_board(store, capsys, "--tag", "mesabench.seed=1")["rows"]) == 1
    assert main(["leaderboard", "--tracking-uri", store, "--since", "yesterday"]) == 2


def test_published_rows_stand_beside_ours_and_outside_our_statistics(store, capsys):
    from benchmarks.leaderboard import build_leaderboard

    board = build_leaderboard([], "mnist-rotations")
    refs = [r for r in board.rows if r.is_reference]
    assert {r.method for r in refs} >= {"lamaml", "sparse_lamaml", "online_sgd"}
    lamaml = next(r for r in refs if r.method == "lamaml")
    assert lamaml.stat("final/ra")[0] == pytest.approx(0.7742)
    assert board.ours == []
    capsys.readouterr()
    assert main(["leaderboard", "--benchmark", "mnist-rotations", "--tracking-uri", store,
                 "--format", "markdown"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "| ref | _lamaml_ | published (thesis tab. 4.5) | 0.7742 | -0.0864 |" in out


@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    """Three methods x two seeds on sinusoid-5shot and two methods on a continual stream."""
    root = tmp_path_factory.mktemp("populated")
    store = f"sqlite:///{root / 'store' / 'mlflow.db'}"
    MlflowTracker(store)
    for method in ("maml", "fomaml", "sparse_maml"):
        for seed in ("0", "1"):
            assert (
                main(["run", "--method", method, "--seed", seed, *TINY, "--tracking-uri", store])
                == 0
            )
    data = write_mnist(root / "data").parent
    for method in ("lamaml", "online_sgd"):
        args = ["run", "--method", method, "--benchmark", "mnist-rotations", *CONTINUAL_TINY]
        assert main([*args, "--data-root", str(data), "--tracking-uri", store]) == 0
    return store, root


def test_exports_show_every_configuration(populated, tmp_path, capsys):
    store, _ = populated
    for fmt in ("markdown", "csv", "json", "html"):
        out = tmp_path / f"board.{fmt}"
        assert main(["leaderboard", "--all", "--tracking-uri", store, "--format", fmt,
                     "--output", str(out)]) == 0  # fmt: skip
        text = out.read_text()
        for method in ("maml", "fomaml", "sparse_maml", "lamaml", "online_sgd"):
            assert method in text, (fmt, method)
    boards = json.loads((tmp_path / "board.json").read_text())
    assert [b["benchmark"] for b in boards] == ["mnist-rotations", "sinusoid-5shot"]
    sinusoid = boards[1]
    assert {r["method"]: r["seeds"] for r in sinusoid["rows"]} == {
        "maml": 2, "fomaml": 2, "sparse_maml": 2
    }  # fmt: skip
    continual = boards[0]
    assert continual["columns"][:2] == ["final/ra", "final/bti"]
    markdown = (tmp_path / "board.markdown").read_text()
    assert "### sinusoid-5shot" in markdown and "| # | method | config | test_loss |" in markdown
    header = (tmp_path / "board.csv").read_text().splitlines()[0]
    assert header.startswith("benchmark,rank,method,config,")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed (.ci/run installs it)")
def test_report_renders_in_headless_chromium(populated, tmp_path):
    store, _ = populated
    assert main(["report", "--all", "--tracking-uri", store, "--output", str(tmp_path)]) == 0
    page = tmp_path / "index.html"
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # self-contained
    browser = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0"]  # fmt: skip
    dom = subprocess.run(
        [*browser, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "CONSOLE" not in dom.stderr or "Uncaught" not in dom.stderr
    assert not [line for line in dom.stderr.splitlines() if ":CONSOLE(" in line and "ERROR" in line]
    assert dom.stdout.count('<table class="leaderboard"') == 2
    assert 'data-broken="0"' in dom.stdout  # every embedded image decoded
    images = int(dom.stdout.split('data-images="')[1].split('"')[0])
    assert images >= 5  # learning curves, sparsity and accuracy matrices
    for method in ("sparse_maml", "lamaml", "online_sgd"):
        assert method in dom.stdout
    shot = tmp_path / "report.png"
    subprocess.run(
        [*browser, f"--screenshot={shot}", "--window-size=1400,1800", page.as_uri()],
        capture_output=True,
        timeout=120,
    )
    assert shot.exists() and shot.stat().st_size > 10_000


def test_compare_shows_config_and_metric_differences(populated, capsys):
    store, _ = populated
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name("sinusoid-5shot").experiment_id])
    maml = [r for r in runs if r.data.tags["mesabench.method"] == "maml"][0]
    sparse = [r for r in runs if r.data.tags["mesabench.method"] == "sparse_maml"][0]
    capsys.readouterr()
    assert main(["compare", maml.info.run_id, sparse.info.run_id, "--tracking-uri", store]) == 0
    out = capsys.readouterr().out
    assert "method.modulation" in out and "binary_mask" in out and "final/test_loss" in out
    assert "method.hidden" not in out  # equal settings are hidden unless --all
    assert main(["compare", maml.info.run_id, "nope", "--tracking-uri", store]) == 2


def test_ui_serves_the_store_on_localhost(populated):
    store, root = populated
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "ui", "--tracking-uri", store, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=python_env(),
        cwd=Path(root),
    )
    try:
        deadline, status = time.monotonic() + 90, None
        while time.monotonic() < deadline and status is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                    status = response.status
            except OSError:
                time.sleep(1)
        assert status == 200
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0].decode()
    assert f"http://127.0.0.1:{port}" in output


def test_the_direct_sqlite_reader_equals_the_mlflow_client(store):
    from benchmarks.leaderboard import read_runs
    from benchmarks.tracking import sqlite_path

    _fake_run(store, "maml", 0, {"final/test_loss": 0.5, "final/train_time_s": 3.0})
    _fake_run(store, "fomaml", 1, {"final/test_loss": 0.25}, status="KILLED")
    _fake_run(store, "metasgd", 0, {"final/test_loss": math.nan})  # a diverged run
    tracker = MlflowTracker(store)
    experiment = tracker.experiment_id("sinusoid-5shot", create=False)
    direct = sorted(
        read_runs(tracker.client, experiment, sqlite_path(store)), key=lambda r: r.run_id
    )
    client = sorted(read_runs(tracker.client, experiment), key=lambda r: r.run_id)
    assert len(direct) == 3
    nan_free = [r for r in direct if r.method != "metasgd"]
    assert nan_free == [r for r in client if r.method != "metasgd"]
    (diverged,) = [r for r in direct if r.method == "metasgd"]
    assert math.isnan(diverged.metrics["final/test_loss"])  # not MLflow's stored 0
