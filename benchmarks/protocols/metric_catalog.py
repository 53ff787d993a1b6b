"""What every final metric means and which way is better: declared here, never guessed.

Every ``final/...`` name a protocol logs is declared once below with its direction (``lower``,
``higher``, or ``None`` for a descriptive number that ranks nothing, such as a parameter
count) and its meaning in words. The leaderboard ranks only by a metric with a direction; an
undeclared one is refused. A test runs every protocol and checks that each name it logged is
declared here. Plugins declare their own metrics with :func:`declare_metric`.

Descriptions may name run settings in braces (``{last_eval_step}``, ``{test_tasks}``); the
leaderboard fills them from the runs' recorded params when the rows agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Direction = Literal["lower", "higher"]


@dataclass(frozen=True)
class MetricInfo:
    """One declared metric (or family of metrics, by a regular expression)."""

    pattern: str
    direction: Direction | None
    words: str

    def matches(self, name: str) -> re.Match | None:
        return re.fullmatch(self.pattern, name)


_CATALOG: list[MetricInfo] = []


def declare_metric(pattern: str, direction: Direction | None, words: str) -> MetricInfo:
    """Declare a metric name (a full-match regular expression over ``final/...`` names).

    ``direction`` is ``"lower"`` or ``"higher"`` (which way is better), or ``None`` for a
    number that describes a run without scoring it. Later declarations win, so a plugin can
    refine one of ours.
    """
    if direction not in ("lower", "higher", None):
        raise ValueError(f"direction must be 'lower', 'higher' or None (got {direction!r})")
    info = MetricInfo(pattern, direction, words)
    _CATALOG.insert(0, info)
    return info


def lookup(name: str) -> tuple[MetricInfo, tuple[str, ...]] | None:
    """The declaration of ``name`` and its regex groups, or None if undeclared."""
    for info in _CATALOG:
        match = info.matches(name)
        if match:
            return info, match.groups()
    return None


def direction_of(name: str) -> Direction | None:
    found = lookup(name)
    return None if found is None else found[0].direction


def is_declared(name: str) -> bool:
    return lookup(name) is not None


def describe(name: str, settings: dict[str, str] | None = None) -> str:
    """``name`` in words with its direction, e.g. "test loss ... after 10 inner steps, lower
    is better"; placeholders the settings cannot fill are left out of the sentence."""
    found = lookup(name)
    if found is None:
        return f"{name} (undeclared metric)"
    info, groups = found
    values = {**_setting_values(settings or {}), **{str(i): g for i, g in enumerate(groups)}}
    text = re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "?"), info.words)
    text = re.sub(r"\s*\[[^\]]*\?[^\]]*\]", "", text)  # drop bracketed parts left unfilled
    text = text.replace("[", "").replace("]", "")
    if info.direction is None:
        return f"{text} (descriptive, not a score)"
    return f"{text}, {info.direction} is better"


def _setting_values(settings: dict[str, str]) -> dict[str, str]:
    out = {}
    steps = settings.get("protocol.eval_steps")
    if steps:
        numbers = re.findall(r"\d+", steps)
        if numbers:
            out["last_eval_step"] = numbers[-1]
    for key in ("protocol.test_tasks", "task.tasks", "task.steps"):
        if settings.get(key):
            out[key.split(".", 1)[1]] = settings[key]
    return out


