"""Plots: each method's model-probability estimates against the truth (small multiples), one PNG per problem."""

from __future__ import annotations

import math
from itertools import product
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.category import StrCategoryFormatter
from matplotlib.text import Text
from matplotlib.ticker import FixedFormatter, Formatter, FuncFormatter, StrMethodFormatter

from suite.core.files import write_atomically

#: Up to this many models are drawn as grouped bars; beyond, a log-log scatter.
MAX_BARS = 12
#: Panels per row of the small multiples.
PANEL_COLUMNS = 4


#: Colour and marker of every built-in method: no two share a colour, and no two share a marker.
METHOD_STYLES: dict[str, tuple[str, str]] = {
    "ctrj": ("tab:blue", "o"),
    "dagma": ("tab:brown", "P"),
    "fr": ("tab:green", "^"),
    "fr-vip": ("tab:olive", "v"),
    "iaf": ("tab:purple", "D"),
    "mf": ("tab:pink", "X"),
    "mif": ("tab:cyan", "s"),
    "rjmcmc-baseline": ("black", "*"),
    "rjmcmc-naive": ("tab:gray", "x"),
    "trj": ("tab:orange", "p"),
    "vti-mcg": ("tab:red", "h"),
    "vti-surrogate": ("goldenrod", "<"),
}
#: Colours and markers the styles of other methods (plug-ins) are drawn from, colour changing fastest.
EXTRA_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray")
EXTRA_MARKERS = ("d", ">", "8", "H", "+", "1", "2", "3", "4", "|", "o", "s")


