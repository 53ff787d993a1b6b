"""Multi-query associative recall: the sequences, and scoring at the queried positions only."""

from __future__ import annotations

import pytest
import torch

from benchmarks.planning.config import ConfigError
from benchmarks.planning.plan import plan_run
from mesabench_datasets.recall import RecallConfig
from mesabench_datasets.tasks import UNSCORED, seeded_generator
from methods.common.losses import per_task_accuracy, per_task_loss


def test_every_key_is_queried_once_and_its_target_is_its_value():
    config = RecallConfig(vocab=16, pairs=3, length=12)
    batch = config.build().sample(50, seeded_generator(0))
    tokens = batch.query_x.argmax(-1)
    assert batch.query_x.shape == (50, 12, 16) and torch.equal(batch.query_x.sum(-1),
                                                                torch.ones(50, 12))  # fmt: skip
    for seq, target in zip(tokens.tolist(), batch.query_y.tolist(), strict=True):
        keys, values = seq[0:6:2], seq[1:6:2]
        assert len(set(keys)) == 3 and all(1 <= k < 8 for k in keys)
        assert all(8 <= v < 16 for v in values)
        scored = [t for t in range(12) if target[t] != UNSCORED]
        assert len(scored) == 3 and min(scored) >= 6  # the queries follow the pairs
        for t in scored:  # a queried key's target is the value it was paired with
            assert target[t] == values[keys.index(seq[t])]
        assert all(seq[t] == 0 for t in range(6, 12) if t not in scored)  # filler
    assert torch.equal(batch.support_x, batch.query_x)


def test_the_same_generator_draws_the_same_sequences():
    source = RecallConfig().build()
    a, b = source.sample(4, seeded_generator(3)), source.sample(4, seeded_generator(3))
    assert torch.equal(a.query_x, b.query_x) and torch.equal(a.query_y, b.query_y)


def test_loss_and_accuracy_count_the_scored_positions_only():
    target = torch.tensor([[UNSCORED, 2, UNSCORED, 0], [1, UNSCORED, UNSCORED, UNSCORED]])
    logits = torch.zeros(2, 4, 3)
    logits[0, 1, 2] = logits[0, 3, 1] = 5.0  # right at position 1, wrong at 3
    logits[1, 0, 1] = 5.0
    logits[:, :, 0] += torch.tensor([[9.0, 0, 9.0, 0], [0, 9.0, 9.0, 9.0]])  # unscored: any
    torch.testing.assert_close(per_task_accuracy(logits, target), torch.tensor([0.5, 1.0]))
    right = torch.log1p(2 * torch.exp(torch.tensor(-5.0)))  # -log softmax of the 5.0 logit
    wrong = torch.log(2 + torch.exp(torch.tensor(5.0)))  # -log softmax of a 0 beside it
    torch.testing.assert_close(per_task_loss(logits, target, "cross_entropy"),
                               torch.stack([(right + wrong) / 2, right]))  # fmt: skip


def test_recall_settings_are_checked():
    with pytest.raises(ConfigError, match="pairs: at most vocab / 2 - 1 = 7"):
        plan_run("mesa", "mqar", overrides={"vocab": "16", "pairs": "8"}, device="cpu")
    with pytest.raises(ConfigError, match="length: at least 3 \\* pairs = 24"):
        plan_run("mesa", "mqar", overrides={"length": "20"}, device="cpu")
