"""Few-shot image benchmarks end to end on generated fixtures, and Conv-4 in the inner loop."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from benchmarks.cli.main import main
from mesabench_datasets.fewshot import FewShotConfig
from mesabench_datasets.tasks import seeded_generator
from methods.common.networks import Conv4
from methods.gradient.inner_loop import InnerLoop
from methods.gradient.modulation import FixedRate
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
    # Known answers from the saved learners' masks (fraction of m < 0; overall weighted by
    # the tensors' sizes): final/sparsity is the last weights', final/scored_sparsity the
    # weights the test metrics came from (the best meta-validation checkpoint).
    for learner, prefix in (("final", "final/sparsity/"), ("best", "final/scored_sparsity/")):
        path = client.download_artifacts(run.info.run_id, f"learner/{learner}.pt")
        masks = torch.load(path, weights_only=False)["state"]["modulation"]
        off = {k.removeprefix("values.").replace("__", "."): (m < 0).double() for k, m in
               masks.items()}  # fmt: skip
        for tensor, gated in off.items():
            assert metrics[prefix + tensor] == pytest.approx(gated.mean().item(), abs=1e-7)
        overall = sum(g.sum().item() for g in off.values()) / sum(g.numel() for g in off.values())
        assert metrics[prefix + "overall"] == pytest.approx(overall, abs=1e-7)
        unweighted = sum(g.mean().item() for g in off.values()) / len(off)
        assert abs(overall - unweighted) > 1e-3  # the weighting is what is tested


class PixelMatcher:
    """A few-shot learner with a known score: it finds each query's true label by matching
    its top-left pixel (the fixture's class id) with the support set's, answers right on
    the first k queries of a task and wrong on the rest (k cycling over tasks), and writes
    down each task's true accuracy as it goes."""

    uses_inner_steps = False

    def __init__(self, ways: int):
        self.ways, self.task_accuracy, self._k = ways, [], 0

    def predict(self, support_x, support_y, query_x, steps):
        support_key = support_x.flatten(2)[..., 0]
        query_key = query_x.flatten(2)[..., 0]
        match = (query_key[:, :, None] == support_key[:, None, :]).float().argmax(dim=-1)
        truth = torch.gather(support_y, 1, match)
        prediction = truth.clone()
        queries = truth.shape[1]
        for task in range(truth.shape[0]):
            right = self._k % (queries + 1)
            self._k += 1
            prediction[task, right:] = (truth[task, right:] + 1) % self.ways
            self.task_accuracy.append(right / queries)
        return torch.nn.functional.one_hot(prediction, self.ways).float()


def test_few_shot_accuracy_and_its_ci_have_known_answers(data_root):
    """The meta-test's accuracy is the mean of the tasks' true accuracies and its CI the
    normal 95% half-width over tasks (1.96 s / sqrt(n)), computed here with numpy and
    scipy from what the learner wrote down: a scaled accuracy or a wrong quantile fails."""
    import numpy as np
    from scipy.stats import norm

    from benchmarks.protocols.episodic import EpisodicConfig, EpisodicProtocol
    from benchmarks.protocols.recording import MemoryRecorder

    write_omniglot(data_root)
    source = FewShotConfig(ways=5, shots=2, queries=4, val_classes=6).build()
    config = EpisodicConfig(test_tasks=130, eval_chunk=40, eval_steps=(1,))
    protocol = EpisodicProtocol(config, source, 0, MemoryRecorder(), torch.device("cpu"))
    learner = PixelMatcher(ways=5)
    final = protocol.meta_test(learner)
    truth = np.array(learner.task_accuracy)
    assert len(truth) == 130 and truth.std() > 0.2  # 0, 1/4, ..., 1 in turn
    assert final["final/test_accuracy"] == pytest.approx(truth.mean(), abs=1e-7)  # float32
    half_width = norm.ppf(0.975) * truth.std(ddof=1) / np.sqrt(len(truth))
    assert final["final/test_accuracy_ci95"] == pytest.approx(half_width, rel=1e-4)  # 1.96, rounded
    assert final["final/test_tasks"] == 130


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


def test_missing_image_data_is_bad_input_saying_where_we_looked(data_root, unopened_store, capsys):
    argv = ["run", "--method", "maml", "--benchmark", "omniglot-20w1s"]
    code = main([*argv, "--tracking-uri", unopened_store])
    err = capsys.readouterr().err
    assert code == 2
    assert "omniglot28.npz" in err and str(data_root) in err and "--data-root" in err
    assert not Path(unopened_store.removeprefix("sqlite:///")).exists()


def test_preset_applies_sparse_maml_settings_and_set_still_wins(capsys):
    assert main(["show", "miniimagenet-5w5s", "--method", "sparse_maml"]) == 0
    capsys.readouterr()
    from benchmarks.planning.plan import plan_run

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


def test_sparse_maml_runs_on_a_resnet12_backbone(data_root, store, capsys):
    """network=resnet12 end to end (thesis table 4.2's backbone, narrowed): masks on every
    block's tensors, and the run's parameter count the network's."""
    from methods.common.networks import ResNet12

    write_omniglot(data_root)
    code = main(["run", "--method", "sparse_maml", "--benchmark", "omniglot-5w1s", *SMALL,
                 "--set", "network=resnet12", "--set", "channels=4", "--set", "val_classes=6",
                 "--set", "iterations=2", "--set", "test_tasks=4", "--set", "inner_steps=2",
                 "--tracking-uri", store])  # fmt: skip
    assert code == 0, capsys.readouterr()
    _, run = _run(store, "omniglot-5w1s")
    metrics = run.data.metrics
    assert run.data.params["method.network"] == "resnet12"
    expected = sum(p.numel() for p in ResNet12(1, 4, 5).parameters())
    assert metrics["final/num_params"] == expected
    for tensor in ("block1.conv1.weight", "block4.shortcut.weight", "head.weight"):
        assert f"final/sparsity/{tensor}" in metrics


@pytest.mark.slow
def test_the_few_shot_chapter_tables_run_on_fixtures(data_root, tmp_path):
    """sparse-MAML's depth table (output layer included) and the cross-domain table run
    whole at the quick preset on generated Omniglot and MNIST: every line judged, each
    depth verdict the comparison of the two logged sparsities, the cross-domain runs
    meta-tested on MNIST."""
    from benchmarks.published.reproduce import reproduce
    from benchmarks.published.tables import TABLES
    from benchmarks.store.tracking import MlflowTracker
    from tests.image_fixtures import write_mnist

    write_omniglot(data_root, alphabets=50, characters=26)  # 1,300: MAML's 1,200 and a test
    write_mnist(data_root)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(store)
    depth = reproduce(TABLES["sparse-maml-depth"], tracker, "quick", seeds="0", warm=True,
                      data_root=str(data_root))  # fmt: skip
    assert depth.failed == 0
    by_label = {line.claim.label: line for line in depth.lines}
    (run_id, metrics), = depth.runs["head weight"].values()
    for layer, deeper in (("conv3", "conv4"), ("conv4", "head")):
        line = by_label[f"{layer} weight"]
        mine, theirs = (metrics[f"final/sparsity/{n}.weight"] for n in (layer, deeper))
        # One seed: no interval, so no verdict yet; the difference is the two sparsities'.
        assert line.verdict == "inconclusive"
        assert line.difference.mean == pytest.approx(mine - theirs)
    cross = reproduce(TABLES["sparse-maml-cross-domain"], tracker, "quick", seeds="0",
                      warm=True, data_root=str(data_root))  # fmt: skip
    assert cross.failed == 0 and all(line.verdict != "not run" for line in cross.lines)
    client = MlflowClient(store)
    for runs in cross.runs.values():
        (run_id, _), = runs.values()
        params = client.get_run(run_id).data.params
        assert params["task.test_dataset"] == "mnist" and params["task.shots"] == "5"
