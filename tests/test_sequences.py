"""Autoregressive linear dynamics and the causal sequence learners on it."""

from __future__ import annotations

import numpy as np
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
    with pytest.raises(ConfigError, match="needs an autoregressive regression benchmark"):
        plan_run("ar_least_squares", "mqar", device="cpu")


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


def test_least_squares_reference_solves_each_prefix_as_numpy_does():
    from methods.sequence import autoregressive_least_squares

    seq = LinDynConfig(dim=3, length=9).build().sample(2, seeded_generator(4)).query_x.double()
    ours = autoregressive_least_squares(seq, lam=0.0)
    ridge = autoregressive_least_squares(seq, lam=0.3)
    for b in range(2):
        s = seq[b].numpy()
        assert not ours[b, 0].any() and not ridge[b, 0].any()  # no transition seen yet
        for t in range(1, seq.shape[1]):
            x, y = s[:t], s[1 : t + 1]  # transitions s_t' -> s_{t'+1} seen by position t
            w = np.linalg.lstsq(x, y, rcond=None)[0]  # minimum norm, row form: y = x w
            np.testing.assert_allclose(ours[b, t].numpy(), s[t] @ w, rtol=1e-8, atol=1e-10)
            w = np.linalg.solve(x.T @ x + 0.3 * np.eye(3), x.T @ y)
            np.testing.assert_allclose(ridge[b, t].numpy(), s[t] @ w, rtol=1e-8, atol=1e-10)


def test_least_squares_reference_is_exact_once_the_transitions_span_the_state():
    plan = plan_run("ar_least_squares", "lindyn",
                    overrides={"noise": "0", "length": "20", "test_tasks": "50",
                               "iterations": "1"},
                    device="cpu")  # fmt: skip
    final = execute(plan, MemoryRecorder())
    # D = 10: ten transitions determine W*, so s_{t+1} is predicted exactly from t = 11 on;
    # before, the minimum-norm solution sees only the span of the states so far.
    assert final["final/loss_t19"] < 1e-8
    assert final["final/loss_t5"] > 1.0
    # At t = 1 nothing is known: the zero prediction scores 0.5 E||s||^2 = 5.
    assert final["final/loss_t1"] == pytest.approx(5.0, rel=0.1)


@pytest.mark.parametrize("method", ["deltanet", "gla", "causal_softmax"])
def test_sequence_layers_from_the_field_train_in_context(method):
    plan = plan_run(method, "lindyn",
                    overrides={"iterations": "300", "val_every": "300", "test_tasks": "100",
                               "length": "16", "layers": "2", "heads": "2", "lr": "3e-3"},
                    device="cpu")  # fmt: skip
    final = execute(plan, MemoryRecorder())
    # The zero predictor scores 0.5 * D = 5 at every position. After 300 steps each layer
    # learns in context: 1.4-2.1 at the last position against 5.0-5.1 at the first.
    assert final["final/loss_t15"] < 0.5 * final["final/loss_t1"]
    assert final["final/test_loss"] < 0.75 * 5.0
    # Every layer's probes are scored, from the input tokens (layer 0) to the last.
    assert {f"final/probe/next_state_layer{k}" for k in range(3)} <= set(final)


def test_flash_linear_attention_layers_compute_their_recurrences():
    """Our wiring of fla's recurrences (layouts, normalisation, gates) against the rules
    written out token by token."""
    from methods.fla_layers import DeltaNetLayer, GatedLinearAttentionLayer

    torch.manual_seed(0)
    tokens = torch.randn(2, 7, 6)
    delta = DeltaNetLayer(6, heads=2, init_std=0.5)
    k = torch.einsum("hkd,btd->hbtk", delta.key, tokens)
    q = torch.einsum("hkd,btd->hbtk", delta.query, tokens)
    v = torch.einsum("hed,btd->hbte", delta.value, tokens)
    beta = torch.sigmoid(torch.einsum("hd,btd->hbt", delta.beta, tokens) + delta.beta_bias)
    k, q = k / k.norm(dim=-1, keepdim=True), q / q.norm(dim=-1, keepdim=True)
    expected = torch.zeros_like(v)
    for h in range(2):
        for b in range(2):
            memory = torch.zeros(6, 6)  # maps keys to values
            for t in range(7):
                error = v[h, b, t] - memory @ k[h, b, t]
                memory = memory + beta[h, b, t] * torch.outer(error, k[h, b, t])
                expected[h, b, t] = memory @ q[h, b, t] / 6**0.5
    with torch.no_grad():
        torch.testing.assert_close(delta.mix(k, v, q, tokens), expected, atol=1e-5, rtol=1e-5)

    gla = GatedLinearAttentionLayer(6, heads=2, init_std=0.5)
    gate = torch.einsum("hkd,btd->hbtk", gla.gate, tokens) + gla.gate_bias
    decay = torch.sigmoid(gate) ** (1 / 16)  # exp(log sigmoid / 16)
    expected = torch.zeros_like(v)
    for h in range(2):
        for b in range(2):
            memory = torch.zeros(6, 6)  # [key, value]
            for t in range(7):
                memory = decay[h, b, t, :, None] * memory + torch.outer(k[h, b, t], v[h, b, t])
                expected[h, b, t] = memory.T @ q[h, b, t] / 6**0.5
    with torch.no_grad():
        torch.testing.assert_close(gla.mix(k, v, q, tokens), expected, atol=1e-5, rtol=1e-5)


