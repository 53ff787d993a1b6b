"""Cost of run bookkeeping on the main job: this tree vs an earlier commit, interleaved.

Times ``python -m benchmarks run --method sparse_maml`` (the README's main job) from this
working tree and from a git worktree of ``--base`` (default: the commit before heartbeats,
claims and the new leaderboard), alternating A, B, A, B... so that machine load falls on both
alike. Each run gets its own fresh SQLite store. Prints per-run wall time (whole process)
and training time (the run's ``final/train_time_s``), their medians, the ratio ours/base, and
whether every run of both trees ended with the same ``final/test_loss``.

    python bench/main_job_overhead.py --repeats 3
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


#: Folders installed under another import name (pyproject's package-dir).
RENAMED = {"datasets": "mesabench_datasets", "core": "mesabench_core"}


def _import_root(tree: Path, work: Path) -> str:
    """PYTHONPATH for ``tree``: the tree, and its renamed folders as links under their
    import names, ahead of the installed (editable) ones, which point at this tree."""
    links = work / f"links-{tree.name}"
    links.mkdir(exist_ok=True)
    for folder, name in RENAMED.items():
        if (tree / folder).is_dir() and not (links / name).exists():
            (links / name).symlink_to(tree / folder, target_is_directory=True)
    return os.pathsep.join([str(links), str(tree)])


def _run_once(tree: Path, work: Path, extra: list[str]) -> tuple[float, float, float]:
    store = work / f"store-{time.monotonic_ns()}" / "mlflow.db"
    env = {**os.environ, "PYTHONPATH": _import_root(tree, work),
           "MLFLOW_DISABLE_TELEMETRY": "true"}  # fmt: skip
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "run", "--method", "sparse_maml", *extra,
         "--tracking-uri", f"sqlite:///{store}"],
        cwd=tree, env=env, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"run failed in {tree}: {done.stderr[-800:]}")
    with sqlite3.connect(store) as db:
        values = dict(db.execute("SELECT key, value FROM latest_metrics").fetchall())
    return wall, float(values["final/train_time_s"]), float(values["final/test_loss"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="a658567", help="the commit to compare against")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", dest="extra", action="append", default=[], metavar="K=V")
    args = parser.parse_args()
    extra = [item for pair in args.extra for item in ("--set", pair)]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = work / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=ROOT,
                       check=True, capture_output=True)  # fmt: skip
        try:
            times: dict[str, list[tuple[float, float, float]]] = {"ours": [], "base": []}
            for i in range(args.repeats):
                for name, tree in (("ours", ROOT), ("base", base)):
                    wall, train, loss = _run_once(tree, work, extra)
                    times[name].append((wall, train, loss))
                    print(f"{name} run {i + 1}: wall {wall:.2f} s, training {train:.2f} s, "
                          f"final/test_loss {loss!r}", flush=True)  # fmt: skip
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT,
                           capture_output=True)  # fmt: skip
    for index, what in ((0, "wall"), (1, "training")):
        ours = statistics.median(t[index] for t in times["ours"])
        theirs = statistics.median(t[index] for t in times["base"])
        print(f"median {what}: ours {ours:.2f} s, base {theirs:.2f} s, "
              f"ratio ours/base {ours / theirs:.3f}")  # fmt: skip
    losses = {t[2] for name in times for t in times[name]}
    print(f"final/test_loss identical in every run of both trees: {len(losses) == 1}")


if __name__ == "__main__":
    main()
