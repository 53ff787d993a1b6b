"""Gradient modulation: the one thing the MAML-family learners differ in.

An inner-loop step is ``phi <- phi - modulation.step(name, g)``. MAML uses a fixed rate,
Meta-SGD learned per-parameter rates, sparse-MAML a learned binary mask ``1[m >= 0]`` times a
fixed rate, sparse-ReLU-MAML rectified learned rates ``relu(m)``, MAML++ learned rates per
tensor and inner step (LSLR). A modulation that sets ``step_aware`` is told which inner step
it is at: ``rate(name, index)`` and ``step(name, grad, index)``, ``index`` counting from 0.
The mask and the rectifier are differentiated straight-through (their backward is the
identity), so that a masked coordinate can come back to life; with a first-order inner loop
the resulting gradient on ``m`` is exactly sparse-MAML's mask update (thesis eq. 4.4).

Every method family takes its modulation from one open registry, :data:`MODULATIONS`, by the
name in its ``modulation`` setting: the MAML family (``methods.gradient.maml``), La-MAML
(``methods.continual.lamaml``) and continual-MAML (``methods.continual.online``). A family
describes what it adapts and with which step sizes as :class:`ModulationSettings`; each
registered factory builds its modulation from them. Plugins add factories through the
``mesabench.modulations`` entry-point group, and every family can then use them by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from mesabench_core import ConfigError, Registry

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
    ``step = rate(name) * grad``, with a rate that is a scalar or has the tensor's shape.

    With ``step_aware`` set, the inner loop passes the step's index (0 for the first step)
    as a third argument: ``rate(name, index)``, ``step(name, grad, index)``. Left unset,
    both keep their two-argument form, so modulations written before it work unchanged."""

    #: Whether :meth:`rate` and :meth:`step` take the inner step's index.
    step_aware: bool = False

    def rate(self, name: str, *index: int) -> Tensor | float:
        raise NotImplementedError

    def step(self, name: str, grad: Tensor, *index: int) -> Tensor:
        return self.rate(name, *index) * grad

    def forward(self, name: str, grad: Tensor, *index: int) -> Tensor:
        # The step as the module's call, so that torch.func.functional_call can run it with
        # the modulation's parameters swapped for constants (the inner loop's mixed order).
        return self.step(name, grad, *index)

    def step_at(self, name: str, grad: Tensor, index: int) -> Tensor:
        """The inner loop's call: the step, told its index if the modulation asks for it."""
        return self.step(name, grad, index) if self.step_aware else self.step(name, grad)

    def sparsity(self) -> dict[str, float]:
        """Fraction of entries whose inner-loop step is exactly zero, per tensor."""
        return {}

    def add_rate_gradient(self, name: str, rate_grad: Tensor) -> None:
        """Accumulate into this modulation's parameters their gradient, given ``dL/drate``
        for tensor ``name`` (shaped like the tensor): the chain rule through :meth:`rate`.
        Used by learners that compute ``dL/drate`` in closed form (La-MAML's look-ahead).
        By autograd here; a modulation may write its own closed form."""
        rate = self.rate(name)
        if not isinstance(rate, Tensor) or not rate.requires_grad:
            return  # a fixed rate: nothing behind it to learn
        grad = rate_grad if rate.shape == rate_grad.shape else rate_grad.sum_to_size(rate.shape)
        torch.autograd.backward(rate, grad.detach())


class FixedRate(GradientModulation):
    """Plain gradient descent with one fixed rate (MAML, first-order MAML, ANIL)."""

    def __init__(self, lr: float):
        super().__init__()
        self.lr = lr

    def rate(self, name: str) -> float:
        return self.lr


class PerStepRates(GradientModulation):
    """MAML++'s LSLR (Antoniou et al. 2019, "How to train your MAML", Sec. 4): one learned
    rate per adapted tensor and per inner step, every one starting at ``lr``. A step past
    the last trained one (evaluating with more steps than training took) takes the last
    step's rate."""

    step_aware = True

    def __init__(self, shapes: Mapping[str, torch.Size], lr: float, steps: int):
        super().__init__()
        self.steps = max(1, steps)
        self.values = nn.ParameterDict(
            {_key(name): nn.Parameter(torch.full((self.steps,), float(lr))) for name in shapes}
        )

    def rate(self, name: str, index: int = 0) -> Tensor:
        return self.values[_key(name)][min(index, self.steps - 1)]


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

    def add_rate_gradient(self, name: str, rate_grad: Tensor) -> None:
        # Written out (:meth:`raw_gradient`) rather than by autograd: no graph per tensor.
        raw = self.raw(name)
        grad = self.raw_gradient(name, rate_grad)
        raw.grad = grad if raw.grad is None else raw.grad + grad

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


