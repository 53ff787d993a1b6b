"""Leaderboards, exports, the HTML report (in a real headless browser), ui and compare."""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from benchmarks.cli.main import main
from benchmarks.store.tracking import MlflowTracker
from tests.helpers import (
    CONTINUAL_TINY,
    TINY,
    fake_run,
    free_port,
    leaderboard_json,
    python_env,
)
from tests.image_fixtures import write_mnist


def _independent_stats(db_path: str, metric: str) -> dict[str, tuple[int, float, float, float]]:
    """n, mean, std and the 95% t-interval half-width per method, from the raw SQLite tables
    with scipy: FINISHED runs only, one run per (config, seed) (the latest started)."""
    from scipy import stats as scipy_stats

    db = sqlite3.connect(db_path)
    rows = db.execute(
        """SELECT method.value, hash.value, seed.value, r.start_time, r.run_uuid, m.value
           FROM runs r
           JOIN tags method ON method.run_uuid = r.run_uuid AND method.key = 'mesabench.method'
           JOIN tags hash ON hash.run_uuid = r.run_uuid AND hash.key = 'mesabench.config_hash'
           JOIN tags seed ON seed.run_uuid = r.run_uuid AND seed.key = 'mesabench.seed'
           JOIN latest_metrics m ON m.run_uuid = r.run_uuid AND m.key = ?
           WHERE r.status = 'FINISHED'""",
        (metric,),
    ).fetchall()
    latest: dict[tuple, tuple] = {}
    for method, config, seed, start, run_id, value in rows:
        key = (method, config, seed)
        if key not in latest or (start, run_id) > latest[key][:2]:
            latest[key] = (start, run_id, value)
    by_method: dict[str, list[float]] = {}
    for (method, _, _), (_, _, value) in latest.items():
        by_method.setdefault(method, []).append(value)
    out = {}
    for method, values in by_method.items():
        n = len(values)
        mean = statistics.mean(values)
        std = statistics.stdev(values) if n > 1 else math.nan
        half = scipy_stats.t.ppf(0.975, n - 1) * std / math.sqrt(n) if n > 1 else math.nan
        out[method] = (n, mean, std, half)
    return out


def test_every_format_equals_an_independent_recomputation_from_sqlite(store, capsys, tmp_path):
    losses = {
        ("maml", 0): 0.5,
        ("maml", 1): 0.7,
        ("maml", 2): 0.61,
        ("fomaml", 0): 0.9,
        ("fomaml", 1): 0.93,
        ("fomaml", 2): 0.8,
        ("fomaml", 3): 1.0,
        ("anil", 4): 0.2,
    }
    for (method, seed), loss in losses.items():
        fake_run(store, method, seed, {"final/test_loss": loss, "final/train_time_s": 10.0})
    # The same seed again: it replaces the earlier run of its cell, never a second seed.
    fake_run(store, "maml", 2, {"final/test_loss": 0.65})
    fake_run(store, "anil", 0, {"final/test_loss": 0.1}, status="FAILED")
    fake_run(store, "anil", 1, {"final/test_loss": 0.1}, status="KILLED")
    expected = _independent_stats(store.removeprefix("sqlite:///"), "final/test_loss")
    assert expected["maml"][0] == 3 and expected["maml"][1] == pytest.approx((0.5 + 0.7 + 0.65) / 3)

    board = leaderboard_json(store, capsys)
    ours = [row for row in board["rows"] if not row["reference"]]
    assert [r["method"] for r in ours] == sorted(expected, key=lambda m: expected[m][1])
    assert [r["rank"] for r in ours] == [1, 2, 3]
    for row in ours:
        n, mean, std, half = expected[row["method"]]
        cells = row["stats"]["final/test_loss"]
        assert row["n"] == cells["n"] == n
        assert cells["mean"] == pytest.approx(mean, rel=1e-12)
        if n == 1:  # one seed: no spread at all, never a fake 0
            assert cells["std"] is None and cells["ci95_low"] is None
        else:
            assert cells["std"] == pytest.approx(std, rel=1e-12)
            assert cells["ci95_low"] == pytest.approx(mean - half, rel=1e-9)
            assert cells["ci95_high"] == pytest.approx(mean + half, rel=1e-9)
    assert board["excluded"]["FAILED"] == 1 and board["excluded"]["KILLED"] == 1
    assert board["duplicates_dropped"] == 1
    assert board["metric"] == "final/test_loss" and board["higher_is_better"] is False

    def text(method: str) -> str:
        n, mean, std, half = expected[method]
        if n == 1:
            return f"{mean:.4f}"
        return f"{mean:.4f} ± {std:.4f} [{mean - half:.4f}, {mean + half:.4f}]"

    outputs = {}
    for fmt in ("markdown", "csv", "html", "table"):
        path = tmp_path / f"board.{fmt}"
        assert main(["leaderboard", "--tracking-uri", store, "--format", fmt,
                     "--output", str(path)]) == 0  # fmt: skip
        outputs[fmt] = path.read_text()
    for method in expected:
        for fmt in ("markdown", "html", "table"):
            assert text(method) in outputs[fmt], (fmt, method)
    assert "± 0.0000" not in outputs["markdown"]
    for fmt in ("markdown", "html", "table"):  # every statistic is named in the header
        assert "n (seeds)" in outputs[fmt] and "mean ± std [95% CI]" in outputs[fmt]
        assert "Student t" in outputs[fmt] and "ddof 1" in outputs[fmt]
    import csv as csv_module

    csv_rows = list(csv_module.DictReader(outputs["csv"].splitlines()))
    for row in csv_rows:
        if row["status"] != "ranked":
            continue
        n, mean, std, half = expected[row["method"]]
        assert int(row["test_loss_n"]) == n
        assert float(row["test_loss_mean"]) == pytest.approx(mean, rel=1e-12)
        if n > 1:
            assert float(row["test_loss_std"]) == pytest.approx(std, rel=1e-12)
            assert float(row["test_loss_ci95_high"]) == pytest.approx(mean + half, rel=1e-9)
        else:
            assert row["test_loss_std"] == "" and row["test_loss_ci95_low"] == ""


