"""A simulated large sweep: N one-iteration cells on a Ray cluster of local nodes.

Starts a Ray cluster of ``--nodes`` nodes on this machine (``ray.cluster_utils.Cluster``:
one raylet per node, ``--cpus-per-node`` CPUs each), runs ``python -m benchmarks sweep
--backend ray --address ...`` over ``--cells`` one-iteration cells (``fomaml`` and ``maml``
x 5 inner learning rates x cells / 10 seeds on ``sinusoid-5shot``, warm cells unless
``--cold``) into a fresh SQLite store, and then counts the store's runs with plain SQL (not
with the suite's code): every cell must have exactly one FINISHED run, and no run may be
left RUNNING. Prints the wall time, the time per cell, the peak memory of everything this
script started (sum of proportional set sizes: the sweep, the Ray nodes, their workers,
launchers and cells), and with ``--json`` writes the same as JSON.

    python bench/ray_sweep_scale.py --cells 10000 --nodes 2 [--cold] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
ONE_ITERATION = ["--set", "iterations=1", "--set", "val_every=1", "--set", "val_tasks=2",
                 "--set", "test_tasks=4"]  # fmt: skip
INNER_LRS = "0.005,0.01,0.02,0.03,0.05"
METHODS = "fomaml,maml"


class MemoryWatch:
    """Samples the proportional set size of this process's descendants every second."""

    def __init__(self):
        self.peak_mb, self.peak_processes = 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(1.0):
            total, count = 0, 0
            for process in me.children(recursive=True):
                try:
                    total += process.memory_full_info().pss
                    count += 1
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            self.peak_mb = max(self.peak_mb, total / 2**20)
            self.peak_processes = max(self.peak_processes, count)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()


def count_runs(db: Path, benchmark: str) -> dict:
    """Cells (method, config hash, seed) by number of FINISHED runs, and runs by status,
    read with plain SQL from the store's tables."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        rows = con.execute(
            """
            SELECT r.status, m.value, h.value, s.value
            FROM runs r
            JOIN experiments e ON e.experiment_id = r.experiment_id
            JOIN tags m ON m.run_uuid = r.run_uuid AND m.key = 'mesabench.method'
            JOIN tags h ON h.run_uuid = r.run_uuid AND h.key = 'mesabench.config_hash'
            JOIN tags s ON s.run_uuid = r.run_uuid AND s.key = 'mesabench.seed'
            WHERE e.name = ? AND r.lifecycle_stage = 'active'
            """,
            (benchmark,),
        ).fetchall()
    statuses: dict[str, int] = {}
    finished_per_cell: dict[tuple, int] = {}
    for status, method, config_hash, seed in rows:
        statuses[status] = statuses.get(status, 0) + 1
        key = (method, config_hash, seed)
        finished_per_cell[key] = finished_per_cell.get(key, 0) + (status == "FINISHED")
    histogram: dict[int, int] = {}
    for count in finished_per_cell.values():
        histogram[count] = histogram.get(count, 0) + 1
    return {"runs_by_status": statuses, "cells_by_finished_runs": histogram}


def scaled_sweep(cells: int, nodes: int, cpus_per_node: int, work: Path, warm: bool) -> dict:
    from ray.cluster_utils import Cluster

    if cells % 10:
        raise SystemExit(f"--cells must be a multiple of 10 (2 methods x 5 rates), got {cells}")
    db = work / "mlflow.db"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONPATH": str(ROOT)}
    # The nodes read it at their start: workers (and the cells they fork) at the user's
    # priority, as the sweep's own local instance runs them, not at Ray's default niceness
    # 15, under which the cells crawl beside any other work on this machine.
    os.environ.setdefault("RAY_worker_niceness", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus_per_node})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=cpus_per_node)
        cluster.wait_for_nodes()
        command = [sys.executable, "-m", "benchmarks", "sweep", "--benchmark", "sinusoid-5shot",
                   "--methods", METHODS, "--grid", f"inner_lr={INNER_LRS}",
                   "--seeds", f"0-{cells // 10 - 1}", *ONE_ITERATION, "--backend", "ray",
                   "--address", cluster.address, "--tracking-uri", f"sqlite:///{db}",
                   *(["--warm"] if warm else [])]  # fmt: skip
        with MemoryWatch() as memory, open(work / "sweep.log", "w") as log:
            began = time.perf_counter()
            code = subprocess.run(command, env=env, cwd=work, stdout=log,
                                  stderr=subprocess.STDOUT).returncode  # fmt: skip
            wall = time.perf_counter() - began
    finally:
        cluster.shutdown()
    lines = (work / "sweep.log").read_text().strip().splitlines()
    return {
        "cells": cells,
        "nodes": nodes,
        "cpus_per_node": cpus_per_node,
        "warm": warm,
        "exit_code": code,
        "wall_s": round(wall, 1),
        "s_per_cell": round(wall / cells, 3),
        "peak_pss_mb": round(memory.peak_mb),
        "peak_processes": memory.peak_processes,
        "summary": lines[-1] if lines else "",
        **count_runs(db, "sinusoid-5shot"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus-per-node", type=int, default=1)
    parser.add_argument("--cold", action="store_true", help="each cell its own process")
    parser.add_argument("--work", type=Path, default=None, help="folder for the store and log")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="mesabench-ray-sweep-"))
    work.mkdir(parents=True, exist_ok=True)
    result = scaled_sweep(args.cells, args.nodes, args.cpus_per_node, work.resolve(),
                          warm=not args.cold)  # fmt: skip
    for key, value in result.items():
        print(f"{key}: {value}")
    print(f"store and log: {work}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
