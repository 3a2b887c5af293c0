"""The summary across problems: per method its mean rank with an interval, its share of best groups, and a
performance profile of the time to reach each problem's stated accuracy.

Written by ``tdbench report`` as ``summary.csv``, ``summary.md`` and ``summary.png``, and shown at the top of
``index.html``. The rules (stated in ``summary.md`` too):

- A method's **mean rank** is the mean, over the problems it ran, of its rank among the methods that ran that
  problem (1 = best mean of the main metric; :mod:`suite.report.verdicts`). Problems it does not apply to, where
  every run failed or where it has no value of the main metric are left out of its mean, not counted as last, so
  compare mean ranks together with ``problems`` and the number of methods each problem had. The 95% interval
  redraws every problem's ranks (:func:`suite.report.verdicts.rank_draws`, independently per problem) and
  averages them again.
- **Best groups**: on how many of its problems the method is tied with the best (``tied_with_best``).
- **Performance profile** (Dolan & Moré 2002): per problem whose main metric has a stated accuracy
  (:data:`suite.report.leaderboard.REACH_TARGETS`), a method's time to reach it (the median over seeds, as in the
  leaderboard's ``t(...)`` column) divided by the fastest method's; rho(tau) is the share of the method's
  problems with ratio <= tau. A method that never reached it counts as never solving that problem; problems that
  no method solved are left out, as are problems the method did not run.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from suite.core.files import write_atomically
from suite.report.leaderboard import higher_is_better, main_metric, method_scores, to_markdown
from suite.report.plots import plt, write_figure  # plots sets the Agg backend before pyplot loads
from suite.report.verdicts import LEVEL, problem_seed, rank_draws

COLUMNS = ["method", "problems", "mean_rank", "mean_rank_low", "mean_rank_high", "best_groups", "best_share"]
RULES = (
    "Mean rank: over the problems a method ran, its rank among the methods that ran each problem (1 = best mean "
    "of the main metric); problems it does not apply to, where every run failed or where it has no value of the "
    "main metric (a point estimate has no model probabilities) are left out, not counted as last. 95% interval: "
    "every problem's ranks redrawn from the seeds' t sampling distributions, averaged again. Best groups: "
    "problems where it is tied with the best. Performance profile (summary.png, right): the share of a method's "
    "problems on which it reached the stated accuracy within tau times the fastest method's time (median over "
    "seeds); problems no method solved are left out."
)


def summary_table(records: list[dict[str, Any]], tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per method (:data:`COLUMNS`), best mean rank first; ``tables``: the problems' leaderboards."""
    per_method: dict[str, list[tuple[int, np.ndarray, bool]]] = {}
    for problem, table in tables.items():
        if table.empty or "ranked_mean" not in table:
            continue
        lower = main_metric(problem, records) not in higher_is_better(problem, records)
        names, draws = rank_draws(method_scores(records, problem), lower, problem_seed(problem))
        ranked = table[table["ranked_mean"].notna()]
        position = {m: i + 1 for i, m in enumerate(ranked["method"])}
        tied = dict(zip(table["method"], table["tied_with_best"], strict=True))
        for j, name in enumerate(names):
            per_method.setdefault(name, []).append((position[name], draws[:, j], bool(tied.get(name))))
    rows = []
    for method, entries in per_method.items():
        mean_draws = np.mean([draws for _, draws, _ in entries], axis=0)
        best = sum(t for _, _, t in entries)
        rows.append(
            {
                "method": method,
                "problems": len(entries),
                "mean_rank": float(np.mean([rank for rank, _, _ in entries])),
                "mean_rank_low": float(np.quantile(mean_draws, (1 - LEVEL) / 2)),
                "mean_rank_high": float(np.quantile(mean_draws, 1 - (1 - LEVEL) / 2)),
                "best_groups": best,
                "best_share": best / len(entries),
            }
        )
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["mean_rank", "method"]).reset_index(drop=True)


