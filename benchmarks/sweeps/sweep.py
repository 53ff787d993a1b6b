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
records its result. At start a sweep closes its own cells that lost their heartbeat.

This module runs sweeps (start, hand the cells to a backend, record each outcome, close
the parent with its summary); what a sweep is lives in :mod:`~benchmarks.sweeps.spec`,
what the store holds of it in :mod:`~benchmarks.sweeps.in_store`, and where its cells run
in :mod:`~benchmarks.sweeps.backends`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.planning.config import ConfigError
from benchmarks.running.console import InterruptionsHeld
from benchmarks.sweeps.backends import LocalBackend, RayBackend, cell_env, cell_request, output_tail
from benchmarks.sweeps.in_store import close_dead_cell, parent_run, store_state
from benchmarks.sweeps.spec import Cell, SweepSpec, plan_cells

log = logging.getLogger("mesabench")

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
    """One sweep's bookkeeping while its cells run: its parent run and result."""

    spec: SweepSpec
    hashes: dict[Cell, str]
    parent: str
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

    from benchmarks.store.lifecycle import Heartbeat
    from benchmarks.store.tracking import write_tags

    # Whatever stops the sweeps early (Ctrl-C, a lost Ray head, a store error while the
    # later parents open), every parent already opened is closed KILLED, with the cells
    # that did finish counted: resumable, never left RUNNING.
    failure: BaseException | None = None
    # One heartbeat thread beats for every open parent, one write after another: a thread
    # per parent (a table of 34 lines) held more of the client's pooled connections than
    # it has while SQLite serialised their writes, and beats were lost to pool timeouts.
    # It beats from before the first parent opens; each joins it once open.
    def beat(tags: dict[str, str]) -> None:
        failed = []
        for sweep in list(running):
            try:  # one parent's failed write does not cost the others their beat
                write_tags(tracker.client, sweep.parent, tags)
            except Exception as err:
                failed.append(err)
        if failed:
            raise failed[0]  # said once (Heartbeat logs it); the next beat tries again

    heartbeat = Heartbeat(beat)
    try:
        heartbeat.start()
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
        heartbeat.stop()
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
    from benchmarks.store.lifecycle import heartbeat_tags, process_tags
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
    # This driver runs it now (paused != dead), beating from now on (run_sweeps' heartbeat).
    write_tags(tracker.client, parent, {**process_tags(), **heartbeat_tags()})
    lost = f", {result.lost} lost run(s) closed as FAILED" if result.lost else ""
    say(f"sweep {spec.sweep_id()}: {len(todo)} to run, {len(result.skipped)} already "
        f"finished{lost}")  # fmt: skip
    return _Running(spec, hashes, parent, result, todo)


def _record_cell(sweep: _Running, tracker, cell: Cell, code: int, output: str, say) -> None:
    """File one finished cell under its outcome (a cell's exit code says which)."""
    result = sweep.result
    if code == 0:
        result.done.append(cell)
        say(f"done    {cell.label()}")
    elif code == 3:  # --exclusive: another process finished it
        result.elsewhere.append(cell)
        say(f"elsewhere {cell.label()}: {output_tail(output)}")
    elif code in (130, -15, -2):  # the cell's own exit code for KILLED, or a signal
        result.killed.append(cell)
        say(f"killed  {cell.label()}")
    else:
        if code < 0:  # died by a signal (SIGKILL, out of memory): close its run
            benchmark, config_hash = sweep.spec.benchmark, sweep.hashes[cell]
            close_dead_cell(tracker, benchmark, cell, config_hash, sweep.parent, code)
        reason = f"killed by signal {-code}" if code < 0 else output_tail(output)
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
