"""The in-context analyses and settings behind the ICML'23 / blog / GD-SSM tables, each held
to a hand-built model or a simulation with a known answer."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from benchmarks.metrics.catalog import is_declared, measures_the_machine
from benchmarks.planning.plan import plan_run
from benchmarks.protocols.recording import MemoryRecorder
from benchmarks.running.execute import build_method, execute
from mesabench_core import ConfigError
from mesabench_datasets.regression import LinRegConfig
from mesabench_datasets.tasks import seeded_generator
from methods.analyses import in_context as icl_analyses
from methods.layers.attention import LinearSelfAttention, gd_construction, gdpp_construction
from methods.reference.algorithms import gd_token_predict


def _plan(method: str, benchmark: str = "linreg-icl", **settings):
    body = {"iterations": "2", "val_every": "1", "val_tasks": "20", "test_tasks": "100",
            **{k: str(v) for k, v in settings.items()}}  # fmt: skip
    return plan_run(method, benchmark, 0, body, device="cpu")


def _set(layer: LinearSelfAttention, weights: dict) -> None:
    with torch.no_grad():
        for name, value in weights.items():
            getattr(layer, name).copy_(value)


# -- GD++ read from weights ---------------------------------------------------------------
@pytest.mark.parametrize("heads", [1, 2])
def test_gdpp_parameters_read_back_the_construction_and_ignore_rescaling(heads):
    d, n, eta, gamma = 6, 9, 4.5, 0.07
    built = gdpp_construction(d, eta, gamma, n)
    if heads == 1:  # one head does both: A = diag(-gamma I, -eta/N), B = selects x
        built = {k: v[:1].clone() for k, v in built.items()}
        built["value"][0] = -torch.eye(d + 1)
        built["value"][0, d, d] = -1.0
        built["projection"][0] = torch.diag(torch.tensor([gamma] * d + [eta / n]))
    layer = LinearSelfAttention(d + 1, heads)
    _set(layer, built)
    assert icl_analyses.gdpp_parameters(layer, d, n) == pytest.approx((eta, gamma), rel=1e-6)
    with torch.no_grad():  # W_K x 3, W_V / 3: the same function, the same reading
        layer.key.mul_(3.0)
        layer.value.div_(3.0)
    assert icl_analyses.gdpp_parameters(layer, d, n) == pytest.approx((eta, gamma), rel=1e-6)
    # And the function is GD++ with those numbers (one step of the tied stack).
    batch = LinRegConfig(dim=d, shots=n, queries=2).build().sample(50, seeded_generator(1))
    from mesabench_datasets.tokens import context_tokens, query_tokens, read_prediction

    context, queries = context_tokens(batch.support_x, batch.support_y), query_tokens(batch.query_x)
    for _ in range(2):
        context, queries = layer(context, queries)
    expected = gd_token_predict(batch.support_x, batch.support_y, batch.query_x, [eta] * 2,
                                [gamma] * 2)  # fmt: skip
    torch.testing.assert_close(read_prediction(queries), expected, atol=2e-4, rtol=1e-3)


def test_a_tied_stack_reports_its_gamma_and_the_eigenvalues_of_its_tasks():
    plan = _plan("lsa", input_range="0.5", layers="2", tied="true", heads="2")
    method = build_method(plan)
    d, n = 10, 10
    _set(method.layer(0).attention, gdpp_construction(d, 13.5, 0.176, n))
    source = plan.task.build()
    assert icl_analyses.gdpp_extraction_applies(method, source)
    got = icl_analyses.gdpp_extraction(method, source, tasks=500)
    assert (got["final/gdpp/eta"], got["final/gdpp/gamma"]) == pytest.approx((13.5, 0.176))
    # Independent: NumPy's eigenvalues of X^T X over the same tasks.
    batch = source.sample(500, seeded_generator(icl_analyses.ANALYSIS, 0, 3))
    import numpy as np

    x = batch.support_x.double().numpy()
    spectra = np.linalg.eigvalsh(np.einsum("tni,tnj->tij", x, x))
    largest = spectra[:, -1]
    assert got["final/data/xx_max_eig"] == pytest.approx(largest.mean(), rel=1e-9)
    assert got["final/data/xx_max_eig_largest"] == pytest.approx(largest.max(), rel=1e-9)
    assert got["final/data/xx_min_eig_smallest"] == pytest.approx(spectra[:, 0].min(), rel=1e-6)
    assert got["final/gdpp/gamma_max_eig"] == pytest.approx(0.176 * largest.max(), rel=1e-5)
    # The condition numbers, by the thesis' f(lambda, gamma) = lambda - 2 gamma lambda^2 +
    # gamma^2 lambda^3 written out, medians over the same tasks.
    f = spectra - 2 * 0.176 * spectra**2 + 0.176**2 * spectra**3
    kappa = spectra[:, -1] / spectra[:, 0]
    assert got["final/data/kappa_median"] == pytest.approx(np.median(kappa), rel=1e-3)
    assert got["final/gdpp/kappa_median"] == pytest.approx(
        np.median(f.max(1) / f.min(1)), rel=1e-3)  # fmt: skip


def test_gdpp_condition_numbers_worked_by_hand():
    """kappa = max f / min f with f(lambda) = lambda (1 - gamma lambda)^2: eigenvalues
    1, 2, 4 at gamma = 0.25 become 0.5625, 0.5, 0 (4 = 1 / gamma: kappa infinite) and at
    gamma = 0.1 become 0.81, 1.28, 1.44 (kappa 1.44 / 0.81); gamma = 0: 4 / 1."""
    spectra = torch.tensor([[1.0, 2.0, 4.0]], dtype=torch.float64)
    assert icl_analyses.gdpp_condition(spectra, 0.0).item() == pytest.approx(4.0)
    assert icl_analyses.gdpp_condition(spectra, 0.1).item() == pytest.approx(1.44 / 0.81)
    assert icl_analyses.gdpp_condition(spectra, 0.25).item() == float("inf")


# -- interleaved tokens: the hand-built copy + GD model ----------------------------------------
@pytest.mark.parametrize("outputs", [1, 2])
def test_the_copy_then_gd_construction_is_one_gd_step(outputs):
    plan = _plan("copy_gd", "linreg-icl-interleaved", outputs=outputs, queries=3)
    method = build_method(plan)
    source = plan.task.build()
    batch = source.sample(200, seeded_generator(3))
    method.meta_train_step(batch)  # fits its rate in closed form
    eta = method.model.blocks[1].attention.projection[0, -1, -1].item() * source.config.shots
    test = source.sample(100, seeded_generator(4))
    expected = gd_token_predict(test.support_x, test.support_y, test.query_x, [eta])
    got = method.predict(test.support_x, test.support_y, test.query_x)
    assert got.shape == expected.shape == (100, 3, outputs)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    # Its rate is the closed-form optimum of the batch it saw (the gd reference's).
    from methods.reference.algorithms import optimal_one_step_rate

    num, den = optimal_one_step_rate(*batch)
    assert eta == pytest.approx((num / den).item() * source.config.shots, rel=1e-5)


def test_the_interleaved_ablation_leaves_a_copy_then_gd_model_unchanged():
    """A 'trained' model holding the construction: its first layer only copies (and leaves
    the query alone), so taking that layer's update off the query changes nothing, and it
    equals GD."""
    plan = _plan("lsa", "linreg-icl-interleaved")
    method = build_method(plan)
    constructed = build_method(_plan("copy_gd", "linreg-icl-interleaved"))
    source = plan.task.build()
    constructed.meta_train_step(source.sample(2000, seeded_generator(5)))
    method.model.load_state_dict(constructed.model.state_dict(), strict=False)
    assert icl_analyses.interleaved_ablations_apply(method, source)
    got = icl_analyses.interleaved_ablations(method, source, tasks=500)
    for key in ("query_kept_loss", "gd_loss"):
        assert got[f"final/interleaved/{key}"] == pytest.approx(
            got["final/interleaved/model_loss"], rel=0.02)  # fmt: skip
    # The construction copies each x_i into its y_i token: the y tokens read the x before
    # them, the x tokens nothing but themselves (the share counts the other tokens only).
    assert got["final/interleaved/previous_token_share"] > 0.9
    assert got["final/interleaved/next_token_share"] < 0.1
    # A first layer that also moves the query is caught: here the query (last position,
    # P - 1) attends to x_N's token (P - 3) instead of y_N's, and adds x_N to its own x.
    with torch.no_grad():
        query = method.model.blocks[0].attention.query
        last = query.shape[-1] - 2  # the query's position slot (the y-slot is last)
        query[0, last - 1, last], query[0, last - 2, last] = 0.0, 50.0
    moved = icl_analyses.interleaved_ablations(method, source, tasks=500)
    assert moved["final/interleaved/query_kept_loss"] != pytest.approx(
        moved["final/interleaved/model_loss"], rel=0.05)  # fmt: skip


# -- GD-SSM beside its construction ---------------------------------------------------------
def test_gdssm_parameters_of_the_construction():
    from methods.in_context.ssm import gdssm_construction

    plan = _plan("gdssm", input_range="0.5")
    method = build_method(plan)
    source = plan.task.build()
    eta = icl_analyses.fitted_gd_rate(source, method.device)
    built = gdssm_construction(10, eta, 10)
    with torch.no_grad():
        for name, value in built.items():
            getattr(method.model.layers[0], name).copy_(-2.0 * value if name == "local"
                                                        else value)  # fmt: skip
        method.model.layers[0].readout.div_(-2.0)  # (-2 W, -C / 2): the same function
    unit = gdssm_construction(10, 1.0, 10)
    got = icl_analyses.gdssm_parameters(method, source, unit)
    for part in ("local", "select", "readout"):
        assert got[f"final/gdssm/{part}_cosine"] == pytest.approx(1.0)
    assert got["final/gdssm/decay_mean"] == 1.0
    assert got["final/gdssm/eta"] == pytest.approx(eta, rel=1e-6)
    assert got["final/gdssm/gd_eta"] == pytest.approx(eta, rel=1e-9)
    # What the prediction never reads (the readout's x rows) changes nothing; its y row does.
    with torch.no_grad():
        method.model.layers[0].readout[:10] = torch.randn(10, 11)
    assert icl_analyses.gdssm_parameters(method, source, unit) == pytest.approx(got)
    with torch.no_grad():
        method.model.layers[0].readout[10, :10] = 1.0
    assert icl_analyses.gdssm_parameters(method, source, unit)["final/gdssm/readout_cosine"] < 0.5


# -- alignment: over training, and at each context size --------------------------------------
def test_the_one_step_reference_is_aligned_with_gd_at_every_context_size_and_step():
    plan = _plan("gd", input_range="0.5", iterations="40", val_every="20")
    recorder = MemoryRecorder()
    final = execute(plan, recorder)
    monitored = [v for _, v in recorder.metrics["monitor/align/sens_cosine"]]
    assert len(monitored) == 2 and all(v == pytest.approx(1.0, abs=1e-6) for v in monitored)
    cosines = [v for _, v in recorder.metrics["analysis/context_align_sens_cosine"]]
    assert len(cosines) == 10 and min(cosines) == pytest.approx(1.0, abs=1e-6)
    # GD's own rate is fitted on other tasks than the analysis': a small, nonzero difference.
    assert 0 < final["final/align/pred_diff"] < 0.01
    # The first validation's monitor, kept as the run's early reading (thesis Fig. 2.5).
    for key in ("sens_cosine", "pred_diff"):
        (first, _), *_ = [(v, s) for s, v in recorder.metrics[f"monitor/align/{key}"]]
        assert final[f"final/early/align/{key}"] == first


def test_the_monitor_reads_the_k_step_references_the_run_names():
    """A 2-layer tied LSA given 2 GD steps' rate: the monitor (and so the early reading)
    holds its alignment with them beside one GD step's."""
    plan = _plan("lsa", input_range="0.5", layers="2", tied="true", iterations="4",
                 val_every="2", align_gd_etas="1.0", align_gdpp_etas="1.0",
                 align_gdpp_gammas="0.0")  # fmt: skip
    recorder = MemoryRecorder()
    final = execute(plan, recorder)
    for name in ("gdk", "gdpp"):
        history = recorder.metrics[f"monitor/align/{name}_sens_cosine"]
        assert [s for s, _ in history] == [2, 4]
        assert final[f"final/early/align/{name}_sens_cosine"] == history[0][1]
    # GD++ with gamma 0 is GD: the two references are the same algorithm.
    assert history[0][1] == pytest.approx(recorder.metrics["monitor/align/gdk_sens_cosine"][0][1])


