"""The report of a results folder, from its records alone: every leaderboard, table, plot and the page, and the text.

:func:`write_report` writes, into the results folder: ``records_long.csv``, per problem ``leaderboard_<p>.md``,
``.csv`` and ``.png`` (model probabilities) and ``curves_<p>.png``, per sweep ``sweep_<name>.csv`` and ``.png``,
per structure-learning problem ``dag_table_<p>.csv``, for the exact-posterior DAG problems ``posterior_table.csv``
and ``posterior_fig2.png`` (:mod:`suite.report.posterior_tables`), ``reported_comparison.md``, ``summary.csv``, ``.md``
and ``.png`` across problems (:mod:`suite.report.summary`), the tidy results table
(:mod:`suite.results.table`) and ``index.html`` (:mod:`suite.report.html`); it returns what to print
(:mod:`suite.report.terminal`). :func:`report_from_folder` does the same for the records already in a folder.

Nothing here imports ``problems/``, ``methods/`` or the registry: what the report needs to know about a problem
comes from each record's ``problem_facts``. A record without them (written before records kept them) is refused
before anything is written, with the command that adds them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from suite.core.files import write_atomically
from suite.report.configurations import label_configurations
from suite.report.curves import plot_curves
from suite.report.dag_tables import dag_tables
from suite.report.leaderboard import (
    NOT_APPLICABLE,
    facts_problem,
    format_reported_comparison,
    reported_comparison,
    table_csv,
    write_leaderboards,
)
from suite.report.plots import plot_model_probs
from suite.report.posterior_tables import plot_posterior, posterior_table
from suite.report.summary import write_summary
from suite.report.sweeps import SWEEP_METRIC, plot_sweep, sweep_slug, sweep_tables
from suite.report.terminal import render
from suite.results import records as rec

#: Where a run keeps the pairs of problem and method that do not apply, so that a report shows them too.
NOT_APPLICABLE_FILE = "not_applicable.json"
NOTHING = "No runs planned: nothing to report."
#: The DAG posterior study (BayesDAG Fig. 2 format): its table and its plot.
POSTERIOR_CSV = "posterior_table.csv"
POSTERIOR_PNG = "posterior_fig2.png"


class MissingFacts(ValueError):
    """A record the report cannot use for want of its problem's facts: the message names it and the fix.

    ``tdbench report`` and ``tdbench run`` both report it as a usage error (exit 2, no traceback): the records stay
    as they are, and ``tdbench facts RESULTS_DIR`` adds the facts.
    """


def check_facts(records: list[dict[str, Any]], out: Path, every: bool = False) -> None:
    """Raise :class:`MissingFacts` naming the first record whose ``problem_facts`` are missing or unusable, and the fix.

    Successful runs must carry them; with ``every`` failed runs too (records on disk, where all should have them:
    a failed stand-in for a run that ended without its record exists only in memory).
    """
    for record in records:
        if record["status"] == NOT_APPLICABLE or not (every or record["status"] == "ok"):
            continue
        why = facts_problem(record, out)
        if why is not None:
            raise MissingFacts(why)


def _sort_key(record: dict[str, Any]) -> tuple[str, str, int, str]:
    seed = record.get("seed")
    seed = seed if isinstance(seed, int) else -1
    return record["problem"], str(record["method"]), seed, str(record.get("config_hash"))


def write_report(records: list[dict[str, Any]], out: Path, profile: str | None = None, wide: bool = False) -> str:
    """Write every artefact of ``records`` into ``out`` and return the text to print (compact unless ``wide``).

    ``records``: run records, and not-applicable rows (status ``not_applicable``, from ``Skipped.as_record()``).
    :class:`MissingFacts` (a ValueError), before anything is written, for a run record without usable problem facts.
    """
    return _write_artefacts(records, out, profile)(wide)


def write_report_texts(records: list[dict[str, Any]], out: Path, profile: str | None = None) -> tuple[str, str]:
    """:func:`write_report`, returning both texts (compact, wide) from one writing of the artefacts."""
    text = _write_artefacts(records, out, profile)
    return text(False), text(True)


def _write_artefacts(records: list[dict[str, Any]], out: Path, profile: str | None) -> Callable[[bool], str]:
    """Write every artefact of ``records`` into ``out``; return the function that renders the text (``wide`` or not)."""
    out = Path(out)
    if not records:
        return lambda wide: NOTHING
    check_facts(records, out)
    records = sorted(records, key=_sort_key)  # the same files whatever order the runs finished in
    as_recorded, records = records, label_configurations(records)  # a row per configuration
    if profile is None:
        profiles = {str((r.get("budget") or {}).get("profile")) for r in records if r["status"] != NOT_APPLICABLE}
        profile = profiles.pop() if len(profiles) == 1 and "None" not in profiles else None
    out.mkdir(parents=True, exist_ok=True)
    tables = write_leaderboards(records, out)
    pictures: dict[str, list[str]] = {}
    for problem in tables:
        lines = pictures.setdefault(problem, [])
        png = plot_model_probs(problem, records, out / f"leaderboard_{problem}.png")
        if png:
            lines.append(f"plot: {png}")
        curves = plot_curves(problem, records, out / f"curves_{problem}.png")
        if curves:
            lines.append(f"error against time: {curves}")
    sweeps = sweep_tables(records)
    for name, table in sweeps.items():
        slug = sweep_slug(name)
        write_atomically(out / f"sweep_{slug}.csv", lambda path, table=table: table_csv(table, path, key="problem"))
        png = plot_sweep(name, table, out / f"sweep_{slug}.png")
        pictures[name] = [f"plot: {png}"] if png else []
    dags = dag_tables(records)
    for problem, table in dags.items():
        write_atomically(out / f"dag_table_{problem}.csv", lambda path, table=table: table_csv(table, path))
    posterior = posterior_table(records)
    if not posterior.empty:
        write_atomically(out / POSTERIOR_CSV, lambda path: posterior.to_csv(path, index=False))
    png = plot_posterior(records, out / POSTERIOR_PNG)
    if png:
        pictures["posterior"] = [f"plot: {png}"]
    comparison = reported_comparison(records)
    if not comparison.empty:
        text = "# Negative ELBO against the source papers\n\n" + format_reported_comparison(comparison)
        write_atomically(out / "reported_comparison.md", lambda path: path.write_text(text))
    write_summary(records, tables, out)
    _write_optional("suite.results.table", "write_results_table", as_recorded, out)
    _write_optional("suite.report.html", "write_index", records, out, profile)
    return lambda wide: render(
        records, tables, sweeps, dags, comparison, out, profile, wide, pictures, SWEEP_METRIC, posterior
    )


def _write_optional(module: str, function: str, *args: Any) -> None:
    """Call ``module.function(*args)`` when that module exists (its own import errors are not hidden)."""
    if importlib.util.find_spec(module) is None:
        return
    getattr(importlib.import_module(module), function)(*args)


def stored_not_applicable(out: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The not-applicable rows saved in ``out/not_applicable.json`` for problems of ``records``, pairs without runs.

    The file is a JSON list of ``{"problem", "method", "reason"}``; an unreadable one is a ValueError naming it.
    """
    path = Path(out) / NOT_APPLICABLE_FILE
    if not path.is_file():
        return []
    try:
        rows = rec.read_json(path)
        if not isinstance(rows, list):
            raise ValueError(f"a JSON {type(rows).__name__}, not a list")
        for row in rows:
            if not (isinstance(row, dict) and all(isinstance(row.get(k), str) for k in ("problem", "method"))):
                raise ValueError(f"a row without problem and method names: {row!r}")
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} is unreadable ({exc}); delete it to report without its not-applicable rows") from None
    problems = {record["problem"] for record in records}
    ran = {(record["problem"], record["method"]) for record in records}
    return [
        {
            "problem": row["problem"],
            "method": row["method"],
            "seed": None,
            "status": NOT_APPLICABLE,
            "reason": str(row.get("reason", "")),
            "metrics": {},
        }
        for row in rows
        if row["problem"] in problems and (row["problem"], row["method"]) not in ran
    ]


def report_from_folder(out: Path, wide: bool = False) -> str:
    """Write the report of the records in ``out`` (nothing is run) and return the text to print.

    ValueError when ``out`` holds no records, records of several profiles, a record without problem facts or an
    unreadable ``not_applicable.json`` (each named in the message); nothing is written then.
    """
    out = Path(out)
    records = rec.load_records(out)
    if not records:
        raise ValueError(f"{out} holds no records ({rec.records_dir(out)}/*.json): nothing to report")
    profiles = sorted({str((record.get("budget") or {}).get("profile")) for record in records})
    if len(profiles) > 1:
        raise ValueError(f"{out} holds records of the profiles {', '.join(profiles)}; leaderboards mix no profiles")
    check_facts(records, out, every=True)
    rows = stored_not_applicable(out, records)
    profile = profiles[0] if profiles and profiles[0] != "None" else None
    return write_report(records + rows, out, profile, wide)
