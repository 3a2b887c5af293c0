"""Atomic writes (the temporary files every writer fills before renaming them), safe reads of files others may
have planted, and the checkpoint folder's name."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

#: Folder of resumable checkpoints under a results folder.
CHECKPOINTS_DIR = "checkpoints"
#: Flags of every read of a file named by a results or reference folder: no following a link, no waiting on a FIFO.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
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
        give_ordinary_mode(fd)
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    os.close(fd)
    return Path(tmp)


def give_ordinary_mode(fd: int) -> None:
    """Give the open file ``fd`` the mode an ordinary new file has (0666 less the umask); mkstemp makes it 0600.

    Every file the suite writes (records, draws, checkpoints, the report) has these permissions: one rule.
    """
    if hasattr(os, "fchmod"):
        os.fchmod(fd, 0o666 & ~current_umask())


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
    """``payload`` in a synced temporary file beside ``final`` (named by :func:`temporary_prefix`); its path.

    Like :func:`make_temporary`'s, the file gets an ordinary new file's mode (0666 less the umask): every file the
    suite writes, records included, has the same permissions (issue 51).
    """
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(final.name), suffix=TEMPORARY_SUFFIX, dir=final.parent)
    try:
        give_ordinary_mode(fd)
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


def read_regular_bytes(path: Path, limit: int, follow_links: bool = False) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes; OSError otherwise.

    The file is opened without blocking (a FIFO or a device named like a record or a reference is refused, never
    waited on) and, unless ``follow_links``, without following a symbolic link; its type is checked on the open
    file.
    """
    if not follow_links and Path(path).is_symlink():  # O_NOFOLLOW's ELOOP would not say why
        raise OSError(errno.ELOOP, "a symbolic link, not a regular file", str(path))
    flags = _READ_FLAGS & ~getattr(os, "O_NOFOLLOW", 0) if follow_links else _READ_FLAGS
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if info.st_size > limit:
            raise OSError(errno.EFBIG, f"{info.st_size} bytes, more than {limit}", str(path))
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"more than {limit} bytes", str(path))
    return data
