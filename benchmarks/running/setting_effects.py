"""Whether a setting changes what a run does: the check that keeps a setting from being a
no-op whose only effect is a new configuration hash (a new row on every board).

A run's *behaviour* here is everything it measured and kept, read in-process: its final
metrics (less those that measure the machine, such as wall time), every metric record with
its step, and the learner it left. Two runs differ in behaviour when any of these differ.
A setting that only changes how fast the same numbers come (task batching, evaluation
chunks, compilation) is checked the other way: its runs must agree to float rounding.

Plugins check their own settings the same way (``benchmarks.plugin_api.setting_effect``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.metrics.catalog import measures_the_machine
from benchmarks.planning.plan import plan_run
from benchmarks.protocols.recording import MemoryRecorder
from benchmarks.running.execute import execute


@dataclass(frozen=True)
class Behaviour:
    """What a run measured and kept (see the module's docstring)."""

    final: Mapping[str, float]
    records: Mapping[str, tuple[tuple[int, float], ...]]
    learner: str

    def same_as(self, other: Behaviour, rel: float = 0.0) -> bool:
        """Equal, or (``rel`` > 0) equal up to that relative difference in every number. A
        NaN equals a NaN here (a metric undefined in both runs, such as the precision of no
        detected boundary), which ``==`` on the dataclass would call a change."""
        if rel == 0.0 and self.learner != other.learner:  # a digest: exact or not at all
            return False
        if set(self.final) != set(other.final) or set(self.records) != set(other.records):
            return False
        pairs = [(self.final[k], other.final[k]) for k in self.final]
        for key, mine in self.records.items():
            theirs = other.records[key]
            if [s for s, _ in mine] != [s for s, _ in theirs]:
                return False
            pairs += [(a, b) for (_, a), (_, b) in zip(mine, theirs, strict=True)]
        return all(_close(a, b, rel) for a, b in pairs)

    def without_cost(self) -> Behaviour:
        """The same, less the metrics that measure what the computation costs."""
        return Behaviour(final={k: v for k, v in self.final.items() if k not in COST_MEASURES},
                         records={k: v for k, v in self.records.items()
                                  if k not in COST_MEASURES},
                         learner=self.learner)  # fmt: skip


#: Metrics of what a run's computation costs, not what it computed: equal for one seed and
#: config, but a speed-only setting (a mesa layer's chunked form) changes them by design.
COST_MEASURES = frozenset({"final/step_flops"})


def _close(a: float, b: float, rel: float) -> bool:
    if a == b:
        return True
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def _digest(value: Any, into: Any) -> None:
    """Feed every tensor and number of a (nested) state into a hash, in key order."""
    if isinstance(value, torch.Tensor):
        into.update(value.detach().cpu().contiguous().numpy().tobytes())
    elif isinstance(value, Mapping):
        for key in sorted(value, key=str):
            into.update(str(key).encode())
            _digest(value[key], into)
    elif isinstance(value, list | tuple):
        for item in value:
            _digest(item, into)
    else:
        into.update(repr(value).encode())


class _Keeping(MemoryRecorder):
    """A memory recorder that also notes when each checkpoint was kept (its step count)."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[Any] = []

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        super().save_checkpoint(state)
        self.kept.append(state.get("done"))


def behaviour(method: str, benchmark: str, settings: Mapping[str, str],
              data_root: str | None = None) -> Behaviour:  # fmt: skip
    """Run ``method`` on ``benchmark`` with ``settings`` (seed 0, CPU) in-process."""
    plan = plan_run(method, benchmark, 0, dict(settings), device="cpu", data_root=data_root)
    recorder = _Keeping()
    final = execute(plan, recorder)
    learner = hashlib.sha256()
    _digest(recorder.learners, learner)
    records = {k: tuple(v) for k, v in recorder.metrics.items() if not measures_the_machine(k)}
    records["checkpoints kept at"] = tuple((i, float(d or 0)) for i, d in enumerate(recorder.kept))
    return Behaviour(
        final={k: v for k, v in final.items() if not measures_the_machine(k)},
        records=records,
        learner=learner.hexdigest(),
    )


def setting_effect(
    method: str, benchmark: str, base: Mapping[str, str], key: str, value: str,
    data_root: str | None = None, speed_only: bool = False,
) -> str | None:  # fmt: skip
    """None when setting ``key`` to ``value`` (over ``base``) does what it should: changes the
    run's behaviour, or for a ``speed_only`` setting, leaves its numbers equal to float
    rounding (1e-5). Else one line saying what is wrong."""
    before = behaviour(method, benchmark, base, data_root)
    after = behaviour(method, benchmark, {**base, key: value}, data_root)
    return judged(before, after, f"{key}={value}", f"{method} on {benchmark}", speed_only)


def judged(before: Behaviour, after: Behaviour, setting: str, where: str,
           speed_only: bool = False) -> str | None:  # fmt: skip
    """What :func:`setting_effect` says of two runs already made (a base run shared by many
    settings' checks): None when ``setting`` did what it should, else one line."""
    if speed_only:
        if after.without_cost().same_as(before.without_cost(), rel=1e-5):
            return None
        return f"{setting} changed the numbers of {where} (speed only?)"
    if after.same_as(before):
        return f"{setting} changed nothing {where} measured or kept"
    return None
