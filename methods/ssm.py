"""Recurrent in-context learners on the natural token sequence x_1, y_1, ..., x_N, y_N, x_q.

- GD-SSM (Sushma et al.): a sliding window of 3 tokens (x_t, y_t, x_t+1), stride 2, a
  learnable 3x3 local linear attention A_t = sum_ab W_ab w_a w_b^T, a diagonal linear
  recurrence with a matrix state S_t = Lambda * S_t-1 + A_t, and a multiplicative output
  o_t = C S_t^T (sum_a D_a w_a). With W selecting (x_t, y_t), Lambda = 1, D selecting x_t+1
  and C = -(eta / N) I, the output at the query is exactly one GD step.
- S5-style control: a diagonal linear recurrence over single tokens, no local attention.
- LSTM / bidirectional LSTM baselines.

All read the prediction from the last (query) position as minus its y-slot, like LSA.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from benchmarks.config import param
from datasets.tokens import interleaved_tokens, read_prediction
from methods.icl import InContextMethod
from methods.registry import register_method


class GDSSMLayer(nn.Module):
    """One GD-SSM layer; ``forward`` returns the query position's updated token."""

    def __init__(self, dim: int, init_std: float = 0.02):
        super().__init__()
        self.local = nn.Parameter(init_std * torch.randn(3, 3))  # W
        self.decay = nn.Parameter(torch.ones(dim, dim))  # Lambda (elementwise on the state)
        self.readout = nn.Parameter(init_std * torch.randn(dim, dim))  # C
        self.select = nn.Parameter(init_std * torch.randn(3))  # D

    def windows(self, tokens: Tensor) -> Tensor:
        """``[B, 2N + 1, D]`` -> ``[B, N, 3, D]`` windows (x_t, y_t, x_t+1), stride 2."""
        return tokens.unfold(1, 3, 2).transpose(-1, -2)

    def forward(self, tokens: Tensor) -> Tensor:
        win = self.windows(tokens)  # [B, N, 3, D]
        # A_t = sum_ac W_ac w_a w_c^T
        local = torch.einsum("ac,bnad,bnce->bnde", self.local, win, win)
        steps = local.shape[1]
        # Parallel form of S_t = Lambda * S_t-1 + A_t: S_N = sum_t Lambda^(N - t) * A_t.
        powers = torch.arange(steps - 1, -1, -1, device=tokens.device, dtype=tokens.dtype)
        decays = self.decay.unsqueeze(0) ** powers.view(-1, 1, 1)  # [N, D, D]
        state = (decays.unsqueeze(0) * local).sum(dim=1)  # [B, D, D]
        probe = torch.einsum("a,bad->bd", self.select, win[:, -1])  # sum_a D_a w_a, last window
        output = torch.einsum("ed,bfd,bf->be", self.readout, state, probe)  # C S^T probe
        return tokens[:, -1] + output


def gdssm_construction(dim: int, eta: float, context_size: int) -> dict[str, Tensor]:
    """Weights that make one GD-SSM layer one GD step from w = 0 (tokens of width dim + 1)."""
    width = dim + 1
    local = torch.zeros(3, 3)
    local[0, 1] = 1.0  # A_t = x_t y_t^T
    select = torch.tensor([0.0, 0.0, 1.0])  # the window's x_t+1 (the query at the end)
    return {
        "local": local,
        "decay": torch.ones(width, width),
        "readout": -(eta / context_size) * torch.eye(width),
        "select": select,
    }


class NaturalSequenceMethod(InContextMethod):
    """Shared forward: one interleaved sequence per query, prediction at the last token."""

    def final_token(self, tokens: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, support_x, support_y, query_x):
        tokens = interleaved_tokens(support_x, support_y, query_x)
        out = self.final_token(tokens)  # [T * Q, d + 1]
        return read_prediction(out).view(query_x.shape[0], query_x.shape[1], 1)


@dataclass(frozen=True)
class GDSSMConfig:
    init_std: float = param(0.02, min=0.0)
    lr: float = param(2e-4, min=0.0, help="AdamW lr (public code: 2e-4)")
    grad_clip: float = param(1.0, min=0.0)


class GDSSM(NaturalSequenceMethod):
    """One GD-SSM layer (Sushma et al.)."""

    Config = GDSSMConfig

    def build_model(self, dim: int) -> nn.Module:
        return GDSSMLayer(dim + 1, self.config.init_std)

    def final_token(self, tokens: Tensor) -> Tensor:
        return self.model(tokens)


@dataclass(frozen=True)
class RecurrentConfig:
    hidden: int = param(64, min=1)
    layers: int = param(1, min=1)
    lr: float = param(1e-3, min=0.0)
    grad_clip: float = param(1.0, min=0.0)


class DiagonalSSM(nn.Module):
    """h_t = lambda * h_t-1 + B z_t (lambda in (0, 1) per channel), output C h_t."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.logit = nn.Parameter(torch.linspace(-2.0, 4.0, hidden))  # sigmoid: decays
        self.inp = nn.Linear(dim, hidden, bias=False)
        self.out = nn.Linear(hidden, dim, bias=False)

    def forward(self, tokens: Tensor) -> Tensor:
        decay = torch.sigmoid(self.logit)
        drive = self.inp(tokens)  # [B, L, H]
        steps = tokens.shape[1]
        powers = torch.arange(steps - 1, -1, -1, device=tokens.device, dtype=tokens.dtype)
        state = (decay ** powers.view(-1, 1) * drive).sum(dim=1)  # h_L, parallel form
        return tokens[:, -1] + self.out(state)


class S5Control(NaturalSequenceMethod):
    """S5-style diagonal SSM without local attention (the GD-SSM paper's control)."""

    Config = RecurrentConfig

    def build_model(self, dim: int) -> nn.Module:
        return nn.ModuleList(
            DiagonalSSM(dim + 1, self.config.hidden) for _ in range(self.config.layers)
        )

    def final_token(self, tokens: Tensor) -> Tensor:
        for k, layer in enumerate(self.model):
            last = layer(tokens)
            if k + 1 < len(self.model):
                tokens = torch.cat([tokens[:, :-1], last.unsqueeze(1)], dim=1)
        return last


class LSTMBaseline(NaturalSequenceMethod):
    """(Bi)LSTM over the natural sequence with a linear readout at the query token."""

    Config = RecurrentConfig
    bidirectional = False

    def build_model(self, dim: int) -> nn.Module:
        c = self.config
        model = nn.Module()
        model.lstm = nn.LSTM(
            dim + 1, c.hidden, c.layers, batch_first=True, bidirectional=self.bidirectional
        )
        model.head = nn.Linear(c.hidden * (2 if self.bidirectional else 1), dim + 1)
        return model

    def final_token(self, tokens: Tensor) -> Tensor:
        out, _ = self.model.lstm(tokens)
        return tokens[:, -1] + self.model.head(out[:, -1])


class BiLSTMBaseline(LSTMBaseline):
    bidirectional = True


register_method(
    "gdssm",
    GDSSM,
    "GD-SSM: local 3-token attention + diagonal matrix-state recurrence (Sushma et al.)",
)
register_method("s5", S5Control, "S5-style diagonal SSM without local attention (control)")
register_method("lstm", LSTMBaseline, "LSTM over x_1, y_1, ..., x_q")
register_method("bilstm", BiLSTMBaseline, "bidirectional LSTM over x_1, y_1, ..., x_q")
