"""A run's posterior draws on disk: ``<results>/draws/<record file stem>.npz``, validated when read back.

The file is a compressed NumPy archive (no pickled objects) of:

- ``version``: int64 scalar, :data:`FORMAT_VERSION`;
- ``model_index``: int64 ``[N]`` (or ``[N, W]`` for multi-word model spaces);
- ``theta``: float32 ``[N, dim_max]`` in the problem's unconstrained space (inactive entries carry no meaning);
- ``mask``: bool ``[N, dim_max]``, the active coordinates of each draw's model (absent when not known);
- ``log_q``: float32 ``[N]``, the method's log density at each draw (absent when the method has none).

It is written atomically (a temporary file in the same folder, then renamed), and the run's record holds
``{"path": "draws/<stem>.npz", "num": N, "sha256": ...}``, so a corrupted, truncated or replaced file is
reported by :func:`load_draws` with its name, never silently read.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from suite.core.files import TEMPORARY_SUFFIX, give_ordinary_mode, temporary_prefix

#: Folder of draw files under a results directory.
DRAWS_DIR = "draws"
FORMAT_VERSION = 1
#: Arrays every draw file holds; ``mask`` and ``log_q`` are optional.
REQUIRED_ARRAYS = ("version", "model_index", "theta")


class DrawsFileError(ValueError):
    """A draw file that cannot be used: missing, unreadable, truncated, or not what its record says."""


@dataclass(frozen=True)
class SavedDraws:
    """Draws read back from a draw file (NumPy arrays; see the module docstring for shapes and dtypes)."""

    model_index: np.ndarray
    theta: np.ndarray
    mask: np.ndarray | None = None
    log_q: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.model_index.shape[0])


def draws_path(out: Path, record_filename: str) -> Path:
    """Where the draws of the run whose record file is ``record_filename`` live under ``out``."""
    return Path(out) / DRAWS_DIR / f"{Path(record_filename).stem}.npz"


def recorded_draws_path(out: Path, recorded: str, record_name: str) -> Path:
    """The draw file a record names (its ``draws.path``, relative to results folder ``out``), checked to lie in it.

    ValueError naming the record when the path is absolute, climbs out (``../x.npz``) or resolves, through links,
    outside ``out``: a record is data, and never makes a reader open a file elsewhere.
    """
    folder = Path(out).resolve()
    if not isinstance(recorded, str) or Path(recorded).is_absolute() or ".." in Path(recorded).parts:
        raise ValueError(f"{record_name}: its draws.path {recorded!r} is not a path inside its results folder {out}")
    path = folder / recorded
    if not path.resolve().is_relative_to(folder):
        raise ValueError(f"{record_name}: its draws.path {recorded!r} resolves outside its results folder {out}")
    return path


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of the file's bytes."""
    with open(path, "rb") as handle:
        return _sha256_of(handle)


