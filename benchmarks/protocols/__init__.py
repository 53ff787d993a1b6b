"""Protocols own the loop and the measuring; methods only answer their calls.

Every module in this package is imported here, and each :class:`Protocol` subclass with a
``name`` registers itself in :data:`PROTOCOLS`: a new protocol is one new module.
"""

import importlib
import pkgutil

from benchmarks.protocols.base import PROTOCOLS, DivergenceError, Protocol, RunState
from benchmarks.protocols.continual import ContinualConfig, ContinualProtocol
from benchmarks.protocols.episodic import EpisodicConfig, EpisodicProtocol
from benchmarks.protocols.online import OnlineConfig, OnlineProtocol

for _module in pkgutil.iter_modules(__path__):
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
]
