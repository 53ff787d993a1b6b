"""Networks for gradient-based learners. Each names its head so ANIL can adapt only it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mesabench_datasets.tasks import LossKind, Problem
from methods.common.losses import per_task_loss_gradient


class MLP(nn.Sequential):
    """Fully connected ReLU network; the last Linear is the head."""

    def __init__(self, in_features: int, hidden: tuple[int, ...], out_features: int):
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, out_features))
        super().__init__(*layers)
        self.head_prefix = f"{len(layers) - 1}."
        self.depth = len(hidden) + 1
        self._row_cache: dict[tuple, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def functional_forward(self, params: dict[str, torch.Tensor], x: torch.Tensor):
        """The forward pass with the given weights: the same operations as ``forward``
        without ``functional_call``'s re-parametrisation, which dominates on tiny batches."""
        for layer in range(self.depth):
            i = 2 * layer
            x = F.linear(x, params[f"{i}.weight"], params[f"{i}.bias"])
            if layer < self.depth - 1:
                x = F.relu(x)
        return x

    def batched_forward(self, params: dict[str, torch.Tensor], x: torch.Tensor):
        """The forward pass of ``T`` networks at once: every weight has a leading task
        dimension (``[T, out, in]``), ``x`` is ``[T, N, in]``. Batched matrix products, so
        that the inner loop can differentiate all tasks with one autograd call."""
        for layer in range(self.depth):
            i = 2 * layer
            weight, bias = params[f"{i}.weight"], params[f"{i}.bias"]
            x = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
            if layer < self.depth - 1:
                x = F.relu(x)
        return x

    def batched_gradients(
        self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, loss: LossKind
    ) -> dict[str, torch.Tensor]:
        """Each task's gradient of its own loss, weights and gradients shaped as in
        :meth:`batched_forward`: the chain rule written out, two products per layer. Made of
        ordinary differentiable operations, so a meta-gradient flows through it (second
        order); it equals ``autograd.grad`` of the summed task losses at about 10% less cost
        on small networks, where the autograd engine's own work is a large share."""
        inputs, pre_activations = [], []
        h = x
        for layer in range(self.depth):
            inputs.append(h)
            i = 2 * layer
            h = torch.baddbmm(params[f"{i}.bias"].unsqueeze(1), h, params[f"{i}.weight"].mT)
            if layer < self.depth - 1:
                pre_activations.append(h)
                h = F.relu(h)
        delta = per_task_loss_gradient(h, y, loss)  # [T, N, out]
        grads = {}
        for layer in reversed(range(self.depth)):
            i = 2 * layer
            grads[f"{i}.weight"] = torch.bmm(delta.mT, inputs[layer])
            grads[f"{i}.bias"] = delta.sum(1)
            if layer > 0:  # ReLU's backward: its second derivative is zero
                delta = torch.ops.aten.threshold_backward(
                    torch.bmm(delta, params[f"{i}.weight"]), pre_activations[layer - 1], 0
                )
        return grads

    def _row_constants(self, n: int, first: int, like: torch.Tensor):
        """-1 per row (for the one-hot), each row's 1 / group size, and the ``[2, n]`` matrix
        that averages a column over each group; cached per shape."""
        key = (n, first, like.device, like.dtype)
        cache = self._row_cache
        if key not in cache:
            scale = torch.full(
                (n, 1), 1.0 / max(n - first, 1), device=like.device, dtype=like.dtype
            )
            scale[:first] = 1.0 / first
            groups = torch.zeros(2, n, device=like.device, dtype=like.dtype)
            groups[0, :first], groups[1, first:] = -scale[:first, 0], -scale[first:, 0]
            cache[key] = (-torch.ones(n, 1, device=like.device, dtype=like.dtype), scale, groups)
        return cache[key]

    def grouped_gradients(
        self,
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        first: int,
        out: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]],
    ) -> torch.Tensor:
        """Mean cross-entropy and its weight gradients for rows ``[:first]`` and ``[first:]``
        separately, from one forward and one hand-written backward pass.

        Online learners need, at every step, the gradient of one new sample and of the
        meta-batch at the same weights; autograd would need two passes for that. The two
        gradients are written into ``out`` (two dicts of tensors shaped like ``params``);
        returns the two losses ``[2]``.
        """
        inputs, pre_activations = [], []
        h = x
        for layer in range(self.depth):
            inputs.append(h)
            h = F.linear(h, params[f"{2 * layer}.weight"], params[f"{2 * layer}.bias"])
            if layer < self.depth - 1:
                pre_activations.append(h)
                h = F.relu(h)
        n = len(x)
        log_p = F.log_softmax(h, dim=-1)
        minus_one, row_scale, group_mean = self._row_constants(n, first, x)
        # Both groups' mean negative log-likelihoods in one product (tiny ops cost most here).
        losses = torch.mm(group_mean, log_p.gather(1, y[:, None]))[:, 0]
        # dL/dlogits per row: softmax - onehot, each group scaled by its own mean.
        delta = log_p.exp_().scatter_add_(1, y[:, None], minus_one).mul_(row_scale)
        for layer in reversed(range(self.depth)):
            a, w = inputs[layer], params[f"{2 * layer}.weight"]
            pairs = ((delta[:first], a[:first]), (delta[first:], a[first:]))
            for grads, (d, a_g) in zip(out, pairs, strict=True):
                torch.matmul(d.T, a_g, out=grads[f"{2 * layer}.weight"])
                torch.sum(d, 0, out=grads[f"{2 * layer}.bias"])
            if layer > 0:  # through the ReLU: ReLU's own backward kernel, one fused op
                delta = torch.ops.aten.threshold_backward(delta @ w, pre_activations[layer - 1], 0)
        return losses


