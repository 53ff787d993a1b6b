"""Shared fixtures: small task batches and an isolated MLflow store per test."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import ROOT, python_env

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# A skip other than the hardware's fails a strict run (CI); pytester runs that rule's test.
pytest_plugins = ["tests.skip_policy", "pytester"]

# Under pytest-xdist each worker gets one core: torch's and the BLAS's threads are capped
# at one, in this process and in the CLI processes it starts (measured: tiny tensors gain
# nothing from a second thread, and two workers of two threads each fight for two cores).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[variable] = "1"
    torch.set_num_threads(1)

# A shell starts a background job (`pytest &`) with SIGINT ignored, and an ignored signal
# stays ignored across exec: every CLI process a drill interrupts with Ctrl-C would then run
# on. A handler is reset to the default at exec, so the drills see what a terminal gives.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


#: Seconds each slow test took at three workers (``pytest -m slow -n 3 --durations=0``,
#: setup + call + teardown). The slow tests are collected longest first, so that the
#: workers take the long drills early and no worker is left alone with one at the end
#: (collection order left one worker busy for the last ~90 s while two sat idle). A test
#: not in the file counts as long (a new drill is better started early).
_SLOW_DURATIONS = Path(__file__).with_name("slow_durations.json")


#: Where each test's CPU seconds go (its own and its waited-for child processes', user +
#: system) as JSON lines, when this names a file: the measure that finds a suite's cost on
#: a shared 2-core machine, where wall seconds mostly say how the workers were packed.
CPU_REPORT_ENV = "MESABENCH_TEST_CPU_REPORT"


def _cpu_seconds() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    report = os.environ.get(CPU_REPORT_ENV)
    if not report:
        yield
        return
    import json
    import time

    cpu, wall = _cpu_seconds(), time.monotonic()
    yield
    line = {"test": item.nodeid, "cpu_s": round(_cpu_seconds() - cpu, 2),
            "wall_s": round(time.monotonic() - wall, 2)}  # fmt: skip
    with open(report, "a", encoding="utf-8") as out:  # one short append per test: atomic
        out.write(json.dumps(line) + "\n")


def pytest_collection_modifyitems(config, items):
    import json

    if not any(item.get_closest_marker("slow") for item in items):
        return
    seconds = json.loads(_SLOW_DURATIONS.read_text(encoding="utf-8"))

    def expected(item) -> float:
        if item.get_closest_marker("slow") is None:
            return 0.0
        return seconds.get(item.nodeid.split("@")[0], 120.0)

    items.sort(key=expected, reverse=True)  # stable: equal ones keep their order


@pytest.fixture(scope="session", autouse=True)
def _nothing_written_into_the_repository():
    """Tests keep their stores and artifacts in their own folders: a tracking server
    started without an artifact root writes ./mlartifacts where it runs."""
    stray = ROOT / "mlartifacts"
    before = stray.exists()
    yield
    assert before or not stray.exists(), f"a test wrote {stray}"


def _default_store_state() -> dict[str, float]:
    """What the default store (./runs) holds: its entries and their modification times."""
    runs = ROOT / "runs"
    if not runs.is_dir():
        return {}
    return {entry.name: entry.stat().st_mtime for entry in runs.iterdir()}


@pytest.fixture(autouse=True)
def _no_test_writes_the_default_store():
    """Every test that runs the CLI passes an explicit store: one that fell back to the
    default (./runs) would mix test runs into the user's results."""
    before = _default_store_state()
    yield
    assert _default_store_state() == before, "this test wrote into ./runs (pass a store)"


@pytest.fixture(scope="session")
def _store_template(tmp_path_factory) -> Path:
    """A new store exactly as ``open_store`` leaves one (schema migrated, no default
    experiment, write-ahead log, tag index), made once per session: MLflow's migrations
    take 1.5-3 s per new store, most of a short test's time."""
    from benchmarks.store.client import open_store

    db = tmp_path_factory.mktemp("store-template") / "mlflow.db"
    open_store(f"sqlite:///{db}")
    with sqlite3.connect(db) as connection:  # the whole store in the one file, to copy it
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db


@pytest.fixture
def new_store(tmp_path: Path, _store_template: Path):
    """``new_store(folder)``: the tracking URI (an absolute path) of a new, empty SQLite
    store in ``folder`` of the test's temp dir, a copy of the session's template. Tests of
    creating a store, or of writing nothing at all, take :func:`unopened_store`."""

    def make(folder: str = "store") -> str:
        db = tmp_path / folder / "mlflow.db"
        db.parent.mkdir(parents=True)
        shutil.copyfile(_store_template, db)
        return f"sqlite:///{db}"

    return make


@pytest.fixture
def store(new_store) -> str:
    """A new, empty SQLite store inside the test's temp dir (see :func:`new_store`)."""
    return new_store()


@pytest.fixture
def unopened_store(tmp_path: Path) -> str:
    """A SQLite tracking URI (absolute path) where no store exists yet."""
    return f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"


@pytest.fixture
def data_root(tmp_path: Path, monkeypatch) -> Path:
    """An empty data folder the suite searches first (``MESABENCH_DATA``), with the per-user
    download cache moved beside it: nothing is read from, or written to, the user's own."""
    root = tmp_path / "data"
    root.mkdir()
    monkeypatch.setenv("MESABENCH_DATA", str(root))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return root


@pytest.fixture
def cli(capsys):
    """``python -m benchmarks ...`` called in this process (``main(argv)``), for tests where
    the process boundary is not what is tested; returns what ``run_cli`` returns (returncode,
    stdout, stderr), without the 3-7 s of a new process' imports."""
    from benchmarks.cli.main import main

    def _call(*args: str) -> subprocess.CompletedProcess:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["benchmarks", *args], code, out, err)

    return _call


@pytest.fixture
def run_cli():
    """Run ``python -m benchmarks ...`` in a subprocess; returns CompletedProcess."""

    def _run(*args: str, cwd: Path | None = None, timeout: int = 240, **env: str):
        return subprocess.run(
            [sys.executable, "-m", "benchmarks", *args],
            capture_output=True,
            text=True,
            cwd=cwd or ROOT,
            env=python_env(**env),
            timeout=timeout,
        )

    return _run


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield
