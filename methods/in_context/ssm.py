"""Recurrent in-context learners on the natural token sequence x_1, y_1, ..., x_N, y_N, x_q.

- GD-SSM (Sushma et al.), stackable: a sliding window of 3 tokens (x_t, y_t, x_t+1), stride 2, a
  learnable 3x3 local linear attention A_t = sum_ab W_ab w_a w_b^T, a diagonal linear
  recurrence with a matrix state S_t = Lambda * S_t-1 + A_t, and a multiplicative output
  o_t = C S_t^T (sum_a D_a w_a). With W selecting (x_t, y_t), Lambda = 1, D selecting x_t+1
  and C = -(eta / N) I, the output at the query is exactly one GD step.
- The same recurrence as a causal mixer on a token stream (``CausalGDSSM``, the ``gd_ssm``
  mixer of the causal sequence learners), for sequence tasks such as language modelling.
- S5-style control: a diagonal linear recurrence over single tokens, no local attention.
- LSTM / bidirectional LSTM baselines.

All read the prediction from the last (query) position as minus its y-slot, like LSA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mesabench_core import ConfigError, param
from mesabench_datasets.tokens import (
    interleaved_tokens,
    natural_context,
    pair_tokens,
    query_tokens,
    read_prediction,
)
from methods.analyses.sizes import AnalysisSettings
from methods.in_context.regression import InContextMethod, feature_map
from methods.layers.mesa import CausalMixer
from methods.registry import register_method


class GDSSMLayer(nn.Module):
    """One GD-SSM layer on a task's context x_1, y_1, ..., x_N, y_N and its queries.

    The windows inside the context are shared by every query, and the model is causal, so
    the context is processed once per task; each query only adds its own last window
    (x_N, y_N, x_q). ``forward`` updates x_2..x_N (so that layers stack) and the queries.
    """

    def __init__(self, dim: int, init_std: float = 0.02):
        super().__init__()
        self.local = nn.Parameter(init_std * torch.randn(3, 3))  # W
        self.decay = nn.Parameter(torch.ones(dim, dim))  # Lambda (elementwise on the state)
        self.readout = nn.Parameter(init_std * torch.randn(dim, dim))  # C
        self.select = nn.Parameter(init_std * torch.randn(3))  # D

    def read(self, state: Tensor, window: Tensor) -> Tensor:
        """C S^T (sum_a D_a w_a) for states ``[..., D, D]`` and windows ``[..., 3, D]``."""
        probe = torch.einsum("a,...ad->...d", self.select, window)
        return (probe.unsqueeze(-2) @ state).squeeze(-2) @ self.readout.T

    def forward(self, context: Tensor, queries: Tensor) -> tuple[Tensor, Tensor]:
        """``[T, 2N, D]`` context tokens and ``[T, Q, D]`` query tokens, both updated."""
        tasks, width = context.shape[0], context.shape[-1]
        # Windows (x_t, y_t, x_t+1) inside the context, stride 2: [T, N - 1, 3, D].
        windows = context.shape[1] // 2 - 1  # none for a single context point
        inner = context[:, :-1].unfold(1, 3, 2).transpose(-1, -2) if windows else None
        state = context.new_zeros(tasks, width, width)
        outputs = []
        for t in range(windows):  # S_t = Lambda * S_t-1 + A_t, A_t = sum W_ac w_a w_c^T
            win = inner[:, t]
            local = win.transpose(-1, -2) @ (self.local @ win)  # sum_ac W_ac w_a w_c^T
            state = self.decay * state + local
            outputs.append(self.read(state, win))
        updated = context.clone()
        if outputs:
            updated[:, 2::2] = context[:, 2::2] + torch.stack(outputs, dim=1)
        # Each query's window (x_N, y_N, x_q): A_q^T probe without forming A_q per query.
        last = context[:, -2:].unsqueeze(1).expand(-1, queries.shape[1], -1, -1)
        win = torch.cat([last, queries.unsqueeze(2)], dim=2)  # [T, Q, 3, D]
        probe = torch.einsum("a,tqad->tqd", self.select, win)
        carried = (probe.unsqueeze(-2) @ (self.decay * state).unsqueeze(1)).squeeze(-2)
        dots = (win @ probe.unsqueeze(-1)).squeeze(-1)  # w_a . probe
        mixed = torch.einsum("ac,tqa,tqcd->tqd", self.local, dots, win)
        return updated, queries + (carried + mixed) @ self.readout.T


#: The causal GD-SSM's initial decay logit: sigmoid(4) = 0.982, a memory of ~50 steps.
DECAY_LOGIT = 4.0


class CausalGDSSM(CausalMixer):
    """GD-SSM's recurrence on a causal token stream, per head, over the projected keys,
    values and queries every causal mixer has (so that parameter counts stay comparable):

    A_t = sum_ab W_ab v_t-a k_t-b^T over the window of the last 3 positions (a, b in 0..2),
    S_t = S_t-1 diag(Lambda) + A_t, out_t = S_t (sum_a D_a q_t-a).

    It starts as causal linear attention with a slow decay (W_00 = D_0 = 1, the rest 0,
    Lambda = 0.98): the window and the decay are what training may add. Stride 1, since a
    token stream has no (x, y) pairs to step over.
    """

    WINDOW = 3
    #: Positions unrolled at once (see :meth:`mix`): of 16, 32 and 64 the fastest on one CPU
    #: thread at T = 64 and 256 (a training step 3x and 8x faster than a loop per position).
    CHUNK = 16

    def __init__(self, dim: int, heads: int = 1, init_std: float = 0.02):
        super().__init__(dim, heads, init_std=init_std)
        local = torch.zeros(self.WINDOW, self.WINDOW)
        local[0, 0] = 1.0
        self.local = nn.Parameter(local)  # W
        # Lambda = sigmoid(rho), one per key dimension (shared along the value axis, so that
        # the layer has no more parameters than its peers); in (0, 1), since a decay above 1
        # blows the state up over a sequence (it did, unconstrained, in training).
        self.decay_logit = nn.Parameter(torch.full((heads, 1, self.head_dim), DECAY_LOGIT))
        self.select = nn.Parameter(torch.eye(self.WINDOW)[0].clone())  # D

    def mix(self, keys: Tensor, values: Tensor, queries: Tensor, tokens: Tensor) -> Tensor:
        steps = keys.shape[2]

        def back(x: Tensor, a: int) -> Tensor:  # x_t-a at position t (zeros before the start)
            return torch.cat([x.new_zeros(*x.shape[:2], a, x.shape[3]), x[:, :, : steps - a]], 2)

        past_k = torch.stack([back(keys, b) for b in range(self.WINDOW)])  # [3, H, B, T, k]
        past_v = [back(values, a) for a in range(self.WINDOW)]
        mixed_k = torch.einsum("ab,bhntk->ahntk", self.local, past_k)  # sum_b W_ab k_t-b
        probe = sum(self.select[a] * back(queries, a) for a in range(self.WINDOW))
        # Chunks of CHUNK positions: within one, the recurrence unrolled as batched products
        # (S_t = S_c diag(Lambda)^(t-c) + sum_c<s<=t A_s diag(Lambda)^(t-s)); between them,
        # the state carried. A loop over every position made its backward most of a
        # training step; unrolling a whole long sequence costs T^2 (the chunk bounds it).
        log_decay = F.logsigmoid(self.decay_logit)[:, 0]  # [H, k]
        values = torch.stack(past_v)  # [3, H, B, T, v]
        state = keys.new_zeros(*keys.shape[:2], values.shape[-1], keys.shape[-1])
        out = []
        for start in range(0, steps, self.CHUNK):
            end = min(start + self.CHUNK, steps)
            lags = torch.arange(end - start, device=keys.device)
            lags = lags[:, None] - lags[None, :]  # t - s
            powers = torch.exp(lags.clamp(min=0)[None, :, :, None] * log_decay[:, None, None, :])
            powers = powers * (lags >= 0).to(keys.dtype)[None, :, :, None]  # [H, T, S, k]
            p, m = probe[:, :, start:end], mixed_k[:, :, :, start:end]
            v = values[:, :, :, start:end]
            scores = torch.einsum("ahbsk,hbtsk->ahbts", m, p[:, :, :, None] * powers[:, None])
            since = torch.exp((lags[:, :1] + 1)[None] * log_decay[:, None, :])  # [H, T, k]
            carried = torch.einsum("hbvk,hbtk->hbtv", state, p * since[:, None])
            out.append(carried + torch.einsum("ahbts,ahbsv->hbtv", scores, v))
            to_end = torch.exp(lags[-1][None, :, None] * log_decay[:, None, :])  # [H, S, k]
            state = state * since[:, None, -1:, :] + torch.einsum(
                "ahbsv,ahbsk->hbvk", v, m * to_end[None, :, None]
            )
        return torch.cat(out, dim=2)


def gdssm_construction(dim: int, eta: float, context_size: int,
                       outputs: int = 1) -> dict[str, Tensor]:  # fmt: skip
    """Weights that make one GD-SSM layer one GD step from w = 0 (tokens of width
    dim + outputs)."""
    width = dim + outputs
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
    """Shared forward: one sequence per query (interleaved, or the constructed pairs where the
    config's ``input_tokens`` says so), prediction at the last token."""

    def final_token(self, tokens: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, support_x, support_y, query_x):
        pairs = getattr(self.config, "input_tokens", "interleaved") == "pairs"
        tokens = (pair_tokens if pairs else interleaved_tokens)(support_x, support_y, query_x)
        m = self.outputs
        out = read_prediction(self.final_token(tokens), m)  # [T * Q, m]
        return out.view(query_x.shape[0], query_x.shape[1], m)


@dataclass(frozen=True)
class GDSSMConfig(AnalysisSettings):
    layers: int = param(1, min=1, help="stacked GD-SSM layers")
    embed: int = param(0, min=0, help="width of a learned MLP feature map phi(x) (0: raw x)")
    head: Literal["none", "mlp", "gated"] = param(
        "none", help="a readout on the query token added to its y-slot (nonlinear tasks)"
    )
    head_width: int = param(40, min=1, help="hidden width of the readout head (head mlp or "
                            "gated)")  # fmt: skip
    init_std: float = param(0.02, min=0.0, help="std of the weights' normal initialisation")
    lr: float = param(2e-4, min=0.0, help="Adam lr (the paper's appendix: 2e-4)")
    recurrent_lr: float = param(
        0.0, min=0.0, help="Adam lr of the recurrence's decay (the appendix: 1e-4; 0: lr)",
        added="0.2",
    )
    lr_schedule: Literal["constant", "cosine"] = param(
        "constant", help="cosine: every rate decays to 0 over the run (the appendix's)",
        added="0.2",
    )
    grad_clip: float = param(1.0, min=0.0, help="global-norm clip of the gradients (0: off)")
    construction: Literal["none", "gd"] = param(
        "none", added="0.4",
        help="gd: the one GD-SSM layer fixed to its GD construction (Sushma et al. sec. 3.1) "
        "with a learned rate, the embedding and head trained: App. A.7's control, the model "
        "'based on gradient descent construction and trained non-linearity layer'",
    )

    def check(self) -> None:
        if self.construction == "gd" and self.layers != 1:
            raise ConfigError("construction gd fixes one GD-SSM layer (layers=1): the "
                              "multi-step construction (App. A.2) is not built")  # fmt: skip


class GatedHead(nn.Module):
    """(W_a h) * sigmoid(W_b h), then a linear map to one output."""

    def __init__(self, dim: int, width: int, outputs: int = 1):
        super().__init__()
        self.value, self.gate, self.out = (
            nn.Linear(dim, width),
            nn.Linear(dim, width),
            nn.Linear(width, outputs),
        )

    def forward(self, h: Tensor) -> Tensor:
        return self.out(self.value(h) * torch.sigmoid(self.gate(h)))


class GDSSM(InContextMethod):
    """Stacked GD-SSM layers (Sushma et al.), with an optional feature map and head."""

    Config = GDSSMConfig

    def build_model(self, dim: int) -> nn.Module:
        c = self.config
        m = self.outputs
        width = (c.embed or dim) + m
        model = nn.Module()
        model.embed = feature_map(dim, c.embed)
        model.layers = nn.ModuleList(GDSSMLayer(width, c.init_std) for _ in range(c.layers))
        model.head = None
        if c.head == "mlp":
            model.head = nn.Sequential(
                nn.Linear(width, c.head_width), nn.ReLU(), nn.Linear(c.head_width, m)
            )
        elif c.head == "gated":
            model.head = GatedHead(width, c.head_width, m)
        if c.construction == "gd":
            layer = model.layers[0]
            built = gdssm_construction(c.embed or dim, 1.0, self.problem.context_size, m)
            for name, weights in built.items():
                getattr(layer, name).data.copy_(weights)
            layer.requires_grad_(False)
            # The GD step's rate: the layer's update scaled by it (the construction holds
            # rate 1, divided by N).
            model.rate = nn.Parameter(torch.ones(()))
        return model

    def recurrent_parameters(self) -> list[Tensor]:
        return [layer.decay for layer in self.model.layers]

    def analyse(self, source, log, seed: int) -> dict[str, float]:
        """The in-context learners' analyses, and for one plain layer its parameters beside
        the GD construction (Sushma et al.)."""
        from methods.analyses import in_context as icl_analyses

        final = super().analyse(source, log, seed)
        c = self.config
        if icl_analyses.is_linear_regression(source) and c.layers == 1 and not c.embed \
                and c.head == "none":  # fmt: skip
            built = gdssm_construction(source.problem.input_shape[0], 1.0,
                                       source.problem.context_size, self.outputs)  # fmt: skip
            final.update(icl_analyses.gdssm_parameters(self, source, built, seed=seed))
        return final

    def forward(self, support_x, support_y, query_x):
        x, queries = self.model.embed(support_x), self.model.embed(query_x)
        context, queries = natural_context(x, support_y), query_tokens(queries, self.outputs)
        for layer in self.model.layers:
            before = queries
            context, queries = layer(context, queries)
            if self.config.construction == "gd":  # one fixed layer: its step at the rate
                queries = before + self.model.rate * (queries - before)
        pred = read_prediction(queries, self.outputs)
        return pred if self.model.head is None else pred + self.model.head(queries)


@dataclass(frozen=True)
class RecurrentConfig(AnalysisSettings):
    hidden: int = param(64, min=1, help="width of the recurrent state")
    layers: int = param(1, min=1, help="stacked recurrent layers")
    lr: float = param(1e-3, min=0.0, help="Adam lr")
    grad_clip: float = param(1.0, min=0.0, help="global-norm clip of the gradients (0: off)")
    input_tokens: Literal["interleaved", "pairs"] = param(
        "interleaved", added="0.3",
        help="interleaved: x_1, y_1, ..., x_N, y_N, x_q; pairs: the constructed tokens "
        "(x_1, y_1), ..., (x_N, y_N), (x_q, 0) (the blog post's LSTM setup)")  # fmt: skip


@dataclass(frozen=True)
class S5Config(RecurrentConfig):
    block: Literal["linear", "gelu"] = param(
        "linear", added="0.4",
        help="linear: the output C h_t, linear in the tokens (no model of this kind beats "
        "the zero predictor on linear regression); gelu: S5's block (Smith et al.), "
        "GELU(C h_t + D z_t) then a position-wise linear layer, with the residual",
    )  # fmt: skip


class DiagonalSSM(nn.Module):
    """h_t = lambda * h_t-1 + B z_t (lambda in (0, 1) per channel); the last token plus the
    output C h_t, or with ``gelu`` plus W GELU(C h_t + D z_t)."""

    def __init__(self, dim: int, hidden: int, gelu: bool = False):
        super().__init__()
        self.gelu = gelu
        self.logit = nn.Parameter(torch.linspace(-2.0, 4.0, hidden))  # sigmoid: decays
        self.inp = nn.Linear(dim, hidden, bias=False)
        self.out = nn.Linear(hidden, hidden if gelu else dim, bias=False)
        if gelu:
            self.skip = nn.Linear(dim, hidden, bias=False)
            self.mix = nn.Linear(hidden, dim)

    def forward(self, tokens: Tensor) -> Tensor:
        decay = torch.sigmoid(self.logit)
        drive = self.inp(tokens)  # [B, L, H]
        steps = tokens.shape[1]
        powers = torch.arange(steps - 1, -1, -1, device=tokens.device, dtype=tokens.dtype)
        state = (decay ** powers.view(-1, 1) * drive).sum(dim=1)  # h_L, parallel form
        if not self.gelu:
            return tokens[:, -1] + self.out(state)
        return tokens[:, -1] + self.mix(F.gelu(self.out(state) + self.skip(tokens[:, -1])))


class S5Control(NaturalSequenceMethod):
    """S5-style diagonal SSM without local attention (the GD-SSM paper's control)."""

    Config = S5Config

    def build_model(self, dim: int) -> nn.Module:
        c = self.config
        return nn.ModuleList(
            DiagonalSSM(dim + self.outputs, c.hidden, c.block == "gelu") for _ in range(c.layers)
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
            dim + self.outputs, c.hidden, c.layers, batch_first=True,
            bidirectional=self.bidirectional,
        )  # fmt: skip
        model.head = nn.Linear(c.hidden * (2 if self.bidirectional else 1), dim + self.outputs)
        return model

    def final_token(self, tokens: Tensor) -> Tensor:
        out, _ = self.model.lstm(tokens)
        return tokens[:, -1] + self.model.head(self.readout(out))

    def readout(self, out: Tensor) -> Tensor:
        """What the head reads: the state at the query token (the last position)."""
        return out[:, -1]


class BiLSTMBaseline(LSTMBaseline):
    """The head reads each direction where it has read the whole sequence: the forward
    state at the query token and the backward state at the first token (ours: the blog
    post states no readout). The backward state at the query token would have read the
    query alone: a one-layer model reading it sees no context at all."""

    bidirectional = True

    def readout(self, out: Tensor) -> Tensor:
        hidden = self.config.hidden
        return torch.cat([out[:, -1, :hidden], out[:, 0, hidden:]], dim=-1)


register_method(
    "gdssm",
    GDSSM,
    "GD-SSM: local 3-token attention + diagonal matrix-state recurrence (Sushma et al.)",
)
register_method("s5", S5Control, "S5-style diagonal SSM without local attention (control)")
register_method("lstm", LSTMBaseline, "LSTM over x_1, y_1, ..., x_q")
register_method("bilstm", BiLSTMBaseline, "bidirectional LSTM over x_1, y_1, ..., x_q")
