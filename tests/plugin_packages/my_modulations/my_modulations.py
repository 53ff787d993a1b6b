"""Two gradient modulations: a soft gate (step = lr * sigmoid(m) * g, a smooth version of
sparse-MAML's mask) and learned rates per inner step (a small cousin of MAML++'s LSLR)."""

import torch
from torch import nn

from benchmarks.plugin_api import GradientModulation, ModulationSettings


def key(name: str) -> str:
    return name.replace(".", "__")  # nn.ParameterDict keys cannot contain dots


class SoftGate(GradientModulation):
    """lr * sigmoid(m) per weight; m starts at mask_init (0: every rate at lr / 2)."""

    api_version = 1

    def __init__(self, shapes, lr: float, init: float):
        super().__init__()
        self.lr = lr
        self.names = list(shapes)
        self.gates = nn.ParameterDict(
            {key(n): nn.Parameter(torch.full(s, float(init))) for n, s in shapes.items()}
        )

    @classmethod
    def from_settings(cls, settings: ModulationSettings) -> "SoftGate":
        return cls(settings.shapes, settings.lr, settings.mask_init)

    def rate(self, name: str) -> torch.Tensor:
        return self.lr * torch.sigmoid(self.gates[key(name)])

    def sparsity(self) -> dict[str, float]:
        # Gated (almost) off: a rate below 5% of lr.
        return {n: (self.rate(n) < 0.05 * self.lr).float().mean().item() for n in self.names}


class StepRates(GradientModulation):
    """One learned rate per inner step, shared by every tensor: told the step's index."""

    api_version = 1
    step_aware = True  # rate() and step() get the inner step's index, from 0

    def __init__(self, lr: float, steps: int):
        super().__init__()
        self.log_rates = nn.Parameter(torch.full((max(1, steps),), float(lr)).log())

    @classmethod
    def from_settings(cls, settings: ModulationSettings) -> "StepRates":
        return cls(settings.lr, settings.steps)

    def rate(self, name: str, index: int = 0) -> torch.Tensor:
        # A step past the trained ones (a longer evaluation) takes the last step's rate.
        return self.log_rates[min(index, len(self.log_rates) - 1)].exp()
