"""Continual-learning task streams on MNIST: rotations and permutations (La-MAML / GEM).

Task ``t`` of a rotations stream shows MNIST rotated by an angle drawn in
``[width * t, width * (t + 1))`` degrees; task ``t`` of a permutations stream applies a fixed
pixel permutation (the first task is permuted too). Angles and permutations come from the
spec's ``transform_seed``, so they are part of the benchmark; which training images each task
gets, and their order, come from the run's seed. Inputs are 784-d in ``[0, 1]`` with no
normalisation; labels are the ten digits, one shared head, no task id.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from mesabench_core import ConfigError, param
from mesabench_datasets.data_root import active_data_root
from mesabench_datasets.tasks import Problem, seeded_generator

MNIST_TRAIN, MNIST_TEST = 60_000, 10_000


@dataclass(frozen=True)
class StreamConfig:
    transform: Literal["rotations", "permutations"] = "rotations"
    tasks: int = param(20, min=1, help="number of tasks in the stream")
    train_per_task: int = param(1000, min=1, max=MNIST_TRAIN, help="training samples per task")
    test_per_task: int = param(
        MNIST_TEST, min=1, max=MNIST_TEST, help="test samples per task (the full test set)"
    )
    angle_width: float = param(9.0, min=0.0, help="rotations: task t in [w*t, w*(t+1)) degrees")
    transform_seed: int = param(0, min=0, help="seed of the angles / permutations (the spec's)")

    def check(self) -> None:
        if self.transform == "rotations" and self.angle_width * self.tasks > 360:
            raise ConfigError(
                f"angle_width * tasks must be <= 360 degrees (got {self.angle_width * self.tasks})"
            )

    def angles(self) -> list[float]:
        """Rotation angle of each task in degrees (rotations streams only)."""
        u = torch.rand(self.tasks, generator=torch.Generator().manual_seed(self.transform_seed))
        return [self.angle_width * (t + float(u[t])) for t in range(self.tasks)]

    def permutations(self) -> Tensor:
        """``[tasks, 784]`` pixel permutations (permutations streams only)."""
        generator = torch.Generator().manual_seed(self.transform_seed)
        return torch.stack([torch.randperm(784, generator=generator) for _ in range(self.tasks)])

    def derived(self) -> dict[str, object]:
        """What the seed makes of the stream, for ``show``."""
        if self.transform == "rotations":
            return {"angles_deg": [round(a, 3) for a in self.angles()]}
        digest = hashlib.sha256(self.permutations().numpy().tobytes()).hexdigest()[:12]
        return {"permutations_sha256": digest}

    def build(self) -> TaskStream:
        return TaskStream(self)


@functools.lru_cache(maxsize=2)
def _mnist(data_root: str | None) -> dict[str, Tensor]:
    from mesabench_datasets.mnist import load_mnist_like

    arrays = load_mnist_like("mnist", data_root)
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}


class TaskStream:
    """The tasks of a stream: training samples per (task, seed), test sets per task."""

    def __init__(self, config: StreamConfig, arrays: dict[str, Tensor] | None = None):
        self.config = config
        self.num_tasks = config.tasks
        self.problem = Problem(
            input_shape=(784,), output_dim=10, loss="cross_entropy", network="mlp"
        )
        self._arrays = arrays  # tests pass small arrays; otherwise MNIST is loaded on demand
        self._angles = config.angles() if config.transform == "rotations" else None
        self._perms = config.permutations() if config.transform == "permutations" else None
        self._test_cache: dict[int | str, Tensor] = {}

    def prepare(self) -> None:
        """Load MNIST (raises DataNotFoundError / DatasetFormatError with what to do)."""
        if self._arrays is None:
            self._arrays = _mnist(active_data_root())
        c = self.config
        if c.train_per_task > len(self._arrays["x_train"]):
            raise ConfigError(
                f"train_per_task must be <= {len(self._arrays['x_train'])} (got {c.train_per_task})"
            )

    def _shown(self, task: int, images: Tensor) -> Tensor:
        """uint8 images ``[N, 28, 28]`` as task ``task`` shows them, still uint8 ``[N, 784]``."""
        if self._angles is not None:
            from torchvision.transforms.v2 import functional as F

            # Nearest-neighbour rotation about the centre, as PIL's default in the GEM code.
            images = F.rotate(images.unsqueeze(1), self._angles[task])
            return images.reshape(len(images), 784)
        return images.reshape(len(images), 784)[:, self._perms[task]]

    def transform(self, task: int, images: Tensor) -> Tensor:
        """uint8 images ``[N, 28, 28]`` as task ``task`` shows them: float ``[N, 784]``."""
        return self._shown(task, images).float() / 255.0

    def train_task(self, task: int, seed: int) -> tuple[Tensor, Tensor]:
        """The training samples of ``task`` for run ``seed``, in the order they arrive."""
        self.prepare()
        x, y = self._arrays["x_train"], self._arrays["y_train"]
        index = torch.randperm(len(x), generator=seeded_generator(seed, task))
        index = index[: self.config.train_per_task]
        return self.transform(task, x[index]), y[index].long()

    def test_task(self, task: int) -> tuple[Tensor, Tensor]:
        """The test set of ``task`` (the same for every run): ``transform`` of the first
        ``test_per_task`` test images, computed faster. Scaling is elementwise, so scaling
        once and permuting the float columns gives the same values as permuting and then
        scaling; the protocol asks for every task's test set after every task, and on a
        100-task stream the uint8 gather and conversion were most of a run's time."""
        self.prepare()
        n = self.config.test_per_task
        labels = self._arrays["y_test"][:n].long()
        if self._angles is None:  # one scaled copy, a column gather per task
            if "scaled" not in self._test_cache:
                images = self._arrays["x_test"][:n]
                images = images.reshape(len(images), 784)
                self._test_cache["scaled"] = images.float().div_(255.0)
            return self._test_cache["scaled"].index_select(1, self._perms[task]), labels
        # rotations are not a gather: keep each task's rotated test set, as uint8
        if task not in self._test_cache:
            self._test_cache[task] = self._shown(task, self._arrays["x_test"][:n])
        return self._test_cache[task].float().div_(255.0), labels

    def method_defaults(self) -> dict[str, object]:
        return {}
