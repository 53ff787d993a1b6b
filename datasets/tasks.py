"""The unit of data every episodic learner sees: a batch of tasks as stacked tensors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from torch import Tensor

LossKind = Literal["mse", "half_mse", "half_sse", "cross_entropy"]
#: A classification target that is not scored: a causal sequence task may score some
#: positions only (torch's ``ignore_index`` default, so its losses skip it alike).
UNSCORED = -100
Split = Literal["train", "val", "test"]


def to_device(t: Tensor, device: torch.device | str) -> Tensor:
    """``t`` on ``device``. From the host to a GPU through pinned memory and without waiting
    for the copy: the device works on the previous step meanwhile (torch keeps the pinned
    block until the copy is done)."""
    device = torch.device(device)
    if device.type == "cuda" and t.device.type == "cpu":
        # Pinning needs memory of its own: a broadcast view (an expanded tensor) is copied.
        return t.contiguous().pin_memory().to(device, non_blocking=True)
    return t.to(device)


@dataclass(frozen=True)
class TaskBatch:
    """``T`` tasks, each with a support set (for adaptation) and a query set (for scoring).

    Shapes: ``support_x [T, S, *input]``, ``support_y [T, S, out]`` (regression) or
    ``[T, S]`` class indices (classification); likewise for the query set.
    """

    support_x: Tensor
    support_y: Tensor
    query_x: Tensor
    query_y: Tensor

    @property
    def num_tasks(self) -> int:
        return self.support_x.shape[0]

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> TaskBatch:
        """The batch on ``device``; with ``dtype``, its floating-point tensors cast too (class
        indices keep their integer type)."""

        def moved(t: Tensor) -> Tensor:
            if dtype is not None and t.is_floating_point():
                return to_device(t, device).to(dtype)
            return to_device(t, device)

        return TaskBatch(*(moved(t) for t in self))

    def __iter__(self):
        return iter((self.support_x, self.support_y, self.query_x, self.query_y))

    def slice(self, start: int, stop: int) -> TaskBatch:
        return TaskBatch(*(t[start:stop] for t in self))


@dataclass(frozen=True)
class Problem:
    """What a learner may know about its tasks before it sees any data."""

    input_shape: tuple[int, ...]
    output_dim: int
    loss: LossKind
    network: str  # the benchmark's default network for gradient-based learners
    #: Sequence tasks: support and query are the same sequence, and the prediction at
    #: position t may use positions <= t only.
    causal: bool = False
    #: How token-based in-context learners receive a task: constructed tokens (x_i, y_i)
    #: or the interleaved natural sequence x_1, y_1, ..., x_q (von Oswald et al.
    #: 2023, sec. 2 and 4).
    tokens: Literal["constructed", "interleaved"] = "constructed"
    #: Context points per task, where fixed (token-based learners size positions by it).
    context_size: int = 0


class TaskSource(Protocol):
    """Anything that samples task batches reproducibly from a generator.

    ``split`` names the pool the tasks come from: meta-training, meta-validation or
    meta-test classes for image benchmarks; synthetic families draw every split alike.
    """

    problem: Problem
    #: Evaluation tasks are drawn this many at a time (fixed per source: part of the test set).
    task_block: int

    def sample(
        self, num_tasks: int, generator: torch.Generator, split: Split = "train"
    ) -> TaskBatch: ...

    def prepare(self) -> None:
        """Load and check any data the source needs (raises with what to do if missing)."""

    def method_defaults(self) -> dict[str, object]: ...


class TaskConfig(Protocol):
    """A task source's settings: a frozen dataclass that builds the source it describes."""

    def build(self) -> TaskSource: ...


def seeded_generator(*keys: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator on ``device`` whose seed depends only on ``keys`` (e.g. seed, iteration).

    Task sources draw on the generator's device, so tasks are generated where they are used.
    """
    seed = 0
    for key in keys:
        # An explicit, stable mix: the stream must never depend on the interpreter.
        seed = (seed * 1_000_003 + int(key)) % (2**63 - 1)
    return torch.Generator(device=device).manual_seed(seed)
