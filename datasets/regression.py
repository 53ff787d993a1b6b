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

    def no_adaptation_loss(self) -> float:
        """The expected query loss of the best predictor that sees no support points (the
        prior's mean E[A] E_phase sin(x - phase)), derived by us: E_x[E[A^2] E_p sin^2(x - p)
        - E[A]^2 (E_p sin(x - p))^2], the phase averages in closed form, the input average
        by Gauss-Legendre quadrature (smooth integrands: exact to float64)."""
        import numpy as np  # only here: sampling tasks needs torch alone

        c = self.config
        (a, b), (p0, p1), (x0, x1) = c.amplitude, c.phase, c.input_range
        mean_a, mean_a2 = (a + b) / 2, (a * a + a * b + b * b) / 3
        nodes, weights = np.polynomial.legendre.leggauss(256)
        x = (x1 - x0) / 2 * nodes + (x1 + x0) / 2
        w = weights / 2  # the average over U[x0, x1]
        width = p1 - p0
        if width > 0:
            first = (np.cos(x - p1) - np.cos(x - p0)) / width
            second = 0.5 - (np.sin(2 * (x - p0)) - np.sin(2 * (x - p1))) / (4 * width)
        else:
            first, second = np.sin(x - p0), np.sin(x - p0) ** 2
        return float(np.sum(w * (mean_a2 * second - mean_a**2 * first**2)))

    def prepare(self) -> None:
        """Synthetic: nothing to load."""

    def method_defaults(self) -> dict[str, object]:
        return {}


#: Input distributions, each with the variance of U(-r, r) (r^2 / 3): the uniform of the
#: papers, and others to test on after training on it (von Oswald et al. 2023, App. A.2:
#: inputs from other distributions). Normal and Laplace are centred; the exponential is not
#: (its mean equals its standard deviation: a shift as well as other tails).
InputDist = Literal["uniform", "normal", "laplace", "exponential"]


@dataclass(frozen=True)
class LinRegConfig:
    """y = W x with W ~ N(0, teacher_scale^2 I) (``outputs`` x d), x ~ ``input_dist`` with the
    variance of U(-input_range, input_range)^d."""

    dim: int = param(10, min=1, help="input dimension d")
    shots: int = param(10, min=1, help="context (support) points N")
    queries: int = param(1, min=1, help="query points per task")
    input_range: float = param(1.0, min=0.0, help="r in U(-r, r); 1 in the paper, 0.5 in its code")
    teacher_scale: float = param(1.0, min=0.0)
    noise: float = param(0.0, min=0.0, help="std of Gaussian label noise")
    tokens: Literal["constructed", "interleaved"] = param(
        "constructed", help="token-based in-context learners get (x_i, y_i) or x_1, y_1, ..."
    )
    input_dist: InputDist = param(
        "uniform", added="0.2",
        help="input distribution, with U(-r, r)'s variance (tests out of distribution)",
    )
    outputs: int = param(
        1, min=1, added="0.2", help="target dimension (vector-valued regression: y = W x)"
    )
    task_pool: int = param(
        0, min=0, help="training teachers drawn from a fixed pool of this many (0: a fresh "
        "teacher every task); validation and test teachers are always fresh", added="0.2",
    )
    pool_seed: int = param(
        0, min=0, added="0.2", help="seed of the fixed pool of training teachers"
    )
    pool_inputs: bool = param(
        False, added="0.4", help="with task_pool: the pool's inputs (and noise) are fixed "
        "too, one fixed dataset of task_pool tasks (ICML'23 App. A.12); a draw of task_pool "
        "tasks is that whole batch, in order. Else each draw from the pool gets new inputs",
    )

    def check(self) -> None:
        if self.pool_inputs and not self.task_pool:
            raise ConfigError("pool_inputs fixes the inputs of the task pool: it needs "
                              "task_pool > 0")  # fmt: skip

    def build(self) -> LinRegTasks:
        return LinRegTasks(self)


