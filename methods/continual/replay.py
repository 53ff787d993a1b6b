"""A reservoir-sampling replay buffer (Vitter's algorithm R), as in ER, MER and La-MAML."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from methods.common.device_guard import host_read


class ReservoirBuffer:
    """Keeps a uniform sample of everything offered to it, at most ``capacity`` items.

    Randomness comes from the buffer's own generator, so it is saved and restored with it.
    """

    def __init__(
        self, capacity: int, input_shape: tuple[int, ...], device: torch.device, seed: int
    ):
        self.capacity = capacity
        self.x = torch.zeros((capacity, *input_shape), device=device)
        self.y = torch.zeros(capacity, dtype=torch.long, device=device)
        self.size = 0
        self.seen = 0
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, x: Tensor, y: Tensor) -> None:
        """Offer each sample of a batch in turn."""
        for xi, yi in zip(x, y, strict=True):
            if self.size < self.capacity:
                slot = self.size
                self.size += 1
            else:
                draw = torch.randint(self.seen + 1, (1,), generator=self.generator, device="cpu")
                slot = int(host_read(draw))  # a host draw: no device to wait for
            self.seen += 1
            if slot < self.capacity:
                self.x[slot] = xi
                self.y[slot] = yi

    def sample(self, n: int) -> tuple[Tensor, Tensor]:
        """Up to ``n`` distinct stored samples (fewer while the buffer is smaller)."""
        # Drawn by the host generator (the same samples on every device), then copied over
        # without waiting for the device.
        index = torch.randperm(self.size, generator=self.generator, device="cpu")[:n]
        index = index.to(self.x.device, non_blocking=True)
        return self.x[index], self.y[index]

    def state_dict(self) -> dict[str, Any]:
        return {
            "x": self.x.clone(),
            "y": self.y.clone(),
            "size": self.size,
            "seen": self.seen,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x.copy_(state["x"])
        self.y.copy_(state["y"])
        self.size, self.seen = state["size"], state["seen"]
        self.generator.set_state(state["generator"])
