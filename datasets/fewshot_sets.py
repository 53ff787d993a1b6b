"""CIFAR-FS, FC100, tiered-ImageNet and CUB in the formats users already have on disk.

Each is looked for under the data root, in the first of these forms that exists:

- **plain image folders**, for every set: ``<name>/{train,val,test}/<class>/<image>``
  (``.png``, ``.jpg``, ``.jpeg``); the folders are the class split;
- **CIFAR-FS** as learn2learn keeps it: ``cifarfs/processed/{train,val,test}/<class>/``
  (image folders), or its download unpacked: ``cifarfs/cifar100/data/<class>/`` with the
  Bertinetto et al. split lists ``cifarfs/cifar100/splits/bertinetto/{train,val,test}.txt``;
- **FC100** as learn2learn keeps it: ``FC100_{train,val,test}.pickle``, each a dict with
  ``data`` (uint8 ``[N, 32, 32, 3]``) and ``labels`` (``[N]``);
- **tiered-ImageNet** as learn2learn keeps it: ``tiered-imagenet/{train,val,test}_images_png.pkl``
  (PNG-encoded images) and ``{train,val,test}_labels.pkl`` (a dict with
  ``label_specific``). All images are decoded into memory as uint8 (the full set takes
  about 16 GB);
- **CUB** as CUB-200-2011 unpacks (``CUB_200_2011/images/<NNN.Name>/*.jpg``, also under
  learn2learn's ``cubirds200/``), split 100/50/50 by Chen et al. (2019): of the 200 classes
  in order, even positions train, positions 1 mod 4 validate, 3 mod 4 test (torchmeta's
  split too);
- **torchmeta's HDF5 files** (needs ``h5py``): CIFAR-FS and FC100 from
  ``cifar100/data.hdf5`` (``<coarse>/<fine>`` uint8 ``[N, 32, 32, 3]``) with
  ``cifar100/{cifar-fs,fc100}/{split}_labels.json`` (``[[coarse, fine], ...]``);
  tiered-ImageNet and CUB from ``{tieredimagenet,cub}/{split}_data.hdf5`` (group
  ``datasets``, one dataset of encoded images per class) with ``{split}_labels.json``.

Images are converted to RGB and resized to the set's size (32 for CIFAR-FS and FC100, 84 for
tiered-ImageNet and CUB). Pickles are read with an unpickler that admits arrays, lists and
dicts only. The standard class splits: CIFAR-FS 64/16/20 (Bertinetto et al. 2019), FC100
60/20/20 superclass-disjoint (Oreshkin et al. 2018), tiered-ImageNet 351/97/160 (Ren et al.
2018), as the files hold them.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from mesabench_datasets.data_root import DatasetFormatError, data_roots, find_file
from mesabench_datasets.images import ImagePool, check_disjoint_splits, read_rgb
from mesabench_datasets.miniimagenet import _ArrayUnpickler

SPLITS = ("train", "val", "test")
#: Image side of each set; every set is RGB.
SIZES = {"cifarfs": 32, "fc100": 32, "tiered_imagenet": 84, "cub": 84}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg"}
#: torchmeta's folders: CIFAR-FS / FC100 label lists beside one ``cifar100/data.hdf5``; the
#: others one HDF5 file of encoded images per split.
TORCHMETA_CIFAR = {"cifarfs": "cifar-fs", "fc100": "fc100"}
TORCHMETA_FOLDER = {"tiered_imagenet": "tieredimagenet", "cub": "cub"}
#: Where CUB-200-2011's class folders are when unpacked as is, or by learn2learn.
CUB_IMAGES = ["CUB_200_2011/images", "cubirds200/CUB_200_2011/images"]


def _pool(images: list[np.ndarray], labels: list, where: object) -> ImagePool:
    if not images:
        raise DatasetFormatError(f"{where} holds no images")
    by_label: dict[str, list[int]] = {}
    for index, label in enumerate(labels):
        by_label.setdefault(str(label), []).append(index)
    names = sorted(by_label)
    tensor = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()
    return ImagePool.from_groups(tensor, [by_label[n] for n in names], names)


def _class_folders(root: Path, classes: list[str] | None, size: int) -> ImagePool:
    """A pool from ``root/<class>/<image>`` (the listed classes, else every folder)."""
    names = classes if classes is not None else sorted(p.name for p in root.iterdir() if p.is_dir())
    images, labels = [], []
    for name in names:
        folder = root / name
        if not folder.is_dir():
            raise DatasetFormatError(f"class folder {folder} does not exist")
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise DatasetFormatError(f"class folder {folder} holds no .png or .jpg images")
        images += [read_rgb(path, size, path) for path in files]
        labels += [name] * len(files)
    return _pool(images, labels, root)


def _folder(name: str, data_root) -> Path | None:
    """The first ``root / name`` folder (not recorded as a data file: images are many)."""
    return next((r / name for r in data_roots(data_root) if (r / name).is_dir()), None)


def _split_folders(base: Path, size: int) -> dict[str, ImagePool]:
    return {split: _class_folders(base / split, None, size) for split in SPLITS}


def _cifarfs_raw(base: Path, data_root, size: int) -> dict[str, ImagePool]:
    pools = {}
    for split in SPLITS:
        listing = find_file(f"cifarfs/cifar100/splits/bertinetto/{split}.txt", data_root)
        classes = [line.strip() for line in listing.read_text().splitlines() if line.strip()]
        pools[split] = _class_folders(base / "data", classes, size)
    return pools


class _Unpickler(_ArrayUnpickler):
    """miniImageNet's array-only unpickler, plus the byte strings of protocol-2 pickles."""

    ALLOWED = _ArrayUnpickler.ALLOWED | {("_codecs", "encode")}


