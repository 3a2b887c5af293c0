"""Picture of one gmm-2d result: the model-averaged posterior predictive density over the data, and q(k)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt
import torch
from torch import Tensor

from suite.core.types import Draws
from suite.report.plots import save_figure

if TYPE_CHECKING:
    from problems.gmm_2d.problem import GaussianMixture2D

#: Models with q(k) below this are left out of the model average ([GMM-ref]).
MIN_MODEL_PROB = 1e-4


def model_averaged_density(problem: GaussianMixture2D, q: Tensor, draws: Draws, grid: Tensor) -> Tensor | None:
    """sum_k q(k) p_hat(y* | k) / sum_k q(k) over models with q(k) >= 1e-4 and draws; None if there are none."""
    density = torch.zeros(grid.shape[0], dtype=torch.float64)
    mass = 0.0
    model_index = draws.model_index.cpu()
    for k_index in (q >= MIN_MODEL_PROB).nonzero().flatten().tolist():  # the few supported models only
        chosen = (model_index == k_index).nonzero().flatten()[: problem.plot_draws_per_model]
        if len(chosen) == 0:
            continue
        subset = Draws(model_index[chosen], draws.theta.detach().cpu()[chosen])
        density += float(q[k_index]) * problem.predictive_density(grid, subset)
        mass += float(q[k_index])
    return density / mass if mass > 0 else None


def plot_gmm_result(problem: GaussianMixture2D, q: Tensor, draws: Draws | None, path: Path) -> Path:
    """Left: data, true means and the model-averaged predictive density; right: q(k) with the true k marked."""
    low, high = problem.box_low.tolist(), problem.box_high.tolist()
    n = problem.plot_grid
    xs = torch.linspace(low[0], high[0], n, dtype=torch.float64)
    ys = torch.linspace(low[1], high[1], n, dtype=torch.float64)
    gx, gy = torch.meshgrid(xs, ys, indexing="xy")  # [n(y), n(x)]
    density = None
    if draws is not None and len(draws) > 0:
        density = model_averaged_density(problem, q, draws, torch.stack([gx.flatten(), gy.flatten()], -1))

    fig, (ax_data, ax_k) = plt.subplots(1, 2, figsize=(12.0, 5.2), gridspec_kw={"width_ratios": [1.1, 1.0]})
    if density is not None:
        mesh = ax_data.contourf(xs.numpy(), ys.numpy(), density.reshape(n, n).numpy(), levels=20, cmap="viridis")
        fig.colorbar(mesh, ax=ax_data, label="posterior predictive density")
    y = problem.y.numpy()
    ax_data.scatter(y[:, 0], y[:, 1], s=3, c="white" if density is not None else "grey", alpha=0.5, label="data")
    means = problem.true_means.numpy()
    ax_data.scatter(means[:, 0], means[:, 1], s=30, marker="x", c="red", label="true means")
    ax_data.set_xlim(low[0], high[0])
    ax_data.set_ylim(low[1], high[1])
    ax_data.set_aspect("equal")
    ax_data.legend(fontsize=8, loc="upper right")
    ax_data.set_title("model-averaged predictive density" if density is not None else "data (no draws)")

    ks = torch.arange(1, problem.max_components + 1)
    expected_k = float(q @ ks.to(torch.float64))
    ax_k.bar(ks.numpy(), q.numpy(), width=0.8, color="tab:blue", label="q(k)")
    ax_k.axvline(problem.true_k, color="red", ls="--", lw=1.2, label=f"true k = {problem.true_k}")
    ax_k.axvline(expected_k, color="black", ls=":", lw=1.2, label=f"E_q[k] = {expected_k:.2f}")
    ax_k.set_xlabel("number of components k")
    ax_k.set_ylabel("q(k)")
    ax_k.set_title(f"{problem.name}: posterior over k")
    return save_figure(fig, ax_k, path)
