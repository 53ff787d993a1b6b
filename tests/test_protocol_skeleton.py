"""The run skeleton the protocols share: a new protocol is one class, and gets checkpoints,
resume, divergence stop, progress and the common final metrics from the skeleton."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.protocols import PROTOCOLS, DivergenceError, Protocol, RunState
from benchmarks.protocols.recording import MemoryRecorder
from mesabench_datasets.regression import SinusoidConfig
from mesabench_datasets.tasks import seeded_generator
from methods.gradient.maml import GradientMetaLearner, MAMLConfig


class Recorder(MemoryRecorder):
    """Keeps every checkpoint, not only the last."""

    def __init__(self) -> None:
        super().__init__()
        self.checkpoints: list[dict] = []

    def save_checkpoint(self, state: dict) -> None:
        super().save_checkpoint(state)
        self.checkpoints.append(state)


class RoundRobin(Protocol):
    """A toy protocol: meta-train on one fixed task batch per 'round', score the training
    loss. Only what differs from the skeleton is written here."""

    name = "round-robin-test"

    def __init__(self, *args, rounds: int = 12, **kwargs):
        super().__init__(*args, **kwargs)
        self.rounds = rounds

    def total_steps(self) -> int:
        return self.rounds

    def begin(self, method, state: RunState) -> None:
        state.progress = {"losses": []}

    def train(self, method, state: RunState) -> None:
        for step in range(state.done, self.rounds):
            batch = self.source.sample(4, seeded_generator(7, self.seed, step), "train")
            metrics = method.meta_train_step(batch)
            done = self.step_done(state, metrics, f"round {step}")
            state.progress["losses"].append(metrics["loss"])
            self.log(self.record_sparsity(method, state, done), done)
            if done % 5 == 0:
                self.save_checkpoint(method, state)

    def finish(self, method, state: RunState) -> dict[str, float]:
        return {"final/mean_train_loss": sum(state.progress["losses"]) / state.done}


def _protocol(recorder, progress=None) -> RoundRobin:
    source = SinusoidConfig().build()
    return RoundRobin(None, source, 3, recorder, torch.device("cpu"), progress=progress)


def _method() -> GradientMetaLearner:
    torch.manual_seed(0)
    source = SinusoidConfig().build()
    config = MAMLConfig(modulation="binary_mask", inner_steps=1)
    return GradientMetaLearner(config, source.problem, torch.device("cpu"))


def test_a_protocol_registers_itself_by_subclassing():
    assert PROTOCOLS["round-robin-test"] is RoundRobin
    assert {"episodic", "continual", "online"} <= set(PROTOCOLS)


def test_the_skeleton_adds_the_common_final_metrics_and_shows_progress():
    recorder, shown = Recorder(), []
    method = _method()
    final = _protocol(recorder, progress=lambda done, m: shown.append(done)).run(method)
    assert shown == list(range(1, 13))
    assert method.total_steps == 12  # the budget, told to the method before training
    expected = {"final/mean_train_loss", "final/train_time_s", "final/num_params",
                "final/peak_rss_mib"}  # fmt: skip
    assert expected <= set(final)
    assert final["final/num_params"] == method.num_parameters()
    # Sparsity of the weights training ended with, overall = parameter-weighted mean.
    per_tensor = method.sparsity()
    sizes = method.tensor_sizes()
    weighted = sum(per_tensor[k] * sizes[k] for k in per_tensor) / sum(sizes.values())
    assert final["final/sparsity/overall"] == pytest.approx(weighted)
    # Everything final is logged once, at the last step; sparsity figures are drawn.
    assert all(recorder.metrics[k][-1] == (12, v) for k, v in final.items())
    assert {"sparsity.png", "sparsity_over_iterations.csv", "sparsity_by_depth.png"} <= set(
        recorder.artifacts
    )
    history = recorder.artifacts["sparsity_over_iterations.csv"].splitlines()
    assert history[0].startswith("iteration,") and len(history) == 13


def test_a_resumed_run_ends_exactly_as_an_uninterrupted_one():
    whole = _protocol(Recorder()).run(_method())
    first = Recorder()
    _protocol(first).run(_method())
    checkpoint = first.checkpoints[0]  # after round 5
    assert checkpoint["iteration"] == 5 and checkpoint["protocol"] == "round-robin-test"
    resumed_method = _method()
    torch.manual_seed(123)  # the checkpoint's RNG state must win over whatever came before
    resumed = _protocol(Recorder()).run(resumed_method, checkpoint=checkpoint)
    from benchmarks.metrics.catalog import measures_the_machine

    for key, value in whole.items():
        if not measures_the_machine(key):
            assert resumed[key] == value, key


def test_a_checkpoint_is_a_copy_and_another_protocols_is_refused():
    recorder = Recorder()
    _protocol(recorder).run(_method())
    first, second = recorder.checkpoints[:2]
    assert len(first["progress"]["losses"]) == 5 and len(second["progress"]["losses"]) == 10
    foreign = {**first, "protocol": "episodic"}
    with pytest.raises(ValueError, match="not one of the round-robin-test protocol's"):
        _protocol(Recorder()).run(_method(), checkpoint=foreign)


def test_a_diverged_step_stops_the_run_naming_where():
    method = _method()
    original = method.meta_train_step
    calls = []

    def blows_up(batch):
        calls.append(1)
        metrics = original(batch)
        return {**metrics, "loss": math.nan} if len(calls) == 4 else metrics

    method.meta_train_step = blows_up
    with pytest.raises(DivergenceError, match="diverged at round 3: training loss is nan"):
        _protocol(Recorder()).run(method)


def test_untimed_work_does_not_count_as_training_time():
    # A clock the test moves by hand: exact on any machine, however busy.
    now = [100.0]
    state = RunState(clock=lambda: now[0])
    state.start_clock()
    now[0] += 1.0  # a second of training
    with state.untimed():
        now[0] += 0.4  # evaluation: not counted
        assert state.seconds() == 1.0
    now[0] += 0.5  # training again
    state.stop_clock()
    assert state.elapsed == 1.5
