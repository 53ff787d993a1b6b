"""How many tasks the in-context learners' final analyses draw: a setting of their configs.

Each analysis has its own size, the papers' (alignment and the fitted GD rate 10,000 tasks,
curves and weight analyses 2,000, the alignment monitored at each validation 1,000, probes
and the copy analysis 256 sequences); ``analysis_tasks`` replaces them all for one run, e.g.
to check an analysis runs without paying for its precision. (The fitted GD++ reference of
the curves trains on batches of its own; the repurposing test keeps its 256 tasks.)
"""

from __future__ import annotations

from dataclasses import dataclass

from mesabench_core import param


@dataclass(frozen=True)
class AnalysisSettings:
    """The analysis size, a field of every built-in in-context learner's config."""

    analysis_tasks: int = param(
        0, min=0, added="0.3",
        help="tasks (or sequences) each analysis draws, the final ones and the alignment "
        "monitored at validation; 0: each analysis' own size (10,000 for the GD alignment "
        "and fitted rates, 2,000 for curves and weight analyses, 1,000 for the monitor, 256 "
        "for probes and the copy analysis)")  # fmt: skip


def analysis_tasks(method, default: int) -> int:
    """``default`` (the analysis' own size), or the run's ``analysis_tasks`` where set. A
    plugin learner whose config lacks the field runs every analysis at its own size."""
    return getattr(method.config, "analysis_tasks", 0) or default
