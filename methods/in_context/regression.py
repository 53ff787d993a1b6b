"""In-context learners and their reference algorithms as methods on the episodic protocol.

Their "adaptation" is a forward pass over the support set (the context); meta-training is
ordinary training on fresh task batches. They need flat regression tasks.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from mesabench_core import ConfigError, IncompatibleSetting, param
from mesabench_datasets.tasks import Problem, TaskBatch, TaskSource
from mesabench_datasets.tokens import (
    context_tokens,
    interleaved_tokens,
    query_tokens,
    read_prediction,
)
from methods.analyses.sizes import AnalysisSettings
from methods.api import SHARED_SETTINGS, ArtifactLog, EpisodicMethod
from methods.common.losses import per_task_loss
from methods.layers.attention import LSABlock, gd_construction
from methods.reference.algorithms import optimal_one_step_rate
from methods.registry import register_method


class InContextMethod(EpisodicMethod):
    """Shared plumbing: problem check, training with Adam, prediction without gradients."""

    shared_settings = frozenset(SHARED_SETTINGS)

    protocols = frozenset({"episodic"})
    uses_inner_steps = False
    compilable = True  # its forward traces (tests/test_execution.py: lsa, causal_lsa)

    @classmethod
    def check_problem(cls, problem: Problem) -> None:
        if problem.loss == "cross_entropy" or len(problem.input_shape) != 1 or problem.causal:
            raise ConfigError(
                "in-context learners need a flat regression benchmark (e.g. linreg-icl, "
                f"sinusoid-5shot), not inputs of shape {problem.input_shape} with "
                f"{problem.loss}"
            )

    def __init__(self, config: Any, problem: Problem, device: torch.device):
        super().__init__(config, problem, device)
        self.check_problem(problem)
        #: The target's width m (vector-valued regression: a y-slot of m entries).
        self.outputs = problem.output_dim
        self.model = self.build_model(problem.input_shape[0]).to(device)
        self.optimizer = self._optimizer()
        #: Outer steps taken (a learning-rate schedule reads it; saved with the state).
        self.steps_taken = 0
        #: What training and prediction call: ``forward``, or its compiled form.
        self.run_forward = self.forward

    def compile(self, backend: str) -> None:
        # The method's own forward (tokens built, blocks run, readout read), not its model:
        # the model is driven block by block, never called whole.
        self.run_forward = torch.compile(self.forward, backend=backend)

    def _optimizer(self) -> torch.optim.Optimizer | None:
        """Adam on the trained parameters; a config with ``recurrent_lr`` gives the
        parameters :meth:`recurrent_parameters` names that rate (0: the common one)."""
        lr = getattr(self.config, "lr", 1e-3)
        recurrent_lr = getattr(self.config, "recurrent_lr", 0.0)
        slow = {id(p) for p in self.recurrent_parameters()} if recurrent_lr else set()
        groups = [
            {"params": [p for p in self.model.parameters()
                        if p.requires_grad and id(p) not in slow], "lr": lr},
            {"params": [p for p in self.model.parameters()
                        if p.requires_grad and id(p) in slow], "lr": recurrent_lr},
        ]  # fmt: skip
        groups = [g for g in groups if g["params"]]
        return torch.optim.Adam(groups) if groups else None

    def recurrent_parameters(self) -> list[Tensor]:
        """Parameters of a recurrence (trained at ``recurrent_lr`` where set). None here."""
        return []

    def _schedule(self) -> None:
        """A cosine decay of every group's rate over the run (``lr_schedule = cosine``)."""
        if getattr(self.config, "lr_schedule", "constant") != "cosine" or not self.total_steps:
            return
        factor = 0.5 * (1.0 + math.cos(math.pi * min(self.steps_taken / self.total_steps, 1.0)))
        for group in self.optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
            group["lr"] = group["initial_lr"] * factor

    def build_model(self, dim: int) -> nn.Module:
        raise NotImplementedError

    def forward(self, support_x: Tensor, support_y: Tensor, query_x: Tensor) -> Tensor:
        raise NotImplementedError

    def meta_train_step(self, batch: TaskBatch) -> dict[str, float]:
        pred = self.run_forward(batch.support_x, batch.support_y, batch.query_x)
        loss = per_task_loss(pred, batch.query_y, self.problem.loss).mean()
        if self.optimizer is not None:
            self._schedule()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            clip = getattr(self.config, "grad_clip", 0.0)
            if clip > 0:
                nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.optimizer.step()
        self.steps_taken += 1
        return {"loss": loss.item()}

    def predict(self, support_x, support_y, query_x, steps=None) -> Tensor:
        with torch.no_grad():
            return self.run_forward(support_x, support_y, query_x)

    def state_tensors(self) -> list[Tensor]:
        return list(self.model.parameters())

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer else None,
            "steps_taken": self.steps_taken,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.steps_taken = state.get("steps_taken", 0)  # (learners saved before it: 0)

    def analyse(self, source: TaskSource, log: ArtifactLog, seed: int) -> dict[str, float]:
        """On linear regression: alignment with one GD step, and loss vs context size and
        OOD scale beside GD, GD++ and ridge (:mod:`methods.analyses.in_context`)."""
        from methods.analyses import in_context as icl_analyses

        return icl_analyses.analyse(self, source, log, seed)

    def monitor(self, source: TaskSource, seed: int) -> dict[str, float]:
        """On linear regression: the alignment with one GD step, over training."""
        from methods.analyses import in_context as icl_analyses

        return icl_analyses.monitor(self, source, seed)