def test_a_constructed_lsa_layer_is_gd_at_every_context_size():
    plan = _plan("lsa", input_range="0.5")
    method = build_method(plan)
    source = plan.task.build()
    eta = icl_analyses.fitted_gd_rate(source, method.device)
    _set(method.layer(0).attention, gd_construction(10, eta, 10))
    batch = source.sample(300, seeded_generator(7))
    for n in (1, 4, 10):
        diff, cosine = icl_analyses._alignment_at(method, batch, eta, n)
        assert diff < 1e-5 and cosine == pytest.approx(1.0, abs=1e-5)


# -- alignment by GD rate (the ICLR'24 blog's sweep, Fig. 12) ---------------------------------
class _Float64:
    """A task source whose tasks come in float64 (the analysis samples its own)."""

    def __init__(self, source):
        self.source, self.problem, self.config = source, source.problem, source.config

    def sample(self, num_tasks, generator, split="train"):
        return self.source.sample(num_tasks, generator, split).to("cpu", torch.float64)


def _tiny_lsa(rates: str, init_std: str = "0.02"):
    plan = _plan("lsa", dim=3, shots=4, queries=2, align_rates=rates, init_std=init_std)
    method = build_method(plan)
    method.model.double()
    return plan, method, _Float64(plan.task.build())


