"""Autoregressive linear dynamics and the causal sequence learners on it."""

from __future__ import annotations

import pytest
import torch

from benchmarks.planning.config import ConfigError
from benchmarks.planning.plan import plan_run
from benchmarks.protocols.recording import MemoryRecorder
from benchmarks.running.execute import execute
from mesabench_datasets.dynamics import LinDynConfig, random_orthogonal
from mesabench_datasets.tasks import seeded_generator


def test_lindyn_sequences_follow_an_orthogonal_map():
    w = random_orthogonal(5, 10, seeded_generator(0))
    eye = torch.eye(10).expand(5, 10, 10)
    torch.testing.assert_close(w @ w.transpose(1, 2), eye, atol=1e-5, rtol=0)
    batch = LinDynConfig(noise=0.0).build().sample(4, seeded_generator(1))
    assert batch.support_x.shape == (4, 49, 10)
    assert torch.equal(batch.support_x[:, 1:], batch.support_y[:, :-1])  # shifted by one
    norms = torch.cat([batch.support_x, batch.support_y[:, -1:]], 1).norm(dim=-1)
    torch.testing.assert_close(norms, norms[:, :1].expand_as(norms))  # orthogonal: no decay
    # Noiseless: s_{t+1} = W s_t, so the map is recoverable from the sequence itself.
    x, y = batch.support_x[0], batch.support_y[0]
    w_hat = torch.linalg.lstsq(x, y).solution.T
    torch.testing.assert_close(x @ w_hat.T, y, atol=1e-4, rtol=0)


def test_only_sequence_learners_accept_causal_benchmarks():
    with pytest.raises(ConfigError, match="causal sequence benchmark"):
        plan_run("maml", "lindyn", device="cpu")
    with pytest.raises(ConfigError, match="flat regression"):
        plan_run("lsa", "lindyn", device="cpu")
    with pytest.raises(ConfigError, match="sequence learners need"):
        plan_run("mesa", "linreg-icl", device="cpu")


def test_mesa_learns_in_context_and_logs_the_loss_by_position():
    plan = plan_run(
        "mesa",
        "lindyn",
        overrides={"iterations": "200", "val_every": "100", "test_tasks": "200", "length": "20"},
        device="cpu",
    )
    recorder = MemoryRecorder()
    final = execute(plan, recorder)
    curve = [value for _, value in recorder.metrics["analysis/loss_by_t"]]
    assert len(curve) == 19
    assert final["final/loss_t19"] == pytest.approx(curve[-1])
    # The zero predictor scores 0.5 * D = 5 at every position; after 200 steps one mesa layer
    # is 17% below it overall (4.17) and learns in context: its last positions are a third
    # below its first (3.45 at t = 19 vs 5.11 at t = 1).
    assert final["final/test_loss"] < 0.9 * 5.0
    assert final["final/loss_t19"] < 0.75 * final["final/loss_t1"]


def test_hybrid_stack_starts_with_causal_softmax_attention():
    from benchmarks.running.execute import build_method
    from methods.mesa import MesaLayer
    from methods.sequence import CausalSoftmaxAttention

    plan = plan_run(
        "mesa",
        "lindyn",
        overrides={"layers": "2", "first_layer": "softmax", "length": "12", "mesa_form": "chunked"},
        device="cpu",
    )
    method = build_method(plan)
    first, second = method.model.layers
    assert isinstance(first, CausalSoftmaxAttention) and isinstance(second, MesaLayer)
    assert second.form == "chunked"
    torch.manual_seed(0)
    tokens = torch.randn(3, 12, 20)
    changed = tokens.clone()
    changed[:, 7:] += 1.0  # the future must not change the past, through both layers
    out = method.model.layers[1](first(tokens))
    torch.testing.assert_close(second(first(changed))[:, :7], out[:, :7])
    assert not torch.allclose(first(changed)[:, 7:], first(tokens)[:, 7:])
