"""Plots: each method's model-probability estimates against the truth, one PNG per problem."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt
import numpy as np

#: Up to this many models are drawn as grouped bars; beyond, a log-log scatter.
MAX_BARS = 12


def _collect(records: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, dict[str, list[float]]]]:
    """Truth per model id and, per method, each seed's estimate per model id."""
    truth: dict[str, float] = {}
    estimates: dict[str, dict[str, list[float]]] = {}
    for rec in records:
        table = rec.get("model_probs")
        if rec["status"] != "ok" or not table or table.get("estimate") is None:
            continue
        if table.get("truth") is not None:
            truth.update(zip(table["id"], table["truth"], strict=True))
        per_model = estimates.setdefault(rec["method"], {})
        for model_id, value in zip(table["id"], table["estimate"], strict=True):
            per_model.setdefault(model_id, []).append(value)
    return truth, estimates


def plot_model_probs(problem: str, records: list[dict[str, Any]], path: Path) -> Path | None:
    """Draw estimates (mean ± se over seeds) against the truth; returns the path, or None if nothing to draw."""
    truth, estimates = _collect([r for r in records if r["problem"] == problem])
    if not truth or not estimates:
        return None
    models = sorted(truth, key=lambda k: -truth[k])
    methods = sorted(estimates)
    bars = len(models) <= MAX_BARS
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(models) + 3), 4.2) if bars else (6.5, 5.5))
    if bars:
        width = 0.8 / (len(methods) + 1)
        x = np.arange(len(models))
        ax.bar(x, [truth[m] for m in models], width, color="black", label="truth")
        for i, method in enumerate(methods):
            mean, se = _mean_se(estimates[method], models)
            ax.bar(x + (i + 1) * width, mean, width, yerr=se, capsize=3, label=method)
        ax.set_xticks(x + 0.4 - width / 2, models, rotation=30 if len(models) > 6 else 0)
        ax.set_ylabel("model probability")
    else:
        lo = min(v for v in truth.values() if v > 0)
        for method in methods:
            mean, _ = _mean_se(estimates[method], models)
            ax.scatter([truth[m] for m in models], np.maximum(mean, lo / 10), s=12, label=method)
        ax.plot([lo, 1], [lo, 1], color="black", lw=1, label="y = x")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("true model probability")
        ax.set_ylabel("estimated (zeros drawn at the floor)")
    ax.set_title(f"{problem}: model probabilities (mean ± se over seeds)")
    return save_figure(fig, ax, path)


def save_figure(fig: Any, ax: Any, path: Path) -> Path:
    """Add the legend, lay out, write ``path`` (creating its folder) at the suite's resolution, close the figure."""
    ax.legend(fontsize=8, loc="best")
    return write_figure(fig, path)


def write_figure(fig: Any, path: Path, fit_box: bool = False) -> Path:
    """Lay out and write ``fig`` to ``path`` atomically (creating its folder; the format from its suffix), close it.

    ``fit_box``: fit the image to the drawing, so that a legend placed outside the axes is kept whole.
    """
    from suite.leaderboard import write_atomically  # here: plotting modules stay free of the registry's imports

    try:
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fmt = path.suffix.lstrip(".") or "png"
        write_atomically(
            path, lambda tmp: fig.savefig(tmp, dpi=110, format=fmt, bbox_inches="tight" if fit_box else None)
        )
    finally:
        plt.close(fig)
    return path


def _mean_se(per_model: dict[str, list[float]], models: list[str]) -> tuple[np.ndarray, np.ndarray]:
    mean, se = [], []
    for model in models:
        values = np.asarray(per_model.get(model, [0.0]), dtype=float)
        mean.append(values.mean())
        se.append(values.std(ddof=1) / math.sqrt(len(values)) if len(values) > 1 else 0.0)
    return np.asarray(mean), np.asarray(se)
