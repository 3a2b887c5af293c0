"""Curves of the main metric along the runs, from synthetic records with traces (no method runs)."""

import numpy as np
import pytest
from matplotlib.colors import to_rgba

from suite.report.curves import draw_curves, median_band, plot_curves, write_curves
from suite.report.plots import METHOD_STYLES, method_styles, plt

BUILT_IN = [
    "ctrj", "dagma", "fr", "fr-vip", "iaf", "mf", "mif",
    "rjmcmc-baseline", "rjmcmc-naive", "trj", "vti-mcg", "vti-surrogate",
]  # fmt: skip


def traced(method: str, seed: int, seconds: list, tv: list, problem: str = "sas") -> dict:
    return {
        "problem": problem,
        "problem_facts": {"main_metric": "model_prob_tv", "higher_is_better": [], "reported_neg_elbo": {},
                          "reported_dag_table": {}},
        "method": method,
        "seed": seed,
        "status": "ok",
        "metrics": {"model_prob_tv": {"value": tv[-1], "se": None}},
        "budget": {"profile": "quick", "num_draws": 100, "time_budget_s": 20.0, "replayed": False},
        "trace": {"seconds": seconds, "iterations": list(range(len(seconds))), "elbo": [None] * len(seconds),
                  "metrics": {"model_prob_tv": tv}},
    }  # fmt: skip


def test_built_in_methods_have_distinct_colours_and_markers() -> None:
    assert sorted(METHOD_STYLES) == BUILT_IN
    colours = [to_rgba(c) for c, _ in METHOD_STYLES.values()]
    assert len(set(colours)) == 12 and len({m for _, m in METHOD_STYLES.values()}) == 12
    others = method_styles([*BUILT_IN, *(f"plugin-{i}" for i in range(40))])
    assert len(set(others.values())) == 52  # no colour+marker pair twice, built-in pairs never reused


def test_median_band_steps_and_never_extrapolates() -> None:
    early = (np.array([1.0, 4.0]), np.array([0.5, 0.1]))  # ended at 4 s
    late = (np.array([2.0, 8.0]), np.array([0.3, 0.2]))
    times, med, lo, hi = median_band([early, late])
    assert times.tolist() == [1.0, 2.0, 4.0, 8.0]
    assert med.tolist() == pytest.approx([0.5, 0.4, 0.2, 0.2])  # at 8 s only the seed that ran that long
    assert lo.tolist() == pytest.approx([0.5, 0.3, 0.1, 0.2]) and hi.tolist() == pytest.approx([0.5, 0.5, 0.3, 0.2])


def test_one_line_per_method_with_its_style_and_png_written(tmp_path) -> None:
    records = [
        traced(method, seed, [0.2, 1.0, 5.0, 20.0], [None, 0.5 / (i + 1), 0.0 if i == 0 else 0.1 / (i + 1), 0.01])
        for i, method in enumerate(BUILT_IN)
        for seed in (0, 1)
    ]
    fig = draw_curves("sas", records)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert sorted(set(lines) - {"budget 20 s"}) == BUILT_IN  # one line per method, and the budget's dashed line
    assert lines["budget 20 s"].get_linestyle() == "--"
    for method in BUILT_IN:
        colour, marker = METHOD_STYLES[method]
        assert to_rgba(lines[method].get_color()) == to_rgba(colour) and lines[method].get_marker() == marker
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert min(ax.get_lines()[0].get_ydata()) > 0 and "a value of 0 is drawn at" in ax.get_ylabel()
    assert "sas" in ax.get_title() and "quick" in ax.get_title()
    plt.close(fig)
    path = plot_curves("sas", records, tmp_path / "c.png")
    assert path is not None and path.stat().st_size > 1000
    assert not list(tmp_path.glob(".*.tmp"))
    old = {**records[0], "problem": "old"}
    del old["trace"]  # a record from before traces: no curve
    written = write_curves([*records, old], tmp_path)
    assert written == {"sas": tmp_path / "curves_sas.png"} and written["sas"].exists()
    assert plot_curves("old", [old], tmp_path / "old.png") is None and not (tmp_path / "old.png").exists()
