"""What in-context learners add to their meta-test (``InContextMethod.analyse``) and follow
over training (``InContextMethod.monitor``).

Loss vs context size and out-of-distribution curves (linear regression): the model beside
GD (rate fitted at the training distribution), GD++ (as many steps as the model has layers,
fitted there too) and ridge on the same tasks, with the context truncated to n points, with
inputs / teachers scaled by alpha, or with inputs drawn from other distributions of the same
variance (von Oswald et al. 2023, sec. 3; the other distributions: App. A.2).

Alignment with one step of GD (von Oswald et al. 2023, sec. 3): over held-out
linear-regression tasks, mean |y_model - y_GD|, mean ||s_model - s_GD|| and mean
cosine(s_model, s_GD), where s = d y_hat / d x_query and GD uses the rate fitted in closed
form on separate tasks; at the end of training, at every context size n <= N, and (as
``monitor/align/*``) at every meta-validation. At the end of training also beside one GD
step at each fixed rate of the config's ``align_rates``, on the same tasks (the ICLR'24
blog's GD learning-rate sweep, Fig. 12: the differences are smallest at one rate).

For particular models: the GD++ rate and transform a tied plain LSA stack implements (read
from its weights); what the first, softmax layer of a trained model on interleaved tokens
does besides copying; how close a trained GD-SSM layer is to its GD construction.
"""

from __future__ import annotations

import dataclasses
import math
import time

import torch
from torch import Tensor

from mesabench_datasets.tasks import TaskSource, seeded_generator
from methods.analyses.sensitivity import neighbour_share, sensitivity_norms, with_sensitivity
from methods.analyses.sizes import analysis_tasks
from methods.analyses.step_alignment import (
    Steps,
    reference_metrics,
    reference_sums,
    step_references,
)
from methods.api import EpisodicMethod
from methods.common.losses import per_task_loss
from methods.reference.algorithms import gd_token_predict, optimal_one_step_rate, ridge_predict
from methods.registry import METHODS

#: The registered method whose fitted rates and transforms the curves show as GD++ (found
#: by name: the reference is a method like the others, registered where they are).
GDPP_METHOD = "gdpp"

ANALYSIS, FIT = 4, 5  # seed roles, distinct from train / validation / test


def is_linear_regression(source: TaskSource) -> bool:
    """Whether the comparisons with GD, GD++ and ridge apply (non-causal half squared loss)."""
    return source.problem.loss in ("half_mse", "half_sse") and not source.problem.causal


#: Tasks of the alignment measured at each meta-validation (a cheap look, not the final one).
MONITOR_TASKS = 1000
#: Tasks the GD rate is fitted on, and the final alignment measured on.
FIT_TASKS = 10_000
#: Tasks of the context and OOD curves (each point) and of the training-pool loss.
CURVE_TASKS = 2000


def monitor(method, source: TaskSource, seed: int) -> dict[str, float]:
    """Alignment with one GD step now (``monitor/align/*``), and with the K-step references
    the run names (``monitor/align/gdk_*``, ``gdpp_*``), on linear regression only."""
    if not is_linear_regression(source):
        return {}
    eta = getattr(method, "_monitor_eta", None)
    if eta is None:  # fitted once per run, on tasks of its own
        eta = method._monitor_eta = method_gd_rate(method, source, seed)
    aligned = gd_alignment(method, source, tasks=analysis_tasks(method, MONITOR_TASKS),
                           seed=seed, eta=eta,
                           references=step_references(method.config))  # fmt: skip
    return {k.replace("final/align/", "monitor/align/"): v for k, v in aligned.items()
            if not k.endswith("gd_eta")}  # fmt: skip


def analyse(method, source: TaskSource, log, seed: int) -> dict[str, float]:
    """Alignment with one GD step (timed), and loss vs context size and OOD scale beside GD,
    GD++ and ridge, on linear-regression tasks; nothing elsewhere."""
    if not is_linear_regression(source):
        return {}
    began = time.perf_counter()
    final = gd_alignment(method, source, tasks=analysis_tasks(method, FIT_TASKS), seed=seed,
                         rates=getattr(method.config, "align_rates", ()),
                         references=step_references(method.config))  # fmt: skip
    final["final/align/wall_time_s"] = time.perf_counter() - began
    tasks = analysis_tasks(method, CURVE_TASKS)
    final.update(context_and_ood_curves(method, source, log, tasks=tasks, seed=seed))
    if getattr(source.config, "task_pool", 0):
        final["final/pool/train_loss"] = pool_loss(method, source, tasks=tasks, seed=seed)
    return final