class LinearModel(nn.Module):
    """y = W x with no bias, zero-initialised: one inner step from it is plain GD from w = 0,
    the model of the in-context regression literature."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.head = nn.Linear(in_features, out_features, bias=False)
        nn.init.zeros_(self.head.weight)
        self.head_prefix = "head."

    def forward(self, x):
        return self.head(x)


class BatchStatNorm2d(nn.Module):
    """BatchNorm2d on the batch's own statistics (no running averages).

    torch's fused batch-norm kernel gives wrong second-order gradients under ``vmap``
    (torch 2.14; tests/test_fewshot_runs.py checks both forms against a per-task loop), so
    unless ``fused`` the norm is written with elementwise ops. The fused kernel is faster
    and exact when tasks are looped over instead of vmapped.
    """

    def __init__(self, channels: int, eps: float = 1e-5, fused: bool = False):
        super().__init__()
        self.eps, self.fused = eps, fused
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        if self.fused:
            return nn.functional.batch_norm(
                x, None, None, self.weight, self.bias, training=True, eps=self.eps
            )
        mean = x.mean(dim=(0, 2, 3), keepdim=True)
        var = (x - mean).pow(2).mean(dim=(0, 2, 3), keepdim=True)
        x_hat = (x - mean) * torch.rsqrt(var + self.eps)
        return x_hat * self.weight.view(1, -1, 1, 1) + self.bias.view(1, -1, 1, 1)


class Conv4(nn.Module):
    """4 x [conv3x3, BatchNorm on batch statistics, ReLU, max-pool 2] and a linear head.

    BatchNorm keeps no running statistics, so the network is a pure function of its
    parameters and the batch: it runs inside ``torch.func.vmap`` over tasks, and every task
    is normalised by its own statistics as in MAML.
    """

    def __init__(
        self,
        in_channels: int,
        image_size: int,
        channels: int,
        out_features: int,
        fused_norm: bool = False,
    ):
        super().__init__()
        width, size = in_channels, image_size
        for i in range(1, 5):
            setattr(self, f"conv{i}", nn.Conv2d(width, channels, 3, padding=1))
            setattr(self, f"bn{i}", BatchStatNorm2d(channels, fused=fused_norm))
            width, size = channels, size // 2
        self.head = nn.Linear(channels * size * size, out_features)
        self.head_prefix = "head."

    def forward(self, x):
        for i in range(1, 5):
            x = getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(x).contiguous())
            x = nn.functional.max_pool2d(nn.functional.relu(x), 2)
        return self.head(x.flatten(1))


class ResidualBlock(nn.Module):
    """3 x [conv3x3, BatchNorm] with leaky ReLUs between, plus a 1x1 conv + BatchNorm
    shortcut; a leaky ReLU and a 2x2 max-pool after the sum."""

    def __init__(self, width_in: int, width: int, fused_norm: bool = False):
        super().__init__()
        widths = (width_in, width, width, width)
        for i in range(1, 4):
            setattr(self, f"conv{i}", nn.Conv2d(widths[i - 1], width, 3, padding=1, bias=False))
            setattr(self, f"bn{i}", BatchStatNorm2d(width, fused=fused_norm))
        self.shortcut = nn.Conv2d(width_in, width, 1, bias=False)
        self.shortcut_bn = BatchStatNorm2d(width, fused=fused_norm)

    def forward(self, x):
        out = x
        for i in range(1, 4):
            out = getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(out).contiguous())
            if i < 3:
                out = nn.functional.leaky_relu(out, RESNET_SLOPE)
        out = out + self.shortcut_bn(self.shortcut(x).contiguous())
        return nn.functional.max_pool2d(nn.functional.leaky_relu(out, RESNET_SLOPE), 2)


#: ResNet-12's block widths as multiples of the first (64, 160, 320, 640 at 64), and its
#: leaky ReLU slope: Lee et al. 2019 (MetaOptNet), sec. 4.2, the backbone sparse-MAML's
#: ResNet-12 table uses (thesis table 4.2).
RESNET_WIDTHS = (1.0, 2.5, 5.0, 10.0)
RESNET_SLOPE = 0.1


class ResNet12(nn.Module):
    """ResNet-12: four residual blocks, global average pooling and a linear head.

    BatchNorm on batch statistics, as in :class:`Conv4`, so that the network is a function
    of its parameters and the batch (vmap over tasks, per-task statistics). DropBlock, which
    MetaOptNet trains with, is left out: the inner loop would need its random masks drawn
    per step, and the thesis' text does not say that its ResNet-12 uses it.
    """

    def __init__(self, in_channels: int, channels: int, out_features: int,
                 fused_norm: bool = False):  # fmt: skip
        super().__init__()
        width = in_channels
        for i, scale in enumerate(RESNET_WIDTHS, 1):
            setattr(self, f"block{i}", ResidualBlock(width, round(channels * scale), fused_norm))
            width = getattr(self, f"block{i}").shortcut.out_channels
        self.head = nn.Linear(width, out_features)
        self.head_prefix = "head."

    def forward(self, x):
        for i in range(1, 5):
            x = getattr(self, f"block{i}")(x)
        return self.head(x.mean(dim=(2, 3)))


NETWORKS = ("mlp", "linear", "conv4", "resnet12")
IMAGE_NETWORKS = ("conv4", "resnet12")


def check_network(name: str, problem: Problem) -> None:
    """Raise :class:`~methods.api.IncompatibleSetting` if network ``name`` cannot take
    ``problem``'s inputs."""
    from mesabench_core import IncompatibleSetting

    if name in IMAGE_NETWORKS and len(problem.input_shape) != 3:
        raise IncompatibleSetting(
            f"{name} needs [channels, height, width] inputs, got {problem.input_shape}"
        )
    if name in ("mlp", "linear") and len(problem.input_shape) != 1:
        raise IncompatibleSetting(
            f"network {name!r} needs flat inputs, got shape {problem.input_shape}; "
            "use conv4, resnet12 (or default) on images"
        )
    if name not in NETWORKS:
        raise IncompatibleSetting(f"unknown network {name!r}; allowed: {', '.join(NETWORKS)}")


