"""Protocols own the loop and the measuring; methods only answer their calls.

Every module in this package is imported here, and each :class:`Protocol` subclass with a
``name`` registers itself in :data:`PROTOCOLS`, with its ``Config`` type (from which a
benchmark spec finds its protocol) and the ``metrics`` it logs: a new protocol is one new
module, and a benchmark that uses it one more (its spec).
"""

import importlib
import pkgutil

from benchmarks.protocols.base import (
    PROTOCOLS,
    DivergenceError,
    Protocol,
    RunState,
    protocol_for,
)
from benchmarks.protocols.continual import ContinualConfig, ContinualProtocol
from benchmarks.protocols.episodic import EpisodicConfig, EpisodicProtocol
from benchmarks.protocols.online import OnlineConfig, OnlineProtocol

#: Modules of the package that hold no protocol: ``figures`` imports matplotlib (0.3 s),
#: wanted only once a run draws its artifacts, never by ``list`` or ``show``.
_NOT_PROTOCOLS = {"figures"}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _NOT_PROTOCOLS:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "PROTOCOLS",
    "ContinualConfig",
    "ContinualProtocol",
    "DivergenceError",
    "EpisodicConfig",
    "EpisodicProtocol",
    "OnlineConfig",
    "OnlineProtocol",
    "Protocol",
    "RunState",
    "protocol_for",
]
