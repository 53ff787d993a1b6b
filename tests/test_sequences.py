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
    for reference, what in (("ar_least_squares", "least squares"), ("ar_gd", "one GD step")):
        with pytest.raises(ConfigError, match=f"^{what} .* needs an autoregressive regression"):
            plan_run(reference, "mqar", device="cpu")
    # repurpose on a token task would have been ignored without a word: refused instead.
    with pytest.raises(ConfigError, match="repurpose .* needs an autoregressive regression"):
        plan_run("mesa", "mqar", overrides={"repurpose": "true"}, device="cpu")


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
    assert final["final/loss_t_rise"] == pytest.approx(curve[-1] - min(curve))
    # The zero predictor scores 0.5 * D = 5 at every position; after 200 steps one mesa layer
    # is 17% below it overall (4.17) and learns in context: its last positions are a third
    # below its first (3.45 at t = 19 vs 5.11 at t = 1).
    assert final["final/test_loss"] < 0.9 * 5.0
    assert final["final/loss_t19"] < 0.75 * final["final/loss_t1"]


def test_hybrid_stack_starts_with_causal_softmax_attention():
    from benchmarks.running.execute import build_method
    from methods.in_context.sequence import CausalSoftmaxAttention
    from methods.layers.mesa import MesaLayer

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
    from methods.in_context.sequence import autoregressive_least_squares

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


def test_one_gd_step_reference_is_numpys_step_at_numpys_least_squares_rate():
    """ar_gd predicts eta sum_{t'<t} s_{t'+1} s_t'^T s_t at every position, with eta the
    least-squares rate over every training batch so far (numpy's lstsq on the flattened
    steps); causal linear attention with values s_t, keys s_{t-1} and queries s_t mixes the
    same step."""
    from benchmarks.running.execute import build_method
    from methods.in_context.sequence import CausalLinearAttention
    from methods.reference.algorithms import autoregressive_gradient

    source = LinDynConfig(dim=3, length=9).build()
    batches = [source.sample(4, seeded_generator(seed)) for seed in (5, 6)]
    seq = batches[0].query_x.double()
    step = autoregressive_gradient(seq)
    for b in range(2):
        s = seq[b].numpy()
        assert not step[b, 0].any()  # no transition seen yet
        for t in range(1, seq.shape[1]):
            w = sum(np.outer(s[j + 1], s[j]) for j in range(t))  # transitions seen by t
            np.testing.assert_allclose(step[b, t].numpy(), w @ s[t], rtol=1e-10)
    previous = torch.cat([torch.zeros_like(seq[:, :1]), seq[:, :-1]], dim=1)
    mixed = CausalLinearAttention(3).mix(previous[None], seq[None], seq[None], seq)
    torch.testing.assert_close(mixed[0], step)

    method = build_method(plan_run("ar_gd", "lindyn", overrides={"dim": "3", "length": "9"},
                                   device="cpu"))  # fmt: skip
    for batch in batches:
        method.meta_train_step(batch)
    u = torch.cat([autoregressive_gradient(b.query_x) for b in batches]).double().reshape(-1, 1)
    y = torch.cat([b.query_y for b in batches]).double().reshape(-1, 1)
    eta = np.linalg.lstsq(u.numpy(), y.numpy(), rcond=None)[0].item()
    assert float(method.model.eta) == pytest.approx(eta, rel=1e-6)
    torch.testing.assert_close(method.predict(None, None, seq.float()),
                               (eta * step).float(), rtol=1e-5, atol=1e-6)  # fmt: skip


