"""What every protocol holds (its config, the task source, the run's seed, where results go)
and the steps every protocol's loop takes alike: stop on divergence, measure sparsity,
checkpoint and restore, report progress."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.recording import Recorder
from methods.api import Method

ProgressCallback = Callable[[int, dict[str, float]], None]


class DivergenceError(RuntimeError):
    """The training loss became NaN or infinite."""


def overall_sparsity(method: Method, per_tensor: dict[str, float]) -> float:
    """Parameter-weighted mean sparsity over the modulated tensors."""
    sizes = method.tensor_sizes() or dict.fromkeys(per_tensor, 1)
    total = sum(sizes[k] for k in per_tensor)
    return sum(per_tensor[k] * sizes[k] for k in per_tensor) / max(total, 1)


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

    def stop_if_diverged(self, loss: float, where: str) -> None:
        """Raise :class:`DivergenceError` ("diverged at WHERE: training loss is nan")."""
        if not math.isfinite(loss):
            raise DivergenceError(f"diverged at {where}: training loss is {loss}")

    @staticmethod
    def sparsity_metrics(method: Method, per_tensor: dict[str, float], prefix: str) -> dict:
        """``prefix + tensor`` for each tensor's sparsity and ``prefix + "overall"`` (the
        parameter-weighted mean); empty when the method gates nothing."""
        if not per_tensor:
            return {}
        out = {f"{prefix}{k}": v for k, v in per_tensor.items()}
        out[f"{prefix}overall"] = overall_sparsity(method, per_tensor)
        return out

    @staticmethod
    def snapshot(method: Method, iteration: int, elapsed: float, **progress: Any) -> dict:
        """A checkpoint: the step to continue from (``iteration``, what ``--resume`` shows),
        the method's state, the time spent so far, the global RNG, and the protocol's own
        progress (curves, accuracy matrix, ...), all copied so that training on cannot
        change them."""
        return {
            "iteration": iteration,
            "method": copy.deepcopy(method.state_dict()),
            "elapsed": elapsed,
            "torch_rng": torch.get_rng_state(),
            **progress,
        }

    @staticmethod
    def restore(method: Method, checkpoint: dict[str, Any]) -> dict[str, Any]:
        """Load the method's state and the global RNG from a :meth:`snapshot`; returns the
        checkpoint for the protocol's own fields."""
        method.load_state_dict(checkpoint["method"])
        torch.set_rng_state(checkpoint["torch_rng"])
        return checkpoint

    def report(self, done: int, metrics: dict[str, float]) -> None:
        """Tell the progress bar (if any) how far the run is."""
        if self.progress is not None:
            self.progress(done, metrics)
