"""Metrics a run could not write because its store's disk was full, kept in a local file
(``MlflowTracker.finish`` writes them; ``runs --stale --mark-failed`` writes them back).

A run whose store ran out of space is closed FAILED with the reason, and what the store
refused is kept as JSON in the first of :func:`unsaved_folders` that takes it (one file per
run, named by its id). When even the run's status could not be written the run stays
RUNNING; once there is space again, :func:`restore` writes the kept metrics into the run,
closes it FAILED with the kept reason, and removes the file.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path


def unsaved_folders() -> list[Path]:
    """Where kept metrics go, in the order tried."""
    return [Path(tempfile.gettempdir()) / "mesabench-unsaved",
            Path.home() / ".cache" / "mesabench" / "unsaved"]  # fmt: skip


@dataclass(frozen=True)
class Kept:
    path: Path
    run_id: str
    why: str
    metrics: list[dict]


def kept_for(uri: str) -> list[Kept]:
    """The kept files of runs of the store ``uri`` (a file that cannot be read is left
    alone: it may be another store's, or half-written)."""
    found = []
    for folder in unsaved_folders():
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                body = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(body, dict) and body.get("store") == uri:
                found.append(Kept(path, str(body.get("run_id")), str(body.get("why")),
                                  list(body.get("metrics") or [])))  # fmt: skip
    return found


def restore(client, kept: Kept) -> str | None:
    """Write ``kept``'s metrics into its run (each row once: rows already there are not
    written again), close the run FAILED with the kept reason if it is still RUNNING, and
    remove the file; returns what was done, in words. The file is taken first (renamed): of
    two commands restoring at once, one writes and the other finds it gone (None)."""
    from mlflow.entities import Metric

    from benchmarks.store.lifecycle import mark_lost

    taken = kept.path.with_name(f".{kept.path.name}.restoring")
    try:
        kept.path.rename(taken)
    except FileNotFoundError:
        return None
    try:
        run = client.get_run(kept.run_id)
        present = {key: {m.step for m in client.get_metric_history(kept.run_id, key)}
                   for key in {m["key"] for m in kept.metrics}}  # fmt: skip
        rows = [Metric(m["key"], math.nan if m["value"] is None else float(m["value"]),
                       int(m["timestamp"]), int(m["step"]))
                for m in kept.metrics if m["step"] not in present[m["key"]]]  # fmt: skip
        for start in range(0, len(rows), 1000):  # MLflow's batch limit
            client.log_batch(kept.run_id, metrics=rows[start:start + 1000])
        said = f"wrote {len(rows)} kept metric row(s) of run {kept.run_id} from {kept.path}"
        if run.info.status == "RUNNING":
            mark_lost(client, kept.run_id, f"the store ran out of space ({kept.why}); its "
                      "kept metrics written back")  # fmt: skip
            said += "; closed FAILED"
    except BaseException:
        taken.rename(kept.path)  # not written back: kept for the next try
        raise
    taken.unlink()
    return said
