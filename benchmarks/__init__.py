"""mesabench: one harness for learners that learn to learn.

``python -m benchmarks run --method sparse_maml`` runs a method on a benchmark and records
the result in MLflow; see the README for the tour.
"""

from __future__ import annotations

__version__ = "0.1.0"


#: The Python API (docs/python-api.md), imported on first use so that ``import benchmarks``
#: stays light.
_PUBLIC = {"run": "python_api", "leaderboard": "python_api", "RunResult": "python_api",
           "RunFailed": "runner", "RunInterrupted": "runner", "ConfigError": "config"}  # fmt: skip


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(f"benchmarks.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module 'benchmarks' has no attribute {name!r}")
