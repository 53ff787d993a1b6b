"""Every method in the registry works end to end through the command line."""

from __future__ import annotations

import math

import pytest
from mlflow.tracking import MlflowClient

import methods  # noqa: F401  (registers the built-ins)
from benchmarks.cli.main import main
from benchmarks.metrics.catalog import describe, is_declared
from methods.registry import METHODS
from tests.helpers import CONTINUAL_TINY, OSAKA_TINY, TINY
from tests.image_fixtures import write_mnist, write_omniglot

BUILT_INS = sorted(e.name for e in METHODS if e.source == "built-in")


def _benchmark_for(method: str) -> str:
    """A benchmark the method accepts: a continual stream for continual learners, else
    synthetic regression tasks, else sequences."""
    from benchmarks.planning.config import ConfigError
    from mesabench_core import IncompatibleSetting
    from mesabench_datasets.regression import LinRegConfig

    protocols = METHODS.get(method).value.cls.protocols
    if "continual" in protocols:
        return "mnist-rotations"
    if "online" in protocols:
        return "osaka-omniglot-p0.9"
    entry = METHODS.get(method).value
    try:
        entry.cls.check_problem(LinRegConfig().build().problem)
    except ConfigError:
        return "lindyn"
    try:  # a hand-built reference for the natural token sequence only
        entry.cls.check_config(entry.cls.Config(**entry.defaults), LinRegConfig().build().problem)
    except IncompatibleSetting:
        return "linreg-icl-interleaved"
    return "linreg-icl"


@pytest.mark.parametrize("method", BUILT_INS)
def test_registered_method_runs_end_to_end(method, store, tmp_path):
    benchmark = _benchmark_for(method)
    if benchmark == "mnist-rotations":
        settings = [*CONTINUAL_TINY, "--data-root", str(write_mnist(tmp_path / "data").parent)]
        final_metric = "final/ra"
    elif benchmark == "osaka-omniglot-p0.9":
        root = tmp_path / "data"
        write_omniglot(root), write_mnist(root, "mnist"), write_mnist(root, "fashion_mnist")
        settings = [*OSAKA_TINY, "--data-root", str(root)]
        final_metric = "final/cumulative_accuracy"
    else:
        settings = [*TINY, "--set", "eval_chunk=50"]
        final_metric = "final/test_loss"
    code = main(
        ["run", "--method", method, "--benchmark", benchmark, *settings, "--tracking-uri", store]
    )
    assert code == 0
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
