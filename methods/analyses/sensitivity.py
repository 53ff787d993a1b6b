"""How much a causal layer's output at position t depends on each earlier input: the
sensitivity norms ||d f_t / d s_t'|| (t' <= t) by which the thesis reads a first softmax
layer as a copy of the previous state (thesis sec. 3.5.1, Figs. 3.4B and 3.8A).

Computed with ``torch.func`` in forward mode (a Jacobian per sequence, vmapped over the
batch): a ``[T, W]`` output of a ``[T, D]`` sequence has a ``[T, W, T, D]`` Jacobian, ~1M
numbers at the thesis' T = 50, D = 10, so a few dozen sequences suffice. Forward mode pushes
the T x D = 490 input directions through the layer where reverse mode pulled back its
T x W = 1,764 outputs: on the 7-layer hybrid-linear's first layer, 32 sequences took 3.4 GB
over the process and 2.4 s, where ``jacrev`` took 13 GB and 6 s (three such cells side by
side were killed for memory), the same norms to float32 rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def sensitivity_norms(fn: Callable[[Tensor], Tensor], sequences: Tensor) -> Tensor:
    """``[B, T, T]``: the Frobenius norm of d fn(s)_t / d s_t' for each sequence ``s`` of
    ``sequences`` (``[B, T, D]``), output position t (rows) against input position t'
    (columns). ``fn`` maps one ``[T, D]`` sequence to its ``[T, W]`` outputs."""
    jacobian = torch.func.vmap(torch.func.jacfwd(fn))(sequences)  # [B, T, W, T, D]
    return jacobian.pow(2).sum(dim=(2, 4)).sqrt()


def previous_share(norms: Tensor) -> float:
    """The share of the sensitivity to earlier inputs that falls on the previous one:
    ||d f_t / d s_t-1|| over the sum of ||d f_t / d s_t'|| for t' < t, averaged over
    sequences and positions t >= 2 (at t = 1 the previous input is the only earlier one).

    1 for a layer that copies s_t-1; 1/t at position t for one that averages every earlier
    input alike. The current input (t' = t) is left out: it reaches f_t through the residual
    whatever the layer learned. A position that depends on no earlier input scores 0.
    """
    previous = norms.diagonal(offset=-1, dim1=1, dim2=2)[:, 1:]  # t = 2..T-1
    earlier = norms.tril(diagonal=-1).sum(-1)[:, 2:]
    share = torch.where(earlier > 0, previous / earlier.clamp_min(1e-300), 0.0)
    return share.mean().item()


def neighbour_share(norms: Tensor, rows: slice, offset: int) -> float:
    """The share of an output's sensitivity to the other inputs that falls on its neighbour
    ``offset`` positions on: ||d f_t / d s_t+offset|| over the sum of ||d f_t / d s_t'||
    for t' != t, averaged over sequences and the positions ``rows`` selects (each must have
    that neighbour). 1 for a layer that copies the neighbour into each of those; about
    1 / (T - 1) for one that reads every other token alike. The token itself is left out,
    as in :func:`previous_share` (the residual)."""
    positions = torch.arange(norms.shape[-1], device=norms.device)[rows]
    read = norms[:, positions]  # [B, P, T]
    mine = torch.arange(len(positions), device=norms.device)
    neighbour = read[:, mine, positions + offset]
    others = read.sum(-1) - read[:, mine, positions]
    share = torch.where(others > 0, neighbour / others.clamp_min(1e-300), 0.0)
    return share.mean().item()


def with_sensitivity(predict, sx: Tensor, sy: Tensor, qx: Tensor) -> tuple[Tensor, Tensor]:
    """``predict(sx, sy, qx)`` and its gradient with respect to each query, d y_hat / d x_q
    (an in-context learner's sensitivity; ICML'23 sec. 3)."""
    # Queries never interact, so one backward of the summed predictions gives every
    # query's own gradient.
    qx = qx.detach().requires_grad_(True)
    with torch.enable_grad():
        pred = predict(sx, sy, qx)
        (sens,) = torch.autograd.grad(pred.sum(), qx)
    return pred.detach(), sens