def test_the_alignment_by_rate_is_a_hand_written_gd_step_beside_the_models_predictions():
    """pred_diff_rate{r} (sens_diff_rate{r}) is the mean over held-out points of
    |y_model - y_GD(r)| (||dy_model/dx_q - dy_GD(r)/dx_q||), y_GD(r) one GD step from zero
    weights at rate r: computed here by hand, in float64, on the analysis' own tasks."""
    rates = (0.5, 1.25, 2.0, 3.5)
    plan, method, source = _tiny_lsa("0.5,1.25,2,3.5", init_std="0.3")  # far from GD
    assert plan.method.align_rates == rates
    got = icl_analyses.gd_alignment(method, source, tasks=40, seed=3, eta=1.7, rates=rates,
                                    chunk=16)  # fmt: skip
    batch = source.sample(40, seeded_generator(icl_analyses.ANALYSIS, 3))
    sx, sy, qx = batch.support_x, batch.support_y, batch.query_x
    assert sx.dtype == torch.float64
    n = sx.shape[1]
    with torch.no_grad():
        model = method.forward(sx, sy, qx)[..., 0]  # [T, Q]
    # The model's d y / d x_q, one task and query at a time.
    sens_model = torch.stack([torch.stack([
        torch.autograd.functional.jacobian(
            lambda q, t=t, j=j: method.forward(sx[t:t + 1], sy[t:t + 1], q[None, None])[0, 0, 0],
            qx[t, j])
        for j in range(qx.shape[1])]) for t in range(sx.shape[0])])  # fmt: skip
    for rate in (1.7, *rates):
        w = (rate / n) * torch.einsum("tnd,tn->td", sx, sy[..., 0])  # w0 - rate * grad, w0 = 0
        gd = torch.einsum("tqd,td->tq", qx, w)
        pred_diff = (model - gd).abs().mean().item()
        sens_diff = (sens_model - w[:, None]).norm(dim=-1).mean().item()
        suffix = "" if rate == 1.7 else f"_rate{rate:g}"
        assert got[f"final/align/pred_diff{suffix}"] == pytest.approx(pred_diff, abs=1e-6)
        assert got[f"final/align/sens_diff{suffix}"] == pytest.approx(sens_diff, abs=1e-6)
    assert pred_diff > 0.05  # the model is not GD: the comparison is not of zeros


