"""The mesa layer: attention that solves a ridge regression in its forward pass.

Per head, at every step t: W_t = argmin_W 0.5 sum_{t'<=t} ||v_t' - W k_t'||^2 + ||W||^2/(2 lam),
i.e. W_t = (sum v k^T) R_t with R_t = (sum k k^T + I/lam)^-1, and the output is P W_t q_t.
Three forms compute the same causal outputs:

- ``recurrent``: Sherman-Morrison updates of R_t from R_0 = lam I, O(d^2) state per head,
  one token at a time (``MesaState.step``);
- ``chunked``: the same state advanced a block of C tokens at a time with the Woodbury
  identity (``MesaState.block``); every token's output is still exact, the state still
  O(d^2), and a block costs about a dozen operations instead of about nine per token;
- ``parallel``: cumulative sums of k k^T and v k^T and one batched solve per step (training).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor, nn


class MesaState:
    """Recurrent mesa inference: the state is R_t (``[B, d, d]``) and the memory
    S_t = sum v k^T (``[B, e, d]``), whatever the sequence length; the output is S_t R_t q_t.
    Advance it one token at a time (``step``) or a block of tokens at a time (``block``)."""

    def __init__(self, lam: Tensor, key_dim: int, value_dim: int, like: Tensor):
        batch = lam.shape[0]
        eye = torch.eye(key_dim, dtype=like.dtype, device=like.device)
        self.inverse = lam.view(-1, 1, 1) * eye.expand(batch, key_dim, key_dim)  # R_0 = lam I
        self.memory = like.new_zeros(batch, value_dim, key_dim)  # S_0 = 0
        self._constants: dict[int, Tensor] = {}  # per block size: the identity

    def step(self, k: Tensor, v: Tensor, q: Tensor) -> Tensor:
        """``[B, d]`` key and query, ``[B, e]`` value -> ``[B, e]`` output S_t R_t q_t."""
        # Sherman-Morrison: R_t = R_{t-1} - (R_{t-1} k)(R_{t-1} k)^T / (1 + k^T R_{t-1} k).
        # Outer products as broadcast products: on d ~ 10 they beat batched matmuls.
        rk = torch.bmm(self.inverse, k[..., None])[..., 0]
        gain = rk / (1 + (k * rk).sum(dim=1, keepdim=True))
        self.inverse = torch.addcmul(self.inverse, gain[:, :, None], rk[:, None, :], value=-1)
        self.memory = torch.addcmul(self.memory, v[:, :, None], k[:, None, :])
        return torch.bmm(self.memory, torch.bmm(self.inverse, q[..., None]))[..., 0]

    def block(self, k: Tensor, v: Tensor, q: Tensor) -> Tensor:
        """``[B, C, d]`` keys and queries, ``[B, C, e]`` values -> ``[B, C, e]`` outputs for
        the C tokens, equal to calling ``step`` on each in turn."""
        # Woodbury, the block form of Sherman-Morrison: with P = R_0 and the Cholesky factor
        # L of I + K P K^T, the prefix inverses are R_t = P - sum_{s<=t} p_s p_s^T with p_s
        # the rows of L^-1 K P (leading blocks of L factor the leading blocks of I + K P K^T).
        # So a_t = R_t q_t is P q_t minus a causal linear attention over the p_s, and
        # S_t a_t = S_0 a_t + sum_{s<=t} v_s (k_s . a_t).
        # torch.bmm rather than @ throughout: on these small matrices the generic matmul's
        # dispatch is a tenth of the block's time.
        eye = self._block_constants(k)
        kp, qp = torch.bmm(k, self.inverse), torch.bmm(q, self.inverse)
        gram = torch.baddbmm(eye, kp, k.mT)
        factor, _ = torch.linalg.cholesky_ex(gram)  # I + K P K^T is positive definite
        rows = torch.linalg.solve_triangular(factor, kp, upper=False)  # the p_s
        a = torch.baddbmm(qp, torch.bmm(q, rows.mT).tril_(), rows, alpha=-1)
        out = torch.baddbmm(torch.bmm(a, self.memory.mT), torch.bmm(a, k.mT).tril_(), v)
        self.inverse = torch.baddbmm(self.inverse, rows.mT, rows, alpha=-1)
        self.memory = torch.baddbmm(self.memory, v.mT, k)
        return out

    def _block_constants(self, k: Tensor) -> Tensor:
        size = k.shape[1]
        if size not in self._constants:
            self._constants[size] = torch.eye(size, dtype=k.dtype, device=k.device)
        return self._constants[size]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.inverse, self.memory))


def mesa_recurrent(keys: Tensor, values: Tensor, queries: Tensor, lam: Tensor) -> Tensor:
    """``[B, T, d]`` keys/queries, ``[B, T, e]`` values -> ``[B, T, e]`` outputs W_t q_t."""
    state = MesaState(lam, keys.shape[-1], values.shape[-1], keys)
    outputs = [state.step(keys[:, t], values[:, t], queries[:, t]) for t in range(keys.shape[1])]
    return torch.stack(outputs, dim=1)


def mesa_chunked(
    keys: Tensor, values: Tensor, queries: Tensor, lam: Tensor, chunk: int = 16
) -> Tensor:
    """The recurrent outputs, advancing the state ``chunk`` tokens at a time."""
    state = MesaState(lam, keys.shape[-1], values.shape[-1], keys)
    outputs = [
        state.block(keys[:, t : t + chunk], values[:, t : t + chunk], queries[:, t : t + chunk])
        for t in range(0, keys.shape[1], chunk)
    ]
    return torch.cat(outputs, dim=1)


def future_positions(steps: int, device: torch.device) -> Tensor:
    """``[T, T]`` boolean mask, true where position t' > t (what a causal layer may not read)."""
    return torch.ones(steps, steps, dtype=torch.bool, device=device).triu(1)


