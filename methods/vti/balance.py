"""Per-model weights of the flow's loss: each model's ELBO samples divided by their running spread.

With every model in the batch, the flow's clipped, Adam-normalised step is dominated by the models whose
per-sample ELBOs spread over hundreds of nats (on ``gmm-2d``, k = 1 and 2 at -6,900 and -3,900 nats): the
shared flow then learns the other models slowly, and the model sampler commits to the first model whose flow
happens to fit (docs/methods.md, "VTI's model distribution on exact truths"). Dividing each sample's loss by
its model's running ELBO standard deviation (at least ``floor``) puts every model's gradient on one scale.
A model's own flow parameters have the same optimum under any positive weight; only the trade-off in shared
parameters changes. On in the smoke and quick profiles; ``balance_models=False`` (paper) is the authors' loop.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class ModelLossBalance:
    """Running mean and mean squared deviation of each model's per-sample ELBO, and the loss weights they give."""

    def __init__(self, num_models: int, device: torch.device, decay: float = 0.9, floor: float = 1.0) -> None:
        if not 0 <= decay < 1 or floor <= 0:
            raise ValueError("need 0 <= decay < 1 and floor > 0")
        self.decay, self.floor = decay, floor
        self.mean = torch.zeros(num_models, dtype=torch.float64, device=device)
        self.mean_square_deviation = torch.zeros(num_models, dtype=torch.float64, device=device)
        self.seen = torch.zeros(num_models, dtype=torch.bool, device=device)

    @torch.no_grad()
    def weights(self, model_index: Tensor, ell: Tensor) -> Tensor:
        """Update the statistics with the finite entries of the batch; weights 1 / max(sd_m, floor), mean 1."""
        finite = torch.isfinite(ell)
        self._observe(model_index[finite], ell[finite].to(torch.float64))
        scale = self.mean_square_deviation[model_index].sqrt().clamp_min(self.floor)
        weight = torch.where(finite, 1.0 / scale, 0.0)
        total = weight.sum()
        return (weight * (finite.sum() / total) if total > 0 else weight).to(ell.dtype)

    def _observe(self, model_index: Tensor, ell: Tensor) -> None:
        """Exponential averages over the batches in which a model appears (its first batch starts them).

        Only the batch's distinct models are read and written, so a step costs O(batch) even where the
        statistics span millions of models (``robust-vs-p24``).
        """
        if model_index.numel() == 0:
            return
        models, position = torch.unique(model_index, return_inverse=True)
        counts = torch.bincount(position, minlength=models.numel()).to(torch.float64)
        mean, msd, seen = self.mean[models], self.mean_square_deviation[models], self.seen[models]
        batch_mean = torch.zeros_like(mean).index_add_(0, position, ell) / counts
        # Deviations from the running mean before this batch (from the batch's own mean where the model is new).
        centre = torch.where(seen, mean, batch_mean)
        squared = (ell - centre[position]).square()
        batch_msd = torch.zeros_like(mean).index_add_(0, position, squared) / counts
        gain = torch.where(seen, 1.0 - self.decay**counts, 1.0)
        self.mean[models] = mean + gain * (batch_mean - mean)
        self.mean_square_deviation[models] = msd + gain * (batch_msd - msd)
        self.seen[models] = True

    def state_dict(self) -> dict[str, Any]:
        """The statistics, for resuming (copies: the running ones are updated in place)."""
        return {
            "mean": self.mean.clone(),
            "mean_square_deviation": self.mean_square_deviation.clone(),
            "seen": self.seen.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.mean, self.mean_square_deviation, self.seen = (
            state["mean"].clone(),
            state["mean_square_deviation"].clone(),
            state["seen"].clone(),
        )