def method_styles(methods: list[str]) -> dict[str, tuple[str, str]]:
    """Colour and marker per method: the fixed table for built-in names, else the next unused pair of a cycle.

    Pairs are never repeated within a call (nor taken from the built-in table), as long as fewer than
    ``len(EXTRA_COLOURS) * len(EXTRA_MARKERS)`` unknown methods are drawn together.
    """
    styles = {m: METHOD_STYLES[m] for m in methods if m in METHOD_STYLES}
    used = set(METHOD_STYLES.values())
    cycle = [(c, m) for m, c in product(EXTRA_MARKERS, EXTRA_COLOURS) if (c, m) not in used]
    for i, method in enumerate(sorted(m for m in methods if m not in METHOD_STYLES)):
        styles[method] = cycle[i % len(cycle)]
    return styles


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
    """Small multiples: one panel per method, its estimates (mean ± se over seeds) against the truth.

    As in VTI Fig. 2: up to :data:`MAX_BARS` models, bars of the truth with the estimate drawn inside them; beyond,
    a log-log scatter of estimate against truth with the line y = x. Returns the path, or None when there is
    nothing to draw (no truth, no estimate, or a single model, whose probability is 1 by definition); then a
    picture an earlier report left at ``path`` is removed, so that a page never shows one the records no longer make.
    """
    mine = [r for r in records if r["problem"] == problem]
    truth, estimates = _collect(mine)
    if len(truth) < 2 or not estimates:
        Path(path).unlink(missing_ok=True)
        return None
    models = sorted(truth, key=lambda k: -truth[k])
    methods = sorted(estimates)
    styles = method_styles(methods)
    tv = _mean_metric(mine, "model_prob_tv")
    bars = len(models) <= MAX_BARS
    cols = min(PANEL_COLUMNS, len(methods))
    rows = math.ceil(len(methods) / cols)
    width = max(2.6, 0.3 * len(models) + 1.0) if bars else 2.6
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, 2.4 * rows + 0.4), sharex=True, sharey=True)
    axes = np.atleast_1d(axes).reshape(rows, cols)
    x = np.arange(len(models))
    true = np.array([truth[m] for m in models])
    floor = (true[true > 0].min() if (true > 0).any() else 1e-6) / 10  # where an estimate of 0 is drawn (log axes)
    for ax, method in zip(axes.flat, methods, strict=False):
        colour = styles[method][0]
        mean, se = _mean_se(estimates[method], models)
        if bars:
            ax.bar(x, true, 0.8, color="0.88", edgecolor="black", lw=0.6, label="truth")
            ax.bar(x, mean, 0.4, yerr=se, capsize=2, color=colour, label="estimate (mean ± se over seeds)")
        else:
            ax.plot([floor, 1], [floor, 1], color="black", lw=0.8, label="y = x (truth)")
            ax.scatter(true, np.maximum(mean, floor), s=8, color=colour, alpha=0.8, label="estimate (mean over seeds)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.minorticks_off()  # small panels: the decades are enough, and each minor tick costs drawing time
        ax.set_title(f"{method} (TV {tv[method]:.2g})" if method in tv else method, fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(methods) :]:
        ax.set_visible(False)
    for ax in axes.flat[max(0, len(methods) - cols) : len(methods)]:  # the lowest panel of each column
        ax.tick_params(labelbottom=True)
        ax.set_xlabel("model" if bars else "true probability", fontsize=8)
    if bars:  # shared axes share their ticks: set once
        axes.flat[0].set_xticks(x, models, rotation=90 if len(models) > 3 else 0, fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("probability" if bars else f"estimate (log scale; 0 drawn at {floor:.0e})", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=8, frameon=False)
    fig.suptitle(f"{problem}: model probabilities, one panel per method against the truth", fontsize=10)
    return write_figure(fig, path, fit_box=True)


def _mean_metric(records: list[dict[str, Any]], metric: str) -> dict[str, float]:
    """Per method, the mean over its successful runs of a final metric (methods without it left out)."""
    values: dict[str, list[float]] = {}
    for rec in records:
        value = ((rec.get("metrics") or {}).get(metric) or {}).get("value") if rec["status"] == "ok" else None
        if value is not None and math.isfinite(value):
            values.setdefault(rec["method"], []).append(value)
    return {method: float(np.mean(v)) for method, v in values.items()}


def save_figure(fig: Any, ax: Any, path: Path) -> Path:
    """Add the legend, lay out, write ``path`` (creating its folder) at the suite's resolution, close the figure."""
    ax.legend(fontsize=8, loc="best")
    return write_figure(fig, path)


def write_figure(fig: Any, path: Path, fit_box: bool = False) -> Path:
    """Lay out and write ``fig`` to ``path`` atomically (creating its folder; the format from its suffix), close it.

    Every label is drawn as plain text (:func:`plain_labels`): names come from records, which may hold anything.

    ``fit_box``: fit the image to the drawing, so that a legend placed outside the axes is kept whole.
    """
    try:
        plain_labels(fig)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fmt = path.suffix.lstrip(".") or "png"
        write_atomically(
            path, lambda tmp: fig.savefig(tmp, dpi=110, format=fmt, bbox_inches="tight" if fit_box else None)
        )
    finally:
        plt.close(fig)
    return path


def plain_text(text: str) -> str:
    """``text`` with every ``$`` escaped, so that matplotlib draws it as it is instead of parsing mathtext."""
    return text.replace("$", r"\$")


def plain_labels(fig: Any) -> None:
    """Make every label of ``fig`` plain text: titles, axis labels, legends and tick labels given as text.

    A name with ``$...$`` in it would otherwise be parsed as mathtext (and, with ``text.usetex``, as TeX), and a bad
    formula fails the whole report. Tick labels of numbers (``10^-3`` on log axes) keep their mathtext.
    """
    for text in fig.findobj(Text):
        text.set_usetex(False)
        text.set_text(plain_text(text.get_text()))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if isinstance(axis.get_major_formatter(), TEXT_FORMATTERS):
                axis.set_major_formatter(PlainFormatter(axis.get_major_formatter()))
            if isinstance(axis.get_minor_formatter(), TEXT_FORMATTERS):
                axis.set_minor_formatter(PlainFormatter(axis.get_minor_formatter()))


class PlainFormatter(Formatter):
    """A tick formatter whose labels are those of ``inner`` as plain text (:func:`plain_text`)."""

    def __init__(self, inner: Formatter) -> None:
        self.inner = inner

    def __call__(self, x: float, pos: int | None = None) -> str:
        return plain_text(str(self.inner(x, pos)))

    def set_locs(self, locs: Any) -> None:
        """Hand the tick locations to the wrapped formatter."""
        self.inner.set_locs(locs)

    def get_offset(self) -> str:
        """The wrapped formatter's offset text, as plain text."""
        return plain_text(self.inner.get_offset())


#: Tick formatters whose labels are given text (``set_xticks(x, labels)``, categories), not numbers.
TEXT_FORMATTERS = (FixedFormatter, FuncFormatter, StrMethodFormatter, StrCategoryFormatter)


def _mean_se(per_model: dict[str, list[float]], models: list[str]) -> tuple[np.ndarray, np.ndarray]:
    mean, se = [], []
    for model in models:
        values = np.asarray(per_model.get(model, [0.0]), dtype=float)
        mean.append(values.mean())
        se.append(values.std(ddof=1) / math.sqrt(len(values)) if len(values) > 1 else 0.0)
    return np.asarray(mean), np.asarray(se)
