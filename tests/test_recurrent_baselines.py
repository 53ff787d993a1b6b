"""The recurrent baselines read what they should: each LSTM direction where it has read the
whole sequence, over the interleaved sequence or the constructed pairs (the blog post's)."""

from __future__ import annotations

import torch

from benchmarks.planning.plan import plan_run
from benchmarks.running.execute import build_method
from mesabench_datasets.tokens import pair_tokens


def _method(name: str, **settings: str):
    plan = plan_run(name, "linreg-icl", overrides={"layers": "2", "hidden": "8", **settings},
                    device="cpu")  # fmt: skip
    return build_method(plan)


def test_pair_tokens_are_the_context_pairs_then_the_query_with_a_zero_y_slot():
    sx, sy = torch.arange(6.0).view(1, 3, 2), torch.tensor([[[10.0], [11.0], [12.0]]])
    qx = torch.tensor([[[7.0, 8.0], [9.0, 9.5]]])
    tokens = pair_tokens(sx, sy, qx)
    assert tokens.shape == (2, 4, 3)  # one sequence per query: N + 1 tokens of d + m
    expected_context = [[0.0, 1.0, 10.0], [2.0, 3.0, 11.0], [4.0, 5.0, 12.0]]
    for q, last in enumerate(([7.0, 8.0, 0.0], [9.0, 9.5, 0.0])):
        assert tokens[q].tolist() == [*expected_context, last]


def test_the_bilstm_reads_both_directions_where_each_has_read_the_whole_sequence():
    method = _method("bilstm")
    tokens = torch.randn(5, 7, 11)
    out, (h_n, _) = method.model.lstm(tokens)
    # h_n's last two rows: the top layer's forward state after the last token and its
    # backward state after the first (torch's own bookkeeping, independent of the readout).
    torch.testing.assert_close(method.readout(out), torch.cat([h_n[-2], h_n[-1]], dim=-1))
    # At the query token the backward direction has read the query alone: not what is read.
    hidden = method.config.hidden
    assert not torch.allclose(method.readout(out)[:, hidden:], out[:, -1, hidden:])


def test_the_lstm_reads_its_state_at_the_query_token():
    method = _method("lstm")
    tokens = torch.randn(5, 7, 11)
    out, (h_n, _) = method.model.lstm(tokens)
    torch.testing.assert_close(method.readout(out), h_n[-1])


def test_every_context_pair_reaches_the_bilstms_prediction():
    method = _method("bilstm", input_tokens="pairs")
    sx, sy, qx = torch.randn(1, 10, 10), torch.randn(1, 10, 1), torch.randn(1, 1, 10)
    base = method.forward(sx, sy, qx)
    for i in (0, 9):  # the first and the last context pair
        moved = sy.clone()
        moved[0, i] += 1.0
        assert not torch.allclose(method.forward(sx, moved, qx), base)
