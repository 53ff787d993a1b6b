"""The run skeleton every protocol shares.

A protocol subclasses :class:`Protocol` and writes only what differs:

- ``begin(method, state)``: its own progress for a fresh run, in ``state.progress``;
- ``train(method, state)``: its training loop. After each training step it calls
  :meth:`Protocol.step_done`; at its own cadence :meth:`~Protocol.log`,
  :meth:`~Protocol.record_sparsity` and :meth:`~Protocol.save_checkpoint`; evaluation that
  is not training time runs inside ``with state.untimed():``;
- ``finish(method, state)``: its ``final/`` metrics once training is over;
- ``log_figures(state)``: its own figures and tables.

:meth:`Protocol.run` does the rest alike for every protocol: restore a checkpoint (the
method's state, the RNG, the clock, the sparsity history and the protocol's progress), keep
the training clock, stop on divergence, show progress, and end the run: training time,
parameter count and final sparsity added to the protocol's metrics, all logged at one step,
sparsity figures drawn. Interruption needs nothing here: the last checkpoint is the resume
point, and the runner records the run KILLED.

Subclassing registers a protocol by its ``name`` in :data:`PROTOCOLS`; the package imports
every module in it, so a new protocol is one new module (plus its method face in
``methods/api.py``).
"""

from __future__ import annotations

import copy
import logging
import math
import random
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from benchmarks.metrics.catalog import declare_metric
from benchmarks.protocols.recording import Recorder
from benchmarks.protocols.summary import sparsity_rises
from mesabench_core import param
from methods.api import Method

log = logging.getLogger("mesabench")


