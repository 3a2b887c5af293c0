"""The US crime data of Ehrlich (1973) (R package MASS, ``UScrime``), transformed as Raftery, Madigan & Hoeting (1997).

47 US states in 1960: the crime rate y and 15 covariates. Following Vandaele (1978) and Raftery, Madigan & Hoeting
(1997, their crime example), every variable except the binary indicator So (a southern state) is log-transformed,
the response included; Liang et al. (2008, sec. 6) use the same transformation. The covariates are then centred
(the g-prior of :mod:`problems.us_crime.posterior` is stated for a centred design, Liang et al. 2008, sec. 2.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from suite.data.locate import DataUnavailable, locate

DATA_FILE = "UScrime.csv"
NUM_STATES = 47
#: The covariates in the file's (and the model bits') order; bit j of a model index is COVARIATES[j].
COVARIATES = ("M", "So", "Ed", "Po1", "Po2", "LF", "M.F", "Pop", "NW", "U1", "U2", "GDP", "Ineq", "Prob", "Time")
#: The one covariate left on its own scale (a 0/1 indicator).
UNLOGGED = ("So",)
SUM_Y = 42_539.0  # checked on load


@dataclass(frozen=True)
class CrimeData:
    """Centred covariates ``x`` [47, 15] (logged except So), response ``y`` [47] = log crime rate."""

    x: Tensor
    y: Tensor


def load_uscrime() -> CrimeData:
    """Read UScrime.csv, check it, log-transform all but So, centre the covariates (float64)."""
    path = locate(DATA_FILE)
    with open(path) as handle:
        header = [name.strip('"') for name in handle.readline().strip().split(",")]
    if header != ["rownames", *COVARIATES, "y"]:
        raise DataUnavailable(f"{path}: unexpected columns {header}")
    table = np.genfromtxt(path, delimiter=",", skip_header=1, dtype=np.float64)[:, 1:]
    if table.shape != (NUM_STATES, len(COVARIATES) + 1) or not np.isfinite(table).all():
        raise DataUnavailable(f"{path}: expected {NUM_STATES} finite rows of 16 values; got shape {table.shape}")
    logged = np.array([name not in UNLOGGED for name in COVARIATES] + [True])
    if (table[:, logged] <= 0).any() or table[:, -1].sum() != SUM_Y:
        raise DataUnavailable(f"{path}: a logged column is not positive or sum(y) = {table[:, -1].sum()} ({SUM_Y})")
    transformed = np.where(logged, np.log(np.where(logged, table, 1.0)), table)
    x = transformed[:, :-1] - transformed[:, :-1].mean(axis=0)
    return CrimeData(x=torch.from_numpy(x.copy()), y=torch.from_numpy(transformed[:, -1].copy()))
