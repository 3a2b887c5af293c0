"""What the Dask path costs against the local process pool, on the smoke grid (issue 21's targets).

Run with: python -m pytest tests/benchmarks/test_dask_overhead.py -m benchmark -s. The same grid
(every problem the smoke profile plans, every method, one seed) runs once with ``--jobs 2`` and once with
``--executor dask --jobs 2`` (a LocalCluster of two single-threaded worker processes, started and stopped by
the command, all of it inside the measured time). Targets: under 0.3 s of extra wall time per run, and the
whole grid within 1.3x of the local pool. Run it alone: both halves use both cores of a 2-core machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")

REPO = Path(__file__).resolve().parents[2]
GRID = ["--profile", "smoke", "--seeds", "1", "--no-progress", "--jobs", "2"]


def _timed_run(extra: list[str], out: Path) -> tuple[float, int]:
    """Wall seconds of one ``run_all.py`` call and the number of records it wrote."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "run_all.py", "--out", str(out), *GRID, *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    seconds = time.perf_counter() - start
    assert result.returncode == 0, result.stderr[-2000:]
    return seconds, len(list((out / "records").glob("*.json")))


def test_dask_overhead_on_the_smoke_grid(tmp_path: Path) -> None:
    local_s, runs = _timed_run([], tmp_path / "local")
    dask_s, dask_runs = _timed_run(["--executor", "dask"], tmp_path / "dask")
    assert dask_runs == runs > 0
    per_run_s = (dask_s - local_s) / runs
    print(
        f"\nsmoke grid, {runs} runs: --jobs 2 {local_s:.1f} s, --executor dask (2-worker LocalCluster) "
        f"{dask_s:.1f} s, ratio {dask_s / local_s:.2f}, overhead {per_run_s:+.3f} s per run"
    )
    assert per_run_s < 0.3
    assert dask_s < 1.3 * local_s