def pool_loss(method, source: TaskSource, tasks: int = 2000, seed: int = 0) -> float:
    """The model's loss on tasks of its fixed training pool (the pool's teachers with new
    inputs; with ``pool_inputs``, the fixed training batch itself, whole): against the test
    loss on new teachers, what it memorised."""
    if getattr(source.config, "pool_inputs", False):
        tasks = source.config.task_pool  # a draw of the pool's size is the batch, in order
    batch = source.sample(tasks, seeded_generator(ANALYSIS, seed, 5, device=method.device),
                          "train")  # fmt: skip
    pred = method.predict(batch.support_x, batch.support_y, batch.query_x)
    return per_task_loss(pred, batch.query_y, method.problem.loss).mean().item()


def gd_alignment(
    method: EpisodicMethod,
    source: TaskSource,
    tasks: int = FIT_TASKS,
    seed: int = 0,
    chunk: int = 2000,
    eta: float | None = None,
    rates: tuple[float, ...] = (),
    references: dict[str, Steps] | None = None,
) -> dict[str, float]:
    """Mean |y_model - y_GD|, mean ||s_model - s_GD||, mean cosine(s_model, s_GD) and both
    losses over ``tasks`` held-out tasks, GD one step from zero weights at ``eta`` (None:
    fitted on tasks of its own); and, on the same tasks, the two differences with one GD
    step at each fixed rate of ``rates`` (``final/align/pred_diff_rate{r:g}``,
    ``sens_diff_rate{r:g}``). No cosine by rate: one step from zero weights has
    s_GD = (eta / N) sum_i y_i x_i, proportional to the rate, so the cosine is the same at
    every rate > 0 (the blog's "model similarity is converging to 1 for all GD learning
    rates" holds by construction). ``references``: K-step GD / GD++ references the model is
    also held to on the same tasks (:mod:`methods.analyses.step_alignment`)."""
    if eta is None:
        eta = fitted_gd_rate(source, method.device, tasks=tasks, seed=seed)

    def gd(sx, sy, qx):
        return gd_token_predict(sx, sy, qx, [eta])

    batch = source.sample(tasks, seeded_generator(ANALYSIS, seed, device=method.device))
    sums = torch.zeros(5, dtype=torch.float64)
    by_rate = torch.zeros(len(rates), 2, dtype=torch.float64)
    references = references or {}
    by_reference = {name: torch.zeros(2, dtype=torch.float64) for name in references}
    count = 0
    for start in range(0, tasks, chunk):
        part = batch.slice(start, start + chunk)
        pred_m, sens_m = with_sensitivity(
            method.forward, part.support_x, part.support_y, part.query_x
        )
        pred_g, sens_g = with_sensitivity(gd, part.support_x, part.support_y, part.query_x)
        for name, summed in reference_sums(references, part.support_x, part.support_y,
                                           part.query_x, pred_m, sens_m).items():  # fmt: skip
            by_reference[name] += summed
        for i, rate in enumerate(rates):
            # One step from zero weights predicts (rate / N) x_q . sum_i y_i x_i: its
            # prediction and sensitivity at any rate are the fitted rate's, scaled.
            pred_r, sens_r = pred_g * (rate / eta), sens_g * (rate / eta)
            diffs = [(pred_m - pred_r).abs().sum(), (sens_m - sens_r).norm(dim=-1).sum()]
            by_rate[i] += torch.stack(diffs).double().cpu()
        cosine = torch.nn.functional.cosine_similarity(sens_m, sens_g, dim=-1)
        sums += (
            torch.stack(
                [
                    (pred_m - pred_g).abs().sum(),
                    (sens_m - sens_g).norm(dim=-1).sum(),
                    cosine.sum(),
                    0.5 * (pred_m - part.query_y).pow(2).sum(),
                    0.5 * (pred_g - part.query_y).pow(2).sum(),
                ]
            )
            .double()
            .cpu()
        )
        count += pred_m[..., 0].numel()
    pred_diff, sens_diff, cosine, model_loss, gd_loss = (sums / count).tolist()
    final = {
        "final/align/pred_diff": pred_diff,
        "final/align/sens_diff": sens_diff,
        "final/align/sens_cosine": cosine,
        "final/align/model_loss": model_loss,
        "final/align/gd_loss": gd_loss,
        "final/align/gd_eta": eta,
    }
    for rate, (pred_r, sens_r) in zip(rates, (by_rate / count).tolist(), strict=True):
        final[f"final/align/pred_diff_rate{rate:g}"] = pred_r
        final[f"final/align/sens_diff_rate{rate:g}"] = sens_r
    return {**final, **reference_metrics(by_reference, count)}


