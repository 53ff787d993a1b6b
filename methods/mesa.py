"""The mesa layer: attention that solves a ridge regression in its forward pass.

Per head, at every step t: W_t = argmin_W 0.5 sum_{t'<=t} ||v_t' - W k_t'||^2 + ||W||^2/(2 lam),
i.e. W_t = (sum v k^T) R_t with R_t = (sum k k^T + I/lam)^-1, and the output is P W_t q_t.
Two forms compute the same causal outputs:

- ``recurrent``: recursive least squares (Sherman-Morrison updates of R_t from
  R_0 = lam I), O(d^2) state per head;
- ``parallel``: cumulative sums of k k^T and v k^T and one batched solve per step (training).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn


class MesaState:
    """Recurrent mesa inference, one token at a time: the state is R_t (``[B, d, d]``) and
    W_t (``[B, e, d]``), whatever the sequence length."""

    def __init__(self, lam: Tensor, key_dim: int, value_dim: int, like: Tensor):
        batch = lam.shape[0]
        eye = torch.eye(key_dim, dtype=like.dtype, device=like.device)
        self.inverse = lam.view(-1, 1, 1) * eye.expand(batch, key_dim, key_dim)  # R_0 = lam I
        self.weights = like.new_zeros(batch, value_dim, key_dim)  # W_0 = 0

    def step(self, k: Tensor, v: Tensor, q: Tensor) -> Tensor:
        """``[B, d]`` key and query, ``[B, e]`` value -> ``[B, e]`` output W_t q_t."""
        # Recursive least squares (Sherman-Morrison on R, O(d^2)): with the gain
        # g = R_{t-1} k / (1 + k^T R_{t-1} k), W_t = W_{t-1} + (v - W_{t-1} k) g^T and
        # R_t = R_{t-1} - g (R_{t-1} k)^T; W_t equals (sum v k^T) R_t exactly. Outer
        # products as broadcast products: on d ~ 10 they beat batched matmuls.
        rk = torch.bmm(self.inverse, k[..., None])[..., 0]
        gain = rk / (1 + (k * rk).sum(dim=1, keepdim=True))
        error = v - torch.bmm(self.weights, k[..., None])[..., 0]
        self.weights = torch.addcmul(self.weights, error[:, :, None], gain[:, None, :])
        self.inverse = torch.addcmul(self.inverse, gain[:, :, None], rk[:, None, :], value=-1)
        return torch.bmm(self.weights, q[..., None])[..., 0]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.inverse, self.weights))


def mesa_recurrent(keys: Tensor, values: Tensor, queries: Tensor, lam: Tensor) -> Tensor:
    """``[B, T, d]`` keys/queries, ``[B, T, e]`` values -> ``[B, T, e]`` outputs W_t q_t."""
    state = MesaState(lam, keys.shape[-1], values.shape[-1], keys)
    outputs = [state.step(keys[:, t], values[:, t], queries[:, t]) for t in range(keys.shape[1])]
    return torch.stack(outputs, dim=1)


def mesa_parallel(keys: Tensor, values: Tensor, queries: Tensor, lam: Tensor) -> Tensor:
    """The same outputs from cumulative sums and a batched solve at every step."""
    d = keys.shape[-1]
    eye = torch.eye(d, dtype=keys.dtype, device=keys.device)
    gram = torch.cumsum(keys[..., :, None] * keys[..., None, :], dim=1)  # [B, T, d, d]
    gram = gram + eye / lam.view(-1, 1, 1, 1)
    memory = torch.cumsum(values[..., :, None] * keys[..., None, :], dim=1)  # [B, T, e, d]
    solved = torch.linalg.solve(gram, queries[..., None])  # R_t q_t (gram is symmetric)
    return (memory @ solved)[..., 0]


class CausalMixer(nn.Module):
    """Per-head key, query and value projections, a causal mix, and a residual projection P.

    Subclasses define ``mix(keys, values, queries)`` on ``[H, B, T, .]`` tensors.
    """

    def __init__(
        self, dim: int, heads: int = 1, head_dim: int | None = None, init_std: float = 0.02
    ):
        super().__init__()
        head_dim = head_dim or dim
        self.heads, self.head_dim = heads, head_dim

        def weights(rows: int, cols: int) -> nn.Parameter:
            return nn.Parameter(init_std * torch.randn(heads, rows, cols))

        self.key, self.query = weights(head_dim, dim), weights(head_dim, dim)
        self.value, self.projection = weights(dim, dim), weights(dim, dim)

    def mix(self, keys: Tensor, values: Tensor, queries: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, tokens: Tensor) -> Tensor:
        k = torch.einsum("hkd,btd->hbtk", self.key, tokens)
        q = torch.einsum("hkd,btd->hbtk", self.query, tokens)
        v = torch.einsum("hed,btd->hbte", self.value, tokens)
        out = self.mix(k, v, q)  # [H, B, T, D]
        return tokens + torch.einsum("hed,hbtd->bte", self.projection, out)


class MesaLayer(CausalMixer):
    """Multi-head causal mesa layer with a learnable ridge strength per head, residual."""

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        head_dim: int | None = None,
        lam: float = 1.0,
        init_std: float = 0.02,
        form: Literal["parallel", "recurrent"] = "parallel",
    ):
        super().__init__(dim, heads, head_dim, init_std)
        self.form = form
        self.log_lam = nn.Parameter(torch.full((heads,), float(torch.log(torch.tensor(lam)))))

    def mix(self, keys: Tensor, values: Tensor, queries: Tensor) -> Tensor:
        heads, batch = keys.shape[:2]
        lam = self.log_lam.exp().repeat_interleave(batch)
        solve = mesa_parallel if self.form == "parallel" else mesa_recurrent
        out = solve(keys.flatten(0, 1), values.flatten(0, 1), queries.flatten(0, 1), lam)
        return out.unflatten(0, (heads, batch))
