"""The derived multi-step references (benchmarks.published.derived), recomputed by an
independent simulation: NumPy, other tasks, the algorithm written out in weight space."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.published.derived import MULTISTEP

TASKS = 150_000


def _tasks(rng, n=TASKS, d=10, points=10, r=0.5):
    x = rng.uniform(-r, r, (n, points, d))
    w = rng.standard_normal((n, d))
    xq = rng.uniform(-r, r, (n, d))
    return x, np.einsum("tnd,td->tn", x, w), xq, np.einsum("td,td->t", xq, w)


def _losses(tasks, eta, gamma, steps):
    """K tied steps of GD on w (GD++: the inputs, context and query, mapped by
    (I - gamma X^T X) after each step), from w = 0; the query's 0.5 squared error."""
    x, y, xq, yq = tasks
    n = x.shape[1]
    w = np.zeros((len(x), x.shape[2]))
    for _ in range(steps):
        residual = np.einsum("tnd,td->tn", x, w) - y
        w = w - eta / n * np.einsum("tnd,tn->td", x, residual)
        if gamma:
            gram = np.einsum("tnd,tne->tde", x, x)
            # Transforming the inputs re-expresses the same predictor: w <- (I - g G)^-1 w.
            x = x - gamma * np.einsum("tnd,tde->tne", x, gram)
            xq = xq - gamma * np.einsum("td,tde->te", xq, gram)
            w = np.linalg.solve(np.eye(x.shape[2]) - gamma * gram, w[..., None])[..., 0]
    return 0.5 * (np.einsum("td,td->t", xq, w) - yq) ** 2


@pytest.fixture(scope="module")
def tasks():
    return _tasks(np.random.default_rng(20261125))


@pytest.mark.parametrize("steps, gdpp", sorted(MULTISTEP))
def test_each_derived_loss_is_met_by_an_independent_simulation(tasks, steps, gdpp):
    ref = MULTISTEP[steps, gdpp]
    losses = _losses(tasks, ref.eta, ref.gamma, steps)
    ours = losses.mean()
    half = 1.96 * losses.std(ddof=1) / np.sqrt(len(losses))
    # The two estimates differ by their sampling errors only (95%: both half-widths).
    assert abs(ours - ref.loss) <= 1.5 * np.hypot(half, ref.ci95), (ours, half, ref)


@pytest.mark.parametrize("steps, gdpp", [k for k in sorted(MULTISTEP) if k[0] > 1])
def test_each_derived_rate_is_the_optimum(tasks, steps, gdpp):
    """On common tasks (differences are then precise), moving the rate or gamma by 5%
    either way raises the loss."""
    ref = MULTISTEP[steps, gdpp]
    subset = tuple(a[:40_000] for a in tasks)
    best = _losses(subset, ref.eta, ref.gamma, steps).mean()
    for eta, gamma in ((ref.eta * 1.05, ref.gamma), (ref.eta * 0.95, ref.gamma)) + (
        ((ref.eta, ref.gamma * 1.05), (ref.eta, ref.gamma * 0.95)) if gdpp else ()
    ):  # fmt: skip
        assert _losses(subset, eta, gamma, steps).mean() > best
