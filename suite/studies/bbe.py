"""TRJ's bridge-estimate studies (TRJ Figs. 5 and 7/9): violins of one model's probability per proposal type.

A :class:`BBEStudy` runs the bridge-estimate study (:func:`suite.studies.bbe_study.run_bbe`: the Bartolucci
bridge estimate of every proposal type, refitted per replicate) once per number of draws N into ``<out>/n<N>/``,
then compares the estimates with the reference: per N and proposal the number of estimates, mean, standard
deviation, RMSE against the reference probability and acceptance rate, written as ``<name>.csv``, ``.md``,
``.png`` (violins, one panel per N) and ``index.html``. A folder whose ``bbe_<problem>.csv`` exists is kept (an
interrupted study resumes by N) unless ``force``. The papers give these figures as violins only, so the
comparison is with their stated ordering.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from suite.core.files import write_atomically
from suite.core.problem import Problem
from suite.core.registry import make_problem
from suite.core.types import ModelProbs
from suite.report.plots import plt, write_figure
from suite.studies.bbe_settings import StudySettings


@dataclass(frozen=True)
class BBEStudy:
    """Bridge estimates of P(``model``) on ``problem`` per proposal type and number of draws, against the reference."""

    name: str
    description: str
    problem: str
    proposals: tuple[str, ...]
    draws: tuple[int, ...]
    replicates: int
    repeats: int
    flow_iterations: int
    #: The model whose probability is compared (None: the reference's most probable).
    model: int | None
    paper_source: str
    #: What the paper shows, in words (printed beside the measured ordering).
    paper_claim: str
    #: Pairs (better, worse) by RMSE that the paper's figure shows, checked at the largest N.
    paper_order: tuple[tuple[str, str], ...] = ()
    #: How the draws are made (``tdbench bbe-study --fresh-draws`` / ``--draws-per-model``; StudySettings).
    fresh_draws: bool = False
    draws_per_model: bool = False
    #: How long the whole study took on the project's 2-core machine (docs/studies.md), printed when it starts.
    expected_runtime: str = ""
    #: (N, fits, estimates per fit) where an N gets a budget other than ``replicates`` x ``repeats``.
    budgets: tuple[tuple[int, int, int], ...] = ()
    #: Exact p(m | D) computed for the study, scored against instead of the stored reference (StudySettings).
    exact_truth: Callable[[Problem], ModelProbs] | None = None

    @property
    def truth_name(self) -> str:
        """What the estimates are scored against, in the tables and plots."""
        return "exact" if self.exact_truth is not None else "reference"

    def budget(self, draws: int) -> tuple[int, int]:
        """Fits and estimates per fit at ``draws`` draws per set."""
        for n, fits, repeats in self.budgets:
            if n == draws:
                return fits, repeats
        return self.replicates, self.repeats

    def study_settings(self, draws: int, replicates: int | None) -> StudySettings:
        """The study's settings for ``draws`` draws per set (``replicates`` overrides the fits)."""
        fits, repeats = self.budget(draws)
        return StudySettings(
            proposals=self.proposals,
            replicates=fits if replicates is None else replicates,
            repeats=repeats,
            draws=draws,
            model=self.model,
            flow_iterations=self.flow_iterations,
            fresh_draws=self.fresh_draws,
            draws_per_model=self.draws_per_model,
            exact_truth=self.exact_truth,
        )

    def csv_of(self, out: Path, draws: int) -> Path:
        """The per-estimate CSV ``tdbench bbe-study`` writes for ``draws``."""
        return out / f"n{draws}" / f"bbe_{self.problem}.csv"

    def rows_of_model(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The rows of the compared model (``model``, else the one the reference makes most probable)."""
        model = self.model
        if model is None:
            model = int(frame.loc[frame["truth"].idxmax(), "model_index"]) if frame["truth"].notna().any() else 0
        return frame[frame["model_index"] == model]

    def table(self, out: Path) -> pd.DataFrame:
        """One row per (N, proposal): estimates, mean, sd, RMSE against the reference, acceptance, fit seconds."""
        rows = []
        for draws in self.draws:
            path = self.csv_of(out, draws)
            if not path.exists():
                continue
            frame = self.rows_of_model(pd.read_csv(path))
            for proposal, group in frame.groupby("proposal", sort=False):
                values = group["estimate"].to_numpy(float)
                values = values[np.isfinite(values)]
                truth = float(group["truth"].iloc[0]) if group["truth"].notna().any() else math.nan
                rows.append(
                    {
                        "draws": draws,
                        "proposal": proposal,
                        "estimates": len(values),
                        "mean": float(values.mean()) if len(values) else math.nan,
                        "sd": float(values.std(ddof=1)) if len(values) > 1 else math.nan,
                        "rmse": float(np.sqrt(np.mean((values - truth) ** 2))) if len(values) else math.nan,
                        "reference": truth,
                        "reference_se": float(group["truth_se"].iloc[0]) if group["truth_se"].notna().any() else 0.0,
                        "acceptance": float(group["acceptance"].mean()),
                        "fit_seconds": float(group["fit_seconds"].mean()),
                        "num_train": int(group["num_train"].max()),
                        "fits": int(group["replicate"].nunique()),
                    }
                )
        return pd.DataFrame(rows)

    def ordering(self, table: pd.DataFrame) -> list[str]:
        """Each of the paper's (better, worse) pairs at the largest N measured: holds or not, with the RMSEs."""
        if table.empty:
            return []
        largest = table[table["draws"] == table["draws"].max()].set_index("proposal")
        last, estimates = largest["rmse"], largest["estimates"]
        lines = []
        for better, worse in self.paper_order:
            if better not in last or worse not in last:
                continue
            rmse = f"RMSE {last[better]:.4f} against {last[worse]:.4f}"
            if min(estimates[better], estimates[worse]) < 2:  # one estimate has no spread: no ordering to judge
                lines.append(f"{better} better than {worse}: not judged, one estimate each ({rmse}; run more fits)")
                continue
            verdict = "holds" if last[better] < last[worse] else "does not hold"
            lines.append(f"{better} better than {worse}: {verdict} ({rmse})")
        return lines

    def run(self, out: Path, seeds: int | None = None, force: bool = False) -> int:
        """Run the bridge-estimate study per N (finished N are kept), write and print the comparison; exit code."""
        from suite.studies.bbe_study import bbe_refusal, run_bbe  # TRJ's flows load only to run (not for report)

        problem = make_problem(self.problem)
        out.mkdir(parents=True, exist_ok=True)
        print(f"Study {self.name}: {self.description}\nResults in {out}; each N's estimates in {out}/n<N>/")
        if seeds is not None:
            print(f"--seeds {seeds}: {seeds} fit{'s' if seeds != 1 else ''} per N, in place of the counts above")
        if self.expected_runtime:
            print(f"Expected runtime: {self.expected_runtime} on a 2-core machine, with the default fits")
        status = 0
        for draws in self.draws:
            if self.csv_of(out, draws).exists() and not force:
                print(f"  N = {draws}: kept ({self.csv_of(out, draws)})")
                continue
            settings = self.study_settings(draws, seeds)
            why = bbe_refusal(problem, settings)
            if why is not None:
                print(f"  N = {draws}: {why}")
                return 2
            start = time.perf_counter()
            code = run_bbe(problem, settings, out / f"n{draws}")
            print(f"  N = {draws}: exit {code} in {time.perf_counter() - start:.0f} s")
            status = max(status, code)
        table = self.table(out)
        write_atomically(out / f"{self.name}.csv", lambda tmp: table.to_csv(tmp, index=False))
        markdown = format_bbe_table(table, self.truth_name)
        verdicts = self.ordering(table)
        text = f"# {self.name}\n\n{self.description}\n\nPaper: {self.paper_source}: {self.paper_claim}\n\n{markdown}\n"
        if verdicts:
            text += "\nThe paper's ordering at the largest N:\n" + "".join(f"- {line}\n" for line in verdicts)
        write_atomically(out / f"{self.name}.md", lambda tmp: tmp.write_text(text))
        figure = plot_bbe(self, out, out / f"{self.name}.png")
        write_bbe_html(self, table, verdicts, out, figure)
        print(f"\n{self.paper_source}: {self.paper_claim}\n{markdown}")
        for line in verdicts:
            print(f"  {line}")
        print(f"\nWrote {out / f'{self.name}.csv'}, {out / f'{self.name}.md'}, {figure} and {out / 'index.html'}")
        return status


def format_bbe_table(table: pd.DataFrame, truth_name: str = "reference") -> str:
    """The comparison as Markdown: one row per N and proposal; ``truth_name`` heads the column scored against."""
    lines = [
        f"| N | proposal | estimates (fits) | mean | sd | RMSE | {truth_name} | acceptance | fit s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, row in table.iterrows():
        lines.append(
            f"| {row['draws']:,} | {row['proposal']} | {row['estimates']} ({row['fits']}) | {row['mean']:.4f} | "
            f"{row['sd']:.4f} | {row['rmse']:.4f} | {row['reference']:.4f} ± {row['reference_se']:.4f} | "
            f"{row['acceptance']:.3g} | {row['fit_seconds']:.2g} |"
        )
    return "\n".join(lines)


def plot_bbe(study: BBEStudy, out: Path, path: Path) -> Path:
    """Violins of the estimates per proposal, one panel per N, with the reference and its ±2 SE band."""
    panels = [d for d in study.draws if study.csv_of(out, d).exists()]
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(5.5 * max(len(panels), 1), 4.2), squeeze=False)
    for ax, draws in zip(axes[0], panels, strict=False):
        frame = study.rows_of_model(pd.read_csv(study.csv_of(out, draws)))
        names = list(dict.fromkeys(frame["proposal"]))
        truth, se = frame["truth"].iloc[0], frame["truth_se"].fillna(0).iloc[0]
        ax.axhspan(truth - 2 * se, truth + 2 * se, color="grey", alpha=0.25)
        ax.axhline(truth, color="black", lw=1, label=f"{study.truth_name} ± 2 SE")
        for pos, name in enumerate(names, start=1):
            values = frame.loc[frame["proposal"] == name, "estimate"].to_numpy(float)
            values = values[np.isfinite(values)]
            if len(values) > 1 and np.ptp(values) > 0:
                ax.violinplot(values, positions=[pos], widths=0.7, showextrema=False)
            if len(values):
                ax.hlines(values.mean(), pos - 0.3, pos + 0.3, color="C3", lw=2)
        ax.set_xticks(range(1, len(names) + 1), names)
        ax.set_title(f"N = {draws:,} draws per set", fontsize=10)
        ax.set_ylabel(f"estimate of P({frame['model'].iloc[0]})")
        # Below the panel: inside it the legend hid estimates at the edges (the standard proposal's 0.0).
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    fig.suptitle(f"{study.name}: {study.paper_source}", fontsize=9)
    return write_figure(fig, path, fit_box=True)


def write_bbe_html(study: BBEStudy, table: pd.DataFrame, verdicts: list[str], out: Path, figure: Path) -> Path:
    """``<out>/index.html``: the description, the table, the paper's claim with the verdicts, the figure."""
    cells = table.to_html(index=False, float_format=lambda x: f"{x:.4g}", border=1) if not table.empty else ""
    items = "".join(f"<li>{html.escape(v)}</li>" for v in verdicts)
    page = (
        f"<!doctype html><meta charset='utf-8'><title>{html.escape(study.name)}</title>"
        f"<h1>{html.escape(study.name)}</h1><p>{html.escape(study.description)}</p>"
        f"<p>{html.escape(study.paper_source)}: {html.escape(study.paper_claim)}</p><ul>{items}</ul>"
        f"{cells}"
        f"<p><img src='{html.escape(figure.name)}' alt='{html.escape(study.name)}'></p>"
    )
    path = out / "index.html"
    write_atomically(path, lambda tmp: tmp.write_text(page))
    return path
