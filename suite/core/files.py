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
    """Have ``write`` fill a fresh temporary file beside ``path``, then rename it there: never a half-written file.

    The temporary file is made by :func:`make_temporary` (a new regular file, never an existing name or a link), and
    the rename replaces whatever ``path`` is, a symlink included, instead of writing through it. A full disk is
    raised as ``OSError`` ENOSPC naming ``path``; the temporary file is removed on any error.
    """
    tmp: Path | None = None
    try:
        tmp = make_temporary(path)
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from exc
        raise
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise


def make_temporary(final: Path) -> Path:
    """A new, empty temporary file beside ``final`` (named by :func:`temporary_prefix`) with the usual permissions.

    ``mkstemp`` creates it with ``O_CREAT | O_EXCL`` (so a planted file or symlink of that name is never opened) and
    mode 0600; it is given the mode an ordinary new file would have (0666 less the umask), as report files are
    meant to be read by others.
    """
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(final.name), suffix=TEMPORARY_SUFFIX, dir=final.parent)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o666 & ~current_umask())
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    os.close(fd)
    return Path(tmp)


def current_umask() -> int:
    """This process's umask (read from ``/proc`` where it can be, else set and restored at once)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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
