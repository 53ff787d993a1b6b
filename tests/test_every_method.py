"""Every method in the registry works end to end through the command line."""

from __future__ import annotations

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
def test_registered_method_runs_end_to_end(method, store, tmp_path):
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
