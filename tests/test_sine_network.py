"""The sine network of ICML'23 sec. 3 (App. A.7): its token MLP, the control whose
attention is fixed to one GD step, and the control twin trained beside the model (thesis
Fig. 2.8)."""

from __future__ import annotations

import pytest
import torch

from benchmarks.planning.plan import plan_run
from benchmarks.running.execute import build_method
from mesabench_datasets.tasks import seeded_generator
from mesabench_datasets.tokens import context_tokens, query_tokens
from methods.layers.attention import gd_construction

SINE_NETWORK = {"layers": "1", "embed": "0", "token_embed": "8", "iterations": "2"}


def _sine_method(**settings: str):
    return build_method(plan_run("lsa", "sinusoid-icl", overrides={**SINE_NETWORK, **settings},
                                 device="cpu"))  # fmt: skip


def test_the_sine_control_is_one_gd_step_on_the_mlps_tokens_in_float64():
    """ICML'23 sec. 3's control (construction gd): the attention fixed to Prop. 1 on the
    embedded tokens, so the prediction is minus the query's target slot plus one GD step
    from w = 0 at the learned rate on the context's (features, target slot), written by
    hand here; and the token MLP sees the targets (App. A.7)."""
    method = _sine_method(construction="gd")
    method.model.double()
    with torch.no_grad():
        method.model.rate.fill_(0.7)
    source = plan_run("lsa", "sinusoid-icl", overrides=SINE_NETWORK, device="cpu").source
    task = source.sample(3, seeded_generator(5, 0, 0), "test").to("cpu", torch.float64)
    x, y, q = task.support_x, task.support_y, task.query_x
    embed = method.model.tokens
    context = embed(context_tokens(x, y))  # [T, N, D]
    queries = embed(query_tokens(q, 1))  # [T, Q, D]
    features, targets = context[..., :-1], context[..., -1]
    step = 0.7 / x.shape[1] * torch.einsum("tn,tnd,tqd->tq", targets, features, queries[..., :-1])
    by_hand = (-queries[..., -1] + step)[..., None]
    torch.testing.assert_close(method.forward(x, y, q), by_hand, rtol=1e-12, atol=1e-12)
    # The MLP maps the targets too: another y changes the context's features, not only
    # their target slot.
    moved = embed(context_tokens(x, y + 1.0))[..., :-1]
    assert (moved - features).abs().max() > 1e-3
    # Only the rate is learned in the layer; the MLP before it trains.
    trained = {n for n, p in method.model.named_parameters() if p.requires_grad}
    assert "rate" in trained and not any(n.startswith("blocks.") for n in trained)
    assert any(n.startswith("tokens.mlp") for n in trained)


def test_the_sine_control_and_the_trained_model_start_from_the_same_mlp():
    """App. A.7: the same seed initialises the MLP and embedding of both models."""
    control, trained = _sine_method(construction="gd"), _sine_method()
    for (name, a), b in zip(control.model.tokens.state_dict().items(),
                            trained.model.tokens.state_dict().values(), strict=True):  # fmt: skip
        assert torch.equal(a, b), name


def test_a_twin_control_starts_from_the_models_weights_and_trains_on_its_batches():
    """thesis Fig. 2.8 (``twin_control``): the control twin is the same network with the
    layer fixed to the GD construction, its embedding and MLP the model's own at the start
    (the same draws: the run's later draws as without a twin), stepped on every batch the
    model is, and saved with it (checkpoints and the best-validated state hold both)."""
    torch.manual_seed(3)
    method = _sine_method(twin_control="true")
    after_twin = torch.rand(1)
    torch.manual_seed(3)
    alone = _sine_method()
    assert torch.equal(torch.rand(1), after_twin)  # the twin took no draw from the run
    twin = method.twin
    for (name, a), b in zip(method.model.tokens.state_dict().items(),
                            twin.model.tokens.state_dict().values(), strict=True):  # fmt: skip
        assert torch.equal(a, b) and torch.equal(a, alone.model.tokens.state_dict()[name]), name
    assert twin.config.construction == "gd" and twin.twin is None
    assert method.num_parameters() == alone.num_parameters()  # the twin is not the model's
    source = plan_run("lsa", "sinusoid-icl", overrides=SINE_NETWORK, device="cpu").source
    batch = source.sample(4, seeded_generator(1, 2, 3))
    before = twin.model.tokens.embed.weight.clone()
    method.meta_train_step(batch)
    assert twin.steps_taken == method.steps_taken == 1
    assert not torch.equal(before, twin.model.tokens.embed.weight)
    state = method.state_dict()
    other = _sine_method(twin_control="true")
    other.load_state_dict(state)
    assert torch.equal(other.twin.model.rate, twin.model.rate)
    assert torch.equal(other.twin.model.tokens.embed.weight, twin.model.tokens.embed.weight)


def test_a_model_that_is_its_twin_differs_from_it_by_nothing_and_a_moved_one_does():
    """The comparison's known answer: a trained layer set to the twin's construction at its
    rate (Prop. 1: the 1/N inside the projection), with the twin's MLP, predicts what the
    twin does, before and after attention and in its input-gradients; moving the model's
    MLP moves all three; the relative difference is its formula."""
    from methods.analyses.twin import relative_difference, twin_comparison

    method = _sine_method(twin_control="true")
    twin = method.twin
    with torch.no_grad():
        twin.model.rate.fill_(0.8)
    method.model.tokens.load_state_dict(twin.model.tokens.state_dict())
    source = plan_run("lsa", "sinusoid-icl", overrides=SINE_NETWORK, device="cpu").source
    shots = source.sample(1, seeded_generator(0)).support_x.shape[1]
    features = method.model.tokens.embed.out_features - 1
    for name, weights in gd_construction(features, 0.8, shots).items():
        getattr(method.model.blocks[0].attention, name).data.copy_(weights)
    same = twin_comparison(method, twin, source, seed=0)
    for key in ("init_rel_diff", "pred_rel_diff", "sens_rel_diff"):
        assert same[f"final/twin/{key}"] < 1e-5, key
    assert same["final/twin/model_loss"] == pytest.approx(same["final/twin/control_loss"],
                                                          rel=1e-5)
    with torch.no_grad():
        method.model.tokens.mlp[2].bias.add_(0.5)
        method.model.tokens.mlp[0].weight.mul_(1.5)  # the features' slope in x moves too
    moved = twin_comparison(method, twin, source, seed=0)
    for key in ("init_rel_diff", "pred_rel_diff", "sens_rel_diff"):
        assert moved[f"final/twin/{key}"] > 0.05, key
    a, b = torch.tensor([[[3.0, 4.0]], [[0.0, 0.0]]]), torch.tensor([[[0.0, 0.0]], [[6.0, 8.0]]])
    assert relative_difference(a, b) == pytest.approx((5 + 10) / 2 / ((0 + 10) / 2))


@pytest.mark.parametrize(("settings", "message"), [
    ({"embed": "40"}, "embed and token_embed are two embeddings: set embed=0 with token_embed"),
    ({"construction": "gd", "layers": "2"}, "construction gd is one plain layer of one head"),
    ({"twin_control": "true", "construction": "gd"}, "twin_control trains construction gd's"),
    ({"twin_control": "true", "mlp": "8"}, "twin_control trains construction gd's"),
])  # fmt: skip
def test_the_sine_networks_settings_are_refused_where_they_cannot_work(settings, message):
    from mesabench_core import ConfigError

    with pytest.raises(ConfigError, match=message):
        plan_run("lsa", "sinusoid-icl", overrides={**SINE_NETWORK, **settings}, device="cpu")