def _unpickle(path: Path):
    try:
        with open(path, "rb") as handle:
            unpickler = _Unpickler(handle, encoding="latin1")  # Python 2 pickles too
            return unpickler.load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
        raise DatasetFormatError(f"{path} is not a valid dataset pickle: {err}") from None


def _fc100(data_root, size: int) -> dict[str, ImagePool]:
    pools = {}
    for split in SPLITS:
        path = find_file(f"FC100_{split}.pickle", data_root)
        archive = _unpickle(path)
        if not isinstance(archive, dict) or not {"data", "labels"} <= set(archive):
            raise DatasetFormatError(f"{path} must hold a dict with data and labels")
        data = np.asarray(archive["data"])
        if data.dtype != np.uint8 or data.ndim != 4 or data.shape[-1] != 3:
            raise DatasetFormatError(f"{path}: data must be uint8 [N, H, W, 3], got {data.shape}")
        if len(archive["labels"]) != len(data):
            raise DatasetFormatError(
                f"{path}: {len(data)} images but {len(archive['labels'])} labels"
            )
        images = [_rgb_array(image, size) for image in data]
        pools[split] = _pool(images, list(archive["labels"]), path)
    return pools


def _rgb_array(image: np.ndarray, size: int) -> np.ndarray:
    if image.shape[:2] == (size, size):
        return image
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((size, size), Image.BILINEAR))


def _tiered(data_root, size: int) -> dict[str, ImagePool]:
    pools = {}
    for split in SPLITS:
        images_path = find_file(f"tiered-imagenet/{split}_images_png.pkl", data_root)
        labels_path = find_file(f"tiered-imagenet/{split}_labels.pkl", data_root)
        encoded, labels = _unpickle(images_path), _unpickle(labels_path)
        if not isinstance(labels, dict) or "label_specific" not in labels:
            raise DatasetFormatError(f"{labels_path} must hold a dict with label_specific")
        specific = list(np.asarray(labels["label_specific"]).tolist())
        if len(specific) != len(encoded):
            raise DatasetFormatError(
                f"{images_path}: {len(encoded)} images but {len(specific)} labels"
            )
        images = [read_rgb(bytes(png), size, images_path) for png in encoded]
        pools[split] = _pool(images, specific, images_path)
    return pools


def _cub_images(images: Path, size: int) -> dict[str, ImagePool]:
    classes = sorted(p.name for p in images.iterdir() if p.is_dir())
    if len(classes) != 200:
        raise DatasetFormatError(f"{images} must hold CUB-200-2011's 200 class folders")
    split_of = {"train": (0, 2), "val": (1, 4), "test": (3, 4)}  # (remainder, modulus)
    return {
        split: _class_folders(images, [c for i, c in enumerate(classes) if i % m == r], size)
        for split, (r, m) in split_of.items()
    }