def test_the_prediction_difference_is_smallest_at_the_rate_a_gd_model_implements():
    """An LSA holding the Prop. 1 construction at rate 1.3 is one GD step at 1.3: its
    difference is 0 there, grows as |r - 1.3| E|y_GD(1)| away from it (one step from zero
    weights is linear in the rate), and its sensitivity cosine is 1 whatever the rate."""
    rates = (0.5, 1.0, 1.3, 1.6, 2.0)
    _, method, source = _tiny_lsa("0.5,1,1.3,1.6,2")
    built = {k: v.double() for k, v in gd_construction(3, 1.3, 4).items()}
    built["projection"][0, 3, 3] = 1.3 / 4  # the rate in float64, not float32's 0.325
    _set(method.layer(0).attention, built)
    got = icl_analyses.gd_alignment(method, source, tasks=40, eta=2.0, rates=rates)
    diffs = {r: got[f"final/align/pred_diff_rate{r:g}"] for r in rates}
    assert min(diffs, key=diffs.get) == 1.3 and diffs[1.3] < 1e-12
    batch = source.sample(40, seeded_generator(icl_analyses.ANALYSIS, 0))
    unit = gd_token_predict(batch.support_x, batch.support_y, batch.query_x, [1.0])
    for r in rates:
        assert diffs[r] == pytest.approx(abs(r - 1.3) * unit.abs().mean().item(), abs=1e-9)
    assert got["final/align/pred_diff"] == pytest.approx(diffs[2.0], abs=1e-12)
    assert got["final/align/sens_cosine"] == pytest.approx(1.0, abs=1e-12)


