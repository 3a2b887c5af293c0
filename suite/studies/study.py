"""A study: variants (method + options) x problems, run through the ordinary runner, compared with a paper's table."""

from __future__ import annotations

import html
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from suite.core.files import write_atomically
from suite.report.leaderboard import mean_and_se
from suite.report.plots import plt, write_figure
from suite.results.records import load_records
from suite.run import Execution, GridSpec, UsageError, run_grid


@dataclass(frozen=True)
class Variant:
    """One row of a study: a method with fixed options, and the paper's value per problem (None: not reported)."""

    label: str
    method: str
    options: dict[str, Any] = field(default_factory=dict)
    paper: dict[str, float | None] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        """Folder name of the variant's results."""
        text = "".join(c if c.isalnum() else "-" for c in self.label.lower())
        return "-".join(part for part in text.split("-") if part)


@dataclass(frozen=True)
class Study:
    """Variants x problems at one budget, one metric, and the paper's numbers to print beside ours."""

    name: str
    description: str
    problems: tuple[str, ...]
    variants: tuple[Variant, ...]
    metric: str
    #: :class:`~suite.run.GridSpec` fields every variant's grid gets (profile, seeds, budget).
    grid: Mapping[str, Any]
    paper_source: str
    #: Lower is better for ``metric``.
    lower_is_better: bool = True
    #: Called with the study's folder before any run (e.g. to compute the references the runs are scored on).
    prepare: Callable[[Path], None] | None = None
    #: The paper's own figure redrawn from the variants' records: (study, folder) -> the PNG written, or None.
    figure: Callable[[Study, Path], Path | None] | None = None
    #: More of the records in Markdown, printed and written after the main table: (study, folder) -> text.
    details: Callable[[Study, Path], str] | None = None
    #: :class:`~suite.run.Execution` fields every variant's run gets (jobs, progress); ``out`` and ``force`` are set.
    execution: Mapping[str, Any] = field(default_factory=lambda: {"progress": False})
    #: How long the whole study took on the project's 2-core machine (docs/studies.md), printed when it starts.
    expected_runtime: str = ""

    def variant_grid(
        self, variant: Variant, out: Path, seeds: int | None, force: bool, data_sets: int | None = None
    ) -> tuple[GridSpec, Execution]:
        """The grid of one variant (its method and options on the study's problems) and where it runs."""
        values = dict(self.grid)
        if seeds is not None:
            values["seeds"] = seeds
        if data_sets is not None:
            values["data_sets"] = data_sets
        spec = GridSpec(
            problems=self.problems,
            methods=(variant.method,),
            method_options={variant.method: dict(variant.options)} if variant.options else {},
            **values,
        )
        return spec, Execution(out=out / variant.slug, force=force, **self.execution)

    def run(self, out: Path, seeds: int | None = None, force: bool = False, data_sets: int | None = None) -> int:
        """Run the study (:func:`run_study`); the exit code."""
        return run_study(self, out, seeds, force, data_sets)

    def table(self, out: Path) -> pd.DataFrame:
        """One row per variant: per problem the measured mean, its standard error over seeds, runs, and the paper's."""
        rows = []
        for variant in self.variants:
            records = load_records(out / variant.slug) if (out / variant.slug / "records").exists() else []
            row: dict[str, Any] = {"variant": variant.label, "method": variant.method}
            for problem in self.problems:
                values = [
                    rec["metrics"][self.metric]["value"]
                    for rec in records
                    if rec["problem"] == problem and rec["status"] == "ok" and self.metric in rec.get("metrics", {})
                ]
                failed = sum(1 for rec in records if rec["problem"] == problem and rec["status"] != "ok")
                mean, se = mean_and_se(pd.Series(values, dtype=float)) if values else (math.nan, math.nan)
                row[f"{problem}"] = mean
                row[f"{problem}_se"] = se
                row[f"{problem}_runs"] = len(values)
                row[f"{problem}_failed"] = failed
                row[f"{problem}_paper"] = variant.paper.get(problem)
            rows.append(row)
        return pd.DataFrame(rows)


