"""Start-up cost of every CLI command, beside ``python -c "import torch"``, interleaved.

Each repeat runs, in a fresh process each, in rotating order: ``import torch``, ``list
methods``, ``show maml``, ``leaderboard`` and ``compare`` on a small SQLite store (two
runs), and a one-iteration cell (``run --method fomaml --set iterations=1`` with tiny test
settings, into its own store). Prints the median wall time and peak memory of each, and
the overheads the targets are stated in: ``list`` / ``show`` minus the torch import
(target <= 0.5 s), a cell minus the torch import (target <= 1 s), ``leaderboard`` /
``compare`` absolute (target <= 1.5 s and <= 200 MB). With ``--sweep N`` it also times a
sweep of N one-iteration cells, each cell its own process (cold) and forked from one warm
launcher (``sweep --warm``) (target: 100 cells in <= 3 minutes on 2 cores).

    python bench/cli_startup.py [--repeats 5] [--sweep 100] [--workers 2]
        [--sweep-modes cold,warm]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONPATH": str(ROOT)}
ONE_ITERATION = ["--set", "iterations=1", "--set", "val_every=1", "--set", "val_tasks=2",
                 "--set", "test_tasks=4"]  # fmt: skip


def measured(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MB of ``command`` (this process stays small)."""
    began = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env=ENV, cwd=ROOT)  # fmt: skip
    error = process.stderr.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise RuntimeError(f"{' '.join(command[:5])} failed: {error[-1500:]}")
    return time.perf_counter() - began, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sweep", type=int, default=0, help="also time a sweep of N cells")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sweep-modes", default="cold,warm", help="cold, warm or both")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mesabench-startup-"))
    store = f"sqlite:///{work / 'small' / 'mlflow.db'}"
    python = [sys.executable]
    cli = [*python, "-m", "benchmarks"]
    ids = []
    for method in ("maml", "fomaml"):
        subprocess.run([*cli, "run", "--method", method, *ONE_ITERATION, "--tracking-uri", store],
                       check=True, env=ENV, cwd=ROOT, capture_output=True)  # fmt: skip
    import sqlite3

    with sqlite3.connect(store[len("sqlite:///") :]) as connection:
        ids = [row[0] for row in connection.execute("SELECT run_uuid FROM runs")]
    commands = {
        "import torch": [*python, "-c", "import torch"],
        "list methods": [*cli, "list", "methods"],
        "show maml": [*cli, "show", "maml"],
        "leaderboard": [*cli, "leaderboard", "--tracking-uri", store],
        "compare": [*cli, "compare", *ids[:2], "--tracking-uri", store],
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in [*commands, "cell"]}
    names = list(times)
    for repeat in range(args.repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            if name == "cell":
                cell_store = f"sqlite:///{work / f'cell-{repeat}' / 'mlflow.db'}"
                command = [*cli, "run", "--method", "fomaml", *ONE_ITERATION,
                           "--tracking-uri", cell_store]  # fmt: skip
            else:
                command = commands[name]
            times[name].append(measured(command))
    median = {n: statistics.median(t for t, _ in v) for n, v in times.items()}
    memory = {n: max(m for _, m in v) for n, v in times.items()}
    print(f"{args.repeats} repeats, interleaved; median wall (s), peak memory (MB)")
    for name in names:
        print(f"  {name:14} {median[name]:6.2f} s {memory[name]:7.0f} MB")
    torch_import = median["import torch"]
    print(f"list - import torch: {median['list methods'] - torch_import:+.2f} s (target <= 0.5)")
    print(f"show - import torch: {median['show maml'] - torch_import:+.2f} s (target <= 0.5)")
    print(f"cell - import torch: {median['cell'] - torch_import:+.2f} s (target <= 1)")
    if args.sweep:
        for mode in args.sweep_modes.split(","):
            sweep_store = f"sqlite:///{work / f'sweep-{mode}' / 'mlflow.db'}"
            began = time.perf_counter()
            subprocess.run([*cli, "sweep", "--benchmark", "sinusoid-5shot", "--methods",
                            "fomaml", "--seeds", f"0-{args.sweep - 1}", "--workers",
                            str(args.workers), *ONE_ITERATION, "--tracking-uri", sweep_store,
                            *(["--warm"] if mode == "warm" else [])], check=True, env=ENV,
                           cwd=ROOT, capture_output=True)  # fmt: skip
            elapsed = time.perf_counter() - began
            print(f"sweep of {args.sweep} one-iteration cells, {args.workers} workers, {mode}: "
                  f"{elapsed:.0f} s, {elapsed * args.workers / args.sweep:.2f} s per cell "
                  "(target <= 180 s for 100)")  # fmt: skip


if __name__ == "__main__":
    main()