def test_align_rates_is_off_by_default_and_reaches_the_final_analysis(monkeypatch):
    """Unset, no metric by rate and the plan hashes as before (a field added later); set,
    the final analysis measures each rate; rates that one metric name would share are
    refused."""
    from benchmarks.planning.config import ConfigError

    plain = _plan("lsa")
    assert plain.method.align_rates == ()
    assert plain.config_hash() != _plan("lsa", align_rates="2").config_hash()
    with pytest.raises(ConfigError, match="align_rates must be distinct"):
        _plan("lsa", align_rates="2,2.0")
    monkeypatch.setattr(icl_analyses, "context_and_ood_curves", lambda *a, **k: {})
    for rates, keys in (("", set()), ("0.5,2", {"pred_diff_rate0.5", "pred_diff_rate2",
                                                "sens_diff_rate0.5", "sens_diff_rate2"})):
        plan = _plan("lsa", analysis_tasks=50, align_rates=rates)
        final = icl_analyses.analyse(build_method(plan), plan.task.build(), MemoryRecorder(), 0)
        assert {k.removeprefix("final/align/") for k in final if "_rate" in k} == keys


# -- out of distribution -------------------------------------------------------------------
@pytest.mark.parametrize("dist, kurtosis", [("normal", 3.0), ("laplace", 6.0)])
def test_other_input_distributions_keep_the_variance_and_the_closed_form_holds(dist, kurtosis):
    config = LinRegConfig(input_range=0.5, input_dist=dist, queries=4)
    batch = config.build().sample(40_000, seeded_generator(2))
    x = batch.support_x.double()
    assert x.var().item() == pytest.approx(0.25 / 3, rel=0.01)
    assert (x.pow(4).mean() / x.pow(2).mean() ** 2).item() == pytest.approx(kurtosis, rel=0.05)
    eta, loss = config.build().one_step_gd_optimum()
    # Independent: the rate fitted on these tasks and its loss, against the closed form.
    from methods.reference.algorithms import optimal_one_step_rate

    num, den = optimal_one_step_rate(*batch)
    fitted = (num / den).item() * 10
    assert fitted == pytest.approx(eta, rel=0.03)
    pred = gd_token_predict(batch.support_x, batch.support_y, batch.query_x, [eta])
    assert (0.5 * (pred - batch.query_y).pow(2).mean()).item() == pytest.approx(loss, rel=0.03)


def test_exponential_inputs_are_shifted_by_their_own_scale():
    x = LinRegConfig(input_range=0.5, input_dist="exponential").build().sample(
        20_000, seeded_generator(2)).support_x  # fmt: skip
    std = 0.5 / math.sqrt(3)
    assert x.min().item() >= 0 and x.mean().item() == pytest.approx(std, rel=0.02)
    assert x.std().item() == pytest.approx(std, rel=0.02)


def test_the_analysis_logs_every_ood_scale_and_distribution():
    plan = _plan("gd", input_range="0.5", iterations="20", val_every="20")
    final = execute(plan, MemoryRecorder())
    for kind, scales in (("input", icl_analyses.INPUT_SCALES),
                         ("teacher", icl_analyses.TEACHER_SCALES)):  # fmt: skip
        for alpha in scales:
            assert f"final/ood/{kind}_x{alpha:g}_model" in final
    for dist in icl_analyses.OOD_DISTRIBUTIONS:
        # The gd method is GD: its loss equals the GD reference's on the same tasks.
        assert final[f"final/ood/dist_{dist}_model"] == pytest.approx(
            final[f"final/ood/dist_{dist}_gd"], rel=0.02)  # fmt: skip
    # A teacher twice as large quadruples a linear predictor's loss.
    assert final["final/ood/teacher_x2_gd"] / final["final/ood/teacher_x1_gd"] == pytest.approx(
        4.0, rel=0.15)  # fmt: skip


