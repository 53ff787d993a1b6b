"""Protocols own the loop and the measuring; methods only answer their calls."""

from benchmarks.protocols.base import DivergenceError
from benchmarks.protocols.continual import ContinualConfig, ContinualProtocol
from benchmarks.protocols.episodic import EpisodicConfig, EpisodicProtocol
from benchmarks.protocols.online import OnlineConfig, OnlineProtocol

PROTOCOLS = {
    "episodic": (EpisodicConfig, EpisodicProtocol),
    "continual": (ContinualConfig, ContinualProtocol),
    "online": (OnlineConfig, OnlineProtocol),
}

__all__ = [
    "PROTOCOLS",
    "ContinualConfig",
    "ContinualProtocol",
    "DivergenceError",
    "EpisodicConfig",
    "EpisodicProtocol",
    "OnlineConfig",
    "OnlineProtocol",
]