def test_grouping_filters_and_other_versions(store, capsys):
    fake_run(store, "maml", 0, {"final/test_loss": 0.5}, inner_lr="0.01")
    fake_run(store, "maml", 1, {"final/test_loss": 0.7}, inner_lr="0.01")
    fake_run(store, "maml", 0, {"final/test_loss": 0.3}, inner_lr="0.05")
    fake_run(store, "fomaml", 0, {"final/test_loss": 0.4}, version="0.0.1")

    board = leaderboard_json(store, capsys)
    configs = {r["config"] for r in board["rows"] if r["method"] == "maml"}
    assert configs == {"inner_lr=0.01", "inner_lr=0.05"}  # what tells the two apart
    flagged = [r for r in board["rows"] if r["other_version"]]
    assert [r["method"] for r in flagged] == ["fomaml"]

    merged = leaderboard_json(store, capsys, "--group-by", "method")
    maml = next(r for r in merged["rows"] if r["method"] == "maml")
    # Three runs but two seeds: n counts seeds, each seed's runs averaged first (seed 0:
    # (0.5 + 0.3) / 2, seed 1: 0.7), so pooling never inflates n or narrows the interval.
    assert maml["n"] == 2 and maml["seeds"] == [0, 1]
    cells = maml["stats"]["final/test_loss"]
    assert cells["n"] == 2 and cells["mean"] == pytest.approx((0.4 + 0.7) / 2)
    assert cells["std"] == pytest.approx(statistics.stdev([0.4, 0.7]))
    # Pooling different settings is said, with the values pooled.
    assert maml["pooled"] == {"method.inner_lr": ["0.01", "0.05"]}
    assert "pooled inner_lr=0.01/0.05" in maml["config"]

    by_lr = leaderboard_json(store, capsys, "--param", "method.inner_lr=0.05")
    assert [r["method"] for r in by_lr["rows"]] == ["maml"]
    assert leaderboard_json(store, capsys, "--version", "0.0.1")["rows"][0]["method"] == "fomaml"
    assert leaderboard_json(store, capsys, "--since", "2999-01-01")["rows"] == []
    assert len(leaderboard_json(store, capsys, "--tag", "mesabench.seed=1")["rows"]) == 1
    assert main(["leaderboard", "--tracking-uri", store, "--since", "yesterday"]) == 2


