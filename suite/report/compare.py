"""Compare the metrics of two results folders run for run: ``tdbench compare BEFORE AFTER``.

Runs are matched by (problem, problem configuration, method, seed); every metric except walltime must be
bitwise equal (value and standard error). Used to check that a refactoring changed no number; exit status 0
when every run of BEFORE has an identical counterpart in AFTER, 1 otherwise (the differences are printed).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from suite.results.records import load_records

#: Metrics that measure the machine, not the method: never compared.
TIMING_METRICS = frozenset({"walltime_s"})


def _key(record: dict[str, Any]) -> tuple[str, str, str, int]:
    config = json.dumps(record.get("problem_config"), sort_keys=True, default=str)
    return record["problem"], config, record["method"], record["seed"]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b)


def differences(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    """One line per run of ``before`` whose status or non-timing metrics differ in ``after`` (or that is missing)."""
    later = {_key(record): record for record in after}
    lines = []
    for record in before:
        name = f"{record['problem']} / {record['method']} / seed {record['seed']}"
        other = later.get(_key(record))
        if other is None:
            lines.append(f"{name}: missing")
            continue
        if record.get("status") != other.get("status"):
            lines.append(f"{name}: status {record.get('status')} -> {other.get('status')}")
        metrics, other_metrics = record.get("metrics", {}), other.get("metrics", {})
        for metric in sorted((metrics.keys() | other_metrics.keys()) - TIMING_METRICS):
            a, b = metrics.get(metric), other_metrics.get(metric)
            if a is None or b is None or not all(_same(a.get(f), b.get(f)) for f in ("value", "se")):
                lines.append(f"{name}: {metric} {a} -> {b}")
    return lines


def main(argv: list[str] | None = None, prog: str = "tdbench compare") -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="results folder of the reference run")
    parser.add_argument("after", type=Path, help="results folder to compare with it")
    args = parser.parse_args(argv)
    before, after = load_records(args.before), load_records(args.after)
    if not before:
        print(f"error: no records in {args.before}", file=sys.stderr)
        return 2
    lines = differences(before, after)
    for line in lines:
        print(line)
    compared = sum(len(r.get("metrics", {}).keys() - TIMING_METRICS) for r in before)
    print(f"{len(before)} runs, {compared} metric values compared: {len(lines)} difference(s)")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
