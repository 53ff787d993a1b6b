"""Sweeps: methods x grid x seeds, each cell a normal run, resumable, on this machine or Ray.

A sweep is a parent MLflow run in the benchmark's experiment; every cell is an ordinary
``python -m benchmarks run --exclusive`` process recorded as its child, so a cell fails
alone, shows up in every leaderboard, and is matched on the next invocation by its resolved
configuration and seed: finished cells are skipped, failed and killed ones run again.

Exactly one run per cell finishes, whatever happens around it: each cell claims itself in
the store before it starts (:mod:`benchmarks.store.claims`), so two sweeps of one grid started
at once, or a Ray task retried while its first attempt's process still runs, leave the
cell to whoever claimed it first: the other attempt waits, then exits 3 ("elsewhere") once
that run FINISHED, or takes the cell over if that run's process died. A
cell's output goes to a file, not a pipe, so a cell whose driver died still finishes and
records its result. At start a sweep closes its own cells that lost their heartbeat. The
local backend is a bounded pool of worker processes; the Ray backend sends the same
commands as Ray tasks.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from benchmarks.planning.config import BadInput, ConfigError, parse_pairs
from benchmarks.running.console import InterruptionsHeld
from benchmarks.running.request import RunRequest
from benchmarks.store.claims import cell_runs
from benchmarks.sweeps.warm_cells import Launcher, run_warm, worker_launcher
from mesabench_datasets.data_root import resolve_data_root

log = logging.getLogger("mesabench")

SWEEP_TAG = "mesabench.sweep"
#: Environment passed on to every cell (where the data is, how to reach the code).
PASSED_ENV = ("PYTHONPATH", "MESABENCH_DATA", "MESABENCH_DISABLE_PLUGINS", "MLFLOW_TRACKING_URI")


#: At most this many seeds in one sweep, each below 2**63 (a generator's seed).
MAX_SEEDS, MAX_SEED = 100_000, 2**63 - 1


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0-4"``, ``"0,2,5"`` or a mix (``"0-2,7"``) as a tuple of seeds."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                low, high = (int(x) for x in part.split("-", 1))
                if high - low >= MAX_SEEDS:  # before a range of 10**12 is made into a list
                    raise ConfigError(f"seeds {part} name more than {MAX_SEEDS:,} seeds")
                seeds += range(low, high + 1)
            elif part:
                seeds.append(int(part))
    except ConfigError:
        raise
    except ValueError:
        raise ConfigError(f"seeds must look like 0-4 or 0,2,5 (got {text!r})") from None
    if not seeds or min(seeds) < 0:
        raise ConfigError(f"seeds must name at least one seed >= 0 (got {text!r})")
    if max(seeds) > MAX_SEED:
        raise ConfigError(f"seeds must be at most {MAX_SEED} (got {max(seeds)})")
    return tuple(dict.fromkeys(seeds))


@dataclass(frozen=True)
class Cell:
    """One run of the sweep."""

    method: str
    seed: int
    overrides: tuple[tuple[str, str], ...]

    def label(self) -> str:
        settings = " ".join(f"{k}={v}" for k, v in self.overrides)
        return f"{self.method} seed {self.seed}" + (f" ({settings})" if settings else "")


@dataclass(frozen=True)
class SweepSpec:
    benchmark: str
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    grid: tuple[tuple[str, tuple[str, ...]], ...] = ()
    settings: tuple[tuple[str, str], ...] = ()  # fixed --set for every cell
    #: Settings of one method only: (method, ((key, value), ...)), after ``settings``.
    method_settings: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    preset: str | None = None
    device: str = "cpu"
    #: Resources a cell asks Ray for.
    cpus_per_cell: float = 1.0
    gpus_per_cell: float = 0.0
    #: Folder of the real datasets, given to every cell (and recorded by each); not part of
    #: the sweep's identity. None: MESABENCH_DATA, else the per-user cache.
    data_root: str | None = None
    #: Where the spec came from, for error messages: "sweep file PATH" or the command line.
    origin: str = "sweep command line"
    #: Every cell's ``RunPlan.tuning`` (a ``tune`` trial or selected configuration), or None.
    tuning: str | None = None

    def cells(self) -> list[Cell]:
        keys = [k for k, _ in self.grid]
        combos = itertools.product(*(values for _, values in self.grid)) if keys else [()]
        cells = []
        own = dict(self.method_settings)
        for method, combo in itertools.product(self.methods, list(combos)):
            overrides = (*self.settings, *own.get(method, ()), *zip(keys, combo, strict=True))
            cells += [Cell(method, seed, tuple(overrides)) for seed in self.seeds]
        return cells

    def sweep_id(self) -> str:
        """Names the sweep: the same spec gives the same id, so a re-run finds its parent."""
        body = json.dumps(
            {
                "benchmark": self.benchmark,
                "methods": self.methods,
                "seeds": self.seeds,
                "grid": self.grid,
                "settings": self.settings,
                "preset": self.preset,
                # Only where given, so that every earlier sweep keeps its id.
                **({"method_settings": self.method_settings} if self.method_settings else {}),
                **({"tuning": self.tuning} if self.tuning else {}),
            },
            sort_keys=True,
        )
        return hashlib.sha256(body.encode()).hexdigest()[:12]


def spec_from_args(
    benchmark: str,
    methods: str,
    seeds: str,
    grid: Sequence[str] = (),
    settings: Sequence[str] = (),
    preset: str | None = None,
    device: str = "cpu",
    data_root: str | None = None,
) -> SweepSpec:
    grid_items = []
    for item in grid:
        key, values = next(iter(parse_pairs([item], "--grid").items()))
        if key in dict(grid_items):
            raise ConfigError(f"--grid {key} is given twice; give its values once: "
                              f"--grid {key}=V1,V2,...")  # fmt: skip
        options = tuple(v.strip() for v in values.split(",") if v.strip())
        if not options:
            raise ConfigError(f"--grid {key} needs at least one value")
        grid_items.append((key, options))
    names = tuple(m.strip() for m in methods.split(",") if m.strip())
    if not names:
        raise ConfigError("--methods needs at least one method name")
    # --set METHOD:KEY=VALUE sets KEY for that method's cells only.
    common, own = {}, {}
    for key, value in parse_pairs(settings, "--set").items():
        method, colon, name = key.partition(":")
        if not colon:
            common[key] = value
        elif method not in names:
            raise ConfigError(f"--set {key}: {method!r} is none of the sweep's methods "
                              f"({', '.join(names)})")  # fmt: skip
        else:
            own.setdefault(method, {})[name] = value
    return SweepSpec(
        benchmark=benchmark,
        methods=names,
        seeds=parse_seeds(seeds),
        grid=tuple(grid_items),
        settings=tuple(common.items()),
        method_settings=tuple((m, tuple(own[m].items())) for m in names if m in own),
        preset=preset,
        device=device,
        data_root=resolve_data_root(data_root),
    )


class _NoDuplicates(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys without a word; a sweep file may not."""


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1})")
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_NoDuplicates.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)