def _h5py():
    try:
        import h5py
    except ImportError:
        raise DatasetFormatError(
            "reading torchmeta's HDF5 files needs h5py: pip install h5py"
        ) from None
    return h5py


def _json_list(path: Path) -> list:
    import json

    try:
        listing = json.loads(path.read_text())
    except ValueError as err:
        raise DatasetFormatError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(listing, list) or not listing:
        raise DatasetFormatError(f"{path} must hold a non-empty list of class names")
    return listing


def _torchmeta_cifar(subfolder: str, data_root, size: int) -> dict[str, ImagePool]:
    h5py = _h5py()
    data_path = find_file("cifar100/data.hdf5", data_root)
    pools = {}
    with h5py.File(data_path, "r") as data:
        for split in SPLITS:
            listing = find_file(f"cifar100/{subfolder}/{split}_labels.json", data_root)
            images, labels = [], []
            for entry in _json_list(listing):
                key = "/".join(entry) if isinstance(entry, list) else str(entry)
                if key not in data:
                    raise DatasetFormatError(f"{data_path} has no class {key} ({listing})")
                array = np.asarray(data[key])
                if array.dtype != np.uint8 or array.ndim != 4 or array.shape[-1] != 3:
                    raise DatasetFormatError(f"{data_path}: {key} must be uint8 [N, H, W, 3]")
                images += [_rgb_array(image, size) for image in array]
                labels += [key.split("/")[-1]] * len(array)
            pools[split] = _pool(images, labels, data_path)
    return pools


def _torchmeta_encoded(folder: str, data_root, size: int) -> dict[str, ImagePool]:
    h5py = _h5py()
    pools = {}
    for split in SPLITS:
        data_path = find_file(f"{folder}/{split}_data.hdf5", data_root)
        listing = find_file(f"{folder}/{split}_labels.json", data_root)
        images, labels = [], []
        with h5py.File(data_path, "r") as data:
            group = data.get("datasets")
            for name in _json_list(listing):
                if group is None or str(name) not in group:
                    raise DatasetFormatError(f"{data_path} has no datasets/{name}")
                encoded = group[str(name)]
                images += [read_rgb(bytes(image), size, data_path) for image in encoded]
                labels += [str(name)] * len(encoded)
        pools[split] = _pool(images, labels, data_path)
    return pools


def _first_folder(names: list[str], data_root) -> Path | None:
    return next((f for f in (_folder(n, data_root) for n in names) if f is not None), None)


def _has(name: str, data_root) -> bool:
    return any((r / name).is_file() for r in data_roots(data_root))


def load_fewshot_set(name: str, data_root=None) -> dict[str, ImagePool]:
    """The train / val / test class pools of ``name`` (a key of :data:`SIZES`), from the
    first form on disk that exists (see the module's docstring)."""
    size = SIZES[name]
    plain = _folder(f"{name}/train", data_root)
    if plain is not None:
        pools = _split_folders(plain.parent, size)
    elif name == "cifarfs" and _folder("cifarfs/processed", data_root) is not None:
        pools = _split_folders(_folder("cifarfs/processed", data_root), size)
    elif name == "cifarfs" and _folder("cifarfs/cifar100/data", data_root) is not None:
        pools = _cifarfs_raw(_folder("cifarfs/cifar100", data_root), data_root, size)
    elif name in TORCHMETA_CIFAR and _has("cifar100/data.hdf5", data_root):
        pools = _torchmeta_cifar(TORCHMETA_CIFAR[name], data_root, size)
    elif name in TORCHMETA_FOLDER and _has(f"{TORCHMETA_FOLDER[name]}/train_data.hdf5", data_root):
        pools = _torchmeta_encoded(TORCHMETA_FOLDER[name], data_root, size)
    elif name == "cub" and _first_folder(CUB_IMAGES, data_root) is not None:
        pools = _cub_images(_first_folder(CUB_IMAGES, data_root), size)
    elif name == "fc100":
        pools = _fc100(data_root, size)
    elif name == "tiered_imagenet":
        pools = _tiered(data_root, size)
    else:
        find_file(f"{name}/train", data_root)  # raises DataNotFoundError naming the roots
        raise DatasetFormatError(f"{name}/train is not a folder")  # pragma: no cover
    check_disjoint_splits(pools, name)
    return pools
