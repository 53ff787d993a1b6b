"""Episodic meta-learning: meta-train on fresh task batches, meta-validate, meta-test.

Every task batch is drawn from a generator seeded by (role, seed, index), so the training
stream depends only on the seed, validation and test tasks are the same for every run, and a
resumed run sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.protocols.base import (
    ExecutionSettings,
    Protocol,
    RunState,
    checked_output,
    full_precision,
)
from benchmarks.protocols.summary import mean_ci95
from mesabench_core import ConfigError, param
from mesabench_datasets.tasks import TaskSource, seeded_generator
from methods.api import EpisodicMethod
from methods.common.losses import is_classification, per_task_accuracy, per_task_loss

TRAIN, VALIDATION, TEST, ANALYSIS = 1, 2, 3, 4  # seed roles
SPLITS = {TRAIN: "train", VALIDATION: "val", TEST: "test"}


@dataclass(frozen=True)
class EpisodicConfig(ExecutionSettings):
    iterations: int = param(5000, min=1, help="outer (meta-training) iterations")
    meta_batch: int = param(25, min=1, help="tasks per outer update")
    val_every: int = param(500, min=1, help="iterations between meta-validations")
    val_tasks: int = param(200, min=1, help="tasks of each meta-validation")
    test_tasks: int = param(1000, min=1, help="held-out tasks for the final meta-test")
    eval_steps: tuple[int, ...] = param((1, 10), min=0, help="inner steps scored at meta-test")
    eval_chunk: int = param(100, min=1, help="tasks predicted at once during evaluation")
    select_best: bool = param(True, help="meta-test the best meta-validation checkpoint")
    log_every: int = param(50, min=1, help="iterations between training-loss records")
    checkpoint_every: int = param(1000, min=1, help="iterations between checkpoints (a resume "
                                  "starts from the last)")  # fmt: skip
    test_seed: int = param(20_231_001, min=0, help="fixed seed of the held-out tasks")
    val_seed: int = param(10_101, min=0, help="fixed seed of the meta-validation tasks")

    def total_steps(self, task: Any) -> int:
        """Outer iterations (the progress bar's length)."""
        return self.iterations

    def check(self) -> None:
        if not self.eval_steps:
            raise ConfigError("eval_steps must name at least one step count")


@dataclass
class _Best:
    score: float = math.inf
    iteration: int = -1
    state: dict[str, Any] | None = None


class EpisodicProtocol(Protocol):
    """Drives an :class:`EpisodicMethod` through meta-training, meta-validation and meta-test."""

    name = "episodic"
    selects_on = "meta-validation tasks (select_best)"
    Config = EpisodicConfig
    #: The final metrics this protocol logs: (pattern, direction, words).
    metrics = (
        (
            r"final/test_loss",
            "lower",
            "test loss (the task's loss, mean over[ {test_tasks}] held-out tasks; gradient "
            "learners after[ {last_eval_step}] inner steps)",
        ),
        (
            r"final/test_accuracy",
            "higher",
            "test accuracy (mean over[ {test_tasks}] held-out tasks; gradient learners after"
            "[ {last_eval_step}] inner steps)",
        ),
        (r"final/test_loss_steps(\d+)", "lower", "test loss after {0} inner steps"),
        (r"final/test_accuracy_steps(\d+)", "higher", "test accuracy after {0} inner steps"),
        (
            r"final/test_(loss|accuracy)(_steps\d+)?_ci95",
            None,
            "half-width of the normal 95% CI over the run's own test episodes",
        ),
        (
            r"final/test_(loss|accuracy)(_steps\d+)?_diverged_fraction",
            "lower",
            "fraction of test tasks whose loss diverged",
        ),
        (r"final/test_tasks", None, "number of held-out test tasks"),
        (r"final/early/.+", None, "the method's monitor measure at the first meta-validation "
         "(early in training)"),
        (r"final/best_iteration", None, "iteration of the best meta-validation checkpoint"),
        (r"val/loss", "lower", "meta-validation loss (mean over the validation tasks)"),
        (r"val/accuracy", "higher", "meta-validation accuracy (mean over the validation tasks)"),
        (r"final/loss_t(\d+)", "lower", "test loss at sequence position {0}"),
        (r"final/loss_t_rise", None,
         "test loss at the last sequence position less its lowest over the positions"),
        (r"final/test_perplexity", "lower",
         "test perplexity per scored token (exp of the test cross-entropy; sequence tasks)"),
    )
    headline = ("final/test_accuracy|final/test_loss",)
    config: EpisodicConfig
    source: TaskSource

    def __init__(self, config: EpisodicConfig, source: TaskSource, *args, **kwargs):
        super().__init__(config, source, *args, **kwargs)
        self.classification = is_classification(source.problem.loss)

    # -- evaluation ---------------------------------------------------------------------
    def _tasks(self, role: int, seed: int, count: int):
        # Evaluation tasks are drawn in blocks of the source's fixed size, so the test set
        # never depends on how many tasks are predicted at once.
        size = self.source.task_block
        for block in range(math.ceil(count / size)):
            generator = seeded_generator(role, seed, block, device=self.device)
            batch = self.source.sample(size, generator, SPLITS[role])
            take = min(size, count - block * size)
            for start in range(0, take, self.config.eval_chunk):
                stop = min(take, start + self.config.eval_chunk)
                yield batch.slice(start, stop)

    def evaluate(
        self, method: EpisodicMethod, role: int, seed: int, count: int, steps: tuple[int, ...]
    ) -> dict[int, dict[str, torch.Tensor]]:
        """Per-task losses (and accuracies) after each number of inner steps in ``steps``."""
        steps = steps if method.uses_inner_steps else steps[-1:]
        out: dict[int, dict[str, list[torch.Tensor]]] = {
            s: {"loss": [], "accuracy": []} for s in steps
        }
        for batch in self._tasks(role, seed, count):
            for s in steps:
                pred = self._predict(method, batch, steps=s)
                loss = per_task_loss(pred, batch.query_y, self.source.problem.loss)
                out[s]["loss"].append(loss.cpu())
                if self.classification:
                    out[s]["accuracy"].append(per_task_accuracy(pred, batch.query_y).cpu())
        return {s: {k: torch.cat(v) for k, v in d.items() if v} for s, d in out.items()}

    def _predict(self, method: EpisodicMethod, batch, **kwargs) -> torch.Tensor:
        return predicted(method, batch, self.source.problem, **kwargs)

    def _score(self, per_task: dict[str, torch.Tensor]) -> float:
        # Lower is better: loss for regression, error rate for classification.
        if self.classification:
            return 1.0 - per_task["accuracy"].mean().item()
        return per_task["loss"].mean().item()

    def validate(self, method: EpisodicMethod) -> tuple[float, dict[str, float]]:
        c = self.config
        steps = c.eval_steps[-1]
        result = self.evaluate(method, VALIDATION, c.val_seed, c.val_tasks, (steps,))
        per_task = next(iter(result.values()))
        metrics = {"val/loss": per_task["loss"].mean().item()}
        if self.classification:
            metrics["val/accuracy"] = per_task["accuracy"].mean().item()
        with full_precision(self.device):
            metrics.update(method.monitor(self.source, c.val_seed))
        return self._score(per_task), metrics

    # -- training -----------------------------------------------------------------------
    def total_steps(self) -> int:
        return self.config.iterations

    def begin(self, method: EpisodicMethod, state: RunState) -> None:
        state.progress = {"best": _Best(), "curves": {"train/loss": [], "val/loss": []}}

    def first_step(self):
        generator = seeded_generator(TRAIN, self.seed, 0, device=self.device)
        batch = self.source.sample(self.config.meta_batch, generator, "train")
        return lambda method: method.meta_train_step(batch)

    def train(self, method: EpisodicMethod, state: RunState) -> None:
        c, best, curves = self.config, state.progress["best"], state.progress["curves"]
        for it in range(state.done, c.iterations):
            generator = seeded_generator(TRAIN, self.seed, it, device=self.device)
            metrics = method.meta_train_step(self.source.sample(c.meta_batch, generator, "train"))
            done = self.step_done(state, metrics, f"iteration {it}")
            if done % c.log_every == 0 or done == c.iterations:
                logged = {f"train/{k}": v for k, v in metrics.items()}
                curves["train/loss"].append((done, metrics["loss"]))
                logged.update(self.record_sparsity(method, state, done))
                self.log(logged, done)
            if done % c.val_every == 0 or done == c.iterations:
                score, val_metrics = self.validate(method)
                self.log(val_metrics, done)
                if done == min(c.val_every, c.iterations):
                    # The method's monitor at the first validation: early in training, beside
                    # the end's analyses (thesis Fig. 2.5: near GD first, nearer GD++ later).
                    # Told by the step, not by what progress holds, so that a run resumed
                    # from a checkpoint without it records no later validation in its place.
                    state.progress["early"] = {k.removeprefix("monitor/"): v
                                               for k, v in val_metrics.items()
                                               if k.startswith("monitor/")}  # fmt: skip
                curves["val/loss"].append((done, val_metrics["val/loss"]))
                if math.isfinite(score) and score <= best.score:
                    best = state.progress["best"] = _Best(
                        score, done, copy.deepcopy(method.state_dict())
                    )
            if done % c.checkpoint_every == 0 and done < c.iterations:
                self.save_checkpoint(method, state)

    def finish(self, method: EpisodicMethod, state: RunState) -> dict[str, float]:
        """Meta-test (the best meta-validation weights, if ``select_best``) and analyse."""
        c, best = self.config, state.progress["best"]
        if best.state is not None:
            self.recorder.save_learner(best.state, "best")
        if c.select_best and best.state is not None:
            method.load_state_dict(best.state)
        final = self.score(method)
        final["final/best_iteration"] = float(best.iteration if c.select_best else c.iterations)
        final.update({f"final/early/{k}": v for k, v in state.progress.get("early", {}).items()})
        return final

    def score(self, method: EpisodicMethod) -> dict[str, float]:
        """Meta-test and analyse a trained learner."""
        final = self.meta_test(method)
        final.update(self.analyse(method))
        return final

    def analyse(self, method: EpisodicMethod) -> dict[str, float]:
        """The method's own analyses on this task family (e.g. an in-context learner against
        the algorithms it may emulate), and the loss by sequence position of causal tasks."""
        seed = self.config.test_seed
        with full_precision(self.device):
            final = method.analyse(self.source, self.recorder, seed=seed)
        if self.source.problem.causal and not self.classification:
            curve = loss_by_position(method, self.source, seed=seed)
            for t, value in enumerate(curve.tolist(), start=1):
                self.log({"analysis/loss_by_t": value}, t)
            for t in sorted({1, 5, 10, len(curve)}):
                final[f"final/loss_t{t}"] = curve[t - 1].item()
            # How far the loss climbs back from its lowest point by the last position: 0
            # where it never rises again (thesis Fig. 3.2C: one GD step's is non-monotonic).
            final["final/loss_t_rise"] = (curve[-1] - curve.min()).item()
        return final

    def log_figures(self, state: RunState) -> None:
        from benchmarks.protocols.figures import learning_curve_figure

        curves = state.progress["curves"]
        if curves["train/loss"]:
            self.recorder.log_figure(learning_curve_figure(curves), "learning_curve.png")

    def meta_test(self, method: EpisodicMethod) -> dict[str, float]:
        c = self.config
        results = self.evaluate(method, TEST, c.test_seed, c.test_tasks, c.eval_steps)
        final: dict[str, float] = {}
        scored = {
            (steps, name): _scores(values)
            for steps, per_task in results.items()
            for name, values in per_task.items()
        }
        for (steps, name), scores in scored.items():
            for suffix, value in scores.items():
                # Learners without inner steps have one score; a diverged fraction is kept.
                if method.uses_inner_steps or suffix == "_diverged_fraction":
                    final[f"final/test_{name}_steps{steps}{suffix}"] = value
        for (steps, name), scores in scored.items():
            if steps == c.eval_steps[-1]:  # the primary step count names the headline
                final.update({f"final/test_{name}{suffix}": v for suffix, v in scores.items()})
        final["final/test_tasks"] = float(c.test_tasks)
        if self.classification and self.source.problem.causal:
            # Every task scores the same number of tokens, so the mean of the tasks' mean
            # cross-entropies is the per-token one.
            final["final/test_perplexity"] = math.exp(final["final/test_loss"])
        self.recorder.log_text(per_task_table(results), PER_TASK_PATH)
        return final


def _scores(values: torch.Tensor) -> dict[str, float]:
    """Mean and normal 95% CI half-width of per-task values, and the fraction of tasks that
    diverged where any did (the mean is NaN then: say how many blew up, not hide it)."""
    mean, ci = mean_ci95(values)
    scores = {"": mean, "_ci95": ci}
    diverged = 1.0 - torch.isfinite(values).double().mean().item()
    if diverged > 0:
        scores["_diverged_fraction"] = diverged
    return scores


def predicted(method: EpisodicMethod, batch, problem, **kwargs) -> torch.Tensor:
    """``method.predict`` on ``batch``, held to the Method API's shape: ``[T, Q, out]``,
    shaped like the targets for regression, ``[T, Q, classes]`` for classification."""
    pred = method.predict(batch.support_x, batch.support_y, batch.query_x, **kwargs)
    targets = tuple(batch.query_y.shape)
    expected = (*targets, problem.output_dim) if is_classification(problem.loss) else targets
    return checked_output(method, "predict", pred, expected, "[T, Q, out]")


def loss_by_position(method, source: TaskSource, tasks: int = 1000, seed: int = 0) -> torch.Tensor:
    """Mean 0.5 ||target - prediction||^2 at every position of held-out sequences (the
    in-context learning curve of a causal sequence task)."""
    batch = source.sample(tasks, seeded_generator(ANALYSIS, seed, device=method.device))
    pred = predicted(method, batch, source.problem)
    return 0.5 * (pred - batch.query_y).pow(2).sum(-1).mean(0).cpu()


#: The artifact with every test task's result, for paired comparisons over identical tasks.
PER_TASK_PATH = "results/test_per_task.csv"


def per_task_table(results: dict[int, dict[str, torch.Tensor]]) -> str:
    """CSV, one line per test task (the same tasks, in the same order, for every run of a
    benchmark with the same test_seed): its loss (and accuracy) after each step count."""
    columns = [(s, name) for s, per_task in results.items() for name in per_task]
    lines = ["task," + ",".join(f"{name}_steps{s}" for s, name in columns)]
    values = [results[s][name].tolist() for s, name in columns]
    for task, row in enumerate(zip(*values, strict=True)):
        lines.append(f"{task}," + ",".join(repr(float(v)) for v in row))
    return "\n".join(lines) + "\n"