INPUT_SCALES = (0.5, 0.75, 1.0, 1.5, 2.0)
TEACHER_SCALES = (0.5, 1.0, 2.0, 3.0, 5.0)


def fitted_gd_rate(source: TaskSource, device, tasks: int = FIT_TASKS, seed: int = 0) -> float:
    fit = source.sample(tasks, seeded_generator(FIT, seed, device=device))
    num, den = optimal_one_step_rate(*fit)
    return (num / den).item() * fit.support_x.shape[1]


def rate_by_line_search(source: TaskSource, device, tasks: int = FIT_TASKS,
                        seed: int = 0) -> dict[str, float]:  # fmt: skip
    """One GD step's rate on the same ``tasks`` two ways (the ICLR'24 blog post, sec.
    'Analytical derivation of the best GD learning rate'): its closed form (the empirical
    optimum, :func:`fitted_gd_rate`'s) and a line search over the GD-transformer's loss (scipy's
    bounded Brent search on [0, 100], blind to the closed form), in float64, each timed.

    The loss is quadratic in the rate, so the two agree to the search's tolerance when the
    closed form is right: this checks the derivation, as the blog's comparison does."""
    from scipy.optimize import minimize_scalar  # imported only when a run asks for it

    fit = source.sample(tasks, seeded_generator(FIT, seed, device=device))
    sx, sy, qx, qy = (t.double() for t in (fit.support_x, fit.support_y, fit.query_x,
                                           fit.query_y))  # fmt: skip
    began = time.perf_counter()
    num, den = optimal_one_step_rate(sx, sy, qx, qy)
    closed = (num / den).item() * sx.shape[1]
    closed_s = time.perf_counter() - began

    def loss(eta: float) -> float:
        return per_task_loss(gd_token_predict(sx, sy, qx, [eta]), qy,
                             source.problem.loss).mean().item()  # fmt: skip

    began = time.perf_counter()
    found = minimize_scalar(loss, bounds=(0.0, 100.0), method="bounded",
                            options={"xatol": 1e-9})  # fmt: skip
    return {
        "final/gd/eta_closed_form": closed,
        "final/gd/eta_line_search": float(found.x),
        "final/gd/closed_form_time_s": closed_s,
        "final/gd/line_search_time_s": time.perf_counter() - began,
        "final/gd/line_search_evaluations": float(found.nfev),
    }


def method_gd_rate(method, source: TaskSource, seed: int) -> float:
    """The GD rate the analyses of ``method`` compare it with: fitted on the run's
    ``analysis_tasks`` where set, else on FIT_TASKS."""
    return fitted_gd_rate(source, method.device, tasks=analysis_tasks(method, FIT_TASKS),
                          seed=seed)  # fmt: skip


def fitted_gdpp(
    source: TaskSource,
    steps: int,
    device,
    seed: int = 0,
    iterations: int = 300,
    tied: bool = False,
):
    """K-step GD++ with its per-step (or, ``tied``, shared) rates and x-transforms fitted
    (Adam) on fresh tasks. A short fit: a guide for the curves, not a converged reference
    (run the `gdpp` method for that)."""
    entry = METHODS.get(GDPP_METHOD).value
    config = dataclasses.replace(entry.cls.Config(**entry.defaults), steps=steps, tied=tied)
    reference = entry.cls(config, source.problem, device)
    for i in range(iterations):
        reference.meta_train_step(
            source.sample(256, seeded_generator(FIT, seed, 1, i, device=device))
        )
    return reference


