"""Warm cells: one process pays the imports once, and every cell is a fork of it.

A cell's command (``python -m benchmarks run ...``) spends most of a short cell importing
torch, MLflow and the suite (about 5 s on 2 cores). With ``sweep --warm`` a launcher
process imports them once and forks a child per cell, which hands the cell's request (a
:class:`~benchmarks.running.service.RunRequest` as plain data) to the run service in-process
and exits with the exit code the command would have had. Each cell is still its
own process: a crash, an out-of-memory kill or a SIGKILL ends that cell only, and its
state starts from the launcher's, which never trains, never starts a thread and never
touches a GPU (CUDA cannot cross a fork).

The launcher reads one JSON message per line on stdin (``request``: the cell's run request,
``env``, ``out``: a file for the cell's output) and answers ``{"id", "pid"}`` when the cell
starts and ``{"id", "code"}`` when it ends (a negative code: killed by that signal, as
``subprocess`` says it). When stdin closes (the sweep ended or died) it waits for its cells
to finish, then exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

#: Imported by the launcher before it forks: what every cell needs, including what a run
#: imports lazily (torch.func pulls in torch._dynamo; figures need matplotlib), else each
#: cell would import it again (about 2 s of a one-iteration cell). None starts a thread.
PRELOAD = ("torch", "torch.func", "torch._dynamo", "mlflow",
           "mlflow.store.tracking.sqlalchemy_store",
           "mlflow.store.tracking.sqlalchemy_workspace_store", "benchmarks.running.service",
           "benchmarks.running.execute", "benchmarks.store.tracking", "benchmarks.store.claims",
           "benchmarks.protocols.figures", "benchmarks.running.console")  # fmt: skip


def _cell(request: dict, env: dict[str, str], out: str, interruptible: bool) -> int:
    """In the forked child: the cell's environment and output, then the command.

    ``interruptible``: whether the sweep itself takes Ctrl-C. A sweep started as a script's
    background job inherits SIGINT ignored, and so does a cold cell; a warm cell follows.
    """
    os.environ.clear()
    os.environ.update(env)
    descriptor = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(descriptor, 1)
    os.dup2(descriptor, 2)
    os.close(descriptor)
    # Fresh stream objects: the launcher's may hold locks taken before the fork.
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    if interruptible:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    import torch

    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))  # the launcher's count was read at its start
    from benchmarks.running.service import run_cell

    try:
        code = run_cell(request)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _code(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def serve() -> None:
    """The launcher's loop (single-threaded, so that every fork is safe)."""
    import importlib

    # The sweep's disposition (exec keeps an ignored signal ignored), read before imports.
    interruptible = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    from benchmarks.store.mlflow_settings import configure_mlflow

    configure_mlflow()  # before the imports: MLflow reads its logging level then
    for name in PRELOAD:
        importlib.import_module(name)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the cells, not us
    running: dict[int, str] = {}
    buffer, open_input = b"", True

    def answer(message: dict) -> None:
        os.write(1, (json.dumps(message) + "\n").encode())

    answer({"ready": True})
    while open_input or running:
        if open_input:
            readable, _, _ = select.select([0], [], [], 0.05)
            if readable:
                chunk = os.read(0, 65536)
                open_input = bool(chunk)
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    request = json.loads(line)
                    pid = os.fork()
                    if pid == 0:  # the cell
                        code = 1
                        try:
                            code = _cell(
                                request["request"], request["env"], request["out"],
                                interruptible,
                            )
                        except BaseException:  # what main() did not handle: into its output
                            traceback.print_exc()
                            sys.stderr.flush()
                        finally:
                            os._exit(code)
                    running[pid] = request["id"]
                    answer({"id": request["id"], "pid": pid})
        else:
            select.select([], [], [], 0.05)
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            if pid in running:
                answer({"id": running.pop(pid), "code": _code(status)})


class WarmCell:
    """A cell started by a :class:`Launcher`: its pid, its end, and signals to it."""

    def __init__(self, cell_id: int):
        self.id, self.pid, self.returncode = cell_id, None, None
        self.started, self.ended = threading.Event(), threading.Event()

    def wait(self, timeout: float | None = None) -> int:
        if not self.ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"cell {self.id}", timeout)
        return self.returncode

    def terminate(self) -> None:
        self.started.wait()
        if self.returncode is None:
            os.kill(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        self.started.wait()
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


class Launcher:
    """The sweep's side: starts the launcher process and hands it cells."""

    def __init__(self, env: dict[str, str]):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.sweeps.warm_cells"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
        )  # fmt: skip
        ready = self.process.stdout.readline()
        if not ready:
            raise RuntimeError("the warm cell launcher did not start")
        self._cells: dict[int, WarmCell] = {}
        self._lock = threading.Lock()
        self._next = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            message = json.loads(line)
            cell = self._cells.get(message.get("id"))
            if cell is None:
                continue
            if "pid" in message:
                cell.pid = message["pid"]
                cell.started.set()
            else:
                cell.returncode = message["code"]
                cell.started.set()
                cell.ended.set()
        for cell in self._cells.values():  # the launcher died: its cells are lost
            if cell.returncode is None:
                cell.returncode = -signal.SIGKILL
                cell.started.set()
                cell.ended.set()

    def start(self, request: dict, env: dict[str, str], out: Path) -> WarmCell:
        """Start one cell (``request``: its RunRequest as plain data)."""
        with self._lock:
            self._next += 1
            cell = self._cells[self._next] = WarmCell(self._next)
            message = {"id": cell.id, "request": request, "env": env, "out": str(out)}
            self.process.stdin.write((json.dumps(message) + "\n").encode())
            self.process.stdin.flush()
        cell.started.wait()
        return cell

    def close(self) -> None:
        """No more cells: the launcher exits once its running cells have finished."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        self.process.wait()


def run_warm(launcher: Launcher, request: dict, env: dict[str, str], started=None):
    """Run one cell (``request``: its RunRequest as plain data) in ``launcher``, its output in
    a temporary file as :func:`benchmarks.sweeps.backends.run_to_file` does; returns (code,
    output)."""
    with tempfile.NamedTemporaryFile(mode="w+", encoding="utf-8", errors="replace",
                                     suffix=".log") as out:  # fmt: skip
        cell = launcher.start(request, env, Path(out.name))
        if started is not None:
            started(cell)
        code = cell.wait()
        out.seek(0)
        return code, out.read()


_worker_launcher: Launcher | None = None


def worker_launcher(env: dict[str, str]) -> Launcher:
    """This process's launcher, started by its first cell (a Ray worker runs many tasks, so
    its later cells start warm); started again if it died. Never forked from the worker
    itself (which has threads): the launcher is a fresh interpreter."""
    global _worker_launcher
    if _worker_launcher is None or _worker_launcher.process.poll() is not None:
        _worker_launcher = Launcher(env)
    return _worker_launcher


if __name__ == "__main__":
    serve()
