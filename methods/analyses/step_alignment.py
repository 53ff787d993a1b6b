"""A trained multi-layer model beside K steps of GD and of GD++ at given rates (thesis Figs.
2.5-2.6, top right and lower left: the trained model "aligns much better with GD++ after
training"): the mean |y_model - y_ref| and the mean cosine of the two sensitivities
d y_hat / d x_q, on the analysis tasks, in the same pass as the alignment with one GD step
(``in_context.gd_alignment``).

The references' rates (and GD++'s gammas) come from the run's settings (``align_gd_etas``,
``align_gdpp_etas``, ``align_gdpp_gammas``): a table passes the optima it derived by
simulation, so that the comparison does not rest on a short fit made inside the run (a
300-step Adam fit of five GD++ steps diverges when run longer).
"""

from __future__ import annotations

import torch
from torch import Tensor

from methods.analyses.sensitivity import with_sensitivity
from methods.reference.algorithms import gd_token_predict

Steps = tuple[Tensor, Tensor | None]


def step_references(config) -> dict[str, Steps]:
    """The K-step references a config names, K = its layers: ``gdk`` (GD) and ``gdpp``
    (GD++), each rate (and gamma) given once for tied steps or once per layer."""
    layers = getattr(config, "layers", 1)

    def steps(values: tuple[float, ...]) -> Tensor:
        return torch.tensor(values, dtype=torch.float64).expand(layers).clone() \
            if len(values) == 1 else torch.tensor(values, dtype=torch.float64)  # fmt: skip

    found: dict[str, Steps] = {}
    if getattr(config, "align_gd_etas", ()):
        found["gdk"] = steps(config.align_gd_etas), None
    if getattr(config, "align_gdpp_etas", ()):
        gammas = config.align_gdpp_gammas or (0.0,) * len(config.align_gdpp_etas)
        found["gdpp"] = steps(config.align_gdpp_etas), steps(gammas)
    return found


def reference_sums(references: dict[str, Steps], sx: Tensor, sy: Tensor, qx: Tensor,
                   pred_m: Tensor, sens_m: Tensor) -> dict[str, Tensor]:  # fmt: skip
    """For each reference: the summed |y_model - y_ref| and the summed sensitivity cosine
    over the queries of one chunk of tasks, given the model's predictions and sensitivities
    there (computed once, by the caller's alignment with one GD step)."""
    sums = {}
    for name, (etas, gammas) in references.items():
        def reference(a, b, c, etas=etas, gammas=gammas):
            return gd_token_predict(a, b, c, etas.to(a), None if gammas is None else gammas.to(a))

        pred_r, sens_r = with_sensitivity(reference, sx, sy, qx)
        cosine = torch.nn.functional.cosine_similarity(sens_m, sens_r, dim=-1)
        sums[name] = torch.stack([(pred_m - pred_r).abs().sum(), cosine.sum()]).double().cpu()
    return sums


def reference_metrics(sums: dict[str, Tensor], count: int) -> dict[str, float]:
    """``final/align/{name}_pred_diff`` and ``{name}_sens_cosine``: the sums over ``count``
    queries, as means."""
    final = {}
    for name, total in sums.items():
        pred_diff, cosine = (total / count).tolist()
        final[f"final/align/{name}_pred_diff"] = pred_diff
        final[f"final/align/{name}_sens_cosine"] = cosine
    return final
