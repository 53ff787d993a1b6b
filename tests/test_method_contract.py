"""A method's outputs are held to the Method API at the protocol's boundary: a prediction
of the wrong shape stops the run at its first use, FAILED with one line naming the method,
the hook and the shape expected; a loss never broadcasts."""

from __future__ import annotations

import pytest
import torch
from mlflow.tracking import MlflowClient

from benchmarks.protocols.base import MethodContractError, checked_output
from methods.common.losses import per_task_loss, task_loss
from methods.gradient.maml import GradientMetaLearner
from methods.registry import METHODS, MethodEntry


class SqueezedPredictions(GradientMetaLearner):
    """MAML whose predict drops the output axis: [T, Q] instead of [T, Q, 1]."""

    def predict(self, support_x, support_y, query_x, steps=None):
        return super().predict(support_x, support_y, query_x, steps).squeeze(-1)


if "squeezed_test" not in METHODS:
    METHODS.add("squeezed_test", MethodEntry(SqueezedPredictions), "tests/test_method_contract.py")


@pytest.mark.parametrize("chunk", ["10", "50"])  # 10: the chunk equals the query count
def test_a_wrong_prediction_shape_fails_the_run_at_its_first_use(store, chunk):
    import benchmarks
    from benchmarks.running.execute import RunFailed
    from tests.helpers import only_run

    with pytest.raises(RunFailed) as failed:
        benchmarks.run("squeezed_test", iterations=400, val_every=5, val_tasks=10,
                       test_tasks=50, eval_chunk=int(chunk), log_every=1,
                       tracking_uri=store)  # fmt: skip
    assert ("SqueezedPredictions.predict returned shape [10, 10]; it must return [T, Q, out] "
            "= [10, 10, 1]") in str(failed.value)  # fmt: skip
    run = only_run(store)
    assert run.info.status == "FAILED"
    # Stopped at the first validation (iteration 5), not after the 400 iterations.
    assert "final/test_loss" not in run.data.metrics
    history = MlflowClient(store).get_metric_history(run.info.run_id, "train/loss")
    assert max(m.step for m in history) == 5


def test_checked_output_names_the_hook_and_the_layout():
    method = SqueezedPredictions.__new__(SqueezedPredictions)
    good = torch.zeros(2, 3, 1)
    assert checked_output(method, "predict", good, (2, 3, 1), "[T, Q, out]") is good
    with pytest.raises(MethodContractError, match=r"predict returned a list; it must return"):
        checked_output(method, "predict", [0.0], (2, 3, 1), "[T, Q, out]")


@pytest.mark.parametrize(
    ("kind", "prediction", "target"),
    [("half_mse", torch.zeros(4, 5), torch.zeros(4, 5, 1)),
     ("mse", torch.zeros(4, 5, 1), torch.zeros(4, 5)),
     ("cross_entropy", torch.zeros(4, 3), torch.zeros(4, 5, dtype=torch.long))],
)  # fmt: skip
def test_losses_refuse_to_broadcast(kind, prediction, target):
    with pytest.raises(ValueError, match="needs predictions of shape"):
        per_task_loss(prediction, target, kind)
    with pytest.raises(ValueError, match="needs predictions of shape"):
        task_loss(prediction[0], target[0], kind)


def test_the_losses_still_take_matching_shapes():
    prediction, target = torch.tensor([[[1.0], [3.0]]]), torch.tensor([[[0.0], [1.0]]])
    assert per_task_loss(prediction, target, "half_mse").tolist() == [0.5 * (1 + 4) / 2]
