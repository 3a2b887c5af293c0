"""The data sets of Richardson & Green (1997), read without evaluating any code.

mixAK ships each as an R source file ``Name <- c(v1, v2, ...)``; :func:`parse_r_vector` accepts only that form
(a name, ``<-``, ``c(``, comma-separated decimal numbers, ``)``) and refuses anything else, so a file is data,
never code. MASS's ``galaxies.csv`` holds the same 82 velocities in km/s (divided by 1000 here), but its sorted
entry 78 reads 26690 where Richardson & Green's values (mixAK's ``Galaxy.R``) have 26.960: the default is RG's.
"""

from __future__ import annotations

import re

import numpy as np
import torch
from torch import Tensor

from suite.data.locate import DataUnavailable, locate

#: Data choices: name -> (file, number of values, (sorted position, value) checked on load).
DATA_SETS = {
    "rg": ("Galaxy.R", 82, (77, 26.960)),
    "mass": ("galaxies.csv", 82, (77, 26.690)),
    "enzyme": ("Enzyme.R", 245, None),
    "acidity": ("Acidity.R", 155, None),
}
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_VECTOR = re.compile(rf"^\s*([A-Za-z][A-Za-z0-9_.]*)\s*<-\s*c\(\s*({_NUMBER}(?:\s*,\s*{_NUMBER})*)\s*\)\s*$")


def parse_r_vector(text: str) -> tuple[str, np.ndarray]:
    """The name and float64 values of an R assignment ``name <- c(numbers)``; ValueError for anything else."""
    match = _VECTOR.match(text)
    if match is None:
        raise ValueError("expected exactly one R assignment 'name <- c(number, number, ...)'")
    return match.group(1), np.array([float(v) for v in match.group(2).split(",")], dtype=np.float64)


def parse_mass_csv(text: str) -> np.ndarray:
    """MASS's ``galaxies.csv`` (header ``rownames,dat``; km/s) as float64 values in 1000 km/s."""
    lines = [line.strip() for line in text.strip().splitlines()]
    if not lines or lines[0].replace('"', "") != "rownames,dat":
        raise ValueError("expected the header 'rownames,dat'")
    return np.array([float(line.split(",")[1]) for line in lines[1:]], dtype=np.float64) / 1000.0


def load(data: str) -> Tensor:
    """The values of data set ``data`` (a key of :data:`DATA_SETS`), float64 ``[N]`` in file order.

    Raises DataUnavailable when the file is missing or does not hold the expected values.
    """
    file, count, known = DATA_SETS[data]
    path = locate(file)
    text = path.read_text()
    try:
        values = parse_mass_csv(text) if file.endswith(".csv") else parse_r_vector(text)[1]
    except ValueError as exc:
        raise DataUnavailable(f"{path}: {exc}") from exc
    if values.shape != (count,) or not np.isfinite(values).all():
        raise DataUnavailable(f"{path}: expected {count} finite values, got shape {values.shape}")
    if known is not None and abs(np.sort(values)[known[0]] - known[1]) > 1e-9:
        raise DataUnavailable(f"{path}: sorted value {known[0] + 1} is not {known[1]}")
    return torch.from_numpy(values)
