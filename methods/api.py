"""The Method API: what every learner implements so that a protocol can drive it.

A method never opens files, talks to MLflow or loops over a dataset. The protocol hands it
data (task batches, or one batch of a stream at a time) and asks it for predictions; the
method keeps its own parameters and optimisers and can save and restore them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor

from mesabench_core import IncompatibleSetting  # noqa: F401  (re-exported: the Method API's)
from mesabench_datasets.tasks import Problem, TaskBatch, TaskSource


class ArtifactLog(Protocol):
    """Where a method's analyses write: the run's recorder, as the protocol passes it."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def log_figure(self, figure: Any, path: str) -> None: ...

    def log_text(self, text: str, path: str) -> None: ...


@dataclass(frozen=True)
class MethodConfig:
    """Base class for method configs (frozen dataclasses, validated by the harness)."""


#: Settings a benchmark may give every method at once, each with its one meaning. A method
#: takes such a benchmark default only for the names in its ``shared_settings``; any other
#: field keeps the method's own default, so a default meant for the MAML family never
#: overwrites a plugin's same-named field that means something else.
SHARED_SETTINGS: dict[str, str] = {
    "inner_lr": "step size of an inner (per-task adaptation) step at initialisation",
    "inner_steps": "inner-loop steps per task during meta-training",
    "test_inner_steps": "inner-loop steps per task at meta-test",
    "glances": "gradient steps taken on each incoming batch of a stream",
    "modulation_lr": "learning rate of learned step sizes or gradient masks",
    "rate_init": "initial value of learned per-parameter step sizes",
    "buffer_size": "replay buffer capacity, in samples",
    "online_lr": "learning rate of the updates made on the stream",
}


@dataclass(frozen=True)
class FloatRange:
    """A real setting to tune between ``low`` and ``high`` (on a log scale if ``log``)."""

    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class IntRange:
    """An integer setting to tune between ``low`` and ``high``, both included."""

    low: int
    high: int
    log: bool = False


@dataclass(frozen=True)
class Choice:
    """A setting to tune among ``values``."""

    values: tuple[Any, ...]


#: What ``tune`` may search for one config field.
Space = FloatRange | IntRange | Choice


