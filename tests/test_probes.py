"""Linear probes on a sequence model's residual stream, against hand-built models whose
hidden states are known."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mesabench_datasets.dynamics import LinDynConfig
from mesabench_datasets.tasks import seeded_generator
from methods.analyses.probes import fit_probe, probe_depths, probe_r2, probe_targets
from methods.in_context.sequence import CausalLinearAttention, constructed_tokens


def test_probe_r2_agrees_with_a_least_squares_fit_computed_by_numpy():
    g = torch.Generator().manual_seed(0)
    features = torch.randn(400, 6, generator=g, dtype=torch.float64)
    target = features @ torch.randn(6, 3, generator=g, dtype=torch.float64)
    target += 1.5 * torch.randn(400, 3, generator=g, dtype=torch.float64)
    fit, test = slice(0, 300), slice(300, 400)
    weights = fit_probe(features[fit], target[fit], ridge=0.0)
    # numpy, independently: lstsq with a bias column, R^2 on the held-out rows.
    x = np.c_[features.numpy(), np.ones(400)]
    w, *_ = np.linalg.lstsq(x[:300], target.numpy()[:300], rcond=None)
    residual = target.numpy()[300:] - x[300:] @ w
    centred = target.numpy()[300:] - target.numpy()[300:].mean(axis=0)
    expected = 1 - (residual**2).sum() / (centred**2).sum()
    assert probe_r2(weights, features[test], target[test]) == pytest.approx(expected, rel=1e-9)
    assert 0.5 < expected < 0.95  # a partly explained target: the check can fail both ways
    noise = torch.randn(400, 3, generator=g, dtype=torch.float64)
    unrelated = probe_r2(fit_probe(features[fit], noise[fit]), features[test], noise[test])
    assert unrelated < 0.05


def test_probe_targets_match_a_per_position_computation():
    seq = LinDynConfig(dim=3, length=8).build().sample(2, seeded_generator(1)).query_x.double()
    targets = probe_targets(seq, lam=0.5)
    for b in range(2):
        for t in range(seq.shape[1]):
            prev = [np.zeros(3)] + [seq[b, i].numpy() for i in range(t)]  # s_{t'-1}, t' <= t
            cur = [seq[b, i].numpy() for i in range(t + 1)]
            gram = sum(np.outer(p, p) for p in prev) + np.eye(3) / 0.5
            memory = sum(np.outer(c, p) for c, p in zip(cur, prev, strict=True))
            np.testing.assert_allclose(targets["inverse_term"][b, t].numpy(),
                                       np.linalg.solve(gram, cur[-1]), rtol=1e-10)  # fmt: skip
            np.testing.assert_allclose(targets["gd_step"][b, t].numpy(), memory @ cur[-1],
                                       rtol=1e-10)  # fmt: skip


def gd_step_layer(dim: int) -> CausalLinearAttention:
    """A linear-attention layer on tokens (s_t, s_{t-1}) that writes the one-step GD
    prediction sum_t' s_t' s_{t'-1}^T s_t into the second half of the token."""
    layer = CausalLinearAttention(2 * dim, heads=1, init_std=0.0)
    top, bottom = slice(0, dim), slice(dim, 2 * dim)
    with torch.no_grad():
        layer.key[0, top, bottom] = torch.eye(dim)  # k = s_{t-1}
        layer.query[0, top, top] = torch.eye(dim)  # q = s_t
        layer.value[0, top, top] = torch.eye(dim)  # v = s_t
        layer.projection[0, bottom, top] = torch.eye(dim)
    return layer.double()


def test_a_probe_finds_the_gd_step_after_the_layer_that_computes_it_and_not_before():
    dim = 4
    layer = gd_step_layer(dim)
    source = LinDynConfig(dim=dim, length=20).build()
    fit = source.sample(128, seeded_generator(2)).query_x.double()
    test = source.sample(128, seeded_generator(3)).query_x.double()

    def states(seq):
        tokens = constructed_tokens(seq)
        with torch.no_grad():
            return [tokens, layer(tokens)]

    # The layer writes exactly the target onto the token it read.
    gd = probe_targets(test)["gd_step"]
    written = states(test)[1][..., dim:] - constructed_tokens(test)[..., dim:]
    torch.testing.assert_close(written, gd)
    before, after = probe_depths(states(fit), probe_targets(fit)["gd_step"], states(test), gd,
                                 first_position=dim)  # fmt: skip
    # Not exactly 1: the residual stream keeps s_{t-1} under the written target, and a
    # linear probe cannot take it out; it is small beside the target (norm ~ t |s|^3).
    assert after > 0.998
    assert before < 0.1  # a cubic function of the inputs: a linear probe misses it


def test_implicit_target_probing_is_the_ridge_prediction_where_the_inverse_term_is_read():
    """Where a layer's tokens hold R_t s_t exactly, the implicit target probe (thesis Fig.
    3.13) predicts (sum s_t' s_t'-1^T) R_t s_t: ridge regression's prediction, at its fitted
    eta, recomputed here; on the input tokens it does worse, and the GD step's loss is that
    of the step at its fitted rate."""
    from methods.analyses.probes import implicit_targets, transition_moments

    dim = 3
    source = LinDynConfig(dim=dim, length=15).build()
    batches = [source.sample(200, seeded_generator(role)) for role in (4, 5)]
    draws = []
    for batch in batches:
        x = batch.query_x.double()
        targets = {"next_state": batch.query_y.double(), **probe_targets(x)}
        draws.append(([constructed_tokens(x), targets["inverse_term"]], targets))
    got = implicit_targets(draws, tuple(b.query_x.double() for b in batches), dim)

    def predicted(batch, targets, name):
        moments = transition_moments(batch.query_x.double())
        if name == "gd_step":
            return targets["gd_step"][:, dim:]
        return (moments @ targets["inverse_term"][..., None])[..., 0][:, dim:]

    for name, key in (("inverse_term", "final/probe/implicit_loss_layer1"),
                      ("gd_step", "final/probe/implicit_gd_loss")):
        fit = predicted(batches[0], draws[0][1], name).reshape(-1, dim)
        truth = draws[0][1]["next_state"][:, dim:].reshape(-1, dim)
        eta = (fit * truth).sum() / fit.pow(2).sum()
        test = predicted(batches[1], draws[1][1], name).reshape(-1, dim)
        target = draws[1][1]["next_state"][:, dim:].reshape(-1, dim)
        assert got[key] == pytest.approx(float(0.5 * (eta * test - target).pow(2).sum(-1).mean()),
                                         rel=1e-6)  # fmt: skip
    assert got["final/probe/implicit_loss_layer0"] > got["final/probe/implicit_loss_layer1"]
    assert got["final/probe/implicit_loss_best"] == got["final/probe/implicit_loss_layer1"]
