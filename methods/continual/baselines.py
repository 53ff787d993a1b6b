"""Continual baselines without meta-learning: online SGD and experience replay (ER).

Both see each incoming batch once (per pass of the protocol) and take one SGD step; ER mixes
in samples from a reservoir buffer of everything seen so far.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mesabench_core import param
from mesabench_datasets.tasks import Problem
from methods.api import SHARED_SETTINGS, ContinualMethod
from methods.common.networks import build_network
from methods.continual.replay import ReservoirBuffer
from methods.registry import register_method


def stream_network(problem: Problem, hidden: tuple[int, ...], device: torch.device) -> nn.Module:
    """The continual benchmarks' ReLU MLP, Kaiming-normal weights and zero biases as in the
    La-MAML code (so every learner on a stream starts from the same kind of network)."""
    network = build_network("mlp", problem, hidden)
    for module in network.modules():
        if isinstance(module, nn.Linear):
            nn.init.kaiming_normal_(module.weight)
            nn.init.zeros_(module.bias)
    return network.to(device)


def own_seed() -> int:
    """A seed for a learner's private generator, drawn from the run-seeded global RNG."""
    return int(torch.randint(2**31 - 1, (1,)))


class StreamLearner(ContinualMethod):
    """Shared parts of learners that own one network: prediction and parameter counts."""

    shared_settings = frozenset(SHARED_SETTINGS)

    network: nn.Module

    def predict(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            return self.network(x)

    def state_tensors(self) -> list[Tensor]:
        return list(self.network.parameters())


@dataclass(frozen=True)
class ReplaySGDConfig:
    hidden: tuple[int, ...] = param((100, 100), min=1, help="hidden widths of the MLP")
    lr: float = param(0.03, min=0.0, help="SGD learning rate")
    buffer_size: int = param(200, min=0, help="reservoir buffer size (0: no replay)")
    replay_batch: int = param(10, min=0, help="replayed samples mixed into each batch")
    step_batch: int = param(
        0, min=0, added="0.4", help="samples per SGD step: each incoming batch is split into "
        "steps of this many, in order (0: one step per incoming batch). The MER code runs its "
        "baselines one sample at a time, with rates for that")  # fmt: skip


class ReplaySGD(StreamLearner):
    """One SGD step per incoming batch, optionally mixed with reservoir replay."""

    Config = ReplaySGDConfig

    def __init__(self, config: ReplaySGDConfig, problem: Problem, device: torch.device):
        super().__init__(config, problem, device)
        self.network = stream_network(problem, config.hidden, device)
        self.optimizer = torch.optim.SGD(self.network.parameters(), lr=config.lr)
        self.replay = ReservoirBuffer(config.buffer_size, problem.input_shape, device, own_seed())

    def observe(self, x: Tensor, y: Tensor) -> dict[str, float]:
        size = self.config.step_batch or len(x)
        losses = [self._step(x[i : i + size], y[i : i + size]) for i in range(0, len(x), size)]
        # One synchronisation per incoming batch, after all its steps were queued.
        return {"loss": torch.stack(losses).mean().item()}

    def _step(self, x: Tensor, y: Tensor) -> Tensor:
        c = self.config
        if c.replay_batch > 0 and len(self.replay) > 0:
            rx, ry = self.replay.sample(c.replay_batch)
            x_all, y_all = torch.cat([x, rx]), torch.cat([y, ry])
        else:
            x_all, y_all = x, y
        loss = F.cross_entropy(self.network(x_all), y_all)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if c.buffer_size > 0:
            self.replay.add(x, y)
        return loss.detach()

    def state_dict(self) -> dict[str, Any]:
        return {
            "network": self.network.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "replay": self.replay.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.network.load_state_dict(state["network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.replay.load_state_dict(state["replay"])


register_method(
    "online_sgd",
    ReplaySGD,
    "baseline: plain SGD on each incoming batch, one pass",
    buffer_size=0,
    replay_batch=0,
)
register_method(
    "er", ReplaySGD, "experience replay: SGD on each batch plus reservoir-buffer samples"
)