def feature_map(dim: int, width: int) -> nn.Module:
    """A learned MLP feature map phi: R^dim -> R^width for nonlinear tasks (identity if 0)."""
    if not width:
        return nn.Identity()
    return nn.Sequential(nn.Linear(dim, width), nn.ReLU(), nn.Linear(width, width))


@dataclass(frozen=True)
class LSAConfig(AnalysisSettings):
    layers: int = param(1, min=1, help="attention layers (K)")
    heads: int = param(1, min=1, help="attention heads per layer")
    tied: bool = param(False, help="one layer's weights repeated K times (recurrent)")
    softmax: bool = param(False, help="softmax attention instead of linear, every layer")
    first_layer: Literal["same", "softmax"] = param(
        "same",
        help="softmax: the first layer uses softmax attention (with interleaved tokens it "
        "can pair each y with its x)",
    )
    layernorm: bool = param(False, help="pre-LayerNorm on what each layer reads")
    mlp: int = param(0, min=0, help="hidden width of a residual MLP after each layer (0: none)")
    clip: float = param(0.0, min=0.0, help="clip tokens to [-clip, clip] after each layer (0: off)")
    embed: int = param(
        0, min=0, help="width of a learned MLP feature map phi(x), tokens (phi(x), y) (0: raw x)"
    )
    token_embed: int = param(
        0, min=0, added="0.4",
        help="width D of ICML'23 App. A.7's token embedding: each token (x, y) (the query's "
        "(x, 0)) mapped to D by a linear map without bias, then e + MLP(e) with 4D GELU "
        "hidden units; the last entry is the (transformed) target slot the attention "
        "updates and the prediction is read from (0: off)",
    )  # fmt: skip
    dampening: float = param(1.0, min=0.0, help="factor on every layer's update")
    # A plain std. From 0.002 the U(-1, 1) task stays on the zero-predictor plateau for 20k
    # steps (docs/RESULTS.md); 0.02 leaves it. The public code's 0.002 / L is not a std but
    # the scale of Haiku's fan-in initialiser: std sqrt(0.002 / (L * width)), 0.0135 for one
    # layer on 11-wide tokens (the `paper` preset's: benchmarks.published.in_context).
    init_std: float = param(0.02, min=0.0, help="std of the weights' normal initialisation")
    lr: float = param(1e-3, min=0.0, help="Adam lr")
    grad_clip: float = param(1.0, min=0.0, help="global-norm clip (0: off)")
    construction: Literal["none", "copy_gd", "gd"] = param(
        "none",
        help="copy_gd: no training; the hand-built 2-layer model on interleaved tokens (a "
        "softmax layer copying each x_i into its y_i token, then one GD step at the rate "
        "fitted in closed form). gd: the one layer fixed to the GD construction (Prop. 1) "
        "with a learned rate, everything before it trained: a network meta-learned through "
        "one GD step on a linear read-out (ICML'23 sec. 3's control)", added="0.2",
    )
    copy_scale: float = param(
        50.0, min=0.0, added="0.2", help="softmax scale of the constructed copy layer"
    )
    align_gd_etas: tuple[float, ...] = param(
        (), min=0.0, added="0.4",
        help="rates of K GD steps (K: the layers; one rate for tied steps, else one per "
        "layer) the final alignment also compares the trained model with "
        "(final/align/gdk_pred_diff, gdk_sens_cosine); empty: none",
    )
    align_gdpp_etas: tuple[float, ...] = param(
        (), min=0.0, added="0.4",
        help="rates of K GD++ steps, as align_gd_etas, with align_gdpp_gammas "
        "(final/align/gdpp_pred_diff, gdpp_sens_cosine); empty: none",
    )
    align_gdpp_gammas: tuple[float, ...] = param(
        (), min=0.0, added="0.4",
        help="the x-transforms of those GD++ steps, one per rate (empty: 0, plain GD steps)",
    )
    repeat_dampenings: tuple[float, ...] = param(
        (1.0, 0.75, 0.5), min=0.0, added="0.4",
        help="dampening factors at which the trained layer is repeated (one trained layer "
        "on constructed tokens): final/repeat/d{damp}_* beside as many dampened GD steps",
    )
    twin_control: bool = param(
        False, added="0.4",
        help="train beside the model its control (the same network with the layer fixed to "
        "construction gd) from the same initial weights on the same batches, and compare "
        "the two at the end: their predictions before and after the attention layer and "
        "their input-gradients (final/twin/*; thesis Fig. 2.8)",
    )
    align_rates: tuple[float, ...] = param(
        (), min=0.0, added="0.3",
        help="fixed GD rates the final alignment also compares the trained model with, "
        "one GD step from zero weights at each (final/align/pred_diff_rate{r}, "
        "sens_diff_rate{r}: the blog's GD learning-rate sweep, Fig. 12); empty: none",
    )  # fmt: skip

    def check(self) -> None:
        if self.token_embed and self.embed:
            raise ConfigError("embed and token_embed are two embeddings: set embed=0 with "
                              "token_embed")  # fmt: skip
        if self.construction == "gd" and (
            self.layers != 1 or self.heads != 1 or self.first_layer != "same"
            or self.mlp or self.layernorm or self.softmax
        ):  # fmt: skip
            raise ConfigError("construction gd is one plain layer of one head (layers=1, "
                              "heads=1, no mlp, layernorm or softmax)")  # fmt: skip
        if len({f"{d}" for d in self.repeat_dampenings}) != len(self.repeat_dampenings) \
                or not self.repeat_dampenings:  # fmt: skip
            raise ConfigError(f"repeat_dampenings must be distinct and at least one (as their "
                              f"metrics name them): got {self.repeat_dampenings}")  # fmt: skip
        for name, given in (("align_gd_etas", self.align_gd_etas),
                            ("align_gdpp_etas", self.align_gdpp_etas)):
            if len(given) not in (0, 1, self.layers):
                raise ConfigError(f"{name} gives one rate for tied steps or one per layer "
                                  f"({self.layers}): got {len(given)}")  # fmt: skip
        if self.align_gdpp_gammas and len(self.align_gdpp_gammas) != len(self.align_gdpp_etas):
            raise ConfigError(f"align_gdpp_gammas needs one gamma per align_gdpp_etas rate: "
                              f"got {len(self.align_gdpp_gammas)} for "
                              f"{len(self.align_gdpp_etas)}")  # fmt: skip
        if len({f"{r:g}" for r in self.align_rates}) != len(self.align_rates):
            raise ConfigError(f"align_rates must be distinct (as their metrics name them, "
                              f"{{r:g}}): got {self.align_rates}")  # fmt: skip
        if self.twin_control and (
            self.construction != "none" or self.layers != 1 or self.heads != 1
            or self.first_layer != "same" or self.mlp or self.layernorm or self.softmax
        ):  # fmt: skip
            raise ConfigError("twin_control trains construction gd's twin beside a trained "
                              "layer: it needs construction none and one plain layer of one "
                              "head (layers=1, heads=1, no mlp, layernorm or softmax)")  # fmt: skip
        if self.construction == "copy_gd" and (
            self.layers != 2 or self.first_layer != "softmax" or self.heads != 1
            or self.embed or self.mlp or self.layernorm or self.softmax or self.tied
        ):  # fmt: skip
            raise ConfigError("construction copy_gd is 2 plain layers, one head, the first "
                              "softmax (layers=2, first_layer=softmax, heads=1, no embed, mlp, "
                              "layernorm, softmax or tied)")  # fmt: skip