def test_a_misspelt_grouping_or_filter_key_is_refused_and_a_bare_name_is_found(
    store, capsys
):
    fake_run(store, "maml", 0, {"final/test_loss": 0.5}, inner_lr="0.01")
    fake_run(store, "fomaml", 0, {"final/test_loss": 0.4}, inner_lr="0.05")
    capsys.readouterr()
    for flag, key in (("--group-by", "method.inner_lrr"), ("--param", "method.inner_lrr=0.01")):
        assert main(["leaderboard", "--tracking-uri", store, flag, key]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert f"{flag} method.inner_lrr: no run recorded that setting; did you mean " \
               "method.inner_lr," in line  # fmt: skip
    # A bare name stands for the one recorded setting it names (as --set takes it).
    by_lr = leaderboard_json(store, capsys, "--param", "inner_lr=0.05")
    assert [r["method"] for r in by_lr["rows"]] == ["fomaml"]
    pooled = leaderboard_json(store, capsys, "--group-by", "inner_lr")
    assert sorted(r["method"] for r in pooled["rows"]) == ["fomaml", "maml"]
    # Runs of two methods at one value pool into one row, which names both (before: the
    # row was labelled with the first run's method alone).
    fake_run(store, "fomaml", 1, {"final/test_loss": 0.6}, inner_lr="0.01")
    pooled = leaderboard_json(store, capsys, "--group-by", "inner_lr")
    assert sorted(r["method"] for r in pooled["rows"]) == ["fomaml", "fomaml + maml"]
    # A value no run has is said, with the values recorded, not shown as an empty board;
    # so are two values no single run has at once.
    assert main(["leaderboard", "--tracking-uri", store, "--param", "inner_lr=0.5"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == ("error: --param method.inner_lr=0.5: no run of sinusoid-5shot has it "
                    "(recorded: 0.01, 0.05)")  # fmt: skip
    assert main(["leaderboard", "--tracking-uri", store, "--param", "inner_lr=0.05",
                 "--tag", "mesabench.method=maml"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--param", "inner_lr=0.05",
                 "--param", "method_name=maml"]) == 2  # fmt: skip
    assert capsys.readouterr().err == ("error: --param method.inner_lr=0.05, method_name=maml: "
                                       "no run of sinusoid-5shot has all of these at once\n")


def test_published_rows_stand_beside_ours_and_outside_our_statistics(store, capsys):
    from benchmarks.results.leaderboards import build_leaderboard

    board = build_leaderboard([], "mnist-rotations")
    refs = [r for r in board.rows if r.is_reference]
    assert {r.method for r in refs} >= {"lamaml", "sparse_lamaml", "online_sgd"}
    lamaml = next(r for r in refs if r.method == "lamaml")
    assert lamaml.stats("final/ra").mean == pytest.approx(0.7742)
    assert board.ours == []
    capsys.readouterr()
    assert main(["leaderboard", "--benchmark", "mnist-rotations", "--tracking-uri", store,
                 "--format", "markdown"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "| ref | _lamaml_ | published (thesis tab. 4.5) |  | 0.7742 | -0.0864 |" in out
    assert "ranked by ra: retained accuracy" in out and "higher is better" in out


def test_references_stand_beside_only_runs_of_their_settings(store, capsys):
    from benchmarks.catalog.references import references_for
    from mesabench_datasets.regression import LinRegConfig

    # The derived linreg rows are the closed form at their declared input range.
    for ref in references_for("linreg-icl"):
        assert ref.kind == "derived" and "closed form" in ref.source
        config = LinRegConfig(dim=10, shots=10, input_range=ref.settings["task.input_range"])
        expected = config.build().one_step_gd_optimum()[1]
        assert ref.metrics["final/test_loss"] == pytest.approx(expected, rel=2e-3)

    for seed, loss in ((0, 0.21), (1, 0.2)):
        fake_run(store, "gd", seed, {"final/test_loss": loss}, benchmark="linreg-icl",
                  input_range="0.5")  # fmt: skip
    board = leaderboard_json(store, capsys, "--benchmark", "linreg-icl")
    by_status = {(r["status"], r["reference"]["note"] if r["reference"] else "") for r in
                 board["rows"]}  # fmt: skip
    assert ("reference", "derived, x ~ U(-0.5, 0.5)") in by_status
    (apart,) = [r for r in board["rows"] if r["status"] == "reference, settings differ"]
    assert apart["rank"] is None and apart["reference"]["kind"] == "derived"
    assert apart["reference"]["settings_differ"] == {
        "task.input_range": {"ours": "0.5", "theirs": "1.0"}
    }
    # Ours (mean 0.205) ranked first, the matching 0.206 reference beside it, unnumbered.
    assert [(r["status"], r["rank"]) for r in board["rows"][:2]] == [
        ("ranked", 1),
        ("reference", None),
    ]
    capsys.readouterr()
    assert main(["leaderboard", "--benchmark", "linreg-icl", "--tracking-uri", store,
                 "--format", "markdown"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "settings differ: task.input_range=0.5 vs 1.0" in out
    # The ranked metric is stated in words, with the step count and direction.
    assert "ranked by test_loss: test loss" in out and "after 1 inner steps" in out
    assert "lower is better" in out


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
    assert {r["method"]: r["n"] for r in sinusoid["rows"]} == {
        "maml": 2, "fomaml": 2, "sparse_maml": 2
    }  # fmt: skip
    continual = boards[0]
    assert continual["columns"][:2] == ["final/ra", "final/bti"]
    markdown = (tmp_path / "board.markdown").read_text()
    assert "### sinusoid-5shot" in markdown
    assert "| # | method | config | n (seeds) | test_loss: mean ± std [95% CI] |" in markdown
    header = (tmp_path / "board.csv").read_text().splitlines()[0]
    assert header.startswith("benchmark,rank,status,method,config,n_seeds,ra_n,ra_mean,")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


#: Set by .ci/run: there, a browser that could not be installed fails this test, not skips it.
REQUIRE_BROWSER = "MESABENCH_REQUIRE_BROWSER"


def test_report_renders_in_headless_chromium(populated, tmp_path):
    if _chromium() is None:
        reason = "Chromium is not installed (.ci/run installs it: apt-get install chromium)"
        if os.environ.get(REQUIRE_BROWSER):
            pytest.fail(f"{reason}; {REQUIRE_BROWSER} is set, so the report must be rendered")
        pytest.skip(reason)
    store, _ = populated
    assert main(["report", "--all", "--tracking-uri", store, "--output", str(tmp_path)]) == 0
    page = tmp_path / "index.html"
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # self-contained
    browser = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0"]  # fmt: skip
    dom = subprocess.run(
        [*browser, "--window-size=1400,1800", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "CONSOLE" not in dom.stderr or "Uncaught" not in dom.stderr
    assert not [line for line in dom.stderr.splitlines() if ":CONSOLE(" in line and "ERROR" in line]
    assert dom.stdout.count('<table class="leaderboard"') == 2
    assert 'data-broken="0"' in dom.stdout  # every embedded image decoded
    images = int(dom.stdout.split('data-images="')[1].split('"')[0])
    assert images >= 5  # learning curves, sparsity and accuracy matrices

    def measured(name: str) -> float:
        return float(dom.stdout.split(f'data-{name}="')[1].split('"')[0])

    assert measured("min-font") >= 13  # px: readable at 100% zoom
    assert measured("min-image-scale") >= 0.75  # figures are not shrunk to thumbnails
    assert measured("page-overflow") == 0  # nothing wider than the window
    # A narrow window: the wide continual table scrolls in its box; the page does not.
    narrow = subprocess.run([*browser, "--window-size=700,1800", "--dump-dom", page.as_uri()],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert float(narrow.stdout.split('data-page-overflow="')[1].split('"')[0]) == 0
    # One seed is one run, not a band; two seeds are a mean with a band.
    assert "lamaml" in dom.stdout and "seed 0: one run, no band." in dom.stdout
    assert "mean over seeds 0, 1 with a band of ±1 std." in dom.stdout
    # Curves are drawn over all seeds of a row, their data written beside them.
    tables = sorted((tmp_path / "figures").glob("*.csv"))
    assert tables and all(t.read_text().startswith("panel,series,colour,x,mean,") for t in tables)
    for method in ("sparse_maml", "lamaml", "online_sgd"):
        assert method in dom.stdout
    shot = Path(os.environ.get("MESABENCH_REPORT_SHOT", tmp_path / "report.png"))
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


def test_a_new_store_has_no_empty_default_experiment_and_an_old_one_keeps_its(tmp_path):
    """MLflow puts an empty "Default" experiment in every new store; the UI would list it
    beside the benchmarks. A new store of ours has none; a store made elsewhere keeps it."""
    from mlflow.tracking import MlflowClient

    ours = f"sqlite:///{tmp_path / 'ours' / 'mlflow.db'}"
    assert main(["run", "--method", "fomaml", *TINY, "--tracking-uri", ours]) == 0
    assert [e.name for e in MlflowClient(ours).search_experiments()] == ["sinusoid-5shot"]
    theirs = f"sqlite:///{tmp_path / 'theirs.db'}"
    MlflowClient(theirs).search_experiments()  # made by MLflow itself
    assert main(["run", "--method", "fomaml", *TINY, "--tracking-uri", theirs]) == 0
    names = sorted(e.name for e in MlflowClient(theirs).search_experiments())
    assert names == ["Default", "sinusoid-5shot"]


@pytest.fixture(scope="module")
def served(tmp_path_factory, _store_template):
    """``python -m benchmarks ui`` over a store of four runs (two seeds of one configuration,
    a KILLED run, a diverged one): ``(store, port, first line, the announced address)``.
    One MLflow server serves both tests below: the ui command's, and the REST reader's."""
    root = tmp_path_factory.mktemp("served")
    db = root / "store" / "mlflow.db"
    db.parent.mkdir()
    shutil.copyfile(_store_template, db)
    store = f"sqlite:///{db}"
    fake_run(store, "maml", 0, {"final/test_loss": 0.5, "final/train_time_s": 3.0})
    # Another seed of the same configuration: the direct reader reads the configuration's
    # params once and each run's seed, device and data root on top.
    fake_run(store, "maml", 1, {"final/test_loss": 0.75})
    fake_run(store, "fomaml", 1, {"final/test_loss": 0.25}, status="KILLED")
    fake_run(store, "metasgd", 0, {"final/test_loss": math.nan})  # a diverged run
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "ui", "--tracking-uri", store, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=python_env(),
        cwd=root,
    )
    try:
        # The address is announced only once the server answers: right after the line,
        # the page loads at once.
        first = process.stdout.readline().decode()
        announced = next((line.decode() for line in process.stdout  # MLflow's own lines too
                          if line.startswith(b"MLflow UI at ")), "")  # fmt: skip
        yield store, port, process, first, announced
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_ui_serves_the_store_on_localhost(served):
    _, port, process, first, announced = served
    assert first.startswith(f"starting the MLflow UI on port {port}")
    assert announced.startswith("MLflow UI at http://127.0.0.1:")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
        status = response.status
    assert status == 200
    # One server process and one worker: no job runner and its seven consumers.
    import psutil

    children = psutil.Process(process.pid).children(recursive=True)
    assert len(children) <= 3, [" ".join(c.cmdline()[:4]) for c in children]
    assert not [c for c in children if "huey" in " ".join(c.cmdline())]
    assert f"http://127.0.0.1:{port}/#/experiments?workflowType=machine_learning" in announced


def test_the_three_store_readers_read_the_same_runs(served, capsys):
    """SQLite read directly, a real tracking server through REST (the ui command's), and the
    MLflow client: the same runs, tags, params and final metrics (NaN kept as NaN), the same
    sweep-cell filter, and the same leaderboard printed through the server as from the
    file."""
    from benchmarks.results.leaderboards import read_runs
    from benchmarks.store.reader import ClientReader, RestReader, open_reader

    store, port, _, _, announced = served
    assert announced, "the ui server did not start"
    tracker = MlflowTracker(store)
    experiment = tracker.experiment_id("sinusoid-5shot", create=False)
    rest = RestReader(f"http://127.0.0.1:{port}")
    readers = {"sqlite": open_reader(store), "rest": rest,
               "client": ClientReader(tracker.client)}  # fmt: skip
    assert {n: r.experiment_id("sinusoid-5shot") for n, r in readers.items()} == dict.fromkeys(
        readers, experiment
    )
    assert all(r.experiment_id("nope") is None for r in readers.values())
    read = {n: sorted(read_runs(r, experiment), key=lambda x: x.run_id)
            for n, r in readers.items()}  # fmt: skip
    hashes = {r.config_hash for r in read["sqlite"] if r.method == "maml"}
    some = {n: read_runs(r, experiment, ("mesabench.config_hash", hashes))
            for n, r in readers.items()}  # fmt: skip
    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--format", "csv"]) == 0
    from_file = capsys.readouterr().out
    assert main(["leaderboard", "--tracking-uri", f"http://127.0.0.1:{port}",
                 "--format", "csv"]) == 0  # fmt: skip
    through_server = capsys.readouterr().out
    assert len(read["sqlite"]) == 4
    seeds = sorted(r.params["seed"] for r in read["sqlite"] if r.method == "maml")
    assert seeds == ["0", "1"]
    for name in ("rest", "client"):
        nan_free = [r for r in read["sqlite"] if r.method != "metasgd"]
        assert nan_free == [r for r in read[name] if r.method != "metasgd"], name
        assert sorted(r.run_id for r in some[name]) == sorted(r.run_id for r in some["sqlite"])
    assert len(some["sqlite"]) == 2 < len(read["sqlite"])  # both seeds of that configuration
    for name, runs in read.items():
        (diverged,) = [r for r in runs if r.method == "metasgd"]
        assert math.isnan(diverged.metrics["final/test_loss"]), name  # not MLflow's stored 0
    assert through_server == from_file and "maml" in from_file


def test_a_bundle_imports_into_a_tracking_server_once(served, tmp_path, capsys):
    """``import`` into a store behind a tracking server (the ui command's, over REST): the
    runs are added once, a second import adds none, and they carry their provenance."""
    from benchmarks.store.reader import RestReader

    _, port, _, _, announced = served
    assert announced, "the ui server did not start"
    source = f"sqlite:///{tmp_path / 'source' / 'mlflow.db'}"
    (tmp_path / "source").mkdir()
    made = fake_run(source, "maml", 0, {"final/test_loss": 0.4}, benchmark="linreg-icl")
    bundle = tmp_path / "lab.mesabundle"
    assert main(["export", str(bundle), "--tracking-uri", source]) == 0
    server = f"http://127.0.0.1:{port}"
    for added in (1, 0):
        capsys.readouterr()
        assert main(["import", str(bundle), "--tracking-uri", server]) == 0
        assert f"imported {added} run(s)" in capsys.readouterr().out
    rest = RestReader(server)
    (run,) = rest.runs(rest.experiment_id("linreg-icl"))
    assert run.tags["mesabench.imported_from"] == "lab.mesabundle"
    assert run.tags["mesabench.source_run"] == made


def test_all_boards_as_one_csv_that_pandas_reads_and_json_agrees(store, capsys, tmp_path):
    """`leaderboard --all --format csv --output board.csv`: one table (a benchmark column;
    columns one benchmark lacks are empty), read back by pandas whole; its means equal the
    JSON output's."""
    import json

    import pandas

    fake_run(store, "maml", 0, {"final/test_loss": 0.5})
    fake_run(store, "maml", 1, {"final/test_loss": 0.7})
    fake_run(store, "lamaml", 0, {"final/ra": 0.70, "final/bti": -0.08},
             benchmark="mnist-rotations")  # fmt: skip
    out = tmp_path / "board.csv"
    assert main(["leaderboard", "--all", "--tracking-uri", store, "--format", "csv",
                 "--output", str(out)]) == 0  # fmt: skip
    frame = pandas.read_csv(out)
    assert set(frame["benchmark"]) == {"sinusoid-5shot", "mnist-rotations"}
    maml = frame[(frame["method"] == "maml") & (frame["status"] == "ranked")].iloc[0]
    assert maml["test_loss_mean"] == pytest.approx(0.6) and maml["n_seeds"] == 2
    assert math.isnan(maml["ra_mean"])  # a column of the other benchmark: empty here
    lamaml = frame[(frame["method"] == "lamaml") & (frame["status"] == "ranked")].iloc[0]
    assert lamaml["ra_mean"] == pytest.approx(0.70) and math.isnan(lamaml["test_loss_mean"])
    capsys.readouterr()
    assert main(["leaderboard", "--all", "--tracking-uri", store, "--format", "json"]) == 0
    boards = json.loads(capsys.readouterr().out)
    boards = boards if isinstance(boards, list) else boards["boards"]
    means = {(b["benchmark"], r["method"]): r["stats"][b["metric"]]["mean"]
             for b in boards for r in b["rows"] if r["status"] == "ranked"}  # fmt: skip
    assert means[("sinusoid-5shot", "maml")] == pytest.approx(maml["test_loss_mean"])
    assert means[("mnist-rotations", "lamaml")] == pytest.approx(lamaml["ra_mean"])


def test_columns_take_a_comma_list_and_refuse_a_prefix_no_metric_has(populated, capsys):
    """``--columns a,b`` is two prefixes (it was one, matching nothing, silently); a prefix
    that no final metric of the board starts with is a typo: one line, exit 2."""
    store, _ = populated
    args = ["leaderboard", "--benchmark", "sinusoid-5shot", "--tracking-uri", store,
            "--format", "json"]  # fmt: skip
    assert main([*args, "--columns", "final/sparsity/,final/train_time"]) == 0
    (board,) = json.loads(capsys.readouterr().out)
    assert "final/sparsity/overall" in board["columns"]
    assert "final/train_time_s" in board["columns"]
    assert main([*args, "--columns", "final/sparsty/"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert "--columns final/sparsty/: no final metric of the board starts with it" in line
    assert "final/sparsity/overall" in line or "..." in line
