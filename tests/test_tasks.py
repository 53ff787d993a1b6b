"""Task sources: ranges, shapes, reproducibility, the closed-form GD optimum, data roots."""

from __future__ import annotations

import pytest
import torch

from mesabench_datasets.data_root import DataNotFoundError, find_file
from mesabench_datasets.regression import LinRegConfig, SinusoidConfig
from mesabench_datasets.tasks import seeded_generator


def test_sinusoid_tasks_follow_the_maml_distribution():
    source = SinusoidConfig(shots=5, queries=10).build()
    batch = source.sample(2000, seeded_generator(0))
    assert batch.support_x.shape == (2000, 5, 1) and batch.query_y.shape == (2000, 10, 1)
    x = torch.cat([batch.support_x, batch.query_x], 1)
    y = torch.cat([batch.support_y, batch.query_y], 1)
    assert x.min() >= -5 and x.max() <= 5
    amplitude = y.abs().amax(dim=(1, 2))
    assert amplitude.max() <= 5.0 + 1e-6
    assert 2.0 < amplitude.mean() < 2.6  # mean amplitude 2.55 less the sampling of sin peaks


def test_sampling_is_reproducible_and_seed_dependent():
    source = LinRegConfig().build()
    a = source.sample(8, seeded_generator(1, 2))
    b = source.sample(8, seeded_generator(1, 2))
    c = source.sample(8, seeded_generator(1, 3))
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))
    assert not torch.equal(a.support_x, c.support_x)


@pytest.mark.parametrize("input_range, eta, loss", [(1.0, 1.515, 0.825), (0.5, 6.06, 0.206)])
def test_one_step_gd_closed_form_matches_reference_and_simulation(input_range, eta, loss):
    source = LinRegConfig(input_range=input_range, queries=20).build()
    eta_star, loss_star = source.one_step_gd_optimum()
    assert eta_star == pytest.approx(eta, rel=1e-3)
    assert loss_star == pytest.approx(loss, rel=2e-3)
    # Monte Carlo: one GD step from w = 0 on (1/2N) sum (w.x - y)^2 at eta*.
    batch = source.sample(20_000, seeded_generator(5))
    w = eta_star * (batch.support_x * batch.support_y).mean(dim=1, keepdim=True)
    prediction = (batch.query_x * w).sum(-1, keepdim=True)
    simulated = 0.5 * (prediction - batch.query_y).pow(2).mean().item()
    assert simulated == pytest.approx(loss_star, rel=0.02)
    zero = 0.5 * source.config.dim * input_range**2 / 3
    assert 0.5 * batch.query_y.pow(2).mean().item() == pytest.approx(zero, rel=0.03)


def test_missing_data_file_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("MESABENCH_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(DataNotFoundError) as err:
        find_file("omniglot28.npz", tmp_path / "cli")
    message = str(err.value)
    for place in ("cli", "env", "cache"):
        assert str(tmp_path / place) in message
    assert "--data-root" in message
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "omniglot28.npz").write_bytes(b"")
    assert find_file("omniglot28.npz", tmp_path / "cli") == tmp_path / "env" / "omniglot28.npz"
