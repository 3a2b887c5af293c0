"""The BayesDAG Fig. 2 study: means over data sets x seeds per problem and method, printout, plot, no paper rows."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from suite.report.posterior_tables import (
    PAPER_NOTE,
    format_posterior_compact,
    format_posterior_table,
    plot_posterior,
    posterior_problems,
    posterior_table,
)

FACTS = {
    "version": 1,
    "main_metric": "model_prob_tv",
    "higher_is_better": [],
    "sweep": None,
    "reported_neg_elbo": {},
    "reported_source": "",
    "reported_dag_table": {},
}


def _record(problem: str, method: str, seed: int, data_seed: int, graph_type: str | None = None, **metrics: float):
    config = {"data_seed": data_seed} | ({"graph_type": graph_type} if graph_type else {})
    return {
        "problem": problem,
        "problem_facts": FACTS,
        "problem_config": config,
        "method": method,
        "seed": seed,
        "status": "ok",
        "metrics": {name: {"value": value, "se": None} for name, value in metrics.items()},
    }


def _failed(problem: str, method: str) -> dict:
    return {"problem": problem, "method": method, "seed": 9, "status": "failed", "reason": "boom", "metrics": {}}


def _records() -> list[dict]:
    """Two methods on ER (2 data sets x 2 seeds for bayesdag), one on SF, a DAG problem without MMD, a failure."""
    records = []
    for data_seed in (0, 1):
        for seed in (0, 1):
            mmd = 0.01 * (1 + data_seed + 2 * seed)  # 0.01, 0.03, 0.02, 0.04: mean 0.025
            records.append(
                _record(
                    "linear-dag-bge-er",
                    "bayesdag",
                    seed,
                    data_seed,
                    "er",
                    mmd_hamming=mmd,
                    expected_cpdag_shd=2.0 + seed,
                    model_prob_tv=0.5,
                )
            )
    records.append(_record("linear-dag-bge-er", "order-mcmc", 0, 0, "er", mmd_hamming=0.001, expected_cpdag_shd=1.0))
    records.append(
        _record("linear-dag-bge-sf", "order-mcmc", 0, 3, "sf", mmd_hamming=0.002, expected_cpdag_shd=float("nan"))
    )
    records.append(_failed("linear-dag-bge-er", "bayesdag"))
    records.append(_failed("linear-dag-bge-sf", "dagma"))
    records.append(_record("dag-mlp-sachs", "dagma", 0, 0, edge_f1=0.3, expected_shd=20.0))
    return records


def test_means_over_data_sets_and_seeds_with_counts() -> None:
    records = _records()
    assert posterior_problems(records) == ["linear-dag-bge-er", "linear-dag-bge-sf"]
    table = posterior_table(records).set_index(["problem", "method"])
    row = table.loc[("linear-dag-bge-er", "bayesdag")]
    assert row["label"] == "ER" and row["runs"] == 4 and row["data_sets"] == 2 and row["failed"] == 1
    values = pd.Series([0.01, 0.03, 0.02, 0.04])
    assert math.isclose(row["MMD²"], 0.025) and math.isclose(row["MMD²_se"], values.std() / 2)
    # MMD (the paper's scale) is the mean of the runs' square roots, derived from MMD^2 for records without it
    assert math.isclose(row["MMD"], values.pow(0.5).mean()) and math.isclose(row["MMD_se"], values.pow(0.5).std() / 2)
    assert math.isclose(row["E-CPDAG-SHD"], 2.5) and math.isclose(row["TV"], 0.5)
    # one run: no standard error; TV not recorded: not a number, but not a computed NaN either
    single = table.loc[("linear-dag-bge-er", "order-mcmc")]
    assert single["runs"] == 1 and math.isnan(single["MMD_se"]) and math.isnan(single["TV"])
    # a method whose every run failed is counted, with no runs
    dagma = table.loc[("linear-dag-bge-sf", "dagma")]
    assert dagma["runs"] == 0 and dagma["failed"] == 1
    assert ("linear-dag-bge-sf", "order-mcmc", "E-CPDAG-SHD") in posterior_table(records).attrs["computed_nan"]


def test_printout_fits_the_width_and_says_the_paper_has_no_numbers() -> None:
    table = posterior_table(_records())
    compact = format_posterior_compact(table, width=120)
    assert all(len(line) <= 120 for line in compact)
    text = "\n".join(compact)
    assert "ER MMD" in text and "SF E-CPDAG-SHD" in text and "4 (2)" in text
    assert "0.025 ± 0.0065" in text  # MMD^2; se of 0.01..0.04: 0.0129 / 2
    assert "nan" in text and PAPER_NOTE.split(":")[0] in text.replace("\n", " ")
    assert "bayesdag on ER (1)" in text and "dagma on SF (1)" in text
    # a narrow terminal puts SF below ER rather than cutting it off
    narrow = format_posterior_compact(table, width=70)
    assert all(len(line) <= 70 for line in narrow)
    assert any(line.startswith("method") and "SF MMD" in line for line in narrow)
    assert "ER MMD" in format_posterior_table(table) and "SF TV" in format_posterior_table(table)


def test_labels_fall_back_to_problem_names_and_nothing_without_study_problems(tmp_path: Path) -> None:
    records = [
        _record("linear-dag", "rjmcmc-baseline", 0, 0, mmd_hamming=0.1, expected_cpdag_shd=1.0),
        _record("linear-dag-d4", "rjmcmc-baseline", 0, 0, mmd_hamming=0.2, expected_cpdag_shd=1.0),
    ]
    table = posterior_table(records)
    assert list(table["label"]) == ["linear-dag", "linear-dag-d4"]
    assert posterior_table([_record("dag-mlp-sachs", "dagma", 0, 0, edge_f1=0.3)]).empty
    stale = tmp_path / "posterior_fig2.png"
    stale.write_bytes(b"old")
    assert plot_posterior([_record("sas", "trj", 0, 0, cross_entropy=1.0)], stale) is None and not stale.exists()


def test_plot_is_written(tmp_path: Path) -> None:
    path = plot_posterior(_records(), tmp_path / "posterior_fig2.png")
    assert path is not None and path.is_file() and path.stat().st_size > 1000


@pytest.mark.slow
def test_report_writes_prints_and_embeds_the_study(tmp_path: Path) -> None:
    from suite.report.build import POSTERIOR_CSV, POSTERIOR_PNG, write_report
    from suite.report.terminal import WIDTH

    records = [r for r in _records() if r["status"] == "ok"]
    text = write_report(records, tmp_path)
    shown = text.replace(str(tmp_path), "results/quick")  # the user's folder name, not pytest's temporary path
    assert "format of BayesDAG Fig. 2" in text and all(len(line) <= WIDTH for line in shown.splitlines())
    assert (tmp_path / POSTERIOR_CSV).is_file() and (tmp_path / POSTERIOR_PNG).is_file()
    page = (tmp_path / "index.html").read_text()
    assert 'id="posterior"' in page and f'src="{POSTERIOR_PNG}"' in page
    wide = write_report(records, tmp_path, wide=True)
    assert "0.025 ± 0.0065" in wide and f"plot: {tmp_path / POSTERIOR_PNG}" in wide
