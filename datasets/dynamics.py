"""Autoregressive linear dynamics (mesa-layer paper, thesis ch. 3): s_1 ~ N(0, I),
s_{t+1} = W* s_t + noise with a random orthogonal W* per sequence (scaled by
``contraction`` below 1: converging dynamics).

A task is one sequence; support and query are both (s_1..s_{T-1}) -> (s_2..s_T), and the
problem is causal: the prediction of s_{t+1} may use s_1..s_t only. The loss is
0.5 ||s_{t+1} - f_t||^2 averaged over t.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mesabench_core import param
from mesabench_datasets.tasks import Problem, Split, TaskBatch


@dataclass(frozen=True)
class LinDynConfig:
    dim: int = param(10, min=1, help="state dimension D_s")
    length: int = param(50, min=2, help="sequence length T")
    noise: float = param(0.01, min=0.0, help="std of the transition noise")
    contraction: float = param(
        1.0, min=0.0, max=1.0, added="0.4",
        help="W* = contraction x a random orthogonal matrix: below 1 the dynamics converge "
        "(thesis sec. 3.5.1, footnote 1: they lead to other inference algorithms)",
    )

    def build(self) -> LinearDynamicsTasks:
        return LinearDynamicsTasks(self)


def random_orthogonal(n: int, d: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` Haar-random orthogonal ``d x d`` matrices (QR with the sign fix)."""
    g = torch.randn(n, d, d, generator=generator, device=generator.device)
    q, r = torch.linalg.qr(g)
    return q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)


class LinearDynamicsTasks:
    task_block = 100

    def __init__(self, config: LinDynConfig):
        self.config = config
        self.problem = Problem(
            input_shape=(config.dim,),
            output_dim=config.dim,
            loss="half_sse",
            network="sequence",
            causal=True,
        )

    def sample(self, num_tasks: int, generator: torch.Generator, split: Split = "train"):
        c = self.config
        w = random_orthogonal(num_tasks, c.dim, generator)
        if c.contraction != 1.0:  # the orthogonal default untouched, bit for bit
            w = c.contraction * w
        state = torch.randn(num_tasks, c.dim, 1, generator=generator, device=generator.device)
        noise = c.noise * torch.randn(
            num_tasks, c.length, c.dim, 1, generator=generator, device=generator.device
        )
        states = [state]
        for t in range(1, c.length):
            state = w @ state + noise[:, t]
            states.append(state)
        seq = torch.stack(states, dim=1)[..., 0]  # [n, T, D]
        inputs, targets = seq[:, :-1], seq[:, 1:]
        return TaskBatch(inputs, targets, inputs, targets)

    def prepare(self) -> None:
        """Synthetic: nothing to load."""

    def method_defaults(self) -> dict[str, object]:
        return {}
