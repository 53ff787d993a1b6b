"""The command line end to end: exit codes, messages, the MLflow record, resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from benchmarks.cli.main import main
from benchmarks.store.hold import HOLD_ENV
from tests.helpers import (
    ROOT,
    TINY,
    complete_checkpoint,
    count_in_store,
    python_env,
    stored_runs,
    wait_for,
)


def _db(store: str) -> Path:
    return Path(store[len("sqlite:///") :])


def _runs(store: str, benchmark: str = "sinusoid-5shot"):
    return MlflowClient(store), stored_runs(store, benchmark)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "--method", "mamll"], "unknown method 'mamll'; did you mean maml"),
        (["run", "--method", "maml", "--benchmark", "sinusoid-5"], "did you mean sinusoid-5shot"),
        (["run", "--method", "maml", "--set", "inner_stpes=3"], "did you mean"),
        (["run", "--method", "maml", "--set", "shots=-1"], "task.shots must be >= 1"),
        (["run", "--method", "maml", "--set", "inner_lr=fast"], "method.inner_lr must be a number"),
        (["run", "--method", "maml", "--set", "adapt=some"], "one of 'all', 'head', 'none'"),
        (["run", "--method", "maml", "--set", "noequals"], "--set expects KEY=VALUE"),
        (["run", "--method", "maml", "--seed", "-3"], "seed must be >= 0"),
        (["run"], "run needs --method"),
        (["list", "things"], "invalid choice"),
        (["list"], "what: one of methods, benchmarks, modulations"),
        (["show", "mamll"], "neither a benchmark nor a method; did you mean maml"),
        (["show", "omniglot-5w"], "did you mean omniglot-5w5s or omniglot-5w1s"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv, message, unopened_store, capsys):
    code = main([*argv, "--tracking-uri", unopened_store] if argv[0] == "run" else argv)
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert not _db(unopened_store).exists(), "bad input must not touch the store"


def test_run_records_a_finished_run_with_final_metrics(store, capsys):
    code = main(["run", "--method", "sparse_maml", *TINY, "--tracking-uri", store])
    out = capsys.readouterr().out
    assert code == 0
    assert "final/test_loss" in out and "MLflow run id" in out
    client, runs = _runs(store)
    (run,) = runs
    assert run.info.status == "FINISHED"
    config_hash = run.data.tags["mesabench.config_hash"]
    assert run.info.run_name == f"sparse_maml-s0-{config_hash[:6]}"
    import getpass

    assert run.data.tags["mlflow.user"] == getpass.getuser()
    assert run.data.tags["mlflow.source.name"] == "python -m benchmarks"
    # Its data as MLflow dataset inputs, one per split, the same for the same settings.
    inputs = {d.dataset.name: d for d in run.inputs.dataset_inputs}
    assert set(inputs) == {f"sinusoid-5shot:{s}" for s in ("train", "validation", "test")}
    assert [t.value for t in inputs["sinusoid-5shot:test"].tags] == ["test"]
    assert main(["run", "--method", "maml", *TINY, "--tracking-uri", store]) == 0
    assert (
        main(["run", "--method", "maml", *TINY, "--set", "shots=3", "--tracking-uri", store]) == 0
    )
    digests = [
        {d.dataset.name: d.dataset.digest for d in r.inputs.dataset_inputs}
        for r in sorted(_runs(store)[1], key=lambda r: r.info.start_time)
    ]
    assert (
        digests[0] == digests[1]
        and digests[2]["sinusoid-5shot:test"] != digests[0]["sinusoid-5shot:test"]
    )
    assert run.data.params["method.modulation"] == "binary_mask"
    assert run.data.params["protocol.iterations"] == "20"
    assert run.data.tags["mesabench.method_source"] == "built-in"
    assert run.data.tags["mesabench.version"]
    metrics = run.data.metrics
    assert metrics["final/test_loss"] == pytest.approx(metrics["final/test_loss_steps10"])
    assert 0.0 <= metrics["final/sparsity/overall"] <= 1.0
    assert len(client.get_metric_history(run.info.run_id, "sparsity/0.weight")) == 4
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {
        "config.json",
        "sparsity.png",
        "sparsity_per_tensor.csv",
        "learning_curve.png",
    } <= artifacts


def test_same_seed_same_numbers_different_seed_different_numbers(store):
    for seed in ("1", "1", "2"):
        assert (
            main(["run", "--method", "maml", "--seed", seed, *TINY, "--tracking-uri", store]) == 0
        )
    _, runs = _runs(store)
    by_seed: dict[str, list[float]] = {}
    for run in runs:
        by_seed.setdefault(run.data.tags["mesabench.seed"], []).append(
            run.data.metrics["final/test_loss"]
        )
    assert by_seed["1"][0] == by_seed["1"][1]
    assert by_seed["2"][0] != by_seed["1"][0]


def test_diverging_run_fails_with_iteration(store, capsys):
    code = main(
        [
            "run",
            "--method",
            "maml",
            *TINY,
            "--set",
            "inner_lr=1e6",
            "--set",
            "inner_steps=5",
            "--tracking-uri",
            store,
        ]
    )
    assert code == 1
    _, (run,) = _runs(store)
    assert run.info.status == "FAILED"
    assert "diverged at iteration 0" in run.data.tags["error"]
    assert "diverged at iteration" in capsys.readouterr().err


def test_failing_run_is_marked_failed_with_reason(store, monkeypatch):
    from methods.gradient.maml import GradientMetaLearner

    def broken(self, batch):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(GradientMetaLearner, "meta_train_step", broken)
    assert main(["run", "--method", "maml", *TINY, "--tracking-uri", store]) == 1
    client, (run,) = _runs(store)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "RuntimeError: simulated failure"
    assert "error.txt" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_no_command_prints_the_commands_then_the_one_line_error(capsys):
    """`python -m benchmarks` alone: the help (every command) on stdout, then one line
    naming what is missing and what is allowed, exit 2."""
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("usage: python -m benchmarks")
    for command in ("run", "leaderboard", "reproduce", "sweep"):
        assert f"    {command}" in out
    assert err.count("\n") == 1
    assert "command: one of run, evaluate, list, show" in err and "--help" in err


def test_list_and_show(capsys):
    assert main(["list", "methods"]) == 0
    out = capsys.readouterr().out
    for name in ("maml", "fomaml", "anil", "metasgd", "sparse_maml", "sparse_relu_maml"):
        assert name in out
    assert main(["list", "benchmarks"]) == 0
    assert "linreg-icl" in capsys.readouterr().out
    assert main(["show", "linreg-icl", "--method", "maml", "--set", "input_range=0.5"]) == 0
    out = capsys.readouterr().out
    assert '"input_range": 0.5' in out and '"inner_lr": 6.06' in out
    # Each setting's help text, as declared (param(help=...)), for every section.
    shown = json.loads(out)["help"]
    assert shown["method.test_inner_steps"].startswith("inner steps when predict() is not told")
    assert any(key.startswith("protocol.") for key in shown)


def test_leaderboard_groups_seeds(store, capsys):
    for seed in ("0", "1"):
        main(["run", "--method", "fomaml", "--seed", seed, *TINY, "--tracking-uri", store])
    main(["run", "--method", "anil", *TINY, "--tracking-uri", store])
    capsys.readouterr()
    assert main(["leaderboard", "--benchmark", "sinusoid-5shot", "--tracking-uri", store]) == 0
    out = capsys.readouterr().out
    assert "fomaml" in out and "anil" in out
    assert main(["leaderboard", "--tracking-uri", store, "--format", "json"]) == 0
    (board,) = json.loads(capsys.readouterr().out)
    seeds = {row["method"]: row["n"] for row in board["rows"]}
    assert seeds == {"fomaml": 2, "anil": 1}


@pytest.mark.slow  # a fault drill: a real run process interrupted, then resumed
def test_interrupted_run_is_killed_and_resumes_to_identical_numbers(store, tmp_path):
    from benchmarks.metrics.catalog import measures_the_machine

    settings = [
        "--set",
        "iterations=2000",
        "--set",
        "checkpoint_every=200",
        "--set",
        "val_every=500",
        "--set",
        "test_tasks=100",
        "--set",
        "log_every=400",  # the first record after the first checkpoint: held there (below)
    ]
    command = [
        sys.executable,
        "-m",
        "benchmarks",
        "run",
        "--method",
        "fomaml",
        "--seed",
        "4",
        *settings,
        "--tracking-uri",
        store,
    ]
    # Held at its first record (after its first checkpoint) until the signal has landed:
    # 1,800 steps left, a fast or loaded machine could finish before a poll saw the file.
    hold = tmp_path / "hold"
    hold.touch()
    proc = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=python_env(**{HOLD_ENV: str(hold)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # A test session started as a background job inherits SIGINT ignored (POSIX), and
        # Python keeps an ignored SIGINT ignored: give the run the default back.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    artifacts = _db(store).parent / "artifacts" / "sinusoid-5shot"
    # Held at step 400's record, after step 200's checkpoint: signalled there.
    recorded = "SELECT COUNT(*) FROM metrics WHERE key = 'train/loss'"
    wait_for(lambda: (complete_checkpoint(artifacts) and count_in_store(_db(store), recorded))
             or proc.poll() is not None, "a checkpoint and a record", timeout=120)  # fmt: skip
    assert proc.poll() is None, proc.stdout.read()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    hold.unlink()
    assert proc.returncode == 130, out
    client, (killed,) = _runs(store)
    assert killed.info.status == "KILLED"
    logged = client.get_metric_history(killed.info.run_id, "train/loss")
    assert logged, "metrics logged before the interruption are kept"

    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "run",
            "--resume",
            killed.info.run_id,
            "--tracking-uri",
            store,
        ],
        cwd=tmp_path,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (
        main(["run", "--method", "fomaml", "--seed", "4", *settings, "--tracking-uri", store]) == 0
    )
    _, runs = _runs(store)
    finals = {r.info.run_id: r for r in runs}
    again = finals[killed.info.run_id]
    fresh = next(r for r in runs if r.info.run_id != killed.info.run_id)
    assert again.info.status == "FINISHED"
    for key, value in fresh.data.metrics.items():
        if key.startswith("final/") and not measures_the_machine(key):
            assert again.data.metrics[key] == value, key
    steps = [m.step for m in client.get_metric_history(killed.info.run_id, "train/loss")]
    assert steps == sorted(set(steps)), "no metric step is written twice"
    assert steps[-1] == 2000


def test_python_dash_m_entry_point(run_cli, tmp_path):
    result = run_cli("list", "methods", cwd=tmp_path)
    assert result.returncode == 0 and "sparse_relu_maml" in result.stdout
    bad = run_cli("run", "--method", "nope", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown method 'nope'")
    assert not (tmp_path / "runs").exists()


def test_another_datasets_package_and_ours_live_side_by_side(tmp_path):
    """Ours installs as ``mesabench_datasets``: a top-level ``datasets`` (Hugging Face's, or
    any) stays importable beside it, even from the repository's root."""
    fake = tmp_path / "shadow" / "datasets"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("WHO = 'someone else'\n")
    code = ("import datasets, benchmarks, mesabench_datasets.tasks, methods\n"
            "print(datasets.WHO, mesabench_datasets.tasks.__name__)")  # fmt: skip
    for cwd in (tmp_path, ROOT):
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
            env=python_env(PYTHONPATH=str(fake.parent)), timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["someone", "else", "mesabench_datasets.tasks"]