def mesa_parallel(keys: Tensor, values: Tensor, queries: Tensor, lam: Tensor) -> Tensor:
    """The same outputs from cumulative sums and a batched solve at every step."""
    d = keys.shape[-1]
    eye = torch.eye(d, dtype=keys.dtype, device=keys.device)
    gram = torch.cumsum(keys[..., :, None] * keys[..., None, :], dim=1)  # [B, T, d, d]
    gram = gram + eye / lam.view(-1, 1, 1, 1)
    solved = torch.linalg.solve(gram, queries[..., None])[..., 0]  # R_t q_t (gram symmetric)
    # sum_{t'<=t} v_t' (k_t' . R_t q_t) as a masked product: no [T, e, d] memory per sequence.
    future = future_positions(keys.shape[1], keys.device)
    return (solved @ keys.transpose(-1, -2)).masked_fill(future, 0.0) @ values


MESA_FORMS = {"parallel": mesa_parallel, "recurrent": mesa_recurrent, "chunked": mesa_chunked}


class CausalMixer(nn.Module):
    """Per-head key, query and value projections, a causal mix, and a residual projection P.

    Subclasses define ``mix(keys, values, queries, tokens)`` on ``[H, B, T, .]`` tensors
    (``tokens``, ``[B, T, D]``, for layers whose gates read the input).
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

    def mix(self, keys: Tensor, values: Tensor, queries: Tensor, tokens: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, tokens: Tensor) -> Tensor:
        return self.residual(tokens, tokens)

    def residual(self, tokens: Tensor, read: Tensor, mix: Callable | None = None) -> Tensor:
        """``tokens`` plus the layer's update computed from ``read`` (the tokens themselves,
        or a normalised copy of them: a pre-LayerNorm block). ``mix``, if given, stands in
        for the layer's own (an analysis replacing what the layer computes)."""
        k, q = self.keys_queries(read)
        v = torch.einsum("hed,btd->hbte", self.value, read)
        out = (mix or self.mix)(k, v, q, read)  # [H, B, T, D]
        return tokens + torch.einsum("hed,hbtd->bte", self.projection, out)

    def keys_queries(self, read: Tensor) -> tuple[Tensor, Tensor]:
        """The per-head keys and queries ``[H, B, T, k]`` of ``[B, T, D]`` tokens."""
        k = torch.einsum("hkd,btd->hbtk", self.key, read)
        return k, torch.einsum("hkd,btd->hbtk", self.query, read)


class MesaLayer(CausalMixer):
    """Multi-head causal mesa layer with a learnable ridge strength per head, residual."""

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        head_dim: int | None = None,
        lam: float = 1.0,
        init_std: float = 0.02,
        form: Literal["parallel", "recurrent", "chunked"] = "parallel",
    ):
        super().__init__(dim, heads, head_dim, init_std)
        self.form = form
        self.log_lam = nn.Parameter(torch.full((heads,), float(torch.log(torch.tensor(lam)))))

    def mix(self, keys: Tensor, values: Tensor, queries: Tensor, tokens: Tensor) -> Tensor:
        heads, batch = keys.shape[:2]
        lam = self.log_lam.exp().repeat_interleave(batch)
        out = MESA_FORMS[self.form](
            keys.flatten(0, 1), values.flatten(0, 1), queries.flatten(0, 1), lam
        )
        return out.unflatten(0, (heads, batch))