# -- a finite pool of training tasks -------------------------------------------------------------
def test_a_task_pool_fixes_the_training_teachers_only():
    config = LinRegConfig(dim=4, shots=6, task_pool=3, pool_seed=5)
    source = config.build()
    pool = source.pool()
    assert torch.equal(pool, LinRegConfig(dim=4, shots=6, task_pool=3, pool_seed=5).build().pool())

    def misfit(split: str) -> torch.Tensor:
        """Each task's smallest misfit of y = x W over the pool's teachers W."""
        b = source.sample(300, seeded_generator(1), split)
        return torch.stack([(b.support_x @ w - b.support_y).abs().amax(dim=(1, 2))
                            for w in pool], dim=1).min(dim=1).values  # fmt: skip

    assert misfit("train").max().item() < 1e-5  # every training task: a pool teacher
    assert misfit("test").min().item() > 1e-2  # no test task is


def test_a_fixed_batch_is_the_same_tasks_every_step_with_the_pools_teachers():
    """``pool_inputs`` (ICML'23 App. A.12): a draw of the pool's size is the whole fixed
    batch, in order, at every step; smaller draws pick among its tasks; the teachers are
    those of the same pool without it; validation and test tasks stay new."""
    config = LinRegConfig(dim=4, shots=6, queries=3, task_pool=5, pool_seed=2,
                          pool_inputs=True)  # fmt: skip
    source = config.build()
    first, again = (source.sample(5, seeded_generator(1, 0, step)) for step in (0, 7))
    for a, b in ((first.support_x, again.support_x), (first.query_y, again.query_y)):
        assert torch.equal(a, b)
    assert torch.equal(source.pool(), LinRegConfig(dim=4, shots=6, task_pool=5,
                                                   pool_seed=2).build().pool())  # fmt: skip
    w = source.pool()
    torch.testing.assert_close(first.support_y, first.support_x @ w)
    torch.testing.assert_close(first.query_y, first.query_x @ w)
    few = source.sample(40, seeded_generator(3), "train")
    batch_inputs = {tuple(x.flatten().tolist()) for x in first.support_x}
    assert {tuple(x.flatten().tolist()) for x in few.support_x} <= batch_inputs
    test = source.sample(40, seeded_generator(3), "test")
    assert not {tuple(x.flatten().tolist()) for x in test.support_x} & batch_inputs
    with pytest.raises(ConfigError, match="pool_inputs .* needs task_pool > 0"):
        LinRegConfig(pool_inputs=True).check()


def test_a_model_trained_on_a_fixed_batch_reports_its_loss_on_that_batch():
    plan = _plan("gd", input_range="0.5", task_pool="8", pool_inputs="true", meta_batch="8",
                 iterations="20", val_every="20", test_tasks="200")  # fmt: skip
    source = plan.task.build()
    method = build_method(plan)
    method.meta_train_step(source.sample(8, seeded_generator(1)))
    (x, y), n = source.pool_data(), source.config.shots
    pred = method.predict(x[:, :n], y[:, :n], x[:, n:])
    expected = (0.5 * (pred - y[:, n:]).pow(2)).mean().item()
    assert icl_analyses.pool_loss(method, source) == pytest.approx(expected, rel=1e-6)


# -- a fixed rate and vector-valued targets ------------------------------------------------------
def test_gd_with_a_fixed_rate_fits_nothing():
    method = build_method(_plan("gd", eta="2.5", steps="3"))
    batch = LinRegConfig().build().sample(20, seeded_generator(1))
    method.meta_train_step(batch)
    got = method.predict(batch.support_x, batch.support_y, batch.query_x)
    torch.testing.assert_close(got, gd_token_predict(batch.support_x, batch.support_y,
                                                     batch.query_x, [2.5] * 3))  # fmt: skip


