"""``tdbench report`` on 10,000 records (issue 50: cluster users run 10 seeds of large grids). Target: under 30 s.

Run with ``pytest tests/benchmarks/test_report_scale.py -m benchmark``. The records are the shipped default run's
198 (``tests/quick_records.py``) copied under new seeds until there are 10,000, each copy's TV moved by up to 5%
so that the seeds differ. Measured 25.4 s on the 2-core reference machine (``docs/metrics.md``).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from suite.report.build import report_from_folder
from tests.quick_records import quick_records_dir

RECORDS = 10_000
TARGET_S = 30.0


def _many_records(out: Path, count: int) -> None:
    base = [json.loads(path.read_text()) for path in sorted(quick_records_dir().glob("*.json"))]
    (out / "records").mkdir(parents=True)
    rng = random.Random(0)
    for i in range(count):
        record = json.loads(json.dumps(base[i % len(base)]))
        record["seed"] += 3 * (i // len(base))
        record["draws"] = None
        tv = record["metrics"].get("model_prob_tv")
        if tv and isinstance(tv.get("value"), float):
            tv["value"] = min(1.0, tv["value"] * (1 + 0.05 * rng.uniform(-1, 1)))
        name = f"{record['problem']}__{record['method']}__seed{record['seed']}__{record['config_hash']}.json"
        (out / "records" / name).write_text(json.dumps(record))


@pytest.mark.benchmark
def test_report_of_ten_thousand_records(benchmark, tmp_path: Path) -> None:
    _many_records(tmp_path, RECORDS)
    start = time.perf_counter()
    benchmark.pedantic(report_from_folder, args=(tmp_path,), rounds=1, iterations=1)
    seconds = time.perf_counter() - start
    benchmark.extra_info["records"] = RECORDS
    assert (tmp_path / "summary.csv").is_file() and (tmp_path / "index.html").is_file()
    assert seconds < TARGET_S, f"report of {RECORDS} records took {seconds:.1f} s"
