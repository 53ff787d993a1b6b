"""Labelled image pools in memory and vectorised N-way K-shot episode sampling.

A pool keeps its images as uint8 ``[count, channels, height, width]`` plus, per class, the
indices of its images. Episodes are drawn for a whole batch of tasks at once (no Python loop
over tasks or classes) and converted to float in [0, 1] only when sampled.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from mesabench_datasets.data_root import DatasetFormatError
from mesabench_datasets.tasks import TaskBatch

__all__ = [
    "DatasetFormatError",
    "ImagePool",
    "check_disjoint_splits",
    "images_of_classes",
    "read_rgb",
    "sample_episodes",
]


def read_rgb(image, size: int, where: object) -> np.ndarray:
    """An image file (a path, or its encoded bytes: PNG, JPEG) as uint8 ``[size, size, 3]``."""
    from PIL import Image, UnidentifiedImageError

    try:
        opened = Image.open(io.BytesIO(image) if isinstance(image, bytes) else image)
        with opened as img:
            rgb = img.convert("RGB")
            if rgb.size != (size, size):
                rgb = rgb.resize((size, size), Image.BILINEAR)
            return np.asarray(rgb, dtype=np.uint8)
    except (OSError, UnidentifiedImageError) as err:
        raise DatasetFormatError(f"cannot read image {where}: {err}") from None


def check_disjoint_splits(pools: dict[str, ImagePool], dataset: str) -> None:
    """Refuse class splits that share a class (meta-test classes must be unseen)."""
    seen: dict[str, str] = {}
    for split, pool in pools.items():
        for name in pool.class_names:
            if name in seen:
                raise DatasetFormatError(
                    f"{dataset}: class {name!r} is in both the {seen[name]} and {split} splits"
                )
            seen[name] = split


@dataclass(frozen=True)
class ImagePool:
    """Images of several classes; ``class_index[c, :counts[c]]`` are class c's images."""

    images: Tensor  # uint8 [count, C, H, W]
    class_index: Tensor  # int64 [classes, max_per_class], padded with -1
    counts: Tensor  # int64 [classes]
    class_names: tuple[str, ...]

    @staticmethod
    def from_groups(
        images: np.ndarray | Tensor, groups: Sequence[Sequence[int]], names: Sequence[str]
    ) -> ImagePool:
        images = torch.as_tensor(images)
        if images.dtype != torch.uint8 or images.dim() != 4:
            raise DatasetFormatError(
                f"images must be uint8 [count, channels, height, width], got {images.dtype} "
                f"{tuple(images.shape)}"
            )
        if len(groups) != len(names):
            raise DatasetFormatError(f"{len(groups)} classes but {len(names)} class names")
        width = max((len(g) for g in groups), default=0)
        index = torch.full((len(groups), width), -1, dtype=torch.long)
        for c, group in enumerate(groups):
            ids = torch.as_tensor(list(group), dtype=torch.long)
            if ids.numel() and (ids.min() < 0 or ids.max() >= images.shape[0]):
                raise DatasetFormatError(
                    f"class {names[c]!r} refers to image {int(ids.max())}, but there are only "
                    f"{images.shape[0]} images"
                )
            index[c, : ids.numel()] = ids
        counts = (index >= 0).sum(dim=1)
        return ImagePool(images, index, counts, tuple(names))

    @property
    def num_classes(self) -> int:
        return self.class_index.shape[0]

    @property
    def image_shape(self) -> tuple[int, ...]:
        return tuple(self.images.shape[1:])

    def subset(self, classes: Sequence[int] | Tensor) -> ImagePool:
        classes = torch.as_tensor(classes, dtype=torch.long)
        names = tuple(self.class_names[int(c)] for c in classes)
        return ImagePool(self.images, self.class_index[classes], self.counts[classes], names)

    def check_episode(self, ways: int, per_class: int, what: str, variants: int = 1) -> None:
        """Raise unless ``ways``-way episodes with ``per_class`` images per class can be drawn
        (``variants`` counts each class several times, e.g. 4 rotations)."""
        classes = self.num_classes * variants
        if ways > classes:
            raise DatasetFormatError(
                f"{what}: {ways}-way episodes need {ways} classes, the split has {classes}"
            )
        smallest = int(self.counts.min())
        if per_class > smallest:
            raise DatasetFormatError(
                f"{what}: episodes need {per_class} images per class (shots + queries), the "
                f"smallest class has {smallest}"
            )


def sample_episodes(
    pool: ImagePool,
    num_tasks: int,
    ways: int,
    shots: int,
    queries: int,
    generator: torch.Generator,
    rotations: bool = False,
) -> TaskBatch:
    """``num_tasks`` N-way K-shot episodes, labels relabelled 0..N-1 in every task.

    With ``rotations`` every class comes in four versions rotated by multiples of 90
    degrees, each a class of its own (the MAML Omniglot augmentation).
    """
    per_class = shots + queries
    variants = 4 if rotations else 1
    # Classes without replacement: the first `ways` of a random permutation per task.
    keys = torch.rand(num_tasks, pool.num_classes * variants, generator=generator)
    chosen = keys.argsort(dim=1)[:, :ways]  # [T, N]
    classes, turns = chosen // variants, chosen % variants
    x = images_of_classes(pool, classes, per_class, generator)  # uint8 [T, N, K+Q, C, H, W]
    if rotations:
        x = _rotate(x, turns)
    x = x.to(torch.float32).div_(255.0)
    labels = torch.arange(ways).view(1, ways, 1).expand(num_tasks, ways, per_class)

    def split(t: Tensor, part: slice) -> Tensor:
        return t[:, :, part].flatten(1, 2)

    support, query = slice(0, shots), slice(shots, per_class)
    return TaskBatch(
        split(x, support), split(labels, support), split(x, query), split(labels, query)
    )


def images_of_classes(
    pool: ImagePool, classes: Tensor, per_class: int, generator: torch.Generator
) -> Tensor:
    """uint8 ``[*classes.shape, per_class, C, H, W]``: ``per_class`` distinct random images
    of each class in ``classes``."""
    index = pool.class_index[classes]  # [..., M]
    # Images without replacement within each class; padding sorts last.
    keys = torch.rand(index.shape, generator=generator).masked_fill(index < 0, 2.0)
    picks = keys.argsort(dim=-1)[..., :per_class]
    return pool.images[torch.gather(index, -1, picks)]


def _rotate(x: Tensor, turns: Tensor) -> Tensor:
    out = x.clone()
    for k in (1, 2, 3):
        mask = turns == k
        if mask.any():
            out[mask] = torch.rot90(x[mask], k, dims=(-2, -1))
    return out