def test_one_gd_step_reference_scores_the_step_a_large_sample_fits():
    """The run's test loss against the same step, its rate fitted on 4,000 other sequences,
    scored by hand on the run's test sequences (the benchmark's defaults: D = 10, T = 50)."""
    from benchmarks.protocols.episodic import TEST, EpisodicConfig
    from methods.reference.algorithms import autoregressive_gradient

    final = execute(plan_run("ar_gd", "lindyn", overrides={"iterations": "20",
                                                           "test_tasks": "300"},
                             device="cpu"), MemoryRecorder())  # fmt: skip
    source = LinDynConfig().build()
    fit = source.sample(4000, seeded_generator(123))
    u, y = autoregressive_gradient(fit.query_x).double(), fit.query_y.double()
    eta = (u * y).sum() / u.pow(2).sum()
    test_seed = EpisodicConfig().test_seed
    tests = [source.sample(100, seeded_generator(TEST, test_seed, block)) for block in range(3)]
    u = torch.cat([autoregressive_gradient(b.query_x) for b in tests]).double()
    y = torch.cat([b.query_y for b in tests]).double()
    loss = 0.5 * (eta * u - y).pow(2).sum(-1).mean()
    # The rates differ by sampling alone, where the loss is flat: well within 1%.
    assert final["final/test_loss"] == pytest.approx(float(loss), rel=0.01)
    # Far from least squares' 0.57 and from the zero prediction's 5.0: one step, not more.
    assert 2.5 < float(loss) < 3.5


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


# GD-SSM's state is linear attention's: from init 0.02 neither gets far in 300 steps.
# fla's layers step slowest here (their recurrences loop over positions in Python) and learn
# as far in 150 steps at twice the rate: at seed 0 the last position's loss is 0.37 (DeltaNet)
# and 0.36 (GLA) of the first's, against 0.35 and 0.27 after 300 steps at 3e-3, and the
# test loss 3.3 and 3.1 against the bound of 3.75. Causal softmax and GD-SSM do not (0.59
# and 0.44 of the first at 150 steps) and keep 300 (0.42 and 0.29).
# fla's two run with the long checks: 34-92 s each in the fast suite (its import alone,
# every op's Triton source parsed, is ~8 s a process).
@pytest.mark.parametrize("method, init_std, steps, lr",
                         [pytest.param("deltanet", "0.02", "150", "6e-3", marks=pytest.mark.slow),
                          pytest.param("gla", "0.02", "150", "6e-3", marks=pytest.mark.slow),
                          # 23-36 s each in the fast suite: long checks too (test_every_method
                          # runs both end to end there)
                          pytest.param("causal_softmax", "0.02", "300", "3e-3",
                                       marks=pytest.mark.slow),
                          pytest.param("causal_gd_ssm", "0.1", "300", "3e-3",
                                       marks=pytest.mark.slow)])  # fmt: skip
def test_sequence_layers_from_the_field_train_in_context(method, init_std, steps, lr):
    plan = plan_run(method, "lindyn",
                    overrides={"iterations": steps, "val_every": steps, "test_tasks": "100",
                               "length": "16", "layers": "2", "heads": "2", "lr": lr,
                               "init_std": init_std},
                    device="cpu")  # fmt: skip
    final = execute(plan, MemoryRecorder())
    # The zero predictor scores 0.5 * D = 5 at every position. Trained, each layer learns
    # in context: 1.4-2.1 at the last position against 5.0-5.1 at the first.
    assert final["final/loss_t15"] < 0.5 * final["final/loss_t1"]
    assert final["final/test_loss"] < 0.75 * 5.0
    # Every layer's probes are scored, from the input tokens (layer 0) to the last.
    assert {f"final/probe/next_state_layer{k}" for k in range(3)} <= set(final)


def test_flash_linear_attention_layers_compute_their_recurrences():
    """Our wiring of fla's recurrences (layouts, normalisation, gates) against the rules
    written out token by token."""
    from methods.layers.fla import DeltaNetLayer, GatedLinearAttentionLayer

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
    from methods.in_context.sequence import POSITION_WIDTH, CausalSoftmaxAttention

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


def copying_hybrid(**overrides: str):
    """A float64 hybrid on raw tokens of dimension 3 and length 12: the hand-built copy
    layer, then a mesa layer as initialised."""
    from benchmarks.running.execute import build_method

    plan = plan_run("mesa", "lindyn",
                    overrides={"dim": "3", "length": "12", "tokens": "raw",
                               "first_layer": "softmax", "layers": "2", **overrides},
                    device="cpu")  # fmt: skip
    method = build_method(plan)
    method.model.double()
    method.model.layers[0] = copy_layer(3)
    return method


