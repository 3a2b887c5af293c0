"""Atomic writes: the temporary files every writer fills before renaming them, and the checkpoint folder's name."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

#: Folder of resumable checkpoints under a results folder.
CHECKPOINTS_DIR = "checkpoints"
#: Suffix of a temporary file (written, flushed, then renamed over its final name).
TEMPORARY_SUFFIX = ".tmp"


def temporary_prefix(name: str) -> str:
    """Name prefix of this process's temporary files for ``name``: ``.<name>.<pid>.`` (a random part follows)."""
    return f".{name}.{os.getpid()}."


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Have ``write`` fill a temporary file beside ``path``, then rename it there: never a half-written file.

    A full disk is raised as ``OSError`` ENOSPC naming ``path``; the temporary file is removed on any error.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # created by ``write``, so with the usual permissions
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_temporary(final: Path, payload: bytes) -> Path:
    """``payload`` in a synced temporary file beside ``final`` (named by :func:`temporary_prefix`); its path."""
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(final.name), suffix=TEMPORARY_SUFFIX, dir=final.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def write_bytes_atomically(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` atomically (a synced temporary file in the same folder, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = write_temporary(path, payload)
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
