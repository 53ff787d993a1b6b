"""What a running process shows and how it takes signals: its console, the progress bar
while a protocol trains a method, and the one-line answers to bad input and interruption.
Shared by the command line and warm cells, so that a cell forked from a warm launcher
behaves as ``python -m benchmarks run`` would."""

from __future__ import annotations

import io
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from benchmarks.store.mlflow_settings import configure_mlflow
from mesabench_core import BadInput

EXIT_USAGE, EXIT_KILLED = 2, 130

log = logging.getLogger("mesabench")


def print_table(console: Console, table: Table, heading_columns: int = 1) -> None:
    """Print ``table`` so that every cell stays whole at the console's width: as a table
    where each column fits its longest word (rich wraps at spaces, never inside one), else
    stacked: one block per row, headed by its first ``heading_columns`` cells, then a
    ``header: value`` line per other column (a pipe is 80 columns; an elided method, metric
    or run id, "final/test_loss_st…", is useless)."""
    widths = _longest_words(table)
    if sum(widths) + 3 * len(widths) + 1 <= console.width:
        for column, width in zip(table.columns, widths, strict=True):
            # rich may narrow a column below its longest word (eliding it) while wider
            # ones wrap: no column narrower than that.
            column.min_width = max(column.min_width or 0, width)
        console.print(table)
        return
    columns = table.columns
    if table.title:
        console.print(Text(str(table.title), style="bold"))
    rows = list(zip(*(list(column.cells) for column in columns), strict=True))
    for i, row in enumerate(rows):
        heading = Text(" ").join(_text(cell) for cell in row[:heading_columns])
        console.print(Text.assemble(f"{i + 1}. " if heading_columns == 1 else "", heading))
        for column, cell in zip(columns[heading_columns:], row[heading_columns:], strict=True):
            line = Text.assemble(_text(column.header), ": ", _text(cell))
            console.print(Padding(line, (0, 0, 0, 3), expand=False))
    if table.caption:
        console.print(table.caption)


def _text(cell) -> Text:
    return cell if isinstance(cell, Text) else Text.from_markup(str(cell))


def _longest_words(table: Table) -> list[int]:
    """Each column's longest word (header included): narrower, rich would elide or break
    an identifier. (Each column adds one space of padding a side and a border.)"""

    def words(cell) -> int:
        return max((len(w) for w in _text(cell).plain.split()), default=0)

    return [max([words(c.header), *(words(cell) for cell in c.cells)]) for c in table.columns]


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


class InterruptionsHeld:
    """Ctrl-C, SIGTERM and SIGHUP noted, not acted on, while a run is written into the store
    and until the code that closes an interrupted run KILLED is in place.

    Acted on at once, a signal landing after the store created the run but before that code
    runs (a sweep stopped just as its next cell opens its run) leaves the run RUNNING with
    no process to close it. :meth:`release` puts the handlers back and delivers the signal
    held, so that it interrupts where a KILLED close follows. A second signal while held is
    not held: a store that does not answer (a server away) must not make Ctrl-C wait for it.
    Only the main thread takes signals; elsewhere, and for a signal that is ignored or left
    to its default action, nothing is held.
    """

    NAMES = ("SIGINT", "SIGTERM", "SIGHUP")

    def __init__(self):
        self.held: int | None = None
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for name in self.NAMES:
            number = getattr(signal, name, None)
            if number is not None and callable(signal.getsignal(number)):
                self._previous[number] = signal.signal(number, self._note)

    def _note(self, signum, frame) -> None:
        again = self.held is not None
        self.held = signum
        if again:  # asked twice: at once
            self.release()

    def release(self, deliver: bool = True) -> None:
        """Put the handlers back; with ``deliver``, act on the signal held (its handler
        raises, as a command's does)."""
        previous, self._previous = self._previous, {}
        for number, handler in previous.items():
            signal.signal(number, handler)
        held, self.held = self.held, None
        if held is not None and deliver and previous:
            signal.raise_signal(held)