def test_a_copy_layer_on_raw_tokens_builds_the_constructed_tokens_and_is_measured_so():
    from methods.in_context.sequence import constructed_tokens, previous_attention, raw_tokens

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


def test_the_sensitivity_share_of_a_copy_layer_is_one_and_of_an_average_one_over_t():
    """The thesis' sensitivity norms ||d f_t / d s_t'|| of a first layer (residual
    included), read as the share of the earlier inputs' that falls on s_t-1: a hand-built
    copy layer scores 1; a layer averaging every position alike (zero query: weights
    1/(t+1) whatever the inputs) scores exactly 1/t at position t."""
    from methods.analyses.sensitivity import previous_share, sensitivity_norms

    method = copying_hybrid(sensitivity="true")
    seq = LinDynConfig(dim=3, length=12).build().sample(4, seeded_generator(6)).query_x.double()
    norms = sensitivity_norms(method.first_output, seq)
    assert norms.shape == (4, 11, 11)
    assert norms.triu(diagonal=1).abs().max() < 1e-12  # causal: no later input reaches f_t
    assert previous_share(norms) > 0.999
    method.model.layers[0] = copy_layer(3, scale=0.0)
    norms = sensitivity_norms(method.first_output, seq)
    steps = seq.shape[1]
    assert previous_share(norms) == pytest.approx(
        sum(1 / t for t in range(2, steps)) / (steps - 2), rel=1e-9)  # fmt: skip
    # The current input reaches f_t through the residual (an identity on s_t's slot) and the
    # 1/(t+1) weight on itself (into another slot): sqrt(3 + 3 / (t+1)^2).
    t = torch.arange(steps, dtype=torch.float64)
    torch.testing.assert_close(norms[0].diagonal(), (3 + 3 / (t + 1) ** 2).sqrt())


def test_sensitivity_needs_a_softmax_layer_to_read():
    from mesabench_core import ConfigError

    with pytest.raises(ConfigError, match="sensitivity reads a first softmax layer"):
        plan_run("mesa", "lindyn", overrides={"sensitivity": "true"}, device="cpu")


def test_a_hybrid_on_raw_tokens_learns_to_copy_and_then_to_predict():
    """Softmax then mesa on raw tokens (s_t, 0, p_t): the first layer must find s_t-1 itself."""
    plan = plan_run("mesa", "lindyn",
                    overrides={"tokens": "raw", "first_layer": "softmax", "layers": "2",
                               "heads": "2", "iterations": "150", "val_every": "150",
                               "test_tasks": "100", "length": "16", "lr": "6e-3",
                               "meta_batch": "32", "sensitivity": "true"},
                    device="cpu")  # fmt: skip
    final = execute(plan, MemoryRecorder())
    # (At 32 sequences a step, seed 0, 150 steps at 6e-3: 0.41 on the previous position,
    # loss_t15/loss_t1 = 0.12, 2.95x the loss without the first layer; 300 steps at 3e-3
    # gave 0.44, 0.05 and 4.3x.)
    # Uniform attention would put 0.22 on the previous position (1/(t+1), t = 1..14).
    assert final["final/copy/previous_attention"] > 0.3
    # Its outputs depend on s_t-1 more than an average of the earlier states would
    # (mean of 1/t over t = 2..14: 0.25).
    assert final["final/copy/previous_share"] > 0.4
    assert final["final/loss_t15"] < 0.2 * final["final/loss_t1"]
    # The mesa layer reads what the first layer copied: without that layer its loss grows.
    assert final["final/copy/loss_without"] > 1.5 * final["final/copy/loss_learned"]


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