def format_table(study: Study, table: pd.DataFrame) -> str:
    """The study's table as Markdown: per problem ``ours (mean ± se, runs)`` and the paper's value."""
    header = ["variant"]
    for problem in study.problems:
        header += [f"{problem}: ours", f"{problem}: paper"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, row in table.iterrows():
        cells = [str(row["variant"])]
        for problem in study.problems:
            mean, se = row[problem], row[f"{problem}_se"]
            runs, failed = row[f"{problem}_runs"], row[f"{problem}_failed"]
            ours = "-" if not runs else f"{mean:.3f} ± {se:.3f} ({runs} runs)" if math.isfinite(se) else f"{mean:.3f}"
            if failed:
                ours += f", {failed} failed"
            paper = row[f"{problem}_paper"]
            cells += [ours, "-" if paper is None or pd.isna(paper) else f"{paper:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_table(study: Study, table: pd.DataFrame, path: Path) -> Path:
    """Per problem a panel: each variant's mean ± se (dots with bars) and the paper's value (crosses)."""
    fig, axes = plt.subplots(1, len(study.problems), figsize=(5.0 * len(study.problems), 0.5 * len(table) + 1.8))
    axes = [axes] if len(study.problems) == 1 else list(axes)
    positions = list(range(len(table)))[::-1]
    for ax, problem in zip(axes, study.problems, strict=True):
        ax.errorbar(table[problem], positions, xerr=table[f"{problem}_se"].fillna(0), fmt="o", label="ours")
        for position, value in zip(positions, table[problem], strict=True):
            if value == math.inf:  # a -ELBO of q with draws outside the target's support: marked at the edge
                ax.annotate("inf", (1.0, position), xycoords=("axes fraction", "data"), ha="right", va="center")
        paper = pd.to_numeric(table[f"{problem}_paper"], errors="coerce")
        ax.plot(paper, positions, "x", color="black", label="paper")
        ax.set_yticks(positions, table["variant"])
        ax.set_title(problem)
        ax.set_xlabel(f"{study.metric} ({'lower' if study.lower_is_better else 'higher'} is better)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="best")
    fig.suptitle(f"{study.name}: {study.paper_source}", fontsize=9)
    return write_figure(fig, path)


def write_html(study: Study, table: pd.DataFrame, out: Path, figure: Path, extra: Path | None = None) -> Path:
    """``<out>/index.html``: description, table beside the paper's and figure, linking each variant's report."""
    rows = []
    for variant, (_, row) in zip(study.variants, table.iterrows(), strict=True):
        cells = [f'<a href="{html.escape(variant.slug)}/index.html">{html.escape(variant.label)}</a>']
        for problem in study.problems:
            runs, paper = row[f"{problem}_runs"], row[f"{problem}_paper"]
            ours = "-" if not runs else f"{row[problem]:.3f} &plusmn; {row[f'{problem}_se']:.3f} ({runs} runs)"
            cells += [ours, "-" if paper is None or pd.isna(paper) else f"{paper:.2f}"]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{html.escape(p)}: ours</th><th>{html.escape(p)}: paper</th>" for p in study.problems)
    page = (
        f"<!doctype html><meta charset='utf-8'><title>{html.escape(study.name)}</title>"
        f"<h1>{html.escape(study.name)}</h1><p>{html.escape(study.description)}</p>"
        f"<p>{html.escape(study.metric)}, mean &plusmn; standard error over seeds; paper: "
        f"{html.escape(study.paper_source)}</p><table border=1 cellpadding=4><tr><th>variant</th>{head}</tr>"
        + "".join(rows)
        + f"</table><p><img src='{html.escape(figure.name)}' alt='{html.escape(study.name)}'></p>"
        + ("" if extra is None else f"<p><img src='{html.escape(extra.name)}' alt='{html.escape(extra.stem)}'></p>")
    )
    path = out / "index.html"
    write_atomically(path, lambda tmp: tmp.write_text(page))
    return path


def variant_line(label: str, code: int, seconds: float, records: list[dict[str, Any]], log: Path) -> str:
    """The line a study prints after a variant: exit code, time, and how many of its runs succeeded."""
    ok = sum(1 for record in records if record.get("status") == "ok")
    runs = len(records)
    if runs and ok == 0:
        counted = f"all {runs} runs failed"
    else:
        counted = f"{ok} of {runs} runs ok" + (f", {runs - ok} failed" if ok < runs else "")
    return f"  {label}: exit {code} in {seconds:.0f} s, {counted} (log: {log})"


def run_study(
    study: Study, out: Path, seeds: int | None = None, force: bool = False, data_sets: int | None = None
) -> int:
    """Run every variant (finished runs are kept), then write and print the comparison; the exit code."""
    out.mkdir(parents=True, exist_ok=True)
    print(f"Study {study.name}: {study.description}\nResults in {out}; each variant's runs in {out}/<variant>/")
    if study.expected_runtime:
        print(f"Expected runtime: {study.expected_runtime} on a 2-core machine, with the default seeds")
    if study.prepare is not None:
        study.prepare(out)
    status = 0
    for variant in study.variants:
        start = time.perf_counter()
        log = out / f"{variant.slug}.log"
        lines: list[str] = []
        try:
            spec, execution = study.variant_grid(variant, out, seeds, force, data_sets)
            lines.append(f"{spec}\n{execution}")
            outcome = run_grid(spec, execution, echo=lines.append)  # the leaderboards go to the log
        except UsageError as exc:
            print(f"tdbench study: error: {variant.label}: {exc}", file=sys.stderr)
            return 2
        finally:
            write_atomically(log, lambda tmp, lines=lines: tmp.write_text("\n".join(lines) + "\n"))
        code = outcome.status
        print(variant_line(variant.label, code, time.perf_counter() - start, outcome.records, log))
        status = max(status, code)
    table = study.table(out)
    write_atomically(out / f"{study.name}.csv", lambda tmp: table.to_csv(tmp, index=False))
    markdown = format_table(study, table)
    header = f"# {study.name}\n\n{study.description}\n\nPaper: {study.paper_source}\n\n"
    details = "" if study.details is None else f"\n{study.details(study, out)}\n"
    write_atomically(out / f"{study.name}.md", lambda tmp: tmp.write_text(f"{header}{markdown}\n{details}"))
    figure = plot_table(study, table, out / f"{study.name}.png")
    extra = None if study.figure is None else study.figure(study, out)
    page = write_html(study, table, out, figure, extra)
    print(f"\n{study.metric} (mean ± standard error over seeds) beside {study.paper_source}:\n{markdown}{details}")
    figures = f"{figure}, {extra}" if extra is not None else f"{figure}"
    print(f"\nWrote {out / f'{study.name}.csv'}, {out / f'{study.name}.md'}, {figures} and {page}")
    return status
