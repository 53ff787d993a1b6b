"""Leaderboard latency and memory on large stores: ours vs MLflow's own ``search_runs``.

Builds synthetic SQLite stores of ``--sizes`` runs (default 1k, 10k, 100k). Every run is a
copy of a real run made at the start (``python -m benchmarks run --method sparse_maml``,
20 iterations): its tags, params and final metrics, with the method (10 names), config,
seed (10 per config) and metric values varied. ``--share`` of the runs (default half)
belong to the timed benchmark (``sinusoid-5shot``), the rest to ``--benchmarks - 1``
others. Rows are written with SQL straight into MLflow's schema (creating 100k runs through
MLflow takes hours).

For each size, each in a fresh process (wall time and peak memory of the whole process):

- ours: ``python -m benchmarks leaderboard --benchmark sinusoid-5shot --format csv``;
- peer: ``mlflow.search_runs([experiment])`` on the same store (what a user would call);
- the same two through a local tracking server (``mlflow server``, loopback, one worker)
  for the sizes in ``--server-sizes``;
- a sweep's start-up check (``store_state`` of a 10-cell sweep, all FINISHED).

The leaderboard through the server must print exactly what it prints from the file, and
(at the smallest size) what the MLflow client path gives. Targets at 100k runs: <= 2 s and
<= 500 MB on SQLite, <= 5 s through the server.

With ``--base COMMIT`` the leaderboard and the sweep check of that commit are timed too, on
the same stores (before/after).

    python bench/leaderboard_speed.py [--sizes 1000,10000,100000] [--server-sizes 1000,10000]
        [--base COMMIT]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARK = "sinusoid-5shot"
ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONPATH": str(ROOT),
       "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # fmt: skip


def measured(command: list[str], tree: Path = ROOT) -> tuple[float, float, str]:
    """Wall seconds and peak resident MB of ``command`` run on ``tree``'s code, and its
    output."""
    env = {**ENV, "PYTHONPATH": str(tree)}
    began = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tree
    )  # the tree first on sys.path (python -m puts the working directory there)
    output = process.stdout.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - began
    if status != 0:
        raise RuntimeError(f"{' '.join(command[:6])} failed:\n{output[-2000:]}")
    return wall, usage.ru_maxrss / 1024, output


def template(work: Path) -> Path:
    db = work / "template" / "mlflow.db"
    if not db.exists():
        subprocess.run(
            [sys.executable, "-m", "benchmarks", "run", "--method", "sparse_maml", "--set",
             "iterations=20", "--tracking-uri", f"sqlite:///{db}"],
            check=True, env=ENV, capture_output=True,
        )  # fmt: skip
    return db


def fill(template_db: Path, db: Path, runs: int, benchmarks: int, share: float) -> None:
    """``runs`` copies of the template's run, ``share`` of them in BENCHMARK's experiment.
    Within each benchmark, run j is method ``j % 10``, seed ``(j // 10) % 10``, config
    ``j // 100`` (ten seeds per configuration)."""
    db.parent.mkdir(parents=True, exist_ok=True)
    filling = db.with_suffix(".filling")  # renamed when complete: a killed fill leaves none
    shutil.copy(template_db, filling)
    connection = sqlite3.connect(filling)
    (run_id, experiment, artifact_root), = connection.execute(
        "SELECT run_uuid, experiment_id, artifact_uri FROM runs"
    ).fetchall()  # fmt: skip
    row = connection.execute("SELECT * FROM runs WHERE run_uuid = ?", (run_id,)).fetchone()
    tags = connection.execute(
        "SELECT key, value FROM tags WHERE run_uuid = ?", (run_id,)
    ).fetchall()
    params = connection.execute(
        "SELECT key, value FROM params WHERE run_uuid = ?", (run_id,)
    ).fetchall()
    metrics = connection.execute(
        "SELECT key, value FROM latest_metrics WHERE run_uuid = ? AND key LIKE 'final/%'",
        (run_id,),
    ).fetchall()
    experiments = [experiment]
    for b in range(1, benchmarks):
        cursor = connection.execute(
            "INSERT INTO experiments (name, artifact_location, lifecycle_stage, creation_time, "
            "last_update_time, workspace) SELECT ?, artifact_location, lifecycle_stage, "
            "creation_time, last_update_time, workspace FROM experiments WHERE experiment_id = ?",
            (f"other-benchmark-{b:02d}", experiment),
        )
        experiments.append(cursor.lastrowid)
    rng = random.Random(0)
    now = int(time.time() * 1000)
    run_rows, tag_rows, param_rows, metric_rows = [], [], [], []
    timed, counts = round(runs * share), dict.fromkeys(experiments, 0)
    for i in range(runs):
        new = uuid.uuid4().hex
        target = experiment if i < timed else experiments[1 + i % (benchmarks - 1)]
        j, counts[target] = counts[target], counts[target] + 1
        method, config, seed = f"method{j % 10}", j // 100, (j // 10) % 10
        run_rows.append((new, f"{method}-s{seed}-{config:06d}", *row[2:11],
                         f"{artifact_root[: -len(run_id)]}{new}", target, row[13]))  # fmt: skip
        changed = {"mesabench.method": method, "mesabench.config_hash": f"cfg-{method}-{config}",
                   "mesabench.seed": str(seed), "mlflow.runName": f"{method}-s{seed}"}  # fmt: skip
        tag_rows += [(k, changed.get(k, v), new) for k, v in tags]
        changed = {"method_name": method, "seed": str(seed), "method.inner_lr": str(config)}
        param_rows += [(k, changed.get(k, v), new) for k, v in params]
        for key, value in metrics:
            noisy = value * (1 + 0.1 * rng.random()) if "loss" in key else value
            metric_rows.append((key, noisy, now, 0, 0, new))
    with connection:
        connection.executemany(f"INSERT INTO runs VALUES ({','.join('?' * 14)})", run_rows)
        connection.executemany("INSERT INTO tags (key, value, run_uuid) VALUES (?,?,?)", tag_rows)
        connection.executemany(
            "INSERT INTO params (key, value, run_uuid) VALUES (?,?,?)", param_rows
        )
        for table in ("latest_metrics", "metrics"):
            connection.executemany(
                f"INSERT INTO {table} (key, value, timestamp, step, is_nan, run_uuid) "
                "VALUES (?,?,?,?,?,?)",
                metric_rows,
            )
    connection.close()
    filling.rename(db)


def ours(uri: str, tree: Path = ROOT) -> tuple[float, float, str]:
    return measured([sys.executable, "-m", "benchmarks", "leaderboard", "--benchmark",
                     BENCHMARK, "--tracking-uri", uri, "--format", "csv"], tree)  # fmt: skip


def peer(uri: str) -> tuple[float, float, str]:
    code = (
        "import sys, mlflow; mlflow.set_tracking_uri(sys.argv[1]); "
        f"e = mlflow.get_experiment_by_name({BENCHMARK!r}).experiment_id; "
        "print(len(mlflow.search_runs([e], max_results=200000)))"
    )
    return measured([sys.executable, "-c", code, uri])


def client_path(uri: str) -> str:
    """The leaderboard through the MLflow client (the slow path), for the equality check."""
    code = (
        "import sys; from mlflow.tracking import MlflowClient; "
        "from benchmarks.store.reader import ClientReader; "
        "from benchmarks.results.leaderboards import leaderboard_from_store; "
        "from benchmarks.results.formats import render; "
        "r = ClientReader(MlflowClient(sys.argv[1])); "
        f"sys.stdout.write(render([leaderboard_from_store(r, {BENCHMARK!r})], 'csv'))"
    )
    return measured([sys.executable, "-c", code, uri])[2]


def sweep_check(uri: str, tree: Path = ROOT) -> float:
    """Seconds a 10-cell sweep's start-up check takes (in its own process, so that this
    one stays small: a child's peak memory counts its parent's at the fork)."""
    code = (
        "import sys, time; from benchmarks.sweeps.in_store import store_state; "
        "from benchmarks.store.tracking import MlflowTracker; t = MlflowTracker(sys.argv[1]); "
        "keys = {(f'method{m}', f'cfg-method{m}-0', s) for m in (0, 1) for s in range(5)}; "
        "b = time.perf_counter(); "
        f"done, _ = store_state(t, {BENCHMARK!r}, keys); e = time.perf_counter() - b; "
        "assert done >= keys, 'the sweep check missed finished cells'; print(e)"
    )
    return float(measured([sys.executable, "-c", code, uri], tree)[2].split()[-1])


def serve(uri: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host",
         "127.0.0.1", "--port", str(port), "--workers", "1", "--artifacts-destination",
         str(Path(uri[len("sqlite:///") :]).parent / "served-artifacts")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(180):
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return process, url
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError("the tracking server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--server-sizes", default="1000,10000")
    parser.add_argument("--benchmarks", type=int, default=20)
    parser.add_argument("--share", type=float, default=0.5,
                        help="fraction of the runs in the timed benchmark")  # fmt: skip
    parser.add_argument("--work", default="/tmp/mesabench-leaderboard-bench")
    parser.add_argument("--base", help="also time this commit's leaderboard (a git worktree)")
    args = parser.parse_args()
    work = Path(args.work)
    template_db = template(work)
    base = None
    if args.base:
        base = work / f"base-{args.base}"
        if not base.exists():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base),
                            args.base], check=True, capture_output=True)  # fmt: skip
    server_sizes = {int(s) for s in args.server_sizes.split(",") if s}
    print(f"{'runs':>7} | {'where':6} | {'ours (s)':>8} | {'ours MB':>7} | {'search_runs (s)':>15} "
          f"| {'peer MB':>7} | ratio | sweep check (s)")  # fmt: skip
    for size in (int(s) for s in args.sizes.split(",")):
        db = work / f"store-{size}-{args.share}" / "mlflow.db"
        if not db.exists():
            began = time.perf_counter()
            # In a child: this process stays small, and a child's peak memory counts its
            # parent's at the fork (the timed commands are children of this process).
            child = multiprocessing.get_context("fork").Process(
                target=fill, args=(template_db, db, size, args.benchmarks, args.share)
            )
            child.start()
            child.join()
            if child.exitcode != 0:
                raise RuntimeError(f"filling {db} failed")
            print(f"(filled {size} runs in {time.perf_counter() - began:.0f} s)")
        uri = f"sqlite:///{db}"
        wall, mb, board = ours(uri)
        peer_wall, peer_mb, _ = peer(uri)
        check = sweep_check(uri)
        print(f"{size:>7} | sqlite | {wall:8.2f} | {mb:7.0f} | {peer_wall:15.2f} | {peer_mb:7.0f} "
              f"| {peer_wall / wall:4.1f}x | {check:.3f}")  # fmt: skip
        if base is not None:
            old_wall, old_mb, _ = ours(uri, base)
            old_check = sweep_check(uri, base)
            print(f"{size:>7} | sqlite | {old_wall:8.2f} | {old_mb:7.0f} | (base {args.base}) "
                  f"{'':>6} | {'':>7} |       | {old_check:.3f}")  # fmt: skip
        if size == min(int(s) for s in args.sizes.split(",")):
            assert client_path(uri) == board, "the direct leaderboard differs from MLflow's"
        if size in server_sizes:
            process, url = serve(uri)
            try:
                wall, mb, through = ours(url)
                peer_wall, peer_mb, _ = peer(url)
                if base is not None:
                    old_wall, old_mb, _ = ours(url, base)
            finally:
                process.terminate()
                process.wait()
            assert through == board, "the leaderboard through the server differs"
            print(f"{size:>7} | server | {wall:8.2f} | {mb:7.0f} | {peer_wall:15.2f} | "
                  f"{peer_mb:7.0f} | {peer_wall / wall:4.1f}x |")  # fmt: skip
            if base is not None:
                print(f"{size:>7} | server | {old_wall:8.2f} | {old_mb:7.0f} | (base "
                      f"{args.base})")  # fmt: skip


if __name__ == "__main__":
    main()
