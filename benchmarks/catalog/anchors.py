"""Reference points that put a benchmark's scores on one scale for aggregates across
benchmarks (``leaderboard --aggregate``).

A normalised score is ``(value - zero) / (one - zero)``: 0 at the benchmark's no-adaptation
baseline, 1 at its ideal, higher better whatever the metric's direction. Each anchor says
what it is and where it comes from. A plugin benchmark declares its own
(``BenchmarkSpec.score_anchors``); built-ins get theirs from their task family:

- regression (sinusoids, in-context linear regression): ``zero`` is the expected loss of
  the best predictor that sees no support points, derived in closed form from the task
  distribution (``no_adaptation_loss``); ``one`` is 0, a perfect prediction;
- few-shot classification: ``zero`` is chance, 1 / ways (labels are shuffled in every
  episode, so nothing learnt without the support set does better); ``one`` is 1.

The anchors hold for the benchmark's own task settings, so an aggregate counts only runs
at those settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.catalog.installed import benchmark_spec
from mesabench_core import as_dict


@dataclass(frozen=True)
class ScoreAnchors:
    """The metric an aggregate reads on a benchmark and its two reference values."""

    metric: str
    zero: float
    one: float
    zero_what: str
    one_what: str

    def __post_init__(self) -> None:
        if self.zero == self.one:
            raise ValueError(f"anchors of {self.metric}: zero and one are both {self.zero}")

    def normalise(self, value: float) -> float:
        return (value - self.zero) / (self.one - self.zero)


def anchors_for(benchmark: str) -> ScoreAnchors | None:
    """The benchmark's anchors (its spec's, else its task family's), or None."""
    spec = benchmark_spec(benchmark)
    if spec.score_anchors is not None:
        return spec.score_anchors
    task = spec.task
    ways = getattr(task, "ways", None)
    if isinstance(ways, int) and getattr(task, "dataset", None) is not None:
        return ScoreAnchors("final/test_accuracy", 1 / ways, 1.0,
                            f"chance (1/{ways})", "every query right")  # fmt: skip
    source = task.build()
    baseline = getattr(source, "no_adaptation_loss", None)
    if baseline is None:
        return None
    return ScoreAnchors("final/test_loss", baseline(), 0.0,
                        "no adaptation (derived: the best predictor without support points)",
                        "a perfect prediction")  # fmt: skip


def task_settings(benchmark: str) -> dict[str, str]:
    """The benchmark's task settings as runs record them (``task.KEY`` -> text)."""
    task = benchmark_spec(benchmark).task
    return {f"task.{key}": str(value) for key, value in as_dict(task).items()}
