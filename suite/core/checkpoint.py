"""Resumable state of a run in progress, so that a long training interrupted part way loses at most a few minutes.

The harness gives each run a :class:`CheckpointSlot` (a file under the results folder, named after the run's key,
and how often to save) for the duration of :meth:`Method.run` as ``context.checkpoint``
(:class:`suite.core.context.RunContext`); a method that can resume saves its state there now and then, and on the next
attempt of the same run starts from what it finds. The harness deletes the file once the run's record is written.
Methods that ignore the slot lose nothing but the unfinished run, as before. Because the file name carries the run's
configuration hash, a checkpoint is only ever offered to the same problem, method options, profile and seed; the
method still checks that the state it finds matches what it is about to do and starts afresh (with a warning) when
it does not.

A checkpoint is loaded with ``torch.load(weights_only=True)``: a file planted in the results folder can hold data
only, never run code. So a state may hold only tensors (RNG states are ByteTensors), ``torch.Size``/``dtype``/
``device`` values, dicts, lists, tuples and plain ``str``/``int``/``float``/``bool``/``None`` (optimizer and module
state dicts qualify; numpy values and custom objects do not): :meth:`CheckpointSlot.save` refuses anything
else. Temporary files carry the writer's process id (:func:`suite.core.files.temporary_prefix`), so that
:func:`suite.results.records.remove_stale_temporaries` removes those of killed runs only.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from suite.core.files import CHECKPOINTS_DIR, TEMPORARY_SUFFIX, give_ordinary_mode, temporary_prefix

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
        try:  # weights only: a planted pickle can hold data, never run code
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a truncated, foreign or code-carrying file must not stop the run: it starts afresh
            warnings.warn(f"ignoring unreadable checkpoint {self.path}: {type(exc).__name__}: {exc}", stacklevel=2)
            return None
        if not isinstance(state, dict):
            warnings.warn(
                f"ignoring checkpoint {self.path}: it holds a {type(state).__name__}, not a dict", stacklevel=2
            )
            return None
        return state

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` atomically (temporary in the same folder, then rename); TypeError unless weights-only."""
        check_weights_only(state)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        prefix = temporary_prefix(self.path.name)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=prefix, suffix=TEMPORARY_SUFFIX)
        try:
            give_ordinary_mode(fd)
            with os.fdopen(fd, "wb") as handle:
                torch.save(state, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


_PLAIN = (str, int, float, bool, complex, type(None), torch.Size, torch.dtype, torch.device)


def check_weights_only(value: Any, where: str = "state") -> None:
    """Raise TypeError naming the first part of ``value`` that ``torch.load(weights_only=True)`` could not read back."""
    if isinstance(value, torch.Tensor) or type(value) in _PLAIN:  # exact types: numpy scalars subclass float
        return
    if type(value) in (dict, OrderedDict):
        for key, item in value.items():
            check_weights_only(key, f"{where} key {key!r}")
            check_weights_only(item, f"{where}[{key!r}]")
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            check_weights_only(item, f"{where}[{i}]")
        return
    raise TypeError(
        f"checkpoint {where} is a {type(value).__module__}.{type(value).__qualname__}, which a weights-only "
        "load cannot read; convert it to tensors, dicts, lists, tuples, str, int, float, bool or None"
    )


def checkpoint_path(out: Path, record_filename: str) -> Path:
    """The checkpoint file of the run whose record is ``record_filename`` under results folder ``out``."""
    return Path(out) / CHECKPOINTS_DIR / (Path(record_filename).stem + ".pt")
