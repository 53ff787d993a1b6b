"""The linear-dynamics task's settings and the token layouts a causal sequence learner
reads (thesis sec. 3.5.1 and its footnote 1, app. 3.7.3.2)."""

from __future__ import annotations

import pytest
import torch

from benchmarks.planning.config import ConfigError
from benchmarks.planning.plan import plan_run
from mesabench_datasets.dynamics import LinDynConfig, random_orthogonal
from mesabench_datasets.tasks import seeded_generator


def test_converging_dynamics_shrink_each_state_by_the_contraction_and_leave_the_default():
    """thesis sec. 3.5.1, footnote 1: W* = c x orthogonal, so a noiseless state's norm falls
    by c each step; c = 1 draws the orthogonal sequences bit for bit as before."""
    batch = LinDynConfig(noise=0.0, contraction=0.5).build().sample(3, seeded_generator(1))
    norms = torch.cat([batch.support_x, batch.support_y[:, -1:]], 1).norm(dim=-1)
    steps = torch.arange(norms.shape[1], dtype=norms.dtype)
    torch.testing.assert_close(norms, norms[:, :1] * 0.5**steps, atol=1e-6, rtol=1e-4)
    # The default draws W* orthogonal and unscaled: the sequences as drawn by hand.
    generator = seeded_generator(4)
    w = random_orthogonal(2, 10, generator)
    state = torch.randn(2, 10, 1, generator=generator)
    noise = 0.01 * torch.randn(2, 50, 10, 1, generator=generator)
    states = [state]
    for t in range(1, 50):
        states.append(w @ states[-1] + noise[:, t])
    by_hand = torch.stack(states, dim=1)[..., 0]
    drawn = LinDynConfig().build().sample(2, seeded_generator(4))
    assert torch.equal(drawn.query_x, by_hand[:, :-1])
    assert torch.equal(drawn.query_y, by_hand[:, 1:])
    with pytest.raises(ConfigError, match="contraction"):
        plan_run("causal_lsa", "lindyn", overrides={"contraction": "1.5"}, device="cpu")


@pytest.mark.parametrize(("tokens", "width"), [("constructed", 2), ("slot", 3), ("memory", 4)])
def test_the_token_layouts_hold_the_state_and_the_previous_one_where_they_say(tokens, width):
    """e_t = (s_t, s_t-1), (0, s_t, s_t-1) and the thesis' (0, s_t, s_t, s_t-1) (sec. 3.5.1,
    app. 3.7.3.2), s_0 = 0; a model on them reads tokens of that width."""
    from methods.in_context.sequence import TOKEN_LAYOUTS

    seq = torch.arange(1.0, 7.0).reshape(1, 3, 2)
    previous = torch.cat([torch.zeros(1, 1, 2), seq[:, :-1]], dim=1)
    zero = torch.zeros_like(seq)
    expected = {"constructed": [seq, previous], "slot": [zero, seq, previous],
                "memory": [zero, seq, seq, previous]}[tokens]  # fmt: skip
    built = TOKEN_LAYOUTS[tokens][1](seq)
    assert torch.equal(built, torch.cat(expected, dim=-1))
    plan = plan_run("causal_lsa", "lindyn", overrides={"tokens": tokens, "iterations": "1"},
                    device="cpu")  # fmt: skip
    from benchmarks.running.execute import build_method

    method = build_method(plan)
    assert method.model.readout.in_features == width * 10
    assert method.input_tokens(plan.source.sample(2, seeded_generator(0)).query_x).shape[-1] \
        == width * 10  # fmt: skip
