"""Continual learning: one pass over a stream of tasks, the accuracy matrix after each task.

The protocol owns the stream and the evaluation. It hands the learner one batch at a time,
announces task boundaries during training, and after every task scores the learner on the
test set of every task in the stream (no task id at test time). From the accuracy matrix
``R[t, j]`` come retained accuracy, BTI, BWT, learning accuracy and forward transfer.
``evaluate="metrics"`` scores only the entries those read (``R[t, t]``, ``R[t, t+1]``, the
last row): the same numbers from about ``4 T`` evaluations instead of ``T^2``.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Any, Literal

import torch

from benchmarks.protocols.base import ExecutionSettings, Protocol, RunState, checked_output
from benchmarks.protocols.summary import continual_metrics, sparsity_settling
from mesabench_core import param
from mesabench_datasets.tasks import Problem, seeded_generator, to_device
from methods.api import ContinualMethod


class TaskStream(typing.Protocol):
    """What the continual protocol needs of its task source
    (``mesabench_datasets.streams.TaskStream`` is one): ``num_tasks`` tasks, each with
    training samples drawn per seed and a fixed test set."""

    config: Any  # what ContinualConfig.total_steps reads: tasks, train_per_task
    num_tasks: int
    problem: Problem  # its output_dim: the classes predict() must score

    def train_task(self, task: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels of ``task``'s training samples, in stream order."""

    def test_task(self, task: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels of ``task``'s test set."""


@dataclass(frozen=True)
class ContinualConfig(ExecutionSettings):
    batch_size: int = param(10, min=1, help="samples per incoming batch")
    epochs: int = param(1, min=1, help="passes over each task's samples (1: single pass)")
    eval_batch: int = param(2000, min=1, help="test samples predicted at once")
    log_every: int = param(25, min=1, help="batches between training-loss records")
    evaluate: Literal["all", "metrics"] = param(
        "all", added="0.2",
        help="'all': every task's test set after every task (the whole accuracy matrix); "
        "'metrics': only the entries the final metrics read, the same scores")  # fmt: skip

    def total_steps(self, task: Any) -> int:
        """Batches in the whole stream (the progress bar's length)."""
        return task.tasks * self.epochs * math.ceil(task.train_per_task / self.batch_size)


class ContinualProtocol(Protocol):
    """Drives a :class:`ContinualMethod` through a task stream and scores it after each task."""

    name = "continual"
    Config = ContinualConfig
    #: The final metrics this protocol logs: (pattern, direction, words).
    metrics = (
        (r"final/ra", "higher", "retained accuracy: mean accuracy over all tasks after the stream"),
        (r"final/bti", "higher", "backward transfer and interference (La-MAML's, all tasks)"),
        (r"final/bwt", "higher", "backward transfer (GEM's, first T-1 tasks)"),
        (r"final/la", "higher", "learning accuracy: mean accuracy on each task right after it"),
        (r"final/fwt", "higher", "forward transfer (GEM's)"),
        (r"final/samples_per_s", "higher", "training samples per second"),
        (r"final/sparsity_settle/.+", None, "multi-pass: a tensor's sparsity rise over each "
         "task's last pass as a share of its rise over the first, summed over tasks (near 0: "
         "it settles within each task and rises when the next begins)"),
    )
    headline = ("final/ra", "final/bti", "final/bwt", "final/la", "final/fwt")
    sparsity_axis = ("tasks trained", "sparsity_over_tasks.csv")
    config: ContinualConfig
    source: TaskStream

    # -- evaluation ---------------------------------------------------------------------
    def accuracy(self, method: ContinualMethod, task: int) -> float:
        """Accuracy of ``method`` on the full test set of ``task``."""
        x, y = self.source.test_task(task)
        correct = 0
        with torch.no_grad():
            for start in range(0, len(x), self.config.eval_batch):
                xb = to_device(x[start : start + self.config.eval_batch], self.device)
                yb = to_device(y[start : start + self.config.eval_batch], self.device)
                logits = checked_output(method, "predict", method.predict(xb),
                                        (len(xb), self.source.problem.output_dim),
                                        "[N, classes]")  # fmt: skip
                correct += (logits.argmax(dim=-1) == yb).sum().item()
        return correct / len(x)

    def accuracy_row(self, method: ContinualMethod, tasks: range | None = None) -> torch.Tensor:
        """Accuracy on each of ``tasks`` (all by default); NaN where a task is not scored."""
        row = torch.full((self.source.num_tasks,), math.nan)
        for j in range(self.source.num_tasks) if tasks is None else tasks:
            row[j] = self.accuracy(method, j)
        return row

    def scored_after(self, task: int) -> range | None:
        """The tasks scored after training ``task``: all, or (``evaluate="metrics"``) the
        ones the final metrics read: ``task`` itself (LA, BTI), the next one (forward
        transfer), every task after the last (RA)."""
        last = self.source.num_tasks - 1
        if self.config.evaluate == "all" or task == last:
            return None
        return range(task, task + 2)

    # -- the stream ---------------------------------------------------------------------
    def batches(self, task: int, epoch: int):
        x, y = self.source.train_task(task, self.seed)
        if epoch > 0:  # later passes see the samples in a fresh, seeded order
            order = torch.randperm(len(x), generator=seeded_generator(self.seed, task, epoch))
            x, y = x[order], y[order]
        size = self.config.batch_size
        for start in range(0, len(x), size):
            yield (to_device(x[start : start + size], self.device),
                   to_device(y[start : start + size], self.device))  # fmt: skip

    def total_steps(self) -> int:
        return self.config.total_steps(self.source.config)

    def begin(self, method: ContinualMethod, state: RunState) -> None:
        tasks = self.source.num_tasks
        state.progress = {
            "task": 0,  # the next task to train on
            "R": torch.full((tasks, tasks), math.nan),
            "initial": self.accuracy_row(method),  # the untrained learner, for forward transfer
        }
        self.record_sparsity(method, state, 0)
        if self.config.epochs > 1:  # multi-pass: the sparsity after every pass, from here
            state.progress["passes"] = [self.sparsity_metrics(method, method.sparsity(), "")]

    def first_step(self):
        x, y = next(self.batches(0, 0))

        def step(method: ContinualMethod) -> None:
            method.begin_task(0)
            method.observe(x, y)

        return step

    def train(self, method: ContinualMethod, state: RunState) -> None:
        c, p = self.config, state.progress
        for task in range(p["task"], self.source.num_tasks):
            method.begin_task(task)
            for epoch in range(c.epochs):
                for x, y in self.batches(task, epoch):
                    metrics = method.observe(x, y)
                    done = self.step_done(state, metrics, f"task {task}, batch {state.done}")
                    if "loss" in metrics and done % c.log_every == 0:
                        self.log({f"train/{k}": v for k, v in metrics.items()}, done)
                if c.epochs > 1:
                    self._log_pass(method, state, task * c.epochs + epoch + 1)
            method.end_task(task)
            with state.untimed():  # scoring every task is not training
                p["R"][task] = self.accuracy_row(method, self.scored_after(task))
                p["task"] = task + 1
                self._log_task(method, state, task)
                self.save_checkpoint(method, state)

    def finish(self, method: ContinualMethod, state: RunState) -> dict[str, float]:
        """Retained accuracy, BTI, BWT, LA and FWT from the accuracy matrix."""
        p = state.progress
        final = {f"final/{k}": v for k, v in continual_metrics(p["R"], p["initial"]).items()}
        # The leaderboard's common currency: accuracy over all tasks at the end of the stream.
        final["final/test_accuracy"] = final["final/ra"]
        final["final/samples_per_s"] = (
            state.done * self.config.batch_size / max(state.elapsed, 1e-9)
        )
        settling = sparsity_settling(p.get("passes", []), self.config.epochs)
        final.update({f"final/sparsity_settle/{k}": v for k, v in settling.items()})
        return final

    def score(self, method: ContinualMethod) -> dict[str, float]:
        """A trained learner's accuracy on every task's test set, and their mean."""
        row = self.accuracy_row(method)
        final = {f"final/accuracy/task{j}": v for j, v in enumerate(row.tolist())}
        final["final/test_accuracy"] = row.mean().item()
        return final

    def final_step(self, state: RunState) -> int:
        return self.source.num_tasks

    def _log_pass(self, method: ContinualMethod, state: RunState, passes: int) -> None:
        """Multi-pass: the sparsity after a pass over a task's samples (``passes`` so far),
        kept for :func:`sparsity_settling` and logged (``sparsity_by_pass/*``)."""
        sparsity = self.sparsity_metrics(method, method.sparsity(), "")
        if sparsity:
            state.progress["passes"].append(sparsity)
            self.log({f"sparsity_by_pass/{k}": v for k, v in sparsity.items()}, passes)

    def _log_task(self, method: ContinualMethod, state: RunState, task: int) -> None:
        row = state.progress["R"][task]
        logged = {"continual/accuracy_current_task": row[task].item()}
        if not row.isnan().any():  # the whole row was scored
            logged["continual/accuracy_seen_tasks"] = row[: task + 1].mean().item()
            logged["continual/accuracy_all_tasks"] = row.mean().item()
        logged.update(self.record_sparsity(method, state, task + 1))
        self.log(logged, task + 1)

    def log_figures(self, state: RunState) -> None:
        from benchmarks.protocols.figures import accuracy_matrix_figure, accuracy_matrix_table

        matrix, initial = state.progress["R"], state.progress["initial"]
        self.recorder.log_figure(accuracy_matrix_figure(matrix.numpy()), "accuracy_matrix.png")
        self.recorder.log_text(accuracy_matrix_table(matrix, initial), "accuracy_matrix.csv")
