"""Where a sweep's cells run: a bounded pool of processes on this machine (cold, or forked
warm from one launcher: :mod:`benchmarks.sweeps.warm_cells`), or Ray tasks on a cluster.
Every backend runs the same :class:`~benchmarks.running.request.RunRequest` per cell and
reports its exit code and output."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from benchmarks.planning.config import ConfigError
from benchmarks.running.request import RunRequest
from benchmarks.sweeps.spec import Cell, SweepSpec
from benchmarks.sweeps.warm_cells import Launcher, run_warm, worker_launcher

log = logging.getLogger("mesabench")

#: Environment passed on to every cell (where the data is, how to reach the code).
PASSED_ENV = ("PYTHONPATH", "MESABENCH_DATA", "MESABENCH_DISABLE_PLUGINS", "MLFLOW_TRACKING_URI")


def cell_request(spec: SweepSpec, cell: Cell, uri: str, parent: str) -> RunRequest:
    """What one cell asks the run service for: an exclusive run under the sweep's parent."""
    return RunRequest(
        method=cell.method, benchmark=spec.benchmark, seed=cell.seed,
        settings=dict(cell.overrides), preset=spec.preset, device=spec.device,
        tracking_uri=uri, data_root=spec.data_root, parent=parent, exclusive=True,
        tuning=spec.tuning,
    )  # fmt: skip


def cell_command(request: RunRequest) -> list[str]:
    """A cold cell's process: the request as ``python -m benchmarks`` arguments."""
    return [sys.executable, "-m", "benchmarks", *request.command()]


def cell_env(threads: int, remote: bool = False) -> dict[str, str]:
    """The environment of a cell: ours on this machine; on a cluster node only what says
    where data and code are (the node keeps its own paths)."""
    env = dict(os.environ)
    if remote:
        env = {k: v for k, v in env.items() if k in PASSED_ENV}
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    # Workers share the cores instead of fighting; on this machine a user's own
    # OMP_NUM_THREADS caps it (a one-worker sweep beside other jobs would oversubscribe).
    # A cluster node's cell keeps the cpus it was given: our setting says nothing of it.
    own = os.environ.get("OMP_NUM_THREADS", "")
    if not remote and own.isdigit() and int(own) > 0:
        threads = min(threads, int(own))
    env["OMP_NUM_THREADS"] = str(threads)
    env["COLUMNS"] = "250"  # a failure's one-line reason stays one line in the summary
    return env


def run_to_file(argv: list[str], env: dict[str, str], started=None) -> tuple[int, str]:
    """Run a cell with its output in a temporary file, not a pipe: if whoever waits for it
    dies, the cell still finishes (a broken pipe would kill it before it saves)."""
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        if started is not None:
            started(process)
        code = process.wait()
        out.seek(0)
        return code, out.read()


def output_tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


# -- backends ---------------------------------------------------------------------------
Report = Callable[[Cell, int, str], None]


class LocalBackend:
    """A bounded pool of worker processes on this machine; with ``warm``, each cell is a
    fork of one launcher that imported everything once (:mod:`benchmarks.sweeps.warm_cells`)."""

    def __init__(self, workers: int, warm: bool = False):
        self.workers = workers
        self.warm = warm
        self._launcher = None
        self._processes: set = set()
        self._lock = threading.Lock()
        self._stopping = False

    def _run_one(self, request: RunRequest, env: dict[str, str], cell: Cell,
                 report: Report) -> None:  # fmt: skip
        holder: list = []

        def started(process: subprocess.Popen) -> None:
            holder.append(process)
            with self._lock:
                self._processes.add(process)
                if self._stopping:
                    process.terminate()

        with self._lock:
            if self._stopping:
                return
        if self.warm:
            code, output = run_warm(self._launcher, request.to_dict(), env, started)
        else:
            code, output = run_to_file(cell_command(request), env, started)
        with self._lock:
            self._processes.discard(holder[0])
        report(cell, code, output)

    def run(self, jobs: list[tuple[Cell, RunRequest]], env: dict[str, str],
            report: Report) -> None:  # fmt: skip
        # The launcher outlives one call: a tune's trials are many small sweeps in a row, and
        # starting it (the imports every cell would pay) is most of a small cell's cost.
        if self.warm and jobs and self._launcher is None:
            self._launcher = Launcher(env)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            futures = [
                pool.submit(self._run_one, request, env, cell, report) for cell, request in jobs
            ]
            try:
                for future in futures:
                    future.result()
            except KeyboardInterrupt:
                self.stop()
                raise

    def close(self) -> None:
        """No more cells: the warm launcher, if any, exits once its cells have finished."""
        if self._launcher is not None:
            self._launcher.close()
            self._launcher = None

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stop(self) -> None:
        """Interrupt every running cell: each marks its own run KILLED."""
        with self._lock:
            self._stopping = True
            for process in self._processes:
                process.terminate()
        for process in list(self._processes):
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()