class LSATransformer(InContextMethod):
    """K layers of (linear) self-attention on constructed tokens (x_i, y_i), tied or untied;
    on benchmarks with interleaved tokens, on x_1, y_1, ..., x_q with one-hot positions."""

    Config = LSAConfig

    @property
    def interleaved(self) -> bool:
        return self.problem.tokens == "interleaved"

    def __init__(self, config: LSAConfig, problem: Problem, device: torch.device):
        # The twin starts from the model's own initial weights (the same seed initialises
        # both, ICML'23 App. A.7): the generator's state before the model is built, again.
        before = torch.random.get_rng_state()
        super().__init__(config, problem, device)
        self.twin: LSATransformer | None = None
        if config.twin_control:
            after = torch.random.get_rng_state()
            torch.random.set_rng_state(before)
            self.twin = type(self)(_twin_config(config), problem, device)
            torch.random.set_rng_state(after)  # the run's later draws as without a twin

    @classmethod
    def check_config(cls, config: LSAConfig, problem: Problem) -> None:
        if config.twin_control:
            try:
                cls.check_config(_twin_config(config), problem)
            except IncompatibleSetting as err:
                raise IncompatibleSetting(f"twin_control: {err}") from None
        if config.construction == "copy_gd" and problem.tokens != "interleaved":
            raise IncompatibleSetting("construction copy_gd copies x_i into the y_i token of "
                                      "the natural sequence: it needs interleaved tokens (e.g. "
                                      "linreg-icl-interleaved)")  # fmt: skip
        if config.construction == "gd" and problem.output_dim != 1:
            raise IncompatibleSetting("construction gd is Prop. 1's layer for one target "
                                      f"(this benchmark has {problem.output_dim})")  # fmt: skip
        if (config.construction == "gd" or config.token_embed) and problem.tokens == "interleaved":
            raise IncompatibleSetting("construction gd and token_embed read constructed tokens "
                                      "(x, y): not interleaved ones")  # fmt: skip

    def analyse(self, source: TaskSource, log: ArtifactLog, seed: int) -> dict[str, float]:
        """The in-context learners' analyses; for one trained layer on constructed tokens
        its weights beside the GD construction, for a tied plain stack the GD++ rate and
        transform its weights implement, and for a trained copy-then-GD model on
        interleaved tokens what its first layer does besides copying (von Oswald et al.
        2023)."""
        from methods.analyses import in_context as icl_analyses

        final = super().analyse(source, log, seed)
        if icl_analyses.weight_analyses_apply(self, source):
            final.update(icl_analyses.lsa_weight_analyses(self, source, log, seed=seed))
        if icl_analyses.gdpp_extraction_applies(self, source):
            final.update(icl_analyses.gdpp_extraction(self, source, seed=seed))
        if icl_analyses.interleaved_ablations_apply(self, source):
            final.update(icl_analyses.interleaved_ablations(self, source, seed=seed))
        if self.twin is not None:
            from methods.analyses.twin import twin_comparison

            final.update(twin_comparison(self, self.twin, source, seed))
        return final

    # The twin is part of the learner: checkpoints, the best-validated state and saved
    # learners carry it, so that it is compared at the model's own step.
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.twin is not None:
            state["twin"] = self.twin.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.twin is not None:
            self.twin.load_state_dict(state["twin"])


    def build_model(self, dim: int) -> nn.Module:
        c = self.config
        features = c.token_embed - self.outputs if c.token_embed else c.embed or dim
        width = features + self.outputs
        if self.interleaved:
            width += 2 * self.problem.context_size + 1  # one-hot position of each token

        def block(softmax: bool) -> LSABlock:
            return LSABlock(width, c.heads, c.init_std, softmax, c.layernorm, c.mlp)

        first = int(c.first_layer == "softmax")
        rest = c.layers - first
        model = nn.Module()
        count = min(rest, 1) if c.tied else rest
        model.blocks = nn.ModuleList(
            [block(True)] * first + [block(c.softmax) for _ in range(count)]
        )
        model.embed = feature_map(dim, c.embed)
        if c.token_embed:
            model.tokens = TokenEmbedding(dim + self.outputs, c.token_embed)
        if c.construction == "gd":
            attention = model.blocks[0].attention
            for name, weights in gd_construction(features, 1.0, 1).items():
                getattr(attention, name).data.copy_(weights)
            attention.requires_grad_(False)
            # The rate of the GD step: the layer's update scaled by it (the construction's
            # projection holds rate 1 over a context of one; forward divides by N).
            model.rate = nn.Parameter(torch.ones(()))
        if c.construction == "copy_gd":
            for name, weights in copy_gd_construction(
                dim, self.outputs, self.problem.context_size, c.copy_scale
            ).items():  # fmt: skip
                block_index, tensor = name.split(".")
                getattr(model.blocks[int(block_index)].attention, tensor).data.copy_(weights)
            model.requires_grad_(False)
            # Running sums of the one-step closed form (numerator, denominator).
            model.register_buffer("moments", torch.zeros(2, dtype=torch.float64))
        return model

    def meta_train_step(self, batch: TaskBatch) -> dict[str, float]:
        if self.config.construction != "copy_gd":
            metrics = super().meta_train_step(batch)
            if self.twin is not None:  # the same batch, its own optimizer
                self.twin.total_steps = self.total_steps
                self.twin.meta_train_step(batch)
            return metrics
        # The construction learns nothing: its GD layer takes the closed-form optimal rate
        # over every batch so far (as the one-step GD reference does).
        num, den = optimal_one_step_rate(*batch)
        with torch.no_grad():
            self.model.moments += torch.stack([num, den]).double()
            eta = self.model.moments[0] / self.model.moments[1] * batch.support_x.shape[1]
            set_copy_gd_rate(self.model.blocks[1].attention, eta, self.problem.context_size,
                             self.outputs)  # fmt: skip
            pred = self.forward(batch.support_x, batch.support_y, batch.query_x)
        loss = per_task_loss(pred, batch.query_y, self.problem.loss).mean()
        return {"loss": loss.item()}

    def layer(self, k: int) -> LSABlock:
        first = int(self.config.first_layer == "softmax")
        if k < first or not self.config.tied:
            return self.model.blocks[k]
        return self.model.blocks[first]

    def tokens(self, support_x, support_y, query_x) -> tuple[Tensor, Tensor]:
        m = self.outputs
        if self.config.token_embed:  # the MLP sees targets too (the query's slot is 0)
            embed = self.model.tokens
            return embed(context_tokens(support_x, support_y)), embed(query_tokens(query_x, m))
        support, queries = self.model.embed(support_x), self.model.embed(query_x)
        if not self.interleaved:
            return context_tokens(support, support_y), query_tokens(queries, m)
        tokens = interleaved_tokens(support, support_y, queries)  # [T * Q, 2n + 1, w + m]
        # The query keeps the last position when the context is shorter than the trained N.
        eye = torch.eye(2 * self.problem.context_size + 1, dtype=tokens.dtype, device=tokens.device)
        positions = torch.cat([eye[: tokens.shape[1] - 1], eye[-1:]])
        positions = positions.expand(tokens.shape[0], -1, -1)
        tokens = torch.cat([tokens[..., :-m], positions, tokens[..., -m:]], dim=-1)
        return tokens[:, :-1], tokens[:, -1:]  # the y-slot stays last

    def forward(self, support_x, support_y, query_x):
        layers = [self.layer(k) for k in range(self.config.layers)]
        step = self.config.dampening
        if self.config.construction == "gd":  # Prop. 1's eta / N, the rate learned
            step = step * self.model.rate / support_x.shape[-2]
        return self.run_layers(layers, support_x, support_y, query_x, step)

    def run_layers(self, layers, support_x, support_y, query_x, dampening: float) -> Tensor:
        """Predictions after ``layers`` in turn, each update scaled by ``dampening``."""
        return self.predictions_by_depth(layers, support_x, support_y, query_x, dampening)[-1]

    def predictions_by_depth(self, layers, support_x, support_y, query_x,
                             dampening: float) -> list[Tensor]:  # fmt: skip
        """The predictions after each of ``layers`` in turn (the k-th: the first k layers
        applied): a repeated layer's curve over depth in one pass, not one pass per depth."""
        context, queries = self.tokens(support_x, support_y, query_x)
        clip, m = self.config.clip, self.outputs
        predictions = []
        for layer in layers:
            new_context, new_queries = layer(context, queries)
            context = context + dampening * (new_context - context)
            queries = queries + dampening * (new_queries - queries)
            if clip > 0:
                context, queries = context.clamp(-clip, clip), queries.clamp(-clip, clip)
            predictions.append(read_prediction(queries, m).reshape(*query_x.shape[:2], m))
        return predictions


