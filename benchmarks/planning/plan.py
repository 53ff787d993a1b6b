"""From names and overrides to a validated run plan, and from a plan to final metrics.

Everything that can be wrong with user input is found by :func:`plan_run`, before anything
touches the results store.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.catalog.installed import benchmark_spec, method_entry
from benchmarks.catalog.specs import BenchmarkSpec
from benchmarks.planning.config import (
    apply_overrides,
    as_dict,
    field_names,
    from_dict,
    validate,
    with_fields,
)
from mesabench_core import RUN_LOCAL_SETTINGS, ConfigError, IncompatibleSetting
from mesabench_datasets.data_root import resolve_data_root
from methods.api import SHARED_SETTINGS
from methods.registry import METHODS, MethodEntry

DEFAULT_BENCHMARK = "sinusoid-5shot"


@dataclass(frozen=True)
class RunPlan:
    """A fully resolved run: which method, on which benchmark, with which settings."""

    method_name: str
    benchmark: str
    seed: int
    method: Any
    task: Any
    protocol: Any
    device: str
    #: Absolute folder searched first for dataset files (None: MESABENCH_DATA is unset and
    #: the per-user cache is searched). Recorded with the run, not part of its identity.
    data_root: str | None = None
    #: The run whose saved learner this run scores, untrained further (``evaluate``); None
    #: for a training run. Part of the identity: evaluations rank apart from training runs.
    learner_from: str | None = None

    def sections(self) -> dict[str, Any]:
        return {"method": self.method, "task": self.task, "protocol": self.protocol}

    @functools.cached_property
    def source(self) -> Any:
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
        }

    def config_hash(self) -> str:
        """Identifies the configuration independently of the seed and the device."""
        body = self.to_dict()
        # The seed, the device and where the files are on this machine say nothing of the
        # configuration (the store reader relies on this: store_reader.RUN_LOCAL_SETTINGS).
        for key in RUN_LOCAL_SETTINGS:
            body.pop(key)
        text = json.dumps(body, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

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
        return flat


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        torch.device(device)
    except RuntimeError:
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N (got {device!r})") from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but no CUDA device is available")
    return device


def _shared_defaults(entry: MethodEntry, values: dict[str, Any], layer: str) -> dict[str, Any]:
    """The part of a benchmark-wide default that this method takes: names of the shared
    vocabulary that the method declares (``shared_settings``) and has as fields. A name
    outside the vocabulary is an error in the layer that set it."""
    unknown = sorted(set(values) - set(SHARED_SETTINGS))
    if unknown:
        raise ConfigError(
            f"{layer} sets {unknown} for every method, but only the shared settings "
            f"{sorted(SHARED_SETTINGS)} may be; set others per method (method_settings)"
        )
    fields = set(field_names(entry.cls.Config()))
    return {k: v for k, v in values.items() if k in entry.cls.shared_settings and k in fields}


def _method_defaults(name: str, entry: MethodEntry, spec: BenchmarkSpec, task: Any) -> Any:
    """Method config defaults, lowest first: the method class; the task source's and the
    benchmark's defaults for every method (scale of the problem, a paper's settings), of
    which a method takes only the shared settings it declares; the named variant (what
    makes sparse_maml sparse); then the benchmark's settings for this very method. The last
    two are strict: a key the method lacks is an error naming the layer."""
    config = entry.cls.Config()
    for values, layer in (
        (task.build().method_defaults(), f"the task source of {spec.name}"),
        (dict(spec.method_defaults), f"benchmark {spec.name}"),
    ):
        config = dataclasses.replace(config, **_shared_defaults(entry, values, layer))
    config = with_fields(config, entry.defaults, f"method {name}'s registered variant")
    config = with_fields(
        config, spec.method_settings.get(name, {}), f"benchmark {spec.name}'s settings for {name}"
    )
    validate(config, prefix="method.")
    return config


def plan_run(
    method: str,
    benchmark: str = DEFAULT_BENCHMARK,
    seed: int = 0,
    overrides: dict[str, str] | None = None,
    device: str = "auto",
    preset: str | None = None,
    data_root: str | None = None,
) -> RunPlan:
    """Resolve and validate a run; raises ConfigError / RegistryError on bad input.

    ``preset`` names one of the benchmark's override sets; explicit ``overrides`` win.
    ``data_root`` (else ``MESABENCH_DATA``) is recorded in the plan as an absolute path.
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
    if seed < 0:
        raise ConfigError(f"seed must be >= 0 (got {seed})")
    sections = spec.sections()  # frozen configs: overrides make new ones
    entry.cls.check_problem(sections["task"].build().problem)
    if preset is not None and preset not in spec.presets:
        allowed = ", ".join(sorted(spec.presets)) or "none"
        raise ConfigError(f"unknown preset {preset!r} for {benchmark}; allowed: {allowed}")
    if preset:  # a preset's own mistake is named as the preset's, not as the user's
        try:
            apply_overrides(
                {"method": _method_defaults(method, entry, spec, sections["task"]), **sections},
                spec.presets[preset],
            )
        except ConfigError as err:
            raise ConfigError(f"preset {preset!r} of {benchmark}: {err}") from None
    overrides = {**(spec.presets[preset] if preset else {}), **(overrides or {})}
    # Resolve twice: the first pass finds the user's task settings, from which the task
    # source derives its method defaults (e.g. linreg's optimal rate for the chosen range).
    first = apply_overrides(
        {"method": _method_defaults(method, entry, spec, sections["task"]), **sections}, overrides
    )
    method_config = _method_defaults(method, entry, spec, first["task"])
    resolved = apply_overrides({"method": method_config, **sections}, overrides)
    try:  # settings that cannot work on this benchmark's problem: refused before recording
        entry.cls.check_config(resolved["method"], resolved["task"].build().problem)
    except IncompatibleSetting as err:
        raise ConfigError(str(err)) from None
    return RunPlan(
        method_name=method,
        benchmark=benchmark,
        seed=seed,
        method=resolved["method"],
        task=resolved["task"],
        protocol=resolved["protocol"],
        device=resolve_device(device),
        data_root=resolve_data_root(data_root),
    )


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
        learner_from=body.get("learner_from"),
    )