Scalar = StrictStr | StrictBool | StrictInt | StrictFloat


class SweepFile(BaseModel):
    """The sweep file format, every key (docs/running.md, "Sweep files")."""

    model_config = ConfigDict(extra="forbid", strict=True)

    #: The benchmark every cell runs on.
    benchmark: StrictStr
    #: One method or a list of them.
    methods: StrictStr | list[StrictStr]
    #: ``0-4``, ``0,2,5``, one seed, or a list of seeds.
    seeds: StrictStr | NonNegativeInt | list[NonNegativeInt]
    #: Setting -> the list of its values; every combination is a cell.
    grid: dict[StrictStr, list[Scalar]] = Field(default_factory=dict)
    #: Setting -> value for every cell; a method's name -> its own settings.
    set: dict[StrictStr, Scalar | dict[StrictStr, Scalar]] = Field(default_factory=dict)
    preset: StrictStr | None = None
    device: StrictStr = "cpu"
    #: What each cell asks a Ray cluster for.
    cpus_per_cell: PositiveFloat = 1.0
    gpus_per_cell: NonNegativeFloat = 0.0
    #: Folder of the real datasets (a --data-root given on the command line wins).
    data_root: StrictStr | None = None


#: What each key of a sweep file takes, in words (for the one-line refusals).
SWEEP_KEYS = {
    "benchmark": "a benchmark's name", "methods": "a method's name or a list of names",
    "seeds": "0-4, 0,2,5, one seed or a list of seeds",
    "grid": "setting: [value, ...] (every combination is a cell)",
    "set": "setting: value for every cell, or method: {setting: value} for one method",
    "preset": "a preset's name", "device": "cpu, cuda or cuda:N",
    "cpus_per_cell": "a number > 0", "gpus_per_cell": "a number >= 0",
    "data_root": "a folder with the real datasets",
}  # fmt: skip
_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list"}


