"""MAML-family learners on linreg-icl against the closed-form one-step GD optimum."""

from __future__ import annotations

import pytest

from benchmarks.planning.plan import plan_run
from benchmarks.protocols.recording import MemoryRecorder
from benchmarks.running.execute import build_method, execute
from mesabench_datasets.regression import LinRegConfig
from tests.helpers import LINREG_EVAL


@pytest.mark.parametrize("input_range", [1.0, 0.5])
def test_maml_one_step_at_optimal_rate_matches_closed_form(input_range):
    eta, loss = LinRegConfig(input_range=input_range).build().one_step_gd_optimum()
    plan = plan_run(
        "maml",
        "linreg-icl",
        seed=0,
        overrides={
            "input_range": str(input_range),
            "iterations": "100",
            "val_every": "50",
            "inner_steps": "1",
            **LINREG_EVAL,
        },
        device="cpu",
    )
    assert plan.method.inner_lr == pytest.approx(eta)  # the benchmark's default rate
    final = execute(plan, MemoryRecorder())
    assert final["final/test_loss_steps1"] == pytest.approx(loss, rel=0.02)
    zero_predictor = 0.5 * plan.task.dim * input_range**2 / 3
    assert final["final/test_loss_steps1"] < 0.6 * zero_predictor


def test_metasgd_learns_the_optimal_scalar_rate():
    eta, _ = LinRegConfig(input_range=1.0).build().one_step_gd_optimum()
    plan = plan_run(
        "metasgd",
        "linreg-icl",
        seed=0,
        overrides={
            "rate_granularity": "scalar",
            "inner_lr": "1.0",
            "outer_lr": "0.03",  # at 0.03 the rate settles within 500 steps (0.8% off)
            "iterations": "500",
            "val_every": "250",
            "meta_batch": "512",
            **LINREG_EVAL,
        },
        device="cpu",
    )
    recorder = MemoryRecorder()
    method = build_method(plan)
    from benchmarks.protocols import EpisodicProtocol

    protocol = EpisodicProtocol(
        plan.protocol, plan.task.build(), plan.seed, recorder, method.device
    )
    protocol.run(method)
    learned = method.modulation.raw("head.weight").item()
    assert learned == pytest.approx(eta, rel=0.05)
