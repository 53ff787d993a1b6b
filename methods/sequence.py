"""Causal sequence learners for autoregressive tasks: mesa layers or causal linear attention.

Tokens are constructed as e_t = (s_t, s_{t-1}) (s_0 = 0), so that one layer can regress
s_t on s_{t-1} in context and apply the result to s_t; a linear readout predicts s_{t+1}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from benchmarks.config import ConfigError, param
from datasets.tasks import Problem
from methods.icl import InContextMethod
from methods.mesa import CausalMixer, MesaLayer
from methods.registry import register_method


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
    heads: int = param(1, min=1)
    lam: float = param(1.0, min=1e-6, help="initial ridge strength of mesa layers")
    init_std: float = param(0.02, min=0.0)
    lr: float = param(1e-3, min=0.0)
    grad_clip: float = param(1.0, min=0.0)


class SequenceLearner(InContextMethod):
    """A stack of causal mixers over constructed tokens, with a linear readout."""

    Config = SequenceConfig

    @classmethod
    def check_problem(cls, problem: Problem) -> None:
        if not problem.causal:
            raise ConfigError("sequence learners need a causal sequence benchmark (e.g. lindyn)")

    def build_model(self, dim: int) -> nn.Module:
        c = self.config

        def layer() -> CausalMixer:
            if c.mixer == "mesa":
                return MesaLayer(2 * dim, c.heads, lam=c.lam, init_std=c.init_std)
            return CausalLinearAttention(2 * dim, c.heads, init_std=c.init_std)

        model = nn.Module()
        model.layers = nn.ModuleList(layer() for _ in range(c.layers))
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
