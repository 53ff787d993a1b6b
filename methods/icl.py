"""In-context learners and their reference algorithms as methods on the episodic protocol.

Their "adaptation" is a forward pass over the support set (the context); meta-training is
ordinary training on fresh task batches. They need flat regression tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from mesabench_core import ConfigError, param
from mesabench_datasets.tasks import Problem, TaskBatch, TaskSource
from mesabench_datasets.tokens import (
    context_tokens,
    interleaved_tokens,
    query_tokens,
    read_prediction,
)
from methods.api import SHARED_SETTINGS, ArtifactLog, EpisodicMethod
from methods.attention import LSABlock
from methods.losses import per_task_loss
from methods.reference_algorithms import gd_token_predict, optimal_one_step_rate, ridge_predict
from methods.registry import register_method


class InContextMethod(EpisodicMethod):
    """Shared plumbing: problem check, training with Adam, prediction without gradients."""

    shared_settings = frozenset(SHARED_SETTINGS)

    protocols = frozenset({"episodic"})
    uses_inner_steps = False

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
        self.model = self.build_model(problem.input_shape[0]).to(device)
        params = [p for p in self.model.parameters() if p.requires_grad]
        lr = getattr(config, "lr", 1e-3)
        self.optimizer = torch.optim.Adam(params, lr=lr) if params else None

    def build_model(self, dim: int) -> nn.Module:
        raise NotImplementedError

    def forward(self, support_x: Tensor, support_y: Tensor, query_x: Tensor) -> Tensor:
        raise NotImplementedError

    def meta_train_step(self, batch: TaskBatch) -> dict[str, float]:
        pred = self.forward(batch.support_x, batch.support_y, batch.query_x)
        loss = per_task_loss(pred, batch.query_y, self.problem.loss).mean()
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            clip = getattr(self.config, "grad_clip", 0.0)
            if clip > 0:
                nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.optimizer.step()
        return {"loss": loss.item()}

    def predict(self, support_x, support_y, query_x, steps=None) -> Tensor:
        with torch.no_grad():
            return self.forward(support_x, support_y, query_x)

    def state_tensors(self) -> list[Tensor]:
        return list(self.model.parameters())

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])

    def analyse(self, source: TaskSource, log: ArtifactLog, seed: int) -> dict[str, float]:
        """On linear regression: alignment with one GD step, and loss vs context size and
        OOD scale beside GD, GD++ and ridge (:mod:`methods.icl_analyses`)."""
        from methods import icl_analyses

        return icl_analyses.analyse(self, source, log, seed)


def feature_map(dim: int, width: int) -> nn.Module:
    """A learned MLP feature map phi: R^dim -> R^width for nonlinear tasks (identity if 0)."""
    if not width:
        return nn.Identity()
    return nn.Sequential(nn.Linear(dim, width), nn.ReLU(), nn.Linear(width, width))


@dataclass(frozen=True)
class LSAConfig:
    layers: int = param(1, min=1, help="attention layers (K)")
    heads: int = param(1, min=1)
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
    dampening: float = param(1.0, min=0.0, help="factor on every layer's update")
    # 0.02 rather than the public code's 0.002: from 0.002 the U(-1, 1) task stays on the
    # zero-predictor plateau for 20k steps (docs/RESULTS.md).
    init_std: float = param(0.02, min=0.0)
    lr: float = param(1e-3, min=0.0)
    grad_clip: float = param(1.0, min=0.0, help="global-norm clip (0: off)")


class LSATransformer(InContextMethod):
    """K layers of (linear) self-attention on constructed tokens (x_i, y_i), tied or untied;
    on benchmarks with interleaved tokens, on x_1, y_1, ..., x_q with one-hot positions."""

    Config = LSAConfig

    @property
    def interleaved(self) -> bool:
        return self.problem.tokens == "interleaved"

    def analyse(self, source: TaskSource, log: ArtifactLog, seed: int) -> dict[str, float]:
        """The in-context learners' analyses, and for one trained layer on constructed tokens
        its weights beside the GD construction (von Oswald et al. 2023)."""
        from methods import icl_analyses

        final = super().analyse(source, log, seed)
        if icl_analyses.weight_analyses_apply(self, source):
            final.update(icl_analyses.lsa_weight_analyses(self, source, log, seed=seed))
        return final

    def build_model(self, dim: int) -> nn.Module:
        c = self.config
        features = c.embed or dim
        width = features + 1
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
        return model

    def layer(self, k: int) -> LSABlock:
        first = int(self.config.first_layer == "softmax")
        if k < first or not self.config.tied:
            return self.model.blocks[k]
        return self.model.blocks[first]

    def tokens(self, support_x, support_y, query_x) -> tuple[Tensor, Tensor]:
        support, queries = self.model.embed(support_x), self.model.embed(query_x)
        if not self.interleaved:
            return context_tokens(support, support_y), query_tokens(queries)
        tokens = interleaved_tokens(support, support_y, queries)  # [T * Q, 2n + 1, w + 1]
        # The query keeps the last position when the context is shorter than the trained N.
        eye = torch.eye(2 * self.problem.context_size + 1, dtype=tokens.dtype, device=tokens.device)
        positions = torch.cat([eye[: tokens.shape[1] - 1], eye[-1:]])
        positions = positions.expand(tokens.shape[0], -1, -1)
        tokens = torch.cat([tokens[..., :-1], positions, tokens[..., -1:]], dim=-1)
        return tokens[:, :-1], tokens[:, -1:]  # the y-slot stays last

    def forward(self, support_x, support_y, query_x):
        layers = [self.layer(k) for k in range(self.config.layers)]
        return self.run_layers(layers, support_x, support_y, query_x, self.config.dampening)

    def run_layers(self, layers, support_x, support_y, query_x, dampening: float) -> Tensor:
        """Predictions after ``layers`` in turn, each update scaled by ``dampening``."""
        context, queries = self.tokens(support_x, support_y, query_x)
        clip = self.config.clip
        for layer in layers:
            new_context, new_queries = layer(context, queries)
            context = context + dampening * (new_context - context)
            queries = queries + dampening * (new_queries - queries)
            if clip > 0:
                context, queries = context.clamp(-clip, clip), queries.clamp(-clip, clip)
        return read_prediction(queries).reshape(query_x.shape[0], query_x.shape[1], 1)


@dataclass(frozen=True)
class GDConfig:
    steps: int = param(1, min=1, help="GD steps (K)")
    lr: float = param(1e-2, min=0.0, help="Adam lr of the per-step rates (K > 1 or GD++)")
    tied: bool = param(
        False,
        help="one rate (and GD++ transform) shared by all K steps: the like-for-like "
        "reference for a tied (recurrent) LSA stack",
    )


class GDReference(InContextMethod):
    """K steps of GD from w = 0 with per-step rates fitted on training tasks: the closed-form
    empirical optimum for one step, Adam on the per-step rates otherwise (one rate for all
    steps with ``tied``)."""

    Config = GDConfig
    preconditioned = False

    def build_model(self, dim: int) -> nn.Module:
        model = nn.Module()
        k = 1 if self.config.tied else self.config.steps
        model.etas = nn.Parameter(torch.full((k,), float("nan")))
        model.gammas = nn.Parameter(torch.zeros(k), requires_grad=self.preconditioned)
        # Running sums of the one-step closed form (numerator, denominator).
        model.register_buffer("moments", torch.zeros(2, dtype=torch.float64))
        if self.closed_form:
            model.etas.requires_grad_(False)
        return model

    @property
    def closed_form(self) -> bool:
        return self.config.steps == 1 and not self.preconditioned

    def step_parameters(self) -> tuple[Tensor, Tensor | None]:
        """The K per-step rates and (GD++ only) x-transforms; tied steps repeat one."""
        k = self.config.steps
        gammas = self.model.gammas.expand(k) if self.preconditioned else None
        return self.model.etas.expand(k), gammas

    def forward(self, support_x, support_y, query_x):
        return gd_token_predict(support_x, support_y, query_x, *self.step_parameters())

    def meta_train_step(self, batch: TaskBatch) -> dict[str, float]:
        # One step: the closed form over every batch so far. K > 1 or GD++: the first batch
        # starts every step at the one-step rate, then Adam fits them.
        if self.closed_form or torch.isnan(self.model.etas).any():
            num, den = optimal_one_step_rate(*batch)
            with torch.no_grad():
                self.model.moments += torch.stack([num, den]).double()
                eta = self.model.moments[0] / self.model.moments[1] * batch.support_x.shape[1]
                self.model.etas.fill_(float(eta))
        return super().meta_train_step(batch)


class GDPlusPlusReference(GDReference):
    """GD++: per-step rate eta_k and input transform gamma_k, fitted with Adam."""

    preconditioned = True


@dataclass(frozen=True)
class RidgeConfig:
    lam: float = param(1e-3, min=0.0, help="ridge strength (0: minimum-norm least squares)")


class RidgeReference(InContextMethod):
    """The exact ridge / least-squares solution on each task's context: nothing to learn."""

    Config = RidgeConfig

    def build_model(self, dim: int) -> nn.Module:
        return nn.Module()

    def forward(self, support_x, support_y, query_x):
        return ridge_predict(support_x, support_y, query_x, self.config.lam)


register_method("lsa", LSATransformer, "linear self-attention transformer (von Oswald 2023)")
register_method("gd", GDReference, "reference: K steps of GD with fitted rates")
register_method("gdpp", GDPlusPlusReference, "reference: GD++ (fitted rates and x-transforms)")
register_method("ridge", RidgeReference, "reference: exact ridge regression on the context")
register_method(
    "least_squares",
    RidgeReference,
    "reference: exact minimum-norm least squares on the context",
    lam=0.0,
)
