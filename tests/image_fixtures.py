"""Small generated datasets in the real on-disk formats (Omniglot npz, MNIST npz,
miniImageNet pickles and CSV + images). Every image encodes its class in its pixels, so a
test can check that labels were never mixed up."""

from __future__ import annotations

import csv
import pickle
from pathlib import Path

import numpy as np

WNIDS = [f"n0{1532829 + 1000 * i}" for i in range(12)]  # realistic-looking WordNet ids
SPLIT_CLASSES = {"train": WNIDS[:6], "val": WNIDS[6:9], "test": WNIDS[9:12]}


def class_image(class_id: int, shape: tuple[int, ...], variant: int = 0) -> np.ndarray:
    """An image whose top-left pixel is the class id (mod 256: larger sets are for runs, not
    for reading ids back) and second pixel the variant."""
    rng = np.random.default_rng(1000 * class_id + variant)
    image = rng.integers(0, 256, size=shape, dtype=np.uint8)
    image.flat[0] = class_id % 256
    image.flat[1] = variant
    return image


def write_omniglot(root: Path, alphabets: int = 6, characters: int = 8) -> Path:
    """``omniglot28.npz`` with ``alphabets * characters`` classes, half of them background."""
    classes = alphabets * characters
    images = np.stack(
        [np.stack([class_image(c, (28, 28), d) for d in range(20)]) for c in range(classes)]
    )
    alphabet = np.array([f"Alphabet_{c // characters:02d}" for c in range(classes)])
    character = np.array([f"character{c % characters + 1:02d}" for c in range(classes)])
    background = np.array([c // characters < alphabets // 2 for c in range(classes)])
    root.mkdir(parents=True, exist_ok=True)
    np.savez(
        root / "omniglot28.npz",
        images=images,
        alphabet=alphabet,
        character=character,
        background=background,
    )
    return root / "omniglot28.npz"


def write_mnist(root: Path, name: str = "mnist", per_class: int = 30) -> Path:
    """A small ``mnist.npz``-layout file; class ids 200 + digit mark its images."""
    x, y = [], []
    for digit in range(10):
        for i in range(per_class):
            x.append(class_image(200 + digit, (28, 28), i))
            y.append(digit)
    x, y = np.stack(x), np.array(y, dtype=np.uint8)
    root.mkdir(parents=True, exist_ok=True)
    np.savez(root / f"{name}.npz", x_train=x, y_train=y, x_test=x, y_test=y)
    return root / f"{name}.npz"


def write_miniimagenet_pickles(root: Path, per_class: int = 20) -> Path:
    folder = root / "miniimagenet"
    folder.mkdir(parents=True, exist_ok=True)
    names = {"train": "train", "val": "validation", "test": "test"}
    for split, wnids in SPLIT_CLASSES.items():
        images, class_dict = [], {}
        for wnid in wnids:
            class_id = WNIDS.index(wnid)
            class_dict[wnid] = list(range(len(images), len(images) + per_class))
            images += [class_image(class_id, (84, 84, 3), i) for i in range(per_class)]
        with open(folder / f"mini-imagenet-cache-{names[split]}.pkl", "wb") as handle:
            pickle.dump({"image_data": np.stack(images), "class_dict": class_dict}, handle)
    return folder


def write_miniimagenet_csv(root: Path, per_class: int = 20) -> Path:
    """Ravi & Larochelle layout; some images are greyscale or of another size on purpose."""
    from PIL import Image

    folder = root / "miniimagenet"
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for split, wnids in SPLIT_CLASSES.items():
        with open(folder / f"{split}.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["filename", "label"])
            for wnid in wnids:
                class_id = WNIDS.index(wnid)
                for i in range(per_class):
                    name = f"{wnid}{i + 1:08d}.png"
                    pixels = class_image(class_id, (84, 84, 3), i)
                    if i == 0:  # an odd file: greyscale and 90x80, converted on load
                        img = Image.fromarray(pixels[..., 0]).resize((90, 80))
                    else:
                        img = Image.fromarray(pixels)
                    img.save(folder / "images" / name)
                    writer.writerow([name, wnid])
    return folder


def _png(pixels: np.ndarray) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _class_folders(folder: Path, classes: list[str], size: int, per_class: int) -> None:
    for name in classes:
        (folder / name).mkdir(parents=True, exist_ok=True)
        class_id = WNIDS.index(name) if name in WNIDS else 99
        for i in range(per_class):
            pixels = class_image(class_id, (size, size, 3), i)
            (folder / name / f"{i:04d}.png").write_bytes(_png(pixels))


def write_image_folders(root: Path, name: str, size: int, per_class: int = 20) -> Path:
    """Plain ``<name>/{train,val,test}/<class>/<image>.png`` folders."""
    for split, classes in SPLIT_CLASSES.items():
        _class_folders(root / name / split, classes, size, per_class)
    return root / name


def write_cifarfs_raw(root: Path, per_class: int = 20) -> Path:
    """CIFAR-FS as its download unpacks: ``cifar100/data/<class>/`` and Bertinetto split
    lists; one extra class in data/ that no split lists."""
    base = root / "cifarfs" / "cifar100"
    _class_folders(base / "data", [*WNIDS, "n09999999"], 32, per_class)
    (base / "splits" / "bertinetto").mkdir(parents=True)
    for split, classes in SPLIT_CLASSES.items():
        (base / "splits" / "bertinetto" / f"{split}.txt").write_text("\n".join(classes) + "\n")
    return base


def write_fc100_pickles(root: Path, per_class: int = 20) -> Path:
    """``FC100_{train,val,test}.pickle`` (data uint8 [N, 32, 32, 3], labels), protocol 2."""
    root.mkdir(parents=True, exist_ok=True)
    for split, classes in SPLIT_CLASSES.items():
        ids = [WNIDS.index(c) for c in classes for _ in range(per_class)]
        data = np.stack([class_image(c, (32, 32, 3), i % per_class) for i, c in enumerate(ids)])
        with open(root / f"FC100_{split}.pickle", "wb") as handle:
            pickle.dump({"data": data, "labels": ids}, handle, protocol=2)
    return root


def write_tiered_pickles(root: Path, per_class: int = 20) -> Path:
    """``tiered-imagenet/{split}_images_png.pkl`` (PNG bytes) and ``{split}_labels.pkl``."""
    folder = root / "tiered-imagenet"
    folder.mkdir(parents=True, exist_ok=True)
    for split, classes in SPLIT_CLASSES.items():
        ids = [WNIDS.index(c) for c in classes for _ in range(per_class)]
        pngs = [np.frombuffer(_png(class_image(c, (84, 84, 3), i % per_class)), dtype=np.uint8)
                for i, c in enumerate(ids)]  # fmt: skip
        with open(folder / f"{split}_images_png.pkl", "wb") as handle:
            pickle.dump(pngs, handle)
        with open(folder / f"{split}_labels.pkl", "wb") as handle:
            pickle.dump({"label_specific": np.asarray(ids), "label_general": np.zeros(len(ids))},
                        handle)  # fmt: skip
    return folder


def write_torchmeta_cifar(root: Path, subfolder: str, per_class: int = 20) -> Path:
    """torchmeta's ``cifar100/data.hdf5`` (``<coarse>/<fine>`` uint8 [N, 32, 32, 3]) with
    ``cifar100/<subfolder>/{split}_labels.json``; one class in the file that no split lists."""
    import json

    import h5py

    base = root / "cifar100"
    (base / subfolder).mkdir(parents=True, exist_ok=True)
    coarse = {name: f"coarse_{i // 3}" for i, name in enumerate([*WNIDS, "n09999999"])}
    with h5py.File(base / "data.hdf5", "w") as data:
        for name, group in coarse.items():
            class_id = WNIDS.index(name) if name in WNIDS else 99
            images = [class_image(class_id, (32, 32, 3), i) for i in range(per_class)]
            data.create_dataset(f"{group}/{name}", data=np.stack(images))
    for split, classes in SPLIT_CLASSES.items():
        labels = [[coarse[name], name] for name in classes]
        (base / subfolder / f"{split}_labels.json").write_text(json.dumps(labels))
    return base


def write_torchmeta_encoded(root: Path, folder: str, per_class: int = 20) -> Path:
    """torchmeta's ``<folder>/{split}_data.hdf5`` (group ``datasets``, one variable-length
    uint8 dataset of encoded images per class) with ``{split}_labels.json``."""
    import json

    import h5py

    base = root / folder
    base.mkdir(parents=True, exist_ok=True)
    for split, classes in SPLIT_CLASSES.items():
        with h5py.File(base / f"{split}_data.hdf5", "w") as data:
            group = data.create_group("datasets")
            for name in classes:
                encoded = group.create_dataset(
                    name, (per_class,), dtype=h5py.special_dtype(vlen=np.uint8)
                )
                for i in range(per_class):
                    pixels = class_image(WNIDS.index(name), (84, 84, 3), i)
                    encoded[i] = np.frombuffer(_png(pixels), dtype=np.uint8)
        (base / f"{split}_labels.json").write_text(json.dumps(classes))
    return base


def write_cub_images(root: Path, per_class: int = 2, size: int = 84) -> Path:
    """CUB-200-2011 as it unpacks: ``CUB_200_2011/images/<NNN.Name>/*.jpg`` (200 classes;
    PNG bytes under .jpg names keep the pixels exact, and the reader decodes by content)."""
    images = root / "CUB_200_2011" / "images"
    for c in range(200):
        folder = images / f"{c + 1:03d}.Bird_{c + 1}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            (folder / f"Bird_{c + 1}_{i:04d}.jpg").write_bytes(
                _png(class_image(c, (size,) * 2 + (3,), i))
            )
    return images
