"""Tables and figures of the bridge-estimate study: per-estimate CSV, summaries, violins and running estimates."""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor

from suite.core.context import RunContext
from suite.core.files import write_atomically
from suite.core.problem import Problem
from suite.core.registry import make_method
from suite.core.types import ModelProbs
from suite.report.plots import save_figure
from suite.run.runner import execute
from suite.studies.bbe_replicates import CSV_FIELDS, PROPOSALS, ReplicateResult, StudySettings, prior_scale


def truth_of(
    problem: Problem, exact_truth: Callable[[Problem], ModelProbs] | None = None
) -> tuple[Tensor | None, Tensor | None]:
    """The model probabilities scored against and their standard errors (dense), each None when unknown.

    ``exact_truth`` (a study's exact answer, e.g. by quadrature) wins over the problem's reference.
    """
    reference = problem.reference_model_probs() if exact_truth is None else exact_truth(problem)
    if reference is None:
        return None, None
    k = int(problem.num_models)
    se = None
    if reference.se is not None:
        se = torch.zeros(k, dtype=torch.float64)
        se[reference.index] = reference.se
    return reference.dense(k), se


def default_model(
    problem: Problem, results: Sequence[ReplicateResult], exact_truth: Callable[[Problem], ModelProbs] | None = None
) -> int:
    """The most probable model: by the truth when known, else by the mean estimate."""
    truth, _ = truth_of(problem, exact_truth)
    if truth is not None:
        return int(truth.argmax())
    return int(torch.stack([r.probs for r in results]).mean(0).argmax())


# --------------------------------------------------------------------------- outputs
def write_csv(
    problem: Problem,
    results: Sequence[ReplicateResult],
    path: Path,
    exact_truth: Callable[[Problem], ModelProbs] | None = None,
) -> Path:
    """One row per proposal type, replicate and model; ``truth`` is what the study scores against."""
    truth, truth_se = truth_of(problem, exact_truth)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda tmp: _write_rows(problem, results, truth, truth_se, tmp))
    return path