def _first_problem(err: ValidationError) -> str:
    """Pydantic's complaint as one line: where, what is wrong, what was given, and what
    the key takes."""
    problems = err.errors()
    unknown = sorted(str(p["loc"][0]) for p in problems if p["type"] == "extra_forbidden")
    if unknown:
        return f"unknown keys {unknown}; allowed: {sorted(SweepFile.model_fields)}"
    problem = problems[0]
    # A union's alternatives each add their type to the location: not the user's words.
    def tag(part) -> bool:
        return isinstance(part, str) and (part.split("[")[0] in _TYPE_TAGS or "-" in part)

    parts = [p for p in problem["loc"] if not tag(p)]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)[1:]
    key = str(parts[0])
    if problem["type"] == "missing":
        return f"{where} is required (a sweep file needs benchmark, methods and seeds)"
    return (f"{where}: {problem['msg'].lower()} (got {problem.get('input')!r}); {key} takes "
            f"{SWEEP_KEYS.get(key, 'another value')}")  # fmt: skip


def _text(value: object) -> str:
    """A setting's value as text, as sweeps have always recorded it (``True`` for YAML's
    true: the parser reads both, and a sweep's id must not change)."""
    return str(value)


def spec_from_file(path: Path, data_root: str | None = None) -> SweepSpec:
    """A YAML sweep file, checked against :class:`SweepFile` (types, ranges, unknown and
    duplicate keys); ``data_root`` given here wins over the file's."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read sweep file {path}: {err.strerror}") from None
    try:
        body = yaml.load(raw.decode("utf-8"), Loader=_NoDuplicates)  # noqa: S506 (a safe loader)
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not YAML: {' '.join(str(err).split())[:200]}") from None
    if not isinstance(body, dict):
        raise ConfigError(f"{path}: a sweep file is a mapping of keys (benchmark, methods, "
                          "seeds, ...)")  # fmt: skip
    try:
        sweep = SweepFile.model_validate(body)
    except ValidationError as err:
        raise ConfigError(f"{path}: {_first_problem(err)}") from None
    methods = (sweep.methods,) if isinstance(sweep.methods, str) else tuple(sweep.methods)
    if not methods:
        raise ConfigError(f"{path}: methods must name at least one method")
    for key, values in sweep.grid.items():
        if not values:
            raise ConfigError(f"{path}: grid.{key} needs at least one value")
    seeds = sweep.seeds
    text = ",".join(map(str, seeds)) if isinstance(seeds, list) else str(seeds)
    common = {k: v for k, v in sweep.set.items() if not isinstance(v, dict)}
    own = {k: v for k, v in sweep.set.items() if isinstance(v, dict)}
    strangers = sorted(set(own) - set(methods))
    if strangers:
        raise ConfigError(f"{path}: set.{strangers[0]} holds settings, but "
                          f"{strangers[0]!r} is none of the sweep's methods "
                          f"({', '.join(methods)})")  # fmt: skip
    return SweepSpec(
        origin=f"sweep file {path}",
        benchmark=sweep.benchmark,
        methods=methods,
        seeds=parse_seeds(text),
        grid=tuple((k, tuple(_text(v) for v in vs)) for k, vs in sweep.grid.items()),
        settings=tuple((k, _text(v)) for k, v in common.items()),
        method_settings=tuple((m, tuple((k, _text(v)) for k, v in own[m].items()))
                              for m in methods if m in own),  # fmt: skip
        preset=sweep.preset,
        device=sweep.device,
        cpus_per_cell=sweep.cpus_per_cell,
        gpus_per_cell=sweep.gpus_per_cell,
        data_root=resolve_data_root(data_root or sweep.data_root),
    )


# -- planning and matching -------------------------------------------------------------
@dataclass
class SweepResult:
    done: list[Cell] = field(default_factory=list)
    failed: list[tuple[Cell, str]] = field(default_factory=list)
    killed: list[Cell] = field(default_factory=list)  # stopped by an interrupted sweep
    skipped: list[Cell] = field(default_factory=list)
    #: Cells another process held or finished while this sweep ran (not run twice).
    elsewhere: list[Cell] = field(default_factory=list)
    #: Runs of this sweep's cells found without a heartbeat at start, closed as FAILED.
    lost: int = 0
    interrupted: bool = False

    @property
    def exit_code(self) -> int:
        # A cell killed while the sweep went on (a SIGTERM to that cell alone) left the
        # grid unfinished as surely as a failed one: not a success.
        return 130 if self.interrupted else (1 if self.failed or self.killed else 0)


def plan_cells(spec: SweepSpec) -> dict[Cell, str]:
    """Validate every cell before anything runs; returns each cell's config hash.

    A configuration is planned once for all its seeds (the hash leaves the seed out, and
    the seeds were checked when parsed): a 10,000-cell sweep plans its grid points only."""
    from benchmarks.planning.plan import plan_run

    hashes, by_setting = {}, {}
    for cell in spec.cells():
        setting = (cell.method, cell.overrides)
        if setting not in by_setting:
            try:
                plan = plan_run(
                    cell.method, spec.benchmark, cell.seed, dict(cell.overrides), spec.device,
                    spec.preset, data_root=spec.data_root, tuning=spec.tuning,
                )  # fmt: skip
            except BadInput as err:
                layer = _layer_of(spec, cell.method, str(err))
                if len(spec.methods) > 1:  # which of them lacks the setting
                    layer = f"{layer}, for method {cell.method}"
                raise ConfigError(f"{spec.origin}, {layer}: {err}") from None
            by_setting[setting] = plan.config_hash()
        hashes[cell] = by_setting[setting]
    return hashes


def _layer_of(spec: SweepSpec, method: str, message: str) -> str:
    """Which part of the sweep a refused setting came from (the message quotes the key)."""
    def said(pairs) -> bool:
        return any(f"'{key}'" in message or f" {key} " in message for key, _ in pairs)

    if said(spec.grid):
        return "grid"
    if said(dict(spec.method_settings).get(method, ())):
        return f"set.{method}"
    if said(spec.settings):
        return "set"
    return "methods, benchmark or preset"


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


def _tail(text: str) -> str:
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


def run_sweep(
    spec: SweepSpec,
    tracker,
    backend: str = "local",
    workers: int = 1,
    address: str | None = None,
    progress: Callable[[str], None] | None = None,
    warm: bool = False,
) -> SweepResult:
    """Run the cells of ``spec`` that have not finished yet; returns the summary. ``warm``
    forks cells from a process that imported everything once (one per Ray worker)."""
    return run_sweeps([spec], tracker, backend, workers, address, progress, warm)[0]


@dataclass
class _Running:
    """One sweep's bookkeeping while its cells run: its parent run, heartbeat and result."""

    spec: SweepSpec
    hashes: dict[Cell, str]
    parent: str
    heartbeat: Any
    result: SweepResult
    todo: list[Cell]


