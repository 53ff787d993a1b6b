"""my_continual.py: online EWC (Kirkpatrick et al. 2017) with a small replay buffer."""

from dataclasses import dataclass

import torch

from benchmarks.plugin_api import ContinualMethod, ReservoirBuffer, build_network, param, task_loss


@dataclass(frozen=True)
class EWCConfig:
    lr: float = param(0.03, min=0.0, help="SGD step size")
    strength: float = param(100.0, min=0.0, help="weight of the quadratic anchor (lambda)")
    replay: int = param(10, min=0, help="replayed samples per batch (0: none)")
    buffer_size: int = param(200, min=0, help="reservoir capacity, in samples")
    hidden: tuple[int, ...] = param((100, 100), help="hidden widths of the MLP")


class OnlineEWC(ContinualMethod):
    """SGD with a quadratic pull toward the weights each past task ended with, each weight
    pulled by its mean squared gradient on that task (a diagonal Fisher estimate)."""

    api_version = 1
    Config = EWCConfig

    def __init__(self, config, problem, device):
        super().__init__(config, problem, device)
        self.network = build_network(problem.network, problem, config.hidden).to(device)
        self.optimizer = torch.optim.SGD(self.network.parameters(), lr=config.lr)
        self.buffer = ReservoirBuffer(config.buffer_size, problem.input_shape, device, seed=0)
        weights = dict(self.network.named_parameters())
        self.fisher = {n: torch.zeros_like(w) for n, w in weights.items()}
        self.anchor = {n: w.detach().clone() for n, w in weights.items()}
        self.squared = {n: torch.zeros_like(w) for n, w in weights.items()}  # this task's
        self.batches = 0

    def observe(self, x, y):
        self.network.train()
        inputs, labels = x, y
        if self.config.replay and len(self.buffer):
            replayed_x, replayed_y = self.buffer.sample(self.config.replay)
            inputs, labels = torch.cat([x, replayed_x]), torch.cat([y, replayed_y])
        weights = dict(self.network.named_parameters())
        loss = task_loss(self.network(inputs), labels, self.problem.loss)
        grads = torch.autograd.grad(loss, list(weights.values()), retain_graph=True)
        for name, grad in zip(weights, grads, strict=True):
            self.squared[name] += grad.detach().pow(2)
        self.batches += 1
        anchor = sum(
            (self.fisher[n] * (w - self.anchor[n]).pow(2)).sum() for n, w in weights.items()
        )
        self.optimizer.zero_grad()
        (loss + 0.5 * self.config.strength * anchor).backward()
        self.optimizer.step()
        self.buffer.add(x, y)  # only what arrived, not what was replayed
        return {"loss": loss.item()}

    def end_task(self, task):
        for name, weight in self.network.named_parameters():
            self.fisher[name] += self.squared[name] / max(self.batches, 1)
            self.anchor[name] = weight.detach().clone()
            self.squared[name].zero_()
        self.batches = 0

    def predict(self, x):
        self.network.eval()
        with torch.no_grad():
            return self.network(x)

    def state_dict(self):
        return {"network": self.network.state_dict(), "optimizer": self.optimizer.state_dict(),
                "buffer": self.buffer.state_dict(), "fisher": self.fisher, "anchor": self.anchor,
                "squared": self.squared, "batches": self.batches}

    def load_state_dict(self, state):
        self.network.load_state_dict(state["network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.buffer.load_state_dict(state["buffer"])
        self.fisher, self.anchor = state["fisher"], state["anchor"]
        self.squared, self.batches = state["squared"], state["batches"]
