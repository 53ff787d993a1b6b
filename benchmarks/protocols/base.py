"""What every protocol holds: its config, the task source, the run's seed, where results go."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from benchmarks.recording import Recorder

ProgressCallback = Callable[[int, dict[str, float]], None]


class Protocol:
    """Base of the protocols: owns the loop and the measuring; methods only answer calls."""

    name = ""

    def __init__(
        self,
        config: Any,
        source: Any,
        seed: int,
        recorder: Recorder,
        device: torch.device,
        progress: ProgressCallback | None = None,
    ):
        self.config = config
        self.source = source
        self.seed = seed
        self.recorder = recorder
        self.device = device
        self.progress = progress