def _twin_config(config: LSAConfig) -> LSAConfig:
    """The control a ``twin_control`` model trains beside it: its layer fixed to the GD
    construction, everything else the model's."""
    return dataclasses.replace(config, construction="gd", twin_control=False)


class TokenEmbedding(nn.Module):
    """ICML'23 App. A.7's embedding of whole tokens: e = E (x, y) (linear, no bias), then
    e + MLP(e) with a hidden layer 4x as wide and GELU (the residual of a Transformer
    block, App. A.8)."""

    def __init__(self, width: int, features: int):
        super().__init__()
        self.embed = nn.Linear(width, features, bias=False)
        self.mlp = nn.Sequential(
            nn.Linear(features, 4 * features), nn.GELU(), nn.Linear(4 * features, features)
        )

    def forward(self, tokens: Tensor) -> Tensor:
        embedded = self.embed(tokens)
        return embedded + self.mlp(embedded)


def copy_gd_construction(dim: int, outputs: int, context_size: int,
                         scale: float) -> dict[str, Tensor]:  # fmt: skip
    """The 2-layer model on interleaved tokens [x (dim), one-hot position (2N + 1), y
    (outputs)] that is one GD step (von Oswald et al. 2023, sec. 4, Prop. 3: a copy layer, then
    GD):

    - ``0.*``, softmax: the token at position p attends to position p - 1 (score ``scale``,
      all others 0) and adds that token's x-slot to its own, so each y_i token becomes
      (x_i, y_i); x tokens and the query attend to a y token, whose x-slot is 0;
    - ``1.*``, linear: the Prop. 1 GD layer on the x- and y-slots (its rate set by
      :func:`set_copy_gd_rate`); x tokens have y = 0 and add nothing.
    """
    positions = 2 * context_size + 1
    width = dim + positions + outputs
    xs, ps, ys = slice(0, dim), slice(dim, dim + positions), slice(dim + positions, width)
    zero = lambda: torch.zeros(1, width, width)  # noqa: E731
    copy = {name: zero() for name in ("key", "query", "value", "projection")}
    copy["key"][0, ps, ps] = torch.eye(positions)
    copy["query"][0, ps, ps] = scale * torch.eye(positions).roll(-1, dims=0)
    copy["query"][0, dim + positions - 1, dim] = 0.0  # position 0 has no predecessor
    copy["value"][0, xs, xs] = torch.eye(dim)
    copy["projection"][0, xs, xs] = torch.eye(dim)
    gd = {name: zero() for name in ("key", "query", "value", "projection")}
    gd["key"][0, xs, xs] = gd["query"][0, xs, xs] = torch.eye(dim)
    gd["value"][0, ys, ys] = -torch.eye(outputs)
    return {**{f"0.{k}": v for k, v in copy.items()}, **{f"1.{k}": v for k, v in gd.items()}}


def set_copy_gd_rate(layer, eta: float | Tensor, context_size: int, outputs: int) -> None:
    """The GD layer's projection: ``eta / N`` on the y-slot (Prop. 1); ``eta`` a number or
    a tensor on the layer's device (read there, without a synchronisation)."""
    projection = layer.projection.data
    projection.zero_()
    eye = torch.eye(outputs, dtype=projection.dtype, device=projection.device)
    projection[0, -outputs:, -outputs:] = (eta / context_size) * eye


register_method("lsa", LSATransformer, "linear self-attention transformer (von Oswald 2023)")
register_method(
    "copy_gd",
    LSATransformer,
    "reference: hand-built copy layer + GD layer on interleaved tokens (von Oswald 2023)",
    construction="copy_gd", layers=2, first_layer="softmax",
)