def test_one_gd_steps_rate_in_closed_form_is_the_line_searchs():
    """The blog's check: the closed-form rate and a line search blind to it find the same
    minimum of one GD step's loss on the same tasks; the loss there is below the loss 1%
    to either side (so a closed form off by a factor would be caught)."""
    plan = _plan("gd", input_range="1", dim="5", shots="10", line_search="true",
                 analysis_tasks="64")  # the method's own analysis: a small one
    source = plan.task.build()
    got = icl_analyses.rate_by_line_search(source, torch.device("cpu"), tasks=2000)
    closed, searched = got["final/gd/eta_closed_form"], got["final/gd/eta_line_search"]
    assert searched == pytest.approx(closed, rel=1e-6)
    fit = source.sample(2000, seeded_generator(icl_analyses.FIT, 0))
    sx, sy, qx, qy = (t.double() for t in (fit.support_x, fit.support_y, fit.query_x,
                                           fit.query_y))  # fmt: skip

    def loss(eta: float) -> float:
        return (gd_token_predict(sx, sy, qx, [eta]) - qy).pow(2).mean().item()

    assert loss(closed) < min(loss(closed * 0.99), loss(closed * 1.01))
    assert got["final/gd/line_search_evaluations"] >= 3
    assert got["final/gd/line_search_time_s"] > 0 and got["final/gd/closed_form_time_s"] > 0
    # Declared, and the times read as the machine's (verify and seed pairing skip them).
    assert all(is_declared(key) for key in got)
    assert {k for k in got if measures_the_machine(k)} == {
        "final/gd/line_search_time_s", "final/gd/closed_form_time_s"}
    method = build_method(plan)
    method.meta_train_step(source.sample(64, seeded_generator(3)))
    assert "final/gd/eta_line_search" in method.analyse(source, MemoryRecorder(), 0)
    for refused in ({"steps": "2"}, {"eta": "1.5"}):
        with pytest.raises(ConfigError, match="line_search compares one fitted step"):
            _plan("gd", line_search="true", **refused)
    with pytest.raises(ConfigError, match="not GD\\+\\+'s"):
        build_method(_plan("gdpp", line_search="true"))


def test_gdssm_construction_control_is_one_gd_step_at_its_learned_rate():
    """construction=gd fixes the GD-SSM layer to its construction: at rate eta it predicts
    one GD step exactly; training moves the rate (and an embedding or head), never the
    layer; more layers are refused (no multi-step construction is built)."""
    plan = _plan("gdssm", construction="gd")
    method = build_method(plan)
    source = plan.task.build()
    batch = source.sample(40, seeded_generator(7))
    with torch.no_grad():
        method.model.rate.fill_(1.7)
    torch.testing.assert_close(method.predict(batch.support_x, batch.support_y, batch.query_x),
                               gd_token_predict(batch.support_x, batch.support_y,
                                                batch.query_x, [1.7]), atol=1e-5, rtol=1e-5)
    layer = {k: v.clone() for k, v in method.model.layers[0].state_dict().items()}
    method.meta_train_step(source.sample(64, seeded_generator(8)))
    assert method.model.rate.item() != 1.7
    for name, value in method.model.layers[0].state_dict().items():
        assert torch.equal(value, layer[name]), name
    head = build_method(_plan("gdssm", "sinusoid-icl", construction="gd", embed=8,
                              head="gated", head_width=8))  # fmt: skip
    trained = {n for n, p in head.model.named_parameters() if p.requires_grad}
    assert "rate" in trained and any(n.startswith("head.") for n in trained)
    assert not any(n.startswith("layers.") for n in trained)
    with pytest.raises(ConfigError, match="construction gd fixes one GD-SSM layer"):
        _plan("gdssm", construction="gd", layers=2)


@pytest.mark.parametrize("method_name", ["gd", "gdssm", "lsa"])
def test_vector_targets_are_each_output_regressed_alike(method_name):
    """GD on m outputs is m independent GD steps; the GD-SSM and LSA constructions with an
    m-wide y-slot compute exactly that."""
    from methods.in_context.ssm import gdssm_construction

    plan = _plan(method_name, outputs=3, queries=2)
    method = build_method(plan)
    batch = plan.task.build().sample(40, seeded_generator(6))
    eta = 1.7
    if method_name == "gdssm":
        with torch.no_grad():
            for name, value in gdssm_construction(10, eta, 10, outputs=3).items():
                getattr(method.model.layers[0], name).copy_(value)
    elif method_name == "lsa":
        built = gd_construction(10, eta, 10)
        width = 13
        for name in built:
            grown = torch.zeros(1, width, width)
            grown[0, :10, :10] = built[name][0, :10, :10]
            if name in ("value", "projection"):
                grown[0, 10:, 10:] = built[name][0, 10, 10] * torch.eye(3)
            built[name] = grown
        _set(method.layer(0).attention, built)
    else:
        method = build_method(_plan("gd", outputs=3, queries=2, eta=str(eta)))
    got = method.predict(batch.support_x, batch.support_y, batch.query_x)
    assert got.shape == (40, 2, 3)
    for k in range(3):
        one = gd_token_predict(batch.support_x, batch.support_y[..., k:k + 1], batch.query_x, [eta])
        torch.testing.assert_close(got[..., k:k + 1], one, atol=1e-4, rtol=1e-4)
    # The loss sums the outputs' half squared errors (averaged over queries).
    assert plan.task.build().problem.loss == "half_sse"


