"""Load 10,000 records (json.loads + the format check): hand-written checks (old code), pydantic, msgspec.

python bench_records.py RESULTS_FOLDER hand|typed   (hand: run with PYTHONPATH at a checkout before 5936b77)
"""

import glob
import json
import sys
import time
from pathlib import Path

texts = [open(f).read() for f in sorted(glob.glob(sys.argv[1] + "/records/*.json"))]
texts = (texts * (10_000 // len(texts) + 1))[:10_000]
print(len(texts), "records,", round(sum(map(len, texts)) / 1e6, 1), "MB of JSON")


def run(check):
    start = time.perf_counter()
    for text in texts:
        assert check(json.loads(text)) is None
    return time.perf_counter() - start


if sys.argv[2] == "hand":
    from suite.results.schema import schema_problem

    checks = [("json.loads only", lambda r: None), ("hand-written", schema_problem)]
else:
    sys.path.insert(0, str(Path(__file__).parent))
    import msgspec_records

    from suite.results.record_model import format_problem

    checks = [("json.loads only", lambda r: None), ("pydantic", format_problem), ("msgspec", msgspec_records.problem)]
for name, check in checks:
    times = [run(check) for _ in range(3)]
    print(f"{name:16s} best of 3: {min(times):.2f} s   {[round(x, 2) for x in times]}")
