"""What every final metric means and which way is better: declared here, never guessed.

Every ``final/...`` name a protocol logs is declared once, by the protocol's own module
(:attr:`benchmarks.protocols.base.Protocol.metrics`) or below, with its direction (``lower``,
``higher``, or ``None`` for a descriptive number that ranks nothing, such as a parameter
count) and its meaning in words. The leaderboard ranks only by a metric with a direction; an
undeclared one is refused. A test runs every protocol and checks that each name it logged is
declared here. Plugins declare their own metrics with :func:`declare_metric`.

Descriptions may name run settings in braces (``{last_eval_step}``, ``{test_tasks}``); the
leaderboard fills them from the runs' recorded params when the rows agree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
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


#: The run tag holding the declarations of the metrics its protocol logs, so that a board
#: read from the store knows them without importing the protocol (nor torch).
RECORDED_TAG = "mesabench.metrics"


def recorded(declarations: Sequence[tuple[str, Direction | None, str]]) -> str:
    """``declarations`` as a run records them (:data:`RECORDED_TAG`)."""
    return json.dumps([list(d) for d in declarations], separators=(",", ":"))


def declare_recorded(text: str) -> bool:
    """Declare what a run recorded (:func:`recorded`), where not declared already; False if
    ``text`` is not such a record."""
    try:
        entries = [(str(p), d, str(w)) for p, d, w in json.loads(text)]
    except (ValueError, TypeError):
        return False
    known = {info.pattern for info in _CATALOG}
    for pattern, direction, words in entries:
        if pattern not in known and direction in ("lower", "higher", None):
            declare_metric(pattern, direction, words)
    return True


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


#: Final metrics that measure how a run ran on its machine (time, speed, memory), not what
#: it learned: two runs of one seed and config share every other final metric exactly. A
#: phase's own (an online run's ``pretrain/final/train_time_s``) are such metrics too.
MACHINE_MEASURES = re.compile(r"(?:[^/]+/)*final/(.*_time_s|.*_per_s|peak_.*_mib)")


def measures_the_machine(name: str) -> bool:
    return MACHINE_MEASURES.fullmatch(name) is not None


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


# -- the skeleton's metrics, common to every protocol, and the in-context learners' analyses
# (each protocol declares its own in its module: ``Protocol.metrics``). Later lines win. ---
_COMMON = [
    (r"final/train_time_s", "lower", "training wall time in seconds"),
    (r"final/step_flops", None, "floating-point operations of one training step (torch's "
     "FLOP counter: matrix products and convolutions, forward and backward)"),
    (r"final/peak_rss_mib", None, "the run's process at its largest (resident set, MiB)"),
    (r"final/peak_gpu_mib", None, "memory torch allocated on the GPU at most (MiB)"),
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
        r"final/sparsity_rise/.+",
        None,
        "share of the recorded points (a continual run: after each task) at which a "
        "tensor's sparsity did not fall, 0 where it ended no higher than it began",
    ),
    (
        r"final/sparsity_rise/least",
        None,
        "the smallest of the tensors' sparsity rises (1: every tensor's sparsity rose over "
        "training and never fell)",
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
_IN_CONTEXT = [
    (r"final/align/model_loss", "lower", "test loss of the model on the alignment tasks"),
    (r"final/align/gd_loss", None, "test loss of one fitted GD step on the alignment tasks"),
    (r"final/align/gd_eta", None, "fitted rate of the one-step GD reference"),
    (r"final/align/pred_diff", "lower", "prediction difference between model and GD"),
    (r"final/align/sens_diff", "lower", "sensitivity difference between model and GD"),
    (r"final/align/sens_cosine", "higher", "cosine of the model's and GD's sensitivities"),
    (r"final/align/wall_time_s", None, "wall time of the alignment analysis"),
    (r"final/align/(gdk|gdpp)_pred_diff", "lower",
     "prediction difference between the model and K steps of {0} at the run's given rates"),
    (r"final/align/(gdk|gdpp)_sens_cosine", "higher",
     "cosine of the model's and K steps of {0}'s sensitivities, at the run's given rates"),
    (r"final/align/(pred|sens)_diff_rate([\d.]+)", "lower",
     "{0} difference between the model and one GD step at rate {1} x N"),
    (r"final/twin/(init|pred|sens)_rel_diff", "lower",
     "relative difference between the model's and its control twin's {0} (init: the "
     "prediction before attention; sens: the input-gradient)"),
    (r"final/twin/model_loss", "lower", "test loss of the model on the twin comparison's tasks"),
    (r"final/twin/control_loss", None,
     "test loss of the control twin (the layer fixed to GD) on the same tasks"),
    (r"final/gd/eta_closed_form", None, "one GD step's rate by the closed form"),
    (r"final/gd/eta_line_search", None, "one GD step's rate by a line search on its loss"),
    (r"final/gd/(closed_form|line_search)_time_s", None, "wall time of the rate's {0}"),
    (r"final/gd/line_search_evaluations", None, "loss evaluations of the line search"),
    (r"final/ood/(input|teacher)_x([\d.]+)_model", "lower",
     "test loss of the model with the {0} scaled by {1}"),
    (r"final/ood/(input|teacher)_x([\d.]+)_gd", None,
     "test loss of one GD step with the {0} scaled by {1}"),
    (r"final/ood/dist_(\w+)_model", "lower",
     "test loss of the model on {0} inputs of the training variance"),
    (r"final/ood/dist_(\w+)_gd", None,
     "test loss of one GD step on {0} inputs of the training variance"),
    (r"final/gdpp/eta", None, "GD++ rate read from the tied layer's weights"),
    (r"final/gdpp/gamma", None, "GD++ input transform gamma read from the tied layer's weights"),
    (r"final/data/xx_max_eig", None, "largest eigenvalue of X^T X, mean over tasks"),
    (r"final/data/xx_max_eig_largest", None, "largest eigenvalue of X^T X over the tasks"),
    (r"final/data/xx_min_eig_smallest", None, "smallest eigenvalue of X^T X over the tasks"),
    (r"final/data/kappa_median", None,
     "median over the tasks of X^T X's condition number lambda_1 / lambda_n"),
    (r"final/gdpp/gamma_max_eig", None,
     "gamma read from the weights times the largest eigenvalue of X^T X over the tasks"),
    (r"final/gdpp/kappa_median", "lower",
     "median over the tasks of the condition number after GD++'s transform at the read gamma"),
    (r"final/interleaved/model_loss", "lower", "loss of the trained interleaved-token model"),
    (r"final/interleaved/query_kept_loss", None,
     "loss with the first layer's update taken off the query"),
    (r"final/interleaved/gd_loss", None, "loss of one fitted GD step on the same tasks"),
    (r"final/interleaved/next_token_share", None,
     "share of the first layer's x-token outputs' sensitivity to the other tokens that falls "
     "on the next one (its y; 1: a copy)"),
    (r"final/interleaved/previous_token_share", None,
     "share of the first layer's y-token outputs' sensitivity to the other tokens that falls "
     "on the previous one (its x; 1: a copy)"),
    (r"final/gdssm/(local|select|readout)_cosine", "higher",
     "|cosine| of the trained GD-SSM's {0} parameters with the GD construction's"),
    (r"final/gdssm/decay_mean", None,
     "mean decay of the trained GD-SSM's recurrence on the state's x-by-y block"),
    (r"final/gdssm/eta", None, "one-step rate the trained GD-SSM layer implements"),
    (r"final/gdssm/gd_eta", None, "fitted one-step GD rate on the same task family"),
    (r"final/pool/train_loss", None,
     "loss on tasks of the fixed training pool (its teachers, new inputs)"),
    (
        r"final/repeat/d([\d.]+)_k(\d+)_model",
        "lower",
        "loss of the trained layer repeated {1} times (dampening {0})",
    ),
    (r"final/repeat/d([\d.]+)_k(\d+)_gd", None, "loss of {1} dampened GD steps (dampening {0})"),
    (r"final/repeat/d([\d.]+)_diverge_k_(model|gd)", None,
     "repetitions until the {1} (dampening {0}) first does worse than predicting zero, or "
     "ends non-finite (51: not within 50)"),
    (r"final/probe/(\w+)_layer(\d+)", None,
     "held-out R^2 of a linear probe for the {0} on the tokens after layer {1}"),
    # Declared after the probes' R^2 above: later declarations win.
    (r"final/probe/implicit_loss_layer(\d+)", "lower",
     "loss of the implicit target probe after layer {0} (thesis Fig. 3.13: the inverse-term "
     "probe times eta sum s_t' s_t'-1^T)"),
    (r"final/probe/implicit_loss_best", "lower",
     "loss of the implicit target probe at its best layer"),
    (r"final/probe/implicit_gd_loss", None,
     "loss of one GD step (rate fitted) on the implicit probe's positions"),
    (r"final/copy/previous_attention", None,
     "mean attention weight of the first softmax layer on the previous position"),
    (r"final/copy/loss_learned", "lower", "loss of the stack as trained, on the copy test's "
     "sequences"),
    (r"final/copy/loss_exact", None,
     "loss with the first softmax layer's attention replaced by an exact copy of t - 1"),
    (r"final/copy/loss_without", None, "loss with the first softmax layer removed"),
    (r"final/copy/previous_share", None, "share of the first softmax layer's sensitivity to "
     "earlier states that falls on the previous one (1: a copy of s_t-1)"),
    (r"final/repurpose/(plain|eos|continual)_n(\d+)", "lower",
     "few-shot regression loss of the model trained on dynamics, shown {1} pairs ({0})"),
    (r"final/repurpose/least_squares_n(\d+)", None,
     "few-shot regression loss of least squares on the {0} pairs shown"),
    (r"final/interp/trained_loss", "lower", "loss at the trained weights"),
    (r"final/interp/constructed_loss", None, "loss at the constructed GD weights"),
    (r"final/interp/max_excess", "lower", "largest loss barrier on the path to the GD weights"),
    (r"final/weights/key_query_cosine", "higher",
     "|cosine| of the trained W_K^T W_Q with Prop. 1's, on the entries the prediction reads"),
    (r"final/weights/proj_value_cosine", "higher",
     "|cosine| of the trained P W_V with Prop. 1's, on the row that writes the prediction"),
    (r"final/weights/mesa_gd_cosine", "higher",
     "|cosine| of the trained causal linear layer's trilinear map (readout included, heads "
     "summed) with one mesa-GD step's construction"),
    (r"final/weights/layer_loss", "lower",
     "loss of the single causal linear layer on RevAlg-1's sequences"),
    (r"final/weights/revalg_loss", None,
     "loss of RevAlg-1 (thesis Eq. 3.56: the layer's GD terms at their block diagonals' "
     "means) on the same sequences"),
    (r"final/weights/revalg_full_loss", None,
     "loss of the layer's products at their block diagonals' means, every term (thesis Eq. "
     "3.55), on the same sequences"),
    (r"final/weights/revalg_ablated_loss", None,
     "loss of the layer's products at their block diagonals' means without the GD terms "
     "(thesis table 3.1's L_ablation: lambda_A,3/4 = 0), on the same sequences"),
    (r"final/heads/offdiag_share_min", None,
     "off-diagonal share of the least off-diagonal head's rate-scaled W_K^T W_Q (x block)"),
    (r"final/heads/offdiag_share_sum", "lower",
     "off-diagonal share of the heads' summed rate-scaled W_K^T W_Q (x block; 0: Prop. 1's)"),
    (r"final/heads/offdiag_cosine", None,
     "cosine between the heads' off-diagonal parts of their rate-scaled W_K^T W_Q (-1: they "
     "cancel)"),
]
for _pattern, _direction, _words in [*_COMMON, *_IN_CONTEXT]:
    declare_metric(_pattern, _direction, _words)  # type: ignore[arg-type]
