"""The image networks' shapes and sizes, against counts written out by hand."""

from __future__ import annotations

import pytest
import torch

from mesabench_core import IncompatibleSetting
from mesabench_datasets.tasks import Problem
from methods.common.networks import ResNet12, build_network


def _resnet12_count(in_channels: int, widths: tuple[int, ...], classes: int) -> int:
    """Per block: three 3x3 convolutions without bias, a 1x1 shortcut, four BatchNorms
    (weight and bias each); then the linear head on the last width."""
    total, width_in = 0, in_channels
    for w in widths:
        total += 9 * (width_in * w + 2 * w * w) + width_in * w + 4 * 2 * w
        width_in = w
    return total + width_in * classes + classes


def test_resnet12_has_the_published_widths_and_size():
    net = ResNet12(3, 64, 5)
    count = sum(p.numel() for p in net.parameters())
    assert count == _resnet12_count(3, (64, 160, 320, 640), 5)
    # Lee et al. 2019 (MetaOptNet), sec. 4.2: "12.4M parameters" for this backbone.
    assert round((count - (640 * 5 + 5)) / 1e6, 1) == 12.4
    x = torch.randn(6, 3, 84, 84)
    assert net(x).shape == (6, 5)
    # Omniglot's 28 x 28 greyscale images pool down to 1 x 1 before the global average.
    small = ResNet12(1, 8, 20)
    assert sum(p.numel() for p in small.parameters()) == _resnet12_count(1, (8, 20, 40, 80), 20)
    assert small(torch.randn(4, 1, 28, 28)).shape == (4, 20)


def test_resnet12_is_built_by_name_for_images_and_refused_for_flat_inputs():
    images = Problem(input_shape=(1, 28, 28), output_dim=5, loss="cross_entropy",
                     network="conv4")
    net = build_network("resnet12", images, hidden=(), channels=8)
    assert isinstance(net, ResNet12) and net.block2.conv1.out_channels == 20
    flat = Problem(input_shape=(10,), output_dim=1, loss="mse", network="mlp")
    with pytest.raises(IncompatibleSetting, match=r"resnet12 needs \[channels, height, width\]"):
        build_network("resnet12", flat, hidden=(), channels=8)