def test_gpu_request_without_gpu_is_bad_input(unopened_store, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = ["run", "--method", "maml", "--device", "cuda", "--tracking-uri", unopened_store]
    assert main(argv) == 2
    assert "no CUDA device is available" in capsys.readouterr().err
    assert not _db(unopened_store).exists()


def test_tasks_that_diverge_at_test_time_are_counted_not_hidden():
    import math

    from benchmarks.planning.plan import plan_run
    from benchmarks.protocols.recording import MemoryRecorder
    from benchmarks.running.execute import execute

    plan = plan_run(
        "maml",
        overrides={"iterations": "1", "inner_lr": "50", "eval_steps": "1,30", "test_tasks": "100"},
        device="cpu",
    )
    final = execute(plan, MemoryRecorder())
    assert final["final/test_loss_steps30_diverged_fraction"] > 0
    assert math.isnan(final["final/test_loss"]) and math.isnan(final["final/test_loss_ci95"])


def test_hugging_face_datasets_works_beside_mesabench(tmp_path):
    """The real clash: Hugging Face's ``datasets`` (installed by the dev extra) and this suite
    in one environment, one process, both working."""
    code = (
        "import datasets, benchmarks\n"
        "from benchmarks.plugin_api import TaskBatch\n"
        "table = datasets.Dataset.from_dict({'x': [1, 2, 3]}).map(lambda r: {'y': 2 * r['x']})\n"
        "print(list(table['y']), benchmarks.run.__module__, datasets.__file__)\n"
    )
    for cwd in (tmp_path, ROOT):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                cwd=cwd, env=python_env(), timeout=120)  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("[2, 4, 6] benchmarks.python_api"), result.stdout
        where = result.stdout.split()[-1]
        assert "site-packages" in where and str(ROOT) not in where
    listed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "list", "methods"],
        capture_output=True, text=True, cwd=tmp_path, env=python_env(),
    )  # fmt: skip
    assert listed.returncode == 0 and "sparse_maml" in listed.stdout