def test_causal_gd_ssm_computes_its_recurrence_and_starts_as_linear_attention():
    """The GD-SSM mixer against its rule written out as a sum over earlier positions,
    S_t = sum_t'<=t A_t' diag(Lambda)^(t-t'); and with no decay, linear attention."""
    from methods.in_context.sequence import CausalLinearAttention
    from methods.in_context.ssm import CausalGDSSM

    torch.manual_seed(1)
    tokens = torch.randn(2, 6, 4, dtype=torch.float64)
    layer = CausalGDSSM(4, heads=2, init_std=0.5).double()
    linear = CausalLinearAttention(4, heads=2).double()
    linear.load_state_dict(layer.state_dict(), strict=False)
    with torch.no_grad():  # the window at its init and no decay: causal linear attention
        layer.decay_logit.fill_(float("inf"))
        torch.testing.assert_close(layer(tokens), linear(tokens), rtol=1e-12, atol=1e-12)
        layer.local.copy_(torch.randn(3, 3))
        layer.select.copy_(torch.randn(3))
        layer.decay_logit.normal_(1.0, 2.0)
        k, q = layer.keys_queries(tokens)
        v = torch.einsum("hed,btd->hbte", layer.value, tokens)
        got = {}
        for chunk in (16, 4, 1):  # one chunk; chunks carrying the state; one per position
            layer.CHUNK = chunk
            got[chunk] = layer.mix(k, v, q, tokens)

    def at(x, t):  # x_t, zero before the start
        return x[:, :, t] if t >= 0 else torch.zeros_like(x[:, :, 0])

    expected = torch.zeros_like(v)
    for t in range(6):
        state = 0
        for s in range(t + 1):
            write = sum(layer.local[a, b] * at(v, s - a)[..., :, None] * at(k, s - b)[..., None, :]
                        for a in range(3) for b in range(3))  # fmt: skip
            state = state + torch.sigmoid(layer.decay_logit)[:, None] ** (t - s) * write
        probe = sum(layer.select[a] * at(q, t - a) for a in range(3))
        expected[:, :, t] = (state @ probe[..., None])[..., 0]
    for chunk in got:
        torch.testing.assert_close(got[chunk], expected, rtol=1e-10, atol=1e-10)


def test_copy_sensitivity_scores_the_stack_with_an_exact_copy_and_without_the_layer():
    """A hybrid (hand-built copy layer, then a random mesa layer): its loss with the first
    layer's attention replaced by an exact copy equals the rest of the stack run on tokens
    (s_t, s_t-1, p_t) built directly (s_1 in place of s_0); without the layer, on
    (s_t, 0, p_t); and the hand-built layer, a near-exact copy, scores as the exact one."""
    from methods.common.losses import per_task_loss
    from methods.in_context.sequence import constructed_tokens, raw_tokens

    method = copying_hybrid(init_std="0.3")
    batch = LinDynConfig(dim=3, length=12).build().sample(8, seeded_generator(9))
    batch = type(batch)(**{f: v.double() if torch.is_tensor(v := getattr(batch, f)) else v
                           for f in batch.__dataclass_fields__})  # fmt: skip
    got = method.copy_sensitivity(method.model.layers[0], batch)

    def loss_on(tokens):
        with torch.no_grad():
            out = method.model.layers[1](tokens)
            pred = method.model.readout(out)
            return per_task_loss(pred, batch.query_y, method.problem.loss).mean().item()

    raw = raw_tokens(batch.query_x)
    built = torch.cat([constructed_tokens(batch.query_x), raw[..., 6:]], dim=-1)
    built[:, 0, 3:6] = batch.query_x[:, 0]  # at t = 0 the copy reads s_1 itself
    assert got["final/copy/loss_exact"] == pytest.approx(loss_on(built), rel=1e-10)
    assert got["final/copy/loss_without"] == pytest.approx(loss_on(raw), rel=1e-10)
    assert got["final/copy/loss_learned"] == pytest.approx(got["final/copy/loss_exact"],
                                                           rel=1e-4)  # fmt: skip
    # The random mesa layer reads the copied slot: removing the copy changes its loss.
    assert abs(got["final/copy/loss_without"] / got["final/copy/loss_exact"] - 1) > 0.01