def peak_memory(device: torch.device) -> dict[str, float]:
    """The peak memory of this process so far, in MiB: its resident set's high-water mark
    (torch, data and all, as ``top`` would show it), and on a CUDA device what torch
    allocated there at most. A process that ran other runs before (the Python API) reports
    their peak too."""
    out = {"final/peak_rss_mib": _resident_high_water_mib()}
    if device.type == "cuda":
        out["final/peak_gpu_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out


def _resident_high_water_mib() -> float:
    # Linux's getrusage keeps the largest resident set across exec, so a run started by a
    # big process (pytest, a sweep's driver) would report its parent's peak; the kernel's
    # VmHWM belongs to this process image alone. getrusage elsewhere (macOS: bytes).
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**10
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (2**20 if sys.platform == "darwin" else 2**10)

ProgressCallback = Callable[[int, dict[str, float]], None]

#: Protocol name -> protocol class, filled by subclassing :class:`Protocol`.
PROTOCOLS: dict[str, type[Protocol]] = {}


def protocol_for(config: Any) -> type[Protocol]:
    """The protocol whose ``Config`` ``config`` is (its exact type first, then a base)."""
    for exact in (True, False):
        for protocol in PROTOCOLS.values():
            if protocol.Config is None:
                continue
            if type(config) is protocol.Config if exact else isinstance(config, protocol.Config):
                return protocol
    known = ", ".join(f"{p.Config.__name__} ({n})" for n, p in PROTOCOLS.items() if p.Config)
    raise TypeError(f"no protocol takes a {type(config).__name__} config (known: {known})")


@dataclass(frozen=True)
class ExecutionSettings:
    """How a run computes, shared by every protocol's config: recorded in the plan and part
    of its identity where set (bf16 and a compiled step give other numbers than float32)."""

    precision: Literal["fp32", "bf16"] = param(
        "fp32", added="0.3",
        help="fp32, or bf16: the method's forward passes under torch.autocast (on the CPU "
        "too), where the method allows it")  # fmt: skip
    compile: Literal["off", "inductor", "eager"] = param(
        "off", added="0.3",
        help="torch.compile the method's networks: inductor (fused kernels), or eager (traced "
        "by dynamo and run as written: a check that the step compiles, at no gain)")  # fmt: skip


def execution_of(config: Any) -> ExecutionSettings:
    """A protocol config's execution settings: a plugin protocol's config that does not
    derive from :class:`ExecutionSettings` runs in float32, uncompiled."""
    return config if isinstance(config, ExecutionSettings) else ExecutionSettings()


@contextmanager
def executing(config: Any, method: Method, device: torch.device) -> Iterator[None]:
    """Run inside: the method compiled as the config's ``compile`` asks, forward passes
    under bf16 autocast where its ``precision`` asks."""
    settings = execution_of(config)
    if settings.compile != "off":
        method.compile(settings.compile)
    bf16 = settings.precision == "bf16"
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        yield


def full_precision(device: torch.device):
    """Autocast off: a method's analyses and monitors read its float32 weights as they are
    (the run's precision is how it trains and is scored, not how it is inspected)."""
    return torch.autocast(device.type, enabled=False)


class DivergenceError(RuntimeError):
    """The training loss became NaN or infinite."""


class MethodContractError(RuntimeError):
    """A method's hook returned what the protocol cannot score (another shape, not a
    tensor): the run stops there, FAILED, with one line naming the method, the hook and
    what was expected, instead of scoring a broadcast or failing much later."""


def checked_output(method: Any, hook: str, value: Any, expected: tuple[int, ...],
                   layout: str) -> torch.Tensor:  # fmt: skip
    """``value`` if it is a tensor of shape ``expected``; else :class:`MethodContractError`.
    ``layout`` names the axes as the Method API documents them (``[T, Q, out]``)."""
    shape = tuple(value.shape) if isinstance(value, torch.Tensor) else None
    if shape != tuple(expected):
        got = f"shape {list(shape)}" if shape is not None else f"a {type(value).__name__}"
        raise MethodContractError(
            f"{type(method).__name__}.{hook} returned {got}; it must return {layout} = "
            f"{list(expected)}"
        )
    return value


def overall_sparsity(method: Method, per_tensor: dict[str, float]) -> float:
    """Parameter-weighted mean sparsity over the modulated tensors."""
    sizes = method.tensor_sizes() or dict.fromkeys(per_tensor, 1)
    total = sum(sizes[k] for k in per_tensor)
    return sum(per_tensor[k] * sizes[k] for k in per_tensor) / max(total, 1)


@dataclass
class RunState:
    """Where a run stands: everything a checkpoint holds besides the method's state."""

    #: Training steps taken (outer iterations, stream batches, ...).
    done: int = 0
    #: Training seconds so far, this process and the ones before a resume.
    elapsed: float = 0.0
    #: (step, per-tensor sparsity) at each point the protocol recorded it.
    sparsity_history: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    #: The protocol's own progress (curves, accuracy matrix, best weights, ...).
    progress: dict[str, Any] = field(default_factory=dict)
    #: FLOPs of the run's first training step (counted once, kept across a resume: a later
    #: step may cost more, a replay buffer having filled).
    step_flops: float | None = None
    #: Where the seconds come from: a test hands in a clock of its own, so that what is
    #: counted does not hang on how busy the machine is.
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False, compare=False)
    _began: float | None = None
    _pauses: PauseWatch | None = field(default=None, repr=False, compare=False)

    def start_clock(self) -> None:
        self._pauses = PauseWatch().start()
        self._began = self.clock() - self.elapsed

    def seconds(self) -> float:
        """Training seconds up to now, less the time the process was stopped."""
        if self._began is None:
            return self.elapsed
        paused = self._pauses.paused_s if self._pauses is not None else 0.0
        return self.clock() - self._began - paused

    def stop_clock(self) -> None:
        self.elapsed = self.seconds()
        if self._pauses is not None:
            self._pauses.stop()
        self._began, self._pauses = None, None

    @contextmanager
    def untimed(self) -> Iterator[None]:
        """Time spent inside (evaluation, saving) does not count as training time."""
        running = self._began is not None
        self.stop_clock()
        try:
            yield
        finally:
            if running:
                self.start_clock()


class PauseWatch:
    """Time the process spent stopped (SIGSTOP, a suspended machine): a thread that wakes
    every :attr:`TICK` seconds counts any longer gap beyond :attr:`SLACK` as paused, since a
    stopped process cannot say when it stopped. (A busy machine delays a wake-up by far
    less than the slack.)"""

    TICK, SLACK = 0.25, 2.0

    def __init__(self) -> None:
        self.paused_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mesabench-pauses", daemon=True)

    def start(self) -> PauseWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(self.TICK):
            now = time.perf_counter()
            if now - last > self.TICK + self.SLACK:
                self.paused_s += now - last - self.TICK
            last = now