def test_system_metrics_are_logged_on_request_and_only_then(store):
    assert (
        main(["run", "--method", "maml", *TINY, "--system-metrics", "--tracking-uri", store]) == 0
    )
    assert main(["run", "--method", "fomaml", *TINY, "--tracking-uri", store]) == 0
    by_method = {r.data.tags["mesabench.method"]: r for r in _runs(store)[1]}
    assert "system/cpu_utilization_percentage" in by_method["maml"].data.metrics
    assert not [k for k in by_method["fomaml"].data.metrics if k.startswith("system/")]


def test_a_first_run_on_a_fresh_machine_prints_only_ours(run_cli, tmp_path):
    """A new store and an empty matplotlib cache: MLflow's table creation and matplotlib's
    font-cache notes stay out of the user's terminal."""
    store = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    result = run_cli("run", "--method", "maml", *TINY, "--tracking-uri", store,
                     MPLCONFIGDIR=str(tmp_path / "mpl"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("maml on sinusoid-5shot seed 0")
    for noise in ("fontManager", "font cache", "Creating initial MLflow", "alembic"):
        assert noise not in result.stdout


def test_output_paths_and_run_ids_of_the_wrong_kind_are_one_line_and_exit_2(
    store, tmp_path, capsys
):
    from tests.helpers import fake_run

    fake_run(store, "maml", 0, {"final/test_loss": 0.5})
    (tmp_path / "a-file").write_text("x")
    capsys.readouterr()
    cases = [
        (["leaderboard", "--output", str(tmp_path / "missing" / "b.csv")], "does not exist"),
        (["leaderboard", "--output", str(tmp_path)], "is a folder; name a file in it"),
        (["report", "--output", str(tmp_path / "a-file")], "is a file; the report needs a"),
        (["runs", "--benchmark", "sinusoid-5sht"], "unknown benchmark 'sinusoid-5sht'"),
    ]
    for argv, message in cases:
        assert main([*argv, "--tracking-uri", store]) == 2, argv
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert message in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "store"]  # nothing new


@pytest.mark.slow  # end to end through several real CLI processes: with the long checks
def test_a_deleted_experiment_is_restored_and_an_ascii_terminal_fails_no_run(
    store, run_cli, cli
):
    """The benchmark's experiment deleted in the MLflow UI: the next run restores it (with a
    word) instead of failing; an ASCII-only output encoding prints "±" as "?" (a process of
    its own: the encoding is the process')."""
    assert cli("run", "--method", "fomaml", *TINY, "--tracking-uri", store).returncode == 0
    client = MlflowClient(store)
    client.delete_experiment(client.get_experiment_by_name("sinusoid-5shot").experiment_id)
    again = run_cli("run", "--method", "fomaml", *TINY, "--seed", "1", "--tracking-uri", store,
                    PYTHONIOENCODING="ascii")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "experiment 'sinusoid-5shot' had been deleted" in again.stderr
    assert "final/test_loss" in again.stdout and "?" in again.stdout and "±" not in again.stdout
    experiment = client.get_experiment_by_name("sinusoid-5shot")
    assert experiment.lifecycle_stage == "active"
    assert len(stored_runs(store)) == 2  # the earlier run is back beside the new one