def _losses(method, batch, eta: float, n: int, gdpp) -> tuple[float, ...]:
    """The task loss of the model, one GD step, ridge and fitted GD++ with the first n
    points."""
    sx, sy, qx, qy = batch.support_x[:, :n], batch.support_y[:, :n], batch.query_x, batch.query_y

    def loss(pred: Tensor) -> float:
        return per_task_loss(pred, qy, method.problem.loss).mean().item()

    # GD's rate is eta/N per point at the fitted N: keep the per-point step for smaller n.
    scale = n / batch.support_x.shape[1]
    gd = gd_token_predict(sx, sy, qx, [eta * scale])
    with torch.no_grad():
        etas, gammas = gdpp.step_parameters()
        gdpp_pred = gd_token_predict(sx, sy, qx, etas * scale, gammas)
    return (
        loss(method.predict(sx, sy, qx)),
        loss(gd),
        loss(ridge_predict(sx, sy, qx, 1e-3)),
        loss(gdpp_pred),
    )


def _alignment_at(method, batch, eta: float, n: int) -> tuple[float, float]:
    """Mean |y_model - y_GD| and mean sensitivity cosine with the first n context points
    (GD keeps its per-point step)."""
    sx, sy, qx = batch.support_x[:, :n], batch.support_y[:, :n], batch.query_x
    scale = n / batch.support_x.shape[1]

    def gd(a, b, c):
        return gd_token_predict(a, b, c, [eta * scale])

    pred_m, sens_m = with_sensitivity(method.forward, sx, sy, qx)
    pred_g, sens_g = with_sensitivity(gd, sx, sy, qx)
    cosine = torch.nn.functional.cosine_similarity(sens_m, sens_g, dim=-1)
    return (pred_m - pred_g).abs().mean().item(), cosine.mean().item()


#: Test-time input distributions beside the training one (each with its variance).
OOD_DISTRIBUTIONS = ("uniform", "normal", "laplace", "exponential")


def context_and_ood_curves(
    method, source: TaskSource, recorder, tasks: int = 2000, seed: int = 0
) -> dict[str, float]:
    """Log loss-vs-context (and alignment-vs-context) and OOD curves (model, GD, ridge, and
    GD++ with as many steps as the model has layers) and return their values as final
    metrics."""
    eta = method_gd_rate(method, source, seed)
    gdpp = fitted_gdpp(
        source,
        getattr(method.config, "layers", 1),
        method.device,
        seed,
        tied=getattr(method.config, "tied", False),
    )
    gen = seeded_generator(ANALYSIS, seed, 1, device=method.device)
    batch = source.sample(tasks, gen)
    full = batch.support_x.shape[1]
    final: dict[str, float] = {}
    curves: dict[str, list[tuple[float, tuple[float, ...]]]] = {"context": []}
    for n in range(1, full + 1):
        values = _losses(method, batch, eta, n, gdpp)
        pred_diff, cosine = _alignment_at(method, batch, eta, n)
        curves["context"].append((n, values))
        recorder.log_metrics(
            {
                "analysis/context_model": values[0],
                "analysis/context_gd": values[1],
                "analysis/context_ridge": values[2],
                "analysis/context_gdpp": values[3],
                "analysis/context_align_pred_diff": pred_diff,
                "analysis/context_align_sens_cosine": cosine,
            },
            step=n,
        )
    config = source.config
    for name, field, scales in (
        ("ood_input", "input_range", INPUT_SCALES),
        ("ood_teacher", "teacher_scale", TEACHER_SCALES),
    ):
        curves[name] = []
        for alpha in scales:
            shifted = dataclasses.replace(config, **{field: getattr(config, field) * alpha})
            values = _losses(method, shifted.build().sample(tasks, gen), eta, full, gdpp)
            curves[name].append((alpha, values))
            recorder.log_metrics(
                {
                    f"analysis/{name}_model": values[0],
                    f"analysis/{name}_gd": values[1],
                    f"analysis/{name}_gdpp": values[3],
                },
                step=int(alpha * 100),
            )
            kind = name.removeprefix("ood_")
            final[f"final/ood/{kind}_x{alpha:g}_model"] = values[0]
            final[f"final/ood/{kind}_x{alpha:g}_gd"] = values[1]
    for dist in OOD_DISTRIBUTIONS:
        shifted = dataclasses.replace(config, input_dist=dist)
        values = _losses(method, shifted.build().sample(tasks, gen), eta, full, gdpp)
        final[f"final/ood/dist_{dist}_model"] = values[0]
        final[f"final/ood/dist_{dist}_gd"] = values[1]
    from methods.analyses.figures import icl_curves_figure

    recorder.log_figure(icl_curves_figure(curves), "icl_curves.png")
    return final


