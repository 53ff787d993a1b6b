"""my_methods.py: Reptile (Nichol et al. 2018), first-order meta-learning by interpolation."""

from dataclasses import dataclass

import torch

from benchmarks.plugin_api import (
    EpisodicMethod,
    FixedRate,
    InnerLoop,
    build_network,
    param,
    per_task_loss,
)


@dataclass(frozen=True)
class ReptileConfig:
    inner_lr: float = param(0.02, min=0.0, help="step size of the inner loop")
    inner_steps: int = param(5, min=1, help="inner steps per task in meta-training")
    test_inner_steps: int = param(10, min=1, help="inner steps per task at meta-test")
    outer_lr: float = param(1.0, min=0.0, help="interpolation rate, annealed linearly to 0")
    hidden: tuple[int, ...] = param((40, 40), help="hidden widths of the MLP")


class Reptile(EpisodicMethod):
    """Reptile: move the initialisation toward each task's adapted weights."""

    api_version = 1  # the plugin API this file was written for (benchmarks.plugin_api)
    Config = ReptileConfig
    protocols = frozenset({"episodic"})
    uses_inner_steps = True

    def __init__(self, config, problem, device):
        super().__init__(config, problem, device)
        self.network = build_network(problem.network, problem, config.hidden).to(device)
        names = [name for name, _ in self.network.named_parameters()]
        self.inner = InnerLoop(
            self.network, FixedRate(config.inner_lr), problem.loss, adapted=names, first_order=True
        )
        self.steps_taken = 0

    def _params(self):
        return dict(self.network.named_parameters()), dict(self.network.named_buffers())

    def meta_train_step(self, batch):
        params, buffers = self._params()
        steps = self.config.inner_steps
        # One call adapts every task of the batch: each tensor gains a leading task dimension.
        adapted = self.inner.batched_adapt(params, buffers, batch.support_x, batch.support_y, steps)
        rate = self.config.outer_lr * (1 - self.steps_taken / max(self.total_steps, 1))
        with torch.no_grad():
            for name, weight in params.items():
                weight += rate * (adapted[name].mean(dim=0) - weight)
            prediction = self.inner.batched_predict(
                params, buffers, batch.support_x, batch.support_y, batch.query_x, steps
            )
            loss = per_task_loss(prediction, batch.query_y, self.problem.loss).mean()
        self.steps_taken += 1
        return {"loss": loss.item(), "outer_lr": rate}

    def predict(self, support_x, support_y, query_x, steps=None):
        params, buffers = self._params()
        steps = self.config.test_inner_steps if steps is None else steps
        with torch.no_grad():
            return self.inner.batched_predict(params, buffers, support_x, support_y, query_x, steps)

    def state_dict(self):
        return {"network": self.network.state_dict(), "steps_taken": self.steps_taken}

    def load_state_dict(self, state):
        self.network.load_state_dict(state["network"])
        self.steps_taken = state["steps_taken"]