def network_for(setting: str, problem: Problem) -> str:
    """The network a ``network`` setting names: ``default`` is the benchmark's."""
    return problem.network if setting == "default" else setting


def check_network_setting(setting: str, problem: Problem) -> None:
    """:func:`check_network` for a method's ``network`` setting, naming the setting."""
    from mesabench_core import IncompatibleSetting

    try:
        check_network(network_for(setting, problem), problem)
    except IncompatibleSetting as err:
        raise IncompatibleSetting(f"method.network={setting}: {err}") from None


def build_network(
    name: str,
    problem: Problem,
    hidden: tuple[int, ...],
    channels: int = 64,
    vmapped: bool = True,
) -> nn.Module:
    """Build the named network for ``problem``'s input and output sizes (``vmapped``: whether
    it will run under ``vmap``, which rules out fused batch norm)."""
    check_network(name, problem)
    if name == "conv4":
        in_channels, height, _ = problem.input_shape
        return Conv4(in_channels, height, channels, problem.output_dim, fused_norm=not vmapped)
    if name == "resnet12":
        return ResNet12(problem.input_shape[0], channels, problem.output_dim,
                        fused_norm=not vmapped)  # fmt: skip
    if name == "mlp":
        return MLP(problem.input_shape[0], hidden, problem.output_dim)
    return LinearModel(problem.input_shape[0], problem.output_dim)


def head_names(network: nn.Module) -> list[str]:
    prefix = getattr(network, "head_prefix", None)
    if prefix is None:
        raise ValueError(f"{type(network).__name__} does not declare a head (head_prefix)")
    return [n for n, _ in network.named_parameters() if n.startswith(prefix)]
