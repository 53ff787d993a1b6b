"""Leaderboard latency on a store with many runs: ours vs MLflow's own ``search_runs``.

Fills a fresh SQLite store with ``--runs`` finished runs of one benchmark (10 methods x
configs x seeds, each with the params, tags and final metrics a real run has), then times
building the leaderboard and, as the peer, ``mlflow.search_runs`` fetching the same runs
into a DataFrame. Target: the leaderboard in under 2 s for 1000 runs.

    python bench/leaderboard_speed.py [--runs 1000] [--store /tmp/mesabench-1000]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import mlflow  # noqa: E402
from mlflow.entities import Metric, Param, RunTag  # noqa: E402

from benchmarks.leaderboards import leaderboard_from_store  # noqa: E402
from benchmarks.runner import plan_run  # noqa: E402
from benchmarks.tracking import MlflowTracker  # noqa: E402

BENCHMARK = "sinusoid-5shot"


def fill(tracker: MlflowTracker, runs: int) -> None:
    plan = plan_run("maml", BENCHMARK, 0, device="cpu")
    base_params = plan.flat_params()
    experiment = tracker.experiment_id(BENCHMARK)
    rng = random.Random(0)
    now = int(time.time() * 1000)
    for i in range(runs):
        method, config, seed = f"method{i % 10}", (i // 10) % 10, i // 100
        run = tracker.client.create_run(
            experiment,
            tags={
                "mesabench.method": method,
                "mesabench.config_hash": f"cfg{config}",
                "mesabench.seed": str(seed),
                "mesabench.benchmark": BENCHMARK,
                "mesabench.version": "0.1.0",
            },
        )
        params = {**base_params, "method_name": method, "method.inner_lr": str(config)}
        metrics = {
            "final/test_loss": rng.random(),
            "final/test_loss_ci95": 0.01,
            "final/test_loss_steps1": rng.random(),
            "final/train_time_s": 30.0,
            "final/num_params": 1761.0,
        }
        tracker.client.log_batch(
            run.info.run_id,
            metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
            params=[Param(k, v) for k, v in params.items()],
            tags=[RunTag("mlflow.runName", f"{method}-s{seed}")],
        )
        tracker.client.set_terminated(run.info.run_id, "FINISHED")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--store", default="/tmp/mesabench-leaderboard-bench")
    args = parser.parse_args()
    db = Path(args.store) / "mlflow.db"
    uri = f"sqlite:///{db.resolve()}"
    tracker = MlflowTracker(uri)
    existing = tracker.experiment_id(BENCHMARK, create=False)
    have = 0 if existing is None else len(tracker.client.search_runs([existing], max_results=5000))
    if have < args.runs:
        start = time.perf_counter()
        fill(tracker, args.runs - have)
        print(f"filled {args.runs - have} runs in {time.perf_counter() - start:.1f} s")
    experiment = tracker.experiment_id(BENCHMARK, create=False)

    start = time.perf_counter()
    board = leaderboard_from_store(tracker, BENCHMARK)
    ours = time.perf_counter() - start
    start = time.perf_counter()
    mlflow.set_tracking_uri(uri)
    frame = mlflow.search_runs([experiment], max_results=50_000)
    peer = time.perf_counter() - start
    runs = sum(len(r.runs) for r in board.ours)
    print(f"runs in the store: {len(frame)}; ranked: {runs} in {len(board.ours)} rows")
    print(f"leaderboard (ours):           {ours:6.2f} s  (target < 2 s)")
    print(f"mlflow.search_runs (peer):    {peer:6.2f} s  ratio peer/ours {peer / ours:.2f}x")


if __name__ == "__main__":
    main()
