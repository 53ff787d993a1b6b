"""The avalanche adapters: driven on our stream, scored by our protocol, and our accuracy
bookkeeping cross-checked against avalanche's own."""

from __future__ import annotations

import warnings

import pytest
import torch

from benchmarks.protocols import ContinualConfig, ContinualProtocol
from benchmarks.protocols.recording import MemoryRecorder
from mesabench_datasets.streams import StreamConfig, TaskStream
from methods.peers.avalanche import AvalancheBaseline, AvalancheConfig, experience_of
from tests.test_continual import learnable_arrays


def _run(strategy: str):
    stream = TaskStream(
        StreamConfig(tasks=3, train_per_task=60, test_per_task=50), learnable_arrays()
    )
    torch.manual_seed(0)
    learner = AvalancheBaseline(
        AvalancheConfig(strategy=strategy), stream.problem, torch.device("cpu")
    )
    recorder = MemoryRecorder()
    protocol = ContinualProtocol(
        ContinualConfig(batch_size=10), stream, 0, recorder, torch.device("cpu")
    )
    return stream, learner, protocol.run(learner), recorder


def _avalanche_accuracies(stream, model) -> list[float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from avalanche.benchmarks import tensors_benchmark
        from avalanche.evaluation.metrics import accuracy_metrics
        from avalanche.training import Naive
        from avalanche.training.plugins import EvaluationPlugin

        tests = [stream.test_task(t) for t in range(stream.num_tasks)]
        scenario = tensors_benchmark(
            train_tensors=tests, test_tensors=tests, task_labels=[0] * len(tests)
        )
        evaluator = EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])
        judge = Naive(
            model=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.0),
            criterion=torch.nn.CrossEntropyLoss(),
            eval_mb_size=17,  # a batch size that does not divide the test set
            evaluator=evaluator,
        )
        results = judge.eval(scenario.test_stream)
    key = "Top1_Acc_Exp/eval_phase/test_stream/Task000/Exp{:03d}"
    return [results[key.format(t)] for t in range(stream.num_tasks)]


def test_our_accuracy_matrix_agrees_with_avalanches_bookkeeping():
    stream, learner, final, recorder = _run("naive")
    last_row = [
        float(v) for v in recorder.artifacts["accuracy_matrix.csv"].splitlines()[-1].split(",")[1:]
    ]
    theirs = _avalanche_accuracies(stream, learner.network)
    assert last_row == pytest.approx(theirs, abs=1e-6)
    assert final["final/ra"] == pytest.approx(sum(theirs) / len(theirs), abs=1e-6)


@pytest.mark.parametrize("strategy", ["gem", "agem", "ewc", "mer"])
def test_each_strategy_learns_on_our_stream(strategy):
    _, learner, final, _ = _run(strategy)
    assert learner.strategy.clock.train_exp_counter == 3  # one experience per task
    assert final["final/la"] > 0.2  # above chance (0.1) on the task just trained
    with pytest.raises(RuntimeError, match="cannot be resumed"):
        learner.load_state_dict(learner.state_dict())


def test_the_adapter_keeps_the_arrival_order_and_batch_size():
    stream, learner, _, _ = _run("naive")
    assert learner.strategy.train_mb_size == 10
    # The experience handed to avalanche holds exactly our samples, in arrival order.
    x, y = stream.train_task(2, seed=0)
    seen = experience_of(x, y).dataset
    assert len(seen) == len(x)
    for i in (0, 1, len(x) - 1):
        assert torch.equal(seen[i][0], x[i]) and int(seen[i][1]) == int(y[i])
