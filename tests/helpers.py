"""Helpers shared by the tests (constants and subprocess environments)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Fast settings that keep an end-to-end run to a second or two.
TINY = [
    "--set",
    "iterations=20",
    "--set",
    "val_every=10",
    "--set",
    "val_tasks=20",
    "--set",
    "test_tasks=50",
    "--set",
    "log_every=5",
    "--set",
    "checkpoint_every=10",
]

#: linreg-icl evaluation with enough tasks and queries for ~0.5% sampling error.
LINREG_EVAL = {"queries": "20", "test_tasks": "10000", "val_tasks": "500", "eval_chunk": "2000"}


def mlp_forward(weights: dict, inputs):
    """A 2-layer ReLU MLP by hand, from the weights of ``nn.Sequential(Linear, ReLU, Linear)``
    (names ``0.*`` and ``2.*``): the learners' networks, written out for hand-computed steps."""
    import torch.nn.functional as F

    hidden = F.relu(inputs @ weights["0.weight"].T + weights["0.bias"])
    return hidden @ weights["2.weight"].T + weights["2.bias"]


def wait_for(predicate, what: str, timeout: float = 120.0, every: float = 0.1):
    """Poll ``predicate`` until it returns something true and return that; fail, naming
    ``what``, after ``timeout`` seconds. The deadline is generous on purpose: a test waits
    on an event it can see, never on a guess of how fast the machine is."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(every)


def stored_runs(store: str, benchmark: str = "sinusoid-5shot") -> list:
    """Every run of ``benchmark`` in ``store``, as MLflow's run entities ([] before its
    experiment exists). Through the store's creation lock: a test may poll a store that a
    subprocess is still creating (its schema migration would otherwise race ours)."""
    from benchmarks.store.client import open_store

    client = open_store(store)
    experiment = client.get_experiment_by_name(benchmark)
    return [] if experiment is None else client.search_runs([experiment.experiment_id])


def only_run(store: str, benchmark: str = "sinusoid-5shot"):
    """The one run of ``benchmark`` in ``store`` (fails if there are none or several)."""
    (run,) = stored_runs(store, benchmark)
    return run


def python_env(**extra: str) -> dict[str, str]:
    """The current environment with ``extra``'s PYTHONPATH, then the repo root, on the path."""
    env = dict(os.environ)
    paths = [*extra.pop("PYTHONPATH", "").split(os.pathsep), str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    env.update(extra)
    return env


#: A continual stream small enough for a second-long run on the generated MNIST fixture.
CONTINUAL_TINY = [
    "--set",
    "tasks=3",
    "--set",
    "train_per_task=20",
    "--set",
    "test_per_task=60",
    "--set",
    "log_every=1",
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: An OSAKA run of seconds on the generated Omniglot / MNIST fixtures (48 Omniglot classes).
OSAKA_TINY = ["--set", "steps=30", "--set", "pretrain_iterations=4", "--set", "channels=8",
              "--set", "pretrain_val_every=2", "--set", "pretrain_val_tasks=4",
              "--set", "pretrain_test_tasks=4", "--set", "pretrain_meta_batch=2",
              "--set", "log_every=10", "--set", "checkpoint_every=10",
              "--set", "pretrain_classes=20", "--set", "val_classes=10"]  # fmt: skip


def fake_run(
    store: str,
    method: str,
    seed: int,
    metrics: dict[str, float],
    status: str = "FINISHED",
    benchmark: str = "sinusoid-5shot",
    version: str | None = None,
    tuning: str | None = None,
    **overrides: str,
) -> str:
    """A run recorded exactly as the runner records one, with the given final metrics (and
    another suite ``version``, or a ``tune`` role, if given)."""
    from benchmarks.planning.plan import plan_run
    from benchmarks.store.tracking import MlflowTracker

    plan = plan_run(method, benchmark, seed, overrides, device="cpu", tuning=tuning)
    tracker = MlflowTracker(store)
    run_id = tracker.start(plan, "built-in")
    if version is not None:
        tracker.client.set_tag(run_id, "mesabench.version", version)
    tracker.log_metrics(metrics, step=1)
    tracker.finish(status)
    return run_id


def leaderboard_json(store: str, capsys, *extra: str) -> dict:
    """``leaderboard --format json`` of one benchmark, parsed strictly (no NaN, no
    Infinity)."""
    import json

    from benchmarks.cli.main import main

    capsys.readouterr()
    assert main(["leaderboard", "--tracking-uri", store, "--format", "json", *extra]) == 0

    def refuse(constant: str):
        raise AssertionError(f"{constant} in JSON")

    (board,) = json.loads(capsys.readouterr().out, parse_constant=refuse)
    return board


#: The plugin guides' complete examples, each a distribution (pyproject.toml and module).
PLUGIN_PACKAGES = ROOT / "tests" / "plugin_packages"


def install_plugin_package(name: str, work: Path) -> Path:
    """``pip install`` the example distribution ``name`` (entry points and all) into a fresh
    directory under ``work``; returns that directory, for PYTHONPATH. Built from a copy, so
    the build leaves nothing in the repository."""
    import shutil
    import subprocess
    import sys

    source, site = work / f"{name}-src", work / f"{name}-site"
    shutil.copytree(PLUGIN_PACKAGES / name, source)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(site), str(source)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return site


def count_in_store(db: Path, query: str, args: tuple = ()) -> int:
    """One read-only COUNT over the SQLite store ``db`` (0 before the store or its schema
    exists): a drill that looks every 50 ms for the moment to strike costs the machine
    nothing, and short cells cannot all slip between two looks (a client's read takes a
    second on a loaded machine)."""
    import sqlite3

    if not db.exists():
        return 0
    connection = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        return connection.execute(query, args).fetchone()[0]
    except sqlite3.OperationalError:  # the schema not made yet
        return 0
    finally:
        connection.close()


def finished_runs(db: Path, tag: str = "mesabench.seed", like: str = "%") -> int:
    """FINISHED runs in the store ``db`` whose tag ``tag`` matches ``like``."""
    query = ("SELECT COUNT(*) FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid WHERE "
             "r.status = 'FINISHED' AND t.key = ? AND t.value LIKE ?")  # fmt: skip
    return count_in_store(db, query, (tag, like))


def runs_recording(db: Path) -> int:
    """Runs of a method (cells, not a sweep's parent) in the store ``db`` that have written
    a metric record."""
    query = ("SELECT COUNT(DISTINCT m.run_uuid) FROM metrics m JOIN tags t ON t.run_uuid = "
             "m.run_uuid WHERE t.key = 'mesabench.seed'")  # fmt: skip
    return count_in_store(db, query)


def interrupt_after_checkpoint(args: list[str], store_dir: Path, benchmark: str,
                               held: bool = True, **env: str):  # fmt: skip
    """Start ``python -m benchmarks run ARGS`` (storing under ``store_dir``), press Ctrl-C
    once its first checkpoint is on disk, and return the KILLED run (asserting exit 130).

    ``held``: the run is held at its records (:mod:`benchmarks.store.hold`) until the
    signal has landed, so that it cannot finish first on a fast or loaded machine; ARGS
    must then make its first record come after its first checkpoint (``log_every`` and
    ``val_every`` above ``checkpoint_every``; a record and a checkpoint of one step: the
    record first). Without it the run must have long enough left after that checkpoint."""
    import signal
    import subprocess
    import sys

    from mlflow.tracking import MlflowClient

    from benchmarks.store.hold import HOLD_ENV

    store = f"sqlite:///{store_dir / 'mlflow.db'}"
    hold = store_dir / "hold"
    hold.parent.mkdir(parents=True, exist_ok=True)
    if held:
        hold.touch()
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "run", *args, "--benchmark", benchmark,
         "--tracking-uri", store],
        env=python_env(**env, **{HOLD_ENV: str(hold)}), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    artifacts = store_dir / "artifacts" / benchmark
    try:
        wait_for(lambda: complete_checkpoint(artifacts) or process.poll() is not None,
                 "a checkpoint (held before it?)", timeout=180)  # fmt: skip
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        hold.unlink(missing_ok=True)
    assert process.returncode == 130, err
    client = MlflowClient(store)
    (killed,) = client.search_runs([client.get_experiment_by_name(benchmark).experiment_id])
    assert killed.info.status == "KILLED"
    return killed


def serve_store(store: str, port: int) -> subprocess.Popen:
    """A real MLflow tracking server on 127.0.0.1:``port`` over ``store`` (one worker, no
    job runner); returns once it answers its health check."""
    env = {**python_env(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    # Artifacts beside the store: the server's default is ./mlartifacts in its working
    # directory (the repository, when tests run from there).
    artifacts = Path(store[len("sqlite:///") :]).parent / "served-artifacts"
    artifacts.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store,
         "--artifacts-destination", str(artifacts), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=artifacts.parent,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise AssertionError("the tracking server did not start")


def stop_server(process: subprocess.Popen) -> None:
    """Stop a server from :func:`serve_store` and every process it started."""
    import psutil

    if process.poll() is not None:
        return  # stopped already
    for child in psutil.Process(process.pid).children(recursive=True):
        child.kill()
    process.kill()
    process.wait(timeout=30)


def complete_checkpoint(artifacts: Path) -> bool:
    """Whether a run under ``artifacts`` (an experiment's folder) has saved a checkpoint that
    reads whole (one still being written does not count)."""
    import torch

    for path in artifacts.glob("*/artifacts/checkpoints/slot-*.pt"):
        try:
            torch.load(path, map_location="cpu", weights_only=False)
            return True
        except Exception:
            continue
    return False


def benchmark_for(method: str) -> str:
    """A benchmark the method accepts: a continual stream for continual learners, OSAKA for
    online ones, else synthetic regression tasks, else sequences."""
    from benchmarks.planning.config import ConfigError
    from mesabench_core import IncompatibleSetting
    from mesabench_datasets.regression import LinRegConfig
    from methods.registry import METHODS

    entry = METHODS.get(method).value
    if "continual" in entry.cls.protocols:
        return "mnist-rotations"
    if "online" in entry.cls.protocols:
        return "osaka-omniglot-p0.9"
    try:
        entry.cls.check_problem(LinRegConfig().build().problem)
    except ConfigError:
        return "lindyn"
    try:  # a hand-built reference for the natural token sequence only
        entry.cls.check_config(entry.cls.Config(**entry.defaults), LinRegConfig().build().problem)
    except IncompatibleSetting:
        return "linreg-icl-interleaved"
    return "linreg-icl"


def _draws_tasks(method: str) -> bool:
    """Whether the method's analyses draw tasks (a reference algorithm without any refuses
    an ``analysis_tasks`` of the user's)."""
    from benchmarks.planning.config import ConfigError
    from benchmarks.planning.plan import plan_run

    try:
        plan_run(method, benchmark_for(method), 0, {"analysis_tasks": "200"}, device="cpu")
    except ConfigError:
        return False
    return True


def tiny_run(method: str, data: Path) -> tuple[str, list[str], str]:
    """``(benchmark, settings, final metric)`` of a run of ``method`` of a second or two:
    the benchmark :func:`benchmark_for` picks, tiny settings, generated image fixtures
    written under ``data`` where the benchmark needs them."""
    import dataclasses

    from methods.registry import METHODS
    from tests.image_fixtures import write_mnist, write_omniglot

    benchmark = benchmark_for(method)
    if benchmark == "mnist-rotations":
        root = write_mnist(data).parent
        return benchmark, [*CONTINUAL_TINY, "--data-root", str(root)], "final/ra"
    if benchmark == "osaka-omniglot-p0.9":
        write_omniglot(data), write_mnist(data, "mnist"), write_mnist(data, "fashion_mnist")
        return benchmark, [*OSAKA_TINY, "--data-root", str(data)], "final/cumulative_accuracy"
    settings = [*TINY, "--set", "eval_chunk=50"]
    config = METHODS.get(method).value.cls.Config
    if "analysis_tasks" in {f.name for f in dataclasses.fields(config)} and _draws_tasks(method):
        # The in-context learners' analyses run whole, on 200 tasks each (not 2,000-10,000).
        settings += ["--set", "analysis_tasks=200"]
    return benchmark, settings, "final/test_loss"


def assert_compiles(tex: str, folder: Path) -> None:
    """``tex`` (a booktabs table) compiles in an article with pdflatex, where installed
    (Debian's texlive-latex-base); else the source the caller checked is all."""
    import shutil

    if not shutil.which("pdflatex"):
        return
    document = folder / "table.tex"
    document.write_text("\\documentclass{article}\n\\usepackage{booktabs}\n"
                        "\\begin{document}\n" + tex + "\\end{document}\n")  # fmt: skip
    made = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                           document.name], cwd=folder, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert made.returncode == 0, made.stdout[-2000:]
    assert (folder / "table.pdf").stat().st_size > 1000
