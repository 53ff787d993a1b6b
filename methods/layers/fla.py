"""Sequence layers from the field, as causal mixers: DeltaNet and gated linear attention,
their recurrences taken from flash-linear-attention (``fla-core``) rather than written again.

On a GPU in a bf16 run the library's chunked Triton kernels run (fla 0.6's chunked delta
rule refuses float32, as a run on an H200 showed); in float32, and on the CPU, its
pure-PyTorch recurrences (``fla.ops.*.naive``), which autograd differentiates. Both take
``[B, T, H, .]`` or ``[B, H, T, .]`` layouts as noted; ours are ``[H, B, T, .]``.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from methods.layers.mesa import CausalMixer

with warnings.catch_warnings():
    # fla says once, at import, that Triton has no GPU here and its ops fall back to the CPU.
    warnings.filterwarnings("ignore", message="Triton is not supported")
    from fla.ops.delta_rule import chunk_delta_rule
    from fla.ops.delta_rule.naive import delta_rule_recurrence
    from fla.ops.gla import chunk_gla
    from fla.ops.gla.naive import naive_recurrent_gla

#: GLA's gate temperature: log-sigmoid gates divided by it, as in the GLA paper's layer
#: (Yang et al. 2024, "Gated linear attention transformers", sec. 4.4).
GLA_GATE_NORMALISER = 16.0


def _kernel_dtype(q: Tensor) -> torch.dtype | None:
    """The half precision fla's chunked kernels run at: that of a bf16 autocast on a GPU,
    else None (float32: the pure-PyTorch recurrence, exact in the run's own precision)."""
    if q.is_cuda and torch.is_autocast_enabled("cuda"):
        dtype = torch.get_autocast_dtype("cuda")
        return dtype if dtype in (torch.bfloat16, torch.float16) else None
    return None


def delta_rule(q: Tensor, k: Tensor, v: Tensor, beta: Tensor) -> Tensor:
    """The delta rule S_t = S_{t-1} + beta_t (v_t - S_{t-1} k_t) k_t^T, out_t = S_t q_t / sqrt(d)
    on ``[B, H, T, .]`` tensors (``beta``: ``[B, H, T]``)."""
    half = _kernel_dtype(q)
    if half is not None:
        out, _ = chunk_delta_rule(*(t.transpose(1, 2).to(half) for t in (q, k, v, beta)))
        return out.transpose(1, 2)
    return delta_rule_recurrence(q, k, v, beta, output_final_state=False)[0]


def gated_linear_attention(q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor) -> Tensor:
    """S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, out_t = S_t^T q_t / sqrt(d) on ``[B, H, T, .]``
    tensors (``log_gate``: ``[B, H, T, d_k]``, at most 0)."""
    q, k, v, log_gate = (t.transpose(1, 2) for t in (q, k, v, log_gate))
    half = _kernel_dtype(q)
    if half is not None:  # the gates' cumulative sums stay in float32, as fla keeps them
        out, _ = chunk_gla(q.to(half), k.to(half), v.to(half), log_gate.float())
    else:
        out, _ = naive_recurrent_gla(q, k, v, log_gate)
    return out.transpose(1, 2)


class DeltaNetLayer(CausalMixer):
    """DeltaNet (Yang et al. 2024, "Parallelizing linear transformers with the delta rule"):
    L2-normalised keys and queries, a write strength beta_t = sigmoid(w . e_t) per head."""

    def __init__(self, dim: int, heads: int = 1, init_std: float = 0.02):
        super().__init__(dim, heads, init_std=init_std)
        self.beta = nn.Parameter(init_std * torch.randn(heads, dim))
        self.beta_bias = nn.Parameter(torch.zeros(heads, 1, 1))

    def mix(self, keys: Tensor, values: Tensor, queries: Tensor, tokens: Tensor) -> Tensor:
        beta = torch.sigmoid(torch.einsum("hd,btd->hbt", self.beta, tokens) + self.beta_bias)
        q, k = F.normalize(queries, dim=-1), F.normalize(keys, dim=-1)
        out = delta_rule(*(t.transpose(0, 1) for t in (q, k, values, beta)))
        return out.transpose(0, 1)


class GatedLinearAttentionLayer(CausalMixer):
    """Gated linear attention (Yang et al. 2024): a data-dependent decay per key dimension,
    g_t = log sigmoid(W_g e_t) / 16, on the memory of a linear-attention layer."""

    def __init__(self, dim: int, heads: int = 1, init_std: float = 0.02):
        super().__init__(dim, heads, init_std=init_std)
        self.gate = nn.Parameter(init_std * torch.randn(heads, self.head_dim, dim))
        self.gate_bias = nn.Parameter(torch.zeros(heads, 1, 1, self.head_dim))

    def mix(self, keys: Tensor, values: Tensor, queries: Tensor, tokens: Tensor) -> Tensor:
        gate = torch.einsum("hkd,btd->hbtk", self.gate, tokens) + self.gate_bias
        log_gate = F.logsigmoid(gate) / GLA_GATE_NORMALISER
        batch_first = (t.transpose(0, 1) for t in (queries, keys, values, log_gate))
        return gated_linear_attention(*batch_first).transpose(0, 1)
