"""Where real datasets live (a run's recorded data root, else ``MESABENCH_DATA``, else a
per-user cache) and the errors and readers shared by every file loader.

A run's plan carries its data root; the harness makes it the active root with
:func:`using_data_root` while the run loads data, and records the files read
(:func:`files_read`) with their digests.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from mesabench_core import DataNotFoundError, DatasetFormatError

DATA_ENV = "MESABENCH_DATA"


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


_active_root: str | None = None
#: Whether the active root is the only place looked (a root the user gave).
_active_only = False
_files_read: set[Path] = set()


@contextmanager
def using_data_root(root: str | os.PathLike | None, only: bool = False) -> Iterator[None]:
    """Search ``root`` first while the block runs (a run's recorded data root); with
    ``only`` (a root given explicitly), search it alone: a file missing there is an error,
    never read from ``MESABENCH_DATA`` or the cache instead."""
    global _active_root, _active_only
    before = _active_root, _active_only
    _active_root = None if root is None else str(root)
    _active_only = only and root is not None
    try:
        yield
    finally:
        _active_root, _active_only = before


def active_data_root() -> str | None:
    """The root searched first now: the run's (while active), else ``MESABENCH_DATA``. The
    loaders pass it on, so that their caches never mix files of two roots."""
    return _active_root or os.environ.get(DATA_ENV) or None


def resolve_data_root(explicit: str | os.PathLike | None) -> str | None:
    """The data root a run records: ``explicit``, else ``MESABENCH_DATA``, as an absolute
    path; None when neither is given (the per-user cache is searched then)."""
    return explicit_root(explicit or os.environ.get(DATA_ENV))


def explicit_root(given: str | os.PathLike | None) -> str | None:
    """A root the user gave (``--data-root``, a sweep file's ``data_root``) as an absolute
    path; None when none was given. What is handed on as given must be only this: a root
    taken from ``MESABENCH_DATA`` is a fallback, not the only place to look."""
    return str(Path(given).expanduser().resolve()) if given else None


def note_file_read(path: Path) -> None:
    """Record a data file found outside the data roots (a corpus a package installed)."""
    _files_read.add(Path(path).resolve())


def files_read() -> list[Path]:
    """Every data file found so far in this process, sorted."""
    return sorted(_files_read)


def file_digests(paths: list[Path]) -> list[dict[str, object]]:
    """Path, size and SHA-256 of each file (what a run read, recorded with it)."""
    out = []
    for path in paths:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        out.append({"path": str(path), "bytes": path.stat().st_size, "sha256": digest.hexdigest()})
    return out


def data_roots(explicit: str | os.PathLike | None = None) -> list[Path]:
    """The places searched, in order, each once. A run's root given explicitly is the
    only one (docs/data.md: the order below is the fallback when none is given)."""
    if _active_only:
        return [Path(_active_root)]
    roots = []
    if explicit:
        roots.append(Path(explicit))
    if _active_root:
        roots.append(Path(_active_root))
    if os.environ.get(DATA_ENV):
        roots.append(Path(os.environ[DATA_ENV]))
    roots.append(cache_dir())
    return list(dict.fromkeys(roots))


def find_file(name: str, explicit: str | os.PathLike | None = None) -> Path:
    """The first ``root / name`` that exists, or a DataNotFoundError listing every root."""
    roots = data_roots(explicit)
    for root in roots:
        if (root / name).exists():
            _files_read.add((root / name).resolve())
            return root / name
    looked = ", ".join(str(r / name) for r in roots)
    raise DataNotFoundError(
        f"dataset file {name!r} not found (looked in: {looked}); pass --data-root DIR or set "
        f"{DATA_ENV}=DIR to the folder that holds it"
    )