# -- the suite's own metrics (later lines win over earlier ones) ------------------------------
_EPISODIC = [
    (
        r"final/test_loss",
        "lower",
        "test loss (the task's loss, mean over[ {test_tasks}] held-out tasks; gradient learners "
        "after[ {last_eval_step}] inner steps)",
    ),
    (
        r"final/test_accuracy",
        "higher",
        "test accuracy (mean over[ {test_tasks}] held-out tasks; gradient learners after"
        "[ {last_eval_step}] inner steps)",
    ),
    (r"final/test_loss_steps(\d+)", "lower", "test loss after {0} inner steps"),
    (r"final/test_accuracy_steps(\d+)", "higher", "test accuracy after {0} inner steps"),
    (
        r"final/test_(loss|accuracy)(_steps\d+)?_ci95",
        None,
        "half-width of the normal 95% CI over the run's own test episodes",
    ),
    (
        r"final/test_(loss|accuracy)(_steps\d+)?_diverged_fraction",
        "lower",
        "fraction of test tasks whose loss diverged",
    ),
    (r"final/test_tasks", None, "number of held-out test tasks"),
    (r"final/best_iteration", None, "iteration of the best meta-validation checkpoint"),
    (r"final/loss_t(\d+)", "lower", "test loss at sequence position {0}"),
]
_COMMON = [
    (r"final/train_time_s", "lower", "training wall time in seconds"),
    (r"final/num_params", None, "number of learned parameters"),
    (
        r"final/sparsity/.+",
        None,
        "fraction of gradient entries gated off (per tensor), at the end of training",
    ),
    (
        r"final/sparsity/overall",
        None,
        "fraction of gradient entries gated off (all tensors, "
        "weighted by size), at the end of training",
    ),
    (
        r"final/scored_sparsity/.+",
        None,
        "fraction of gradient entries gated off (per tensor) "
        "in the weights the test metrics were computed with",
    ),
    (
        r"final/scored_sparsity/overall",
        None,
        "fraction of gradient entries gated off (all "
        "tensors, weighted by size) in the weights the test metrics were computed with",
    ),
]
_CONTINUAL = [
    (r"final/ra", "higher", "retained accuracy: mean accuracy over all tasks after the stream"),
    (r"final/bti", "higher", "backward transfer and interference (La-MAML's, all tasks)"),
    (r"final/bwt", "higher", "backward transfer (GEM's, first T-1 tasks)"),
    (r"final/la", "higher", "learning accuracy: mean accuracy on each task right after it"),
    (r"final/fwt", "higher", "forward transfer (GEM's)"),
    (r"final/samples_per_s", "higher", "training samples per second"),
]
_ONLINE = [
    (
        r"final/cumulative_accuracy",
        "higher",
        "cumulative test-then-train accuracy over the [{steps}-step] stream",
    ),
    (r"final/accuracy/(\w+)", "higher", "test-then-train accuracy on the {0} steps of the stream"),
    (r"final/boundary_precision", "higher", "precision of the detected task boundaries"),
    (r"final/boundary_recall", "higher", "recall of the detected task boundaries"),
    (r"final/stream_time_s", "lower", "wall time of the stream in seconds"),
    (r"final/steps_per_s", "higher", "stream steps per second"),
    (r"final/tasks", None, "number of hidden tasks in the stream"),
]
_IN_CONTEXT = [
    (r"final/align/model_loss", "lower", "test loss of the model on the alignment tasks"),
    (r"final/align/gd_loss", None, "test loss of one fitted GD step on the alignment tasks"),
    (r"final/align/gd_eta", None, "fitted rate of the one-step GD reference"),
    (r"final/align/pred_diff", "lower", "prediction difference between model and GD"),
    (r"final/align/sens_diff", "lower", "sensitivity difference between model and GD"),
    (r"final/align/sens_cosine", "higher", "cosine of the model's and GD's sensitivities"),
    (r"final/align/wall_time_s", None, "wall time of the alignment analysis"),
    (r"final/ood/input_x2_model", "lower", "test loss of the model at twice the input range"),
    (r"final/ood/input_x2_gd", None, "test loss of one GD step at twice the input range"),
    (
        r"final/repeat/d([\d.]+)_k(\d+)_model",
        "lower",
        "loss of the trained layer repeated {1} times (dampening {0})",
    ),
    (r"final/repeat/d([\d.]+)_k(\d+)_gd", None, "loss of {1} dampened GD steps (dampening {0})"),
    (r"final/interp/trained_loss", "lower", "loss at the trained weights"),
    (r"final/interp/constructed_loss", None, "loss at the constructed GD weights"),
    (r"final/interp/max_excess", "lower", "largest loss barrier on the path to the GD weights"),
]
for _pattern, _direction, _words in [*_COMMON, *_EPISODIC, *_CONTINUAL, *_ONLINE, *_IN_CONTEXT]:
    declare_metric(_pattern, _direction, _words)  # type: ignore[arg-type]