def _inputs(config: LinRegConfig, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    r = config.input_range
    if config.input_dist == "uniform":
        return _uniform(-r, r, shape, g)
    std = r / math.sqrt(3.0)  # U(-r, r)'s
    if config.input_dist == "normal":
        return std * torch.randn(shape, generator=g, device=g.device)
    u = torch.rand(shape, generator=g, device=g.device).clamp_min(1e-12)
    if config.input_dist == "exponential":  # mean = std = 1 / rate
        return -std * torch.log(u)
    sign = torch.where(torch.rand(shape, generator=g, device=g.device) < 0.5, -1.0, 1.0)
    return sign * (std / math.sqrt(2.0)) * -torch.log(u)  # Laplace: variance 2 b^2


class LinRegTasks:
    """In-context linear regression (von Oswald et al. 2023); loss is 0.5 * squared error
    (summed over the outputs of a vector-valued target)."""

    task_block = 100

    def __init__(self, config: LinRegConfig):
        self.config = config
        self.problem = Problem(
            input_shape=(config.dim,),
            output_dim=config.outputs,
            loss="half_mse" if config.outputs == 1 else "half_sse",
            network="linear",
            tokens=config.tokens,
            context_size=config.shots,
        )
        self._pool: torch.Tensor | None = None
        #: With ``pool_inputs``: the fixed dataset by device, drawn on the CPU, copied once to
        #: any other (not at every step).
        self._pool_data: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def pool(self) -> torch.Tensor:
        """The fixed training teachers ``[task_pool, d, outputs]`` (drawn once, on the CPU)."""
        if self._pool is None:
            self._draw_pool()
        return self._pool

    def pool_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """With ``pool_inputs``: the fixed dataset's inputs ``[task_pool, N + queries, d]``
        and targets (noise included), drawn once on the CPU after the teachers, so that the
        teachers are those of the same pool without it."""
        return self._pool_data_on(torch.device("cpu"))

    def _pool_data_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = str(device)
        if key not in self._pool_data:
            if "cpu" not in self._pool_data:
                self._draw_pool()
            self._pool_data[key] = tuple(t.to(device) for t in self._pool_data["cpu"])
        return self._pool_data[key]

    def _draw_pool(self) -> None:
        c = self.config
        g = torch.Generator().manual_seed(c.pool_seed)
        self._pool = c.teacher_scale * torch.randn((c.task_pool, c.dim, c.outputs), generator=g)
        if c.pool_inputs:
            x = _inputs(c, (c.task_pool, c.shots + c.queries, c.dim), g)
            y = x @ self._pool
            if c.noise > 0:
                y = y + c.noise * torch.randn(y.shape, generator=g)
            self._pool_data["cpu"] = (x, y)

    def sample(
        self, num_tasks: int, generator: torch.Generator, split: Split = "train"
    ) -> TaskBatch:
        c = self.config
        if c.task_pool and split == "train":
            if c.pool_inputs and num_tasks == c.task_pool:  # the fixed batch itself
                pick = torch.arange(c.task_pool, device=generator.device)
            else:
                pick = torch.randint(c.task_pool, (num_tasks,), generator=generator,
                                     device=generator.device)  # fmt: skip
            if c.pool_inputs:
                x, y = (t[pick] for t in self._pool_data_on(generator.device))
                return TaskBatch(x[:, : c.shots], y[:, : c.shots], x[:, c.shots :],
                                 y[:, c.shots :])  # fmt: skip
            w = self.pool().to(generator.device)[pick]
        else:
            w = c.teacher_scale * torch.randn(
                (num_tasks, c.dim, c.outputs), generator=generator, device=generator.device
            )
        x = _inputs(c, (num_tasks, c.shots + c.queries, c.dim), generator)
        y = x @ w
        if c.noise > 0:
            y = y + c.noise * torch.randn(y.shape, generator=generator, device=y.device)
        return TaskBatch(x[:, : c.shots], y[:, : c.shots], x[:, c.shots :], y[:, c.shots :])

    def one_step_gd_optimum(self) -> tuple[float, float]:
        """Closed-form optimal rate and loss of one GD step from w = 0 (derived by us:
        eta* = N / (s2 (N + d + k - 2)) with the inputs' variance s2 and kurtosis k; uniform
        k = 1.8, normal 3, Laplace 6), per output.

        Exact for noiseless tasks with i.i.d. centred coordinates; for the exponential
        (not centred) it uses the raw second and fourth moments, an approximation.
        """
        c = self.config
        x_var = c.input_range**2 / 3.0
        kurtosis = {"uniform": 1.8, "normal": 3.0, "laplace": 6.0}.get(c.input_dist)
        if kurtosis is None:  # exponential: E x^2 = 2 s^2, E x^4 = 24 s^4
            x_var, kurtosis = 2 * x_var, 6.0
        s2 = x_var * c.teacher_scale**2
        n, d = c.shots, c.dim
        eta = n / (x_var * (n + d + kurtosis - 2))
        loss = 0.5 * c.outputs * d * s2 * (d + kurtosis - 2) / (n + d + kurtosis - 2)
        return eta, loss

    def no_adaptation_loss(self) -> float:
        """The expected query loss of the best predictor that sees no context: the teacher
        is centred, so it predicts 0 and pays 0.5 (d E[x^2] teacher_scale^2 + noise^2) per
        output (derived by us; E[x^2] is the raw second moment, 2 s^2 for the exponential)."""
        c = self.config
        second = c.input_range**2 / 3.0 * (2.0 if c.input_dist == "exponential" else 1.0)
        return 0.5 * c.outputs * (c.dim * second * c.teacher_scale**2 + c.noise**2)

    def prepare(self) -> None:
        """Synthetic: nothing to load."""

    def method_defaults(self) -> dict[str, object]:
        # Gradient learners start from the optimal one-step rate, so that MAML's inner step
        # is exactly the GD step the in-context literature compares against.
        return {"inner_lr": self.one_step_gd_optimum()[0]}
