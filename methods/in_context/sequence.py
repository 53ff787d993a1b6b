"""Causal sequence learners for autoregressive tasks: mesa layers or causal linear attention.

Tokens are constructed as e_t = (s_t, s_{t-1}) (s_0 = 0), so that one layer can regress
s_t on s_{t-1} in context and apply the result to s_t; a linear readout predicts s_{t+1}.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from mesabench_core import ConfigError, IncompatibleSetting, param
from mesabench_datasets.tasks import Problem, TaskBatch, TaskSource, seeded_generator
from methods.analyses.mesa_structure import algorithm_predict, mesa_gd_cosine, revalg_weights
from methods.analyses.probes import is_autoregressive_regression, probe_analysis
from methods.analyses.repurpose import repurposing_scores
from methods.analyses.sensitivity import previous_share, sensitivity_norms
from methods.analyses.sizes import AnalysisSettings, analysis_tasks
from methods.api import ArtifactLog
from methods.common.losses import per_task_loss
from methods.in_context.regression import InContextMethod
from methods.in_context.ssm import CausalGDSSM
from methods.layers.mesa import CausalMixer, MesaLayer, future_positions, mesa_parallel
from methods.reference.algorithms import autoregressive_gradient, previous_states
from methods.registry import register_method


class CausalSoftmaxAttention(CausalMixer):
    """Causal softmax self-attention (scaled dot products), the first layer of hybrid stacks."""

    def mix(self, keys: Tensor, values: Tensor, queries: Tensor, tokens: Tensor) -> Tensor:
        return self.weights_from(keys, queries) @ values

    @staticmethod
    def weights_from(keys: Tensor, queries: Tensor) -> Tensor:
        future = future_positions(keys.shape[2], keys.device)
        scores = (queries @ keys.transpose(-1, -2)) / keys.shape[-1] ** 0.5
        return scores.masked_fill(future, float("-inf")).softmax(dim=-1)

    def attention(self, tokens: Tensor) -> Tensor:
        """The attention weights ``[H, B, T, T]`` (row t: how much position t reads each
        earlier one)."""
        return self.weights_from(*self.keys_queries(tokens))

    def reading(self, weights: Tensor) -> Callable[[Tensor, Tensor], Tensor]:
        """The layer's residual step with its attention replaced by ``weights`` (``[T, T]``,
        for a sensitivity test): ``(tokens, read) -> tokens + update``."""

        def step(tokens: Tensor, read: Tensor) -> Tensor:
            return self.residual(tokens, read, lambda keys, values, queries, _: weights @ values)

        return step


class CausalLinearAttention(CausalMixer):
    """Causal linear self-attention, out_t = P (sum_{t'<=t} v_t' k_t'^T) q_t: the mesa layer
    without the inverse, i.e. one gradient step instead of the ridge solution."""

    def mix(self, keys: Tensor, values: Tensor, queries: Tensor, tokens: Tensor) -> Tensor:
        # The quadratic form (q_t . k_t') masked to t' <= t: the same sums as the memory's
        # cumulative sum, without a [T, e, k] memory per sequence (many times faster here).
        future = future_positions(keys.shape[2], keys.device)
        return (queries @ keys.transpose(-1, -2)).masked_fill(future, 0.0) @ values


def _mesa(dim: int, c: SequenceConfig) -> CausalMixer:
    return MesaLayer(dim, c.heads, lam=c.lam, init_std=c.init_std, form=c.mesa_form)


def _linear(dim: int, c: SequenceConfig) -> CausalMixer:
    return CausalLinearAttention(dim, c.heads, init_std=c.init_std)


def _softmax(dim: int, c: SequenceConfig) -> CausalMixer:
    return CausalSoftmaxAttention(dim, c.heads, init_std=c.init_std)


def _gd_ssm(dim: int, c: SequenceConfig) -> CausalMixer:
    return CausalGDSSM(dim, c.heads, init_std=c.init_std)


def _fla_layers():
    """:mod:`methods.layers.fla`, imported when first used (flash-linear-attention takes
    seconds to import, and needs Triton, which CPU-only torch builds lack)."""
    try:
        from methods.layers import fla as fla_layers
    except ImportError as err:
        raise ConfigError(f"mixer deltanet / gla needs flash-linear-attention's ops, which "
                          f"could not be imported ({err}); pip install fla-core triton") from None
    return fla_layers


def _deltanet(dim: int, c: SequenceConfig) -> CausalMixer:
    return _fla_layers().DeltaNetLayer(dim, c.heads, init_std=c.init_std)


def _gla(dim: int, c: SequenceConfig) -> CausalMixer:
    return _fla_layers().GatedLinearAttentionLayer(dim, c.heads, init_std=c.init_std)


#: The causal mixers a sequence learner stacks, by the name its ``mixer`` setting takes.
MIXERS: dict[str, Callable[[int, SequenceConfig], CausalMixer]] = {
    "mesa": _mesa, "linear": _linear, "softmax": _softmax, "deltanet": _deltanet, "gla": _gla,
    "gd_ssm": _gd_ssm,
}  # fmt: skip


@dataclass(frozen=True)
class SequenceConfig(AnalysisSettings):
    mixer: Literal["mesa", "linear", "softmax", "deltanet", "gla", "gd_ssm"] = param(
        "mesa",
        help="the layer stacked: mesa, causal linear or softmax attention, "
        "flash-linear-attention's DeltaNet or gated linear attention (gla), or GD-SSM's "
        "recurrence (gd_ssm)",
    )
    layers: int = param(1, min=1, help="stacked layers")
    first_layer: Literal["same", "softmax"] = param(
        "same", help="softmax: a hybrid stack, causal softmax attention then the mixer"
    )
    mesa_form: Literal["parallel", "chunked", "recurrent"] = param(
        "parallel", help="how mesa layers compute (same outputs; chunked uses O(d^2) memory)"
    )
    heads: int = param(1, min=1, help="heads per layer")
    tokens: Literal["constructed", "slot", "memory", "raw"] = param(
        "constructed", added="0.2",
        help="constructed: e_t = (s_t, s_t-1) built for the model; slot: e_t = (0, s_t, "
        "s_t-1), a zero slot to write the prediction in; memory: e_t = (0, s_t, s_t, s_t-1), "
        "the thesis' tokens 'with additional memory' (sec. 3.5.1, app. 3.7.3.2); raw: e_t = "
        "(s_t, 0, p_t) with a sinusoidal position code p_t, so that a first layer must copy "
        "s_t-1 itself (the thesis' hybrid models)",
    )
    embed: int = param(
        0, min=0, added="0.2",
        help="width of a learned embedding of each input (one-hot tokens, say) before the "
        "tokens (e_t, e_t-1) are built (0: the inputs as they are)",
    )
    layernorm: bool = param(
        False, added="0.2",
        help="pre-LayerNorm on what each layer reads (deep linear stacks overflow without it)",
    )
    repurpose: bool = param(
        False, added="0.2",
        help="after training on dynamics, score the model as a few-shot regressor on "
        "prompts x_1, y_1, ..., x_q, plain and with end-of-pair tokens "
        "(methods/analyses/repurpose.py)",
    )
    sensitivity: bool = param(
        False, added="0.2",
        help="after training, measure how much the first softmax layer's outputs depend on "
        "each earlier state: the share on the previous one (methods/analyses/sensitivity.py)",
    )
    lam: float = param(1.0, min=1e-6, help="initial ridge strength of mesa layers")
    init_std: float = param(0.02, min=0.0, help="std of the weights' normal initialisation")
    lr: float = param(1e-3, min=0.0, help="Adam lr")
    grad_clip: float = param(1.0, min=0.0, help="global-norm clip of the gradients (0: off)")


class SequenceLearner(InContextMethod):
    """A stack of causal mixers over constructed tokens, with a linear readout; with
    ``first_layer=softmax`` the first is causal softmax attention (a hybrid stack)."""

    Config = SequenceConfig

    @classmethod
    def check_problem(cls, problem: Problem) -> None:
        if not problem.causal:
            raise ConfigError("sequence learners need a causal sequence benchmark (e.g. lindyn)")

    @classmethod
    def check_config(cls, config: SequenceConfig, problem: Problem) -> None:
        if config.sensitivity and "softmax" not in (config.first_layer, config.mixer):
            raise IncompatibleSetting("sensitivity reads a first softmax layer: it needs "
                                      "first_layer=softmax or mixer=softmax")  # fmt: skip
        if config.repurpose and not is_autoregressive_regression(problem):
            raise IncompatibleSetting("repurpose scores a model trained on linear dynamics "
                                      "as a regressor: it needs an autoregressive regression "
                                      "benchmark (e.g. lindyn)")  # fmt: skip

    def build_model(self, dim: int) -> nn.Module:
        c = self.config

        first = MIXERS["softmax" if c.first_layer == "softmax" else c.mixer]
        width = TOKEN_LAYOUTS[c.tokens][0] * (c.embed or dim) + (
            POSITION_WIDTH if c.tokens == "raw" else 0)
        model = nn.Module()
        model.embed = nn.Linear(dim, c.embed, bias=False) if c.embed else nn.Identity()
        model.layers = nn.ModuleList(
            (first if k == 0 else MIXERS[c.mixer])(width, c) for k in range(c.layers)
        )
        model.norms = nn.ModuleList(
            nn.LayerNorm(width) if c.layernorm else nn.Identity() for _ in range(c.layers)
        )
        model.readout = nn.Linear(width, self.problem.output_dim)
        return model

    def input_tokens(self, query_x: Tensor) -> Tensor:
        """The tokens the first layer reads (constructed or raw, per the config)."""
        return TOKEN_LAYOUTS[self.config.tokens][1](self.model.embed(query_x))

    def hidden_states(
        self, query_x: Tensor, first: Callable[[Tensor, Tensor], Tensor] | None = None,
        depth: int | None = None,
    ) -> list[Tensor]:
        """The tokens ``[B, T, width]`` going into the first layer and out of every layer
        (the residual stream a probe reads): ``layers + 1`` tensors, or ``depth + 1``
        (the first ``depth`` layers only). ``first``, if given, stands in for the first
        layer's residual step ``(tokens, read) -> tokens``."""
        tokens = self.input_tokens(query_x)
        states = [tokens]
        stack = list(zip(self.model.layers, self.model.norms, strict=True))[:depth]
        for k, (layer, norm) in enumerate(stack):
            step = first if k == 0 and first is not None else layer.residual
            tokens = step(tokens, norm(tokens))
            states.append(tokens)
        return states

    def forward(self, support_x: Tensor, support_y: Tensor, query_x: Tensor) -> Tensor:
        return self.model.readout(self.hidden_states(query_x)[-1])

    def analyse(self, source: TaskSource, log: ArtifactLog, seed: int) -> dict[str, float]:
        """Linear probes on the residual stream, layer by layer
        (:mod:`methods.analyses.probes`), how much a first softmax layer reads the previous
        position (the copy), and how much one linear layer is one mesa-GD step."""
        final = {**super().analyse(source, log, seed), **probe_analysis(self, source, seed)}
        if self.config.repurpose:  # check_config: on autoregressive regression only
            scores = repurposing_scores(lambda seq: self.forward(seq, seq, seq),
                                        self.problem.output_dim, seed, self.device)  # fmt: skip
            final.update(scores)
        first = self.model.layers[0]
        if self.reads_as_one_mesa_step():
            with torch.no_grad():
                final["final/weights/mesa_gd_cosine"] = mesa_gd_cosine(
                    self.model.readout.weight, first.projection, first.value, first.key,
                    first.query)
                final.update(self.revalg_losses(source, first, seed))
        if isinstance(first, CausalSoftmaxAttention):
            batch = source.sample(analysis_tasks(self, 256),
                                  seeded_generator(_COPY_ROLE, seed, device=self.device))
            with torch.no_grad():
                weights = first.attention(self.input_tokens(batch.query_x))
            final["final/copy/previous_attention"] = previous_attention(weights)
            if is_autoregressive_regression(self.problem):
                final.update(self.copy_sensitivity(first, batch))
            if self.config.sensitivity:
                norms = sensitivity_norms(self.first_output, batch.query_x[:_SENSITIVITY_SEQUENCES])
                final["final/copy/previous_share"] = previous_share(norms)
        return final

    def reads_as_one_mesa_step(self) -> bool:
        """Whether the model is one causal linear-attention layer on the constructed tokens
        as they are (no embedding, no LayerNorm): then its weights are a trilinear map that
        one mesa-GD step's construction can be held against
        (:mod:`methods.analyses.mesa_structure`)."""
        c = self.config
        return (c.mixer == "linear" and c.layers == 1 and c.first_layer == "same"
                and c.tokens == "constructed" and not c.embed and not c.layernorm)  # fmt: skip

    def revalg_losses(self, source: TaskSource, layer: CausalMixer, seed: int) -> dict[str, float]:
        """The layer's loss and RevAlg-1's on the same sequences (its products at their
        block diagonals' means: Eq. 3.56's reduced terms, and Eq. 3.55's all): how fully
        the reverse-engineered algorithm describes the layer (thesis Fig. 3.2B, table
        3.1)."""
        batch = source.sample(analysis_tasks(self, 256),
                              seeded_generator(_REVALG_ROLE, seed, device=self.device))
        tokens = self.input_tokens(batch.query_x)
        readout = self.model.readout

        def loss(pred: Tensor) -> float:
            return per_task_loss(pred, batch.query_y, self.problem.loss).mean().item()

        def revalg(**terms: bool) -> float:
            weights = revalg_weights(readout.weight, layer.projection, layer.value, layer.key,
                                     layer.query, tokens.shape[-1] // 2, **terms)  # fmt: skip
            return loss(algorithm_predict(weights[0], readout.bias, *weights[1:], tokens))

        return {
            "final/weights/layer_loss": loss(readout(layer(tokens))),
            "final/weights/revalg_loss": revalg(reduced=True),
            "final/weights/revalg_full_loss": revalg(),
            "final/weights/revalg_ablated_loss": revalg(ablated=True),
        }

    def first_output(self, sequence: Tensor) -> Tensor:
        """The first layer's outputs (residual included, as the thesis measures them)
        ``[T, width]`` for one sequence ``[T, D]``."""
        return self.hidden_states(sequence[None], depth=1)[1][0]

    def copy_sensitivity(self, first: CausalSoftmaxAttention, batch) -> dict[str, float]:
        """The loss on the same sequences with the first layer's attention as learned, as an
        exact copy of position t - 1 (at t = 0 of itself, the one position a softmax row can
        read there), and as nothing (the layer removed): how much the rest of the stack
        depends on the copy."""
        steps = batch.query_x.shape[1]
        shift = batch.query_x.new_ones(steps - 1).diag(-1)
        shift[0, 0] = 1.0
        steps_by = {"learned": None, "exact": first.reading(shift),
                    "without": lambda tokens, read: tokens}  # fmt: skip
        final = {}
        with torch.no_grad():
            for name, step in steps_by.items():
                pred = self.model.readout(self.hidden_states(batch.query_x, step)[-1])
                loss = per_task_loss(pred, batch.query_y, self.problem.loss).mean().item()
                final[f"final/copy/loss_{name}"] = loss
        return final


#: Seed role of the copy analysis' sequences (apart from training, validation and test).
_COPY_ROLE = 8
#: Seed role of RevAlg-1's sequences.
_REVALG_ROLE = 10
#: Sequences (of the copy analysis') whose Jacobians the sensitivity reads (~0.1 GB of
#: forward-mode intermediates each on a 7-layer hybrid's first layer).
_SENSITIVITY_SEQUENCES = 32


def previous_attention(weights: Tensor) -> float:
    """Mean attention weight on position t - 1, over heads, sequences and positions t >= 1
    (``weights``: ``[H, B, T, T]``): 1 for a layer that copies the previous token."""
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean().item()


#: Width of the position code of raw tokens.
POSITION_WIDTH = 16


def position_code(steps: int, like: Tensor) -> Tensor:
    """Sinusoidal position codes ``[T, POSITION_WIDTH]`` (Vaswani et al. 2017, sec. 3.5, base
    100 for short sequences): p_t-1 is a fixed rotation of p_t, so that a query can ask for
    the previous position."""
    t = torch.arange(steps, dtype=like.dtype, device=like.device)[:, None]
    rates = 100.0 ** (-torch.arange(0, POSITION_WIDTH, 2, dtype=like.dtype,
                                    device=like.device) / POSITION_WIDTH)  # fmt: skip
    angles = t * rates
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)


def raw_tokens(sequence: Tensor) -> Tensor:
    """e_t = (s_t, 0, p_t): ``[B, T, D]`` -> ``[B, T, 2D + POSITION_WIDTH]``."""
    code = position_code(sequence.shape[1], sequence).expand(sequence.shape[0], -1, -1)
    return torch.cat([sequence, torch.zeros_like(sequence), code], dim=-1)


def constructed_tokens(sequence: Tensor) -> Tensor:
    """e_t = (s_t, s_{t-1}) with s_0 = 0: ``[B, T, D]`` -> ``[B, T, 2D]``."""
    return torch.cat([sequence, previous_states(sequence)], dim=-1)


def slot_tokens(sequence: Tensor) -> Tensor:
    """e_t = (0, s_t, s_{t-1}): ``[B, T, D]`` -> ``[B, T, 3D]``, the thesis' more compact
    tokens with a zero slot (app. 3.7.3.2)."""
    return torch.cat([torch.zeros_like(sequence), constructed_tokens(sequence)], dim=-1)


def memory_tokens(sequence: Tensor) -> Tensor:
    """e_t = (0, s_t, s_t, s_{t-1}): ``[B, T, D]`` -> ``[B, T, 4D]``, the thesis' tokens
    "with additional memory" (sec. 3.5.1, app. 3.7.3.2)."""
    return torch.cat([torch.zeros_like(sequence), sequence, constructed_tokens(sequence)], dim=-1)


#: Each token layout: its width in multiples of the state's, and its builder.
TOKEN_LAYOUTS: dict[str, tuple[int, Callable[[Tensor], Tensor]]] = {
    "constructed": (2, constructed_tokens),
    "slot": (3, slot_tokens),
    "memory": (4, memory_tokens),
    "raw": (2, raw_tokens),
}


@dataclass(frozen=True)
class LeastSquaresConfig(AnalysisSettings):
    lam: float = param(0.0, min=0.0, help="ridge strength (0: minimum-norm least squares)")


class AutoregressiveReference(InContextMethod):
    """An algorithm that regresses each state on the previous one over the transitions seen
    so far: autoregressive regression benchmarks only."""

    #: What the algorithm is, for the refusal of other benchmarks.
    summary = ""
    #: A reference algorithm: its solves and rates are computed in float64.
    precisions = frozenset({"fp32"})

    @classmethod
    def check_problem(cls, problem: Problem) -> None:
        SequenceLearner.check_problem(problem)
        if not is_autoregressive_regression(problem):
            raise ConfigError(f"{cls.summary} regresses each state on the previous one: it "
                              "needs an autoregressive regression benchmark (e.g. lindyn)")

    @classmethod
    def check_run(cls, config, problem: Problem, protocol, chosen: frozenset[str]) -> None:
        # The field comes with every in-context config, but no analysis of a reference
        # algorithm draws tasks: a user's value would change only the configuration's hash.
        if "analysis_tasks" in chosen:
            raise IncompatibleSetting(f"method.analysis_tasks has no effect on {cls.summary}: "
                                      "it runs no analysis that draws tasks")


class AutoregressiveLeastSquares(AutoregressiveReference):
    """The least-squares optimum on a causal sequence, in closed form: at every step t,
    W_t = argmin_W sum_{t'<t} ||s_{t'+1} - W s_t'||^2 (+ lam ||W||^2) over the transitions seen
    so far, and the prediction W_t s_t (0 before any transition). Nothing to learn."""

    Config = LeastSquaresConfig
    summary = "least squares on the transitions seen"

    def build_model(self, dim: int) -> nn.Module:
        return nn.Module()

    def forward(self, support_x: Tensor, support_y: Tensor, query_x: Tensor) -> Tensor:
        return autoregressive_least_squares(query_x, self.config.lam)


def autoregressive_least_squares(sequence: Tensor, lam: float) -> Tensor:
    """``[B, T, D]`` -> ``[B, T, D]``: the prediction of s_{t+1} from s_1..s_t by least
    squares on the pairs (s_t', s_{t'+1}), t' < t."""
    previous, current = sequence[:, :-1], sequence[:, 1:]
    if lam > 0:  # the mesa layer's ridge, its strength 1 / lam
        strength = sequence.new_full((sequence.shape[0],), 1.0 / lam)
        later = mesa_parallel(previous, current, current, strength)
    else:
        later = torch.stack(
            [
                (
                    current[:, t, None]
                    @ torch.linalg.pinv(previous[:, : t + 1])
                    @ current[:, : t + 1]
                )[:, 0]
                for t in range(current.shape[1])
            ],
            dim=1,
        )  # row form: w = s_t X^+ Y solves min ||X W^T - Y|| at minimum norm
    return torch.cat([torch.zeros_like(sequence[:, :1]), later], dim=1)


@dataclass(frozen=True)
class AutoregressiveGDConfig(AnalysisSettings):
    eta: float = param(0.0, min=0.0, help="a fixed rate (0: the rate fitted in closed form on "
                       "the training sequences)")


class AutoregressiveGD(AutoregressiveReference):
    """One gradient step from W = 0 on the transitions seen so far: at step t,
    W_t = eta sum_{t'<t} s_{t'+1} s_t'^T (eta times minus the gradient of
    0.5 sum ||s_{t'+1} - W s_t'||^2 at W = 0) and the prediction W_t s_t. One causal
    linear-attention layer on the tokens (s_t, s_{t-1}) computes this with values s_t, keys
    s_{t-1}, queries s_t and projection eta. The rate minimises the squared error over every
    training sequence so far (closed form, from running sums); nothing else is learned."""

    Config = AutoregressiveGDConfig
    summary = "one GD step on the transitions seen"

    def build_model(self, dim: int) -> nn.Module:
        model = nn.Module()
        model.eta = nn.Parameter(torch.tensor(self.config.eta), requires_grad=False)
        # Running sums of the closed-form rate (numerator, denominator) over training batches.
        model.register_buffer("moments", torch.zeros(2, dtype=torch.float64))
        return model

    def forward(self, support_x: Tensor, support_y: Tensor, query_x: Tensor) -> Tensor:
        return self.model.eta * autoregressive_gradient(query_x)

    def meta_train_step(self, batch: TaskBatch) -> dict[str, float]:
        if not self.config.eta:
            step = autoregressive_gradient(batch.query_x)
            with torch.no_grad():
                sums = torch.stack([(step * batch.query_y).sum(), step.pow(2).sum()])
                self.model.moments += sums.double()
                self.model.eta.copy_(self.model.moments[0] / self.model.moments[1])
        return super().meta_train_step(batch)


register_method(
    "mesa",
    SequenceLearner,
    "mesa-layer transformer (ridge solved in the forward pass), causal sequence tasks",
)
register_method(
    "causal_lsa", SequenceLearner, "causal linear self-attention on sequence tasks", mixer="linear"
)
register_method(
    "causal_softmax",
    SequenceLearner,
    "causal softmax self-attention on sequence tasks",
    mixer="softmax",
)
register_method(
    "deltanet",
    SequenceLearner,
    "DeltaNet (flash-linear-attention's delta rule), sequence tasks",
    mixer="deltanet",
)
register_method(
    "gla",
    SequenceLearner,
    "gated linear attention (flash-linear-attention's recurrence), sequence tasks",
    mixer="gla",
)
register_method(
    "causal_gd_ssm",
    SequenceLearner,
    "GD-SSM's recurrence (3-token local attention, decaying matrix state), sequence tasks",
    mixer="gd_ssm",
)
register_method(
    "ar_gd",
    AutoregressiveGD,
    "reference: one GD step on the transitions seen so far, rate fitted (causal tasks)",
)
register_method(
    "ar_least_squares",
    AutoregressiveLeastSquares,
    "reference: least squares on the transitions seen so far, closed form (causal tasks)",
)
