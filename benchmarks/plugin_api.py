"""The public surface for plugins: everything a method or benchmark plugin may import.

A plugin imports from this module only; every other module of the suite is private and may
change between releases. ``API_VERSION`` is this surface's major version: it goes up only
when something here changes incompatibly. A plugin states the version it was written for,
as a literal (``api_version = 1`` on a method class, ``api_version=1`` in a
``BenchmarkSpec``); the registry refuses a plugin that states none or another one, alone,
in one line, and every other method and benchmark keeps working.

Guides: docs/writing-a-method.md and docs/writing-a-benchmark.md.
"""

from __future__ import annotations

from benchmarks.catalog.installed import API_VERSION
from benchmarks.catalog.references import ReferenceRow
from benchmarks.catalog.specs import BenchmarkSpec
from benchmarks.metrics.catalog import declare_metric
from benchmarks.protocols import ContinualConfig, EpisodicConfig, OnlineConfig
from benchmarks.protocols.base import ExecutionSettings
from mesabench_core import ConfigError, param
from mesabench_datasets.data_root import DataNotFoundError, DatasetFormatError, find_file
from mesabench_datasets.tasks import Problem, TaskBatch, TaskSource, seeded_generator
from methods.api import (
    SHARED_SETTINGS,
    ArtifactLog,
    Choice,
    ContinualMethod,
    EpisodicMethod,
    FloatRange,
    IncompatibleSetting,
    IntRange,
    Method,
    OnlineMethod,
    Space,
)
from methods.common.device_guard import DeviceGuard, DeviceLeak, host_read
from methods.common.losses import per_task_accuracy, per_task_loss, task_loss
from methods.common.networks import build_network, check_network
from methods.continual.replay import ReservoirBuffer
from methods.gradient.inner_loop import InnerLoop
from methods.gradient.modulation import (
    FixedRate,
    GradientModulation,
    LearnedRates,
    ModulationSettings,
)
from methods.registry import MethodEntry

__all__ = [
    "API_VERSION",
    "SHARED_SETTINGS",
    "ArtifactLog",
    "BenchmarkSpec",
    "Choice",
    "ConfigError",
    "ContinualConfig",
    "ContinualMethod",
    "DataNotFoundError",
    "DatasetFormatError",
    "DeviceGuard",
    "DeviceLeak",
    "EpisodicConfig",
    "EpisodicMethod",
    "ExecutionSettings",
    "FixedRate",
    "FloatRange",
    "GradientModulation",
    "IncompatibleSetting",
    "InnerLoop",
    "IntRange",
    "LearnedRates",
    "Method",
    "MethodEntry",
    "ModulationSettings",
    "OnlineConfig",
    "OnlineMethod",
    "Problem",
    "ReferenceRow",
    "ReservoirBuffer",
    "Space",
    "TaskBatch",
    "TaskSource",
    "build_network",
    "check_network",
    "declare_metric",
    "find_file",
    "host_read",
    "param",
    "per_task_accuracy",
    "per_task_loss",
    "seeded_generator",
    "setting_effect",
    "task_loss",
]


def setting_effect(
    method: str, benchmark: str, base: dict[str, str], key: str, value: str,
    data_root: str | None = None, speed_only: bool = False,
) -> str | None:  # fmt: skip
    """Whether setting ``key`` to ``value`` changes what a run of ``method`` on ``benchmark``
    measured and kept (in-process, seed 0, CPU; ``base``: the other settings, e.g. a tiny
    budget), or for a ``speed_only`` setting leaves its numbers equal: None when it does
    what it should, else one line saying what is wrong. Imported when called (it runs)."""
    from benchmarks.running.setting_effects import setting_effect as check

    return check(method, benchmark, base, key, value, data_root, speed_only)
