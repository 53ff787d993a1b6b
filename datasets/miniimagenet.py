"""miniImageNet in the two formats researchers have on disk (64/16/20 classes x 600 images).

Both are looked for under ``<data root>/miniimagenet/``:

- learn2learn / torchmeta pickles ``mini-imagenet-cache-{train,validation,test}.pkl``, each
  ``{"image_data": uint8 [N, 84, 84, 3], "class_dict": {wnid: [indices]}}``;
- the Ravi & Larochelle split: ``{train,val,test}.csv`` (header ``filename,label``) and a
  flat ``images/`` folder; odd files are converted to RGB and resized to 84x84.

Images stay in memory as uint8 and are converted to float per sampled batch.
"""

from __future__ import annotations

import csv
import io
import pickle
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from mesabench_datasets.data_root import DataNotFoundError, DatasetFormatError, find_file
from mesabench_datasets.images import ImagePool, check_disjoint_splits, read_rgb

FOLDER = "miniimagenet"
SPLITS = ("train", "val", "test")
PICKLE_NAMES = {"train": "train", "val": "validation", "test": "test"}
SIZE = 84

Format = Literal["auto", "pickle", "csv"]


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists and numpy arrays only: a cache file cannot run code."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("collections", "OrderedDict"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dataset pickle")


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise DatasetFormatError(f"miniImageNet split must be one of {SPLITS} (got {split!r})")


def load_pickle_split(split: str, data_root: str | Path | None = None) -> ImagePool:
    _check_split(split)
    path = find_file(f"{FOLDER}/mini-imagenet-cache-{PICKLE_NAMES[split]}.pkl", data_root)
    try:
        with open(path, "rb") as handle:
            data = _ArrayUnpickler(handle).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
        raise DatasetFormatError(f"{path} is not a valid miniImageNet pickle: {err}") from None
    if not isinstance(data, dict) or not {"image_data", "class_dict"} <= set(data):
        raise DatasetFormatError(f"{path} must hold a dict with image_data and class_dict")
    images, class_dict = np.asarray(data["image_data"]), data["class_dict"]
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (SIZE, SIZE, 3):
        raise DatasetFormatError(
            f"{path}: image_data must be uint8 [N, 84, 84, 3], got {images.dtype} {images.shape}"
        )
    names = sorted(class_dict)
    groups = [list(map(int, class_dict[name])) for name in names]
    used = np.concatenate([np.asarray(g, dtype=np.int64) for g in groups]) if groups else []
    if len(used) and len(np.unique(used)) != len(used):
        raise DatasetFormatError(f"{path}: class_dict assigns an image to two classes")
    tensor = torch.from_numpy(images).permute(0, 3, 1, 2)  # a view: no copy of the data
    try:
        return ImagePool.from_groups(tensor, groups, names)
    except DatasetFormatError as err:
        raise DatasetFormatError(f"{path}: {err}") from None


def load_csv_split(split: str, data_root: str | Path | None = None) -> ImagePool:
    _check_split(split)
    table = find_file(f"{FOLDER}/{split}.csv", data_root)
    folder = table.parent / "images"
    rows = list(csv.reader(io.StringIO(table.read_text())))
    if not rows or [c.strip() for c in rows[0]] != ["filename", "label"]:
        raise DatasetFormatError(f"{table} must start with the header 'filename,label'")
    by_label: dict[str, list[int]] = {}
    files: list[Path] = []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != 2:
            raise DatasetFormatError(f"{table}, line {number}: expected filename,label")
        path = folder / row[0]
        if not path.exists():
            raise DatasetFormatError(f"{table}, line {number}: image {path} does not exist")
        by_label.setdefault(row[1], []).append(len(files))
        files.append(path)
    if not files:
        raise DatasetFormatError(f"{table} lists no images")
    images = np.stack([read_rgb(p, SIZE, p) for p in files])
    names = sorted(by_label)
    tensor = torch.from_numpy(images).permute(0, 3, 1, 2)
    return ImagePool.from_groups(tensor, [by_label[n] for n in names], names)


def load_miniimagenet(
    fmt: Format = "auto", data_root: str | Path | None = None
) -> dict[str, ImagePool]:
    """All three splits; ``auto`` takes the pickles if present, else the CSV form."""
    if fmt == "auto":
        try:
            find_file(f"{FOLDER}/mini-imagenet-cache-train.pkl", data_root)
            fmt = "pickle"
        except DataNotFoundError:
            fmt = "csv"
    loader = load_pickle_split if fmt == "pickle" else load_csv_split
    pools = {split: loader(split, data_root) for split in SPLITS}
    check_disjoint_splits(pools, "miniImageNet")
    return pools
