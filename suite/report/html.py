"""The report page: one static ``index.html`` per results folder, written from the records alone.

The page needs no server and no network: its style sheet is inline and its images are the PNGs the report writes
beside it (``leaderboard_<problem>.png``, ``curves_<problem>.png``, ``sweep_<name>.png``), referenced by relative
paths, so the folder can be copied anywhere. A picture that was not written is not linked. Contents: an overview
matrix of problems x methods (the main metric at the common budget, coloured per problem, best marked,
not-applicable and failed cells told apart, failures listed), then per problem its leaderboard, model-probability
small multiples, curves, DAG table and the papers' numbers, then the DAG posterior study in the format of BayesDAG
Fig. 2 (``posterior_fig2.png``, when exact-posterior DAG problems ran), the sweeps and the environment of the runs.

Like the rest of the report it imports nothing from ``problems/``, ``methods/`` or the registry: what it needs to
know about a problem comes from ``record["problem_facts"]``.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd

from suite.core.files import write_atomically
from suite.report.dag_tables import COLUMNS, dag_tables
from suite.report.leaderboard import (
    NOT_APPLICABLE,
    beyond_bound,
    display_table,
    format_mean_se,
    higher_is_better,
    is_computed_nan,
    long_table,
    main_metric,
    problem_facts,
    reference_kind,
    reported_comparison,
    shown_reason,
    summary_table,
    trace_note,
    verdict_line,
)
from suite.report.posterior_tables import LEGEND as POSTERIOR_LEGEND
from suite.report.posterior_tables import PAPER_NOTE, display_frame, posterior_table
from suite.report.summary import RULES as SUMMARY_RULES
from suite.report.summary import display_summary
from suite.report.summary import summary_table as across_problems
from suite.report.sweeps import SWEEP_METRIC, sweep_slug, sweep_tables
from suite.results.schema import METRIC_MEANINGS

#: Methods in the order of the overview's columns (others follow, alphabetically), as in ``suite.report.overview``.
COLUMN_ORDER = ["rjmcmc-baseline", "rjmcmc-naive", "vti-surrogate", "vti-mcg", "trj", "ctrj"]
#: Environment fields shown, in this order (from each record's ``environment``).
ENVIRONMENT_FIELDS = ("git", "python", "torch", "numpy", "device", "device_name", "dtype", "platform", "cpu_count")

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto; max-width: 1400px;
  padding: 0 1.5em 3em; color: #1b1b1b; line-height: 1.4; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
h3 { margin-bottom: 0.3em; } .muted { color: #666; font-size: 0.9em; }
nav ul { columns: 4; list-style: none; padding: 0; } nav li { margin: 0.1em 0; }
.scroll { overflow-x: auto; max-width: 100%; }
.scroll tr > :first-child { position: sticky; left: 0; z-index: 1; background: #fff; }
.scroll thead tr > :first-child { background: #f3f3f3; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; } td.name, th.name { text-align: left; }
td.reason { text-align: left; white-space: normal; min-width: 20em; }
table.matrix td { min-width: 4.5em; text-align: center; }
table.matrix th { white-space: normal; }
td.best { font-weight: bold; outline: 2px solid #1a7f37; outline-offset: -2px; }
td.na { background: #eeeeee; color: #888; font-style: italic; }
td.failed { background: repeating-linear-gradient(45deg, #f8d7da, #f8d7da 6px, #fff 6px, #fff 12px);
  color: #8b0000; font-weight: bold; }
td.missing { background: #fff; color: #bbb; }
.partial { color: #8b0000; font-size: 0.8em; }
.over { color: #8a5a00; font-size: 0.8em; border: 1px solid #d9b66b; border-radius: 3px; padding: 0 0.25em; }
.legend span { display: inline-block; padding: 0.1em 0.6em; margin-right: 0.6em; border: 1px solid #ccc; }
figure { margin: 0.8em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
ul.failures li { margin: 0.2em 0; }
"""

#: Marks each image once the page has loaded: ``data-state="loaded"`` or ``"broken"`` (for the browser test).
IMAGE_CHECK = """
window.addEventListener("load", function () {
  document.querySelectorAll("img").forEach(function (img) {
    img.setAttribute("data-state", img.complete && img.naturalWidth > 0 ? "loaded" : "broken");
  });
  document.body.setAttribute("data-images-checked", "yes");
});
"""


