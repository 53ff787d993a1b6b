"""Character-level language modelling: the installed corpus, its splits and windows (on a
small fixture), and perplexity against a model with a known answer."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.planning.plan import plan_run
from benchmarks.protocols import PROTOCOLS
from benchmarks.protocols.recording import MemoryRecorder
from benchmarks.running.execute import build_method
from mesabench_datasets.data_root import files_read
from mesabench_datasets.tasks import seeded_generator
from mesabench_datasets.text import ALPHABET, VOCAB, TextConfig, TextTasks, encode, pydoc_topics

FIXTURE = {f"topic{k:02d}": f"Topic {k}: the quick brown fox jumps over the lazy dog " * 3
           for k in range(20)}  # fmt: skip


def decode(codes: torch.Tensor) -> str:
    return "".join(ALPHABET[i] if i < len(ALPHABET) else "?" for i in codes.tolist())


def test_windows_are_consecutive_characters_of_their_split():
    source = TextTasks(TextConfig(length=16), documents=FIXTURE)
    batch = source.sample(8, seeded_generator(0), "test")
    assert batch.query_x.shape == (8, 16, VOCAB) and batch.query_y.shape == (8, 16)
    test_text = "".join(FIXTURE[n].strip() + "\n\n" for n in ("topic05", "topic15"))
    for x, y in zip(batch.query_x, batch.query_y, strict=True):
        window = decode(x.argmax(-1)) + decode(y[-1:])
        assert decode(y) == window[1:]  # targets: the next characters
        assert window in test_text  # from the held-out topics 5 and 15 only
    again = source.sample(8, seeded_generator(0), "test")
    assert torch.equal(again.query_y, batch.query_y)


def test_topics_split_by_name_into_disjoint_train_val_and_test():
    from mesabench_datasets.text import split_documents

    splits = split_documents(FIXTURE)
    assert "Topic 0:" in splits["val"] and "Topic 10:" in splits["val"]
    assert "Topic 5:" in splits["test"] and "Topic 15:" in splits["test"]
    assert "Topic 0:" not in splits["train"] and "Topic 5:" not in splits["train"]
    assert sum(s.count("Topic ") for s in splits.values()) == 3 * 20


def test_unknown_characters_map_to_one_symbol():
    assert encode("a\né").tolist() == [ALPHABET.index("a"), 0, VOCAB - 1]


def test_the_installed_corpus_loads_and_a_run_records_the_file_it_read():
    topics, origin = pydoc_topics()
    assert len(topics) > 50 and origin.name == "topics.py"
    TextConfig().build().prepare()
    assert origin.resolve() in files_read()


def test_a_model_that_predicts_nothing_has_the_vocabulary_as_its_perplexity():
    """Zero readout weights and bias: every character equally likely, so the cross-entropy
    is log V and the perplexity V exactly, whatever the text."""
    plan = plan_run("causal_lsa", "lm-pydoc",
                    overrides={"test_tasks": "50", "eval_chunk": "50"},
                    device="cpu")  # fmt: skip
    method = build_method(plan)
    with torch.no_grad():
        method.model.readout.weight.zero_()
        method.model.readout.bias.zero_()
    protocol = PROTOCOLS["episodic"](plan.protocol, plan.source, plan.seed, MemoryRecorder(),
                                     torch.device("cpu"))  # fmt: skip
    final = protocol.meta_test(method)
    assert final["final/test_loss"] == pytest.approx(math.log(VOCAB), rel=1e-6)
    assert final["final/test_perplexity"] == pytest.approx(VOCAB, rel=1e-6)


def test_a_sequence_longer_than_a_split_is_refused_in_one_line_and_nothing_is_written(
    tmp_path, capsys
):
    # In-process: what is refused and what is written are the question, not the process.
    from benchmarks.cli.main import main

    db = tmp_path / "m.db"
    code = main(["run", "--method", "causal_softmax", "--benchmark", "lm-pydoc",
                 "--set", "length=100000", "--tracking-uri", f"sqlite:///{db}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().startswith("error: length: at most ") and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and not db.exists()
