"""learn2learn's MAML as a live peer: the same meta-gradient as ours, the same numbers."""

from __future__ import annotations

import os

import pytest
import torch

from benchmarks.planning.plan import plan_run
from benchmarks.running.execute import build_method
from mesabench_datasets.tasks import seeded_generator
from methods.peers.l2l import learn2learn_installed

if not learn2learn_installed():
    if os.environ.get("CI"):  # the README's install builds it: CI must not skip silently
        raise RuntimeError("learn2learn is not installed: bash bench/install_learn2learn.sh")
    pytest.skip("learn2learn not installed (bash bench/install_learn2learn.sh)",
                allow_module_level=True)  # fmt: skip

FAST = {"iterations": 2, "val_every": 1, "val_tasks": 4, "test_tasks": 8}


def _pair(first_order: bool, benchmark: str = "sinusoid-5shot", **extra):
    methods = {}
    for name in ("fomaml" if first_order else "maml", "l2l_maml"):
        overrides = {**FAST, **extra}
        if name == "l2l_maml":
            overrides["first_order"] = first_order
        methods[name] = build_method(plan_run(name, benchmark, 0, overrides, device="cpu"))
    return methods


@pytest.mark.parametrize("first_order", [False, True])
def test_the_same_meta_gradient_as_ours_in_float64(first_order):
    methods = _pair(first_order)
    ours, peer = methods["fomaml" if first_order else "maml"], methods["l2l_maml"]
    # Built from the same seed: the same initial weights.
    for a, b in zip(ours.network.parameters(), peer.maml.module.parameters(), strict=True):
        assert torch.equal(a, b)
    ours.network.double()
    peer.maml.module.double()
    source = plan_run("maml", overrides=FAST, device="cpu").source
    batch = source.sample(6, seeded_generator(1, 0, 0), "train").to("cpu", torch.float64)
    losses = [m.meta_train_step(batch)["loss"] for m in (ours, peer)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-12)
    # The optimisers keep the gradients they stepped with.
    ours_grad = torch.cat([p.grad.flatten() for p in ours.network.parameters()])
    peer_grad = torch.cat([p.grad.flatten() for p in peer.maml.module.parameters()])
    assert ours_grad.abs().max() > 1e-3  # a real meta-gradient, not zeros
    torch.testing.assert_close(peer_grad, ours_grad, rtol=1e-10, atol=1e-12)


def test_predictions_after_adaptation_match_ours():
    methods = _pair(False)
    source = plan_run("maml", overrides=FAST, device="cpu").source
    batch = source.sample(5, seeded_generator(3, 0, 0), "test")
    ours = methods["maml"].predict(batch.support_x, batch.support_y, batch.query_x, steps=3)
    peer = methods["l2l_maml"].predict(batch.support_x, batch.support_y, batch.query_x, steps=3)
    torch.testing.assert_close(peer, ours, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_the_leaderboard_numbers_match_ours_for_the_same_seeds(tmp_path):
    """Three seeds of maml and l2l_maml, 100 iterations on sinusoid-5shot: the same
    initial weights and tasks give the same test loss up to float32 rounding of two
    orderings of the same sums (a step's predictions are compared exactly by
    test_predictions_after_adaptation_match_ours; here the whole training loop and the
    board)."""
    import benchmarks

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    losses = {}
    for method in ("maml", "l2l_maml"):
        for seed in range(3):
            result = benchmarks.run(method, seed=seed, iterations=100, test_tasks=200,
                                    tracking_uri=store)  # fmt: skip
            losses[method, seed] = result["test_loss"]
    for seed in range(3):
        assert losses["l2l_maml", seed] == pytest.approx(losses["maml", seed], rel=0.02), seed
    board = benchmarks.leaderboard(benchmark="sinusoid-5shot", tracking_uri=store)
    assert set(board["method"]) == {"maml", "l2l_maml"}
