"""mesabench: one harness for learners that learn to learn.

``python -m benchmarks run --method sparse_maml`` runs a method on a benchmark and records
the result in MLflow; see the README for the tour.
"""

from __future__ import annotations

__version__ = "0.1.0"


def _check_datasets_package() -> None:
    """Stop with a clear message if another distribution's ``datasets`` shadows ours."""
    try:
        import datasets
    except ImportError as err:
        raise SystemExit(f"mesabench: cannot import its 'datasets' package ({err})") from None
    if getattr(datasets, "__mesabench__", False) is not True:
        where = getattr(datasets, "__file__", None) or getattr(datasets, "__path__", "?")
        raise SystemExit(
            f"mesabench: 'import datasets' resolves to {where}, another distribution's "
            "'datasets' package (e.g. Hugging Face's), not mesabench's. Uninstall it "
            "(pip uninstall datasets) or install mesabench in its own virtual environment."
        )


_check_datasets_package()

#: The Python API (docs/python-api.md), imported on first use so that ``import benchmarks``
#: stays light.
_PUBLIC = {"run": "python_api", "leaderboard": "python_api", "RunResult": "python_api",
           "RunFailed": "runner", "RunInterrupted": "runner", "ConfigError": "config"}  # fmt: skip


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(f"benchmarks.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module 'benchmarks' has no attribute {name!r}")
