"""mesabench: one harness for learners that learn to learn.

``python -m benchmarks run --method sparse_maml`` runs a method on a benchmark and records
the result in MLflow; see the README for the tour.
"""

from __future__ import annotations

from mesabench_core import __version__

__all__ = ["__version__"]

#: The Python API (docs/python-api.md), imported on first use so that ``import benchmarks``
#: stays light.
_PUBLIC = {"run": "python_api", "leaderboard": "python_api", "RunResult": "python_api",
           "RunFailed": "running.execute", "RunInterrupted": "running.execute",
           "ConfigError": "planning.config", "BadInput": "planning.config"}  # fmt: skip


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(f"benchmarks.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module 'benchmarks' has no attribute {name!r}")
