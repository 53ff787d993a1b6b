"""Multi-query associative recall (MQAR; Arora et al. 2024, "Zoology", sec. 3): the synthetic
task that separates linear-attention variants from softmax attention.

A sequence lists P key-value pairs (k_1 v_1 ... k_P v_P: keys from the first half of the
vocabulary, values from the second), then a query region in which every key appears once
again at a random position, the other positions holding the filler token 0. At the position
of a queried key the target is its value; no other position is scored (target
:data:`UNSCORED`). Inputs are one-hot ``[T, V]`` rows; the problem is causal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mesabench_core import ConfigError, param
from mesabench_datasets.tasks import UNSCORED, Problem, Split, TaskBatch


@dataclass(frozen=True)
class RecallConfig:
    vocab: int = param(64, min=8, help="vocabulary size V (keys: 1..V/2 - 1, values: V/2..V-1)")
    pairs: int = param(8, min=1, help="key-value pairs P per sequence")
    length: int = param(64, min=4, help="sequence length T (2P pair tokens, then the queries)")

    def check(self) -> None:
        if self.pairs > self.vocab // 2 - 1:
            raise ConfigError(f"pairs: at most vocab / 2 - 1 = {self.vocab // 2 - 1} distinct "
                              f"keys for vocab {self.vocab} (got {self.pairs})")  # fmt: skip
        if self.length < 3 * self.pairs:
            raise ConfigError(f"length: at least 3 * pairs = {3 * self.pairs} (2P pair tokens "
                              f"and a query for each key; got {self.length})")  # fmt: skip

    def build(self) -> RecallTasks:
        return RecallTasks(self)


class RecallTasks:
    task_block = 100

    def __init__(self, config: RecallConfig):
        self.config = config
        self.problem = Problem(
            input_shape=(config.vocab,),
            output_dim=config.vocab,
            loss="cross_entropy",
            network="sequence",
            causal=True,
        )

    def sample(self, num_tasks: int, generator: torch.Generator, split: Split = "train"):
        c, device = self.config, generator.device
        half = c.vocab // 2

        def draw_without_replacement(n: int, high: int) -> torch.Tensor:
            # The first n of a random permutation per sequence: [num_tasks, n] in [0, high).
            scores = torch.rand(num_tasks, high, generator=generator, device=device)
            return scores.argsort(dim=1)[:, :n]

        keys = 1 + draw_without_replacement(c.pairs, half - 1)
        values = half + torch.randint(
            0, c.vocab - half, (num_tasks, c.pairs), generator=generator, device=device
        )
        region = c.length - 2 * c.pairs
        slots = 2 * c.pairs + draw_without_replacement(c.pairs, region)  # where each key recurs
        tokens = torch.zeros(num_tasks, c.length, dtype=torch.long, device=device)
        targets = torch.full_like(tokens, UNSCORED)
        tokens[:, 0 : 2 * c.pairs : 2], tokens[:, 1 : 2 * c.pairs : 2] = keys, values
        tokens.scatter_(1, slots, keys)
        targets.scatter_(1, slots, values)
        inputs = F.one_hot(tokens, c.vocab).float()
        return TaskBatch(inputs, targets, inputs, targets)

    def prepare(self) -> None:
        """Synthetic: nothing to load."""

    def method_defaults(self) -> dict[str, object]:
        return {}
