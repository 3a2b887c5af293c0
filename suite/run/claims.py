"""Claims on runs, so that processes sharing one results folder never run or record the same run twice.

Before a process runs (or hands to a worker) a run, it takes an exclusive, non-blocking ``flock`` on
``OUT/locks/<record stem>.lock`` and then checks that the run still has no record. The kernel drops the lock
when the holder exits, however it exits (killed, out of memory), so a claim never outlives its process and
needs no expiry. Shards of one grid (``--shard I/N``), or two ``run_all.py`` calls started on the same folder,
thereby split the work between them; a run whose claim another live process holds is left to that process.
A lock (or the ``locks`` folder) that is a symbolic link is refused (:class:`UnsafeLockError`), never followed.

Records are published by an atomic create (:func:`suite.results.records.write_record` with ``exclusive=True``): when,
without working locks (some network file systems), two writers still race, the second finds the record there
and drops its own.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: claims are no-ops, records are still created atomically
    fcntl = None  # type: ignore[assignment]

LOCKS_DIR = "locks"


def lock_path(out: Path, record_filename: str) -> Path:
    """The lock file of the run whose record is ``record_filename`` under results folder ``out``."""
    return Path(out) / LOCKS_DIR / (Path(record_filename).stem + ".lock")


class RunClaim:
    """An exclusive claim on one run of a results folder; ``acquire`` says whether this process now holds it."""

    def __init__(self, out: Path, record_filename: str) -> None:
        self.path = lock_path(out, record_filename)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this process holds the claim."""
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the claim without waiting; False when another live process holds it."""
        if self._fd is not None:
            return True
        fd = open_lock(self.path)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    return False
                if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):  # no locks on this file system
                    fd = open_lock(self.path)
                else:
                    raise
        self._fd = fd
        return True

    def release(self, finished: bool = False) -> None:
        """Give the claim up; with ``finished`` (its record is written) also remove the lock file.

        Removing the file is safe only once the record exists: a process that opened the old file and locks it
        after this re-checks the record and skips the run.
        """
        if self._fd is None:
            return
        if finished:
            self.path.unlink(missing_ok=True)
        os.close(self._fd)  # closing the last descriptor drops the flock
        self._fd = None


#: Opening a symlink with this flag fails (ELOOP on Linux, EMLINK on the BSDs, EFTYPE on NetBSD) instead of following.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_LINK_ERRNOS = {errno.ELOOP, errno.EMLINK, getattr(errno, "EFTYPE", errno.ELOOP)}


def open_lock(path: Path) -> int:
    """Open (creating) lock file ``path`` for writing, never through a symlink: the descriptor.

    Neither the lock nor its ``locks`` folder may be a symbolic link (a planted one would make the suite create or
    write its target, wherever it points): such a lock is refused with :class:`UnsafeLockError`, naming it.
    """
    folder = Path(path).parent
    if folder.is_symlink():
        raise UnsafeLockError(folder, "lock folder")
    folder.mkdir(parents=True, exist_ok=True)
    flags = os.O_RDWR | os.O_CREAT | _NOFOLLOW
    directory = getattr(os, "O_DIRECTORY", 0)
    try:
        if os.open not in os.supports_dir_fd or not directory or not _NOFOLLOW:
            return os.open(path, flags, 0o644)
        # the folder is opened first (not followed if it is a link), and the lock inside the folder opened
        folder_fd = os.open(folder, os.O_RDONLY | directory | _NOFOLLOW)
        try:
            return os.open(Path(path).name, flags, 0o644, dir_fd=folder_fd)
        finally:
            os.close(folder_fd)
    except OSError as exc:
        if exc.errno in _LINK_ERRNOS or (exc.errno == errno.ENOTDIR and os.path.islink(folder)):
            if os.path.islink(folder):
                raise UnsafeLockError(folder, "lock folder") from None
            raise UnsafeLockError(Path(path), "lock file") from None
        raise


class UnsafeLockError(OSError):
    """A lock file (or the ``locks`` folder) that is a symbolic link: refused, never followed."""

    def __init__(self, path: Path, what: str = "lock file") -> None:
        super().__init__(
            errno.ELOOP,
            f"refusing to use the {what} {str(path)!r}: it is a symbolic link (the suite never writes through "
            "links; remove it, or use another results folder)",
            str(path),
        )

    def __str__(self) -> str:
        return str(self.strerror)


def remove_empty_locks_dir(out: Path) -> None:
    """Remove ``OUT/locks`` when no lock file is left in it (another process may still be adding one)."""
    try:
        (Path(out) / LOCKS_DIR).rmdir()
    except OSError:
        pass


def raise_open_file_limit() -> None:
    """Lift this process's soft limit on open files to its hard limit (each claim held open costs one)."""
    try:
        import resource  # POSIX only
    except ImportError:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
