"""The bridge-estimate study as a library call (``tdbench bbe-study``'s work; see :mod:`suite.studies.bbe_replicates`).

:func:`run_bbe` runs the replicates of one study on one problem, writes its CSV and violin plot, prints the summary
and, with a :class:`RunningPlan`, runs trj/ctrj per proposal type for the running estimates (TRJ Figs. 3-4).
:func:`bbe_refusal` says why a problem or settings cannot be studied. The command line is
:mod:`suite.cli.bbe_command`; :mod:`suite.studies.bbe` calls this once per number of draws.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from suite.core.problem import Problem
from suite.studies.bbe_output import (
    default_model,
    estimates_by_proposal,
    format_summary,
    plot_running_estimates,
    plot_violins,
    running_records,
    summary_rows,
    truth_of,
    write_csv,
)
from suite.studies.bbe_replicates import MAX_MODELS, ReplicateResult, StudySettings, run_study, usable_proposals


@dataclass(frozen=True, kw_only=True)
class RunningPlan:
    """The trj/ctrj runs for running estimates: seeds per proposal type, their profile, flow training steps."""

    seeds: int = 3
    budget: str = "smoke"
    flow_iterations: int | None = None


def bbe_refusal(problem: Problem, settings: StudySettings) -> str | None:
    """Why the study cannot run on ``problem`` with ``settings`` (unavailable data, too many models, ...), or None."""
    reason = problem.unavailable_reason()
    if reason:
        return f"{problem.name} is unavailable: {reason}"
    k = problem.num_models
    if k is None or not 2 <= k <= MAX_MODELS:
        return f"{problem.name}: the study needs an enumerable space of 2 to {MAX_MODELS} models, not {k}"
    if settings.model is not None and not 0 <= settings.model < k:
        return f"--model must be in 0..{k - 1}"
    if settings.replicates < 1 or settings.repeats < 1 or settings.draws < 2:
        return "--replicates and --repeats must be >= 1 and --draws >= 2"
    if settings.draws_per_model and not problem.has_prior:
        return f"--draws-per-model starts SMC from the prior, and {problem.name} has none"
    return None


def run_bbe(problem: Problem, settings: StudySettings, out: Path, running: RunningPlan | None = None) -> int:
    """Run the study, write its CSV and plot into ``out`` and print the summary; returns the exit code."""
    start = time.perf_counter()
    results = run_study(problem, settings)
    if not results:
        print("no proposal type could be evaluated")
        return 1
    model = report_study(problem, results, settings, out)
    print(f"study: {time.perf_counter() - start:.1f} s")
    if running is not None:
        report_running(problem, running, settings, model, out)
    return 0


def report_study(problem: Problem, results: Sequence[ReplicateResult], settings: StudySettings, out: Path) -> int:
    """Write the CSV and the violin plot, print the summary table; returns the model index plotted."""
    truth, truth_se = truth_of(problem, settings.exact_truth)
    truth_name = "reference" if settings.exact_truth is None else "exact"
    model = settings.model if settings.model is not None else default_model(problem, results, settings.exact_truth)
    label = f"P({problem.model_space.identifier(model)})"
    true_value = None if truth is None else float(truth[model])
    true_se = None if truth_se is None else float(truth_se[model])
    csv_path = write_csv(problem, results, out / f"bbe_{problem.name}.csv", settings.exact_truth)
    repeats = f" x {settings.repeats} repeats" if settings.repeats > 1 else ""
    title = (
        f"{problem.name}: Bartolucci bridge estimates of {label}\n"
        f"N = {settings.draws} training / evaluation draws, R = {settings.replicates}{repeats}, "
        f"{settings.jumps} jumps"
    )
    png = plot_violins(
        estimates_by_proposal(results, model),
        label,
        true_value,
        true_se,
        title,
        out / f"bbe_{problem.name}.png",
        truth_name,
    )
    print(format_summary(summary_rows(results, model, true_value), label, true_value, truth_name))
    if settings.exact_truth is not None:  # the problem's own (stored) reference, beside the exact value
        stored, stored_se = truth_of(problem)
        if stored is not None:
            shown = "" if stored_se is None else f" ± {float(stored_se[model]):.4f}"
            print(f"stored reference {float(stored[model]):.4f}{shown}: shown for comparison; scored on the exact")
    print(f"wrote {csv_path} and {png}")
    return model


def report_running(
    problem: Problem, running: RunningPlan, settings: StudySettings, model: int, out: Path
) -> Path | None:
    """Run trj/ctrj for each usable proposal type and seed, and draw their running estimates of P(model)."""
    kinds = usable_proposals(problem, settings.proposals, lambda _: None)  # reasons were printed by the study
    seeds = range(running.seeds)
    records = running_records(problem, kinds, seeds, running.budget, settings, running.flow_iterations)
    if not records:
        print("running: no run succeeded")
        return None
    truth, truth_se = truth_of(problem, settings.exact_truth)
    label = f"P({problem.model_space.identifier(model)})"
    path = plot_running_estimates(
        records,
        model,
        None if truth is None else float(truth[model]),
        out / f"running_{problem.name}.png",
        truth_se=None if truth_se is None else float(truth_se[model]),
        model_label=label,
        title=f"{problem.name}: running bridge estimates of {label} ({running.budget} budget)",
    )
    print(f"wrote {path}")
    return path
