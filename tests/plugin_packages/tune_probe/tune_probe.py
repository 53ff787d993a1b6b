"""tune_probe.py: a benchmark whose validation and test tasks disagree, for ``tune``'s tests.

Training and validation tasks are y = x, test tasks y = -x; the method predicts
``slope * x`` and learns nothing, so its validation loss prefers the largest slope and its
test loss the smallest. A tune that selected on test would pick the other end.
"""

from dataclasses import dataclass

import torch

from benchmarks.plugin_api import (
    BenchmarkSpec,
    EpisodicConfig,
    EpisodicMethod,
    FloatRange,
    Problem,
    TaskBatch,
    param,
)


@dataclass(frozen=True)
class ShiftConfig:
    shots: int = param(2, min=1)
    queries: int = param(4, min=1)

    def build(self):
        return ShiftTasks(self)


class ShiftTasks:
    task_block = 100

    def __init__(self, config):
        self.config = config
        self.problem = Problem(input_shape=(1,), output_dim=1, loss="mse", network="mlp")

    def sample(self, num_tasks, generator, split="train"):
        c = self.config
        x = torch.rand(num_tasks, c.shots + c.queries, 1, generator=generator,
                       device=generator.device) * 2 - 1  # fmt: skip
        y = -x if split == "test" else x
        return TaskBatch(x[:, : c.shots], y[:, : c.shots], x[:, c.shots :], y[:, c.shots :])

    def prepare(self):
        """Synthetic: nothing to load."""

    def method_defaults(self):
        return {}


SLOPE_SHIFT = BenchmarkSpec(
    name="slope-shift",
    description="y = x to train and validate on, y = -x to test on (tune's tests)",
    task=ShiftConfig(),
    protocol=EpisodicConfig(iterations=2, meta_batch=2, val_every=1, val_tasks=8,
                            test_tasks=8, eval_steps=(1,), checkpoint_every=1),  # fmt: skip
    api_version=1,
)


@dataclass(frozen=True)
class SlopeConfig:
    slope: float = param(0.0, help="the prediction's slope")


class SlopeA(EpisodicMethod):
    """Predicts slope * x; tuned on its slope."""

    api_version = 1
    Config = SlopeConfig
    protocols = frozenset({"episodic"})

    @classmethod
    def search_space(cls, config):
        return {"slope": FloatRange(-1.0, 1.0)}

    def meta_train_step(self, batch):
        return {"loss": float(((self.config.slope * batch.query_x - batch.query_y) ** 2).mean())}

    def predict(self, support_x, support_y, query_x, steps=None):
        return self.config.slope * query_x

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class SlopeB(SlopeA):
    """The same, a second method for equal budgets."""
