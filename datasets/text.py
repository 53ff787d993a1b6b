"""Character-level language modelling on a text corpus that an install brings: a CPU-scale
stand-in for the thesis' language-model experiments (ch. 3 trains at scale on the Pile).

The corpus ``pydoc-topics`` is the help text of Python's ``pydoc`` (``pydoc_data/topics.py``,
in the standard library of every CPython install, Debian's ``libpython3.X-stdlib`` among
them; PSF License 2.0): about 465,000 characters on Python 3.11. Nothing is downloaded. Its
text differs between Python versions, so a run records the file it read with its SHA-256.

Topics are split by their sorted names: every tenth is held out for validation, the one five
after it for test, the rest are for training. A task is a window of T + 1 characters of a
split's text: inputs the first T characters (one-hot), targets the next ones, every
position scored. The vocabulary is printable ASCII, the newline, and one symbol for
anything else.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F

from mesabench_core import ConfigError, param
from mesabench_datasets.data_root import note_file_read
from mesabench_datasets.tasks import Problem, Split, TaskBatch

#: The characters modelled; every other character maps to the last index (unknown).
ALPHABET = "\n" + "".join(chr(c) for c in range(32, 127))
VOCAB = len(ALPHABET) + 1
_INDEX = {ch: i for i, ch in enumerate(ALPHABET)}


def encode(text: str) -> torch.Tensor:
    """Characters -> indices in [0, VOCAB)."""
    return torch.tensor([_INDEX.get(ch, VOCAB - 1) for ch in text], dtype=torch.long)


def pydoc_topics() -> tuple[dict[str, str], Path]:
    """The ``pydoc`` help topics (name -> text) and the file they come from."""
    from pydoc_data.topics import topics

    origin = importlib.util.find_spec("pydoc_data.topics").origin
    return dict(topics), Path(origin)


def split_documents(documents: Mapping[str, str]) -> dict[Split, str]:
    """The documents' text by split (by sorted name: every 10th for val, 5 after it for test),
    each document followed by a blank line."""
    parts: dict[Split, list[str]] = {"train": [], "val": [], "test": []}
    for k, name in enumerate(sorted(documents)):
        split: Split = "val" if k % 10 == 0 else "test" if k % 10 == 5 else "train"
        parts[split].append(documents[name].strip() + "\n\n")
    return {split: "".join(texts) for split, texts in parts.items()}


@dataclass(frozen=True)
class TextConfig:
    corpus: Literal["pydoc-topics"] = param("pydoc-topics", help="the installed text corpus")
    length: int = param(64, min=2, help="characters per sequence T")

    def build(self) -> TextTasks:
        return TextTasks(self)


class TextTasks:
    task_block = 100

    def __init__(self, config: TextConfig, documents: Mapping[str, str] | None = None):
        """``documents`` replaces the corpus (a fixture in tests)."""
        self.config = config
        self._documents = documents
        self._splits: dict[Split, torch.Tensor] | None = None
        self.problem = Problem(
            input_shape=(VOCAB,), output_dim=VOCAB, loss="cross_entropy", network="sequence",
            causal=True,
        )  # fmt: skip

    def prepare(self) -> None:
        if self._splits is not None:
            return
        documents = self._documents
        if documents is None:
            documents, origin = pydoc_topics()
            note_file_read(origin)
        texts = split_documents(documents)
        self._splits = {split: encode(text) for split, text in texts.items()}
        for split, codes in self._splits.items():
            if len(codes) <= self.config.length:
                raise ConfigError(f"length: at most {len(codes) - 1} on this corpus (its {split} "
                                  f"text has {len(codes)} characters; got "
                                  f"{self.config.length})")  # fmt: skip

    def sample(self, num_tasks: int, generator: torch.Generator, split: Split = "train"):
        self.prepare()
        codes = self._splits[split].to(generator.device)
        span = self.config.length + 1
        starts = torch.randint(0, len(codes) - span + 1, (num_tasks,), generator=generator,
                               device=generator.device)  # fmt: skip
        windows = codes[starts[:, None] + torch.arange(span, device=generator.device)]
        inputs = F.one_hot(windows[:, :-1], VOCAB).float()
        targets = windows[:, 1:]
        return TaskBatch(inputs, targets, inputs, targets)

    def method_defaults(self) -> dict[str, object]:
        return {}
