"""What the report layer needs to know about a problem, written into each run record when the run is made.

The report (leaderboards, plots, the HTML page) reads records only: it never imports a problem class, so
results can be read without the code (or the version of it) that made them. :func:`problem_facts` collects
those facts from a problem instance; ``tdbench facts RESULTS_DIR`` adds them to records written
before they were kept (it imports the problem classes, which the report itself never does).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from suite.core.registry import problem_class
from suite.results.records import load_record_file, records_dir, regular_files, rewrite_record

#: Version of the ``problem_facts`` block; bump when its keys change.
FACTS_VERSION = 1


def _first_line(text: str | None) -> str:
    """First non-empty line of a docstring ('' when there is none)."""
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def problem_facts(problem: Any) -> dict[str, Any]:
    """The facts about ``problem`` (an instance or a class) that reports need, as plain JSON values."""
    cls = problem if isinstance(problem, type) else type(problem)
    sweep = getattr(cls, "sweep", None)
    num_models = None
    if not isinstance(problem, type):
        num_models = problem.num_models
    return {
        "version": FACTS_VERSION,
        "description": _first_line(cls.__doc__),
        "main_metric": cls.main_metric,
        "higher_is_better": sorted(getattr(cls, "higher_is_better", frozenset())),
        "sweep": None if sweep is None else [str(sweep[0]), sweep[1]],
        "num_models": num_models,
        "reported_neg_elbo": {k: float(v) for k, v in (getattr(cls, "reported_neg_elbo", {}) or {}).items()},
        "reported_source": str(getattr(cls, "reported_source", "") or ""),
        "reported_dag_table": {
            method: {metric: float(value) for metric, value in row.items()}
            for method, row in (getattr(cls, "reported_dag_table", {}) or {}).items()
        },
    }


def add_missing_facts(out: Path) -> tuple[int, list[str]]:
    """Add ``problem_facts`` to every record under ``out/records`` that lacks it; returns (updated, problems).

    Only regular files are read (links, FIFOs and devices named ``*.json`` are passed over); a file that is not a
    usable record is named in a warning and left as it is.
    """
    updated, unknown = 0, set()
    for path in regular_files(records_dir(out)):
        try:
            record = load_record_file(path)
        except ValueError as exc:
            warnings.warn(f"{exc}; left as it is", stacklevel=2)
            continue
        if record.get("problem_facts") is not None:
            continue
        try:
            cls = problem_class(record["problem"])
        except KeyError:
            unknown.add(record["problem"])
            continue
        # num_models stays None: the problem is not built here
        rewrite_record(path, {**record, "problem_facts": problem_facts(cls)})
        updated += 1
    return updated, sorted(unknown)
