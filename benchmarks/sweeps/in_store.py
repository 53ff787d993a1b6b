"""What the store holds of a sweep: its finished cells (skipped on the next invocation),
its lost ones (closed FAILED at start), a dead cell's run closed, and the parent run that
every cell is recorded under."""

from __future__ import annotations

import json
import logging

from benchmarks.store.claims import cell_runs
from benchmarks.sweeps.spec import Cell, SweepSpec

log = logging.getLogger("mesabench")

SWEEP_TAG = "mesabench.sweep"
def store_state(tracker, benchmark: str, keys: set[tuple[str, str, int]]) -> tuple[set, int]:
    """One read of the sweep's own cells at its start (the runs whose config hash is one of
    ``keys``: its cost does not grow with the rest of the store): closes as FAILED ("lost:
    no heartbeat since T") the stale RUNNING runs of the cells in ``keys``, and returns the
    (method, config hash, seed) of every FINISHED run with the number of runs closed."""
    from benchmarks.results.leaderboards import read_runs
    from benchmarks.store.lifecycle import lost_reason, mark_lost, process_alive
    from benchmarks.store.reader import open_reader

    experiment = tracker.experiment_id(benchmark, create=False)
    if experiment is None:
        return set(), 0
    finished, closed = set(), 0
    hashes = ("mesabench.config_hash", {config_hash for _, config_hash, _ in keys})
    reader = open_reader(tracker.uri, tracker.client)
    for run in read_runs(reader, experiment, hashes):
        key = (run.method, run.config_hash, run.seed)
        if run.status == "FINISHED":
            finished.add(key)
        elif run.stale and key in keys and not process_alive(run.tags):  # dead, not paused
            started_ms = int(run.start_time.timestamp() * 1000)
            mark_lost(tracker.client, run.run_id, lost_reason(run.tags, started_ms))
            closed += 1
    return finished, closed


def close_dead_cell(tracker, benchmark: str, cell: Cell, config_hash: str, parent: str,
                    code: int) -> None:  # fmt: skip
    """A cell process that died by a signal could not close its run: close it now."""
    from benchmarks.store.lifecycle import mark_lost

    for run in cell_runs(tracker, benchmark, config_hash, cell.seed, "RUNNING"):
        tags = run.data.tags
        if tags.get("mesabench.method") == cell.method and tags.get("mlflow.parentRunId") == parent:
            mark_lost(tracker.client, run.info.run_id, f"lost: its process died by signal {-code}")


def parent_run(tracker, spec: SweepSpec) -> str:
    """The sweep's parent run: found again by its sweep id, else created with the sweep's
    settings as params."""
    from mlflow.entities import Param

    from benchmarks.store.tracking import source_tags

    experiment = tracker.experiment_id(spec.benchmark)
    sweep_id = spec.sweep_id()
    found = tracker.client.search_runs(
        [experiment], filter_string=f"tags.`{SWEEP_TAG}` = '{sweep_id}'", max_results=1
    )
    if found:
        run_id = found[0].info.run_id
        tracker.client.update_run(run_id, status="RUNNING")
        return run_id  # a concurrent sweep of the same spec shares it
    run = tracker.client.create_run(
        experiment,
        run_name=f"sweep-{sweep_id}",
        tags={SWEEP_TAG: sweep_id, "mesabench.benchmark": spec.benchmark, **source_tags()},
    )
    settings = {
        "sweep.benchmark": spec.benchmark,
        "sweep.methods": ",".join(spec.methods),
        "sweep.seeds": ",".join(map(str, spec.seeds)),
        "sweep.grid": json.dumps(dict(spec.grid)),
        "sweep.set": json.dumps(dict(spec.settings)),
        "sweep.preset": spec.preset or "-",
        "sweep.device": spec.device,
        "sweep.cells": str(len(spec.cells())),
    }
    tracker.client.log_batch(
        run.info.run_id, params=[Param(k, v[:6000]) for k, v in settings.items()]
    )
    tracker.client.log_text(
        run.info.run_id,
        json.dumps({"cells": [c.label() for c in spec.cells()]}, indent=2),
        "sweep.json",
    )
    return run.info.run_id
