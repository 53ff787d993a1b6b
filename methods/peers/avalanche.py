"""Classic continual baselines from avalanche (GEM, A-GEM, MER, EWC, naive fine-tuning),
driven on our stream and scored by our protocol.

An adapter, not a re-implementation: the adapter receives the stream one batch at a time
like every continual method, keeps the task's batches, and at the task boundary hands them
to avalanche's strategy as one experience (in arrival order, the same mini-batch size).
Avalanche's own benchmarks normalise MNIST and draw rotations in [-180, 180]; feeding it our
stream keeps the comparison on the same data.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from mesabench_core import param
from mesabench_datasets.tasks import Problem
from methods.continual.baselines import StreamLearner, stream_network
from methods.registry import register_method

Strategy = Literal["naive", "gem", "agem", "mer", "ewc"]


@dataclass(frozen=True)
class AvalancheConfig:
    strategy: Strategy = param("naive", help="the avalanche strategy: naive, gem, agem, mer "
                               "or ewc")  # fmt: skip
    hidden: tuple[int, ...] = param((100, 100), min=1, help="hidden widths of the MLP")
    lr: float = param(0.03, min=0.0, help="SGD learning rate")
    patterns_per_task: int = param(256, min=1, help="GEM / A-GEM memory per task")
    memory_strength: float = param(0.5, min=0.0, help="GEM: margin of the gradient projection")
    agem_sample_size: int = param(256, min=1, help="A-GEM: memory samples per reference gradient")
    mer_buffer: int = param(200, min=1, help="MER: reservoir buffer size")
    mer_steps: int = param(5, min=1, help="MER: inner steps per incoming batch (the MER "
                           "code's batches_per_example)")
    mer_replay: int = param(10, min=1, added="0.4", help="MER: buffer samples drawn into each "
                            "inner step (the MER code's replay_batch_size)")
    mer_beta: float = param(0.03, min=0.0, help="MER: within-batch Reptile rate")
    mer_gamma: float = param(1.0, min=0.0, help="MER: across-batch Reptile rate")
    ewc_lambda: float = param(100.0, min=0.0, help="EWC: penalty strength")
    train_batch: int = param(
        0, min=0, added="0.4", help="samples per avalanche training step (0: the stream's "
        "batch). The MER code runs GEM and MER one sample at a time (batch_size 1)")  # fmt: skip


def build_strategy(config: AvalancheConfig, model: nn.Module, batch_size: int, device):
    """The avalanche strategy named by ``config`` with a silent evaluator."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # avalanche's import-time deprecation notices
        from avalanche.training import AGEM, EWC, GEM, MER, Naive
        from avalanche.training.plugins import EvaluationPlugin

    common = {
        "model": model,
        "optimizer": torch.optim.SGD(model.parameters(), lr=config.lr),
        "criterion": nn.CrossEntropyLoss(),
        "train_mb_size": batch_size,
        "train_epochs": 1,
        "eval_mb_size": 1000,
        "device": device,
        "evaluator": EvaluationPlugin(loggers=[]),
    }
    if config.strategy == "gem":
        return GEM(
            patterns_per_exp=config.patterns_per_task,
            memory_strength=config.memory_strength,
            **common,
        )
    if config.strategy == "agem":
        return AGEM(
            patterns_per_exp=config.patterns_per_task,
            sample_size=config.agem_sample_size,
            **common,
        )
    if config.strategy == "mer":
        return MER(
            mem_size=config.mer_buffer,
            batch_size_mem=config.mer_replay,
            n_inner_steps=config.mer_steps,
            beta=config.mer_beta,
            gamma=config.mer_gamma,
            **common,
        )
    if config.strategy == "ewc":
        return EWC(ewc_lambda=config.ewc_lambda, **common)
    return Naive(**common)


def experience_of(x: Tensor, y: Tensor):
    """One avalanche training experience holding exactly these samples, in this order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from avalanche.benchmarks import tensors_benchmark

        scenario = tensors_benchmark(
            train_tensors=[(x, y)], test_tensors=[(x[:1], y[:1])], task_labels=[0]
        )
    return scenario.train_stream[0]


class AvalancheBaseline(StreamLearner):
    """Runs an avalanche strategy on the protocol's stream, one experience per task."""

    Config = AvalancheConfig

    def __init__(self, config: AvalancheConfig, problem: Problem, device: torch.device):
        super().__init__(config, problem, device)
        self.network = stream_network(problem, config.hidden, device)
        self.strategy = None  # built at the first boundary, when the batch size is known
        self._batches: list[tuple[Tensor, Tensor]] = []

    def begin_task(self, task: int) -> None:
        self._batches = []

    def observe(self, x: Tensor, y: Tensor) -> dict[str, float]:
        self._batches.append((x.detach(), y.detach()))  # kept on the device until the boundary
        return {}  # avalanche learns at the task boundary

    def end_task(self, task: int) -> None:
        x = torch.cat([b[0] for b in self._batches])
        y = torch.cat([b[1] for b in self._batches])
        if self.strategy is None:
            batch_size = self.config.train_batch or len(self._batches[0][0])
            self.strategy = build_strategy(self.config, self.network, batch_size, self.device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.strategy.train(experience_of(x, y), shuffle=False, num_workers=0)
        self.network.eval()
        self._batches = []

    def state_dict(self) -> dict[str, Any]:
        return {"network": self.network.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # The strategy's memories live inside avalanche's objects, which we do not persist.
        raise RuntimeError(
            f"{self.config.strategy} (avalanche) runs cannot be resumed; start a new run"
        )


for _name, _description in (
    ("gem", "GEM (Lopez-Paz & Ranzato 2017), avalanche's strategy on our stream"),
    ("agem", "A-GEM (Chaudhry et al. 2019), avalanche's strategy on our stream"),
    ("mer", "MER (Riemer et al. 2019), avalanche's strategy on our stream"),
    ("ewc", "EWC (Kirkpatrick et al. 2017), avalanche's strategy on our stream"),
):
    register_method(_name, AvalancheBaseline, _description, strategy=_name)