#: Figure captions explain every abbreviation their pictures show.
SUMMARY_CAPTION = (
    "Left: mean rank over problems, with its 95% interval; (n): the number of problems the method ran. "
    "Right: the performance profile; tau: a method's time to the stated accuracy divided by the fastest method's."
)
MODEL_PROBS_TERMS = (
    f"TV in a panel's title: the method's {METRIC_MEANINGS['model_prob_tv']}. On log axes an estimate of 0 is "
    "drawn at the floor the axis names."
)
POSTERIOR_TERMS = (
    f"MMD: {METRIC_MEANINGS['mmd']}; MMD²: its squared Hamming-kernel form (BayesDAG's); E-CPDAG-SHD: expected "
    "structural Hamming distance between the CPDAGs of the method's graphs and the true one; TV: total variation "
    "between the method's and the exact DAG posterior."
)


def metric_term(metric: str) -> str:
    """A metric's name with what it measures, where the suite knows it (a plug-in's own metric: the name alone)."""
    meaning = METRIC_MEANINGS.get(metric)
    return f"{metric} ({meaning})" if meaning else metric


def esc(value: Any) -> str:
    """Text made safe for HTML (quotes too, so it can go in an attribute)."""
    return html.escape(str(value), quote=True)


def anchor(problem: str) -> str:
    """The id of a problem's section."""
    return "problem-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in problem)


def method_order(methods: set[str]) -> list[str]:
    """Methods in the overview's column order."""
    order = {name: i for i, name in enumerate(COLUMN_ORDER)}
    return sorted(methods, key=lambda m: (order.get(m, len(order)), m))


def write_index(records: list[dict[str, Any]], out: Path, profile: str | None = None) -> Path:
    """Write ``out/index.html`` (atomically) for ``records`` and the pictures already in ``out``; returns its path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    page = render_page(records, out, profile)
    path = out / "index.html"
    write_atomically(path, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    return path


def render_page(records: list[dict[str, Any]], out: Path, profile: str | None = None) -> str:
    """The whole page as text (``out``: where the pictures are looked for)."""
    long = long_table(records)
    problems = sorted(long["problem"].unique()) if not long.empty else []
    methods = method_order({m for m in long["method"].dropna().unique()})
    if profile is None:
        profile = "/".join(sorted({str((r.get("budget") or {}).get("profile")) for r in records} - {"None"})) or None
    facts = {p: problem_facts(records, p) for p in problems}
    tables = {p: summary_table(long, p, records) for p in problems}
    sweeps = sweep_tables(records)
    dags = dag_tables(records)
    posterior = posterior_table(records)
    papers = reported_comparison(records)
    title = "tdbench results" + (f": {profile} profile" if profile else "")
    runs = [r for r in records if r["status"] != NOT_APPLICABLE]
    finished = max((str(r.get("finished_at")) for r in runs if r.get("finished_at")), default=None)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="muted">{len(runs)} runs of {len(problems)} problems and {len(methods)} methods'
        + (f"; last run finished {esc(finished)}" if finished else "")
        + ". Generated from the records in <code>records/</code>.</p>",
        _nav(problems, sweeps, not posterior.empty),
        _summary_section(records, tables, out),
        _overview(problems, methods, tables, records),
    ]
    for problem in problems:
        mine = papers[papers["problem"] == problem] if not papers.empty else papers
        parts.append(_problem_section(problem, facts[problem], tables[problem], records, out, sweeps, dags, mine))
    if not posterior.empty:
        parts.append(_posterior_section(posterior, out))
    if sweeps:
        parts.append(_sweep_section(sweeps, out))
    parts.append(_environment(records))
    parts += [f"<script>{IMAGE_CHECK}</script>", "</body>", "</html>", ""]
    return "\n".join(parts)


def _summary_section(records: list[dict[str, Any]], tables: dict[str, pd.DataFrame], out: Path) -> str:
    """The summary across problems (:mod:`suite.report.summary`): the table, its rules and ``summary.png``."""
    table = across_problems(records, tables)
    if table.empty:
        return '<section id="summary"><h2>Summary across problems</h2><p class="muted">No ranked method.</p></section>'
    shown = display_summary(table)
    figure = _figure(out, "summary.png", SUMMARY_CAPTION, "summary")
    return (
        '<section id="summary"><h2>Summary across problems</h2>'
        + _html_table(shown, "summary")
        + f'<p class="legend muted">{esc(SUMMARY_RULES)}</p>{figure}</section>'
    )


def _nav(problems: list[str], sweeps: dict[str, pd.DataFrame], posterior: bool = False) -> str:
    items = ['<li><a href="#summary">Summary</a></li>', '<li><a href="#overview">Overview</a></li>']
    items += [f'<li><a href="#{esc(anchor(p))}">{esc(p)}</a></li>' for p in problems]
    if posterior:
        items.append('<li><a href="#posterior">DAG posterior (BayesDAG Fig. 2)</a></li>')
    if sweeps:
        items.append('<li><a href="#sweeps">Sweeps</a></li>')
    items.append('<li><a href="#environment">Environment</a></li>')
    return "<nav><ul>" + "".join(items) + "</ul></nav>"


def _direction(problem: str, records: list[dict[str, Any]]) -> tuple[str, bool]:
    """A problem's main metric and whether higher is better."""
    metric = main_metric(problem, records)
    return metric, metric in higher_is_better(problem, records)


