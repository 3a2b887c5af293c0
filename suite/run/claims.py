"""Claims on runs, so that processes sharing one results folder never run or record the same run twice.

Before a process runs (or hands to a worker) a run, it takes an exclusive, non-blocking ``flock`` on
``OUT/locks/<record stem>.lock`` and then checks that the run still has no record. The kernel drops the lock
when the holder exits, however it exits (killed, out of memory), so a claim never outlives its process and
needs no expiry. Shards of one grid (``--shard I/N``), or two ``run_all.py`` calls started on the same folder,
thereby split the work between them; a run whose claim another live process holds is left to that process.

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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    return False
                if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):  # no locks on this file system
                    fd = os.open(self.path, os.O_RDWR)
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
