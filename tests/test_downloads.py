"""Download code runs offline: torchvision's dataset classes replaced by small fakes, the
conversion into the suite's ``.npz`` files must produce what the loaders read back."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from mesabench_datasets.data_root import DatasetFormatError
from mesabench_datasets.mnist import download_mnist_like, load_mnist_like


class _FakeSplit:
    """torchvision's MNIST interface as the converter uses it: ``data`` [n, 28, 28] uint8,
    ``targets`` int64, made from the split and the root instead of the network."""

    calls: list[tuple[str, bool, bool]] = []

    def __init__(self, root: str, train: bool, download: bool):
        _FakeSplit.calls.append((root, train, download))
        n = 6 if train else 4
        generator = torch.Generator().manual_seed(n)
        self.data = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=generator)
        self.targets = torch.arange(n) % 10


FAKES = types.SimpleNamespace(MNIST=_FakeSplit, FashionMNIST=_FakeSplit)


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_a_download_is_converted_into_the_files_the_loader_reads(tmp_path, name):
    _FakeSplit.calls.clear()
    path = download_mnist_like(name, tmp_path, sources=FAKES)
    assert path == tmp_path / f"{name}.npz"
    assert [(train, download) for _, train, download in _FakeSplit.calls] == [
        (True, True), (False, True)
    ]  # fmt: skip
    arrays = load_mnist_like(name, tmp_path)
    expected_train = _FakeSplit(str(tmp_path), True, False)
    assert np.array_equal(arrays["x_train"], expected_train.data.numpy())
    assert arrays["y_train"].dtype == np.uint8
    assert arrays["y_train"].tolist() == [0, 1, 2, 3, 4, 5]
    assert arrays["x_test"].shape == (4, 28, 28)


def test_an_unknown_dataset_is_refused_before_any_download(tmp_path):
    _FakeSplit.calls.clear()
    with pytest.raises(DatasetFormatError, match="dataset must be one of"):
        download_mnist_like("kmnist", tmp_path, sources=FAKES)
    assert _FakeSplit.calls == []


def _idx(path, array: np.ndarray) -> None:
    """An IDX file as the MNIST distribution ships them (big-endian header, then bytes)."""
    magic = 0x0800 | array.ndim
    header = np.array([magic, *array.shape], dtype=">i4").tobytes()
    path.write_bytes(header + array.astype(np.uint8).tobytes())


@pytest.mark.parametrize(
    ("name", "folder"), [("mnist", "MNIST"), ("fashion_mnist", "FashionMNIST")]
)
def test_the_default_source_is_torchvision_reading_files_already_fetched(tmp_path, name, folder):
    """torchvision's own classes, with the raw files already where they download to, so
    that nothing is fetched: the default import path and the conversion both run."""
    raw = tmp_path / "torchvision" / folder / "raw"
    raw.mkdir(parents=True)
    images = {"train": np.full((3, 28, 28), 7), "t10k": np.arange(2 * 28 * 28).reshape(2, 28, 28)}
    labels = {"train": np.array([1, 2, 3]), "t10k": np.array([9, 0])}
    for part in ("train", "t10k"):
        _idx(raw / f"{part}-images-idx3-ubyte", images[part] % 256)
        _idx(raw / f"{part}-labels-idx1-ubyte", labels[part])
    path = download_mnist_like(name, tmp_path)
    arrays = load_mnist_like(name, path.parent)
    assert arrays["y_train"].tolist() == [1, 2, 3] and arrays["y_test"].tolist() == [9, 0]
    assert np.array_equal(arrays["x_test"], images["t10k"] % 256)
