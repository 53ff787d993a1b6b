"""OSAKA: the stream, the test-then-train protocol, boundary detection, the C-MAML family."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient

from benchmarks.cli.main import main
from benchmarks.protocols.online import OnlineConfig, OnlineProtocol, boundary_scores
from benchmarks.protocols.recording import MemoryRecorder
from mesabench_datasets.osaka import SOURCES, OsakaConfig
from methods.api import OnlineMethod
from methods.continual.online import OnlineMetaConfig, OnlineMetaLearner
from tests.helpers import OSAKA_TINY
from tests.image_fixtures import write_mnist, write_omniglot

# The fixture has 48 Omniglot classes: 20 for pre-training, 10 for validation, 18 unseen.
SMALL = {"pretrain_classes": 20, "val_classes": 10}
# Every online method's end-to-end run (pre-training, stream, boundary recall, sparsity,
# artifacts, the board's ranking column) is checked on the run tests/test_every_method.py
# makes of it under the device guard: one run per method, not one per test file.


@pytest.fixture
def data_root(data_root):
    """The shared data folder (conftest.py) with the stream's three sources written in."""
    write_omniglot(data_root)
    write_mnist(data_root, "mnist")
    write_mnist(data_root, "fashion_mnist")
    return data_root


def test_stream_statistics_match_p_and_the_source_mix(data_root):
    stream = OsakaConfig(p=0.9, steps=20_000, **SMALL).build()
    tasks = stream.tasks(seed=3)
    assert bool(tasks.switched[0])
    assert abs(tasks.switched[1:].float().mean().item() - 0.1) < 0.01
    mix = torch.bincount(tasks.source, minlength=3).float() / len(tasks.source)
    assert torch.allclose(mix, torch.tensor([0.5, 0.25, 0.25]), atol=0.04)
    # Consecutive steps of one task share it; a switch starts the next task.
    assert torch.equal(tasks.task_of_step[1:] - tasks.task_of_step[:-1], tasks.switched[1:].long())


def test_batches_carry_the_right_labels_and_depend_only_on_the_seed(data_root):
    stream = OsakaConfig(p=0.8, steps=60, **SMALL).build()
    tasks = stream.tasks(seed=0)
    first_unseen = SMALL["pretrain_classes"] + SMALL["val_classes"]
    for step in range(60):
        batch = stream.batch(tasks, 0, step)
        assert batch.x.shape == (50, 1, 28, 28) and batch.x.min() >= 0 and batch.x.max() <= 1
        assert torch.equal(torch.bincount(batch.y, minlength=10), torch.full((10,), 5))
        task = int(tasks.task_of_step[step])
        classes = tasks.classes[task]
        # Fixture images carry their class id in the first pixel (MNIST-like: 200 + digit).
        offset = first_unseen if SOURCES[batch.source] == "omniglot" else 200
        expected = offset + classes[batch.y]
        assert torch.equal((batch.x[:, 0, 0, 0] * 255).round().long(), expected)
    again = stream.batch(stream.tasks(seed=0), 0, 17)
    assert torch.equal(again.x, stream.batch(tasks, 0, 17).x)
    other = stream.tasks(seed=1)
    assert not torch.equal(other.switched, tasks.switched) or not torch.equal(
        other.classes[:3], tasks.classes[:3]
    )