def _sha256_of(handle: Any) -> str:
    """Hex SHA-256 of an open file's bytes, from its start."""
    digest = hashlib.sha256()
    handle.seek(0)
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def _open_regular(path: Path) -> Any:
    """``path`` opened for reading if it is a regular file (a FIFO or device is refused, never waited on)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DrawsFileError(f"draw file {path} is not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _arrays(
    model_index: np.ndarray, theta: np.ndarray, mask: np.ndarray | None, log_q: np.ndarray | None
) -> dict[str, np.ndarray]:
    """The arrays to store, converted to their on-disk dtypes; ValueError when shapes disagree."""
    arrays = {
        "version": np.asarray(FORMAT_VERSION, dtype=np.int64),
        "model_index": np.ascontiguousarray(model_index, dtype=np.int64),
        "theta": np.ascontiguousarray(theta, dtype=np.float32),
    }
    if mask is not None:
        arrays["mask"] = np.ascontiguousarray(mask, dtype=bool)
    if log_q is not None:
        arrays["log_q"] = np.ascontiguousarray(log_q, dtype=np.float32)
    problem = _shape_problem(arrays)
    if problem is not None:
        raise ValueError(f"draws not saved: {problem}")
    return arrays


def save_draws(
    path: Path,
    model_index: np.ndarray,
    theta: np.ndarray,
    mask: np.ndarray | None = None,
    log_q: np.ndarray | None = None,
) -> dict[str, Any]:
    """Write the draws to ``path`` atomically; return ``{"num": N, "sha256": ...}`` for the run's record."""
    arrays = _arrays(model_index, theta, mask, log_q)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(path.name), suffix=TEMPORARY_SUFFIX, dir=path.parent)
    try:
        give_ordinary_mode(fd)
        with os.fdopen(fd, "wb") as handle:  # a file object: savez adds no ".npz" to the temporary's name
            np.savez_compressed(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        sha256 = file_sha256(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {"num": int(arrays["model_index"].shape[0]), "sha256": sha256}


def _shape_problem(arrays: dict[str, np.ndarray]) -> str | None:
    """What is wrong with the arrays' dtypes and shapes, or None."""
    version, model_index, theta = arrays["version"], arrays["model_index"], arrays["theta"]
    if version.shape != () or version.dtype.kind not in "iu" or int(version) != FORMAT_VERSION:
        return f"format version {version!r}, expected {FORMAT_VERSION}"
    if model_index.dtype != np.int64 or model_index.ndim not in (1, 2):
        return f"model_index is {model_index.dtype} with {model_index.ndim} dimensions, expected int64 [N] or [N, W]"
    num = model_index.shape[0]
    if theta.dtype != np.float32 or theta.ndim != 2 or theta.shape[0] != num:
        return f"theta is {theta.dtype} {list(theta.shape)}, expected float32 [{num}, dim_max]"
    mask = arrays.get("mask")
    if mask is not None and (mask.dtype != bool or mask.shape != theta.shape):
        return f"mask is {mask.dtype} {list(mask.shape)}, expected bool {list(theta.shape)}"
    log_q = arrays.get("log_q")
    if log_q is not None and (log_q.dtype != np.float32 or log_q.shape != (num,)):
        return f"log_q is {log_q.dtype} {list(log_q.shape)}, expected float32 [{num}]"
    return None


def load_draws(path: Path, sha256: str | None = None, num: int | None = None) -> SavedDraws:
    """Read and check a draw file; ``sha256`` and ``num`` (from the run's record) must match when given.

    Raises :class:`DrawsFileError` naming the file when it is missing, unreadable, truncated or corrupted,
    lacks an array, holds arrays of the wrong dtype or shape, or differs from what the record says.
    """
    path = Path(path)
    if not path.exists():
        raise DrawsFileError(f"draw file {path} does not exist")
    try:
        with _open_regular(path) as handle:  # one handle, closed on every path (a truncated archive included)
            if sha256 is not None and _sha256_of(handle) != sha256:
                raise DrawsFileError(
                    f"draw file {path} is corrupted or was replaced: its SHA-256 differs from its record's"
                )
            handle.seek(0)
            with np.load(handle, allow_pickle=False) as archive:
                missing = [name for name in REQUIRED_ARRAYS if name not in archive.files]
                if missing:
                    raise DrawsFileError(f"draw file {path} lacks {', '.join(missing)}")
                names = [*REQUIRED_ARRAYS, *(name for name in ("mask", "log_q") if name in archive.files)]
                arrays = {name: archive[name] for name in names}
    except DrawsFileError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, KeyError) as exc:
        # np.load raises these for a truncated or overwritten archive (bad zip directory, CRC, object arrays)
        raise DrawsFileError(
            f"draw file {path} is unreadable (truncated or corrupted?): {type(exc).__name__}: {exc}"
        ) from exc
    problem = _shape_problem(arrays)
    if problem is not None:
        raise DrawsFileError(f"draw file {path} is invalid: {problem}")
    found = int(arrays["model_index"].shape[0])
    if num is not None and found != num:
        raise DrawsFileError(f"draw file {path} holds {found} draws, its record says {num}")
    return SavedDraws(arrays["model_index"], arrays["theta"], arrays.get("mask"), arrays.get("log_q"))
