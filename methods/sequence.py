"""Causal sequence learners for autoregressive tasks: mesa layers or causal linear attention.

Tokens are constructed as e_t = (s_t, s_{t-1}) (s_0 = 0), so that one layer can regress
s_t on s_{t-1} in context and apply the result to s_t; a linear readout predicts s_{t+1}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from mesabench_core import ConfigError, param
from mesabench_datasets.tasks import Problem
from methods.icl import InContextMethod
from methods.mesa import CausalMixer, MesaLayer
from methods.registry import register_method


class CausalSoftmaxAttention(CausalMixer):
    """Causal softmax self-attention (scaled dot products), the first layer of hybrid stacks."""

    def mix(self, keys: Tensor, values: Tensor, queries: Tensor) -> Tensor:
        steps = keys.shape[2]
        future = torch.ones(steps, steps, dtype=torch.bool, device=keys.device).triu(1)
        scores = (queries @ keys.transpose(-1, -2)) / keys.shape[-1] ** 0.5
        return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ values


class CausalLinearAttention(CausalMixer):
    """Causal linear self-attention, out_t = P (sum_{t'<=t} v_t' k_t'^T) q_t: the mesa layer
    without the inverse, i.e. one gradient step instead of the ridge solution."""

    def mix(self, keys: Tensor, values: Tensor, queries: Tensor) -> Tensor:
        memory = torch.cumsum(values[..., :, None] * keys[..., None, :], dim=2)  # [H,B,T,e,k]
        return (memory @ queries[..., None])[..., 0]


@dataclass(frozen=True)
class SequenceConfig:
    mixer: Literal["mesa", "linear"] = "mesa"
    layers: int = param(1, min=1)
    first_layer: Literal["same", "softmax"] = param(
        "same", help="softmax: a hybrid stack, causal softmax attention then the mixer"
    )
    mesa_form: Literal["parallel", "chunked", "recurrent"] = param(
        "parallel", help="how mesa layers compute (same outputs; chunked uses O(d^2) memory)"
    )
    heads: int = param(1, min=1)
    lam: float = param(1.0, min=1e-6, help="initial ridge strength of mesa layers")
    init_std: float = param(0.02, min=0.0)
    lr: float = param(1e-3, min=0.0)
    grad_clip: float = param(1.0, min=0.0)


class SequenceLearner(InContextMethod):
    """A stack of causal mixers over constructed tokens, with a linear readout; with
    ``first_layer=softmax`` the first is causal softmax attention (a hybrid stack)."""

    Config = SequenceConfig

    @classmethod
    def check_problem(cls, problem: Problem) -> None:
        if not problem.causal:
            raise ConfigError("sequence learners need a causal sequence benchmark (e.g. lindyn)")

    def build_model(self, dim: int) -> nn.Module:
        c = self.config

        def layer(k: int) -> CausalMixer:
            if k == 0 and c.first_layer == "softmax":
                return CausalSoftmaxAttention(2 * dim, c.heads, init_std=c.init_std)
            if c.mixer == "mesa":
                return MesaLayer(2 * dim, c.heads, lam=c.lam, init_std=c.init_std, form=c.mesa_form)
            return CausalLinearAttention(2 * dim, c.heads, init_std=c.init_std)

        model = nn.Module()
        model.layers = nn.ModuleList(layer(k) for k in range(c.layers))
        model.readout = nn.Linear(2 * dim, dim)
        return model

    def forward(self, support_x: Tensor, support_y: Tensor, query_x: Tensor) -> Tensor:
        previous = torch.cat([torch.zeros_like(query_x[:, :1]), query_x[:, :-1]], dim=1)
        tokens = torch.cat([query_x, previous], dim=-1)
        for layer in self.model.layers:
            tokens = layer(tokens)
        return self.model.readout(tokens)


register_method(
    "mesa",
    SequenceLearner,
    "mesa-layer transformer (ridge solved in the forward pass), causal sequence tasks",
)
register_method(
    "causal_lsa", SequenceLearner, "causal linear self-attention on sequence tasks", mixer="linear"
)
