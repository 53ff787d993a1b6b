"""The algorithms the in-context learners are held against, as learners of the same
protocol: K steps of GD (and GD++) on the context at fitted rates, and exact ridge / least
squares (von Oswald et al. 2023; thesis ch. 2). Nothing here is trained by backpropagation
but GD's and GD++'s rates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from mesabench_core import ConfigError, param
from mesabench_datasets.tasks import Problem, TaskBatch, TaskSource
from methods.analyses.sizes import AnalysisSettings, analysis_tasks
from methods.api import ArtifactLog
from methods.in_context.regression import InContextMethod
from methods.reference.algorithms import gd_token_predict, optimal_one_step_rate, ridge_predict
from methods.registry import register_method


@dataclass(frozen=True)
class GDConfig(AnalysisSettings):
    steps: int = param(1, min=1, help="GD steps (K)")
    lr: float = param(1e-2, min=0.0, help="Adam lr of the per-step rates (K > 1 or GD++)")
    tied: bool = param(
        False,
        help="one rate (and GD++ transform) shared by all K steps: the like-for-like "
        "reference for a tied (recurrent) LSA stack",
    )
    eta: float = param(
        0.0, min=0.0, help="a fixed rate for every step, nothing fitted (0: rates fitted on "
        "training tasks); for a learning-rate sweep", added="0.2",
    )
    line_search: bool = param(
        False, added="0.4",
        help="also find one step's rate by a line search on the analysis tasks beside its "
        "closed form there, each timed (final/gd/*: the ICLR'24 blog's comparison)",
    )

    def check(self) -> None:
        if self.line_search and (self.steps != 1 or self.eta):
            raise ConfigError("line_search compares one fitted step's rates (steps=1, eta=0)")


class GDReference(InContextMethod):
    """K steps of GD from w = 0 with per-step rates fitted on training tasks: the closed-form
    empirical optimum for one step, Adam on the per-step rates otherwise (one rate for all
    steps with ``tied``)."""

    Config = GDConfig
    preconditioned = False
    #: A reference algorithm: its rates and solves are computed in float64.
    precisions = frozenset({"fp32"})

    def build_model(self, dim: int) -> nn.Module:
        model = nn.Module()
        c = self.config
        k = 1 if c.tied or c.eta else c.steps
        model.etas = nn.Parameter(torch.full((k,), c.eta or float("nan")))
        model.gammas = nn.Parameter(torch.zeros(k), requires_grad=self.preconditioned)
        # Running sums of the one-step closed form (numerator, denominator).
        model.register_buffer("moments", torch.zeros(2, dtype=torch.float64))
        if self.closed_form or c.eta:
            model.etas.requires_grad_(False)
        # Whether the rates hold a value yet, kept on the host: asking the (device) rates
        # at every step would stall it.
        self._rates_set = bool(c.eta)
        return model

    @property
    def closed_form(self) -> bool:
        return self.config.steps == 1 and not self.preconditioned and not self.config.eta

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
        if self.closed_form or not self._rates_set:
            num, den = optimal_one_step_rate(*batch)
            with torch.no_grad():
                self.model.moments += torch.stack([num, den]).double()
                eta = self.model.moments[0] / self.model.moments[1] * batch.support_x.shape[1]
                self.model.etas.copy_(eta.expand_as(self.model.etas))
            self._rates_set = True
        return super().meta_train_step(batch)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._rates_set = not bool(torch.isnan(self.model.etas).any())

    def analyse(self, source: TaskSource, log: ArtifactLog, seed: int) -> dict[str, float]:
        """The in-context analyses; with ``line_search``, one step's rate in closed form
        beside a line search on the same tasks (the ICLR'24 blog's comparison)."""
        from methods.analyses import in_context as icl_analyses

        final = super().analyse(source, log, seed)
        if self.config.line_search and icl_analyses.is_linear_regression(source):
            final.update(icl_analyses.rate_by_line_search(
                source, self.device, tasks=analysis_tasks(self, icl_analyses.FIT_TASKS),
                seed=seed))  # fmt: skip
        return final


class GDPlusPlusReference(GDReference):
    """GD++: per-step rate eta_k and input transform gamma_k, fitted with Adam."""

    preconditioned = True

    @classmethod
    def check_config(cls, config: GDConfig, problem: Problem) -> None:
        if config.line_search:
            raise ConfigError("line_search compares plain GD's rates (method gd), not GD++'s")


@dataclass(frozen=True)
class RidgeConfig(AnalysisSettings):
    lam: float = param(1e-3, min=0.0, help="ridge strength (0: minimum-norm least squares)")


class RidgeReference(InContextMethod):
    """The exact ridge / least-squares solution on each task's context: nothing to learn."""

    Config = RidgeConfig
    #: A reference algorithm: its solves and rates are computed in float64.
    precisions = frozenset({"fp32"})

    def build_model(self, dim: int) -> nn.Module:
        return nn.Module()

    def forward(self, support_x, support_y, query_x):
        return ridge_predict(support_x, support_y, query_x, self.config.lam)


register_method("gd", GDReference, "reference: K steps of GD with fitted rates")
register_method("gdpp", GDPlusPlusReference, "reference: GD++ (fitted rates and x-transforms)")
register_method("ridge", RidgeReference, "reference: exact ridge regression on the context")
register_method(
    "least_squares",
    RidgeReference,
    "reference: exact minimum-norm least squares on the context",
    lam=0.0,
)
