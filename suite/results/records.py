"""Run records on disk: one JSON file per (problem, method, seed, configuration).

Records are written atomically (a temporary file in the same folder, flushed
to disk, then renamed), so a run killed at any point leaves either a whole
record or none. A finished record is never rewritten unless asked to.

A record that cannot be read back (not a regular file, not JSON, not an object,
a required key missing or of the wrong type, a field outside the format of
:mod:`suite.results.record_model`, or naming another run) is treated as absent with a
warning naming the file: its run is planned again, and reports skip it. Reads
open only regular files, never following a symbolic link and never waiting on
a FIFO or a device.

Temporary files (of records and of checkpoints, :mod:`suite.core.checkpoint`)
carry the writing process's id in their name, ``.<name>.<pid>.<random>.tmp``,
so that cleaning up after killed runs never removes the temporary of a
process still writing one.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.core.budget import is_over_budget
from suite.core.files import CHECKPOINTS_DIR, TEMPORARY_SUFFIX, read_regular_bytes, write_temporary
from suite.results.record_model import FORMAT_VERSION, STATUSES, format_problem, migrate

#: The format version written in every record's ``schema`` field (:mod:`suite.results.record_model`).
SCHEMA_VERSION = FORMAT_VERSION
RECORDS_DIR = "records"
#: Keys every record must hold, with their types.
REQUIRED_KEYS: dict[str, type] = {
    "problem": str,
    "method": str,
    "seed": int,
    "status": str,
    "metrics": dict,
}
#: A run's outcome: it finished ("ok") or its method failed or was stopped ("failed"); the planner's row for a
#: method that does not apply to a problem ("not_applicable") is never written as a file.
OK, FAILED, NOT_APPLICABLE = STATUSES
#: Key marking a run that ended without its record (its worker died): kept for the run's summary, never written.
LOST = "lost"
#: Seconds after which a temporary file whose name carries no process id (older versions) counts as left over.
LEGACY_TEMPORARY_AGE_S = 600.0
#: Largest record file read (records are kilobytes; a bigger file is no record and is not read into memory).
MAX_RECORD_BYTES = 64 * 1024 * 1024
#: Deepest nesting of lists and objects in a file the suite reads (records nest about 5 deep); a deeper file is no
#: record, and reading or walking it would exhaust the interpreter's stack (issue 51, H6).
MAX_JSON_DEPTH = 64


def make_record(
    problem: str, method: str, seed: int | None, status: str, reason: str | None = None, **fields: Any
) -> dict[str, Any]:
    """The one constructor of a record (ok, failed, lost or not applicable): who ran, the outcome, then ``fields``.

    Example:
        >>> make_record("sas", "mf", None, NOT_APPLICABLE, "needs DAGs", metrics={})["status"]
        'not_applicable'
    """
    if status not in STATUSES:
        raise ValueError(f"unknown record status {status!r}; valid: {', '.join(STATUSES)}")
    return {"problem": problem, "method": method, "seed": seed, "status": status, "reason": reason, **fields}


def lost_record(key: RunKey, status: str, reason: str | None) -> dict[str, Any]:
    """The in-memory record of a run whose worker died before writing one (marked ``LOST``; never saved)."""
    return make_record(key.problem, key.method, key.seed, status, reason, config=key.config, **{LOST: True})


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


def json_depth_over(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` (parsed JSON) nests lists and objects more than ``limit`` deep; walked without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def read_json(path: Path, limit: int = MAX_RECORD_BYTES) -> Any:
    """The JSON value in the regular file ``path``: OSError when unreadable, ValueError when it is no usable JSON.

    Not UTF-8, not JSON, or nested more than :data:`MAX_JSON_DEPTH` deep are all ValueErrors (never a
    RecursionError), so a planted file is passed over like any malformed one.
    """
    try:
        value = json.loads(read_regular_bytes(Path(path), limit).decode())
    except UnicodeDecodeError as exc:
        raise ValueError(f"UnicodeDecodeError: {exc}") from None
    except RecursionError:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} deep (too deep to parse)") from None
    if json_depth_over(value):
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} deep")
    return value


def regular_files(folder: Path, pattern: str = "*.json") -> list[Path]:
    """The regular files of ``folder`` matching ``pattern``, sorted (links, FIFOs, devices and folders left out)."""
    found = []
    for path in sorted(Path(folder).glob(pattern)):
        try:
            if stat.S_ISREG(path.lstat().st_mode):
                found.append(path)
        except OSError:  # removed meanwhile
            continue
    return found


def _parse(path: Path, key: RunKey | None) -> tuple[dict[str, Any] | None, str | None]:
    """(the record in ``path``, None), or (None, why it is unusable: unreadable, not a record, not ``key``'s)."""
    try:
        record = read_json(Path(path))
    except OSError as exc:
        return None, f"unreadable record {path}: {exc.strerror or exc}"
    except ValueError as exc:
        return None, f"unreadable record {path}: {exc}"
    if not isinstance(record, dict):
        return None, f"invalid record {path}: a JSON {type(record).__name__}, not an object"
    missing = [name for name in REQUIRED_KEYS if name not in record]
    if missing:
        return None, f"invalid record {path}: missing {', '.join(missing)}"
    for name, kind in REQUIRED_KEYS.items():
        if not isinstance(record[name], kind) or isinstance(record[name], bool):
            return None, f"invalid record {path}: {name} is a {type(record[name]).__name__}, not a {kind.__name__}"
    found = f"{record['problem']} / {record['method']} / seed {record['seed']}"
    if key is not None and (record["problem"], record["method"], record["seed"]) != (key.problem, key.method, key.seed):
        return None, f"invalid record {path}: holds {found}, not {key.problem} / {key.method} / seed {key.seed}"
    if not Path(path).name.startswith(f"{record['problem']}__{record['method']}__seed{record['seed']}__"):
        return None, f"invalid record {path}: holds {found}, not the run its file name says"
    try:
        record = migrate(record)
    except ValueError as exc:
        return None, f"invalid record {path}: {exc}"
    why = format_problem(record)
    if why is not None:
        return None, f"invalid record {path}: {why}"
    return record, None


def load_record_file(path: Path) -> dict[str, Any]:
    """The record in the file ``path``; ValueError naming the file when it is not a usable record."""
    record, why = _parse(Path(path), None)
    if record is None:
        raise ValueError(why)
    return record


def record_problem(path: Path, key: RunKey | None = None) -> str | None:
    """Why the record file ``path`` is unusable (unreadable, not a record, or not the record of ``key``), or None."""
    return _parse(path, key)[1]


def _read_valid(path: Path, key: RunKey | None = None) -> dict[str, Any] | None:
    """The record in ``path``, or None (with a warning naming the file) when it is unusable."""
    record, why = _parse(path, key)
    if why is not None:
        warnings.warn(f"{why}; treating it as absent (a run is redone, reports skip it)", stacklevel=3)
    return record


def is_finished(out: Path, key: RunKey) -> bool:
    """Whether ``key`` already has a usable record under ``out`` (an unusable one is warned about and ignored)."""
    path = record_path(out, key)
    return (path.is_file() or path.is_symlink()) and _read_valid(path, key) is not None


class RecordExists(FileExistsError):
    """An exclusive write found the run's record already there (another process published it first)."""


def write_record(out: Path, key: RunKey, record: dict[str, Any], exclusive: bool = False) -> Path:
    """Write ``record`` for ``key`` atomically and return its path.

    With ``exclusive`` the record is created only if no usable one is there (a hard link of the finished temporary
    file, which fails when the name exists): the loser of two racing writers gets :class:`RecordExists` and writes
    nothing, so a record is never written twice; an unusable file there (cut short) is replaced. Without
    ``exclusive`` an existing record is replaced (``--force``).
    """
    folder = records_dir(out)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / key.filename
    tmp = _write_temporary(final, record)
    try:
        if not exclusive:
            os.replace(tmp, final)
        elif not _create_from(Path(tmp), final):
            if _parse(final, key)[0] is not None:
                raise RecordExists(errno.EEXIST, "another process recorded this run first", str(final))
            os.replace(tmp, final)  # an unusable record there (a write cut short) gives way, as a rerun's would
    finally:
        Path(tmp).unlink(missing_ok=True)
    return final


def rewrite_record(path: Path, record: dict[str, Any]) -> None:
    """Replace the record file ``path`` with ``record`` atomically (``tdbench facts`` adding what older ones lack)."""
    tmp = _write_temporary(path, record)
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_temporary(final: Path, record: dict[str, Any]) -> Path:
    """``record`` as JSON (with the schema version) in a synced temporary file beside ``final``; its path."""
    payload = json.dumps({"schema": SCHEMA_VERSION, **record}, indent=1, sort_keys=True, default=str)
    return write_temporary(final, payload.encode())


def _create_from(tmp: Path, final: Path) -> bool:
    """Give ``tmp``'s content the name ``final`` only if that name is free; False when it is taken."""
    try:
        os.link(tmp, final)
    except FileExistsError:
        return False
    except OSError as exc:  # a file system without hard links: check, then rename (a narrow race remains)
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
        if final.exists():
            return False
        os.replace(tmp, final)
    return True


def temporary_writer(path: Path) -> int | None:
    """The process id in the name of temporary file ``path``, or None when its name carries none."""
    stem = Path(path).name.removesuffix(TEMPORARY_SUFFIX)
    parts = stem.rsplit(".", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    pid = int(parts[1])
    return pid if pid > 0 else None


def process_alive(pid: int) -> bool:
    """Whether a process with id ``pid`` exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    except OSError:  # e.g. an id out of range: no such process
        return False
    return True


def _is_stale(path: Path, now: float) -> bool:
    """Whether temporary file ``path`` was left by a process that is gone (or, without a process id, is old)."""
    pid = temporary_writer(path)
    if pid is not None:
        return not process_alive(pid)
    try:
        return now - path.lstat().st_mtime > LEGACY_TEMPORARY_AGE_S
    except FileNotFoundError:
        return False


def _own_folder(out: Path, folder: Path) -> bool:
    """Whether ``folder`` is a real folder (not a link) that resolves inside ``out``."""
    try:
        if not stat.S_ISDIR(folder.lstat().st_mode):
            return False
        return folder.resolve().is_relative_to(Path(out).resolve())
    except (OSError, RuntimeError):
        return False


def remove_stale_temporaries(out: Path) -> int:
    """Delete temporary files of records, checkpoints and draws left by killed runs (never a live writer's).

    Only regular files are deleted, and only in those folders when they are real folders inside ``out``: a
    ``draws/`` that is a symbolic link (to a folder of someone else's) is left alone.
    """
    now = time.time()
    removed = 0
    for folder in (records_dir(out), Path(out) / CHECKPOINTS_DIR, Path(out) / "draws"):
        if not _own_folder(out, folder):
            continue
        for path in regular_files(folder, f".*{TEMPORARY_SUFFIX}"):
            if _is_stale(path, now):
                path.unlink(missing_ok=True)
                removed += 1
    return removed


def load_records(out: Path) -> list[dict[str, Any]]:
    """All usable records under ``out``, in file-name order (unusable ones are skipped with a warning).

    A ``*.json`` entry that is not a regular file (a symbolic link, a FIFO, a device) is warned about and skipped
    without being opened for longer than it takes to see what it is.
    """
    folder = records_dir(out)
    if not folder.is_dir():
        return []
    records = (_read_valid(path) for path in sorted(folder.glob("*.json")))
    return [record for record in records if record is not None]


def check_writable(out: Path) -> None:
    """Raise ValueError unless ``out`` can be created and written to (``out/records`` is created)."""
    check_folder_writable(records_dir(out), f"output folder {str(out)!r}")


def check_folder_writable(folder: Path, what: str) -> None:
    """Raise ValueError (naming ``what``) unless ``folder`` can be created and a file written in it.

    The probe is a new file of a fresh name (``.write-probe-<pid>.<random>``, made with ``O_CREAT | O_EXCL``), so
    a file or symbolic link planted under a predictable name is never written through.
    """
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".write-probe-{os.getpid()}.", dir=folder)
        try:
            os.write(fd, b"ok")
        finally:
            os.close(fd)
            Path(probe).unlink(missing_ok=True)
    except OSError as exc:
        raise ValueError(f"{what} is not writable: {exc.strerror or exc}") from None


def writable_without_writing(folder: Path, what: str) -> None:
    """Raise ValueError (naming ``what``) unless ``folder`` could be created and written to; writes nothing.

    The check of a dry run: the nearest existing folder on the path must be a folder this process may write in.
    """
    existing = Path(os.path.abspath(folder))
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{what} is not writable: {existing} is not a folder this process may write in")


#: Folders the suite writes into inside a results folder: each must be a real folder, never a symbolic link.
OWN_FOLDERS = (RECORDS_DIR, CHECKPOINTS_DIR, "draws", "locks")


def linked_own_folder(out: Path) -> Path | None:
    """The first of ``out``'s own folders (:data:`OWN_FOLDERS`) that is a symbolic link, or None (issue 51, H2)."""
    for name in OWN_FOLDERS:
        if (Path(out) / name).is_symlink():
            return Path(out) / name
    return None


def read_record(out: Path, key: RunKey) -> dict[str, Any]:
    """The record of ``key`` under ``out``; when missing or unusable, a failed stand-in saying why (never raises)."""
    path = record_path(out, key)
    record, why = _parse(path, key)
    if record is not None:
        return record
    warnings.warn(why, stacklevel=2)
    return {
        "problem": key.problem,
        "method": key.method,
        "seed": key.seed,
        "status": "failed",
        "reason": why,
        "metrics": {},
    }


def load_replay_counts(source: Path) -> dict[tuple[str, str, int, str], dict[str, Any]]:
    """Counts of timed runs to replay, by (problem, method, seed, problem config as JSON), from a record or folder.

    ``source`` is one record file, a results folder (its ``records/``) or a folder of records. Only records of
    timed runs (a ``time_budget_s`` in their budget) count. Raises ValueError naming a file that is unreadable,
    is not a regular file, is not a record, or breaks the format (a time budget that is not in
    (0, ``MAX_TIME_BUDGET_S``], counts that are not iteration numbers up to ``suite.results.schema.MAX_COUNT``),
    and when ``source`` holds no timed record at all.
    """
    source = Path(source)
    if source.is_dir():
        folder = records_dir(source) if records_dir(source).is_dir() else source
        paths = sorted(folder.glob("*.json"))
    elif source.exists() or source.is_symlink():  # a file: read only if it is a regular one
        paths = [source]
    else:
        raise ValueError(f"{source}: no such record file or folder")
    found: dict[tuple[str, str, int, str], dict[str, Any]] = {}
    for path in paths:
        record, why = _parse(path, None)
        if record is None:
            raise ValueError(why)
        budget = record.get("budget") or {}
        if budget.get("time_budget_s") is None:
            continue
        if not isinstance(record.get("counts"), dict):
            raise ValueError(f"invalid record {path}: a timed run without counts")
        config = json.dumps(record.get("problem_config"), sort_keys=True, default=str)
        found[(record["problem"], record["method"], record["seed"], config)] = {
            "counts": record["counts"],
            "time_budget_s": float(budget["time_budget_s"]),
            "file": path.name,
        }
    if not found:
        raise ValueError(f"{source}: no record of a timed run (one with a time budget) to replay")
    return found


def over_budget(record: dict[str, Any]) -> bool:
    """Whether an ``ok`` run overshot its time budget beyond the allowance (:func:`suite.core.context.is_over_budget`).

    Records written before the suite judged it are judged here by the same rule, from their walltime and budget;
    a replayed run is never over budget (counts, not the clock, set its length).

    Example:
        >>> over_budget({"budget": {"time_budget_s": 2.0}, "metrics": {"walltime_s": {"value": 5.9}}})
        True
    """
    budget = record.get("budget")
    if not isinstance(budget, dict):
        return False
    if "over_budget" in budget:
        return budget["over_budget"] is True
    seconds, limit = (record.get("metrics") or {}).get("walltime_s", {}).get("value"), budget.get("time_budget_s")
    if budget.get("replayed") or not isinstance(seconds, int | float) or not isinstance(limit, int | float):
        return False
    return limit > 0 and is_over_budget(float(seconds), float(limit))
