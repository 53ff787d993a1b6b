"""CIFAR-FS, FC100, tiered-ImageNet and CUB from generated files in the formats users have."""

from __future__ import annotations

import pytest
import torch
from mlflow.tracking import MlflowClient

from benchmarks.cli.main import main
from mesabench_datasets.data_root import DatasetFormatError
from mesabench_datasets.fewshot_sets import load_fewshot_set
from tests.image_fixtures import (
    SPLIT_CLASSES,
    WNIDS,
    class_image,
    write_cifarfs_raw,
    write_cub_images,
    write_fc100_pickles,
    write_image_folders,
    write_tiered_pickles,
    write_torchmeta_cifar,
    write_torchmeta_encoded,
)

FORMATS = {
    ("cifarfs", "folders"): lambda root: write_image_folders(root, "cifarfs", 32),
    ("cifarfs", "learn2learn"): lambda root: write_image_folders(root / "cifarfs", "processed", 32),
    ("cifarfs", "raw"): write_cifarfs_raw,
    ("fc100", "learn2learn"): write_fc100_pickles,
    ("fc100", "folders"): lambda root: write_image_folders(root, "fc100", 32),
    ("tiered_imagenet", "learn2learn"): write_tiered_pickles,
    ("tiered_imagenet", "folders"): lambda root: write_image_folders(root, "tiered_imagenet", 84),
    ("cub", "folders"): lambda root: write_image_folders(root, "cub", 84),
    ("cifarfs", "torchmeta"): lambda root: write_torchmeta_cifar(root, "cifar-fs"),
    ("fc100", "torchmeta"): lambda root: write_torchmeta_cifar(root, "fc100"),
    ("tiered_imagenet", "torchmeta"): lambda root: write_torchmeta_encoded(root, "tieredimagenet"),
    ("cub", "torchmeta"): lambda root: write_torchmeta_encoded(root, "cub"),
}


@pytest.mark.parametrize(("dataset", "form"), sorted(FORMATS))
def test_every_form_gives_the_class_splits_and_pixels_it_holds(tmp_path, dataset, form):
    FORMATS[dataset, form](tmp_path)
    pools = load_fewshot_set(dataset, tmp_path)
    size = 32 if dataset in ("cifarfs", "fc100") else 84
    for split, classes in SPLIT_CLASSES.items():
        pool = pools[split]
        # Folder forms name classes by folder; pickles by their integer labels.
        labelled = dataset in ("fc100", "tiered_imagenet") and form == "learn2learn"
        names = [str(WNIDS.index(c)) for c in classes] if labelled else classes
        assert list(pool.class_names) == sorted(names)
        assert pool.num_classes == len(classes) and pool.counts.tolist() == [20] * len(classes)
        assert pool.images.shape[1:] == (3, size, size)
        # Every image is the one written for its class: pixel 0 holds the class id, pixel 1
        # the variant, and the whole image matches.
        for c in range(pool.num_classes):
            for slot in (0, 7):
                image = pool.images[pool.class_index[c, slot]].permute(1, 2, 0).numpy()
                class_id, variant = int(image.flat[0]), int(image.flat[1])
                assert WNIDS[class_id] in classes
                assert (image == class_image(class_id, (size, size, 3), variant)).all()


@pytest.mark.parametrize("under", ["", "cubirds200"])
def test_cub_as_it_unpacks_takes_chen_et_al_s_split(tmp_path, under):
    write_cub_images(tmp_path / under if under else tmp_path, per_class=2, size=16)
    pools = load_fewshot_set("cub", tmp_path)
    # Chen et al. (2019), as torchmeta's lists hold it: 001, 003, ... train; 002, 006, ...
    # validate; 004, 008, ... test.
    expected = {
        "train": [f"{c:03d}.Bird_{c}" for c in range(1, 201, 2)],
        "val": [f"{c:03d}.Bird_{c}" for c in range(2, 201, 4)],
        "test": [f"{c:03d}.Bird_{c}" for c in range(4, 201, 4)],
    }
    for split, names in expected.items():
        assert list(pools[split].class_names) == names
        assert pools[split].images.shape[1:] == (3, 84, 84)  # resized from 16
    first = pools["val"].images[pools["val"].class_index[0, 0]]
    assert int(first[0, 0, 0]) == 1  # class 002 is class id 1 of the fixture


def test_a_cub_folder_without_200_classes_is_refused(tmp_path):
    write_cub_images(tmp_path, per_class=1, size=8)
    import shutil

    shutil.rmtree(tmp_path / "CUB_200_2011" / "images" / "200.Bird_200")
    with pytest.raises(DatasetFormatError, match="200 class folders"):
        load_fewshot_set("cub", tmp_path)


def test_classes_in_two_splits_are_refused(tmp_path):
    write_image_folders(tmp_path, "cub", 84, per_class=3)
    (tmp_path / "cub" / "test" / WNIDS[0]).mkdir()
    (tmp_path / "cub" / "test" / WNIDS[0] / "x.png").write_bytes(
        (tmp_path / "cub" / "train" / WNIDS[0] / "0000.png").read_bytes()
    )
    with pytest.raises(DatasetFormatError, match="is in both the train and test splits"):
        load_fewshot_set("cub", tmp_path)


def test_a_missing_set_names_where_it_looked_and_a_run_records_nothing(tmp_path, store, capsys):
    args = ["run", "--method", "maml", "--benchmark", "tiered-imagenet-5w1s", "--data-root",
            str(tmp_path), "--tracking-uri", store]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "tiered-imagenet/train_images_png.pkl" in err and str(tmp_path) in err
    assert not (tmp_path / "store").exists() or not MlflowClient(store).search_experiments()[1:]


@pytest.mark.parametrize("spec", ["cifarfs-5w1s", "fc100-5w5s"])
def test_a_new_set_runs_end_to_end(tmp_path, store, spec):
    write_fc100_pickles(tmp_path) if spec.startswith("fc100") else write_cifarfs_raw(tmp_path)
    tiny = ["--set", "iterations=2", "--set", "val_every=1", "--set", "val_tasks=2",
            "--set", "test_tasks=4", "--set", "channels=8", "--set", "queries=5",
            "--set", "ways=3", "--set", "inner_steps=1", "--set", "eval_steps=1"]  # fmt: skip
    assert main(["run", "--method", "fomaml", "--benchmark", spec, *tiny, "--data-root",
                 str(tmp_path), "--tracking-uri", store]) == 0  # fmt: skip
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name(spec).experiment_id])
    assert run.info.status == "FINISHED"
    assert 0.0 <= run.data.metrics["final/test_accuracy"] <= 1.0
    assert torch.isfinite(torch.tensor(run.data.metrics["final/test_loss"]))
