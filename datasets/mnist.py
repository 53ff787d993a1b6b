"""MNIST and Fashion-MNIST in the widely used ``mnist.npz`` layout (``x_train`` uint8
``[60000, 28, 28]``, ``y_train``, ``x_test``, ``y_test``), and their torchvision download."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mesabench_datasets.data_root import DatasetFormatError, cache_dir, find_file, read_npz
from mesabench_datasets.images import ImagePool

FILES = {"mnist": "mnist.npz", "fashion_mnist": "fashion_mnist.npz"}
KEYS = ("x_train", "y_train", "x_test", "y_test")
#: Classes of MNIST and Fashion-MNIST.
CLASSES = 10


def load_mnist_like(name: str, data_root: str | Path | None = None) -> dict[str, np.ndarray]:
    if name not in FILES:
        raise DatasetFormatError(f"dataset must be one of {sorted(FILES)} (got {name!r})")
    path = find_file(FILES[name], data_root)
    arrays = read_npz(path, KEYS)
    for part in ("train", "test"):
        x, y = arrays[f"x_{part}"], arrays[f"y_{part}"]
        if x.dtype != np.uint8 or x.ndim != 3 or x.shape[1:] != (28, 28) or len(y) != len(x):
            raise DatasetFormatError(
                f"{path}: x_{part} must be uint8 [n, 28, 28] with as many labels, got "
                f"{x.dtype} {x.shape} and {len(y)} labels"
            )
        # Checked here, before any run is recorded: a label past the last class otherwise
        # fails deep inside a stream, as an IndexError of a run already started.
        wrong = None
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            wrong = f"{y.dtype} {y.shape}"
        elif len(y) and (y.min() < 0 or y.max() >= CLASSES):
            wrong = f"label {int(y.max() if y.max() >= CLASSES else y.min())}"
        if wrong is not None:
            raise DatasetFormatError(f"{path}: y_{part} must hold integer labels 0-"
                                     f"{CLASSES - 1} (one per image), got {wrong}")  # fmt: skip
    return arrays


def class_pool(x: np.ndarray, y: np.ndarray) -> ImagePool:
    """One class per label value: the few-shot view of a classification dataset."""
    images = torch.from_numpy(np.ascontiguousarray(x)).unsqueeze(1)
    labels = np.unique(y)
    groups = [np.flatnonzero(y == label) for label in labels]
    return ImagePool.from_groups(images, groups, [str(int(label)) for label in labels])


def download_mnist_like(name: str, root: Path | None = None, sources=None) -> Path:
    """Download with torchvision (network needed) and save the ``.npz`` layout in the cache.

    ``sources``: where the ``MNIST`` and ``FashionMNIST`` dataset classes come from
    (default ``torchvision.datasets``); tests hand in small offline fakes.
    """
    if name not in FILES:
        raise DatasetFormatError(f"dataset must be one of {sorted(FILES)} (got {name!r})")
    if sources is None:
        from torchvision import datasets as sources

    root = Path(root or cache_dir())
    root.mkdir(parents=True, exist_ok=True)
    cls = {"mnist": sources.MNIST, "fashion_mnist": sources.FashionMNIST}[name]
    train = cls(str(root / "torchvision"), train=True, download=True)
    test = cls(str(root / "torchvision"), train=False, download=True)
    target = root / FILES[name]
    np.savez_compressed(
        target,
        x_train=train.data.numpy(),
        y_train=train.targets.numpy().astype(np.uint8),
        x_test=test.data.numpy(),
        y_test=test.targets.numpy().astype(np.uint8),
    )
    return target