def _ray_cell(request: dict, env: dict[str, str], warm: bool = False) -> tuple[int, str]:
    """What a Ray task runs: the cell's command, on whichever node Ray placed it (with that
    node's Python, which must have mesabench installed); with ``warm``, forked from the Ray
    worker's own launcher, which the worker keeps from task to task."""
    env = {**os.environ, **env}
    if warm:
        return run_warm(worker_launcher(env), request, env)
    return run_to_file(cell_command(RunRequest.from_dict(request)), env)


def check_ray_resources(available: dict[str, float], cpus: float, gpus: float) -> None:
    """Refuse a cell that no node of the cluster could ever place (Ray would wait forever)."""
    for name, wanted in (("CPU", cpus), ("GPU", gpus)):
        have = float(available.get(name, 0.0))
        if wanted > have:
            key = f"{name.lower()}s_per_cell"
            raise ConfigError(
                f"{key} is {wanted:g} but the Ray cluster has {have:g} {name}s in all; "
                f"lower {key} or add nodes"
            )


class RayBackend:
    """The same commands as Ray tasks, with the spec's CPU / GPU request per cell; with
    ``warm``, each Ray worker forks its cells from a launcher of its own."""

    def __init__(self, address: str | None, cpus: float, gpus: float, local_cpus: int,
                 warm: bool = False):  # fmt: skip
        self.address, self.cpus, self.gpus, self.local_cpus = address, cpus, gpus, local_cpus
        self.warm = warm
        self._started_here = False

    def connect(self) -> None:
        """Join (or start) Ray and refuse cells it could never place: before any is recorded."""
        import ray

        self._started_here = not ray.is_initialized()
        if self._started_here:
            if self.address:
                ray.init(address=self.address, log_to_driver=False)
            else:  # a local instance of its own, sized like the local pool: "local", or
                # Ray joins any cluster left running on this machine (and refuses num_cpus)
                # Ray runs its workers at niceness 15, and a cell inherits its worker's: beside
                # any other work on this machine, the sweep's cells (the work asked for)
                # would get a few per cent of a core. Ours run as the local pool's do.
                ray.init(address="local", num_cpus=self.local_cpus, include_dashboard=False,
                         log_to_driver=False, _system_config={"worker_niceness": 0})  # fmt: skip
        try:
            check_ray_resources(ray.cluster_resources(), self.cpus, self.gpus)
        except ConfigError:
            self.close()
            raise

    def close(self) -> None:
        import ray

        if self._started_here:
            ray.shutdown()

    def run(self, jobs: list[tuple[Cell, RunRequest]], env: dict[str, str],
            report: Report) -> None:  # fmt: skip
        import ray

        try:
            remote = ray.remote(num_cpus=self.cpus, num_gpus=self.gpus)(_ray_cell)
            pending = {
                remote.remote(request.to_dict(), env, self.warm): cell for cell, request in jobs
            }
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    code, output = ray.get(ref)
                    report(pending.pop(ref), code, output)
        finally:
            self.close()
