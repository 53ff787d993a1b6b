"""Few-shot image data: loaders for every on-disk format, splits, episodes, clear errors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from mesabench_core import ConfigError
from mesabench_datasets.data_root import DataNotFoundError
from mesabench_datasets.fewshot import FewShotConfig
from mesabench_datasets.images import DatasetFormatError
from mesabench_datasets.miniimagenet import load_csv_split, load_miniimagenet, load_pickle_split
from mesabench_datasets.omniglot import load_omniglot, omniglot_splits
from mesabench_datasets.tasks import seeded_generator
from tests.image_fixtures import (
    SPLIT_CLASSES,
    WNIDS,
    write_cub_images,
    write_miniimagenet_csv,
    write_miniimagenet_pickles,
    write_mnist,
    write_omniglot,
)


def _class_ids(x: torch.Tensor) -> torch.Tensor:
    """Recover the class id each fixture image carries in its first pixel."""
    return (x.flatten(-3)[..., 0] * 255).round().long()


def _assert_labels_consistent(batch) -> None:
    for x, y in ((batch.support_x, batch.support_y), (batch.query_x, batch.query_y)):
        ids = _class_ids(x)
        for task in range(ids.shape[0]):
            mapping = {}
            for cls, label in zip(ids[task].tolist(), y[task].tolist(), strict=True):
                assert mapping.setdefault(label, cls) == cls, "a label mixes two classes"
            assert len(set(mapping.values())) == len(mapping), "two labels share a class"
    s_ids, q_ids = _class_ids(batch.support_x), _class_ids(batch.query_x)
    for task in range(s_ids.shape[0]):  # the same label means the same class in both sets
        s = dict(zip(batch.support_y[task].tolist(), s_ids[task].tolist(), strict=True))
        q = dict(zip(batch.query_y[task].tolist(), q_ids[task].tolist(), strict=True))
        assert s == q


def test_omniglot_splits_are_disjoint_and_follow_the_alphabets(data_root):
    write_omniglot(data_root)
    arrays = load_omniglot()
    pools = omniglot_splits(arrays, "background", val_classes=4)
    names = {k: set(p.class_names) for k, p in pools.items()}
    assert not (names["train"] & names["val"]) and not (names["train"] & names["test"])
    background = {
        f"{a}/{c}"
        for a, c, b in zip(
            arrays["alphabet"], arrays["character"], arrays["background"], strict=True
        )
        if b
    }
    assert names["train"] | names["val"] == background and len(names["val"]) == 4
    maml = omniglot_splits(arrays, "maml", val_classes=4)
    assert sum(p.num_classes for p in maml.values()) == 48  # fewer than 1200: all train


def test_episodes_are_vectorised_relabelled_and_seeded(data_root):
    write_omniglot(data_root)
    source = FewShotConfig(ways=5, shots=2, queries=3, val_classes=6).build()
    batch = source.sample(6, seeded_generator(1), "train")
    assert batch.support_x.shape == (6, 10, 1, 28, 28) and batch.query_x.shape == (6, 15, 1, 28, 28)
    assert batch.support_x.dtype == torch.float32 and 0 <= batch.support_x.min() <= 1
    assert torch.equal(batch.support_y[0], torch.arange(5).repeat_interleave(2))
    _assert_labels_consistent(batch)
    again = source.sample(6, seeded_generator(1), "train")
    assert torch.equal(batch.support_x, again.support_x)
    test = source.sample(6, seeded_generator(1), "test")
    train_ids = set(_class_ids(batch.support_x).flatten().tolist())
    assert not train_ids & set(_class_ids(test.support_x).flatten().tolist())


def test_rotations_are_classes_of_their_own(data_root):
    write_omniglot(data_root)
    source = FewShotConfig(ways=5, shots=1, queries=1, rotations=True, val_classes=6).build()
    batch = source.sample(40, seeded_generator(3), "train")
    arrays = load_omniglot()
    found = set()
    for task in range(40):
        for x in batch.support_x[task]:
            image = (x[0] * 255).round().to(torch.uint8)
            for k in range(4):  # which rotation of which drawing is this?
                original = torch.rot90(image, -k, dims=(0, 1))
                cls, drawer = int(original[0, 0]), int(original[0, 1])
                known = cls < len(arrays["images"]) and drawer < 20
                if known and torch.equal(original, torch.from_numpy(arrays["images"][cls, drawer])):
                    found.add(k)
                    break
            else:
                pytest.fail("an episode image is no rotation of a stored drawing")
    assert found == {0, 1, 2, 3}


@pytest.mark.parametrize("fmt", ["pickle", "csv"])
def test_miniimagenet_both_formats_load_the_same_classes(data_root, fmt):
    write = write_miniimagenet_pickles if fmt == "pickle" else write_miniimagenet_csv
    write(data_root)
    pools = load_miniimagenet(fmt)
    for split, wnids in SPLIT_CLASSES.items():
        assert pools[split].class_names == tuple(sorted(wnids))
        assert pools[split].image_shape == (3, 84, 84)
        assert pools[split].images.dtype == torch.uint8
    source = FewShotConfig(dataset="miniimagenet", ways=3, shots=1, queries=2).build()
    batch = source.sample(4, seeded_generator(0), "val")
    assert batch.support_x.shape == (4, 3, 3, 84, 84)
    if fmt == "pickle":  # lossless format: labels can be checked pixel-exactly
        _assert_labels_consistent(batch)
        ids = set(_class_ids(batch.query_x).flatten().tolist())
        assert ids <= {WNIDS.index(w) for w in SPLIT_CLASSES["val"]}


def test_miniimagenet_format_errors_are_clear(data_root):
    with pytest.raises(DataNotFoundError, match="mini-imagenet-cache-train.pkl"):
        load_pickle_split("train")
    folder = write_miniimagenet_pickles(data_root)
    with pytest.raises(DatasetFormatError, match="split must be one of"):
        load_pickle_split("training")
    path = folder / "mini-imagenet-cache-validation.pkl"
    with open(path, "rb") as handle:
        data = pickle.load(handle)
    data["class_dict"][WNIDS[6]] = [0, 1, 999]
    path.write_bytes(pickle.dumps(data))
    with pytest.raises(DatasetFormatError, match="refers to image 999"):
        load_pickle_split("val")
    path.write_bytes(b"\x80\x04not a pickle at all")
    with pytest.raises(DatasetFormatError, match="not a valid miniImageNet pickle"):
        load_pickle_split("val")
    path.write_bytes(pickle.dumps({"image_data": __import__("os").getcwd}))
    with pytest.raises(DatasetFormatError, match="refusing to load"):
        load_pickle_split("val")


def test_miniimagenet_csv_errors_are_clear(data_root):
    folder = write_miniimagenet_csv(data_root)
    first = sorted((folder / "images").glob("*.png"))[1]
    first.write_bytes(b"garbage")
    with pytest.raises(DatasetFormatError, match=f"cannot read image .*{first.name}"):
        load_csv_split("train")
    first.unlink()
    with pytest.raises(DatasetFormatError, match=f"image .*{first.name} does not exist"):
        load_csv_split("train")
    (folder / "val.csv").write_text("file,class\n")
    with pytest.raises(DatasetFormatError, match="header 'filename,label'"):
        load_csv_split("val")


def test_overlapping_splits_are_refused(data_root):
    folder = write_miniimagenet_pickles(data_root)
    with open(folder / "mini-imagenet-cache-test.pkl", "rb") as handle:
        data = pickle.load(handle)
    data["class_dict"][WNIDS[0]] = data["class_dict"].pop(WNIDS[9])
    (folder / "mini-imagenet-cache-test.pkl").write_bytes(pickle.dumps(data))
    with pytest.raises(DatasetFormatError, match=f"class '{WNIDS[0]}' is in both"):
        load_miniimagenet("pickle")


def test_omniglot_errors_are_clear(data_root):
    with pytest.raises(DataNotFoundError, match="omniglot28.npz"):
        load_omniglot()
    np.savez(data_root / "omniglot28.npz", images=np.zeros((2, 20, 28, 28), np.uint8))
    with pytest.raises(DatasetFormatError, match="lacks keys"):
        load_omniglot()
    (data_root / "omniglot28.npz").write_bytes(b"corrupt")
    with pytest.raises(DatasetFormatError, match="not a readable .npz"):
        load_omniglot()


def test_cross_domain_test_split_comes_from_the_other_dataset(data_root):
    write_omniglot(data_root)
    write_mnist(data_root)
    source = FewShotConfig(ways=5, shots=1, queries=2, test_dataset="mnist", val_classes=6).build()
    test = source.sample(5, seeded_generator(0), "test")
    assert set(_class_ids(test.support_x).flatten().tolist()) <= set(range(200, 210))
    _assert_labels_consistent(test)
    train = source.sample(5, seeded_generator(0), "train")
    assert set(_class_ids(train.support_x).flatten().tolist()) <= set(range(48))


def test_cross_domain_meta_test_on_cub_after_miniimagenet(data_root):
    """Thesis table 4.4's protocol: meta-train on miniImageNet (here its pickles), meta-test
    on CUB's meta-test classes (Chen et al.'s split: 004, 008, ..., class ids 3 mod 4)."""
    write_miniimagenet_pickles(data_root)
    write_cub_images(data_root, per_class=2)
    config = FewShotConfig(dataset="miniimagenet", ways=3, shots=1, queries=1,
                           test_dataset="cub")  # fmt: skip
    source = config.build()
    test = source.sample(20, seeded_generator(0), "test")
    ids = set(_class_ids(test.support_x).flatten().tolist())
    assert ids <= set(range(3, 200, 4)) and len(ids) > 15
    _assert_labels_consistent(test)
    train = source.sample(5, seeded_generator(0), "train")
    wnids = {WNIDS.index(w) for w in SPLIT_CLASSES["train"]}
    assert set(_class_ids(train.support_x).flatten().tolist()) <= wnids
    with pytest.raises(ConfigError, match="test_dataset mnist has \\(1, 28, 28\\) images"):
        FewShotConfig(dataset="miniimagenet", test_dataset="mnist").check()


def test_official_omniglot_folders_convert_once_to_the_array_form(tmp_path):
    from PIL import Image

    from mesabench_datasets.omniglot import convert_image_folders

    folders = []
    for part, alphabets in (
        ("images_background", ["Latin", "Greek"]),
        ("images_evaluation", ["Tengwar"]),
    ):
        folder = tmp_path / "omniglot-py" / part
        for alphabet in alphabets:
            for character in ("character01", "character02"):
                target = folder / alphabet / character
                target.mkdir(parents=True)
                for drawer in range(20):
                    pixels = np.full((105, 105), 255, np.uint8)
                    pixels[10:95, 50:55] = 0  # a vertical stroke
                    Image.fromarray(pixels).save(target / f"{drawer:04d}_{drawer:02d}.png")
        folders.append(folder)
    path = convert_image_folders(folders, tmp_path / "out" / "omniglot28.npz")
    with np.load(path) as data:
        assert data["images"].shape == (6, 20, 28, 28) and data["images"].dtype == np.uint8
        assert data["background"].tolist() == [True] * 4 + [False] * 2
        assert list(data["alphabet"][:2]) == ["Greek", "Greek"]  # sorted, as listed
        assert data["images"][0, 0, 14, 14] < 128 < data["images"][0, 0, 14, 2]


def test_an_explicit_data_root_is_the_only_place_looked(data_root, tmp_path, store, cli):
    """``--data-root DIR`` whose folder lacks the file is refused even where MESABENCH_DATA
    (here ``data_root``) holds it: one line naming the file and each folder looked in
    once, exit 2, nothing recorded. Without the flag the same run reads MESABENCH_DATA's."""
    from tests.helpers import stored_runs

    write_omniglot(data_root)
    empty = tmp_path / "empty"
    empty.mkdir()
    small = ["--set", "iterations=1", "--set", "val_every=1", "--set", "val_tasks=2",
             "--set", "test_tasks=2", "--set", "meta_batch=2", "--set", "val_classes=6",
             "--set", "channels=4", "--tracking-uri", store]  # fmt: skip
    done = cli("run", "--method", "fomaml", "--benchmark", "omniglot-5w1s", *small,
               "--data-root", str(empty))  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "'omniglot28.npz' not found" in line
    assert line.count(str(empty / "omniglot28.npz")) == 1
    assert str(data_root) not in line and "cache" not in line
    assert stored_runs(store, "omniglot-5w1s") == []
    done = cli("run", "--method", "fomaml", "--benchmark", "omniglot-5w1s", *small)
    assert done.returncode == 0, done.stderr
    (run,) = stored_runs(store, "omniglot-5w1s")
    assert run.data.params["data_root"] == str(data_root.resolve())


def test_data_roots_list_each_folder_once(data_root, monkeypatch):
    from mesabench_datasets.data_root import data_roots, using_data_root

    with using_data_root(data_root):  # the run's root is MESABENCH_DATA's: looked in once
        assert data_roots(data_root).count(data_root) == 1
    with using_data_root(data_root, only=True):
        assert data_roots() == [data_root]
    with using_data_root(None, only=True):  # no root given: the fallback order
        assert data_roots()[0] == data_root