class LabelCopier(OnlineMethod):
    """Predicts, position by position, the labels it was last given, and records the order
    of the protocol's calls."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []
        self.last_labels: torch.Tensor | None = None

    def predict(self, x):
        self.calls.append(("predict", int(x.sum().item() * 1000)))
        labels = (
            torch.zeros(len(x), dtype=torch.long)
            if self.last_labels is None
            else (self.last_labels)
        )
        return torch.nn.functional.one_hot(labels, 10).float()

    def observe(self, x, y):
        self.calls.append(("observe", int(x.sum().item() * 1000)))
        self.last_labels = y.clone()
        return {"loss": 0.0}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state) -> None:
        pass


def test_every_batch_is_scored_before_its_labels_are_given(data_root):
    stream = OsakaConfig(p=0.98, steps=200, **SMALL).build()
    learner = LabelCopier()
    protocol = OnlineProtocol(
        OnlineConfig(pretrain_iterations=0, log_every=50), stream, 0, MemoryRecorder(),
        torch.device("cpu"),
    )  # fmt: skip
    final = protocol.run(learner)
    kinds = [kind for kind, _ in learner.calls]
    assert kinds == ["predict", "observe"] * 200
    assert all(a[1] == b[1] for a, b in zip(learner.calls[::2], learner.calls[1::2], strict=True))
    # Labels are shuffled within each batch: copying the last batch's labels by position
    # is worth chance, not the near-perfect score it would get from a fixed label layout.
    assert final["final/cumulative_accuracy"] < 0.2
    assert "final/boundary_precision" not in final


class HalfOracle(OnlineMethod):
    """Right on every Omniglot batch (it draws the batch being scored from the stream
    itself), class 0 on every other; flags a boundary where ``flags`` says."""

    def __init__(self, stream, seed: int, flags=None):
        self.stream, self.seed, self.tasks, self.step = stream, seed, stream.tasks(seed), 0
        self.flags = flags

    def predict(self, x):
        batch = self.stream.batch(self.tasks, self.seed, self.step)
        assert torch.equal(batch.x, x)  # the batch being scored, before its labels
        right = SOURCES[batch.source] == "omniglot"
        labels = batch.y if right else torch.zeros(len(x), dtype=torch.long)
        return torch.nn.functional.one_hot(labels, 10).float()

    def observe(self, x, y):
        flag = {} if self.flags is None else {"boundary": float(self.flags[self.step])}
        self.step += 1
        return {"loss": 0.0, **flag}

    def reports_boundaries(self) -> bool:
        return self.flags is not None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state) -> None:
        pass


def _online_run(stream, learner) -> dict[str, float]:
    protocol = OnlineProtocol(
        OnlineConfig(pretrain_iterations=0, log_every=50), stream, 0, MemoryRecorder(),
        torch.device("cpu"),
    )  # fmt: skip
    return protocol.run(learner)


def test_cumulative_and_per_source_accuracy_have_known_answers(data_root):
    """An oracle on Omniglot batches and a constant predictor elsewhere: Omniglot scores
    exactly 1, MNIST and Fashion-MNIST exactly 0.1 (5 of each batch's 50 are class 0), and
    the cumulative accuracy is their step-weighted mean, counted here from the task list."""
    stream = OsakaConfig(p=0.9, steps=300, **SMALL).build()
    final = _online_run(stream, HalfOracle(stream, 0))
    source_of_step = stream.tasks(0).source[stream.tasks(0).task_of_step]
    counts = {name: int((source_of_step == i).sum()) for i, name in enumerate(SOURCES)}
    assert min(counts.values()) > 0 and sum(counts.values()) == 300
    assert final["final/accuracy/omniglot"] == 1.0
    for other in SOURCES[1:]:
        assert final[f"final/accuracy/{other}"] == pytest.approx(0.1, abs=1e-12)
    expected = (counts["omniglot"] + 0.1 * (300 - counts["omniglot"])) / 300
    assert final["final/cumulative_accuracy"] == pytest.approx(expected, abs=1e-12)
    assert final["final/tasks"] == int(stream.tasks(0).task_of_step[-1]) + 1


def test_boundary_precision_and_recall_through_the_protocol(data_root):
    """Flags exactly at the switches score 1 / 1; a flag at every step has recall 1 and
    precision = switches / (steps - 1) (step 0 starts the stream and is not scored); no
    missed switch goes unnoticed."""
    stream = OsakaConfig(p=0.9, steps=200, **SMALL).build()
    switched = stream.tasks(0).switched
    exact = _online_run(stream, HalfOracle(stream, 0, switched.tolist()))
    assert exact["final/boundary_precision"] == 1.0 and exact["final/boundary_recall"] == 1.0
    always = _online_run(stream, HalfOracle(stream, 0, [True] * 200))
    switches = int(switched[1:].sum())
    assert always["final/boundary_recall"] == 1.0
    assert always["final/boundary_precision"] == pytest.approx(switches / 199, abs=1e-12)
    first_half = [bool(s) and i < 100 for i, s in enumerate(switched.tolist())]
    half = _online_run(stream, HalfOracle(stream, 0, first_half))
    late = int(switched[100:].sum())
    assert half["final/boundary_precision"] == 1.0
    assert half["final/boundary_recall"] == pytest.approx((switches - late) / switches)


def test_boundary_scores_on_hand_made_detections():
    switched = torch.tensor([False, True, False, False, True, False])
    detected = torch.tensor([False, True, True, False, False, False])
    assert boundary_scores(detected, switched) == {"precision": 0.5, "recall": 0.5}
    assert math.isnan(boundary_scores(torch.zeros(6, dtype=torch.bool), switched)["precision"])


def _prototype_batch(prototypes, labels, generator):
    """5 noisy copies of each of 10 prototypes, labelled by ``labels``, shuffled."""
    x = prototypes.repeat_interleave(5, dim=0)
    x = (x + 0.05 * torch.randn(x.shape, generator=generator)).clamp(0, 1)
    y = labels.repeat_interleave(5)
    order = torch.randperm(50, generator=generator)
    return x[order], y[order]


@pytest.mark.slow  # a long check (28 s in the fast suite): 50-image batches, real Conv-4
def test_cmaml_detects_the_switches_of_a_constructed_stream():
    from mesabench_datasets.tasks import Problem

    torch.manual_seed(0)
    problem = Problem((1, 28, 28), 10, "cross_entropy", "conv4")
    config = OnlineMetaConfig(
        channels=8, inner_lr=0.5, inner_steps=5, modulation="fixed", online_lr=1e-3,
        boundary_threshold=1.0, pretrain=False,
    )  # fmt: skip
    learner = OnlineMetaLearner(config, problem, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    prototypes = torch.rand(10, 1, 28, 28, generator=g)
    # Three tasks: the same images under three labellings, 8 steps each.
    labellings = [torch.arange(10), torch.arange(10).roll(3), torch.arange(10).flip(0)]
    detected, switched = [], []
    for task, labels in enumerate(labellings):
        for step in range(8):
            x, y = _prototype_batch(prototypes, labels, g)
            learner.predict(x)
            result = learner.observe(x, y)
            detected.append(bool(result.get("boundary", 0.0)))
            switched.append(step == 0 and task > 0)
    assert detected[1:] == switched[1:]


@pytest.mark.slow  # a long check: a stream stopped and resumed in memory, twice over
def test_an_interrupted_stream_resumes_to_the_same_numbers(data_root):
    from benchmarks.planning.plan import plan_run
    from benchmarks.running.execute import execute

    overrides = {"steps": "25", "pretrain_iterations": "4", "channels": "8",
                 "pretrain_val_every": "2", "pretrain_val_tasks": "4", "pretrain_test_tasks": "4",
                 "pretrain_meta_batch": "2", "checkpoint_every": "10", **{
                     k: str(v) for k, v in SMALL.items()}}  # fmt: skip
    plan = plan_run("cmaml", "osaka-omniglot-p0.9", seed=2, overrides=overrides)
    whole = execute(plan, MemoryRecorder())

    class Interrupt(Exception):
        pass

    recorder = MemoryRecorder()

    def stop_at(done, metrics):
        if done == 4 + 15:  # pre-training done, then 15 stream steps (checkpoint at 10)
            raise Interrupt

    with pytest.raises(Interrupt):
        execute(plan, recorder, progress=stop_at)
    assert recorder.checkpoint["protocol"] == "online" and recorder.checkpoint["done"] == 10
    resumed = execute(plan, MemoryRecorder(), checkpoint=recorder.checkpoint)
    for key in ("final/cumulative_accuracy", "final/boundary_recall", "final/accuracy/omniglot"):
        if key in whole:
            assert resumed[key] == whole[key], key


def test_online_learners_refuse_wrong_settings(data_root, store, capsys):
    code = main(["run", "--method", "online_adam", "--benchmark", "osaka-omniglot-p0.9",
                 "--set", "slow_update=meta", "--tracking-uri", store])  # fmt: skip
    assert code == 2
    assert "slow_update meta needs fast_adaptation" in capsys.readouterr().err
    code = main(["run", "--method", "finetune", "--benchmark", "osaka-omniglot-p0.9",
                 "--tracking-uri", store])  # fmt: skip
    assert code == 2
    assert "online_finetune" in capsys.readouterr().err
    code = main(["run", "--method", "cmaml", "--benchmark", "osaka-omniglot-p0.9",
                 "--set", "p=1.0", "--tracking-uri", store])  # fmt: skip
    assert code == 2
    assert "p must be in [0, 1)" in capsys.readouterr().err


def test_prolonged_cmaml_updates_the_slow_weights_at_boundaries_and_full_buffers():
    from mesabench_datasets.tasks import Problem

    torch.manual_seed(0)
    problem = Problem((1, 28, 28), 10, "cross_entropy", "conv4")
    config = OnlineMetaConfig(
        channels=8, inner_lr=0.5, inner_steps=5, modulation="fixed", online_lr=1e-3,
        boundary_threshold=2.0, pretrain=False, prolonged=True, buffer_batches=4,
    )  # fmt: skip
    learner = OnlineMetaLearner(config, problem, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    prototypes = torch.rand(10, 1, 28, 28, generator=g)
    changed, detected = [], []
    for labels in (torch.arange(10),) * 6 + (torch.arange(10).roll(3),) * 2:
        before = [p.detach().clone() for p in learner.params.values()]
        x, y = _prototype_batch(prototypes, labels, g)
        learner.predict(x)
        detected.append(bool(learner.observe(x, y).get("boundary", 0.0)))
        after = list(learner.params.values())
        changed.append(any(not torch.equal(a, b) for a, b in zip(after, before, strict=True)))
    assert detected == [False] * 6 + [True, False]
    # A full buffer (4 batches) at step 4, the detected boundary at step 6; nothing else.
    assert changed == [False, False, False, False, True, False, True, False]


@pytest.mark.slow  # a fault drill: a run stopped in either phase, resumed through a real store
def test_an_interrupted_cli_run_resumes_from_either_phase(data_root, store, monkeypatch, capsys):
    from benchmarks.running.console import TrainingProgress

    settings = [*OSAKA_TINY, "--set", "checkpoint_every=2", "--seed", "1"]
    experiment = "osaka-omniglot-p0.9"
    original = TrainingProgress.__call__
    for stop_at in (3, 4 + 13):  # in pre-training (4 iterations), then in the stream

        def interrupt(self, done, metrics, stop_at=stop_at):
            if done == stop_at:
                raise KeyboardInterrupt
            original(self, done, metrics)

        monkeypatch.setattr(TrainingProgress, "__call__", interrupt)
        assert main(["run", "--method", "cmaml", "--benchmark", experiment, *settings,
                     "--tracking-uri", store]) == 130  # fmt: skip
        monkeypatch.setattr(TrainingProgress, "__call__", original)
        client = MlflowClient(store)
        killed = client.search_runs(
            [client.get_experiment_by_name(experiment).experiment_id],
            filter_string="attributes.status = 'KILLED'",
        )[0]
        assert main(["run", "--resume", killed.info.run_id, "--tracking-uri", store]) == 0
        assert f"from iteration {stop_at - 1}" in capsys.readouterr().out.replace("\n", " ")
    assert main(["run", "--method", "cmaml", "--benchmark", experiment, *settings,
                 "--tracking-uri", store]) == 0  # fmt: skip
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    finals = [r.data.metrics["final/cumulative_accuracy"] for r in runs]
    assert len(finals) == 3 and len(set(finals)) == 1
