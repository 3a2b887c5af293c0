"""Slices of a planned grid (``--shard I/N``) and its listing (``--dry-run``), for plain array jobs.

A shard is every N-th run of the plan in its planning order (problems, then methods, then seeds), starting at
the I-th: the N shards are disjoint, their union is the grid, and each gets a share of every problem. The plan
and its order depend only on the command's arguments, so every array task computes the same slices.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from suite.results.records import RunKey

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class _Planned(Protocol):
    key: RunKey


Run = TypeVar("Run", bound=_Planned)


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as (I, N) with 1 <= I <= N; ValueError otherwise."""
    match = _SHARD.match(text)
    if match is None:
        raise ValueError(f"--shard takes I/N (the I-th of N slices, 1 <= I <= N, e.g. 1/4), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"--shard {text}: I/N needs 1 <= I <= N (the I-th of N slices), e.g. 1/{max(count, 1)}")
    return index, count


def shard_of(plan: Sequence[Run], index: int, count: int) -> list[Run]:
    """The ``index``-th (1-based) of ``count`` disjoint slices of ``plan``."""
    return list(plan[index - 1 :: count])


def dry_run_line(key: RunKey, recorded: bool) -> str:
    """One JSON line describing a planned run: problem, method, seed, options, key and whether it has a record."""
    config: dict[str, Any] = key.config
    row = {
        "problem": key.problem,
        "method": key.method,
        "seed": key.seed,
        "method_options": config.get("method_options", {}),
        "problem_config": config.get("problem_config", {}),
        "profile": config.get("profile"),
        "device": config.get("device"),
        "time_budget_s": config.get("time_budget_s"),
        "key": Path(key.filename).stem,
        "recorded": recorded,
    }
    return json.dumps(row, sort_keys=False, default=str)
