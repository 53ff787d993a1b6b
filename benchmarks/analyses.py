"""Analyses run automatically after the meta-test of in-context learners.

Loss by position (causal sequence tasks): the in-context learning curve, mean loss at each
step t over held-out sequences.

Loss vs context size and out-of-distribution curves (linear regression): the model beside
GD (rate fitted at the training distribution) and ridge on the same tasks, with the context
truncated to n points, or with inputs / teachers scaled by alpha.

Alignment with one step of GD (von Oswald et al. 2023): over held-out linear-regression
tasks, mean |y_model - y_GD|, mean ||s_model - s_GD|| and mean cosine(s_model, s_GD), where
s = d y_hat / d x_query and GD uses the rate fitted in closed form on separate tasks.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from datasets.tasks import TaskSource, seeded_generator
from methods.icl import InContextMethod
from methods.reference_algorithms import gd_token_predict, optimal_one_step_rate, ridge_predict

ANALYSIS, FIT = 4, 5  # seed roles, distinct from train / validation / test


def applies(method: object, source: TaskSource) -> bool:
    """Whether the GD alignment analysis applies (in-context learner, linear regression)."""
    return (
        isinstance(method, InContextMethod)
        and source.problem.loss == "half_mse"
        and not source.problem.causal
    )


def loss_by_position(method, source: TaskSource, tasks: int = 1000, seed: int = 0) -> Tensor:
    """Mean 0.5 ||target - prediction||^2 at every position of held-out sequences."""
    batch = source.sample(tasks, seeded_generator(ANALYSIS, seed, device=method.device))
    pred = method.predict(batch.support_x, batch.support_y, batch.query_x)
    return 0.5 * (pred - batch.query_y).pow(2).sum(-1).mean(0).cpu()


def _with_sensitivity(predict, sx: Tensor, sy: Tensor, qx: Tensor) -> tuple[Tensor, Tensor]:
    # Queries never interact, so one backward of the summed predictions gives every
    # query's own gradient d y_hat / d x_q.
    qx = qx.detach().requires_grad_(True)
    with torch.enable_grad():
        pred = predict(sx, sy, qx)
        (sens,) = torch.autograd.grad(pred.sum(), qx)
    return pred.detach(), sens


def gd_alignment(
    method: InContextMethod,
    source: TaskSource,
    tasks: int = 10_000,
    seed: int = 0,
    chunk: int = 2000,
) -> dict[str, float]:
    fit = source.sample(tasks, seeded_generator(FIT, seed, device=method.device))
    num, den = optimal_one_step_rate(*fit)
    eta = (num / den).item() * fit.support_x.shape[1]

    def gd(sx, sy, qx):
        return gd_token_predict(sx, sy, qx, [eta])

    batch = source.sample(tasks, seeded_generator(ANALYSIS, seed, device=method.device))
    sums = torch.zeros(5, dtype=torch.float64)
    count = 0
    for start in range(0, tasks, chunk):
        part = batch.slice(start, start + chunk)
        pred_m, sens_m = _with_sensitivity(
            method.forward, part.support_x, part.support_y, part.query_x
        )
        pred_g, sens_g = _with_sensitivity(gd, part.support_x, part.support_y, part.query_x)
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
    return {
        "final/align/pred_diff": pred_diff,
        "final/align/sens_diff": sens_diff,
        "final/align/sens_cosine": cosine,
        "final/align/model_loss": model_loss,
        "final/align/gd_loss": gd_loss,
        "final/align/gd_eta": eta,
    }


INPUT_SCALES = (0.5, 0.75, 1.0, 1.5, 2.0)
TEACHER_SCALES = (0.5, 1.0, 2.0, 3.0, 5.0)


def fitted_gd_rate(source: TaskSource, device, tasks: int = 10_000, seed: int = 0) -> float:
    fit = source.sample(tasks, seeded_generator(FIT, seed, device=device))
    num, den = optimal_one_step_rate(*fit)
    return (num / den).item() * fit.support_x.shape[1]


def _losses(method, batch, eta: float, n: int) -> tuple[float, float, float]:
    """Half-MSE of the model, one GD step and ridge with the first n context points."""
    sx, sy, qx, qy = batch.support_x[:, :n], batch.support_y[:, :n], batch.query_x, batch.query_y

    def loss(pred: Tensor) -> float:
        return (0.5 * (pred - qy).pow(2).mean()).item()

    # GD's rate is eta/N per point at the fitted N: keep the per-point step for smaller n.
    gd = gd_token_predict(sx, sy, qx, [eta * n / batch.support_x.shape[1]])
    return loss(method.predict(sx, sy, qx)), loss(gd), loss(ridge_predict(sx, sy, qx, 1e-3))


def context_and_ood_curves(
    method, source: TaskSource, recorder, tasks: int = 2000, seed: int = 0
) -> dict[str, float]:
    """Log loss-vs-context and OOD curves (model, GD, ridge) and return summary metrics."""
    eta = fitted_gd_rate(source, method.device, seed=seed)
    gen = seeded_generator(ANALYSIS, seed, 1, device=method.device)
    batch = source.sample(tasks, gen)
    full = batch.support_x.shape[1]
    curves: dict[str, list[tuple[float, tuple[float, float, float]]]] = {"context": []}
    for n in range(1, full + 1):
        values = _losses(method, batch, eta, n)
        curves["context"].append((n, values))
        recorder.log_metrics(
            {
                "analysis/context_model": values[0],
                "analysis/context_gd": values[1],
                "analysis/context_ridge": values[2],
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
            values = _losses(method, shifted.build().sample(tasks, gen), eta, full)
            curves[name].append((alpha, values))
            recorder.log_metrics(
                {f"analysis/{name}_model": values[0], f"analysis/{name}_gd": values[1]},
                step=int(alpha * 100),
            )
    from benchmarks.plots import icl_curves_figure

    recorder.log_figure(icl_curves_figure(curves), "icl_curves.png")
    doubled = dict(curves["ood_input"])[2.0]
    return {"final/ood/input_x2_model": doubled[0], "final/ood/input_x2_gd": doubled[1]}
