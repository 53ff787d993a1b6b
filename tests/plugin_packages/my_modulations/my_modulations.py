"""A soft gradient gate: step = lr * sigmoid(m) * g, a smooth version of sparse-MAML's mask."""

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