# -- the registry -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ModulationSettings:
    """What a method family tells a modulation factory: the tensors it adapts and the step
    sizes and initialisations its own settings name. Each factory reads what it needs."""

    #: Name -> shape of every adapted tensor.
    shapes: Mapping[str, torch.Size]
    #: The family's step size: a fixed rate, or the rate a mask lets through (MAML's
    #: ``inner_lr``, La-MAML's ``fixed_rate``).
    lr: float
    #: Where learned rates start (Meta-SGD: ``inner_lr``; La-MAML: ``rate_init``).
    rate_init: float
    #: Mask initialisation: every ``m = mask_init`` (``constant``) or uniform in
    #: ``(-mask_init, mask_init)`` (``centred``: about half start gated off).
    mask_init: float
    mask_init_mode: Literal["constant", "centred"] = "centred"
    #: One learned value per element, per tensor, or one for all.
    granularity: Granularity = "element"
    #: How the family's rectified rates are formed: ``scaled`` (sparse-ReLU-MAML:
    #: ``lr * relu(m)``, ``m ~ U(-2, 2)``, straight-through) or ``direct`` (La-MAML:
    #: ``relu(alpha)``, ``alpha = rate_init``, differentiated exactly: a rate that reaches
    #: zero stays off).
    rectified: Literal["scaled", "direct"] = "scaled"
    #: Inner steps per adaptation in meta-training (what per-step rates are learned for).
    steps: int = 1


#: A factory: the family's settings -> the modulation it adapts with.
ModulationFactory = Callable[[ModulationSettings], GradientModulation]
MODULATIONS: Registry[ModulationFactory] = Registry("gradient modulation")


def register_modulation(name: str, factory: ModulationFactory, description: str = "",
                        source: str = "built-in") -> None:  # fmt: skip
    """Register a gradient modulation under ``name`` (built-ins here; plugins through the
    ``mesabench.modulations`` entry-point group)."""
    MODULATIONS.add(name, factory, source, description)


def check_modulation(name: str) -> None:
    """A ``ConfigError`` naming the registered modulations if ``name`` is none of them."""
    if name not in MODULATIONS:
        allowed = ", ".join(repr(entry.name) for entry in MODULATIONS)
        raise ConfigError(f"modulation must be one of {allowed} (got {name!r})")


def build_modulation(name: str, settings: ModulationSettings) -> GradientModulation:
    modulation = MODULATIONS.get(name).value(settings)
    if not isinstance(modulation, GradientModulation):
        raise TypeError(f"gradient modulation {name!r} built a {type(modulation).__name__}, "
                        "not a GradientModulation")  # fmt: skip
    return modulation


def _learned_rates(s: ModulationSettings) -> GradientModulation:
    # Meta-SGD: free rates, initialised at the family's rate_init.
    return LearnedRates(s.shapes, gate="identity", scale=1.0, init="constant",
                        init_value=s.rate_init, granularity=s.granularity)  # fmt: skip


def _binary_mask(s: ModulationSettings) -> GradientModulation:
    # sparse-MAML: lr * 1[m >= 0]; m ~ U(-0.5, 0.5) as in the public code's bias masks.
    return LearnedRates(s.shapes, gate="binary", scale=s.lr, init=s.mask_init_mode,
                        init_value=s.mask_init, granularity=s.granularity)  # fmt: skip


def _relu_rates(s: ModulationSettings) -> GradientModulation:
    if s.rectified == "direct":  # La-MAML: relu(alpha), exact
        return LearnedRates(s.shapes, gate="relu", scale=1.0, init="constant",
                            init_value=s.rate_init, granularity=s.granularity,
                            straight_through=False)  # fmt: skip
    # sparse-ReLU-MAML: rates lr * relu(m) with m ~ U(-2, 2): about half start at zero and
    # the others average lr, while m lives on the same O(1) scale as the binary masks, so the
    # same mask learning rate suits both.
    return LearnedRates(s.shapes, gate="relu", scale=s.lr, init="centred", init_value=2.0,
                        granularity=s.granularity)  # fmt: skip


register_modulation("fixed", lambda s: FixedRate(s.lr), "one fixed rate (MAML)")
register_modulation("learned_rates", _learned_rates, "learned per-parameter rates (Meta-SGD)")
register_modulation("binary_mask", _binary_mask, "learned binary masks, straight-through")
register_modulation("relu_rates", _relu_rates, "rectified learned rates (sparse-ReLU-MAML, "
                    "La-MAML)")  # fmt: skip
register_modulation("per_step_rates", lambda s: PerStepRates(s.shapes, s.lr, s.steps),
                    "learned rates per tensor and inner step (MAML++'s LSLR)")  # fmt: skip
