"""A worker's run spec for tests: the smoke profile on the CPU, one job and thread, unless a test says otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from suite.results.records import RunKey
from suite.run import parallel as par


def smoke_spec(key: RunKey, out: Path, **fields: Any) -> par.RunSpec:
    """A :class:`suite.run.parallel.RunSpec` for ``key`` writing to ``out``; ``fields`` replace the defaults."""
    defaults: dict[str, Any] = {
        "method_settings": {},
        "profile": "smoke",
        "num_draws": 4096,
        "device": "cpu",
        "eval_draws": 300,
        "jobs": 1,
        "threads": 1,
    }
    return par.RunSpec(key=key, out=out, **{**defaults, **fields})