def prepare_process() -> Console:
    """Set up this process as the suite's commands expect; returns the console to print to."""
    console = Console(file=WatchedOutput(sys.stdout))
    # Plain one-line records on stderr: readable in a terminal, a CI log and a grep. Our
    # notes at INFO; other libraries' only from WARNING (matplotlib announces a rebuilt font
    # cache at INFO, for one).
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    log.setLevel(logging.INFO)
    # Before MLflow is imported: it reads its logging level then.
    configure_mlflow()
    # A polite kill (SIGTERM) and a closed terminal (SIGHUP) are interruptions too: the run
    # is marked KILLED, not lost.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, _raise_keyboard_interrupt)
    return console


def answered(command: Callable[[], int]) -> int:
    """``command``'s exit code; bad input is one line and exit 2, an interruption before
    any run was started (waiting for a claim, opening the store) one line and exit 130:
    nothing to close, and no traceback to show."""
    try:
        return command()
    except BadInput as err:
        sys.stderr.write(f"error: {err}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return EXIT_KILLED


class WatchedOutput(io.TextIOBase):
    """The console's stdout, noting when its reader went away (``run ... | head -1``).

    Writing to a closed pipe never raises here, in whichever thread it happens (rich draws
    the bar from a thread of its own). Where a bar is drawn, :class:`TrainingProgress`
    raises ``BrokenPipeError`` in the training loop at the next step instead, so the run
    ends KILLED every time; plain progress lines are dropped and the run goes on.
    """

    def __init__(self, stream):
        self.stream = stream
        self.reader_gone = False

    def _closed(self) -> None:
        self.reader_gone = True
        try:  # later writes, and Python's own flush at exit, go nowhere
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._closed()
            except UnicodeEncodeError:  # an ASCII-only terminal: "±" as "?", never a failure
                encoding = self.encoding or "ascii"
                self.write(text.encode(encoding, "replace").decode(encoding))
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._closed()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", "utf-8")


class TrainingProgress:
    """A rich progress bar with the latest training loss; usable as the protocol callback.

    Where the output is no terminal (a file, a pipe, a CI log) a bar cannot be redrawn, so
    one plain line is written every :attr:`EVERY_PERCENT` percent of the run or every
    :attr:`EVERY_SECONDS` seconds, whichever comes first."""

    EVERY_PERCENT = 5
    EVERY_SECONDS = 30.0

    def __init__(self, total: int | None, completed: int, description: str, console: Console):
        self._plain = not console.is_terminal
        self._console, self._total, self._description = console, total, description
        self._began = time.monotonic()
        self._said_at, self._said_step = self._began, completed
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}{task.fields[accuracy]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._task = self._progress.add_task(
            description, total=total, completed=completed, loss="-", accuracy=""
        )

    def __enter__(self) -> TrainingProgress:
        if not self._plain:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self._plain:
            self._progress.stop()

    def __call__(self, done: int, metrics: dict[str, float]) -> None:
        # A bar drawn while training stops the run when its reader goes (KILLED, resumable);
        # plain progress lines into a pipe that closed (``| head -1``) are only dropped: the
        # run goes on, and says at its end that it FINISHED and is recorded.
        if not self._plain and getattr(self._progress.console.file, "reader_gone", False):
            raise BrokenPipeError("the output pipe was closed")
        loss = metrics.get("loss")
        shown = "-" if loss is None else f"{loss:.4f}"
        # Online protocols report the accuracy so far (test, then train).
        accuracy = metrics.get("accuracy")
        extra = "" if accuracy is None else f"  accuracy so far {accuracy:.3f}"
        if self._plain:
            self._say(done, shown, extra)
        else:
            self._progress.update(self._task, completed=done, loss=shown, accuracy=extra)

    def _say(self, done: int, loss: str, extra: str) -> None:
        now, total = time.monotonic(), self._total
        step = max(1, total * self.EVERY_PERCENT // 100) if total else None
        due = now - self._said_at >= self.EVERY_SECONDS or (
            step is not None and done - self._said_step >= step) or done == total  # fmt: skip
        if not due:
            return
        self._said_at, self._said_step = now, done
        where = f"{done}/{total} ({100 * done // total}%)" if total else f"{done}"
        self._console.print(f"{self._description}: {where}, loss {loss}{extra}, "
                            f"{now - self._began:.0f} s", soft_wrap=True)  # fmt: skip
