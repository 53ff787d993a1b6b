"""learn2learn's own MAML on our protocol: the reference implementation, ranked beside ours.

``l2l_maml`` runs ``learn2learn.algorithms.MAML`` as its users write it (``clone()`` the
meta-learner for each task, ``adapt()`` it on the support loss, score the query), on the
same networks, initial weights, task batches and outer optimiser as our ``maml``. Ours
vectorises the same computation over tasks with ``torch.func``; the two agree to rounding
(``tests/test_learn2learn_peer.py``), so the leaderboard can show the reference beside ours
on identical tasks.

learn2learn is an optional install (``bash bench/install_learn2learn.sh``); without it the
method is refused before anything is recorded, with that hint.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from mesabench_core import ConfigError, param
from mesabench_datasets.tasks import Problem, TaskBatch
from methods.api import SHARED_SETTINGS, EpisodicMethod
from methods.common.losses import task_loss
from methods.common.networks import build_network, check_network_setting, network_for
from methods.gradient.maml import refuse_unread_widths, refuse_unused_test_steps
from methods.registry import register_method

INSTALL_HINT = "bash bench/install_learn2learn.sh (an optional install, see the README)"


def learn2learn_installed() -> bool:
    return importlib.util.find_spec("learn2learn") is not None


def import_learn2learn():
    """``import learn2learn``, keeping the terminal ours: its import pulls in gym, which
    prints a deprecation notice to stderr."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        import learn2learn
    return learn2learn


@dataclass(frozen=True)
class L2LMAMLConfig:
    """The settings of our ``maml`` that learn2learn's MAML has, with the same defaults."""

    network: Literal["default", "mlp", "linear", "conv4"] = param(
        "default", help="the network: default (the benchmark's), mlp, linear or conv4")
    hidden: tuple[int, ...] = param((40, 40), min=1, help="hidden widths of the MLP")
    channels: int = param(64, min=1, help="channels of each Conv-4 block")
    inner_lr: float = param(0.01, min=0.0, help="step size of an inner step")
    inner_steps: int = param(1, min=0, help="inner steps during meta-training")
    test_inner_steps: int = param(10, min=0, help="inner steps when predict() is not told")
    first_order: bool = param(False, help="first-order meta-gradient (FOMAML)")
    outer_lr: float = param(1e-3, min=0.0, help="Adam lr of the outer (meta) update")


class LearnToLearnMAML(EpisodicMethod):
    """learn2learn's MAML (clone/adapt per task) with our networks and outer Adam step."""

    Config = L2LMAMLConfig
    protocols = frozenset({"episodic"})
    uses_inner_steps = True
    shared_settings = frozenset(SHARED_SETTINGS)

    @classmethod
    def check_problem(cls, problem: Problem) -> None:
        if not learn2learn_installed():
            raise ConfigError(f"l2l_maml needs learn2learn: {INSTALL_HINT}")
        if problem.causal:
            raise ConfigError("l2l_maml adapts on a support set; causal sequences have none")

    @classmethod
    def check_config(cls, config: L2LMAMLConfig, problem: Problem) -> None:
        check_network_setting(config.network, problem)

    @classmethod
    def check_run(cls, config: L2LMAMLConfig, problem: Problem, protocol: Any,
                  chosen: frozenset[str]) -> None:  # fmt: skip
        refuse_unused_test_steps(protocol, chosen)
        refuse_unread_widths(config, problem, chosen)

    def __init__(self, config: L2LMAMLConfig, problem: Problem, device: torch.device):
        super().__init__(config, problem, device)
        l2l = import_learn2learn()

        name = network_for(config.network, problem)
        # Built exactly as our maml builds it (same seed: same initial weights); a per-task
        # loop can use the fused batch norm.
        network = build_network(name, problem, config.hidden, config.channels, vmapped=False)
        self.maml = l2l.algorithms.MAML(
            network.to(device), lr=config.inner_lr, first_order=config.first_order
        )
        self.optimizer = torch.optim.Adam(self.maml.parameters(), lr=config.outer_lr)

    def _adapted(self, support_x: Tensor, support_y: Tensor, steps: int):
        learner = self.maml.clone()
        for _ in range(steps):
            learner.adapt(task_loss(learner(support_x), support_y, self.problem.loss))
        return learner

    def meta_train_step(self, batch: TaskBatch) -> dict[str, float]:
        tasks, total = batch.support_x.shape[0], 0.0  # a sum on the device, read at the end
        self.optimizer.zero_grad(set_to_none=True)
        for sx, sy, qx, qy in zip(*batch, strict=True):
            learner = self._adapted(sx, sy, self.config.inner_steps)
            loss = task_loss(learner(qx), qy, self.problem.loss)
            (loss / tasks).backward()  # the mean over tasks, as ours
            total = total + loss.detach()
        self.optimizer.step()
        return {"loss": float(total) / tasks}

    def predict(self, support_x, support_y, query_x, steps=None) -> Tensor:
        steps = self.config.test_inner_steps if steps is None else steps
        out = []
        with torch.enable_grad():  # adapt() differentiates, whatever the caller's mode
            for sx, sy, qx in zip(support_x, support_y, query_x, strict=True):
                out.append(self._adapted(sx, sy, steps)(qx).detach())
        return torch.stack(out)

    def state_dict(self) -> dict[str, Any]:
        return {"network": self.maml.module.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.maml.module.load_state_dict(state["network"])
        self.optimizer.load_state_dict(state["optimizer"])


register_method(
    "l2l_maml",
    LearnToLearnMAML,
    "learn2learn's own MAML (clone/adapt per task) on our protocol, the reference beside "
    "maml; needs learn2learn (bash bench/install_learn2learn.sh)",
)