def headline(table: pd.DataFrame, metric: str) -> tuple[str, str]:
    """The summary column the overview shows (the verdict's mean of the main metric) and how it was computed."""
    info = table.attrs.get("trace") or {}
    if "ranked_mean" not in table:
        return metric, "mean ± se over seeds of the final value"
    if info.get("budget_s") is not None:
        return "ranked_mean", f"mean over seeds at the common budget of {info['budget_s']:.3g} compute s"
    return "ranked_mean", "mean over seeds of the final value"


def _overview(
    problems: list[str],
    methods: list[str],
    tables: dict[str, pd.DataFrame],
    records: list[dict[str, Any]],
) -> str:
    head = "".join(f'<th scope="col">{esc(m)}</th>' for m in methods)
    rows = []
    failures: list[str] = []
    for problem in problems:
        metric, higher = _direction(problem, records)
        table = tables[problem].set_index("method") if not tables[problem].empty else tables[problem]
        column, how = headline(tables[problem], metric)
        values = {
            m: float(table.loc[m, column])
            for m in methods
            if m in table.index
            and column in table.columns
            and _ran(table.loc[m])
            and _finite_or_inf(table.loc[m, column])
        }
        colours = _colours(values, higher)
        over = {m for m in values if int(table.loc[m].get("over_budget", 0) or 0)}
        over |= {m for m in values if int(table.loc[m].get("unreliable", 0) or 0)}
        tied = set(table.index[table["tied_with_best"]]) if "tied_with_best" in table.columns else set()
        best = {m for m in values if m in tied and m not in over}  # never starred: over budget, or unreliable
        cells = []
        for method in methods:
            computed = is_computed_nan(tables[problem], method, column)
            cells.append(_matrix_cell(problem, method, table, column, metric, how, colours, best, computed))
            failures += _failure_items(problem, method, records)
        name = f'<th scope="row" class="name"><a class="row" href="#{esc(anchor(problem))}">{esc(problem)}</a><br>'
        name += f'<span class="muted">{esc(metric)}, {"higher" if higher else "lower"} is better</span></th>'
        rows.append(f'<tr data-problem="{esc(problem)}">{name}{"".join(cells)}</tr>')
    legend = (
        '<p class="legend muted"><span style="background:hsl(120,55%,82%)">best</span>'
        '<span style="background:hsl(0,55%,82%)">worst</span> colour scaled per problem (log scale when the values '
        "span more than a decade); &#9733; best per problem, or tied with the best where the seeds cannot "
        "separate them (rank interval and Welch test; docs/metrics.md, How verdicts are made); "
        '<span class="na" style="background:#eee">n/a</span> method does not apply; '
        '<span style="color:#8b0000">failed</span> every run failed (reason on hover and listed below); '
        '<span class="partial">&#9888; k</span> k runs failed; '
        '<span class="over">over budget</span> a run overshot the time budget by more than 10% (never '
        "starred; scored by what it had estimated by the budget); "
        '<span class="over">unreliable</span> a run\'s estimate in nats has a Monte Carlo error over 1 nat and 10% of '
        "its value (never starred; docs/metrics.md); "
        "<span>&middot;</span> not run; -: the method does not compute the metric. Values: the mean over seeds of "
        "the main metric at the common budget when the problem's runs share one, else of its final value (the "
        "number the leaderboards rank by).</p>"
    )
    listed = (
        '<h3>Failed runs</h3><ul class="failures">' + "".join(failures) + "</ul>"
        if failures
        else '<p class="muted">No run failed.</p>'
    )
    return (
        '<section id="overview"><h2>Overview</h2>'
        '<div class="scroll"><table class="matrix" id="overview-matrix"><thead><tr><th class="name">problem</th>'
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{legend}{listed}</section>"
    )


