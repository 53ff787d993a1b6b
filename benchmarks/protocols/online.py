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
import typing
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.protocols.base import ExecutionSettings, Protocol, RunState, checked_output
from benchmarks.protocols.episodic import EpisodicConfig, EpisodicProtocol
from mesabench_core import param
from mesabench_datasets.tasks import Problem, TaskSource, to_device
from methods.api import OnlineMethod


class OnlineStream(typing.Protocol):
    """What the online protocol needs of its task source
    (``mesabench_datasets.osaka.OsakaStream`` is one): a stream of ``config.steps`` labelled
    batches drawn from hidden tasks, each task from one of ``source_names``, and optional
    episodic pre-training."""

    config: Any  # has ``steps``
    source_names: tuple[str, ...]
    problem: Problem  # its output_dim: the classes predict() must score

    def tasks(self, seed: int) -> Any:
        """The hidden tasks: ``task_of_step``, ``switched`` (per step) and ``source`` (an index
        into ``source_names``, per task)."""

    def batch(self, tasks: Any, seed: int, step: int) -> Any:
        """The labelled batch (``x``, ``y``) of ``step``."""

    def pretraining(self) -> TaskSource:
        """Episodes for pre-training (an episodic task source)."""


@dataclass(frozen=True)
class OnlineConfig(ExecutionSettings):
    pretrain_iterations: int = param(1000, min=0, help="meta-training iterations before the stream")
    pretrain_meta_batch: int = param(4, min=1, help="tasks per pre-training outer update")
    pretrain_val_every: int = param(250, min=1, help="pre-training iterations between "
                                    "meta-validations")  # fmt: skip
    pretrain_val_tasks: int = param(50, min=1, help="episodes of each pre-training "
                                    "meta-validation")  # fmt: skip
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

    def save_learner(self, state: dict[str, Any], name: str) -> None:
        self.recorder.save_learner(state, f"{self.phase}_{name}")

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
    Config = OnlineConfig
    #: The final metrics this protocol logs: (pattern, direction, words).
    metrics = (
        (
            r"final/cumulative_accuracy",
            "higher",
            "cumulative test-then-train accuracy over the [{steps}-step] stream",
        ),
        (r"final/accuracy/(\w+)", "higher",
         "test-then-train accuracy on the {0} steps of the stream"),  # fmt: skip
        (r"final/boundary_precision", "higher", "precision of the detected task boundaries"),
        (r"final/boundary_recall", "higher", "recall of the detected task boundaries"),
        (r"final/stream_time_s", "lower", "wall time of the stream in seconds"),
        (r"final/steps_per_s", "higher", "stream steps per second"),
        (r"final/tasks", None, "number of hidden tasks in the stream"),
    )
    headline = (
        "final/cumulative_accuracy",
        "final/accuracy/*",
        "final/boundary_precision",
        "final/boundary_recall",
    )
    config: OnlineConfig
    source: OnlineStream

    def __init__(self, config: OnlineConfig, source: OnlineStream, *args, **kwargs):
        super().__init__(config, source, *args, **kwargs)
        self.progress_offset = config.pretrain_iterations  # pre-training shows first

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

    @classmethod
    def checkpoint_problem(cls, checkpoint: dict[str, Any]) -> str | None:
        """A checkpoint of the pre-training phase is the episodic protocol's, wrapped."""
        if checkpoint.get("phase") == "pretrain":
            return EpisodicProtocol.checkpoint_problem(checkpoint.get("state") or {})
        return super().checkpoint_problem(checkpoint)

    def run(
        self, method: OnlineMethod, checkpoint: dict[str, Any] | None = None
    ) -> dict[str, float]:
        """Pre-train if the method asks (or finish a pre-training a checkpoint left), then
        test-then-train over the stream; returns the ``final/`` metrics."""
        in_pretraining = checkpoint is not None and checkpoint.get("phase") == "pretrain"
        self.pretrain_time = 0.0
        pretrains = method.pretrainer() is not None and self.config.pretrain_iterations > 0
        if pretrains and (checkpoint is None or in_pretraining):
            self.pretrain_time = self.pretrain(
                method, checkpoint["state"] if in_pretraining else None
            )
        self.tasks = self.source.tasks(self.seed)
        return super().run(method, None if in_pretraining else checkpoint)

    def total_steps(self) -> int:
        return self.source.config.steps  # the stream's; pre-training counts its own

    def begin(self, method: OnlineMethod, state: RunState) -> None:
        steps = self.source.config.steps
        state.progress = {
            # float64: a stream's mean of per-step fractions stays exact to ~1e-16.
            "correct_by_step": torch.full((steps,), math.nan, dtype=torch.float64),
            "detected": torch.zeros(steps, dtype=torch.bool),
            "pretrain_time": self.pretrain_time,
        }

    def first_step(self):
        batch = self.source.batch(self.tasks, self.seed, 0)
        x, y = to_device(batch.x, self.device), to_device(batch.y, self.device)

        def step(method: OnlineMethod) -> None:
            method.predict(x)  # test, then train, as every stream step does
            method.observe(x, y)

        return step

    def train(self, method: OnlineMethod, state: RunState) -> None:
        c, stream, p = self.config, self.source, state.progress
        steps, correct_by_step = stream.config.steps, p["correct_by_step"]
        # Every batch has the same size, so accuracies are means over steps.
        correct_so_far = correct_by_step[: state.done].sum().item()
        for step in range(state.done, steps):
            batch = stream.batch(self.tasks, self.seed, step)
            x, y = to_device(batch.x, self.device), to_device(batch.y, self.device)
            # Test, then train: the labels reach the learner only after it is scored.
            logits = checked_output(method, "predict", method.predict(x),
                                    (len(x), stream.problem.output_dim), "[N, classes]")
            correct = (logits.argmax(dim=-1) == y).sum().item() / len(y)
            metrics = method.observe(x, y)
            accuracy = (correct_so_far + correct) / (step + 1)
            done = self.step_done(state, {**metrics, "accuracy": accuracy}, f"stream step {step}")
            correct_by_step[step] = correct
            correct_so_far += correct
            if "boundary" in metrics:
                p["detected"][step] = bool(metrics["boundary"])
            if done % c.log_every == 0 or done == steps:
                window = correct_by_step[max(0, done - c.log_every) : done].mean().item()
                self.log(
                    {
                        "online/accuracy_so_far": accuracy,
                        "online/accuracy_window": window,
                        "train/loss": metrics.get("loss", 0.0),
                    },
                    done,
                )
            if done % c.checkpoint_every == 0 and done < steps:
                self.save_checkpoint(method, state)

    def finish(self, method: OnlineMethod, state: RunState) -> dict[str, float]:
        """Cumulative accuracy, per source and overall; boundary precision and recall."""
        p, tasks, stream_time = state.progress, self.tasks, state.elapsed
        correct_by_step, steps = p["correct_by_step"], self.source.config.steps
        cumulative = correct_by_step.mean().item()
        final = {
            "final/cumulative_accuracy": cumulative,
            # The leaderboard's common currency.
            "final/test_accuracy": cumulative,
            "final/stream_time_s": stream_time,
            "final/train_time_s": p["pretrain_time"] + stream_time,
            "final/steps_per_s": steps / max(stream_time, 1e-9),
            "final/tasks": float(int(tasks.task_of_step[-1]) + 1),
        }
        source_of_step = tasks.source[tasks.task_of_step]
        for index, name in enumerate(self.source.source_names):
            steps_of_source = source_of_step == index
            if steps_of_source.any():
                final[f"final/accuracy/{name}"] = correct_by_step[steps_of_source].mean().item()
        if method.reports_boundaries():
            # Step 0 starts the stream: no learner can detect it, so it is not scored.
            scores = boundary_scores(p["detected"][1:], tasks.switched[1:])
            final.update({f"final/boundary_{k}": v for k, v in scores.items()})
        return final

    def log_figures(self, state: RunState) -> None:
        from benchmarks.protocols.figures import online_accuracy_figure, online_accuracy_table

        tasks, names = self.tasks, self.source.source_names
        correct_by_step, detected = state.progress["correct_by_step"], state.progress["detected"]
        source_of_step = tasks.source[tasks.task_of_step]
        self.recorder.log_figure(
            online_accuracy_figure(correct_by_step, source_of_step, tasks.switched, names),
            "accuracy_over_time.png",
        )
        self.recorder.log_text(
            online_accuracy_table(correct_by_step, source_of_step, tasks.switched, detected, names),
            "accuracy_over_time.csv",
        )
