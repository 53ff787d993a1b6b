"""A new protocol touches two files: its module (config, metrics, loop) and a benchmark spec
that uses its config. Both live in this one test file; nothing else of the suite changes,
and the protocol runs end to end through the run service into a real store and ranks on a
leaderboard by the metric it declared."""

from __future__ import annotations

import dataclasses
import io
from dataclasses import dataclass

import pytest
import torch

from benchmarks.catalog.specs import BENCHMARKS, BenchmarkSpec, register_benchmark
from benchmarks.metrics.catalog import direction_of
from benchmarks.protocols import PROTOCOLS, Protocol, RunState, protocol_for
from benchmarks.protocols.recording import MemoryRecorder
from mesabench_core import param
from mesabench_datasets.regression import SinusoidConfig
from mesabench_datasets.tasks import seeded_generator
from methods.gradient.maml import GradientMetaLearner
from methods.registry import METHODS, MethodEntry


# -- file 1: the protocol's module --------------------------------------------------------------
@dataclass(frozen=True)
class RoundsConfig:
    rounds: int = param(6, min=1, help="meta-training rounds, one fixed task batch each")
    tasks: int = param(4, min=1, help="tasks per round")


class RoundsProtocol(Protocol):
    """Meta-train on one fixed task batch per round; score the mean training loss."""

    name = "rounds-test"
    Config = RoundsConfig
    metrics = (
        (r"final/mean_round_loss", "lower", "mean training loss over the rounds"),
        (r"final/rounds", None, "number of rounds"),
    )
    headline = ("final/mean_round_loss",)

    def total_steps(self, task=None) -> int:
        return self.config.rounds

    def begin(self, method, state: RunState) -> None:
        state.progress = {"losses": []}

    def train(self, method, state: RunState) -> None:
        for step in range(state.done, self.config.rounds):
            batch = self.source.sample(self.config.tasks, seeded_generator(7, self.seed, step),
                                       "train")  # fmt: skip
            metrics = method.meta_train_step(batch)
            state.progress["losses"].append(metrics["loss"])
            self.log(metrics, self.step_done(state, metrics, f"round {step}"))

    def finish(self, method, state: RunState) -> dict[str, float]:
        losses = state.progress["losses"]
        return {"final/mean_round_loss": sum(losses) / len(losses), "final/rounds": len(losses)}


# -- file 2: a benchmark that uses it (and a method that declares it supports it) ---------------
class RoundsLearner(GradientMetaLearner):
    protocols = frozenset({"episodic", "rounds-test"})


SPEC = BenchmarkSpec(name="sinusoid-rounds-test", description="sinusoids, in rounds",
                     task=SinusoidConfig(), protocol=RoundsConfig(rounds=5))  # fmt: skip
if SPEC.name not in BENCHMARKS:
    register_benchmark(SPEC, source="tests/test_new_protocol.py")
if "rounds_maml_test" not in METHODS:
    METHODS.add("rounds_maml_test", MethodEntry(RoundsLearner), "tests/test_new_protocol.py")


def test_the_spec_finds_its_protocol_from_its_config_type():
    assert PROTOCOLS["rounds-test"] is RoundsProtocol
    assert protocol_for(RoundsConfig()) is RoundsProtocol
    assert SPEC.protocol_name == "rounds-test"  # derived, never stated twice
    assert direction_of("final/mean_round_loss") == "lower"
    assert direction_of("final/rounds") is None


def test_a_spec_stating_another_protocol_than_its_config_is_refused():
    with pytest.raises(ValueError, match="states protocol_name 'episodic', but its protocol "
                       "config RoundsConfig is the 'rounds-test' protocol's"):  # fmt: skip
        BenchmarkSpec(name="x", description="", task=SinusoidConfig(), protocol=RoundsConfig(),
                      protocol_name="episodic")  # fmt: skip


def test_the_new_protocol_runs_through_the_run_service_and_ranks(tmp_path, store):
    from mlflow.tracking import MlflowClient
    from rich.console import Console

    from benchmarks.results.leaderboards import leaderboard_from_store
    from benchmarks.running.service import RunRequest, open_run, run_command
    from benchmarks.store.reader import open_reader

    request = RunRequest(method="rounds_maml_test", benchmark=SPEC.name, settings={"rounds": "3"},
                         device="cpu", tracking_uri=store)  # fmt: skip
    started = open_run(request)
    finals = {0: started.execute()}
    assert started.tracker.client.get_run(started.run_id).info.status == "FINISHED"
    assert finals[0]["final/rounds"] == 3.0
    # Seed 1 as the command line runs it: progress bar, final table, exit code.
    shown = io.StringIO()
    assert run_command(dataclasses.replace(request, seed=1), Console(file=shown)) == 0
    assert "final/mean_round_loss" in shown.getvalue()
    runs = MlflowClient(store).search_runs(
        [MlflowClient(store).get_experiment_by_name(SPEC.name).experiment_id],
        filter_string="tags.`mesabench.seed` = '1'",
    )
    finals[1] = {k: v for k, v in runs[0].data.metrics.items() if k.startswith("final/")}
    # The loss the protocol reports is the mean of what the method returned, run again here.
    torch.manual_seed(0)
    method = RoundsLearner(started.plan.method, SinusoidConfig().build().problem, "cpu")
    protocol = RoundsProtocol(RoundsConfig(rounds=3), SinusoidConfig().build(), 0,
                              MemoryRecorder(), torch.device("cpu"))  # fmt: skip
    again = protocol.run(method)
    assert again["final/mean_round_loss"] == pytest.approx(finals[0]["final/mean_round_loss"])

    board = leaderboard_from_store(open_reader(store), SPEC.name)
    assert board.metric == "final/mean_round_loss" and not board.higher
    (row,) = board.rows
    assert row.stats(board.metric).n == 2
    mean = (finals[0]["final/mean_round_loss"] + finals[1]["final/mean_round_loss"]) / 2
    assert row.stats(board.metric).mean == pytest.approx(mean)
