"""Model-probability small multiples: one panel per method against the truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from suite.report.plots import MAX_BARS, PANEL_COLUMNS, plot_model_probs


def record(method: str, ids: list[str], truth: list[float], estimate: list[float], seed: int = 0) -> dict:
    return {
        "problem": "toy",
        "method": method,
        "seed": seed,
        "status": "ok",
        "metrics": {"model_prob_tv": {"value": 0.5 * float(np.abs(np.subtract(truth, estimate)).sum()), "se": None}},
        "model_probs": {"id": ids, "truth": truth, "estimate": estimate},
    }


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_one_panel_per_method_in_rows_of_four(tmp_path: Path) -> None:
    ids, truth = ["a", "b", "c"], [0.5, 0.3, 0.2]
    two = [record("m0", ids, truth, [0.4, 0.4, 0.2]), record("m0", ids, truth, [0.6, 0.2, 0.2], seed=1)]
    two.append(record("m1", ids, truth, [0.5, 0.3, 0.2]))
    four = two + [record(f"m{i}", ids, truth, [0.5, 0.3, 0.2]) for i in range(2, PANEL_COLUMNS)]
    six = four + [record(f"m{i}", ids, truth, [0.2, 0.3, 0.5]) for i in range(PANEL_COLUMNS, 6)]
    (w2, h2), (w4, h4), (w6, h6) = (
        png_size(plot_model_probs("toy", recs, tmp_path / f"{n}.png"))
        for n, recs in (("2", two), ("4", four), ("6", six))
    )
    assert w4 > 1.8 * w2 and abs(h4 - h2) < 0.1 * h2  # four panels side by side
    assert abs(w6 - w4) < 0.1 * w4 and h6 > 1.6 * h4  # a fifth and sixth start a second row


def test_many_models_scatter_with_zero_estimates(tmp_path: Path) -> None:
    n = MAX_BARS * 4
    ids = [f"k{i}" for i in range(n)]
    truth = list(np.full(n, 1.0 / n))
    estimate = [1.0] + [0.0] * (n - 1)  # zeros are drawn at a floor, not lost on the log axes
    path = plot_model_probs("toy", [record("point", ids, truth, estimate)], tmp_path / "many.png")
    assert path is not None and png_size(path)[0] > 200


def test_nothing_to_draw(tmp_path: Path) -> None:
    single = [record("m", ["only"], [1.0], [1.0])]
    (tmp_path / "single.png").write_bytes(b"an earlier report's picture")
    assert plot_model_probs("toy", single, tmp_path / "single.png") is None
    failed = {**record("m", ["a", "b"], [0.5, 0.5], [0.5, 0.5]), "status": "failed"}
    assert plot_model_probs("toy", [failed], tmp_path / "failed.png") is None
    assert not list(tmp_path.iterdir())  # nothing written, and the stale picture removed
