"""The records of a real default run, shipped with the tests (``tests/fixtures/quick_records.json.gz``).

They are the 198 records of ``tdbench run`` at commit 1a79aa5 (2 CPU cores, 2026-12-06, from a fresh clone with a
fresh venv: 11 min 7 s; 8 problems, 3 seeds per method), with their problem facts; ``results/`` itself is not in
git. Regenerate after a default run with ``python -m tests.quick_records results/quick``.
"""

from __future__ import annotations

import functools
import gzip
import json
import sys
import tempfile
from pathlib import Path

BUNDLE = Path(__file__).resolve().parent / "fixtures" / "quick_records.json.gz"


@functools.cache
def quick_records_dir() -> Path:
    """A folder (made once per process) holding the shipped quick records under their original file names."""
    folder = Path(tempfile.mkdtemp(prefix="tdbench-quick-records-")) / "records"
    folder.mkdir()
    for name, record in json.loads(gzip.decompress(BUNDLE.read_bytes())).items():
        (folder / name).write_text(json.dumps(record, indent=1, sort_keys=True))
    return folder


def bundle(records_dir: Path) -> None:
    """Write the records of ``records_dir`` into :data:`BUNDLE` (deterministic bytes)."""
    records = {path.name: json.loads(path.read_text()) for path in sorted(records_dir.glob("*.json"))}
    data = json.dumps(records, sort_keys=True, separators=(",", ":")).encode()
    BUNDLE.write_bytes(gzip.compress(data, 9, mtime=0))


if __name__ == "__main__":
    bundle(Path(sys.argv[1]) / "records")
