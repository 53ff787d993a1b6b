"""Protocols own the loop and the measuring; methods only answer their calls."""

from benchmarks.protocols.continual import ContinualConfig, ContinualProtocol
from benchmarks.protocols.episodic import DivergenceError, EpisodicConfig, EpisodicProtocol

PROTOCOLS = {
    "episodic": (EpisodicConfig, EpisodicProtocol),
    "continual": (ContinualConfig, ContinualProtocol),
}

__all__ = [
    "PROTOCOLS",
    "ContinualConfig",
    "ContinualProtocol",
    "DivergenceError",
    "EpisodicConfig",
    "EpisodicProtocol",
]