def _ran(row: pd.Series) -> bool:
    """Whether a summary row has at least one successful run (not only failures or a not-applicable note)."""
    return int(row["runs"]) > int(row["failed"])


def _finite_or_inf(value: Any) -> bool:
    return isinstance(value, int | float) and not math.isnan(value)


def _colours(values: dict[str, float], higher: bool) -> dict[str, str]:
    """Background colour per method: green for the best of the problem, red for the worst."""
    finite = {m: v for m, v in values.items() if math.isfinite(v)}
    if not finite:
        return {m: "hsl(0,55%,82%)" for m in values}
    lo, hi = min(finite.values()), max(finite.values())
    use_log = lo > 0 and hi / lo > 10
    scale = (lambda v: math.log10(v)) if use_log else (lambda v: v)
    colours = {}
    for method, value in values.items():
        if not math.isfinite(value):
            badness = 0.0 if (value > 0) == higher else 1.0
        elif hi == lo:
            badness = 0.0
        else:
            badness = (scale(value) - scale(lo)) / (scale(hi) - scale(lo))
            badness = 1.0 - badness if higher else badness
        colours[method] = f"hsl({120 * (1 - badness):.0f},55%,82%)"
    return colours


def _number(value: float) -> str:
    if math.isnan(value):
        return "nan"
    return f"{value:.3g}"  # inf and -inf as such


def _matrix_cell(
    problem: str,
    method: str,
    table: pd.DataFrame,
    column: str,
    metric: str,
    how: str,
    colours: dict[str, str],
    best: set[str],
    computed: bool,
) -> str:
    """One cell of the overview (``computed``: its value, if NaN, was computed: ``nan``, not ``-``)."""
    where = f"{problem} / {method}"
    if table.empty or method not in table.index:
        return f'<td class="missing" title="{esc(where)}: not run">&middot;</td>'
    row = table.loc[method]
    runs, failed = int(row["runs"]), int(row["failed"])
    if runs == 0:
        reason = row.get("not_applicable") or "no run"
        return f'<td class="na" title="{esc(where)}: does not apply: {esc(reason)}">n/a</td>'
    if failed >= runs:
        return f'<td class="failed" title="{esc(where)}: every run failed: {esc(row["failure_reasons"])}">failed</td>'
    value = float(row[column]) if column in row.index else math.nan
    text = _number(value) if computed or not math.isnan(value) else "-"
    if column == metric and f"{metric}_se" in row.index and math.isfinite(value):
        text = format_mean_se(value, float(row[f"{metric}_se"]), metric=metric)
    if beyond_bound(metric, value):
        text = str(beyond_bound(metric, value))
        tip_extra = f" (the value, {value:.3g}, is beyond the display bound: the method diverged)"
    else:
        tip_extra = ""
    tip = f"{where}: {metric} = {text}{tip_extra} ({how}; {runs} run{'s' if runs != 1 else ''})"
    star = " &#9733;" if method in best else ""
    partial = ""
    late = int(row.get("over_budget", 0) or 0)
    if late:
        partial += ' <span class="over">over budget</span>'
        tip += f"; {late} run{'s' if late != 1 else ''} over the time budget (scored by its estimates at the budget)"
    unsure = int(row.get("unreliable", 0) or 0)
    if unsure:
        partial += ' <span class="over">unreliable</span>'
        tip += f"; {unsure} run{'s' if unsure != 1 else ''} with an estimate its own Monte Carlo error dominates"
    if failed:
        partial = f' <span class="partial">&#9888; {failed}</span>'
        tip += f"; {failed} failed: {row['failure_reasons']}"
    style = f' style="background:{colours[method]}"' if method in colours else ""
    cls = ' class="best"' if method in best else ""
    return f'<td{cls}{style} title="{esc(tip)}">{esc(text)}{star}{partial}</td>'


def _failure_items(problem: str, method: str, records: list[dict[str, Any]]) -> list[str]:
    items = []
    for rec in records:
        if rec["problem"] == problem and rec["method"] == method and rec["status"] not in ("ok", NOT_APPLICABLE):
            reason = shown_reason(str(rec.get("reason") or "no reason recorded"))
            items.append(
                f'<li><a href="#{esc(anchor(problem))}">{esc(problem)}</a> / {esc(method)} / seed '
                f"{esc(rec.get('seed'))}: {esc(reason)}</li>"
            )
    return items


