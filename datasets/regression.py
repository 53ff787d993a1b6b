"""Synthetic regression task families: sinusoids (MAML) and linear regression (ICL by GD)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from mesabench_core import ConfigError, param
from mesabench_datasets.tasks import Problem, Split, TaskBatch


def _uniform(low: float, high: float, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    return low + (high - low) * torch.rand(shape, generator=g, device=g.device)


@dataclass(frozen=True)
class SinusoidConfig:
    """y = A sin(x - phase), A ~ U[amplitude], phase ~ U[phase], x ~ U[input_range]."""

    shots: int = param(5, min=1, help="support points per task (K)")
    queries: int = param(10, min=1, help="query points per task")
    amplitude: tuple[float, float] = param((0.1, 5.0), min=0.0)
    phase: tuple[float, float] = (0.0, math.pi)
    input_range: tuple[float, float] = (-5.0, 5.0)

    def check(self) -> None:
        for name in ("amplitude", "phase", "input_range"):
            lo, hi = getattr(self, name)
            if lo > hi:
                raise ConfigError(f"{name} must be (low, high) with low <= high")

    def build(self) -> SinusoidTasks:
        return SinusoidTasks(self)


class SinusoidTasks:
    """The MAML sinusoid family; loss is the mean squared error."""

    task_block = 100

    def __init__(self, config: SinusoidConfig):
        self.config = config
        self.problem = Problem(
            input_shape=(1,), output_dim=1, loss="mse", network="mlp", context_size=config.shots
        )

    def sample(
        self, num_tasks: int, generator: torch.Generator, split: Split = "train"
    ) -> TaskBatch:
        c = self.config
        amp = _uniform(*c.amplitude, (num_tasks, 1, 1), generator)
        phase = _uniform(*c.phase, (num_tasks, 1, 1), generator)
        x = _uniform(*c.input_range, (num_tasks, c.shots + c.queries, 1), generator)
        y = amp * torch.sin(x - phase)
        return TaskBatch(x[:, : c.shots], y[:, : c.shots], x[:, c.shots :], y[:, c.shots :])

    def prepare(self) -> None:
        """Synthetic: nothing to load."""

    def method_defaults(self) -> dict[str, object]:
        return {}


@dataclass(frozen=True)
class LinRegConfig:
    """y = w.x with w ~ N(0, teacher_scale^2 I_d), x ~ U(-input_range, input_range)^d."""

    dim: int = param(10, min=1, help="input dimension d")
    shots: int = param(10, min=1, help="context (support) points N")
    queries: int = param(1, min=1, help="query points per task")
    input_range: float = param(1.0, min=0.0, help="r in U(-r, r); 1 in the paper, 0.5 in its code")
    teacher_scale: float = param(1.0, min=0.0)
    noise: float = param(0.0, min=0.0, help="std of Gaussian label noise")
    tokens: Literal["constructed", "interleaved"] = param(
        "constructed", help="token-based in-context learners get (x_i, y_i) or x_1, y_1, ..."
    )

    def build(self) -> LinRegTasks:
        return LinRegTasks(self)


class LinRegTasks:
    """In-context linear regression (von Oswald et al. 2023); loss is 0.5 * squared error."""

    task_block = 100

    def __init__(self, config: LinRegConfig):
        self.config = config
        self.problem = Problem(
            input_shape=(config.dim,),
            output_dim=1,
            loss="half_mse",
            network="linear",
            tokens=config.tokens,
            context_size=config.shots,
        )

    def sample(
        self, num_tasks: int, generator: torch.Generator, split: Split = "train"
    ) -> TaskBatch:
        c = self.config
        w = c.teacher_scale * torch.randn(
            (num_tasks, c.dim, 1), generator=generator, device=generator.device
        )
        x = _uniform(
            -c.input_range, c.input_range, (num_tasks, c.shots + c.queries, c.dim), generator
        )
        y = x @ w
        if c.noise > 0:
            y = y + c.noise * torch.randn(y.shape, generator=generator, device=y.device)
        return TaskBatch(x[:, : c.shots], y[:, : c.shots], x[:, c.shots :], y[:, c.shots :])

    def one_step_gd_optimum(self) -> tuple[float, float]:
        """Closed-form optimal rate and loss of one GD step from w = 0 (derived by us for
        uniform inputs: eta* = N / (s2 (N + d + k - 2)) with kurtosis k).

        Exact for noiseless tasks with i.i.d. uniform coordinates (kurtosis 1.8).
        """
        c = self.config
        s2 = c.input_range**2 / 3.0 * c.teacher_scale**2
        x_var = c.input_range**2 / 3.0
        kurtosis = 1.8
        n, d = c.shots, c.dim
        eta = n / (x_var * (n + d + kurtosis - 2))
        loss = 0.5 * d * s2 * (d + kurtosis - 2) / (n + d + kurtosis - 2)
        return eta, loss

    def prepare(self) -> None:
        """Synthetic: nothing to load."""

    def method_defaults(self) -> dict[str, object]:
        # Gradient learners start from the optimal one-step rate, so that MAML's inner step
        # is exactly the GD step the in-context literature compares against.
        return {"inner_lr": self.one_step_gd_optimum()[0]}