def copy_layer(dim: int, scale: float = 200.0):
    """A softmax layer on raw tokens (s_t, 0, p_t) that reads position t - 1 (its query is
    p_t rotated back one step, its key p_t') and writes s_t-1 into the empty slot."""
    from methods.sequence import POSITION_WIDTH, CausalSoftmaxAttention

    width = 2 * dim + POSITION_WIDTH
    layer = CausalSoftmaxAttention(width, heads=1, init_std=0.0).double()
    rates = 100.0 ** (-torch.arange(0, POSITION_WIDTH, 2, dtype=torch.float64) / POSITION_WIDTH)
    with torch.no_grad():
        for i, w in enumerate(rates.tolist()):
            at = 2 * dim + 2 * i  # the (sin, cos) pair of rate w
            layer.key[0, at : at + 2, at : at + 2] = torch.eye(2)
            back = torch.tensor([[np.cos(w), -np.sin(w)], [np.sin(w), np.cos(w)]])
            layer.query[0, at : at + 2, at : at + 2] = scale * back
        layer.value[0, :dim, :dim] = torch.eye(dim)
        layer.projection[0, dim : 2 * dim, :dim] = torch.eye(dim)
    return layer


def test_a_copy_layer_on_raw_tokens_builds_the_constructed_tokens_and_is_measured_so():
    from methods.sequence import constructed_tokens, previous_attention, raw_tokens

    seq = LinDynConfig(dim=3, length=12).build().sample(5, seeded_generator(6)).query_x.double()
    layer = copy_layer(3)
    tokens = raw_tokens(seq)
    with torch.no_grad():
        out = layer(tokens)
        weights = layer.attention(tokens)
    # From position 1 on, the first 2D entries are the constructed tokens (s_t, s_t-1).
    torch.testing.assert_close(out[:, 1:, :6], constructed_tokens(seq)[:, 1:], atol=1e-6, rtol=0)
    assert previous_attention(weights) > 0.999
    # A layer reading every earlier position alike (zero query) scores 1/t on t - 1.
    uniform = copy_layer(3, scale=0.0)
    with torch.no_grad():
        flat = previous_attention(uniform.attention(tokens))
    steps = seq.shape[1]  # 11: the inputs s_1..s_11 of a sequence of 12
    expected = sum(1 / (t + 1) for t in range(1, steps)) / (steps - 1)
    assert flat == pytest.approx(expected, rel=1e-9)


def test_a_hybrid_on_raw_tokens_learns_to_copy_and_then_to_predict():
    """Softmax then mesa on raw tokens (s_t, 0, p_t): the first layer must find s_t-1 itself."""
    plan = plan_run("mesa", "lindyn",
                    overrides={"tokens": "raw", "first_layer": "softmax", "layers": "2",
                               "heads": "2", "iterations": "300", "val_every": "300",
                               "test_tasks": "100", "length": "16", "lr": "3e-3"},
                    device="cpu")  # fmt: skip
    final = execute(plan, MemoryRecorder())
    # Uniform attention would put 0.22 on the previous position (1/(t+1), t = 1..14).
    assert final["final/copy/previous_attention"] > 0.3
    assert final["final/loss_t15"] < 0.2 * final["final/loss_t1"]


def test_a_pre_layernorm_stack_reads_normalised_tokens():
    """With ``layernorm`` a layer's update reads LayerNorm(tokens): scaling the tokens by c
    leaves it unchanged, where the bare linear layer's update grows as c^3."""
    from benchmarks.running.execute import build_method

    seq = LinDynConfig(dim=3, length=8).build().sample(2, seeded_generator(7)).query_x.double()
    for layernorm, power in (("true", 0), ("false", 3)):
        plan = plan_run("causal_lsa", "lindyn", overrides={"dim": "3", "layernorm": layernorm},
                        device="cpu")  # fmt: skip
        method = build_method(plan)
        method.model.double()
        with torch.no_grad():
            small = method.hidden_states(seq)
            large = method.hidden_states(10 * seq)
        update_small = small[1] - small[0]
        update_large = large[1] - large[0]
        # (LayerNorm's eps of 1e-5 beside the tokens' variance: equal to 1e-3)
        torch.testing.assert_close(update_large, 10**power * update_small, rtol=1e-3, atol=1e-9)


def test_without_triton_the_field_layers_are_refused_in_one_line():
    """CPU-only torch builds ship no Triton, which flash-linear-attention imports."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['triton'] = None\n"
            "from benchmarks.planning.plan import plan_run\n"
            "from benchmarks.running.execute import build_method\n"
            "from mesabench_core import ConfigError\n"
            "try:\n"
            "    build_method(plan_run('deltanet', 'lindyn', device='cpu'))\n"
            "except ConfigError as err:\n"
            "    print('refused:', err)\n")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert "refused: mixer deltanet / gla needs flash-linear-attention's ops" in out.stdout
    assert "pip install fla-core triton" in out.stdout
