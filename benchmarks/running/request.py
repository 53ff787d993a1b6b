"""What a caller asks the run service for, as plain data (no torch, no store): a request
travels as JSON to a warm cell and as a command line to a cold one, and a sweep builds one
per cell without importing the training stack."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunRequest:
    """One run asked for: a new run of ``method`` on ``benchmark``, or (``resume``) the
    continuation of a killed one. ``settings`` are ``key`` or ``section.key`` -> a
    command-line string or a Python value. Plain data: it travels as JSON to a warm cell
    and as a command line to a cold one."""

    method: str | None = None
    benchmark: str | None = None
    seed: int = 0
    settings: Mapping[str, Any] = field(default_factory=dict)
    preset: str | None = None
    device: str = "auto"
    tracking_uri: str | None = None
    data_root: str | None = None
    #: A sweep's parent run: this run is recorded as its child.
    parent: str | None = None
    #: Claim the cell (config, seed) first: wait while another process runs it, do nothing
    #: if it is FINISHED, take it over if its holder died. Sweeps run every cell this way.
    exclusive: bool = False
    #: Also log CPU, memory (and GPU) use every 10 s (MLflow's ``system/*``).
    system_metrics: bool = False
    #: Continue this killed run instead (no method, benchmark, settings or data root).
    resume: str | None = None
    #: A ``tune`` run's role (``RunPlan.tuning``): a trial or the selected configuration.
    tuning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "settings": dict(self.settings)}

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> RunRequest:
        return cls(**body)

    def command(self) -> list[str]:
        """The same request as ``python -m benchmarks`` arguments (a cold cell's)."""
        argv = ["run"]
        valued = [("--method", self.method), ("--benchmark", self.benchmark),
                  ("--seed", None if self.resume else str(self.seed)),
                  ("--tracking-uri", self.tracking_uri), ("--parent", self.parent),
                  ("--device", self.device), ("--preset", self.preset),
                  ("--data-root", self.data_root), ("--resume", self.resume),
                  ("--tuning", self.tuning)]  # fmt: skip
        for flag, value in valued:
            if value is not None:
                argv += [flag, value]
        switches = [("--exclusive", self.exclusive), ("--system-metrics", self.system_metrics)]
        argv += [flag for flag, on in switches if on]
        for key, value in self.settings.items():
            argv += ["--set", f"{key}={value}"]
        return argv


@dataclass(frozen=True)
class EvaluationRequest:
    """Score the saved learner of finished training run ``run_id`` again, on its own
    benchmark or another compatible one, into a new run that records where it came from."""

    run_id: str
    benchmark: str | None = None
    #: ``best`` or ``final``; None: best where saved, else final.
    learner: str | None = None
    #: None: the training run's seed.
    seed: int | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    device: str = "auto"
    tracking_uri: str | None = None
    data_root: str | None = None