def performance_ratios(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per (problem, method) ran: the time to reach the problem's stated accuracy over the fastest method's (inf if
    never reached); problems without a stated accuracy or that no method solved are left out."""
    rows = []
    for problem, table in tables.items():
        info = table.attrs.get("trace") or {}
        reach = info.get("reach")
        if table.empty or not reach or reach not in table:
            continue
        ran = table[table["ranked_mean"].notna()] if "ranked_mean" in table else table
        times = {m: float(t) for m, t in zip(ran["method"], ran[reach], strict=True) if not pd.isna(t)}
        finite = [t for t in times.values() if math.isfinite(t)]
        if not finite:
            continue
        fastest = max(min(finite), 1e-12)
        rows += [{"problem": problem, "method": m, "ratio": t / fastest} for m, t in times.items()]
    return pd.DataFrame(rows, columns=["problem", "method", "ratio"])


def profile_curve(ratios: pd.Series, taus: np.ndarray) -> np.ndarray:
    """rho(tau): the share of ``ratios`` at most each tau."""
    values = ratios.to_numpy(dtype=float)
    return np.array([(values <= tau).mean() if len(values) else math.nan for tau in taus])


def display_summary(table: pd.DataFrame, code: bool = False) -> pd.DataFrame:
    """The summary as shown (``summary.md`` and the page): method, problems, mean rank [95%], best group.

    ``code``: method names as Markdown code (`` `trj` ``).
    """
    return pd.DataFrame(
        {
            "method": [f"`{m}`" if code else m for m in table["method"]],
            "problems": table["problems"],
            "mean rank [95%]": [
                f"{m:.2f} [{lo:.2f}, {hi:.2f}]"
                for m, lo, hi in zip(table["mean_rank"], table["mean_rank_low"], table["mean_rank_high"], strict=True)
            ],
            "best group": [f"{k}/{n}" for k, n in zip(table["best_groups"], table["problems"], strict=True)],
        }
    )


def format_summary(table: pd.DataFrame) -> str:
    """The summary as Markdown, with the rules it follows."""
    if table.empty:
        return "No problem has a ranked method.\n"
    return to_markdown(display_summary(table, code=True)) + "\n" + RULES + "\n"


def plot_summary(table: pd.DataFrame, ratios: pd.DataFrame, path: Path) -> Path | None:
    """``summary.png``: mean rank with its interval (left) and the performance profile (right); None if empty."""
    if table.empty:
        return None

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.35 * len(table) + 2.2))
    y = np.arange(len(table))[::-1]
    error = [table["mean_rank"] - table["mean_rank_low"], table["mean_rank_high"] - table["mean_rank"]]
    left.errorbar(table["mean_rank"], y, xerr=np.clip(error, 0, None), fmt="o", color="#1f4e79", capsize=3)
    left.set_yticks(y, [f"{m} ({n})" for m, n in zip(table["method"], table["problems"], strict=True)])
    left.set_xlabel("mean rank over problems (95% interval); (n): problems ran")
    left.grid(axis="x", alpha=0.3)
    if not ratios.empty:
        finite = ratios["ratio"][np.isfinite(ratios["ratio"])]
        top = max(float(finite.max()) * 1.5, 2.0)
        taus = np.geomspace(1.0, top, 200)
        colours = plt.get_cmap("tab20")
        for i, method in enumerate(table["method"]):
            mine = ratios.loc[ratios["method"] == method, "ratio"]
            if len(mine):
                style = {"color": colours(i % 20), "linestyle": ("-", "--", ":")[(i // 20) % 3]}
                right.step(taus, profile_curve(mine, taus), where="post", label=method, **style)
        right.set_xscale("log")
        right.set_ylim(-0.02, 1.02)
        right.legend(fontsize=7, loc="lower right")
    right.set_xlabel("tau: time to the stated accuracy / fastest method's")
    right.set_ylabel("share of the method's problems")
    right.set_title("performance profile", fontsize=10)
    return write_figure(fig, path)


def write_summary(records: list[dict[str, Any]], tables: dict[str, pd.DataFrame], out: Path) -> pd.DataFrame:
    """Write ``summary.csv``, ``summary.md`` and ``summary.png`` into ``out``; return the summary table."""

    table = summary_table(records, tables)
    write_atomically(out / "summary.csv", lambda path: table.to_csv(path, index=False))
    text = "# Summary across problems\n\n" + format_summary(table)
    write_atomically(out / "summary.md", lambda path: path.write_text(text))
    plot_summary(table, performance_ratios(tables), out / "summary.png")
    return table
