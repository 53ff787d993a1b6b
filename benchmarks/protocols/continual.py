"""Continual learning: one pass over a stream of tasks, the accuracy matrix after each task.

The protocol owns the stream and the evaluation. It hands the learner one batch at a time,
announces task boundaries during training, and after every task scores the learner on the
test set of every task in the stream (no task id at test time). From the accuracy matrix
``R[t, j]`` come retained accuracy, BTI, BWT, learning accuracy and forward transfer.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.config import param
from benchmarks.metrics import continual_metrics
from benchmarks.protocols.base import Protocol
from datasets.streams import TaskStream
from datasets.tasks import seeded_generator
from methods.api import ContinualMethod


@dataclass(frozen=True)
class ContinualConfig:
    batch_size: int = param(10, min=1, help="samples per incoming batch")
    epochs: int = param(1, min=1, help="passes over each task's samples (1: single pass)")
    eval_batch: int = param(2000, min=1, help="test samples predicted at once")
    log_every: int = param(25, min=1, help="batches between training-loss records")

    def total_steps(self, task: Any) -> int:
        """Batches in the whole stream (the progress bar's length)."""
        return task.tasks * self.epochs * math.ceil(task.train_per_task / self.batch_size)


class ContinualProtocol(Protocol):
    """Drives a :class:`ContinualMethod` through a task stream and scores it after each task."""

    name = "continual"
    config: ContinualConfig
    source: TaskStream

    # -- evaluation ---------------------------------------------------------------------
    def accuracy(self, method: ContinualMethod, task: int) -> float:
        """Accuracy of ``method`` on the full test set of ``task``."""
        x, y = self.source.test_task(task)
        correct = 0
        with torch.no_grad():
            for start in range(0, len(x), self.config.eval_batch):
                xb = x[start : start + self.config.eval_batch].to(self.device)
                yb = y[start : start + self.config.eval_batch].to(self.device)
                correct += (method.predict(xb).argmax(dim=-1) == yb).sum().item()
        return correct / len(x)

    def accuracy_row(self, method: ContinualMethod) -> torch.Tensor:
        return torch.tensor([self.accuracy(method, j) for j in range(self.source.num_tasks)])

    # -- the stream ---------------------------------------------------------------------
    def batches(self, task: int, epoch: int):
        x, y = self.source.train_task(task, self.seed)
        if epoch > 0:  # later passes see the samples in a fresh, seeded order
            order = torch.randperm(len(x), generator=seeded_generator(self.seed, task, epoch))
            x, y = x[order], y[order]
        size = self.config.batch_size
        for start in range(0, len(x), size):
            yield x[start : start + size].to(self.device), y[start : start + size].to(self.device)

    def run(
        self, method: ContinualMethod, checkpoint: dict[str, Any] | None = None
    ) -> dict[str, float]:
        """Train on the stream (from ``checkpoint`` if given), return the ``final/`` metrics."""
        c, tasks = self.config, self.source.num_tasks
        if checkpoint is None:
            first_task, done, elapsed = 0, 0, 0.0
            matrix = torch.full((tasks, tasks), math.nan)
            initial = self.accuracy_row(method)  # the untrained learner, for forward transfer
            sparsity_history: list[tuple[int, dict[str, float]]] = []
            if method.sparsity():
                sparsity_history.append((0, method.sparsity()))
        else:
            self.restore(method, checkpoint)
            first_task, done = checkpoint["task"], checkpoint["iteration"]
            elapsed, matrix, initial = checkpoint["elapsed"], checkpoint["R"], checkpoint["initial"]
            sparsity_history = checkpoint["sparsity_history"]
        train_time = elapsed

        for task in range(first_task, tasks):
            began = time.perf_counter()
            method.begin_task(task)
            for epoch in range(c.epochs):
                for x, y in self.batches(task, epoch):
                    metrics = method.observe(x, y)
                    self.stop_if_diverged(metrics.get("loss", 0.0), f"task {task}, batch {done}")
                    done += 1
                    if "loss" in metrics and done % c.log_every == 0:
                        self.recorder.log_metrics(
                            {f"train/{k}": v for k, v in metrics.items()}, step=done
                        )
                    self.report(done, metrics)
            method.end_task(task)
            train_time += time.perf_counter() - began
            matrix[task] = self.accuracy_row(method)
            self._log_task(method, task, matrix, sparsity_history)
            self.recorder.save_checkpoint(
                self.snapshot(
                    method,
                    done,
                    train_time,
                    task=task + 1,
                    R=matrix.clone(),
                    initial=initial,
                    sparsity_history=list(sparsity_history),
                )
            )

        final = {f"final/{k}": v for k, v in continual_metrics(matrix, initial).items()}
        # The leaderboard's common currency: accuracy over all tasks at the end of the stream.
        final["final/test_accuracy"] = final["final/ra"]
        final["final/train_time_s"] = train_time
        final["final/samples_per_s"] = done * c.batch_size / max(train_time, 1e-9)
        final["final/num_params"] = float(method.num_parameters())
        if sparsity_history:
            final.update(self.sparsity_metrics(method, sparsity_history[-1][1], "final/sparsity/"))
        self.recorder.log_metrics(final, step=tasks)
        self._log_figures(matrix, initial, sparsity_history)
        return final

    def _log_task(self, method, task: int, matrix, sparsity_history) -> None:
        row = matrix[task]
        logged = {
            "continual/accuracy_current_task": row[task].item(),
            "continual/accuracy_seen_tasks": row[: task + 1].mean().item(),
            "continual/accuracy_all_tasks": row.mean().item(),
        }
        sparsity = method.sparsity()
        if sparsity:
            sparsity_history.append((task + 1, sparsity))
        logged.update(self.sparsity_metrics(method, sparsity, "sparsity/"))
        self.recorder.log_metrics(logged, step=task + 1)

    def _log_figures(self, matrix, initial, sparsity_history) -> None:
        from benchmarks.plots import (
            accuracy_matrix_figure,
            accuracy_matrix_table,
            sparsity_by_depth_figure,
            sparsity_figure,
            sparsity_over_tasks_table,
            sparsity_table,
        )

        self.recorder.log_figure(accuracy_matrix_figure(matrix.numpy()), "accuracy_matrix.png")
        self.recorder.log_text(accuracy_matrix_table(matrix, initial), "accuracy_matrix.csv")
        if sparsity_history:
            final = sparsity_history[-1][1]
            self.recorder.log_figure(
                sparsity_figure(sparsity_history, xlabel="tasks trained"), "sparsity.png"
            )
            self.recorder.log_figure(sparsity_by_depth_figure(final), "sparsity_by_depth.png")
            self.recorder.log_text(sparsity_table(final), "sparsity_per_tensor.csv")
            self.recorder.log_text(
                sparsity_over_tasks_table(sparsity_history), "sparsity_over_tasks.csv"
            )
