"""The progress bar shown while a protocol trains a method."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class TrainingProgress:
    """A rich progress bar with the latest training loss; usable as the protocol callback."""

    def __init__(self, total: int, completed: int, description: str, console: Console):
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
        self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.stop()

    def __call__(self, done: int, metrics: dict[str, float]) -> None:
        loss = metrics.get("loss")
        shown = "-" if loss is None else f"{loss:.4f}"
        # Online protocols report the accuracy so far (test, then train).
        accuracy = metrics.get("accuracy")
        extra = "" if accuracy is None else f"  accuracy so far {accuracy:.3f}"
        self._progress.update(self._task, completed=done, loss=shown, accuracy=extra)