def _html_table(frame: pd.DataFrame, css: str = "", text_columns: tuple[str, ...] = ("method",)) -> str:
    """A DataFrame of display strings as an escaped HTML table."""
    head = "".join(f"<th{' class=name' if c in text_columns else ''}>{esc(c)}</th>" for c in frame.columns)
    body = []
    for _, row in frame.iterrows():
        cells = []
        for column, value in zip(frame.columns, row.tolist(), strict=True):
            if column in ("failure_reasons", "not_applicable", "source"):
                cells.append(f'<td class="reason">{esc(value)}</td>')
            elif column in text_columns:
                cells.append(f'<td class="name">{esc(value)}</td>')
            else:
                cells.append(f"<td>{esc(value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    cls = f' class="{css}"' if css else ""
    return f'<div class="scroll"><table{cls}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _figure(out: Path, name: str, caption: str, css: str) -> str:
    """An image of ``out`` with its caption, or "" when the file was not written."""
    if not (out / name).is_file():
        return ""
    return (
        f'<figure class="{css}"><img src="{esc(quote(name))}" alt="{esc(caption)}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def _files(out: Path, problem: str) -> str:
    names = [f"leaderboard_{problem}.md", f"leaderboard_{problem}.csv", f"dag_table_{problem}.csv"]
    links = [f'<a href="{esc(quote(n))}">{esc(n)}</a>' for n in names if (out / n).is_file()]
    return f'<p class="muted">Files: {", ".join(links)}</p>' if links else ""


def _problem_section(
    problem: str,
    facts: dict[str, Any] | None,
    table: pd.DataFrame,
    records: list[dict[str, Any]],
    out: Path,
    sweeps: dict[str, pd.DataFrame],
    dags: dict[str, pd.DataFrame],
    papers: pd.DataFrame,
) -> str:
    metric, higher = _direction(problem, records)
    parts = [f'<section class="problem" id="{esc(anchor(problem))}" data-problem="{esc(problem)}">']
    parts.append(f"<h2>{esc(problem)}</h2>")
    if facts and facts.get("description"):
        parts.append(f"<p>{esc(facts['description'])}</p>")
    about = [f"main metric <code>{esc(metric)}</code> ({'higher' if higher else 'lower'} is better)"]
    if facts and facts.get("num_models"):
        about.append(f"{esc(facts['num_models'])} model{'s' if facts['num_models'] != 1 else ''}")
    kind = reference_kind(records, problem)
    if kind:
        about.append(f"reference: {esc(kind)}")
    info = table.attrs.get("trace") or {}
    if info.get("budget_s") is not None:
        about.append(f"common budget {info['budget_s']:.3g} compute s")
    parts.append('<p class="muted">' + "; ".join(about) + ".</p>")
    parts.append("<h3>Leaderboard</h3>")
    if table.empty:
        parts.append('<p class="muted">No runs.</p>')
    else:
        if table.attrs.get("verdict"):
            parts.append(f'<p class="verdict">{esc(verdict_line(table))}</p>')
        parts.append(_html_table(display_table(table), "leaderboard"))
        note = trace_note(table)
        parts.append(
            '<p class="muted">mean ± standard error over seeds; (MC ± x): the metric\'s own Monte Carlo error. '
            + esc(note)
            + "</p>"
        )
    parts.append(_files(out, problem))
    parts.append(
        _figure(
            out,
            f"leaderboard_{problem}.png",
            f"{problem}: model probabilities per method against the truth. {MODEL_PROBS_TERMS}",
            "model-probs",
        )
    )
    parts.append(
        _figure(
            out,
            f"curves_{problem}.png",
            f"{problem}: {metric_term(metric)} against compute seconds along the runs (median, and min-max over seeds)",
            "curves",
        )
    )
    if problem in dags:
        parts.append("<h3>DAG metrics (VTI Table 1 format)</h3>")
        parts.append(_html_table(_dag_display(dags[problem]), "dag", ("method", "source")))
    parts.append(_papers(papers, facts))
    sweep = (facts or {}).get("sweep")
    if sweep and sweep[0] in sweeps:
        parts.append(
            f'<p class="muted">Part of the sweep <a href="#sweep-{esc(sweep_slug(sweep[0]))}">{esc(sweep[0])}</a> '
            f"at x = {esc(sweep[1])}.</p>"
        )
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


def _papers(papers: pd.DataFrame, facts: dict[str, Any] | None) -> str:
    """A problem's measured negative ELBO beside the source paper's (rows of ``reported_comparison``), or ""."""
    if papers.empty:
        return ""
    shown = pd.DataFrame(
        {
            "method": papers["method"],
            "measured -ELBO": [
                format_mean_se(m, s, e, c, "neg_elbo")
                for m, s, e, c in zip(
                    papers["measured"], papers["measured_se"], papers["mc_se"], papers["computed"], strict=True
                )
            ],
            "paper": ["-" if math.isnan(v) else f"{v:.4g}" for v in papers["paper"]],
            "difference": [
                ("nan" if c and not math.isnan(p) else "-") if math.isnan(v) else f"{v:+.3g}"
                for v, p, c in zip(papers["difference"], papers["paper"], papers["computed"], strict=True)
            ],
        }
    )
    source = (facts or {}).get("reported_source") or "the source paper"
    return (
        "<h3>Against the papers' numbers</h3>"
        + _html_table(shown, "papers")
        + f'<p class="muted">Negative ELBO, lower is better. Source: {esc(source)}.</p>'
    )


def _dag_display(table: pd.DataFrame) -> pd.DataFrame:
    shown = table[["method", "source"]].copy()
    shown["runs"] = ["" if r is None or r != r else str(int(r)) for r in table["runs"]]
    for _, title in COLUMNS:
        shown[title] = [format_mean_se(m, s) for m, s in zip(table[title], table[f"{title}_se"], strict=True)]
    return shown


def _posterior_section(table: pd.DataFrame, out: Path) -> str:
    parts = ['<section id="posterior"><h2>DAG posterior against the exact one (BayesDAG Fig. 2 format)</h2>']
    parts.append(
        f'<p class="muted">MMD, E-CPDAG-SHD and TV, lower is better. {esc(POSTERIOR_LEGEND)} {esc(PAPER_NOTE)}</p>'
    )
    parts.append(_html_table(display_frame(table), "posterior"))
    if (out / "posterior_table.csv").is_file():
        parts.append('<p class="muted">File: <a href="posterior_table.csv">posterior_table.csv</a></p>')
    parts.append(
        _figure(
            out,
            "posterior_fig2.png",
            f"DAG posterior per problem and method (BayesDAG Fig. 2). {POSTERIOR_TERMS}",
            "posterior",
        )
    )
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


def _sweep_section(sweeps: dict[str, pd.DataFrame], out: Path) -> str:
    parts = ['<section id="sweeps"><h2>Sweeps</h2>']
    for name, table in sweeps.items():
        slug = sweep_slug(name)
        methods = [c for c in table.columns if c not in ("x", "problem") and not c.endswith("_se")]
        shown = table[["x", "problem"]].astype(str).copy()
        for method in methods:
            se = table[f"{method}_se"] if f"{method}_se" in table else [math.nan] * len(table)
            shown[method] = [format_mean_se(m, s) for m, s in zip(table[method], se, strict=True)]
        parts.append(f'<h3 id="sweep-{esc(slug)}">{esc(name)}</h3>')
        parts.append(f'<p class="muted">{esc(SWEEP_METRIC)} (lower is better), mean ± se over seeds.</p>')
        parts.append(_html_table(shown, "sweep", ("problem",)))
        caption = f"sweep {name}: {metric_term(SWEEP_METRIC)} against x (e.g. x candidate covariates: 2^x models)"
        parts.append(_figure(out, f"sweep_{slug}.png", caption, "sweep"))
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


def _environment(records: list[dict[str, Any]]) -> str:
    """The distinct environments the runs were made in (versions, device, git commit), with their run counts."""
    combos: Counter[tuple[str, ...]] = Counter()
    for rec in records:
        env = rec.get("environment")
        if rec["status"] == NOT_APPLICABLE or not isinstance(env, dict):
            continue
        combos[tuple(str(env.get(field, "-")) for field in ENVIRONMENT_FIELDS)] += 1
    profiles = sorted({str((r.get("budget") or {}).get("profile")) for r in records} - {"None"})
    parts = ['<section id="environment"><h2>Environment</h2>']
    if profiles:
        parts.append(f"<p>Profile: {esc(', '.join(profiles))}.</p>")
    if combos:
        rows = [
            dict(zip(ENVIRONMENT_FIELDS, combo, strict=True)) | {"runs": str(n)} for combo, n in combos.most_common()
        ]
        parts.append(_html_table(pd.DataFrame(rows), "environment", ENVIRONMENT_FIELDS))
    else:
        parts.append('<p class="muted">The records carry no environment.</p>')
    parts.append("</section>")
    return "\n".join(parts)
