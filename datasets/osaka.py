"""The OSAKA stream (Caccia et al. 2020; thesis section 4.4.2): Omniglot pre-training, then
a stream whose hidden task switches at random between Omniglot, MNIST and Fashion-MNIST.

Omniglot classes follow the order of ``omniglot28.npz``: the first ``pretrain_classes`` are
for meta-training, the next ``val_classes`` for meta-validation, and the rest (never seen
in pre-training) serve the stream's Omniglot tasks and the pre-training's meta-test. MNIST
and Fashion-MNIST tasks draw from their training images. Every source is scaled to [0, 1]
(the public code left MNIST and Fashion-MNIST at 0..255).

The stream depends only on its seed: the task sequence (switch points, sources, classes)
is drawn once from the seed, and the images of step ``t`` from a generator keyed by
(seed, t), so a resumed run sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from mesabench_core import ConfigError, param
from mesabench_datasets.data_root import active_data_root
from mesabench_datasets.fewshot import FewShotConfig, FewShotEpisodes, dataset_pool
from mesabench_datasets.images import ImagePool, images_of_classes
from mesabench_datasets.tasks import Problem, seeded_generator

SOURCES = ("omniglot", "mnist", "fashion_mnist")
_STREAM_KEY, _IMAGES_KEY = 61, 62  # generator keys of the task sequence and of the images


@dataclass(frozen=True)
class OsakaConfig:
    p: float = param(0.9, min=0.0, help="probability that the task stays the same at a step")
    steps: int = param(10_000, min=1, help="batches in the stream")
    ways: int = param(10, min=2, help="classes per task")
    shots: int = param(5, min=1, help="images per class in each batch (and in pre-training)")
    queries: int = param(15, min=1, help="query images per class in pre-training episodes")
    pretrain_classes: int = param(900, min=1, help="first Omniglot classes for meta-training")
    val_classes: int = param(100, min=1, help="next Omniglot classes for meta-validation")
    source_weights: tuple[float, ...] = param(
        (0.5, 0.25, 0.25), min=0.0, help="probability of omniglot, mnist, fashion_mnist per task"
    )

    def check(self) -> None:
        if self.p >= 1.0:
            raise ConfigError(f"p must be in [0, 1) (got {self.p})")
        if len(self.source_weights) != len(SOURCES) or sum(self.source_weights) <= 0:
            raise ConfigError(
                f"source_weights must be {len(SOURCES)} non-negative numbers with a positive "
                f"sum, one per source in {', '.join(SOURCES)} (got {self.source_weights})"
            )
        if self.ways > 10:
            raise ConfigError(f"ways must be <= 10: MNIST has 10 classes (got {self.ways})")

    def build(self) -> OsakaStream:
        return OsakaStream(self)


@dataclass(frozen=True)
class StreamBatch:
    """One step of the stream; ``source`` and ``switched`` are hidden from the learner."""

    x: Tensor  # float [ways * shots, 1, 28, 28] in [0, 1]
    y: Tensor  # int64 [ways * shots], labels 0..ways-1
    source: int  # index into SOURCES
    switched: bool  # a new task starts at this step


@dataclass(frozen=True)
class TaskSequence:
    """The hidden tasks of a stream: which task each step belongs to, and what it is."""

    task_of_step: Tensor  # int64 [steps]
    switched: Tensor  # bool [steps]; True at step 0 and wherever a new task starts
    source: Tensor  # int64 [tasks]: index into SOURCES
    classes: Tensor  # int64 [tasks, ways]: class ids within the source's pool; label = column


class OsakaStream:
    """Pre-training episodes and the online stream of one OSAKA benchmark."""

    #: What ``TaskSequence.source`` indexes, the names the protocol reports accuracy by.
    source_names = SOURCES

    def __init__(self, config: OsakaConfig):
        self.config = config
        self.problem = Problem(
            input_shape=(1, 28, 28), output_dim=config.ways, loss="cross_entropy", network="conv4"
        )
        self._pools: dict[str, ImagePool] | None = None
        self._pretraining: FewShotEpisodes | None = None

    # -- data ---------------------------------------------------------------------------
    def prepare(self) -> None:
        """Load Omniglot, MNIST and Fashion-MNIST (once per process) and check the split."""
        if self._pools is not None:
            return
        root = active_data_root()
        omniglot = dataset_pool("omniglot", root)
        c = self.config
        first_stream = c.pretrain_classes + c.val_classes
        if first_stream >= omniglot.num_classes:
            raise ConfigError(
                f"pretrain_classes + val_classes must leave Omniglot classes for the stream: "
                f"{first_stream} of {omniglot.num_classes} taken"
            )
        splits = {
            "train": omniglot.subset(range(c.pretrain_classes)),
            "val": omniglot.subset(range(c.pretrain_classes, first_stream)),
            "test": omniglot.subset(range(first_stream, omniglot.num_classes)),
        }
        episodes = FewShotConfig(dataset="omniglot", ways=c.ways, shots=c.shots, queries=c.queries)
        self._pretraining = FewShotEpisodes(episodes, pools=splits)
        self._pretraining.prepare()  # checks that every split can serve episodes
        self._pools = {
            "omniglot": splits["test"],
            "mnist": dataset_pool("mnist", root, part="train"),
            "fashion_mnist": dataset_pool("fashion_mnist", root, part="train"),
        }
        for name, pool in self._pools.items():
            pool.check_episode(c.ways, c.shots, f"{name} stream pool")

    def pretraining(self) -> FewShotEpisodes:
        """Episodes over the Omniglot pre-training classes (an ordinary episodic task
        source); the test split is the unseen Omniglot classes the stream draws from."""
        self.prepare()
        return self._pretraining

    # -- the stream ---------------------------------------------------------------------
    def tasks(self, seed: int) -> TaskSequence:
        """The hidden task sequence of the stream with ``seed``."""
        self.prepare()
        c = self.config
        g = seeded_generator(_STREAM_KEY, seed)
        switched = torch.rand(c.steps, generator=g) >= c.p
        switched[0] = True
        task_of_step = switched.long().cumsum(0) - 1
        count = int(task_of_step[-1]) + 1
        weights = torch.tensor(c.source_weights, dtype=torch.float64)
        source = torch.multinomial(weights, count, replacement=True, generator=g)
        classes = torch.empty(count, c.ways, dtype=torch.long)
        for task in range(count):
            pool = self._pools[SOURCES[int(source[task])]]
            classes[task] = torch.randperm(pool.num_classes, generator=g)[: c.ways]
        return TaskSequence(task_of_step, switched, source, classes)

    def batch(self, tasks: TaskSequence, seed: int, step: int) -> StreamBatch:
        """The labelled batch of ``step``: ``shots`` fresh images of each class of the task."""
        task = int(tasks.task_of_step[step])
        source = int(tasks.source[task])
        pool = self._pools[SOURCES[source]]
        g = seeded_generator(_IMAGES_KEY, seed, step)
        images = images_of_classes(pool, tasks.classes[task], self.config.shots, g)
        y = torch.arange(self.config.ways).repeat_interleave(self.config.shots)
        # Shuffled, so that a position in the batch says nothing about its label.
        order = torch.randperm(len(y), generator=g)
        x = images.flatten(0, 1)[order].to(torch.float32).div_(255.0)
        return StreamBatch(x, y[order], source, bool(tasks.switched[step]))

    def method_defaults(self) -> dict[str, Any]:
        return {}


__all__ = [
    "SOURCES",
    "OsakaConfig",
    "OsakaStream",
    "StreamBatch",
    "TaskSequence",
]
