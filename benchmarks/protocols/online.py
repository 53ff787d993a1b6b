"""Online fast adaptation (OSAKA): optional episodic pre-training, then test-then-train.

At every step of the stream the learner first predicts the incoming batch, is scored on
it, and only then receives its labels. The score is the cumulative accuracy over the
stream (and per source dataset); learners that detect task boundaries are also scored by
the precision and recall of their detections against the hidden switches.

Pre-training is the episodic protocol itself, run on the stream's Omniglot pre-training
episodes with the learner's episodic face; its metrics and artifacts go under
``pretrain/``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.config import param
from benchmarks.protocols.base import Protocol
from benchmarks.protocols.episodic import (
    EpisodicConfig,
    EpisodicProtocol,
)
from datasets.osaka import SOURCES, OsakaStream
from methods.api import OnlineMethod


@dataclass(frozen=True)
class OnlineConfig:
    pretrain_iterations: int = param(1000, min=0, help="meta-training iterations before the stream")
    pretrain_meta_batch: int = param(4, min=1, help="tasks per pre-training outer update")
    pretrain_val_every: int = param(250, min=1)
    pretrain_val_tasks: int = param(50, min=1)
    pretrain_test_tasks: int = param(100, min=1, help="episodes on the unseen Omniglot classes")
    log_every: int = param(100, min=1, help="steps between accuracy records")
    checkpoint_every: int = param(1000, min=1, help="steps between checkpoints")

    def total_steps(self, task: Any) -> int:
        """Pre-training iterations plus stream steps (the progress bar's length)."""
        return self.pretrain_iterations + task.steps


class PhaseRecorder:
    """Passes a nested protocol's records on under a prefix, its checkpoints tagged."""

    def __init__(self, recorder: Any, phase: str):
        self.recorder, self.phase = recorder, phase

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.recorder.log_metrics({f"{self.phase}/{k}": v for k, v in metrics.items()}, step)

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        # "iteration" is what the command line shows when it resumes.
        self.recorder.save_checkpoint(
            {"phase": self.phase, "state": state, "iteration": state["iteration"]}
        )

    def log_figure(self, figure: Any, path: str) -> None:
        self.recorder.log_figure(figure, f"{self.phase}/{path}")

    def log_text(self, text: str, path: str) -> None:
        self.recorder.log_text(text, f"{self.phase}/{path}")


def boundary_scores(detected: torch.Tensor, switched: torch.Tensor) -> dict[str, float]:
    """Precision and recall of detected boundaries against the true switches (bool masks)."""
    hits = (detected & switched).sum().item()
    return {
        "precision": hits / detected.sum().item() if detected.any() else math.nan,
        "recall": hits / switched.sum().item() if switched.any() else math.nan,
    }


class OnlineProtocol(Protocol):
    """Drives an :class:`OnlineMethod`: pre-training (if it asks), then the stream."""

    name = "online"
    config: OnlineConfig
    source: OsakaStream

    def pretrain(self, method: OnlineMethod, checkpoint: dict[str, Any] | None) -> float:
        """Meta-train the method's episodic learner; returns the training time (s)."""
        c, learner = self.config, method.pretrainer()
        steps = getattr(learner.config, "inner_steps", 1)
        episodic = EpisodicConfig(
            iterations=c.pretrain_iterations,
            meta_batch=c.pretrain_meta_batch,
            val_every=c.pretrain_val_every,
            val_tasks=c.pretrain_val_tasks,
            test_tasks=c.pretrain_test_tasks,
            eval_steps=(steps,),
            eval_chunk=10,
            log_every=max(1, min(c.log_every, c.pretrain_iterations)),
            checkpoint_every=c.checkpoint_every,
        )
        phase = EpisodicProtocol(
            episodic,
            self.source.pretraining(),
            self.seed,
            PhaseRecorder(self.recorder, "pretrain"),
            self.device,
            progress=self.progress,
        )
        final = phase.run(learner, checkpoint=checkpoint)  # leaves the best validation weights
        return final["final/train_time_s"]

    def run(
        self, method: OnlineMethod, checkpoint: dict[str, Any] | None = None
    ) -> dict[str, float]:
        """Pre-train if the method asks, then test-then-train over the stream; returns the
        ``final/`` metrics."""
        c, stream = self.config, self.source
        phase = None if checkpoint is None else checkpoint.get("phase")
        pretrains = method.pretrainer() is not None and c.pretrain_iterations > 0
        pretrain_time = 0.0
        if phase in (None, "pretrain") and pretrains:
            pretrain_time = self.pretrain(
                method, checkpoint["state"] if phase == "pretrain" else None
            )
        offset = c.pretrain_iterations  # the progress bar counts pre-training first
        tasks = stream.tasks(self.seed)

        if phase == "online":
            self.restore(method, checkpoint)
            start, elapsed = checkpoint["step"], checkpoint["elapsed"]
            pretrain_time = checkpoint["pretrain_time"]
            correct_by_step, detected = checkpoint["correct_by_step"], checkpoint["detected"]
        else:
            start, elapsed = 0, 0.0
            correct_by_step = torch.full((stream.config.steps,), math.nan)
            detected = torch.zeros(stream.config.steps, dtype=torch.bool)
        began = time.perf_counter() - elapsed
        # Every batch has the same size, so accuracies are means over steps.
        correct_so_far = correct_by_step[:start].sum().item()

        for step in range(start, stream.config.steps):
            batch = stream.batch(tasks, self.seed, step)
            x, y = batch.x.to(self.device), batch.y.to(self.device)
            # Test, then train: the labels reach the learner only after it is scored.
            correct = (method.predict(x).argmax(dim=-1) == y).float().mean().item()
            metrics = method.observe(x, y)
            loss = metrics.get("loss", 0.0)
            self.stop_if_diverged(loss, f"stream step {step}")
            correct_by_step[step] = correct
            correct_so_far += correct
            if "boundary" in metrics:
                detected[step] = bool(metrics["boundary"])
            done = step + 1
            accuracy = correct_so_far / done
            if done % c.log_every == 0 or done == stream.config.steps:
                window = correct_by_step[max(0, done - c.log_every) : done].mean().item()
                self.recorder.log_metrics(
                    {
                        "online/accuracy_so_far": accuracy,
                        "online/accuracy_window": window,
                        "train/loss": loss,
                    },
                    step=done,
                )
            if done % c.checkpoint_every == 0 and done < stream.config.steps:
                self.recorder.save_checkpoint(
                    self.snapshot(
                        method,
                        offset + done,
                        time.perf_counter() - began,
                        phase="online",
                        step=done,
                        correct_by_step=correct_by_step.clone(),
                        detected=detected.clone(),
                        pretrain_time=pretrain_time,
                    )
                )
            self.report(offset + done, {**metrics, "accuracy": accuracy})

        stream_time = time.perf_counter() - began
        cumulative = correct_by_step.mean().item()
        final = {
            "final/cumulative_accuracy": cumulative,
            # The leaderboard's common currency.
            "final/test_accuracy": cumulative,
            "final/stream_time_s": stream_time,
            "final/train_time_s": pretrain_time + stream_time,
            "final/steps_per_s": (stream.config.steps - start) / max(stream_time, 1e-9),
            "final/num_params": float(method.num_parameters()),
            "final/tasks": float(int(tasks.task_of_step[-1]) + 1),
        }
        source_of_step = tasks.source[tasks.task_of_step]
        for index, name in enumerate(SOURCES):
            steps_of_source = source_of_step == index
            if steps_of_source.any():
                final[f"final/accuracy/{name}"] = correct_by_step[steps_of_source].mean().item()
        if method.reports_boundaries():
            # Step 0 starts the stream: no learner can detect it, so it is not scored.
            scores = boundary_scores(detected[1:], tasks.switched[1:])
            final.update({f"final/boundary_{k}": v for k, v in scores.items()})
        sparsity = method.sparsity()
        final.update(self.sparsity_metrics(method, sparsity, "final/sparsity/"))
        self.recorder.log_metrics(final, step=stream.config.steps)
        self._log_figures(correct_by_step, source_of_step, tasks.switched, detected, sparsity)
        return final

    def _log_figures(self, correct_by_step, source_of_step, switched, detected, sparsity) -> None:
        from benchmarks.plots import (
            online_accuracy_figure,
            online_accuracy_table,
            sparsity_by_depth_figure,
            sparsity_table,
        )

        self.recorder.log_figure(
            online_accuracy_figure(correct_by_step, source_of_step, switched),
            "accuracy_over_time.png",
        )
        self.recorder.log_text(
            online_accuracy_table(correct_by_step, source_of_step, switched, detected),
            "accuracy_over_time.csv",
        )
        if sparsity:
            self.recorder.log_figure(sparsity_by_depth_figure(sparsity), "sparsity_by_depth.png")
            self.recorder.log_text(sparsity_table(sparsity), "sparsity_per_tensor.csv")