#: Repetitions of a trained layer, and the dampening of its update (the thesis repeats a
#: trained layer 50 times with lambda = 0.75; GD is dampened alike).
REPEATS = (*range(1, 9), 10, 15, 20, 30, 40, 50)
INTERPOLATION = tuple(i / 10 for i in range(11))


def abs_cosine(a: Tensor, b: Tensor) -> float:
    """|cosine| of two tensors read flat: blind to a scale and sign between them."""
    return abs(torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0).item())


def construction_resemblance(key_query: Tensor, proj_value: Tensor, built_kq: Tensor,
                             built_pv: Tensor, dim: int) -> dict[str, float]:  # fmt: skip
    """|cosine| of a trained 1-head layer's products with Prop. 1's (``built_kq``,
    ``built_pv``: :func:`gd_construction`'s), on the entries its prediction reads: the
    columns of W_K^T W_Q that meet the query's x (its y is 0) and the row of P W_V that
    writes the prediction (ICML'23 App. A.4, Fig. 9; thesis Fig. 2.4). Blind to the scale
    (and sign) the trained layer splits between the two products, as the paper's "scalar
    correction" is."""
    read = {"key_query": (key_query[:, :dim], built_kq[:, :dim]),
            "proj_value": (proj_value[dim], built_pv[dim])}
    return {f"final/weights/{name}_cosine": abs_cosine(*pair) for name, pair in read.items()}


def diverged_at(curve: list[tuple[float, float]], zero_loss: float) -> int:
    """The first repetition count K of ``curve`` ((K, loss) pairs, K rising) whose loss is
    above ``zero_loss`` (the zero predictor's: worse than not learning) or not finite, else
    one past the last K: a finite measure of how soon a repeated update diverges, where the
    loss itself overflows to NaN (ICML'23 App. A.6, Fig. 10 left)."""
    for k, value in curve:
        if not math.isfinite(value) or value > zero_loss:
            return int(k)
    return int(curve[-1][0]) + 1


def head_cancellation(key_query: Tensor, proj_value: Tensor, dim: int) -> dict[str, float]:
    """How the heads of one layer share the GD step (ICML'23 App. A.9, Fig. 11; thesis
    Fig. 2.10): per head h, M_h = a_h B_h, the x block B_h of W_K^T W_Q scaled by the rate
    a_h its P W_V writes into the prediction (the mean diagonal of the y block). Prop. 1's
    layer has M = -(eta / N) I; two softmax heads reach it by off-diagonals of opposite
    sign that cancel in their sum. Returned: the off-diagonal share ||M - diag M||_F /
    ||M||_F of the least off-diagonal head and of the sum over heads, and the mean cosine
    between the heads' off-diagonal parts (-1: exactly sign-reversed)."""
    rates = proj_value[:, dim:, dim:].diagonal(dim1=-2, dim2=-1).mean(-1)
    scaled = rates[:, None, None] * key_query[:, :dim, :dim]  # M_h, [H, d, d]

    def off_diagonal(m: Tensor) -> Tensor:
        return m - torch.diag_embed(m.diagonal(dim1=-2, dim2=-1))

    def share(m: Tensor) -> Tensor:
        return off_diagonal(m).flatten(-2).norm(dim=-1) / m.flatten(-2).norm(dim=-1)

    off = off_diagonal(scaled).flatten(1)
    pairs = [(i, j) for i in range(len(off)) for j in range(i + 1, len(off))]
    cosines = [torch.nn.functional.cosine_similarity(off[i], off[j], dim=0) for i, j in pairs]
    return {
        "final/heads/offdiag_share_min": share(scaled).min().item(),
        "final/heads/offdiag_share_sum": share(scaled.sum(0)).item(),
        "final/heads/offdiag_cosine": torch.stack(cosines).mean().item(),
    }


def weight_analyses_apply(method, source: TaskSource) -> bool:
    """A trained 1-layer LSA (``method``) on constructed linear-regression tokens (von Oswald
    et al.)."""
    c = method.config
    return (
        is_linear_regression(source)
        and c.layers == 1
        and c.first_layer == "same"
        and not (c.embed or c.token_embed)
        and c.construction == "none"
        and not method.interleaved
    )


