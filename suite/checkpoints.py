"""Resumable state of a run in progress, so that a long training interrupted part way loses at most a few minutes.

The harness gives each run a :class:`CheckpointSlot` (a file under the results folder, named after the run's key,
and how often to save) for the duration of :meth:`Method.run`; a method that can resume asks for it with
:func:`current_slot`, saves its state there now and then, and on the next attempt of the same run starts from what
it finds. The harness deletes the file once the run's record is written. Methods that ignore the slot lose nothing
but the unfinished run, as before. Because the file name carries the run's configuration hash, a checkpoint is only
ever offered to the same problem, method options, profile and seed; the method still checks that the state it
finds matches what it is about to do and starts afresh (with a warning) when it does not.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

CHECKPOINTS_DIR = "checkpoints"
#: Default seconds between two saves of a run in progress.
DEFAULT_EVERY_S = 300.0


@dataclass(frozen=True)
class CheckpointSlot:
    """Where the run in progress may keep its resumable state, and how often it should save it."""

    path: Path
    every_s: float = DEFAULT_EVERY_S

    def __post_init__(self) -> None:
        if not self.every_s > 0:
            raise ValueError(f"checkpoint interval must be positive, got {self.every_s}")

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None when there is none (or it cannot be read: then a warning says why)."""
        if not self.path.is_file():
            return None
        try:
            return torch.load(self.path, map_location="cpu", weights_only=False)
        except Exception as exc:  # a truncated or foreign file must not stop the run: it starts afresh
            warnings.warn(f"ignoring unreadable checkpoint {self.path}: {type(exc).__name__}: {exc}", stacklevel=2)
            return None

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` atomically (temporary file in the same folder, then rename)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(state, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def checkpoint_path(out: Path, record_filename: str) -> Path:
    """The checkpoint file of the run whose record is ``record_filename`` under results folder ``out``."""
    return Path(out) / CHECKPOINTS_DIR / (Path(record_filename).stem + ".pt")


_SLOT: ContextVar[CheckpointSlot | None] = ContextVar("tdbench_checkpoint_slot", default=None)


def current_slot() -> CheckpointSlot | None:
    """The checkpoint slot of the run in progress, or None when the caller gave none (tests, direct calls)."""
    return _SLOT.get()


@contextmanager
def checkpoint_slot(slot: CheckpointSlot | None) -> Iterator[CheckpointSlot | None]:
    """Offer ``slot`` to the methods run inside the block."""
    token = _SLOT.set(slot)
    try:
        yield slot
    finally:
        _SLOT.reset(token)
