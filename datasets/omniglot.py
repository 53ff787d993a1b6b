"""Omniglot as 28x28 arrays: the ``omniglot28.npz`` form, and its one-time conversion from
the official image folders (which torchvision downloads when online).

``omniglot28.npz``: ``images`` uint8 ``[1623, 20, 28, 28]``, ``alphabet`` and ``character``
names per class, ``background`` bool per class (964 background / 659 evaluation classes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mesabench_datasets.data_root import DatasetFormatError, cache_dir, find_file, read_npz
from mesabench_datasets.images import ImagePool

FILE = "omniglot28.npz"
KEYS = ("images", "alphabet", "character", "background")


def load_omniglot(data_root: str | Path | None = None) -> dict[str, np.ndarray]:
    """The arrays of ``omniglot28.npz`` from the data root, validated."""
    path = find_file(FILE, data_root)
    arrays = read_npz(path, KEYS)
    images = arrays["images"]
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[2:] != (28, 28):
        raise DatasetFormatError(
            f"{path}: images must be uint8 [classes, drawers, 28, 28], got {images.dtype} "
            f"{images.shape}"
        )
    for key in ("alphabet", "character", "background"):
        if arrays[key].shape != (images.shape[0],):
            raise DatasetFormatError(
                f"{path}: {key} has shape {arrays[key].shape}, expected ({images.shape[0]},)"
            )
    return arrays


def omniglot_pool(arrays: dict[str, np.ndarray]) -> ImagePool:
    """All characters as one pool (class = alphabet/character)."""
    classes, drawers = arrays["images"].shape[:2]
    images = torch.from_numpy(arrays["images"].reshape(classes * drawers, 1, 28, 28).copy())
    groups = [range(c * drawers, (c + 1) * drawers) for c in range(classes)]
    names = [f"{a}/{c}" for a, c in zip(arrays["alphabet"], arrays["character"], strict=True)]
    return ImagePool.from_groups(images, groups, names)


def omniglot_splits(
    arrays: dict[str, np.ndarray], split: str, val_classes: int, seed: int = 1
) -> dict[str, ImagePool]:
    """``background``: meta-train on background alphabets (less ``val_classes`` held out for
    validation), meta-test on the evaluation alphabets. ``maml``: 1200 random characters for
    meta-training (less ``val_classes``), the remaining 423 for meta-test (Finn et al.)."""
    pool = omniglot_pool(arrays)
    order = torch.randperm(pool.num_classes, generator=torch.Generator().manual_seed(seed))
    if split == "background":
        background = torch.as_tensor(arrays["background"])
        train_pool = order[background[order]]
        test = order[~background[order]].sort().values
    elif split == "maml":
        train_pool, test = order[:1200], order[1200:].sort().values
    else:
        raise DatasetFormatError(f"omniglot split must be background or maml (got {split!r})")
    val, train = train_pool[:val_classes].sort().values, train_pool[val_classes:].sort().values
    return {"train": pool.subset(train), "val": pool.subset(val), "test": pool.subset(test)}


def convert_image_folders(folders: list[Path], target: Path) -> Path:
    """Write ``omniglot28.npz`` from official Omniglot folders (``images_background``,
    ``images_evaluation``: ``<alphabet>/<characterNN>/<png>``), resized to 28x28 with
    Lanczos as in the MAML code."""
    from PIL import Image

    images, alphabets, characters, background = [], [], [], []
    for folder in folders:
        is_background = "background" in folder.name
        for alphabet in sorted(p for p in folder.iterdir() if p.is_dir()):
            for character in sorted(p for p in alphabet.iterdir() if p.is_dir()):
                files = sorted(character.glob("*.png"))
                if len(files) != 20:
                    raise DatasetFormatError(f"{character} has {len(files)} drawings, not 20")
                drawings = []
                for file in files:
                    try:
                        with Image.open(file) as img:
                            small = img.convert("L").resize((28, 28), Image.LANCZOS)
                    except OSError as err:
                        raise DatasetFormatError(f"cannot read image {file}: {err}") from None
                    drawings.append(np.asarray(small, dtype=np.uint8))
                images.append(np.stack(drawings))
                alphabets.append(alphabet.name)
                characters.append(character.name)
                background.append(is_background)
    if not images:
        raise DatasetFormatError(f"no Omniglot characters found under {folders}")
    target.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        target,
        images=np.stack(images),
        alphabet=np.array(alphabets),
        character=np.array(characters),
        background=np.array(background),
    )
    return target


def download_omniglot(root: Path | None = None) -> Path:
    """Download Omniglot with torchvision (network needed) and convert it once into the data
    cache as ``omniglot28.npz``."""
    from torchvision.datasets import Omniglot

    root = root or cache_dir()
    for background in (True, False):
        Omniglot(str(root / "torchvision"), background=background, download=True)
    base = root / "torchvision" / "omniglot-py"
    return convert_image_folders(
        [base / "images_background", base / "images_evaluation"], root / FILE
    )
