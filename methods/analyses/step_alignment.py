"""A trained multi-layer model beside K steps of GD and of GD++ at given rates (thesis Figs.
2.5-2.6, top right and lower left: the trained model "aligns much better with GD++ after
training"): the mean |y_model - y_ref| and the mean cosine of the two sensitivities
d y_hat / d x_q, on the analysis tasks.

The references' rates (and GD++'s gammas) come from the run's settings (``align_gd_etas``,
``align_gdpp_etas``, ``align_gdpp_gammas``): a table passes the optima it derived by
simulation, so that the comparison does not rest on a short fit made inside the run (a
300-step Adam fit of five GD++ steps diverges when run longer).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mesabench_datasets.tasks import TaskSource, seeded_generator
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


def step_alignment(method, source: TaskSource, references: dict[str, Steps], tasks: int,
                   role: int, seed: int = 0, chunk: int = 2000) -> dict[str, float]:  # fmt: skip
    """``final/align/{name}_pred_diff`` and ``{name}_sens_cosine`` for each reference, on
    ``tasks`` tasks drawn with the seed ``role`` (the caller's analysis tasks)."""
    batch = source.sample(tasks, seeded_generator(role, seed, device=method.device))
    sums = {name: torch.zeros(2, dtype=torch.float64) for name in references}
    count = 0
    for start in range(0, tasks, chunk):
        part = batch.slice(start, start + chunk)
        context = part.support_x, part.support_y, part.query_x
        pred_m, sens_m = with_sensitivity(method.forward, *context)
        for name, (etas, gammas) in references.items():
            def reference(sx, sy, qx, etas=etas, gammas=gammas):
                return gd_token_predict(sx, sy, qx, etas.to(sx),
                                        None if gammas is None else gammas.to(sx))

            pred_r, sens_r = with_sensitivity(reference, *context)
            cosine = torch.nn.functional.cosine_similarity(sens_m, sens_r, dim=-1)
            sums[name] += torch.stack([(pred_m - pred_r).abs().sum(), cosine.sum()]).double().cpu()
        count += pred_m[..., 0].numel()
    final = {}
    for name, total in sums.items():
        pred_diff, cosine = (total / count).tolist()
        final[f"final/align/{name}_pred_diff"] = pred_diff
        final[f"final/align/{name}_sens_cosine"] = cosine
    return final