def run_sweeps(
    specs: Sequence[SweepSpec],
    tracker,
    backend: str = "local",
    workers: int = 1,
    address: str | None = None,
    progress: Callable[[str], None] | None = None,
    warm: bool = False,
    pool: LocalBackend | None = None,
) -> list[SweepResult]:
    """Several sweeps through one pool of workers (and one warm launcher): their cells run
    side by side, each recorded under its own sweep's parent run, so a table of many small
    sweeps keeps every worker busy. Returns one summary per sweep, in order. ``pool``: a
    local pool the caller keeps across calls (and closes), in place of ``workers``/``warm``."""
    planned = [plan_cells(spec) for spec in specs]  # all validation first: bad input runs nothing
    cpus = os.cpu_count() or 1
    if backend == "ray":
        per_cell = {(spec.cpus_per_cell, spec.gpus_per_cell) for spec in specs}
        if len(per_cell) > 1:
            raise ConfigError("sweeps run together on Ray must ask the same cpus/gpus per cell")
        cell_cpus, cell_gpus = per_cell.pop()
        runner: Any = RayBackend(address, cell_cpus, cell_gpus, workers, warm)
        runner.connect()  # a cell no node can place is refused here, before anything runs
        env = cell_env(max(1, int(cell_cpus)), remote=True)
    else:
        runner = pool or LocalBackend(workers, warm)
        env = cell_env(max(1, cpus // runner.workers))
    say = progress or (lambda line: log.info(line))
    running: list[_Running] = []
    lock = threading.Lock()

    def report(key: tuple[int, Cell], code: int, output: str) -> None:
        index, cell = key
        with lock:
            _record_cell(running[index], tracker, cell, code, output, say)

    # Whatever stops the sweeps early (Ctrl-C, a lost Ray head, a store error while the
    # later parents open), every parent already opened is closed KILLED, with the cells
    # that did finish counted: resumable, never left RUNNING.
    failure: BaseException | None = None
    try:
        for spec, hashes in zip(specs, planned, strict=True):
            # Held while the parent is written: acted on once it is in ``running``, where an
            # interruption closes it KILLED (before, it would stay RUNNING, closed by none).
            held = InterruptionsHeld()
            try:
                running.append(_start_sweep(spec, hashes, tracker, say))
            finally:
                held.release()
        jobs = [
            ((index, cell), cell_request(sweep.spec, cell, tracker.uri, sweep.parent))
            for index, sweep in enumerate(running)
            for cell in sweep.todo
        ]
        runner.run(jobs, env, report)
    except BaseException as error:
        # Once every sweep has started, Ctrl-C ends them with their summaries; anything
        # else, or Ctrl-C before (no summary for a sweep that never started), goes on up.
        all_started = len(running) == len(specs)
        failure = None if isinstance(error, KeyboardInterrupt) and all_started else error
        for sweep in running:
            sweep.result.interrupted = True
    finally:
        for sweep in running:
            sweep.heartbeat.stop()
        if pool is None and isinstance(runner, LocalBackend):
            runner.close()
    for sweep in running:
        try:
            _finish_sweep(sweep, tracker)
        except Exception:
            if failure is None:
                raise
            # The store itself may be what failed; the stale heartbeat flags the parent.
            log.warning("sweep %s: its parent run could not be closed", sweep.spec.sweep_id())
    if failure is not None:
        raise failure
    return [sweep.result for sweep in running]


def _start_sweep(spec: SweepSpec, hashes: dict[Cell, str], tracker, say) -> _Running:
    """Find what the store already holds, open (or re-open) the parent run."""
    from benchmarks.store.lifecycle import Heartbeat, process_tags
    from benchmarks.store.tracking import write_tags

    result = SweepResult()
    keys = {(cell.method, hashes[cell], cell.seed) for cell in spec.cells()}
    finished, result.lost = store_state(tracker, spec.benchmark, keys)
    todo = []
    for cell in spec.cells():
        if (cell.method, hashes[cell], cell.seed) in finished:
            result.skipped.append(cell)
        else:
            todo.append(cell)
    parent = parent_run(tracker, spec)
    write_tags(tracker.client, parent, process_tags())  # this driver runs it now (paused != dead)
    heartbeat = Heartbeat(lambda tags: write_tags(tracker.client, parent, tags)).start()
    lost = f", {result.lost} lost run(s) closed as FAILED" if result.lost else ""
    say(f"sweep {spec.sweep_id()}: {len(todo)} to run, {len(result.skipped)} already "
        f"finished{lost}")  # fmt: skip
    return _Running(spec, hashes, parent, heartbeat, result, todo)


def _record_cell(sweep: _Running, tracker, cell: Cell, code: int, output: str, say) -> None:
    """File one finished cell under its outcome (a cell's exit code says which)."""
    result = sweep.result
    if code == 0:
        result.done.append(cell)
        say(f"done    {cell.label()}")
    elif code == 3:  # --exclusive: another process finished it
        result.elsewhere.append(cell)
        say(f"elsewhere {cell.label()}: {_tail(output)}")
    elif code in (130, -15, -2):  # the cell's own exit code for KILLED, or a signal
        result.killed.append(cell)
        say(f"killed  {cell.label()}")
    else:
        if code < 0:  # died by a signal (SIGKILL, out of memory): close its run
            benchmark, config_hash = sweep.spec.benchmark, sweep.hashes[cell]
            close_dead_cell(tracker, benchmark, cell, config_hash, sweep.parent, code)
        reason = f"killed by signal {-code}" if code < 0 else _tail(output)
        result.failed.append((cell, reason))
        say(f"FAILED  {cell.label()}: {reason}")


def _finish_sweep(sweep: _Running, tracker) -> None:
    """Close the parent run with the sweep's summary and counts."""
    from mlflow.entities import Metric

    result, spec, parent = sweep.result, sweep.spec, sweep.parent
    status = "KILLED" if result.interrupted else ("FAILED" if result.failed else "FINISHED")
    # One summary per invocation (a re-run of the sweep reuses its parent): none overwritten.
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    best = best_per_method(tracker, spec.benchmark, parent, [k for k, _ in spec.grid])
    summary = _summary_text(result, best)
    tracker.client.log_text(parent, summary, f"summaries/{stamp}-{os.getpid()}.txt")
    counts = {"done": result.done, "failed": result.failed, "skipped": result.skipped,
              "elsewhere": result.elsewhere, "killed": result.killed}  # fmt: skip
    now = int(time.time() * 1000)
    tracker.client.log_batch(
        parent, metrics=[Metric(f"sweep/{k}", float(len(v)), now, 0) for k, v in counts.items()]
    )
    tracker.client.set_terminated(parent, status=status)


def summary_line(result: SweepResult) -> str:
    line = f"done {len(result.done)}, failed {len(result.failed)}, skipped {len(result.skipped)}"
    if result.elsewhere:
        line += f", elsewhere {len(result.elsewhere)}"
    if result.lost:
        line += f", lost closed {result.lost}"
    if result.killed:
        line += f", killed {len(result.killed)}"
    return line + (" (interrupted)" if result.interrupted else "")


def _summary_text(result: SweepResult, best: list[str] | None = None) -> str:
    lines = [summary_line(result)]
    lines += [f"FAILED {cell.label()}: {reason}" for cell, reason in result.failed]
    return "\n".join(lines + (best or [])) + "\n"


def best_per_method(tracker, benchmark: str, parent: str, grid_keys=()) -> list[str]:
    """One line per method: its best configuration among this sweep's finished cells, by
    the benchmark's ranked metric (mean over seeds, n, Student-t 95% CI), with its values
    of the grid's keys."""
    from benchmarks.results.leaderboards import leaderboard_from_store
    from benchmarks.store.reader import open_reader

    # Only this sweep's runs are read (through the tag index), not the whole benchmark.
    board = leaderboard_from_store(
        open_reader(tracker.uri, tracker.client), benchmark,
        where=("mlflow.parentRunId", {parent}), references=False,
    )  # fmt: skip
    lines, seen = [f"best per method by {board.metric} (rows ranked best first):"], set()
    for row in board.rows:
        if row.method in seen:
            continue
        seen.add(row.method)
        stats = row.stats(board.metric)
        ci = "" if stats.ci_low is None else f", 95% CI [{stats.ci_low:.4g}, {stats.ci_high:.4g}]"
        params = row.runs[0].params
        setting = ", ".join(
            f"{key}={value}" for key in grid_keys for name, value in params.items()
            if name == key or name.endswith(f".{key}")
        )  # fmt: skip
        lines.append(f"  {row.method}: {stats.mean:.6g} (n={stats.n}{ci}) {setting}".rstrip())
    return lines if seen else []
