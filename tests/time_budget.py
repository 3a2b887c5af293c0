"""The test suite's time budget, as a ratio to a calibration step, so that a loaded or slower machine moves both.

The whole default suite (``python -m pytest`` with no paths, ``-k`` or ``-m`` of its own) is timed from
configuration to the end of the session, and divided by the time of a fixed CPU workload (Python and small torch
operations, as the tests are) run before the tests and again after them. A machine twice as slow, or a machine
loaded throughout, doubles both; the faster of the two calibrations is used, so that a moment of load during one
of them cannot excuse a slow suite. The ratio is printed at the end of every full run; under ``CI=true`` a ratio
above :data:`BUDGET_UNITS` fails the run (docs/testing.md, "Keeping it fast"). Timings of single tests stay out of
the unit tests: this is a report on the whole, with the margin stated below.
"""

from __future__ import annotations

import math
import os
import time

import pytest
import torch

#: The budget in calibration units: the full suite's time on the 2-core reference machine when this was set (the
#: slowest of the last three fresh-clone CI runs, 2026-12-04/05: 15,175 units; 10,959 at the latest) plus about a
#: quarter for noise, so that CI fails when the suite grows by about a quarter. Lower it as the suite gets faster
#: (docs/testing.md, "Keeping it fast").
BUDGET_UNITS = 20_000.0
_STATE_KEY = pytest.StashKey[dict]()


def calibration_seconds(repeats: int = 5) -> float:
    """The fastest of ``repeats`` runs of a fixed workload (a Python loop and a chain of small torch operations),
    after one run that warms up torch's first calls."""
    best = math.inf
    generator = torch.Generator().manual_seed(0)
    for attempt in range(repeats + 1):
        start = time.perf_counter()
        x = torch.randn(32, 32, generator=generator, dtype=torch.float64)
        for _ in range(1_500):
            x = torch.tanh(x @ x * 0.05 + 0.1)
        total = 0
        for i in range(400_000):
            total += i % 7
        if attempt:
            best = min(best, time.perf_counter() - start)
    return best


def is_full_default_run(config: pytest.Config) -> bool:
    """True for the README's ``python -m pytest``: the configured test paths, no ``-k`` and the default ``-m``."""
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller keeps the time
        return False
    default_marks = "not benchmark"
    return (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not config.option.keyword
        and config.option.markexpr.strip() == default_marks
        and not getattr(config.option, "lf", False)
        and not config.option.maxfail
    )


def start(config: pytest.Config) -> None:
    """Calibrate and start the clock, on a full default run only."""
    if is_full_default_run(config):
        config.stash[_STATE_KEY] = {"calibration": [calibration_seconds()], "start": time.perf_counter()}


def finish(session: pytest.Session) -> None:
    """Stop the clock, calibrate again, and fail a CI run whose ratio is over budget."""
    state = session.config.stash.get(_STATE_KEY, None)
    if state is None or session.exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return
    state["elapsed"] = time.perf_counter() - state["start"]
    state["calibration"].append(calibration_seconds())
    state["units"] = state["elapsed"] / min(state["calibration"])  # the machine's speed, before or after
    state["over"] = state["units"] > BUDGET_UNITS
    state["enforced"] = os.environ.get("CI") == "true"
    if state["over"] and state["enforced"]:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def summary_line(config: pytest.Config) -> str | None:
    """One line for the terminal summary: the time, the calibration and the ratio against the budget."""
    state = config.stash.get(_STATE_KEY, None)
    if state is None or "units" not in state:
        return None
    calibration = ", ".join(f"{c:.3f}" for c in state["calibration"])
    line = (
        f"test time budget: {state['elapsed']:.0f} s = {state['units']:.0f} calibration units "
        f"(calibration {calibration} s); budget {BUDGET_UNITS:.0f} units"
    )
    if state["over"]:
        verdict = "FAILED: over budget" if state["enforced"] else "over budget (enforced under CI=true)"
        return f"{line}: {verdict}; see docs/testing.md, 'Keeping it fast'"
    return f"{line}: within budget"
