"""Few-shot image benchmarks end to end on generated fixtures, and Conv-4 in the inner loop."""

from __future__ import annotations

import pytest
import torch
from mlflow.tracking import MlflowClient

from benchmarks.cli import main
from mesabench_datasets.fewshot import FewShotConfig
from mesabench_datasets.tasks import seeded_generator
from methods.inner_loop import InnerLoop
from methods.modulation import FixedRate
from methods.networks import Conv4
from tests.image_fixtures import write_miniimagenet_csv, write_miniimagenet_pickles, write_omniglot

SMALL = [
    "--set",
    "iterations=4",
    "--set",
    "val_every=2",
    "--set",
    "val_tasks=4",
    "--set",
    "test_tasks=12",
    "--set",
    "meta_batch=2",
    "--set",
    "channels=8",
    "--set",
    "log_every=1",
    "--set",
    "checkpoint_every=2",
]


@pytest.fixture
def data_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MESABENCH_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "data"


def _run(store, benchmark):
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name(benchmark).experiment_id])
    return client, run


def test_sparse_maml_on_omniglot_fixture_logs_accuracy_and_sparsity_by_layer(
    data_root, store, capsys
):
    write_omniglot(data_root)
    code = main(
        [
            "run",
            "--method",
            "sparse_maml",
            "--benchmark",
            "omniglot-5w1s",
            *SMALL,
            "--set",
            "val_classes=6",
            "--tracking-uri",
            store,
        ]
    )
    assert code == 0, capsys.readouterr()
    client, run = _run(store, "omniglot-5w1s")
    metrics = run.data.metrics
    assert 0.0 <= metrics["final/test_accuracy"] <= 1.0
    assert metrics["final/test_accuracy_ci95"] > 0
    assert "final/test_accuracy_steps3" in metrics  # MAML paper: 3 test steps for 5-way
    for tensor in ("conv1.weight", "bn1.weight", "conv4.bias", "head.weight"):
        assert f"final/sparsity/{tensor}" in metrics
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"sparsity_by_depth.png", "sparsity.png", "sparsity_per_tensor.csv"} <= artifacts
    assert run.data.params["method.inner_lr"] == "0.4"


@pytest.mark.parametrize("fmt", ["pickle", "csv"])
def test_miniimagenet_runs_end_to_end_in_both_formats(data_root, store, fmt):
    (write_miniimagenet_pickles if fmt == "pickle" else write_miniimagenet_csv)(data_root)
    code = main(
        [
            "run",
            "--method",
            "fomaml",
            "--benchmark",
            "miniimagenet-5w1s",
            *SMALL,
            "--set",
            "ways=3",
            "--set",
            "inner_steps=1",
            "--set",
            "eval_steps=2",
            "--set",
            f"file_format={fmt}",
            "--tracking-uri",
            store,
        ]
    )
    assert code == 0
    _, run = _run(store, "miniimagenet-5w1s")
    assert run.info.status == "FINISHED"
    assert 0.0 <= run.data.metrics["final/test_accuracy"] <= 1.0


def test_missing_image_data_is_bad_input_saying_where_we_looked(data_root, store, capsys):
    code = main(
        ["run", "--method", "maml", "--benchmark", "omniglot-20w1s", "--tracking-uri", store]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "omniglot28.npz" in err and str(data_root) in err and "--data-root" in err
    assert (
        not store.startswith("sqlite:///")
        or not __import__("pathlib").Path(store[len("sqlite:///") :]).exists()
    )


def test_preset_applies_sparse_maml_settings_and_set_still_wins(capsys):
    assert main(["show", "miniimagenet-5w5s", "--method", "sparse_maml"]) == 0
    capsys.readouterr()
    from benchmarks.runner import plan_run

    plan = plan_run(
        "sparse_maml",
        "miniimagenet-5w5s",
        preset="sparse-maml",
        overrides={"iterations": "7"},
        device="cpu",
    )
    assert plan.method.inner_steps == 35 and plan.method.inner_lr == 0.25
    assert plan.method.modulation_lr == 0.0075 and plan.protocol.meta_batch == 2
    assert plan.protocol.iterations == 7
    assert (
        main(["run", "--method", "maml", "--benchmark", "omniglot-5w1s", "--preset", "nope"]) == 2
    )
    assert "unknown preset 'nope' for omniglot-5w1s; allowed: paper, sparse-maml" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("first_order", [False, True])
def test_conv4_meta_gradient_is_the_same_vmapped_or_looped(data_root, first_order):
    """vmap (elementwise batch norm) and the per-task loop (fused batch norm) agree to
    rounding. With torch's fused batch norm under vmap, second-order gradients are wrong
    by up to 26% (torch 2.14), which is why Conv-4 avoids it there."""
    write_omniglot(data_root)
    batch = (
        FewShotConfig(ways=3, shots=2, queries=2, val_classes=6)
        .build()
        .sample(3, seeded_generator(0), "train")
    )
    batch = type(batch)(*(t.double() if t.is_floating_point() else t for t in batch))
    grads = []
    for vectorize in (True, False):
        torch.manual_seed(0)
        net = Conv4(1, 28, 6, 3, fused_norm=not vectorize).double()
        params = dict(net.named_parameters())
        loop = InnerLoop(
            net, FixedRate(0.1), "cross_entropy", list(params), first_order, vectorize=vectorize
        )
        loss = loop.batched_query_loss(params, {}, batch, steps=2).mean()
        grads.append(torch.autograd.grad(loss, list(params.values())))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)
