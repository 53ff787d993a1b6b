"""Tokens for in-context learners, shared with the reference algorithms so that alignment
compares like with like.

Constructed tokens (von Oswald et al. 2023): a context token is e_i = (x_i, y_i), a query
token is (x_q, 0); a model's prediction is read as minus the y-slot of the query token. A
vector-valued target (``outputs`` > 1) has a y-slot of that width (Sushma et al.).
"""

from __future__ import annotations

import torch
from torch import Tensor


def context_tokens(support_x: Tensor, support_y: Tensor) -> Tensor:
    """``[T, N, d]`` and ``[T, N, m]`` -> ``[T, N, d + m]``."""
    return torch.cat([support_x, support_y], dim=-1)


def query_tokens(query_x: Tensor, outputs: int = 1) -> Tensor:
    """``[T, Q, d]`` -> ``[T, Q, d + m]`` with a zero y-slot of width ``outputs``."""
    zeros = query_x.new_zeros((*query_x.shape[:-1], outputs))
    return torch.cat([query_x, zeros], dim=-1)


def read_prediction(queries: Tensor, outputs: int = 1) -> Tensor:
    """Minus the y-slot of the (transformed) query tokens: ``[T, Q, d + m]`` -> ``[T, Q, m]``."""
    return -queries[..., -outputs:]


def natural_context(support_x: Tensor, support_y: Tensor) -> Tensor:
    """The context x_1, y_1, ..., x_N, y_N as tokens of width d + m (x tokens (x, 0), y tokens
    (0, y)): ``[T, 2N, d + m]``."""
    tasks, n, d = support_x.shape
    width = d + support_y.shape[-1]
    x_tokens = torch.cat([support_x, torch.zeros_like(support_y)], dim=-1)
    y_tokens = torch.cat([torch.zeros_like(support_x), support_y], dim=-1)
    return torch.stack([x_tokens, y_tokens], dim=2).reshape(tasks, 2 * n, width)


def _one_sequence_per_query(context: Tensor, query_x: Tensor) -> Tensor:
    """``context`` ``[T, L, d + m]`` followed by each query token (x_q, 0):
    ``[T * Q, L + 1, d + m]``."""
    tasks, length, width = context.shape
    queries = query_x.shape[1]
    context = context.unsqueeze(1).expand(tasks, queries, length, width)
    last = query_tokens(query_x, width - query_x.shape[-1]).unsqueeze(2)  # [T, Q, 1, d + m]
    return torch.cat([context, last], dim=2).reshape(tasks * queries, length + 1, width)


def pair_tokens(support_x: Tensor, support_y: Tensor, query_x: Tensor) -> Tensor:
    """The constructed tokens as a sequence, one per query: (x_1, y_1), ..., (x_N, y_N),
    (x_q, 0): ``[T * Q, N + 1, d + m]``."""
    return _one_sequence_per_query(context_tokens(support_x, support_y), query_x)


def interleaved_tokens(support_x: Tensor, support_y: Tensor, query_x: Tensor) -> Tensor:
    """The natural sequence x_1, y_1, ..., x_N, y_N, x_q, one sequence per query:
    ``[T * Q, 2N + 1, d + m]``."""
    return _one_sequence_per_query(natural_context(support_x, support_y), query_x)