def _write_rows(
    problem: Problem, results: Sequence[ReplicateResult], truth: Tensor | None, truth_se: Tensor | None, path: Path
) -> None:
    """The rows of :func:`write_csv` into ``path``."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for res in results:
            for k in range(len(res.probs)):
                writer.writerow(
                    {
                        "proposal": res.proposal,
                        "replicate": res.replicate,
                        "repeat": res.repeat,
                        "model": problem.model_space.identifier(k),
                        "model_index": k,
                        "estimate": repr(float(res.probs[k])),
                        "truth": "" if truth is None else repr(float(truth[k])),
                        "truth_se": "" if truth_se is None else repr(float(truth_se[k])),
                        "acceptance": f"{res.acceptance:.6g}",
                        "acceptance_from_model": f"{float(res.acceptance_from[k]):.6g}",
                        "estimator": res.estimator,
                        "num_train": res.num_train,
                        "num_eval": res.num_eval,
                        "fit_seconds": f"{res.fit_seconds:.4g}",
                    }
                )


def estimates_by_proposal(results: Sequence[ReplicateResult], model: int) -> dict[str, np.ndarray]:
    """The estimates of P(model) per proposal type, in the order the types first appear."""
    table: dict[str, list[float]] = {}
    for res in results:
        table.setdefault(res.proposal, []).append(float(res.probs[model]))
    return {kind: np.asarray(values) for kind, values in table.items()}


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)]


def summary_rows(results: Sequence[ReplicateResult], model: int, truth: float | None) -> list[dict[str, Any]]:
    """Per proposal type: estimates, their mean, sd and RMSE for P(model), mean acceptance and fit time."""
    rows = []
    for kind, values in estimates_by_proposal(results, model).items():
        mine = [r for r in results if r.proposal == kind]
        values = _finite(values)  # replicates without any estimate are left out
        count = len(values)
        if not count:
            values = np.asarray([math.nan])
        rows.append(
            {
                "proposal": kind,
                "estimates": count,
                "mean": float(values.mean()),
                "sd": float(values.std(ddof=1)) if len(values) > 1 else math.nan,
                "rmse": math.nan if truth is None else float(np.sqrt(np.mean((values - truth) ** 2))),
                "acceptance": float(np.nanmean([r.acceptance for r in mine])),
                "fit_seconds": float(np.mean([r.fit_seconds for r in mine if r.repeat == 0])),
                "fallbacks": sum(r.estimator != "eq10" for r in mine),
            }
        )
    return rows


def format_summary(
    rows: Sequence[dict[str, Any]], label: str, truth: float | None, truth_name: str = "reference"
) -> str:
    """The summary rows as a fixed-width table, with a line on what ``fallbacks`` counts."""
    head = f"BBE of {label} ({truth_name} {'unknown' if truth is None else f'{truth:.5f}'})"
    columns = ("n", 5), ("mean", 10), ("sd", 10), ("rmse", 10), ("accept", 9), ("fit s", 9), ("fallbacks", 10)
    lines = [head, "proposal    " + "".join(f"{name:>{width}}" for name, width in columns)]
    for row in rows:
        seconds = row["fit_seconds"]
        fit = f"{seconds:.3g}" if seconds >= 0.01 else "<0.01"
        lines.append(
            f"{row['proposal']:<12}{row['estimates']:>5}{row['mean']:>10.4f}{row['sd']:>10.4f}"
            f"{row['rmse']:>10.4f}{row['acceptance']:>9.3f}{fit:>9}{row['fallbacks']:>10}"
        )
    lines.append(
        "fallbacks: estimates made by the least-squares bridge because the Bartolucci estimate (TRJ eq. 10) "
        "lacked a pair of models"
    )
    return "\n".join(lines)


def _colour(name: str, others: dict[str, str] | None = None) -> str:
    """One colour per proposal type in every plot (``name`` may be a run label such as "trj affine").

    Other names get the next unused colour, remembered in ``others``.
    """
    kind = name.split()[-1] if name.split() else name
    if kind in PROPOSALS:
        return f"C{PROPOSALS.index(kind)}"
    others = {} if others is None else others
    return others.setdefault(name, f"C{(len(PROPOSALS) + len(others)) % 10}")


def _draw_truth(ax: Any, truth: float | None, truth_se: float | None, truth_name: str = "reference") -> None:
    """Horizontal truth line and its +-2 SE band."""
    if truth is None:
        return
    # Dashed and on top: estimates that sit on the truth (exact transports) stay visible beneath it.
    ax.axhline(truth, color="black", lw=1.0, ls="--", zorder=5, label=f"{truth_name} {truth:.4f}")
    if truth_se:
        ax.axhspan(truth - 2 * truth_se, truth + 2 * truth_se, color="grey", alpha=0.25, lw=0, label="±2 SE")


def plot_violins(
    estimates: dict[str, np.ndarray],
    label: str,
    truth: float | None,
    truth_se: float | None,
    title: str,
    path: Path,
    truth_name: str = "reference",
) -> Path:
    """A violin (or, for constant estimates, a bar) per proposal type with the replicates as points; saves a PNG."""
    names = list(estimates)
    fig, ax = plt.subplots(figsize=(max(4.5, 1.3 * len(names) + 2.5), 4.3))
    _draw_truth(ax, truth, truth_se, truth_name)
    positions = np.arange(1, len(names) + 1)
    jitter = np.random.default_rng(0)
    for pos, name in zip(positions, names, strict=True):
        values = _finite(estimates[name])
        if not len(values):
            continue
        color = _colour(name)
        if len(values) > 1 and np.ptp(values) > 1e-12 * max(1.0, abs(values.mean())):
            parts = ax.violinplot(values, positions=[pos], widths=0.7, showextrema=False)
            for body in parts["bodies"]:
                body.set_facecolor(color)
                body.set_alpha(0.35)
        ax.hlines(
            values.mean(), pos - 0.3, pos + 0.3, color=color, lw=2, label="mean over estimates" if pos == 1 else None
        )
        ax.scatter(pos + jitter.uniform(-0.08, 0.08, len(values)), values, s=10, color=color, zorder=3)
    ax.set_xticks(positions, names)
    ax.set_xlim(0.4, len(names) + 0.6)
    ax.set_ylabel(f"estimate of {label}")
    ax.set_title(title, fontsize=10)
    return save_figure(fig, ax, path)


def _running_of(item: Any) -> tuple[dict[str, list], str | None]:
    """The running-estimate dict of a record (dict or JSON path), a diagnostics dict or the dict itself; a label."""
    if isinstance(item, str | Path):
        item = json.loads(Path(item).read_text())
    label = None
    if "diagnostics" in item:  # a result record
        settings = item.get("method_settings") or {}
        transport = settings.get("transport") or item.get("method_options", {}).get("transport")
        label = item.get("method", "") + (f" {transport}" if transport and item.get("method") == "trj" else "")
        item = item["diagnostics"] or {}
    if "running_estimate" in item:
        item = item["running_estimate"]
    if not isinstance(item, dict) or "iteration" not in item or "prob" not in item:
        raise ValueError("expected a record, its diagnostics, or a running_estimate dict with 'iteration' and 'prob'")
    return item, label


def plot_running_estimates(
    records_or_diagnostics: Sequence[Any],
    model: int,
    truth: float | None,
    path: Path,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    truth_se: float | None = None,
    model_label: str | None = None,
) -> Path:
    """Running bridge estimates of P(model) against iteration, one line per run, runs with one label share a colour.

    Each item is a result record (a dict, or the path of its JSON file), its ``diagnostics`` dict, or the
    ``running_estimate`` dict itself; ``labels`` name the runs (default: method and transport of each record).
    """
    fig, ax = plt.subplots(figsize=(7.0, 4.3))
    _draw_truth(ax, truth, truth_se)
    seen: set[str] = set()
    others: dict[str, str] = {}
    for i, item in enumerate(records_or_diagnostics):
        running, found = _running_of(item)
        label = labels[i] if labels is not None else (found or "run")
        points = [(t, p[model]) for t, p in zip(running["iteration"], running["prob"], strict=True) if p is not None]
        if not points:
            continue
        x, y = zip(*points, strict=True)
        ax.plot(x, y, color=_colour(label, others), lw=1.2, alpha=0.8, label=None if label in seen else label)
        seen.add(label)
    ax.set_xlabel("iteration (after burn-in)")
    model_label = model_label or f"P(model {model})"
    ax.set_ylabel(f"running estimate of {model_label}")
    ax.set_title(title or f"running bridge estimates of {model_label}", fontsize=10)
    return save_figure(fig, ax, path)


# --------------------------------------------------------------------------- running estimates (Figs. 3-4)
def running_records(
    problem: Problem,
    proposals: Sequence[str],
    seeds: Sequence[int],
    profile: str,
    settings: StudySettings,
    flow_iterations: int | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Run ``trj`` (one transport per proposal type) or ``ctrj`` for each seed; the successful records.

    ``flow_iterations`` overrides the budget profile's when given.
    """

    shared: dict[str, Any] = {"jumps": settings.jumps}
    if flow_iterations is not None:
        shared["flow_iterations"] = flow_iterations
    records = []
    for kind in proposals:
        if kind == "ctrj":
            method = make_method("ctrj", **shared)
        else:
            options: dict[str, Any] = {"transport": kind, **shared}
            if kind == "standard":
                scale = prior_scale(problem) if settings.aux_scale is None else torch.tensor(settings.aux_scale)
                if not torch.allclose(scale, scale.mean(), rtol=0.05):  # beyond the prior-draw noise
                    log("standard (running): trj takes one aux_scale; using the mean prior sd")
                options["aux_scale"] = float(scale.mean())
            method = make_method("trj", **options)
        reason = method.supports(problem)
        if reason:
            log(f"running: skipping {kind}: {reason}")
            continue
        resolved = method.resolve(problem, profile)
        for seed in seeds:
            start = time.perf_counter()
            record = execute(problem, resolved, RunContext(seed=seed, profile=profile))
            if record["status"] != "ok":
                log(f"running: {kind} seed {seed} failed: {record['reason']}")
                continue
            log(f"running: {kind} seed {seed} done in {time.perf_counter() - start:.1f} s")
            records.append(record)
    return records
