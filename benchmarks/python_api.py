"""The Python API: ``benchmarks.run(...)`` and ``benchmarks.leaderboard(...)``.

The same path as the command line (the run service, :mod:`benchmarks.running.service`): the
run is planned and validated first (bad input raises :class:`mesabench_core.ConfigError`, or
another :class:`~mesabench_core.BadInput`, before anything is recorded), recorded in MLflow
with its heartbeat, and closed FINISHED, FAILED
(:class:`~benchmarks.running.execute.RunFailed`) or KILLED
(:class:`~benchmarks.running.execute.RunInterrupted`). Settings are keyword arguments with
Python values (bool, int, float, str, tuple, list), qualified names as strings in
``settings={"method.inner_lr": 0.01}`` when a bare name is ambiguous.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_BENCHMARK = "sinusoid-5shot"


@dataclass(frozen=True)
class RunResult:
    """A finished run: its id, final metrics, resolved plan and where its files are."""

    run_id: str
    status: str
    metrics: dict[str, float]
    plan: dict[str, Any]
    tracking_uri: str
    artifact_uri: str
    #: Paths of the run's artifacts, relative to ``artifact_uri`` (``config.json``,
    #: ``results/test_per_task.csv``, figures, checkpoints, ...).
    artifacts: list[str] = field(default_factory=list)

    def __getitem__(self, metric: str) -> float:
        """``result["final/test_loss"]`` (the ``final/`` prefix may be left out)."""
        key = metric if metric.startswith("final/") else f"final/{metric}"
        return self.metrics[key]


def run(
    method: str,
    benchmark: str = DEFAULT_BENCHMARK,
    seed: int = 0,
    *,
    preset: str | None = None,
    device: str = "auto",
    tracking_uri: str | None = None,
    data_root: str | os.PathLike | None = None,
    settings: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> RunResult:
    """Run ``method`` on ``benchmark`` with ``seed`` and record it; return its result.

    Any method, task or protocol setting is a keyword (``iterations=200``,
    ``inner_lr=0.01``, ``eval_steps=(1, 10)``); ``settings`` takes qualified names.
    """
    from benchmarks.store.mlflow_settings import configure_mlflow

    configure_mlflow()  # before MLflow is imported: it reads its logging level then
    from benchmarks.running.service import RunRequest, open_run

    started = open_run(RunRequest(
        method=method, benchmark=benchmark, seed=seed, settings={**(settings or {}), **overrides},
        preset=preset, device=device, tracking_uri=tracking_uri,
        data_root=None if data_root is None else str(data_root),
    ))  # fmt: skip
    final = started.execute()
    tracker, run_id, plan = started.tracker, started.run_id, started.plan
    info = tracker.client.get_run(run_id).info
    return RunResult(
        run_id=run_id,
        status=info.status,
        metrics=dict(final),
        plan=plan.to_dict(),
        tracking_uri=tracker.uri,
        artifact_uri=info.artifact_uri,
        artifacts=_artifact_paths(tracker.client, run_id),
    )


def _artifact_paths(client, run_id: str, folder: str | None = None) -> list[str]:
    paths = []
    for item in client.list_artifacts(run_id, folder):
        if item.is_dir:
            paths += _artifact_paths(client, run_id, item.path)
        else:
            paths.append(item.path)
    return sorted(paths)


def leaderboard(
    benchmark: str = DEFAULT_BENCHMARK,
    *,
    tracking_uri: str | None = None,
    metric: str | None = None,
    group_by: Sequence[str] = ("method", "config_hash"),
    baseline: str | None = None,
    references: bool = True,
    columns: Sequence[str] = (),
    tags: Mapping[str, str] | None = None,
    params: Mapping[str, str] | None = None,
    version: str | None = None,
):
    """The leaderboard of ``benchmark`` as a pandas DataFrame, one row per leaderboard row,
    with the columns of ``leaderboard --format csv`` (docs/leaderboard-json.md). The
    caption and the ranked metric in words are in ``frame.attrs``."""
    import pandas

    from benchmarks.store.mlflow_settings import configure_mlflow

    configure_mlflow()
    from benchmarks.catalog.installed import benchmark_spec
    from benchmarks.results.board import RunFilter
    from benchmarks.results.formats import as_csv, caption
    from benchmarks.results.leaderboards import leaderboard_from_store
    from benchmarks.store.reader import open_reader

    benchmark_spec(benchmark)  # an unknown name raises with suggestions
    board = leaderboard_from_store(
        open_reader(tracking_uri),
        benchmark,
        metric=metric,
        group_by=tuple(group_by),
        run_filter=RunFilter(tags=dict(tags or {}), params=dict(params or {}), version=version),
        extra_prefixes=tuple(columns),
        references=references,
        baseline=baseline,
    )
    frame = pandas.read_csv(io.StringIO(as_csv(board)), keep_default_na=True)
    frame.attrs.update(
        {
            "benchmark": benchmark,
            "metric": board.metric,
            "metric_words": board.metric_words,
            "higher_is_better": board.higher,
            "caption": caption(board),
        }  # fmt: skip
    )
    return frame
