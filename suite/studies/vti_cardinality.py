"""VTI Fig. 4 on exact truth: the MADE model sampler against RJMCMC as the number of models grows.

Variants: ``vti-mcg`` with the MADE model distribution (the paper's "neural density" sampler; at the authors'
information-gain cap 5e-3 and at the quick profile's 0.05) and ``rjmcmc-baseline``, on
``conjugate-vs-fig4-p{8,12,16,20}`` (2^8 to 2^20 models, 3 data sets each in the quick profile), every run with
the problem's quick budget of 60 s, so the methods meet at equal walltime; the
iterations VTI makes in it are in each record (the paper trains 30,000). The table gives TV(q(m), pi(m)); the
figure plots TV, KL(pi || q) over models and KL over (m, theta) (cross-entropy minus the exact joint entropy)
against |M|. A KL of infinity means q gave zero probability to a model the truth supports (RJMCMC's visit
frequencies at large |M|); it is drawn at the top edge.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from suite.report.plots import plt, write_figure
from suite.results.records import load_records
from suite.studies.study import Study, Variant

CARDINALITIES = (8, 12, 16, 20)
PROBLEMS = tuple(f"conjugate-vs-fig4-p{p}" for p in CARDINALITIES)
METRICS = {"model_prob_tv": "TV(q(m), pi(m))", "model_prob_kl": "KL(pi(m) || q(m))", "kl_joint": "KL over (m, theta)"}


def _points(study: Study, out: Path) -> dict[str, dict[str, dict[int, list[float]]]]:
    """variant label -> metric (and ``iterations``) -> number of covariates -> values over data sets (successful
    runs)."""
    points: dict[str, dict[str, dict[int, list[float]]]] = {}
    for variant in study.variants:
        folder = out / variant.slug
        records = load_records(folder) if (folder / "records").exists() else []
        per_metric = points.setdefault(variant.label, {name: {} for name in (*METRICS, "iterations")})
        for record in records:
            if record["status"] != "ok":
                continue
            p = int(record["problem_config"]["num_covariates"])
            for name in METRICS:
                value = record.get("metrics", {}).get(name, {}).get("value")
                if value is not None:
                    per_metric[name].setdefault(p, []).append(float(value))
            iterations = record.get("diagnostics", {}).get("iterations")
            if iterations is not None:
                per_metric["iterations"].setdefault(p, []).append(float(iterations))
    return points


def _mean(values: list[float]) -> str:
    """Mean of a metric over data sets, 'inf' when any is infinite, '-' when none."""
    if not values:
        return "-"
    if not all(math.isfinite(v) for v in values):
        return "inf"
    return f"{float(np.mean(values)):.3g}"


def cardinality_details(study: Study, out: Path) -> str:
    """Per variant and |M|: mean TV, KL(pi || q), joint KL and iterations in the run, over data sets."""
    points = _points(study, out)
    lines = [
        "TV / KL(pi(m) || q(m)) / KL over (m, theta) / iterations (means over data sets; inf: some q gave a model "
        "the truth supports zero probability):",
        "",
        "| variant | " + " | ".join(f"2^{p}" for p in CARDINALITIES) + " |",
        "|---" * (len(CARDINALITIES) + 1) + "|",
    ]
    for label, per_metric in points.items():
        cells = []
        for p in CARDINALITIES:
            iterations = per_metric["iterations"].get(p, [])
            values = [_mean(per_metric[name].get(p, [])) for name in METRICS]
            cells.append(" / ".join([*values, f"{float(np.mean(iterations)):.0f}" if iterations else "-"]))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_cardinality(study: Study, out: Path) -> Path | None:
    """TV, KL over models and joint KL against |M| per variant: mean over data sets, each data set a dot."""
    points = _points(study, out)
    if not any(values for per_metric in points.values() for values in per_metric["model_prob_tv"].values()):
        return None
    fig, axes = plt.subplots(1, len(METRICS), figsize=(4.2 * len(METRICS), 3.6))
    for ax, (name, title) in zip(axes, METRICS.items(), strict=True):
        finite_top = max(
            (v for per in points.values() for vals in per[name].values() for v in vals if math.isfinite(v)),
            default=1.0,
        )
        edge = 2.0 * finite_top if finite_top > 0 else 1.0
        for label, per_metric in points.items():
            ps = sorted(per_metric[name])
            if not ps:
                continue
            shown = {p: [v if math.isfinite(v) else edge for v in per_metric[name][p]] for p in ps}
            line = ax.plot([2.0**p for p in ps], [float(np.mean(shown[p])) for p in ps], "o-", label=label)[0]
            for p in ps:
                ax.scatter([2.0**p] * len(shown[p]), shown[p], s=8, color=line.get_color(), alpha=0.5)
        ax.set(xscale="log", yscale="log", title=title, xlabel="|M| (number of models)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("VTI Fig. 4 on exact truth (conjugate-vs), equal walltime per run; inf drawn at the top", fontsize=9)
    return write_figure(fig, out / "fig4.png")


VTI_CARDINALITY = Study(
    name="vti-cardinality",
    description=(
        "VTI Fig. 4 on exact truth: vti-mcg with the MADE model sampler (caps 5e-3 and 0.05) and rjmcmc-baseline "
        "on conjugate-vs with "
        "2^8, 2^12, 2^16 and 2^20 models, 3 data sets each, 60 s per run (equal walltime)"
    ),
    problems=PROBLEMS,
    variants=(
        # The MADE sampler's own q(m), as Fig. 4 reports it (not the importance-weighted q of smaller quick runs),
        # at the authors' information-gain cap and at the quick profile's wider one.
        Variant(
            "MADE (vti-mcg, authors' cap 5e-3)",
            "vti-mcg",
            {"model_distribution": "made", "model_probs": "sampler", "made_ig_threshold": 0.005},
        ),
        Variant(
            "MADE (vti-mcg, cap 0.05)",
            "vti-mcg",
            {"model_distribution": "made", "model_probs": "sampler", "made_ig_threshold": 0.05},
        ),
        Variant("RJMCMC (rjmcmc-baseline)", "rjmcmc-baseline", {}),
    ),
    metric="model_prob_tv",
    grid={"profile": "quick", "seeds": 1},
    execution={"progress": False, "jobs": 1},
    paper_source="VTI paper Fig. 4 (robust-vs, 2^9 to 2^24 models, 30,000 iterations; a figure, no numbers)",
    figure=plot_cardinality,
    details=cardinality_details,
    expected_runtime="about 45 minutes",
)