def lsa_weight_analyses(method, source: TaskSource, recorder, tasks: int = 2000, seed: int = 0):
    """The trained layer repeated K times with a dampening factor beside K GD steps at the
    dampened fitted rate; heatmaps of W_K^T W_Q and P W_V; and, for one plain linear head,
    the loss along the straight path from the trained products to the Prop. 1 products
    (rescaled to the trained W_K^T W_Q's scale, which leaves their function unchanged)."""
    from mesabench_datasets.tokens import context_tokens, query_tokens, read_prediction
    from methods.analyses.figures import lsa_weights_figure
    from methods.layers.attention import attention_products, gd_construction, update_from_products

    eta = method_gd_rate(method, source, seed)
    tasks = analysis_tasks(method, tasks)
    batch = source.sample(tasks, seeded_generator(ANALYSIS, seed, 2, device=method.device))
    sx, sy, qx, qy = batch

    def loss(pred: Tensor) -> float:
        return (0.5 * (pred - qy).pow(2).mean()).item()

    final: dict[str, float] = {}
    block = method.layer(0)
    curves: dict[str, list[tuple[float, float]]] = {}
    zero = loss(torch.zeros_like(qy))  # predicting nothing: what diverging is measured by
    with torch.no_grad():
        for damp in method.config.repeat_dampenings:
            model_curve, gd_curve = [], []
            by_depth = method.predictions_by_depth([block] * REPEATS[-1], sx, sy, qx, damp)
            for k in REPEATS:
                model = loss(by_depth[k - 1])
                gd = loss(gd_token_predict(sx, sy, qx, [damp * eta] * k))
                model_curve.append((k, model))
                gd_curve.append((k, gd))
                recorder.log_metrics(
                    {f"analysis/repeat_d{damp}_model": model, f"analysis/repeat_d{damp}_gd": gd},
                    step=k,
                )
            curves[f"repeated layer, damp {damp}"] = model_curve
            curves[f"GD, damp {damp}"] = gd_curve
            final[f"final/repeat/d{damp}_diverge_k_model"] = diverged_at(model_curve, zero)
            final[f"final/repeat/d{damp}_diverge_k_gd"] = diverged_at(gd_curve, zero)
            for k in (8, REPEATS[-1]):
                at = REPEATS.index(k)
                final[f"final/repeat/d{damp}_k{k}_model"] = model_curve[at][1]
                final[f"final/repeat/d{damp}_k{k}_gd"] = gd_curve[at][1]

        key_query, proj_value = attention_products(block.attention)
        c = method.config
        if c.heads >= 2:
            final.update(head_cancellation(key_query, proj_value, sx.shape[-1]))
        interpolation: list[tuple[float, float]] = []
        if c.heads == 1 and not c.softmax and not c.layernorm and not c.mlp:
            dim, n = sx.shape[-1], sx.shape[1]
            built = gd_construction(dim, eta, n)
            kq_built = (built["key"].mT @ built["query"]).to(key_query)
            pv_built = (built["projection"] @ built["value"]).to(proj_value)
            final.update(construction_resemblance(key_query[0], proj_value[0], kq_built[0],
                                                  pv_built[0], dim))  # fmt: skip
            scale = key_query[0, :dim, :dim].diagonal().mean()
            kq_gd, pv_gd = kq_built * scale, pv_built / scale
            context, queries = context_tokens(sx, sy), query_tokens(qx)
            for alpha in INTERPOLATION:
                kq = (1 - alpha) * key_query + alpha * kq_gd
                pv = (1 - alpha) * proj_value + alpha * pv_gd
                moved = queries + update_from_products(kq, pv, context, queries)
                value = loss(read_prediction(moved))
                interpolation.append((alpha, value))
                recorder.log_metrics({"analysis/interpolation_loss": value}, step=round(alpha * 10))
            ends = max(interpolation[0][1], interpolation[-1][1])
            final["final/interp/trained_loss"] = interpolation[0][1]
            final["final/interp/constructed_loss"] = interpolation[-1][1]
            final["final/interp/max_excess"] = max(v for _, v in interpolation) - ends
    recorder.log_figure(
        lsa_weights_figure(key_query.cpu(), proj_value.cpu(), curves, interpolation),
        "lsa_weights.png",
    )
    return final


# -- GD++ read from a tied stack's weights (thesis sec. 2.3) -------------------------------
def gdpp_extraction_applies(method, source: TaskSource) -> bool:
    """A trained tied (recurrent) stack of plain linear layers on constructed tokens."""
    c = method.config
    return (
        is_linear_regression(source) and c.tied and c.layers >= 2 and c.first_layer == "same"
        and not (c.softmax or c.layernorm or c.mlp or c.embed or c.token_embed
                 or method.interleaved)
    )  # fmt: skip


