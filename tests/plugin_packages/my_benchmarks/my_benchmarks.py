"""my_benchmarks.py: quadratic regression, y = a x^2 + b x + c with random a, b, c."""

from dataclasses import dataclass

import torch

from benchmarks.plugin_api import (
    BenchmarkSpec,
    EpisodicConfig,
    Problem,
    ReferenceRow,
    TaskBatch,
    param,
)


@dataclass(frozen=True)
class QuadraticConfig:
    shots: int = param(5, min=1, help="support points per task")
    queries: int = param(10, min=1, help="query points per task")
    scale: float = param(1.0, min=0.0, help="a, b, c ~ U(-scale, scale)")

    def build(self):
        return QuadraticTasks(self)


class QuadraticTasks:
    task_block = 1000

    def __init__(self, config):
        self.config = config
        self.problem = Problem(input_shape=(1,), output_dim=1, loss="mse", network="mlp")

    def sample(self, num_tasks, generator, split="train"):
        c, device = self.config, generator.device
        coefficients = (
            torch.rand(num_tasks, 3, 1, 1, generator=generator, device=device) * 2 - 1
        ) * c.scale
        x = (
            torch.rand(num_tasks, c.shots + c.queries, 1, generator=generator, device=device) * 4
            - 2
        )
        y = coefficients[:, 0] * x**2 + coefficients[:, 1] * x + coefficients[:, 2]
        return TaskBatch(x[:, : c.shots], y[:, : c.shots], x[:, c.shots :], y[:, c.shots :])

    def prepare(self):
        """Synthetic: nothing to load."""

    def method_defaults(self):
        return {}


QUADRATIC = BenchmarkSpec(
    name="quadratic-5shot",
    description="quadratic regression, 5-shot support, 10 queries, MSE",
    task=QuadraticConfig(),
    protocol=EpisodicConfig(
        iterations=2000,
        meta_batch=25,
        val_every=500,
        val_tasks=100,
        test_tasks=500,
        eval_steps=(1, 5),
        checkpoint_every=200,
    ),
    method_defaults={"inner_lr": 0.01},
    presets={"quick": {"iterations": "200"}},
    reference="an example from docs/writing-a-benchmark.md",
    references=(
        # Predicting 0 everywhere: E[y^2] = E[a^2] E[x^4] + E[b^2] E[x^2] + E[c^2]
        # = (1/3)(16/5) + (1/3)(4/3) + 1/3 for a, b, c ~ U(-1, 1) and x ~ U(-2, 2).
        ReferenceRow(
            method="predict zero",
            source="closed form",
            metrics={"final/test_loss": 16 / 15 + 4 / 9 + 1 / 3},
            settings={"task.scale": 1.0},
            kind="derived",
        ),
    ),
    api_version=1,  # the plugin API this file was written for (benchmarks.plugin_api)
)
