"""The lynx series as an autoregression: the mean-centred log10 counts, their lags, conditioned on the first values.

Campbell & Walker (1977) and Tong (1977) model log10 of the annual Canadian lynx trappings 1821-1934 (114 values);
the series is centred by its sample mean so that no model needs an intercept. Every order p <= max_order is fitted to
the same responses y_t, t = max_order + 1, ..., 114 (the first max_order values are conditioned on), so the
evidences of all orders are of the same data and comparable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from suite.data.locate import DataUnavailable, locate

DATA_FILE = "lynx.csv"
NUM_YEARS = 114
FIRST_YEAR = 1821
#: Sum of the 114 raw counts, checked on load (R datasets::lynx).
TOTAL_COUNT = 175_334


@dataclass(frozen=True)
class LaggedSeries:
    """Responses ``y`` [n] and lag matrix ``x`` [n, max_order] (column j holds lag j + 1) of the centred series."""

    x: Tensor
    y: Tensor
    series: Tensor  # the whole centred log10 series [114]
    mean: float  # the mean of log10 counts that was removed


def load_lynx() -> np.ndarray:
    """The 114 annual counts (float64), checked for length, years and total."""
    path = locate(DATA_FILE)
    table = np.genfromtxt(path, delimiter=",", skip_header=1, usecols=(1, 2), dtype=np.float64)
    if table.shape != (NUM_YEARS, 2) or not np.isfinite(table).all():
        raise DataUnavailable(f"{path}: expected {NUM_YEARS} rows of time, value; got shape {table.shape}")
    years, counts = table[:, 0], table[:, 1]
    if not (years == FIRST_YEAR + np.arange(NUM_YEARS)).all() or counts.sum() != TOTAL_COUNT:
        raise DataUnavailable(f"{path}: years are not 1821-1934 or the counts sum to {counts.sum()} ({TOTAL_COUNT})")
    return counts


def lagged(counts: np.ndarray, max_order: int) -> LaggedSeries:
    """Centre log10(counts) and build the responses y_t (t > max_order) with their max_order lags."""
    logs = np.log10(counts)
    mean = float(logs.mean())
    series = logs - mean
    n = len(series) - max_order
    x = np.stack([series[max_order - j - 1 : max_order - j - 1 + n] for j in range(max_order)], axis=1)
    return LaggedSeries(
        x=torch.from_numpy(x.copy()),
        y=torch.from_numpy(series[max_order:].copy()),
        series=torch.from_numpy(series),
        mean=mean,
    )
