"""Run records on disk: one JSON file per (problem, method, seed, configuration).

Records are written atomically (a temporary file in the same folder, flushed
to disk, then renamed), so a run killed at any point leaves either a whole
record or none. A finished record is never rewritten unless asked to.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
RECORDS_DIR = "records"


@dataclass(frozen=True)
class RunKey:
    """Identifies one run: what ran, on what, with which seed and configuration."""

    problem: str
    method: str
    seed: int
    config: dict[str, Any]

    @property
    def config_hash(self) -> str:
        """Short stable hash of the configuration."""
        blob = json.dumps(self.config, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    @property
    def filename(self) -> str:
        """File name of this run's record."""
        return f"{self.problem}__{self.method}__seed{self.seed}__{self.config_hash}.json"


def records_dir(out: Path) -> Path:
    """Folder holding the records of a results directory."""
    return Path(out) / RECORDS_DIR


def record_path(out: Path, key: RunKey) -> Path:
    """Where the record of ``key`` lives under ``out``."""
    return records_dir(out) / key.filename


def is_finished(out: Path, key: RunKey) -> bool:
    """Whether ``key`` already has a record under ``out``."""
    return record_path(out, key).is_file()


def write_record(out: Path, key: RunKey, record: dict[str, Any]) -> Path:
    """Write ``record`` for ``key`` atomically and return its path."""
    folder = records_dir(out)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / key.filename
    payload = json.dumps({"schema": SCHEMA_VERSION, **record}, indent=1, sort_keys=True, default=str)
    fd, tmp = tempfile.mkstemp(prefix=f".{key.filename}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return final


def remove_stale_temporaries(out: Path) -> int:
    """Delete temporary files left by killed runs; returns how many."""
    folder = records_dir(out)
    if not folder.is_dir():
        return 0
    stale = list(folder.glob(".*.tmp"))
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)


def load_records(out: Path) -> list[dict[str, Any]]:
    """All records under ``out``, in file-name order."""
    folder = records_dir(out)
    if not folder.is_dir():
        return []
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


def check_writable(out: Path) -> None:
    """Raise ValueError unless ``out`` can be created and written to."""
    out = Path(out)
    try:
        records_dir(out).mkdir(parents=True, exist_ok=True)
        probe = records_dir(out) / f".write-probe-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"output folder {str(out)!r} is not writable: {exc.strerror or exc}") from None


def read_record(out: Path, key: RunKey) -> dict[str, Any]:
    """The record of ``key`` under ``out``."""
    return json.loads(record_path(out, key).read_text())