def test_repurposing_prompts_and_scores_against_least_squares_by_numpy():
    """The prompts x_1, y_1, (0,) ..., x_q and their scores, with the autoregressive
    least-squares reference as the model: plain prompts make it regress on the pairs and on
    the junk transitions y_i -> x_i+1; with end-of-pair tokens, on the pairs and y_i -> 0
    (0 -> x_i+1 carries no information); continual prompts, another task's first. Each
    recomputed here with NumPy's lstsq."""
    from methods.analyses.repurpose import regression_prompt, repurposing_scores
    from methods.in_context.sequence import autoregressive_least_squares

    x = torch.arange(1.0, 7.0).view(1, 3, 2)  # x_1, x_2, x_q
    y = -x[:, :2]
    eos = regression_prompt(x, y, eos=True)
    assert eos[0].tolist() == [[1, 2], [-1, -2], [0, 0], [3, 4], [-3, -4], [0, 0], [5, 6]]
    assert regression_prompt(x, y, eos=False).shape == (1, 5, 2)

    dim, n = 6, 4  # fewer pairs than dimensions: no prompt form is exact
    scores = repurposing_scores(
        lambda seq: autoregressive_least_squares(seq.double(), 0.0), dim, seed=3,
        device=torch.device("cpu"), shots=(n,), tasks=5)  # fmt: skip
    # The same tasks, drawn again as the analysis draws them.
    from mesabench_datasets.dynamics import random_orthogonal

    generator = seeded_generator(9, 3)
    w = random_orthogonal(5, dim, generator).double().numpy()
    xs = torch.randn(5, n + 1, dim, generator=generator).double().numpy()
    ys = xs @ w.transpose(0, 2, 1)
    other_x = torch.randn(5, n, dim, generator=generator).double().numpy()
    other_y = other_x @ random_orthogonal(5, dim, generator).double().numpy().transpose(0, 2, 1)

    def loss(inputs, targets):  # fit on the rows given, guess y_q
        total = 0.0
        for b in range(5):
            fitted = np.linalg.lstsq(inputs[b], targets[b], rcond=None)[0]
            total += 0.5 * np.sum((ys[b, -1] - xs[b, -1] @ fitted) ** 2)
        return total / 5

    pairs_x, pairs_y = xs[:, :-1], ys[:, :-1]
    junk_x, junk_y = ys[:, :-1], xs[:, 1:]  # y_i -> x_i+1 (the last: y_n -> x_q)
    zeros = np.zeros_like(pairs_y)
    assert scores[f"final/repurpose/least_squares_n{n}"] == pytest.approx(
        loss(pairs_x, pairs_y), rel=1e-5, abs=1e-6)  # fmt: skip
    assert scores[f"final/repurpose/plain_n{n}"] == pytest.approx(
        loss(np.concatenate([pairs_x, junk_x], 1), np.concatenate([pairs_y, junk_y], 1)),
        rel=1e-5)  # fmt: skip
    assert scores[f"final/repurpose/eos_n{n}"] == pytest.approx(
        loss(np.concatenate([pairs_x, pairs_y], 1), np.concatenate([pairs_y, zeros], 1)),
        rel=1e-5)  # fmt: skip
    # Continual: the other task's pairs and y'_i -> 0 come first, then this task's.
    assert scores[f"final/repurpose/continual_n{n}"] == pytest.approx(
        loss(np.concatenate([other_x, other_y, pairs_x, pairs_y], 1),
             np.concatenate([other_y, zeros, pairs_y, zeros], 1)), rel=1e-5)  # fmt: skip
    assert scores[f"final/repurpose/least_squares_n{n}"] > 0.5


def test_the_neighbour_share_is_one_for_a_copy_and_one_over_the_others_for_an_average():
    from methods.analyses.sensitivity import neighbour_share

    steps = 7
    copy_next = torch.eye(steps) + torch.eye(steps).roll(1, dims=1)  # f_t reads s_t and s_t+1
    even = torch.ones(steps, steps)
    norms = torch.stack([copy_next, even])
    assert neighbour_share(norms[:1], slice(0, -1), 1) == pytest.approx(1.0)
    assert neighbour_share(norms[1:], slice(0, -1, 2), 1) == pytest.approx(1 / (steps - 1))
    assert neighbour_share(norms[:1], slice(1, None), -1) == pytest.approx(0.0)
    assert neighbour_share(norms, slice(0, -1, 2), 1) == pytest.approx((1 + 1 / 6) / 2)
