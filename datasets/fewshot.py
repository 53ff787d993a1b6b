"""Few-shot image classification episodes: Omniglot, miniImageNet, CIFAR-FS, FC100,
tiered-ImageNet, CUB, and cross-domain tests.

The task source loads its pools once (``prepare``), then samples N-way K-shot Q-query
episodes for the meta-train, meta-validation and meta-test class splits. ``test_dataset``
swaps the meta-test pool for another dataset with the same image shape (e.g. meta-train on
Omniglot, meta-test on MNIST as a few-shot problem).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import torch

from mesabench_core import ConfigError, param
from mesabench_datasets.data_root import active_data_root
from mesabench_datasets.images import ImagePool, sample_episodes
from mesabench_datasets.tasks import Problem, Split

IMAGE_SHAPES = {
    "omniglot": (1, 28, 28),
    "miniimagenet": (3, 84, 84),
    "cifarfs": (3, 32, 32),
    "fc100": (3, 32, 32),
    "tiered_imagenet": (3, 84, 84),
    "cub": (3, 84, 84),
    "mnist": (1, 28, 28),
    "fashion_mnist": (1, 28, 28),
}


@dataclass(frozen=True)
class FewShotConfig:
    dataset: Literal["omniglot", "miniimagenet", "cifarfs", "fc100", "tiered_imagenet", "cub"] = (
        "omniglot"
    )
    ways: int = param(5, min=2, help="classes per episode (N)")
    shots: int = param(1, min=1, help="support images per class (K)")
    queries: int = param(15, min=1, help="query images per class")
    omniglot_split: Literal["background", "maml"] = param(
        "background", help="background/evaluation alphabets, or the MAML 1200/423 split"
    )
    rotations: bool = param(False, help="Omniglot: 90-degree rotations as extra classes")
    val_classes: int = param(100, min=1, help="Omniglot: training classes held out for val")
    file_format: Literal["auto", "pickle", "csv"] = "auto"
    test_dataset: Literal[
        "same", "omniglot", "mnist", "fashion_mnist", "miniimagenet", "cifarfs", "fc100",
        "tiered_imagenet", "cub",
    ] = param(
        "same", help="meta-test on another dataset with the same image shape (cross-domain): "
        "its meta-test classes, or all of Omniglot / MNIST / Fashion-MNIST's test split",
    )  # fmt: skip

    def check(self) -> None:
        if self.test_dataset != "same":
            mine, theirs = IMAGE_SHAPES[self.dataset], IMAGE_SHAPES[self.test_dataset]
            if mine != theirs:
                raise ConfigError(
                    f"test_dataset {self.test_dataset} has {theirs} images but {self.dataset} "
                    f"has {mine}; allowed: same or a dataset with {mine} images"
                )

    def build(self) -> FewShotEpisodes:
        return FewShotEpisodes(self)


@functools.lru_cache(maxsize=4)
def _pools(config: FewShotConfig, data_root: str | None) -> dict[str, ImagePool]:
    if config.dataset == "omniglot":
        from mesabench_datasets.omniglot import load_omniglot, omniglot_splits

        pools = omniglot_splits(load_omniglot(data_root), config.omniglot_split, config.val_classes)
    elif config.dataset == "miniimagenet":
        from mesabench_datasets.miniimagenet import load_miniimagenet

        pools = load_miniimagenet(config.file_format, data_root)
    else:
        from mesabench_datasets.fewshot_sets import load_fewshot_set

        pools = load_fewshot_set(config.dataset, data_root)
    if config.test_dataset not in ("same", config.dataset):
        pools["test"] = dataset_pool(config.test_dataset, data_root, part="test")
    return pools


@functools.lru_cache(maxsize=8)
def dataset_pool(name: str, data_root: str | None, part: str = "test") -> ImagePool:
    """A dataset as one pool of classes for a cross-domain meta-test: every Omniglot
    character; the ten classes of MNIST / Fashion-MNIST's ``part`` (``train`` or ``test``)
    split; a few-shot set's meta-test classes (miniImageNet, CIFAR-FS, FC100,
    tiered-ImageNet, CUB: the split a cross-domain protocol tests on), from whichever of
    its supported formats is on disk."""
    if name == "miniimagenet":
        from mesabench_datasets.miniimagenet import load_miniimagenet

        return load_miniimagenet("auto", data_root)["test"]
    if name in ("cifarfs", "fc100", "tiered_imagenet", "cub"):
        from mesabench_datasets.fewshot_sets import load_fewshot_set

        return load_fewshot_set(name, data_root)["test"]
    if name == "omniglot":
        from mesabench_datasets.omniglot import load_omniglot, omniglot_pool

        return omniglot_pool(load_omniglot(data_root))
    from mesabench_datasets.mnist import class_pool, load_mnist_like

    arrays = load_mnist_like(name, data_root)
    return class_pool(arrays[f"x_{part}"], arrays[f"y_{part}"])


class FewShotEpisodes:
    """N-way K-shot episodes from class-disjoint train / val / test pools."""

    task_block = 10  # episodes drawn at once during evaluation (images are large)

    def __init__(self, config: FewShotConfig, pools: dict[str, ImagePool] | None = None):
        """``pools`` (train / val / test) replaces the dataset's own class splits."""
        self.config = config
        self._given = pools
        self.problem = Problem(
            input_shape=IMAGE_SHAPES[config.dataset],
            output_dim=config.ways,
            loss="cross_entropy",
            network="conv4",
        )
        self._loaded: dict[str, ImagePool] | None = None

    def prepare(self) -> None:
        """Load the data (once per process) and check that every split can serve episodes;
        raises DataNotFoundError / DatasetFormatError with what to do."""
        if self._loaded is not None:
            return
        pools = self._given or _pools(self.config, active_data_root())
        c = self.config
        for split, pool in pools.items():
            rotations = c.rotations and not (split == "test" and c.test_dataset != "same")
            pool.check_episode(
                c.ways,
                c.shots + c.queries,
                f"{c.dataset} {split} split",
                variants=4 if rotations else 1,
            )
        self._loaded = pools

    def sample(self, num_tasks: int, generator: torch.Generator, split: Split = "train"):
        self.prepare()
        c = self.config
        cross = split == "test" and c.test_dataset not in ("same", c.dataset)
        # The pools live on the CPU: draw the episode indices there, from a seed taken from
        # the caller's generator, then move the batch to where the generator lives.
        seed = torch.randint(2**62, (1,), generator=generator, device=generator.device)
        batch = sample_episodes(
            self._loaded[split],
            num_tasks,
            c.ways,
            c.shots,
            c.queries,
            torch.Generator().manual_seed(int(seed)),
            rotations=c.rotations and not cross,
        )
        return batch.to(generator.device)

    def method_defaults(self) -> dict[str, object]:
        return {}
