"""Where a protocol sends what it measures. The MLflow tracker is the real one; the memory
recorder serves tests and in-process use."""

from __future__ import annotations

from typing import Any, Protocol


class Recorder(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def save_checkpoint(self, state: dict[str, Any]) -> None: ...

    def save_learner(self, state: dict[str, Any], name: str) -> None:
        """Keep a trained learner (``name``: ``final``, ``best``) with the run."""

    def log_figure(self, figure: Any, path: str) -> None: ...

    def log_text(self, text: str, path: str) -> None: ...


class MemoryRecorder:
    """Keeps metrics, the last checkpoint and artifact names in memory."""

    def __init__(self) -> None:
        self.metrics: dict[str, list[tuple[int, float]]] = {}
        self.checkpoint: dict[str, Any] | None = None
        self.artifacts: dict[str, Any] = {}
        self.learners: dict[str, dict[str, Any]] = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.metrics.setdefault(key, []).append((step, float(value)))

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        self.checkpoint = state

    def save_learner(self, state: dict[str, Any], name: str) -> None:
        self.learners[name] = state

    def log_figure(self, figure: Any, path: str) -> None:
        self.artifacts[path] = figure

    def log_text(self, text: str, path: str) -> None:
        self.artifacts[path] = text
