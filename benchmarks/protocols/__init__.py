"""Protocols own the loop and the measuring; methods only answer their calls."""

from benchmarks.protocols.episodic import DivergenceError, EpisodicConfig, EpisodicProtocol

PROTOCOLS = {"episodic": (EpisodicConfig, EpisodicProtocol)}

__all__ = ["PROTOCOLS", "DivergenceError", "EpisodicConfig", "EpisodicProtocol"]
