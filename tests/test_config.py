"""Typed configs: parsing, validation and override resolution."""

from __future__ import annotations

import pytest

from benchmarks.config import ConfigError, apply_overrides, parse_value, validate
from benchmarks.protocols import EpisodicConfig
from datasets.regression import LinRegConfig, SinusoidConfig
from methods.maml import MAMLConfig


@pytest.mark.parametrize(
    "tp, text, value",
    [
        (int, "3", 3),
        (float, "1e-3", 1e-3),
        (bool, "false", False),
        (bool, "1", True),
        (tuple[int, ...], "1,10", (1, 10)),
        (tuple[float, float], "(0.1, 5)", (0.1, 5.0)),
        (float | None, "none", None),
        (float | None, "0.5", 0.5),
    ],
)
def test_parse_value(tp, text, value):
    assert parse_value(tp, text, "f") == value


def test_validate_reports_field_and_range():
    with pytest.raises(ConfigError, match=r"task\.shots must be >= 1 \(got 0\)"):
        validate(SinusoidConfig(shots=0), prefix="task.")
    with pytest.raises(ConfigError, match="amplitude must be"):
        validate(SinusoidConfig(amplitude=(5.0, 1.0)))
    with pytest.raises(ConfigError, match="modulation needs adapted parameters"):
        validate(MAMLConfig(adapt="none", modulation="binary_mask"))


def test_overrides_resolve_bare_and_qualified_keys():
    sections = {"method": MAMLConfig(), "task": LinRegConfig(), "protocol": EpisodicConfig()}
    out = apply_overrides(sections, {"inner_lr": "0.5", "task.dim": "4", "eval_steps": "0,1,5"})
    assert out["method"].inner_lr == 0.5 and out["task"].dim == 4
    assert out["protocol"].eval_steps == (0, 1, 5)
    assert sections["method"].inner_lr == 0.01, "overrides never mutate the originals"
    with pytest.raises(ConfigError, match="is ambiguous; write one of method.x, task.x"):
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class A:
            x: int = 1

        apply_overrides({"method": A(), "task": A()}, {"x": "2"})
    with pytest.raises(ConfigError, match="unknown section 'model'"):
        apply_overrides(sections, {"model.inner_lr": "1"})
