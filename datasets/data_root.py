"""Where real datasets live (``--data-root``, else ``MESABENCH_DATA``, else a per-user
cache) and the errors and readers shared by every file loader."""

from __future__ import annotations

import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

DATA_ENV = "MESABENCH_DATA"


class DataNotFoundError(FileNotFoundError):
    """A dataset file is missing; the message says where we looked and how to provide it."""


class DatasetFormatError(ValueError):
    """A dataset file exists but its content is not what the format promises."""


def read_npz(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The named arrays of an ``.npz`` file (no pickles), or a DatasetFormatError."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in keys if key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        # A truncated download or a half-written copy lands here, not in a traceback.
        raise DatasetFormatError(
            f"{path} is not a readable .npz file (truncated or corrupt? {err}); delete it and "
            "download or copy it again"
        ) from None
    missing = [key for key in keys if key not in arrays]
    if missing:
        raise DatasetFormatError(f"{path} lacks keys {missing}; expected {list(keys)}")
    return arrays


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