class Protocol:
    """Base of the protocols: owns the loop and the measuring; methods only answer calls."""

    #: The protocol's name, as runs and leaderboards show it (``protocol_name``).
    name: ClassVar[str] = ""
    #: Its config: a frozen dataclass. A benchmark spec whose protocol config is of this
    #: type uses this protocol (the spec never names it a second time).
    Config: ClassVar[type | None] = None
    #: The final metrics it logs, each ``(pattern, direction, words)`` as
    #: :func:`~benchmarks.metrics.catalog.declare_metric` takes them: declared when
    #: the class is defined, so that a new protocol is one module.
    metrics: ClassVar[tuple[tuple[str, str | None, str], ...]] = ()
    #: Leaderboard columns by default, in order (the first ranks). ``"a|b"``: the first of
    #: a, b that the runs logged; ``"prefix/*"``: every logged metric under the prefix.
    headline: ClassVar[tuple[str, ...]] = ()
    #: The sparsity history's x axis (figure label) and the table it is written to.
    sparsity_axis: ClassVar[tuple[str, str]] = ("iteration", "sparsity_over_iterations.csv")
    #: Which data it chooses the scored model on, as runs record it (the board's linter
    #: flags a protocol that says "test"): "none" when it scores the weights training
    #: ended with.
    selects_on: ClassVar[str] = "none"
    #: Steps the progress bar counts before this protocol's own (online pre-training).
    progress_offset: int = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            PROTOCOLS[cls.name] = cls
        for pattern, direction, words in cls.__dict__.get("metrics", ()):
            declare_metric(pattern, direction, words)  # type: ignore[arg-type]

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

    # -- what each protocol writes ---------------------------------------------------------
    def total_steps(self) -> int:
        """Training steps of the whole run (what ``step_done`` counts to)."""
        raise NotImplementedError

    def begin(self, method: Method, state: RunState) -> None:
        """Set ``state.progress`` for a fresh run (before the clock starts)."""

    def train(self, method: Method, state: RunState) -> None:
        """The protocol's training loop, from ``state`` to the end."""
        raise NotImplementedError

    def finish(self, method: Method, state: RunState) -> dict[str, float]:
        """The protocol's ``final/`` metrics (training is over, the clock stopped)."""
        raise NotImplementedError

    def final_step(self, state: RunState) -> int:
        """The step the ``final/`` metrics are logged at."""
        return state.done

    def first_step(self) -> Callable[[Method], Any]:
        """The first training step as :meth:`train` takes it, its data already drawn: a
        function of the method that takes it (for counting its floating-point operations on
        a copy, data preparation left out). A protocol without it records no
        ``final/step_flops``."""
        raise NotImplementedError

    def log_figures(self, state: RunState) -> None:
        """The protocol's own figures and tables."""

    def score(self, method: Method) -> dict[str, float]:
        """``final/`` metrics of an already trained learner, without training it (what
        ``evaluate`` records). Protocols that cannot score a learner apart from training it
        (online: test-then-train) leave this out."""
        raise NotImplementedError

    @classmethod
    def can_score(cls) -> bool:
        return cls.score is not Protocol.score

    def evaluate_learner(self, method: Method) -> dict[str, float]:
        """Score a trained ``method`` and log the ``final/`` metrics (at step 0)."""
        final = self.score(method)
        final["final/num_params"] = float(method.num_parameters())
        self.recorder.log_metrics(final, step=0)
        return final

    # -- the skeleton ----------------------------------------------------------------------
    def run(self, method: Method, checkpoint: dict[str, Any] | None = None) -> dict[str, float]:
        """Train (from ``checkpoint`` if given), evaluate, log and return the ``final/``
        metrics."""
        state = RunState()
        method.total_steps = self.total_steps()
        if checkpoint is None:
            self.begin(method, state)
            state.step_flops = self.step_flops(method)
        else:
            self.restore(method, checkpoint, state)
        state.start_clock()
        self.train(method, state)
        state.stop_clock()
        self.recorder.save_learner(method.state_dict(), "final")
        final_sparsity = method.sparsity()  # of the weights training ended with
        final = {"final/train_time_s": state.elapsed, **peak_memory(self.device)}
        if state.step_flops is not None:
            final["final/step_flops"] = state.step_flops
        final.update(self.finish(method, state))
        final["final/num_params"] = float(method.num_parameters())
        final.update(self.sparsity_metrics(method, final_sparsity, "final/sparsity/"))
        # finish() may score other weights (the best meta-validation checkpoint): the
        # sparsity of the weights the test metrics came from, named apart.
        final.update(self.sparsity_metrics(method, method.sparsity(), "final/scored_sparsity/"))
        final.update({f"final/sparsity_rise/{k}": v
                      for k, v in sparsity_rises(state.sparsity_history).items()})  # fmt: skip
        self.recorder.log_metrics(final, step=self.final_step(state))
        self.log_figures(state)
        self._log_sparsity_figures(state.sparsity_history, final_sparsity)
        return final

    def step_flops(self, method: Method) -> float | None:
        """Floating-point operations of one training step, counted by torch's own counter
        (``torch.utils.flop_counter``: matrix products and convolutions, forward and
        backward) on a copy of ``method``, so that training is not touched. None where the
        protocol has no :meth:`first_step` or the copy or the count fails (said in the log)."""
        if type(self).first_step is Protocol.first_step:
            return None
        from torch.utils.flop_counter import FlopCounterMode

        # The step draws random numbers: every generator is put back as it was, so that
        # the run (and a resumed one) trains exactly as without the count.
        python_state, numpy_state = random.getstate(), np.random.get_state()
        devices = [self.device] if self.device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=devices):
                step, twin = self.first_step(), copy.deepcopy(method)
                with FlopCounterMode(display=False) as counter:
                    step(twin)
            return float(counter.get_total_flops())
        except Exception as err:  # noqa: BLE001 - a count we cannot take is not a failed run
            log.info("one step's FLOPs were not counted: %s", str(err).splitlines()[0][:200])
            return None
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)

    def step_done(self, state: RunState, metrics: dict[str, float], where: str) -> int:
        """After one training step: stop if its loss diverged (:class:`DivergenceError`,
        "diverged at WHERE: training loss is nan"), count it, show progress. Returns the
        number of steps done."""
        loss = metrics.get("loss", 0.0)
        if not math.isfinite(loss):
            raise DivergenceError(f"diverged at {where}: training loss is {loss}")
        state.done += 1
        if self.progress is not None:
            self.progress(self.progress_offset + state.done, metrics)
        return state.done

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.recorder.log_metrics(metrics, step=step)

    def record_sparsity(
        self, method: Method, state: RunState, step: int, prefix: str = "sparsity/"
    ) -> dict[str, float]:
        """Add the method's sparsity now to the history (if it gates anything); returns the
        metrics to log for it."""
        sparsity = method.sparsity()
        if sparsity:
            state.sparsity_history.append((step, sparsity))
        return self.sparsity_metrics(method, sparsity, prefix)

    @staticmethod
    def sparsity_metrics(method: Method, per_tensor: dict[str, float], prefix: str) -> dict:
        """``prefix + tensor`` for each tensor's sparsity and ``prefix + "overall"`` (the
        parameter-weighted mean); empty when the method gates nothing."""
        if not per_tensor:
            return {}
        out = {f"{prefix}{k}": v for k, v in per_tensor.items()}
        out[f"{prefix}overall"] = overall_sparsity(method, per_tensor)
        return out

    # -- checkpoints -----------------------------------------------------------------------
    def save_checkpoint(self, method: Method, state: RunState) -> None:
        """Save where the run stands; ``--resume`` continues from here."""
        self.recorder.save_checkpoint(
            {
                "protocol": self.name,
                "iteration": self.progress_offset + state.done,  # what --resume shows
                "done": state.done,
                "elapsed": state.seconds(),
                "method": copy.deepcopy(method.state_dict()),
                "torch_rng": torch.get_rng_state(),
                "sparsity_history": copy.deepcopy(state.sparsity_history),
                "step_flops": state.step_flops,
                # Copied, so that training on cannot change what was saved.
                "progress": copy.deepcopy(state.progress),
            }
        )

    @classmethod
    def checkpoint_problem(cls, checkpoint: dict[str, Any]) -> str | None:
        """Why this protocol cannot continue ``checkpoint`` (None: it can). ``--resume``
        asks before it touches the run; :meth:`restore` refuses on the same answer."""
        found = checkpoint.get("protocol")
        if found == cls.name:
            return None
        written = "by an older mesabench" if found is None else f"by the {found} protocol"
        return f"its checkpoint was written {written}: not one of the {cls.name} protocol's"

    def restore(self, method: Method, checkpoint: dict[str, Any], state: RunState) -> None:
        """Load a :meth:`save_checkpoint` into the method, the global RNG and ``state``."""
        problem = self.checkpoint_problem(checkpoint)
        if problem is not None:
            raise ValueError(f"{problem}; start the run afresh")
        method.load_state_dict(checkpoint["method"])
        torch.set_rng_state(checkpoint["torch_rng"])
        state.done, state.elapsed = checkpoint["done"], checkpoint["elapsed"]
        state.sparsity_history = checkpoint["sparsity_history"]
        state.progress = checkpoint["progress"]
        state.step_flops = checkpoint.get("step_flops")  # absent in older checkpoints

    def _log_sparsity_figures(self, history, final: dict[str, float]) -> None:
        from benchmarks.protocols.figures import (
            sparsity_by_depth_figure,
            sparsity_figure,
            sparsity_history_table,
            sparsity_table,
        )

        axis, table = self.sparsity_axis
        if history:
            self.recorder.log_figure(sparsity_figure(history, xlabel=axis), "sparsity.png")
            self.recorder.log_text(sparsity_history_table(history, axis), table)
        if final:
            self.recorder.log_figure(sparsity_by_depth_figure(final), "sparsity_by_depth.png")
            self.recorder.log_text(sparsity_table(final), "sparsity_per_tensor.csv")
