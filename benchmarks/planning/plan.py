"""From names and overrides to a validated run plan, and from a plan to final metrics.

Everything that can be wrong with user input is found by :func:`plan_run`, before anything
touches the results store.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from benchmarks.catalog.installed import benchmark_spec, method_entry
from benchmarks.planning.config import as_dict, from_dict
from benchmarks.planning.resolve import chosen, layers_of, resolve
from benchmarks.protocols.base import execution_of
from mesabench_core import RUN_LOCAL_SETTINGS, ConfigError, IncompatibleSetting, identity_dict
from mesabench_datasets.data_root import explicit_root, resolve_data_root
from mesabench_datasets.tasks import TaskConfig, TaskSource
from methods.registry import METHODS

DEFAULT_BENCHMARK = "sinusoid-5shot"


@dataclass(frozen=True)
class RunPlan:
    """A fully resolved run: which method, on which benchmark, with which settings."""

    method_name: str
    benchmark: str
    seed: int
    #: The method's config, the task source's and the protocol's: frozen dataclasses.
    method: Any
    task: TaskConfig
    protocol: Any
    device: str
    #: Absolute folder searched first for dataset files (None: MESABENCH_DATA is unset and
    #: the per-user cache is searched). Recorded with the run, not part of its identity.
    data_root: str | None = None
    #: Whether ``data_root`` was given explicitly (``--data-root``): then it is the only
    #: folder searched. Recorded in the plan (a resume searches as the run did), not part
    #: of the identity.
    data_root_only: bool = False
    #: The run whose saved learner this run scores, untrained further (``evaluate``); None
    #: for a training run. Part of the identity: evaluations rank apart from training runs.
    learner_from: str | None = None
    #: A run of ``tune`` (JSON: a trial, or the configuration it selected, with the budget
    #: and the metric it was selected on); None otherwise. Part of the identity: a tuned row
    #: is never pooled with an untuned one, nor a trial counted as a result.
    tuning: str | None = None
    #: Which layer set each field (``section.field`` -> the layer's name; see
    #: :mod:`benchmarks.planning.resolve`). Recorded with the run, not part of its identity;
    #: empty for a plan rebuilt from a recorded run.
    set_by: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def sections(self) -> dict[str, Any]:
        return {"method": self.method, "task": self.task, "protocol": self.protocol}

    @functools.cached_property
    def source(self) -> TaskSource:
        """The run's task source, built once: data is loaded into it by ``prepare()``, and
        the method and the protocol are given this same object."""
        return self.task.build()

    def to_dict(self) -> dict[str, Any]:
        return {
            "method_name": self.method_name,
            "benchmark": self.benchmark,
            "seed": self.seed,
            "device": self.device,
            "data_root": self.data_root,
            **{name: as_dict(cfg) for name, cfg in self.sections().items()},
            # Only where set, so that every training run's config hash stays as it was.
            **({"learner_from": self.learner_from} if self.learner_from else {}),
            **({"tuning": self.tuning} if self.tuning else {}),
            **({"data_root_only": True} if self.data_root_only else {}),
        }

    def rooted_here(self, data_root: str | None) -> RunPlan:
        """The plan (made on another machine) with this machine's data root: ``data_root``
        when given, the only folder searched; else MESABENCH_DATA, then the cache."""
        return dataclasses.replace(
            self, data_root=explicit_root(data_root), data_root_only=bool(data_root)
        )

    def config_hash(self) -> str:
        """Identifies the configuration independently of the seed and the device."""
        # Fields added after runs were recorded count only where set (core.identity_dict).
        body = {**self.to_dict(), **{n: identity_dict(c) for n, c in self.sections().items()}}
        # The seed, the device and where the files are on this machine say nothing of the
        # configuration (the store reader relies on this: store_reader.RUN_LOCAL_SETTINGS).
        for key in RUN_LOCAL_SETTINGS:
            body.pop(key)
        body.pop("data_root_only", None)
        text = json.dumps(body, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def departures(self) -> dict[str, str]:
        """The method's settings that a preset or the user chose (``--set``, a sweep's or a
        tune's settings), with their values: what sets this run apart from the benchmark's
        defaults for the method, shown beside its row on a board. Empty for a plan rebuilt
        from a recorded run (its deciding layers are not recorded in it)."""
        flat = self.flat_params()
        return {key: flat[key] for key in sorted(chosen(self.set_by))
                if key.startswith("method.") and key in flat}  # fmt: skip

    def execution_choices(self) -> dict[str, str]:
        """What the method chose for this run's device where the config left it the choice
        (``Method.execution_choices``): recorded with the run as a tag of its own (it
        follows the device, so runs of one configuration may differ), not a param, which
        the store reads once per configuration; not part of the identity."""
        cls = method_entry(self.method_name).cls
        return cls.execution_choices(self.method, self.source.problem, self.device)

    def flat_params(self) -> dict[str, str]:
        flat = {
            "method_name": self.method_name,
            "benchmark": self.benchmark,
            "seed": str(self.seed),
            "device": self.device,
            "data_root": self.data_root or "-",
        }
        for name, cfg in self.sections().items():
            for key, value in as_dict(cfg).items():
                flat[f"{name}.{key}"] = str(value)
        if self.learner_from:
            flat["evaluation.learner_from"] = self.learner_from
        if self.tuning:
            flat["tuning"] = self.tuning
        return flat


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except RuntimeError:
        parsed = None
    if parsed is None or parsed.type not in ("cpu", "cuda"):
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N (got {device!r})")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but no CUDA device is available")
    if parsed.type == "cuda" and parsed.index is not None and (
        parsed.index >= torch.cuda.device_count()
    ):
        raise ConfigError(f"device {device!r}: this machine has CUDA devices 0 to "
                          f"{torch.cuda.device_count() - 1}")  # fmt: skip
    return device


def check_execution(method: str, cls: type, protocol: Any) -> None:
    """Refuse a precision or compilation the method does not take, in one line."""
    settings = execution_of(protocol)
    if settings.precision not in cls.precisions:
        allowed = ", ".join(sorted(cls.precisions))
        raise ConfigError(f"precision: method {method!r} runs at {allowed} only (got "
                          f"{settings.precision!r})")  # fmt: skip
    if settings.compile != "off" and not cls.compilable:
        raise ConfigError(f"compile: method {method!r} does not support torch.compile; "
                          "allowed: off")  # fmt: skip


def plan_run(
    method: str,
    benchmark: str = DEFAULT_BENCHMARK,
    seed: int = 0,
    overrides: dict[str, str] | None = None,
    device: str = "auto",
    preset: str | None = None,
    data_root: str | None = None,
    tuning: str | None = None,
    carried: dict[str, str] | None = None,
) -> RunPlan:
    """Resolve and validate a run; raises ConfigError / RegistryError on bad input.

    ``carried``: an evaluation's settings from the run whose learner it scores, applied
    under ``overrides`` and not counted as the user's choice (:func:`resolve.chosen`).

    ``preset`` names one of the benchmark's override sets; explicit ``overrides`` win.
    ``data_root`` (else ``MESABENCH_DATA``) is recorded in the plan as an absolute path; a
    ``data_root`` given here is the only folder the run searches.
    """
    entry = method_entry(method)
    spec = benchmark_spec(benchmark)
    if spec.protocol_name not in entry.cls.protocols:
        kin = [
            e.name
            for e in METHODS
            if method in e.name and spec.protocol_name in e.value.cls.protocols
        ]
        hint = f"; for this benchmark: {', '.join(kin)}" if kin else ""
        raise ConfigError(
            f"method {method!r} supports protocols {sorted(entry.cls.protocols)}, but "
            f"benchmark {benchmark!r} uses {spec.protocol_name!r}{hint}"
        )
    if not 0 <= seed < 2**63:  # a torch generator's seed is 64 bits
        raise ConfigError(f"seed must be >= 0 and < 2**63 (got {seed})")
    if preset is not None and preset not in spec.presets:
        allowed = ", ".join(sorted(spec.presets)) or "none"
        raise ConfigError(f"unknown preset {preset!r} for {benchmark}; allowed: {allowed}")
    spec_source = spec.task.build()
    entry.cls.check_problem(spec_source.problem)  # a method that cannot learn it at all
    layers = layers_of(method, entry, spec, preset, overrides or {}, carried)
    resolution = resolve(method, entry, spec, layers, spec_source)
    resolved, problem = resolution.sections, resolution.source.problem
    try:  # settings that cannot work on this benchmark's problem: refused before recording
        entry.cls.check_config(resolved["method"], problem)
        users = {k.split(".", 1)[1] for k in chosen(resolution.set_by) if k.startswith("method.")}
        entry.cls.check_run(resolved["method"], problem, resolved["protocol"], frozenset(users))
    except IncompatibleSetting as err:
        raise ConfigError(str(err)) from None
    check_execution(method, entry.cls, resolved["protocol"])
    plan = RunPlan(
        method_name=method,
        benchmark=benchmark,
        seed=seed,
        method=resolved["method"],
        task=resolved["task"],
        protocol=resolved["protocol"],
        device=resolve_device(device),
        data_root=resolve_data_root(data_root),
        data_root_only=bool(data_root),
        tuning=tuning,
        set_by=resolution.set_by,
    )
    plan.__dict__["source"] = resolution.source  # built once, by the resolution
    return plan


def plan_from_dict(body: dict[str, Any]) -> RunPlan:
    """Rebuild a plan from :meth:`RunPlan.to_dict` (used to resume a run)."""
    entry = method_entry(body["method_name"])
    spec = benchmark_spec(body["benchmark"])
    return RunPlan(
        method_name=body["method_name"],
        benchmark=body["benchmark"],
        seed=int(body["seed"]),
        method=from_dict(entry.cls.Config, body["method"]),
        task=from_dict(type(spec.task), body["task"]),
        protocol=from_dict(type(spec.protocol), body["protocol"]),
        device=body["device"],
        data_root=body.get("data_root"),
        data_root_only=bool(body.get("data_root_only", False)),
        learner_from=body.get("learner_from"),
        tuning=body.get("tuning"),
    )