def gdpp_parameters(layer, dim: int, context_size: int) -> tuple[float, float]:
    """The GD++ rate and transform one plain linear attention layer implements on tokens
    (x, y) with x in R^dim: per head, A = P W_V and B = W_K^T W_Q; the x-block of the update
    is sum_h A_h,xx X^T X B_h,xx x (GD++: -gamma X^T X x) and the y-slot's
    sum_h A_h,yy y^T X B_h,xx x (GD: -(eta / N) y^T X x). Each block is read as its mean
    diagonal (a scaled identity in the construction; trained weights are close to one):
    gamma = -sum_h a_h,xx b_h, eta = -N sum_h a_h,yy b_h, with b_h the mean diagonal of
    B_h,xx. Rescaling W_K by c and W_V by 1 / c leaves both unchanged."""
    from methods.layers.attention import attention_products

    with torch.no_grad():
        key_query, proj_value = attention_products(layer)
    b = key_query[:, :dim, :dim].diagonal(dim1=-2, dim2=-1).mean(-1)
    a_xx = proj_value[:, :dim, :dim].diagonal(dim1=-2, dim2=-1).mean(-1)
    a_yy = proj_value[:, dim:, dim:].diagonal(dim1=-2, dim2=-1).mean(-1)
    return float(-context_size * (a_yy * b).sum()), float(-(a_xx * b).sum())


def gdpp_extraction(method, source: TaskSource, tasks: int = 10_000, seed: int = 0):
    """The tied layer's GD++ rate and gamma, and the eigenvalues of X^T X on the analysis
    tasks (thesis sec. 2.3, Fig. 2.7): the largest (mean, and largest over the tasks: what
    gamma is compared with) and the smallest over the tasks, gamma times that largest one
    (the thesis: "the observed eigenvalues stay within [0, 1/gamma]"), and the median
    condition number over the tasks before and after GD++'s transform at the read gamma
    (:func:`gdpp_condition`). 10,000 tasks, the thesis' sample ("across 10000 tasks"): an
    extreme grows with its sample."""
    dim, n = source.problem.input_shape[0], source.problem.context_size
    with torch.no_grad():
        eta, gamma = gdpp_parameters(method.layer(0).attention, dim, n)
        tasks = analysis_tasks(method, tasks)
        batch = source.sample(tasks, seeded_generator(ANALYSIS, seed, 3, device=method.device))
        x = batch.support_x.double()
        spectra = torch.linalg.eigvalsh(x.transpose(1, 2) @ x)  # ascending, per task
    largest = spectra[:, -1]
    return {
        "final/gdpp/eta": eta,
        "final/gdpp/gamma": gamma,
        "final/data/xx_max_eig": largest.mean().item(),
        "final/data/xx_max_eig_largest": largest.max().item(),
        "final/data/xx_min_eig_smallest": spectra[:, 0].min().item(),
        "final/gdpp/gamma_max_eig": gamma * largest.max().item(),
        "final/data/kappa_median": gdpp_condition(spectra, 0.0).median().item(),
        "final/gdpp/kappa_median": gdpp_condition(spectra, gamma).median().item(),
    }


def gdpp_condition(spectra: Tensor, gamma: float) -> Tensor:
    """Each task's condition number after GD++'s transform x <- (I - gamma X^T X) x (thesis
    sec. 2.3): the Hessian's eigenvalues lambda become f(lambda) = lambda (1 - gamma
    lambda)^2 (unsorted), and kappa = max f / min f; gamma = 0 gives lambda_1 / lambda_n.
    ``spectra``: the eigenvalues of X^T X, one row per task. A transformed eigenvalue at 0
    (lambda = 1 / gamma, or a singular X^T X) gives an infinite kappa, as it is."""
    transformed = spectra * (1.0 - gamma * spectra).square()
    return transformed.max(-1).values / transformed.min(-1).values


# -- interleaved tokens: what the first (softmax) layer does (ICML'23 sec. 4) --------------
def interleaved_ablations_apply(method, source: TaskSource) -> bool:
    """A trained 2-layer model on interleaved tokens whose first layer is softmax."""
    c = method.config
    return (is_linear_regression(source) and method.interleaved and c.layers == 2
            and c.first_layer == "softmax" and c.construction == "none")  # fmt: skip


