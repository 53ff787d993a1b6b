"""Gradient modulation: the one thing the MAML-family learners differ in.

An inner-loop step is ``phi <- phi - modulation.step(name, g)``. MAML uses a fixed rate,
Meta-SGD learned per-parameter rates, sparse-MAML a learned binary mask ``1[m >= 0]`` times a
fixed rate, sparse-ReLU-MAML rectified learned rates ``relu(m)``. The mask and the rectifier
are differentiated straight-through (their backward is the identity), so that a masked
coordinate can come back to life; with a first-order inner loop the resulting gradient on
``m`` is exactly sparse-MAML's mask update (thesis eq. 4.4).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
from torch import Tensor, nn

Gate = Literal["identity", "relu", "binary"]
Granularity = Literal["element", "tensor", "scalar"]


def straight_through(forward: Tensor, source: Tensor) -> Tensor:
    """``forward`` in the forward pass, the identity of ``source`` in the backward pass."""
    return source + (forward - source).detach()


def _key(name: str) -> str:
    # nn.ParameterDict keys cannot contain dots.
    return name.replace(".", "__")


class GradientModulation(nn.Module):
    """Maps the inner-loop gradient of a named tensor to the step subtracted from it:
    ``step = rate(name) * grad``, with a rate that is a scalar or has the tensor's shape."""

    def rate(self, name: str) -> Tensor | float:
        raise NotImplementedError

    def step(self, name: str, grad: Tensor) -> Tensor:
        return self.rate(name) * grad

    def sparsity(self) -> dict[str, float]:
        """Fraction of entries whose inner-loop step is exactly zero, per tensor."""
        return {}


class FixedRate(GradientModulation):
    """Plain gradient descent with one fixed rate (MAML, first-order MAML, ANIL)."""

    def __init__(self, lr: float):
        super().__init__()
        self.lr = lr

    def rate(self, name: str) -> float:
        return self.lr


class LearnedRates(GradientModulation):
    """``step = scale * gate(m) * g`` with a learned ``m`` per element, tensor or globally.

    gate ``identity``: Meta-SGD; ``binary`` (``1[m >= 0]``): sparse-MAML;
    ``relu``: sparse-ReLU-MAML and La-MAML. ``binary`` and ``relu`` are straight-through
    unless ``straight_through`` is False; La-MAML differentiates its relu exactly, so a rate
    that reaches zero receives no gradient and stays off.
    """

    def __init__(
        self,
        shapes: Mapping[str, torch.Size],
        *,
        gate: Gate,
        scale: float,
        init: Literal["constant", "centred"],
        init_value: float,
        granularity: Granularity = "element",
        straight_through: bool = True,
    ):
        super().__init__()
        self.gate, self.scale, self.granularity = gate, scale, granularity
        self.straight_through = straight_through
        self.names = list(shapes)
        self.values = nn.ParameterDict()
        if granularity == "scalar":
            self.values["all"] = nn.Parameter(self._init(torch.Size([]), init, init_value))
        else:
            for name, shape in shapes.items():
                size = shape if granularity == "element" else torch.Size([])
                self.values[_key(name)] = nn.Parameter(self._init(size, init, init_value))

    @staticmethod
    def _init(shape: torch.Size, init: str, value: float) -> Tensor:
        if init == "constant":
            return torch.full(shape, float(value))
        # Mean-centred: uniform in (-value, value), so about half the entries start gated off.
        return (torch.rand(shape) * 2 - 1) * value

    def raw(self, name: str) -> Tensor:
        return self.values["all" if self.granularity == "scalar" else _key(name)]

    def rate(self, name: str) -> Tensor:
        m = self.raw(name)
        if self.gate == "binary":
            gated = (m >= 0).to(m.dtype)
        elif self.gate == "relu":
            gated = torch.relu(m)
        else:
            return self.scale * m
        if self.straight_through:
            gated = straight_through(gated, m)
        return self.scale * gated

    def raw_gradient(self, name: str, rate_grad: Tensor) -> Tensor:
        """``dL/dm`` for the tensor ``name`` given ``dL/drate`` (shaped like the tensor): the
        chain rule through :meth:`rate` written out, for learners that compute ``dL/drate``
        in closed form and would otherwise run autograd over a surrogate just for this."""
        m = self.raw(name)
        grad = self.scale * rate_grad
        if self.gate == "relu" and not self.straight_through:
            grad = grad * (m > 0)
        if self.granularity == "element":
            return grad
        return grad.sum().reshape(m.shape)

    def sparsity(self) -> dict[str, float]:
        if self.gate == "identity":
            return {}  # a free rate is never gated off; a negative one ascends
        out = {}
        for name in self.names:
            m = self.raw(name).detach()
            off = (m < 0) if self.gate == "binary" else (m <= 0)
            out[name] = off.float().mean().item()
        return out
