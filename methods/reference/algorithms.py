"""The exact algorithms in-context learners are claimed to emulate, on the same tokens.

GD and GD++ are written in token form (a y-slot that accumulates ``-w.x``), so that a
constructed LSA layer and the algorithm compute the same thing by different code; ridge and
least squares are solved exactly with ``torch.linalg``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def gd_token_predict(
    support_x: Tensor,
    support_y: Tensor,
    query_x: Tensor,
    etas: Sequence[float] | Tensor,
    gammas: Sequence[float] | Tensor | None = None,
) -> Tensor:
    """K steps of GD from w = 0 on (1/2N) sum (w.x_i - y_i)^2, step k with rate ``etas[k]``;
    with ``gammas`` (GD++) every step also maps x <- (I - gamma_k sum_i x_i x_i^T) x for the
    context and the queries. Returns predictions ``[T, Q, 1]``."""
    x, y, xq = support_x, support_y, query_x
    yq = torch.zeros_like(query_x[..., :1])
    n = x.shape[1]
    for k in range(len(etas)):
        xy = x.transpose(1, 2) @ y  # [T, d, 1] = sum_i x_i y_i
        y_next = y - (etas[k] / n) * (x @ xy)
        yq = yq - (etas[k] / n) * (xq @ xy)
        if gammas is not None:
            gram = x.transpose(1, 2) @ x  # sum_i x_i x_i^T
            x, xq = x - gammas[k] * (x @ gram), xq - gammas[k] * (xq @ gram)
        y = y_next
    return -yq


def ridge_predict(support_x: Tensor, support_y: Tensor, query_x: Tensor, lam: float) -> Tensor:
    """w = argmin ||X w - y||^2 + lam ||w||^2 per task (``lam = 0``: minimum-norm least
    squares), predictions ``[T, Q, 1]``."""
    if lam == 0:
        w = torch.linalg.pinv(support_x) @ support_y
    else:
        d = support_x.shape[-1]
        gram = support_x.transpose(1, 2) @ support_x + lam * torch.eye(
            d, dtype=support_x.dtype, device=support_x.device
        )
        w = torch.linalg.solve(gram, support_x.transpose(1, 2) @ support_y)
    return query_x @ w


def optimal_one_step_rate(
    support_x: Tensor, support_y: Tensor, query_x: Tensor, query_y: Tensor
) -> tuple[Tensor, Tensor]:
    """Sufficient statistics of the empirical optimal one-step rate over a task batch:
    eta* = N sum y_q s / sum s^2 with s = sum_i y_i x_i.x_q (derived:
    the least-squares rate of one GD step over a task sample)."""
    s = query_x @ (support_x.transpose(1, 2) @ support_y)  # [T, Q, 1]
    return (query_y * s).sum(), s.pow(2).sum()


def previous_states(sequence: Tensor) -> Tensor:
    """``[B, T, D]`` states s_1..s_T -> s_0..s_{T-1}, with s_0 = 0."""
    return torch.cat([torch.zeros_like(sequence[:, :1]), sequence[:, :-1]], dim=1)


def autoregressive_gradient(sequence: Tensor) -> Tensor:
    """``[B, T, D]`` -> ``[B, T, D]``: u_t = sum_{t'<=t} s_t' (s_{t'-1} . s_t), minus the
    gradient at W = 0 of 0.5 sum ||s_t' - W s_{t'-1}||^2 over the transitions seen by step t,
    applied to s_t (0 at t = 1, before any transition)."""
    # (s_t . s_{t'-1}) kept for t' <= t: a causal linear attention with keys s_{t-1}, no
    # [B, T, D, D] cumulative memory.
    return (sequence @ previous_states(sequence).transpose(1, 2)).tril() @ sequence
