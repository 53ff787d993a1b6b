"""A basic leaderboard read back from MLflow: final metrics, mean +- std over seeds.

Runs that differ only by seed (same ``mesabench.config_hash``) form one row. Only FINISHED
runs count; failed and killed runs are counted separately.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rich.table import Table

from benchmarks.metrics import mean_std


@dataclass
class LeaderboardRow:
    method: str
    config_hash: str
    seeds: list[int] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)

    def stat(self, key: str) -> tuple[float, float]:
        return mean_std(self.metrics.get(key, []))


def _all_runs(client, experiment_id: str):
    token = None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def primary_metric(metric_names: set[str]) -> tuple[str, bool]:
    """The metric to rank by and whether higher is better."""
    if "final/test_accuracy" in metric_names:
        return "final/test_accuracy", True
    return "final/test_loss", False


def leaderboard_rows(tracker, benchmark: str, metric: str | None = None):
    """Rows sorted by ``metric`` (default: the benchmark's primary metric) and counts."""
    experiment_id = tracker.experiment_id(benchmark, create=False)
    rows: dict[tuple[str, str], LeaderboardRow] = {}
    excluded = {"FAILED": 0, "KILLED": 0, "RUNNING": 0}
    if experiment_id is None:
        return [], metric or "final/test_loss", excluded
    names: set[str] = set()
    for run in _all_runs(tracker.client, experiment_id):
        if run.info.status != "FINISHED":
            excluded[run.info.status] = excluded.get(run.info.status, 0) + 1
            continue
        tags = run.data.tags
        key = (tags.get("mesabench.method", "?"), tags.get("mesabench.config_hash", "?"))
        row = rows.setdefault(key, LeaderboardRow(*key))
        row.seeds.append(int(tags.get("mesabench.seed", -1)))
        for name, value in run.data.metrics.items():
            if name.startswith("final/"):
                row.metrics.setdefault(name, []).append(value)
                names.add(name)
    if metric is None:
        metric, higher = primary_metric(names)
    else:
        higher = "accuracy" in metric

    def rank_key(row: LeaderboardRow) -> float:
        mean = row.stat(metric)[0]
        if not math.isfinite(mean):
            return math.inf  # missing or diverged: last
        return -mean if higher else mean

    ordered = sorted(rows.values(), key=rank_key)
    return ordered, metric, excluded


def _columns(rows: list[LeaderboardRow], metric: str, prefixes: tuple[str, ...]) -> list[str]:
    names = sorted({k for r in rows for k in r.metrics})
    shown = [metric]
    for name in names:
        wanted = name.startswith("final/test_") or name == "final/sparsity/overall"
        wanted = wanted or any(name.startswith(p) for p in prefixes)
        skip = name.endswith("_ci95") or name == "final/test_tasks"
        if wanted and not skip and name not in shown:
            shown.append(name)
    return shown


def leaderboard_table(result, benchmark: str, prefixes: tuple[str, ...] = ()) -> Table:
    """Rich table: one row per configuration, mean +- std over seeds of each column."""
    rows, metric, excluded = result
    table = Table(title=f"{benchmark}: ranked by {metric}")
    table.add_column("#", justify="right")
    table.add_column("method", style="bold")
    table.add_column("config")
    columns = _columns(rows, metric, prefixes)
    for name in columns:
        table.add_column(name.removeprefix("final/"), justify="right")
    table.add_column("seeds", justify="right")
    table.add_column("train time (s)", justify="right")
    for rank, row in enumerate(rows, 1):
        cells = []
        for name in columns:
            mean, std = row.stat(name)
            cells.append(f"{mean:.4f} ± {std:.4f}" if name in row.metrics else "-")
        time_mean, _ = row.stat("final/train_time_s")
        table.add_row(
            str(rank),
            row.method,
            row.config_hash,
            *cells,
            str(len(row.seeds)),
            f"{time_mean:.1f}",
        )
    skipped = ", ".join(f"{n} {s.lower()}" for s, n in excluded.items() if n)
    if skipped:
        table.caption = f"not ranked: {skipped}"
    return table
