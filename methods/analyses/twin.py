"""A trained in-context model against its control twin: the same network with its one
attention layer fixed to the GD construction (Prop. 1), trained beside it from the same
initial weights on the same batches (``lsa`` with ``twin_control``). Thesis sec. 2.3, Fig.
2.8: on sine regression the two "show surprising similarity on (1) the initial
(meta-learned) prediction, read out after the MLP, and (2) the final prediction", and align
in prediction and in partial derivatives, "the two first parts of the Taylor approximation".

Measured on held-out tasks of the run's own family, each as a relative difference (so that
one band reads alike for any target scale): the initial predictions (the query token's
target slot after the token embedding and its MLP, before attention), the final ones, and
the derivatives of the final prediction with respect to the query's input (an input of any
width: the difference of the gradients, as a norm).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mesabench_datasets.tasks import TaskSource, seeded_generator
from mesabench_datasets.tokens import read_prediction
from methods.analyses.sensitivity import with_sensitivity
from methods.analyses.sizes import analysis_tasks
from methods.common.losses import per_task_loss

#: Seed role of the comparison's tasks: a stream of (role, seed) apart from training,
#: validation, test and the other analyses' (4-10; derived.py's 11 and 12 seed streams of
#: other keys).
_ROLE = 11
#: Tasks the comparison is measured on (the run's ``analysis_tasks`` where set).
TASKS = 1000


def relative_difference(mine: Tensor, theirs: Tensor) -> float:
    """Mean ||mine - theirs|| over the mean ||theirs||, per query (the last axis a vector)."""
    return ((mine - theirs).norm(dim=-1).mean() / theirs.norm(dim=-1).mean()).item()


def initial_prediction(method: Any, sx: Tensor, sy: Tensor, qx: Tensor) -> Tensor:
    """What the model predicts before its attention layer: the query token's target slot
    as the token embedding leaves it (the meta-learned initial function)."""
    _, queries = method.tokens(sx, sy, qx)
    return read_prediction(queries, method.outputs).reshape(*qx.shape[:2], method.outputs)


def twin_comparison(model: Any, twin: Any, source: TaskSource, seed: int) -> dict[str, float]:
    """``final/twin/*``: the model against its twin on the same held-out tasks."""
    batch = source.sample(analysis_tasks(model, TASKS),
                          seeded_generator(_ROLE, seed, device=model.device))  # fmt: skip
    sx, sy, qx, qy = batch.support_x, batch.support_y, batch.query_x, batch.query_y
    found: dict[str, Tensor] = {}
    for name, method in (("model", model), ("control", twin)):
        with torch.no_grad():
            found[f"{name}_init"] = initial_prediction(method, sx, sy, qx)
        found[name], found[f"{name}_sens"] = with_sensitivity(method.forward, sx, sy, qx)
    loss = model.problem.loss
    return {
        "final/twin/init_rel_diff": relative_difference(found["model_init"],
                                                        found["control_init"]),
        "final/twin/pred_rel_diff": relative_difference(found["model"], found["control"]),
        "final/twin/sens_rel_diff": relative_difference(found["model_sens"],
                                                        found["control_sens"]),
        "final/twin/model_loss": per_task_loss(found["model"], qy, loss).mean().item(),
        "final/twin/control_loss": per_task_loss(found["control"], qy, loss).mean().item(),
    }