def test_runs_on_vector_targets_are_scored_per_point():
    final = execute(_plan("gd", outputs=2, iterations="30", val_every="30", queries="5"),
                    MemoryRecorder())  # fmt: skip
    # Two outputs: twice one output's loss (the closed form per output, summed).
    _, per_output = dataclasses.replace(LinRegConfig(), outputs=1).build().one_step_gd_optimum()
    assert final["final/test_loss"] == pytest.approx(2 * per_output, rel=0.06)


def test_a_model_trained_on_a_task_pool_reports_its_loss_on_the_pools_tasks():
    """The gd reference learns nothing task-specific: its loss on a teacher w is c ||w||^2
    for isotropic inputs, so the pool's tasks score the test loss times the pool's mean
    ||w||^2 over E||w||^2 = d; and the number is the loss on the pool's teachers."""
    plan = _plan("gd", input_range="0.5", task_pool="8", iterations="20", val_every="20",
                 test_tasks="2000")  # fmt: skip
    final = execute(plan, MemoryRecorder())
    source = plan.task.build()
    norms = source.pool().pow(2).sum(dim=(1, 2)).mean().item()
    assert final["final/pool/train_loss"] == pytest.approx(
        final["final/test_loss"] * norms / 10, rel=0.1)  # fmt: skip
    method = build_method(plan)
    method.meta_train_step(source.sample(256, seeded_generator(1)))
    batch = source.sample(2000, seeded_generator(icl_analyses.ANALYSIS, 0, 5), "train")
    pred = method.predict(batch.support_x, batch.support_y, batch.query_x)
    expected = (0.5 * (pred - batch.query_y).pow(2)).mean().item()
    assert icl_analyses.pool_loss(method, source) == pytest.approx(expected, rel=1e-6)


# -- the analyses' size ---------------------------------------------------------------------
def test_analysis_tasks_sizes_every_analysis_and_is_no_part_of_a_default_plans_identity():
    """``analysis_tasks`` replaces each analysis' own sample size (the alignment equals one
    measured directly on that many tasks, with the GD rate fitted on as many); unset, the
    alignment is the one on 10,000 tasks (every built-in plan hashes as before:
    tests/test_settings_layers.py)."""
    plain, sized = _plan("lsa"), _plan("lsa", analysis_tasks=300)
    assert plain.config_hash() != sized.config_hash()
    for plan, tasks in ((sized, 300), (plain, 10_000)):
        method = build_method(plan)
        final = icl_analyses.analyse(method, plan.source, MemoryRecorder(), seed=0)
        direct = icl_analyses.gd_alignment(method, plan.source, tasks=tasks, seed=0)
        assert final["final/align/pred_diff"] == direct["final/align/pred_diff"], tasks
        assert final["final/align/gd_eta"] == direct["final/align/gd_eta"], tasks


def test_a_tied_stack_built_as_gdpp_aligns_with_gdpp_steps_not_gd_steps():
    """Two tied layers holding one GD++ step's construction are two GD++ steps (thesis sec.
    2.3): beside two GD++ steps at that rate and gamma they predict the same (difference 0,
    cosine 1); beside two plain GD steps at the rate, less so. Settings that give neither
    one rate nor one per layer are refused."""
    d, n, eta, gamma = 10, 10, 1.2, 0.03
    plan = _plan("lsa", layers=2, tied="true", heads=2, align_gd_etas=eta,
                 align_gdpp_etas=eta, align_gdpp_gammas=gamma, analysis_tasks=200)
    method = build_method(plan)
    source = plan.task.build()
    _set(method.layer(0).attention, gdpp_construction(d, eta, gamma, n))
    got = icl_analyses.analyse(method, source, MemoryRecorder(), 0)
    assert got["final/align/gdpp_pred_diff"] == pytest.approx(0.0, abs=1e-5)
    assert got["final/align/gdpp_sens_cosine"] == pytest.approx(1.0, abs=1e-6)
    assert got["final/align/gdk_pred_diff"] > 0.01
    assert got["final/align/gdk_sens_cosine"] < got["final/align/gdpp_sens_cosine"] - 1e-4
    for refused in ({"align_gd_etas": "1,2,3"},
                    {"align_gdpp_etas": "1", "align_gdpp_gammas": "0.1,0.2"}):
        with pytest.raises(ConfigError, match="align_gd"):
            _plan("lsa", layers=2, **refused)
