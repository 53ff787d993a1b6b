"""Every method in the registry works end to end through the command line."""

from __future__ import annotations

import json
import math

import pytest
from mlflow.tracking import MlflowClient

import methods  # noqa: F401  (registers the built-ins)
from benchmarks.cli.main import main
from benchmarks.metrics.catalog import describe, is_declared
from methods.common.device_guard import DeviceGuard
from methods.registry import METHODS
from tests.helpers import tiny_run

BUILT_INS = sorted(e.name for e in METHODS if e.source == "built-in")


@pytest.mark.parametrize("method", BUILT_INS)
def test_registered_method_runs_end_to_end(method, store, tmp_path, capsys):
    benchmark, settings, final_metric = tiny_run(method, tmp_path / "data")
    # Under the device guard: a tensor made without its device, a move off the run's
    # device or a synchronisation that stalls a training step fails here, on the CPU.
    with DeviceGuard("cpu") as guard:
        code = main(
            ["run", "--method", method, "--benchmark", benchmark, *settings,
             "--tracking-uri", store, "--device", "cpu"]
        )  # fmt: skip
    assert code == 0
    guard.check()
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name(benchmark).experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["mesabench.method"] == method
    assert math.isfinite(run.data.metrics[final_metric])
    # Every final metric the run logged is declared (its direction and words), for every
    # method and so every protocol: nothing on a board is guessed from a name.
    final = sorted(k for k in run.data.metrics if k.startswith("final/"))
    assert [k for k in final if not is_declared(k)] == []
    assert not [k for k in final if "undeclared" in describe(k)]
    if benchmark == "osaka-omniglot-p0.9":
        _check_online_run(method, run, client, store, capsys)


def _check_online_run(method, run, client, store, capsys):
    """What an OSAKA run records: the stream's accuracies, pre-training where the method has
    it, boundary recall for C-MAML's family, sparsity for the sparse ones, the accuracy plot,
    and a board ranked by cumulative accuracy."""
    metrics = run.data.metrics
    assert 0.0 <= metrics["final/cumulative_accuracy"] <= 1.0
    assert metrics["final/test_accuracy"] == metrics["final/cumulative_accuracy"]
    assert any(k.startswith("final/accuracy/") for k in metrics)
    pretrained = method != "online_adam"
    assert ("pretrain/final/test_accuracy" in metrics) == pretrained
    assert ("final/boundary_recall" in metrics) == method.endswith("cmaml")
    if method.startswith("sparse"):
        assert 0.0 < metrics["final/sparsity/overall"] < 1.0
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"accuracy_over_time.png", "accuracy_over_time.csv"} <= artifacts
    if method == "cmaml":  # the leaderboard ranks online runs by cumulative accuracy
        capsys.readouterr()
        main(["leaderboard", "--benchmark", "osaka-omniglot-p0.9", "--tracking-uri", store,
              "--format", "json"])  # fmt: skip
        board = json.loads(capsys.readouterr().out)[0]
        assert board["columns"][0] == "final/cumulative_accuracy"
        assert "final/boundary_recall" in board["columns"]


def test_the_registry_holds_every_family():
    assert {
        "maml",
        "fomaml",
        "anil",
        "metasgd",
        "sparse_maml",
        "sparse_relu_maml",
        "lsa",
        "gd",
        "gdpp",
        "ridge",
        "least_squares",
        "online_sgd",
        "er",
        "lamaml",
        "sparse_lamaml",
        "gem",
        "agem",
        "mer",
        "ewc",
        "online_adam",
        "online_finetune",
        "maml_frozen",
        "anil_frozen",
        "cmaml",
        "sparse_cmaml",
        "sparse_relu_cmaml",
    } <= set(BUILT_INS)
