"""Protocol checks of a run before it is recorded: what would let a wrong or weak number
reach a board unnoticed. Each finding is one line naming what is wrong; the run is still
made (a check is a warning, not a refusal), its findings recorded with it
(``mesabench.lint``) so that every board shows them beside its row.

- fewer test episodes than the benchmark declares as its minimum (``min_test_tasks``);
- a cross-domain meta-test on a set that shares classes with the training set (tiered- and
  miniImageNet are both ImageNet classes; CIFAR-FS and FC100 both CIFAR-100's).
"""

from __future__ import annotations

from typing import Any

#: Image sets drawn from one source: meta-testing one after training on another tests on
#: classes seen in training (their class splits are disjoint within a set, not across).
SHARED_SOURCES = ({"miniimagenet", "tiered_imagenet"}, {"cifarfs", "fc100"})
LINT_TAG = "mesabench.lint"
#: Which data the run's protocol chose its model on (``Protocol.selects_on``).
SELECTED_ON_TAG = "mesabench.selected_on"
#: One digest of the contents of every data file a run read.
DATA_DIGEST_TAG = "mesabench.data_digest"


def plan_findings(plan: Any, spec: Any) -> list[str]:
    """The protocol findings of a resolved run plan on its benchmark ``spec``."""
    findings = []
    test_tasks = getattr(plan.protocol, "test_tasks", None)
    minimum = getattr(spec, "min_test_tasks", None)
    if minimum is not None and test_tasks is not None and test_tasks < minimum:
        findings.append(f"{test_tasks} test episodes, fewer than the {minimum} "
                        f"{plan.benchmark} declares as its minimum")  # fmt: skip
    dataset = getattr(plan.task, "dataset", None)
    tested_on = getattr(plan.task, "test_dataset", "same")
    if tested_on not in ("same", dataset) and any(
        {dataset, tested_on} <= shared for shared in SHARED_SOURCES
    ):
        findings.append(f"meta-tested on {tested_on} after training on {dataset}: both draw "
                        "from one source, so test classes may have been seen in training")
    return findings