#: Sequences whose first-layer Jacobians the next-token share reads.
NEXT_TOKEN_SEQUENCES = 16


def interleaved_ablations(method, source: TaskSource, tasks: int = 2000, seed: int = 0):
    """The trained model, and the same model without its first layer's update of the query
    (``query_kept``), beside one GD step on the same tasks. A model that is "copy, then one
    GD step" needs its first layer for the context only (to pair each y_i with its x_i), so
    the ablation leaves its loss unchanged; where it does not, the first layer also computes
    on the query. (Which slots the copy writes is the model's choice, positions included:
    no cut of the context's update says "copying only".)"""
    tasks = analysis_tasks(method, tasks)
    batch = source.sample(tasks, seeded_generator(ANALYSIS, seed, 4, device=method.device))
    sx, sy, qx, qy = batch
    eta = method_gd_rate(method, source, seed)
    first, second = method.layer(0), method.layer(1)
    m = method.outputs

    def loss(keep_query: bool) -> float:
        context, queries = method.tokens(sx, sy, qx)
        new_context, new_queries = first(context, queries)
        _, out = second(new_context, new_queries if keep_query else queries)
        pred = -out[..., -m:].reshape(qx.shape[0], qx.shape[1], m)
        return per_task_loss(pred, qy, method.problem.loss).mean().item()

    def first_outputs(sequence: Tensor) -> Tensor:  # [2N + 1, W]: context, then the query
        return torch.cat(first(sequence[None, :-1], sequence[None, -1:]), dim=1)[0]

    shown = slice(0, NEXT_TOKEN_SEQUENCES)  # at least one sequence per task
    sequences = torch.cat(method.tokens(sx[shown], sy[shown], qx[shown]), dim=1)[shown]
    norms = sensitivity_norms(first_outputs, sequences.detach())
    with torch.no_grad():
        gd = gd_token_predict(sx, sy, qx, [eta])
        return {
            "final/interleaved/model_loss": loss(True),
            "final/interleaved/query_kept_loss": loss(False),
            "final/interleaved/gd_loss": per_task_loss(gd, qy, method.problem.loss).mean().item(),
            # The x tokens (even positions) and what each reads besides itself (thesis
            # Fig. 2.9 right: the first layer's outputs depend on the next token).
            "final/interleaved/next_token_share": neighbour_share(norms, slice(0, -1, 2), 1),
            # The y tokens and the x before each: a copy the other way round.
            "final/interleaved/previous_token_share": neighbour_share(norms, slice(1, -1, 2), -1),
        }


# -- GD-SSM: the trained layer beside its construction (Sushma et al.) ----------------------
def gdssm_parameters(method, source: TaskSource, built: dict[str, Tensor],
                     seed: int = 0) -> dict[str, float]:  # fmt: skip
    """How close a trained 1-layer GD-SSM is to its GD construction, in what its prediction
    depends on, and in quantities that rescaling (W by c, C by 1 / c) and a joint sign leave
    unchanged: |cosine| of the local attention W and the selection D with the
    construction's, and of the readout's y rows (the prediction reads the y-slot only) with
    the construction's; the decay on the state's x-by-y block (the GD gradient's); and the
    rate the three implement, -N W_xy D_q c (c: the y-block's mean diagonal of C), beside
    the fitted one-step rate. ``built``: the construction at rate 1 (the method's module
    gives it, so that this module does not import the method's)."""
    layer = method.model.layers[0]
    dim, n, m = source.problem.input_shape[0], source.problem.context_size, method.outputs

    with torch.no_grad():
        readout = layer.readout.detach().cpu()[-m:]  # the y rows: all the prediction reads
        c = readout[:, -m:].diagonal().mean()
        rate = -n * layer.local[0, 1].cpu() * layer.select[2].cpu() * c
        return {
            "final/gdssm/local_cosine": abs_cosine(layer.local.cpu(), built["local"]),
            "final/gdssm/select_cosine": abs_cosine(layer.select.cpu(), built["select"]),
            "final/gdssm/readout_cosine": abs_cosine(readout, built["readout"][-m:]),
            "final/gdssm/decay_mean": layer.decay[:dim, -m:].mean().item(),
            "final/gdssm/eta": float(rate),
            "final/gdssm/gd_eta": method_gd_rate(method, source, seed),
        }