class Method(ABC):
    """A learner that learns to learn.

    Subclasses set ``Config`` (a frozen dataclass with defaults) and ``protocols`` (the
    protocols they support). Learners derive from :class:`EpisodicMethod` or
    :class:`ContinualMethod`, which add the calls their protocol makes.
    """

    Config: ClassVar[type] = MethodConfig
    protocols: ClassVar[frozenset[str]] = frozenset()
    #: True if ``predict``'s ``steps`` changes anything (gradient-based adaptation).
    uses_inner_steps: ClassVar[bool] = False
    #: Names of :data:`SHARED_SETTINGS` this method takes from a benchmark's defaults (its
    #: fields of those names mean what the vocabulary says). None by default: a new method
    #: opts in explicitly; the built-in families take them all.
    shared_settings: ClassVar[frozenset[str]] = frozenset()
    #: The plugin API version a plugin was written for (``benchmarks.plugin_api``), as a
    #: literal; the registry refuses a plugin method without it. Built-ins need none.
    api_version: ClassVar[int | None] = None
    #: Precisions the method runs at (``precision``): bf16 autocast suits networks trained
    #: in float32; an algorithm computed in float64 (the reference solvers) stays fp32.
    precisions: ClassVar[frozenset[str]] = frozenset({"fp32", "bf16"})
    #: Whether ``compile`` may compile the method's networks (a method opts in once its
    #: step is known to trace: functional inner loops, peers' own loops may not).
    compilable: ClassVar[bool] = False
    #: Training steps the run will take (episodic: outer iterations; continual: batches of
    #: the stream; online: stream steps), set by the protocol before the first training
    #: call, e.g. for learning-rate schedules. 0 until then.
    total_steps: int = 0

    @classmethod
    def search_space(cls, config: Any) -> dict[str, Space]:
        """The config fields ``tune`` searches for this method (field name -> space), given
        the configuration it would otherwise run; empty: the method is not tunable."""
        return {}

    def __init__(self, config: Any, problem: Problem, device: torch.device):
        self.config = config
        self.problem = problem
        self.device = device

    @classmethod
    def execution_choices(cls, config: Any, problem: Problem, device: str) -> dict[str, str]:
        """How the method computes this run where the config leaves it to the method
        (``task_batching=auto``: vmap or a per-task loop, by network and device), as
        ``setting -> choice``: recorded with the run (the ``mesabench.execution`` tag), so a
        reader sees which form ran. Speed only: the same numbers either way. ``threads``
        (a count, as text) is applied by the run itself: torch's intra-op threads on the
        CPU for the whole run, at most the process's own. Default: none."""
        return {}

    @classmethod
    def check_problem(cls, problem: Problem) -> None:
        """Raise ``ConfigError`` (``benchmarks.plugin_api``) if the method cannot learn
        ``problem``."""
        return None

    @classmethod
    def check_config(cls, config: Any, problem: Problem) -> None:
        """Raise :class:`IncompatibleSetting` if ``config`` cannot work on ``problem`` (a
        network that does not fit its inputs, say). Called with the resolved config before
        anything is recorded; the default accepts every config."""
        return None

    @classmethod
    def check_run(cls, config: Any, problem: Problem, protocol: Any,
                  chosen: frozenset[str]) -> None:  # fmt: skip
        """Like :meth:`check_config`, seeing the run's protocol settings too (a schedule
        longer than the run's ``iterations``) and which of ``config``'s fields a preset or
        the user chose (``chosen``: field names), as against defaults (the method's, its
        variant's or the benchmark's), so that a check can refuse a user's mistake without
        refusing a default that a shortened run leaves unreachable. Raise
        :class:`IncompatibleSetting`; the default accepts every run."""
        return None

    def compile(self, backend: str) -> None:
        """Compile the method's networks in place (``nn.Module.compile``: state-dict keys
        unchanged, so checkpoints and saved learners stay interchangeable). Called before
        the first step when a run asks for ``compile``; only where ``compilable``."""
        for value in vars(self).values():
            if isinstance(value, torch.nn.Module):
                value.compile(backend=backend)

    def sparsity(self) -> dict[str, float]:
        """Fraction of gated-off gradient entries per parameter tensor (empty if none)."""
        return {}

    def tensor_sizes(self) -> dict[str, int]:
        """Number of entries of each tensor named by :meth:`sparsity` (for weighting)."""
        return {}

    def num_parameters(self) -> int:
        """Learned entries, as the leaderboard's ``params`` column counts them."""
        return sum(t.numel() for t in self.state_tensors())

    def state_tensors(self) -> list[Tensor]:
        """The learned tensors. By default found on the method itself: the parameters of
        every ``nn.Module`` attribute and every tensor attribute that requires grad (also
        inside lists, tuples and dicts), each counted once. Override to count otherwise."""
        found: dict[int, Tensor] = {}

        def visit(value: Any) -> None:
            if isinstance(value, torch.nn.Module):
                for parameter in value.parameters():
                    found.setdefault(id(parameter), parameter)
            elif isinstance(value, Tensor):
                if value.requires_grad:
                    found.setdefault(id(value), value)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    visit(item)
            elif isinstance(value, dict):
                for item in value.values():
                    visit(item)

        for attribute in vars(self).values():
            visit(attribute)
        return list(found.values())

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training exactly (weights and optimiser states)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class EpisodicMethod(Method):
    """A learner driven by the episodic protocol: meta-train on task batches, then adapt."""

    protocols: ClassVar[frozenset[str]] = frozenset({"episodic"})

    @abstractmethod
    def meta_train_step(self, batch: TaskBatch) -> dict[str, float]:
        """One outer update on a batch of tasks; returns at least ``{"loss": ...}``."""

    @abstractmethod
    def predict(
        self, support_x: Tensor, support_y: Tensor, query_x: Tensor, steps: int | None = None
    ) -> Tensor:
        """Predictions ``[T, Q, out]`` for the queries of ``T`` tasks after adapting to their
        support sets (``steps`` inner steps for gradient learners, ignored otherwise)."""

    def analyse(self, source: TaskSource, log: ArtifactLog, seed: int) -> dict[str, float]:
        """Analyses that need the method's insides, run after the meta-test on the weights
        it was scored with (held-out tasks drawn with ``seed``). Curves and figures go to
        ``log``; returns extra ``final/`` metrics, each declared with
        ``declare_metric``. None by default."""
        return {}

    def monitor(self, source: TaskSource, seed: int) -> dict[str, float]:
        """Quantities to follow over training, measured at every meta-validation on
        held-out tasks drawn with ``seed`` and logged with the iteration under the names
        returned (``monitor/...``). Nothing by default."""
        return {}


class ContinualMethod(Method):
    """A learner driven by the continual protocol: one batch of a task stream at a time.

    The protocol announces task boundaries during training (``begin_task`` / ``end_task``)
    but never tells the learner which task a test input comes from.
    """

    protocols: ClassVar[frozenset[str]] = frozenset({"continual"})

    def begin_task(self, task: int) -> None:
        """Called before the first batch of training task ``task``."""

    @abstractmethod
    def observe(self, x: Tensor, y: Tensor) -> dict[str, float]:
        """Learn from one incoming batch; returns ``{"loss": ...}`` when it computed one."""

    def end_task(self, task: int) -> None:
        """Called after the last batch of training task ``task``."""

    @abstractmethod
    def predict(self, x: Tensor) -> Tensor:
        """Logits ``[N, classes]`` for a batch of inputs from any task seen so far."""


class OnlineMethod(Method):
    """A learner driven by the online protocol (OSAKA): test-then-train on a stream.

    At every step the protocol first asks for predictions on the incoming batch, scores
    them, and only then hands over the labels (``observe``). Task boundaries are never
    announced; a learner that detects them says so in ``observe``'s result
    (``{"boundary": 1.0}``). A learner that meta-trains before the stream returns its
    episodic learner from :meth:`pretrainer`; the protocol meta-trains it first.
    """

    protocols: ClassVar[frozenset[str]] = frozenset({"online"})

    def reports_boundaries(self) -> bool:
        """True if ``observe`` reports detected task boundaries (scored by precision and
        recall against the hidden switches)."""
        return False

    def pretrainer(self) -> EpisodicMethod | None:
        """The episodic learner to meta-train before the stream (it shares this method's
        weights), or None to start the stream from scratch."""
        return None

    @abstractmethod
    def predict(self, x: Tensor) -> Tensor:
        """Logits ``[N, classes]`` for the incoming batch, before its labels are known."""

    @abstractmethod
    def observe(self, x: Tensor, y: Tensor) -> dict[str, float]:
        """Learn from the batch just scored; may return ``loss`` and ``boundary``."""
