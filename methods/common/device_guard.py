"""A guard that finds device leaks and needless host-device synchronisation on any machine.

A method that runs on the CPU may still fail on a GPU: a tensor made without ``device=``
lands on the CPU beside CUDA weights, a ``.cpu()`` moves data off the device, a ``.item()``
in the middle of a training step stalls the GPU until every kernel queued so far is done.
None of these fails where no GPU runs. :class:`DeviceGuard` is a ``TorchFunctionMode`` that
sees every torch call and reports, for code in the watched packages while it runs a
method's hook (``meta_train_step``, ``observe``, ``predict``):

- **unplaced**: a factory call (``torch.zeros``, ``torch.tensor``, ``torch.arange``, ...)
  that does not name its device. Explicit ``device="cpu"`` is a stated choice and passes;
  an ``nn.Module``'s ``__init__`` is exempt (a module is built, then moved whole);
- **moved**: ``.cpu()``, ``.cuda()`` or ``.to(...)`` to a device of another type than the
  run's, as code that names the device explicitly does (``.to(x.device)`` is clean);
- **stall**: in a training hook, a synchronisation (``.item()``, ``float(t)``, ``if t:``,
  ``.tolist()``, ``.numpy()``, ``.cpu()``) followed by more tensor work in the same call.
  Reading the step's results once its work is queued (``return {"loss": loss.item()}``)
  costs what the protocol's own read of the loss costs, and passes.

Calls made inside torch and third-party libraries are not judged: their placement is
theirs. Why a mode and not a CUDA run: the checks run on the CPU in the fast suite, so a
leak fails before anyone has a GPU to find it on.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

#: The methods' hooks the guard judges, and which of them are training steps.
TRAINING_HOOKS = frozenset({"meta_train_step", "observe"})
HOOKS = TRAINING_HOOKS | {"predict"}

_FACTORIES = frozenset(
    getattr(torch, name)
    for name in (
        "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange",
        "linspace", "logspace", "eye", "tensor", "as_tensor", "scalar_tensor", "tril_indices",
        "triu_indices", "bernoulli", "normal",
    )
    if hasattr(torch, name)
)  # fmt: skip
_T = torch.Tensor
_SYNCS = frozenset(
    {_T.item, _T.tolist, _T.numpy, _T.__bool__, _T.__float__, _T.__int__, _T.__index__, _T.cpu}
)
_MOVES = frozenset({_T.to, _T.cuda, _T.cpu})
_JUDGED = _FACTORIES | _SYNCS | _MOVES
#: Calls that queue no work on the device (attribute reads, views, grad mode), by name.
_NO_WORK = frozenset(
    {"__get__", "__set__", "_set_grad_enabled", "detach", "__getitem__", "view", "reshape",
     "requires_grad_", "size", "dim", "numel", "__len__"}
)  # fmt: skip
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)


def _package_dir(name: str) -> str:
    module = sys.modules.get(name) or __import__(name)
    file = getattr(module, "__file__", None)
    if file is None:  # a namespace package
        return str(Path(next(iter(module.__path__))).resolve())
    return str(Path(file).resolve().parent)


#: The suite's own packages: what the guard watches unless told otherwise.
SUITE_PACKAGES = ("methods", "benchmarks", "mesabench_datasets", "mesabench_core")


@dataclass(frozen=True)
class Leak:
    """One finding: its kind (``unplaced``, ``moved``, ``stall``), the call and where."""

    kind: str
    call: str
    where: str
    hook: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.call} at {self.where} (in {self.hook})"


class DeviceLeak(AssertionError):
    """A run under :class:`DeviceGuard` made device-unclean calls (listed, one a line)."""


class DeviceGuard(TorchFunctionMode):
    """Watch torch calls while entered; ``leaks`` lists what was found (each place once).

    ``device``: the run's device. ``packages``: the modules whose code is judged (default:
    the suite's own; a plugin adds its own package). ``check()`` raises
    :class:`DeviceLeak` if anything was found.
    """

    def __init__(self, device: torch.device | str = "cpu", packages: tuple[str, ...] = ()):
        super().__init__()
        self.device = torch.device(device)
        self._roots = tuple(_package_dir(p) for p in (*SUITE_PACKAGES, *packages))
        self.leaks: list[Leak] = []
        self._seen: set[tuple[str, str]] = set()
        #: (hook frame, where): a synchronisation in a training hook, until more work shows
        #: it stalled the step or the hook returns.
        self._pending: tuple[FrameType, str, str] | None = None
        self.syncs = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # Every torch call passes here: the common case (no read pending, a call not judged)
        # costs two set lookups, so that a guarded run stays near an unguarded one.
        if self._pending is not None and func not in _SYNCS and _name(func) not in _NO_WORK:
            self._judge_pending(func, sys._getframe(1))
        if func in _JUDGED:
            caller = sys._getframe(1)
            if caller.f_code is not host_read.__code__ and self._watched(caller):
                hook = _hook_frame(caller)
                if hook is not None:
                    self._judge(func, args, kwargs, caller, hook)
        return func(*args, **kwargs)

    def check(self) -> None:
        if self.leaks:
            found = "\n".join(f"  {leak}" for leak in self.leaks)
            raise DeviceLeak(f"{len(self.leaks)} device-unclean call(s):\n{found}")

    # -- judging ---------------------------------------------------------------------------
    def _judge(self, func, args, kwargs, caller: FrameType, hook: FrameType) -> None:
        name, where = _name(func), _where(caller)
        placed = kwargs.get("device") is not None or (
            func is torch.as_tensor and args and isinstance(args[0], torch.Tensor)
        )
        if func in _FACTORIES and not placed:
            self._add("unplaced", f"torch.{name}() without device=", where, hook)
        if func in _MOVES and self._moves_off(func, args, kwargs):
            self._add("moved", f".{name}() off the run's {self.device.type}", where, hook)
        if func in _SYNCS and hook.f_code.co_name in TRAINING_HOOKS:
            self.syncs += 1
            self._pending = (hook, f".{name}()", where)

    def _judge_pending(self, func, caller: FrameType) -> None:
        hook, call, where = self._pending  # type: ignore[misc]
        self._pending = None
        frame: FrameType | None = caller
        while frame is not None and frame is not hook:
            frame = frame.f_back
        if frame is None:  # the hook returned: the read came after the step's work
            return
        self._add(
            "stall", f"{call} then {_name(func)}() in the same step: a synchronisation "
            "before the step's work was queued", where, hook,
        )  # fmt: skip

    def _moves_off(self, func, args, kwargs) -> bool:
        if func is _T.cpu:
            return True
        if func is _T.cuda:
            return self.device.type != "cuda"
        target = kwargs.get("device")
        for arg in args[1:]:
            if isinstance(arg, (str, torch.device)):
                target = arg
        if isinstance(target, str):
            try:
                target = torch.device(target)
            except RuntimeError:
                return False
        if not isinstance(target, torch.device):
            return False
        # A device written out in the code (``.to("cpu")``) runs on one kind of device only.
        return target.type != self.device.type or _literal(args, kwargs)

    def _add(self, kind: str, call: str, where: str, hook: FrameType) -> None:
        if (kind, where) in self._seen:
            return
        self._seen.add((kind, where))
        self.leaks.append(Leak(kind, call, where, f"{_owner(hook)}.{hook.f_code.co_name}"))

    def _watched(self, frame: FrameType) -> bool:
        file = frame.f_code.co_filename
        if file.startswith(_TORCH_DIR) or not file.startswith(self._roots):
            return False
        # An nn.Module's constructor builds on the CPU and is moved whole afterwards.
        if frame.f_code.co_name == "__init__":
            owner = frame.f_locals.get("self")
            return not isinstance(owner, torch.nn.Module)
        return True


def host_read(value: torch.Tensor) -> float:
    """``value`` (one element) as a Python number where the algorithm needs it on the host:
    control flow it decides on the data (a detected task boundary), or a draw of a host
    generator. The one read the guard does not judge: the call says in the code that the
    read is meant."""
    return value.item()


def _literal(args, kwargs) -> bool:
    """True if the target device was written as a string (``.to("cpu")``): device-specific
    code, which runs on one kind of device only."""
    return isinstance(kwargs.get("device"), str) or any(isinstance(a, str) for a in args[1:])


def _hook_frame(frame: FrameType | None) -> FrameType | None:
    """The innermost method hook on the stack (``self.predict`` and so on), or None."""
    while frame is not None:
        if frame.f_code.co_name in HOOKS and "self" in frame.f_locals:
            return frame
        frame = frame.f_back
    return None


def _owner(frame: FrameType) -> str:
    return type(frame.f_locals.get("self")).__name__


def _name(func: Any) -> str:
    return getattr(func, "__name__", repr(func))


def _where(frame: FrameType) -> str:
    file = frame.f_code.co_filename
    with contextlib.suppress(ValueError):  # a file on another drive (Windows)
        file = os.path.relpath(file)
    return f"{file}:{frame.f_lineno}"
