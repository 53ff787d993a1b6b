"""Linear self-attention (LSA) over constructed tokens, and the weights that make it GD.

A layer updates every token j by ``e_j += sum_h P_h W_V,h sum_i e_i (W_K,h e_i).(W_Q,h e_j)``
with keys and values from the context tokens only, no softmax, no scaling, no normalisation
(von Oswald et al. 2023). Queries never attend to each other, so all queries of a task are
transformed at once.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class LinearSelfAttention(nn.Module):
    """One multi-head LSA layer on tokens of width ``dim``."""

    def __init__(self, dim: int, heads: int = 1, init_std: float = 0.002, softmax: bool = False):
        super().__init__()
        self.softmax = softmax

        def weights() -> nn.Parameter:
            return nn.Parameter(init_std * torch.randn(heads, dim, dim))

        self.key, self.query, self.value, self.projection = (weights() for _ in range(4))

    def forward(self, context: Tensor, queries: Tensor) -> tuple[Tensor, Tensor]:
        tokens = torch.cat([context, queries], dim=1) + self.update(context, queries)
        return tokens[:, : context.shape[1]], tokens[:, context.shape[1] :]

    def update(self, context: Tensor, queries: Tensor) -> Tensor:
        """The residual update of every token, ``[T, N + Q, D]``."""
        tokens = torch.cat([context, queries], dim=1)  # [T, N + Q, D]
        keys = torch.einsum("hde,tne->thnd", self.key, context)
        values = torch.einsum("hde,tne->thnd", self.value, context)
        asks = torch.einsum("hde,tme->thmd", self.query, tokens)
        scores = asks @ keys.transpose(-1, -2)  # [T, H, N + Q, N]
        if self.softmax:
            scores = scores.softmax(dim=-1)
        mixed = scores @ values  # [T, H, N + Q, D]
        return torch.einsum("hde,thme->tmd", self.projection, mixed)


def attention_products(layer: LinearSelfAttention) -> tuple[Tensor, Tensor]:
    """Per head, the two products a linear layer's function depends on: W_K^T W_Q and
    P W_V (``[H, D, D]`` each); the update of token j is P W_V sum_i e_i e_i^T W_K^T W_Q e_j."""
    return layer.key.mT @ layer.query, layer.projection @ layer.value


def update_from_products(key_query: Tensor, proj_value: Tensor, context: Tensor, queries: Tensor):
    """The linear layer's residual update of the queries from its products (one head each)."""
    gram = context.mT @ context  # sum_i e_i e_i^T: [T, D, D]
    return torch.einsum("hde,tef,hfg,tqg->tqd", proj_value, gram, key_query, queries)


class LSABlock(nn.Module):
    """An attention layer with the usual transformer options: pre-LayerNorm on what the
    attention reads, and a residual MLP after it. With both off it is the bare layer, so
    the constructions above still apply."""

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        init_std: float = 0.002,
        softmax: bool = False,
        layernorm: bool = False,
        mlp_width: int = 0,
    ):
        super().__init__()
        self.attention = LinearSelfAttention(dim, heads, init_std, softmax)
        self.norm = nn.LayerNorm(dim) if layernorm else nn.Identity()
        self.mlp = None
        if mlp_width:
            self.mlp = nn.Sequential(
                nn.LayerNorm(dim) if layernorm else nn.Identity(),
                nn.Linear(dim, mlp_width),
                nn.GELU(),
                nn.Linear(mlp_width, dim),
            )

    def forward(self, context: Tensor, queries: Tensor) -> tuple[Tensor, Tensor]:
        tokens = torch.cat([context, queries], dim=1)
        tokens = tokens + self.attention.update(self.norm(context), self.norm(queries))
        if self.mlp is not None:
            tokens = tokens + self.mlp(tokens)
        return tokens[:, : context.shape[1]], tokens[:, context.shape[1] :]


def gd_construction(dim: int, eta: float, context_size: int) -> dict[str, Tensor]:
    """Proposition 1: one LSA layer (1 head) = one GD step from w = 0 with rate ``eta`` on
    (1/2N) sum (w.x_i - y_i)^2, for tokens (x, y) with x in R^dim."""
    width = dim + 1
    select_x = torch.zeros(width, width)
    select_x[:dim, :dim] = torch.eye(dim)
    value = torch.zeros(width, width)
    value[dim, dim] = -1.0  # (x, y) -> (0, w0.x - y) with w0 = 0
    projection = torch.zeros(width, width)
    projection[dim, dim] = eta / context_size
    return {
        "key": select_x[None],
        "query": select_x[None],
        "value": value[None],
        "projection": projection[None],
    }


def gdpp_construction(dim: int, eta: float, gamma: float, context_size: int) -> dict[str, Tensor]:
    """GD++: a GD head plus a head that transforms x_j <- (I - gamma sum_i x_i x_i^T) x_j."""
    gd = gd_construction(dim, eta, context_size)
    width = dim + 1
    select_x = gd["key"][0]
    projection = torch.zeros(width, width)
    projection[:dim, :dim] = -gamma * torch.eye(dim)
    second = {"key": select_x, "query": select_x, "value": select_x, "projection": projection}
    return {name: torch.stack([gd[name][0], second[name]]) for name in gd}
