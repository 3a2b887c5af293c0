"""VTI Fig. 2: model probabilities and per-model cross-entropy of VTI on robust variable selection, 3 flows.

Variants: ``vti-mcg`` (the score-function categorical sampler of the authors' Fig. 2 script) with the paper's
three flows, Diagonal Gaussian, Affine MAF (5,5) and Spline MAF (4,6), on ``robust-vs-fig2-mid`` and
``robust-vs-fig2-high`` (10 data sets each, data seeds 1000..1009). Before the runs the study computes each data
set's RJMCMC gold standard (quick size) into ``<out>/references`` and points ``TDBENCH_REFERENCES`` there. The
authors train 10,000 iterations at batch 1,024 in float32; this study trains ``ITERATIONS`` iterations at batch
``BATCH_SIZE`` (a twentieth of their draws) at the quick profile's learning rate, so that it fits in about an hour
on 2 CPU cores. The paper's figure has no numbers; the table gives TV(q(m), pi(m)) per flow and level, and the
figure redraws Fig. 2: log q(m) against log pi(m) (top) and -E_pi[log q(theta_m | m)] against pi(m) (bottom).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from suite.core.registry import make_problem, problem_class
from suite.reference.rjmcmc_gold import app_e1_settings, estimate_by_rjmcmc
from suite.report.plots import plt, write_figure
from suite.results.records import load_records
from suite.store import references as store
from suite.studies.study import Study, Variant

FLOWS = {"Diagonal Gaussian": "diag", "Affine MAF (5,5)": "affine(5,5)", "Spline MAF (4,6)": "spline(4,6)"}
PROBLEMS = ("robust-vs-fig2-mid", "robust-vs-fig2-high")
ITERATIONS = 2000
WARMUP = 400
BATCH_SIZE = 256
#: The reference size every run of the study is scored against (the RJMCMC gold standard's quick size).
REFERENCE_PROFILE = "quick"


def make_references(
    out: Path, problems: tuple[str, ...] = PROBLEMS, profile: str = REFERENCE_PROFILE, **overrides: Any
) -> None:
    """Compute the RJMCMC gold standard of every data set the study runs (kept if found), and search there.

    ``profile``: the runs' profile (it decides the data sets and the reference size); ``overrides``: RJMCMC
    gold-standard settings (``num_chains``, ``burn_in``, ... : tests make small ones).
    """
    folder = out / "references"
    searched = [p for p in os.environ.get(store.ENV_VAR, "").split(os.pathsep) if p]
    if str(folder) not in searched:
        os.environ[store.ENV_VAR] = os.pathsep.join([str(folder), *searched])
    size = "paper" if profile == "paper" else "quick"
    for name in problems:
        cls = problem_class(name)
        for seed in range(cls.first_data_seed, cls.first_data_seed + cls.data_sets[profile]):
            problem = make_problem(name, data_seed=seed)
            problem.use_reference_profile(profile)
            if store.find(problem) is not None:
                continue
            settings = app_e1_settings(problem.dim_max, size, **overrides)
            path = estimate_by_rjmcmc(problem, settings, progress=False).save(folder)
            print(f"  reference {name} data_seed={seed}: {path.name}")


def _panels(study: Study, out: Path) -> dict[tuple[str, str], list[dict]]:
    """(problem, variant label) -> the model tables of its successful runs, each with its data seed."""
    panels: dict[tuple[str, str], list[dict]] = {}
    for variant in study.variants:
        folder = out / variant.slug
        records = load_records(folder) if (folder / "records").exists() else []
        for record in records:
            table = record.get("model_probs")
            if record["status"] != "ok" or not table or table.get("truth") is None:
                continue
            seed = record["problem_config"].get("data_seed")
            panels.setdefault((record["problem"], variant.label), []).append({**table, "data_seed": seed})
    return panels


def plot_fig2(study: Study, out: Path) -> Path | None:
    """VTI Fig. 2 redrawn: per level and flow, log q(m) vs log pi(m) (top) and per-model cross-entropy (bottom)."""
    panels = _panels(study, out)
    if not panels:
        return None
    columns = [(problem, variant.label) for problem in study.problems for variant in study.variants]
    fig, axes = plt.subplots(2, len(columns), figsize=(3.1 * len(columns), 6.4), squeeze=False)
    colours = plt.get_cmap("tab10")
    for j, (problem, label) in enumerate(columns):
        top, bottom = axes[0][j], axes[1][j]
        tvs, slopes = [], []
        for table in panels.get((problem, label), []):
            truth = np.asarray(table["truth"], dtype=float)
            estimate = np.asarray(table["estimate"], dtype=float)
            colour = colours(int(table["data_seed"] or 0) % 10)
            tvs.append(0.5 * float(np.abs(truth - estimate).sum()))
            seen = truth > 0
            top.scatter(truth[seen], np.maximum(estimate[seen], 1e-6), s=6, color=colour, alpha=0.7)
            cross = np.asarray([math.nan if c is None else c for c in table.get("cross_entropy") or []], dtype=float)
            if len(cross):
                kept = seen & np.isfinite(cross)
                bottom.scatter(truth[kept], cross[kept], s=6, color=colour, alpha=0.7)
                if kept.sum() > 2:
                    slopes.append(float(np.polyfit(np.log10(truth[kept]), cross[kept], 1)[0]))
        top.plot([1e-6, 1], [1e-6, 1], color="black", lw=0.8)
        top.set(xscale="log", yscale="log", xlim=(1e-6, 1), ylim=(1e-6, 1.5))
        bottom.set(xscale="log", xlim=(1e-6, 1))
        level = problem.rsplit("-", 1)[-1]
        slope = f", slope {np.mean(slopes):.2f}" if slopes else ""
        top.set_title(f"{level}: {label}\nTV {np.mean(tvs):.3f} over {len(tvs)} data sets", fontsize=8)
        bottom.set_title(f"cross-entropy vs pi(m){slope}", fontsize=8)
        top.set_xlabel("pi(m)", fontsize=8)
        bottom.set_xlabel("pi(m)", fontsize=8)
    axes[0][0].set_ylabel("q(m)")
    axes[1][0].set_ylabel("-E_pi[log q(theta_m | m)]")
    fig.suptitle("VTI Fig. 2 redrawn: colours are data sets; black line y = x", fontsize=9)
    return write_figure(fig, out / "fig2.png")


_TRAINING = {"num_iterations": ITERATIONS, "warmup_iterations": WARMUP, "batch_size": BATCH_SIZE}

VTI_ROBUST_VS = Study(
    name="vti-robust-vs",
    description=(
        f"VTI Fig. 2: vti-mcg with {', '.join(FLOWS)} on robust-vs at mid and high misspecification, 10 data sets "
        f"each against their RJMCMC gold standards; {ITERATIONS:,} iterations at batch {BATCH_SIZE}"
    ),
    problems=PROBLEMS,
    variants=tuple(Variant(label, "vti-mcg", {**_TRAINING, "flow": flow}) for label, flow in FLOWS.items()),
    metric="model_prob_tv",
    grid={"profile": REFERENCE_PROFILE, "no_time_budget": True, "seeds": 1},
    execution={"progress": False, "jobs": 2},
    paper_source="VTI paper Fig. 2 (10,000 iterations at batch 1,024; scatter plots, no numbers)",
    prepare=make_references,
    figure=plot_fig2,
    expected_runtime="about 50 minutes",
)
