"""Where real datasets live: ``--data-root``, else ``MESABENCH_DATA``, else a per-user cache."""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "MESABENCH_DATA"


class DataNotFoundError(FileNotFoundError):
    """A dataset file is missing; the message says where we looked and how to provide it."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mesabench"


def data_roots(explicit: str | os.PathLike | None = None) -> list[Path]:
    """The places searched, in order."""
    roots = []
    if explicit:
        roots.append(Path(explicit))
    if os.environ.get(DATA_ENV):
        roots.append(Path(os.environ[DATA_ENV]))
    roots.append(cache_dir())
    return roots


def find_file(name: str, explicit: str | os.PathLike | None = None) -> Path:
    """The first ``root / name`` that exists, or a DataNotFoundError listing every root."""
    roots = data_roots(explicit)
    for root in roots:
        if (root / name).exists():
            return root / name
    looked = ", ".join(str(r / name) for r in roots)
    raise DataNotFoundError(
        f"dataset file {name!r} not found (looked in: {looked}); pass --data-root DIR or set "
        f"{DATA_ENV}=DIR to the folder that holds it"
    )
