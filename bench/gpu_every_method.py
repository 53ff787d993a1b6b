"""Every registered method, a few iterations on a device, into a real SQLite store.

The same runs as tests/test_every_method.py (tiny settings, generated image fixtures), on
``--device`` (default cuda) and under the device guard: each line names the run's status,
its final metric, the device and machine it recorded, the seconds it took and the guard's
findings. Exits 1 if any run is not FINISHED with a finite metric on the device asked for.

    python bench/gpu_every_method.py [--device cuda] [--store /tmp/every.db] [--only maml,lsa]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests/

import torch  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

import methods  # noqa: E402, F401  (registers the built-ins)
from benchmarks.cli.main import main as cli  # noqa: E402
from methods.common.device_guard import DeviceGuard  # noqa: E402
from methods.registry import METHODS  # noqa: E402
from tests.helpers import tiny_run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--store", default=None, help="SQLite file (default: a temporary one)")
    parser.add_argument("--only", default=None, help="comma-separated method names")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="every-"))
    store = f"sqlite:///{Path(args.store or work / 'store.db').resolve()}"
    names = sorted(e.name for e in METHODS if e.source == "built-in")
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU"
    print(f"torch {torch.__version__}, {name}; {len(names)} methods; store {store}")
    bad = 0
    for method in names:
        benchmark, settings, metric = tiny_run(method, work / "data")
        began, quiet = time.perf_counter(), io.StringIO()
        with DeviceGuard(args.device) as guard, contextlib.redirect_stdout(quiet):
            try:
                code = cli(["run", "--method", method, "--benchmark", benchmark, *settings,
                            "--tracking-uri", store, "--device", args.device])  # fmt: skip
            except Exception as err:  # noqa: BLE001 - one method's crash is its line, not the end
                code = f"raised {type(err).__name__}: {str(err)[:200]}"
        seconds = time.perf_counter() - began
        client = MlflowClient(store)
        runs = client.search_runs(
            [client.get_experiment_by_name(benchmark).experiment_id],
            f"tags.`mesabench.method` = '{method}'", max_results=1,
            order_by=["attributes.start_time DESC"],
        )  # fmt: skip
        run = runs[0] if runs else None
        status = run.info.status if run else f"{code}"
        value = run.data.metrics.get(metric, float("nan")) if run else float("nan")
        device = run.data.params.get("device", "?") if run else "?"
        ok = status == "FINISHED" and math.isfinite(value) and device == args.device
        bad += not ok
        machine = run.data.tags.get("mesabench.machine", "?") if run else "?"
        error = run.data.tags.get("error", "")[:160] if run and not ok else ""
        print(f"{'ok ' if ok else 'BAD'} {method:18s} {benchmark:22s} {status:8s} "
              f"{metric.split('/')[-1]}={value:.4g} device={device} {seconds:5.1f} s "
              f"guard={len(guard.leaks)} | {machine} {error}")  # fmt: skip
        for leak in guard.leaks:
            print(f"      {leak}")
    print(f"{len(names) - bad} of {len(names)} FINISHED, finite, on {args.device}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
