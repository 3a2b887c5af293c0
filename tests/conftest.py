"""Shared fixtures: device choice, seeding, and small problems with known answers."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
from torch import Tensor

from suite.core.model_space import BinarySpace
from suite.core.problem import LOG_SQRT_2PI, Problem
from suite.core.tensor_ops import rows
from suite.core.types import Draws, ModelProbs
from tests import time_budget
from tests.fake_time import fake_time  # noqa: F401 (the fake clock fixture, for every test)

# No test reads the user's settings: every TDBENCH_* variable (data folder, mirror, cache, references) is cleared
# before any test runs (the suite reads them only when called), so a run gives the same answers whatever the shell
# exported; a test that needs one sets it with monkeypatch. The tests never download a data set (docs/data.md): a
# problem whose file is nowhere is unavailable and its tests skip. Subprocesses inherit this;
# tests/suite/core/test_data.py turns downloads on against a local server.
for _name in [name for name in os.environ if name.startswith("TDBENCH_")]:
    del os.environ[_name]
os.environ["TDBENCH_OFFLINE"] = "1"

# JAX's persistent compilation cache, shared by the xdist workers and the subprocesses (which inherit these
# variables): the reference engine compiles identical NUTS and SMC programs again and again (per chain, per model,
# per test), and a hit replaces a compile. It lives in .pytest_cache/jax-compilation (ignored by git; a fresh clone
# starts cold, and deleting the folder starts cold again). A size limit turns on JAX's file lock, so that two
# processes never read a half-written entry. Cached executables are the ones JAX compiles, so no result changes
# (docs/testing.md, "Where the time goes").
_JAX_CACHE = {
    "jax_compilation_cache_dir": str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "jax-compilation"),
    "jax_persistent_cache_min_compile_time_secs": 0.0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
    "jax_compilation_cache_max_size": 1 << 30,
}
for _name, _value in _JAX_CACHE.items():
    os.environ.setdefault(_name.upper(), str(_value))
# XLA's CPU back end at optimisation level 1 instead of 2 for the tests (and their subprocesses): their JAX
# programs are small, so a cold cache spends more on compiling than on running them. On the JAX-heavy tests (the
# reference engine, the BBE study's real runs, DiBS) a cold run took 107 s instead of 141 s and a warm one 61 s
# instead of 56 s (docs/testing.md). Level 0 compiles as fast but runs slower (85 s warm). Only the tests' XLA
# flags change: every JAX result is checked against a Monte Carlo tolerance, and runs outside the tests keep XLA's
# defaults.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=1")

# Under pytest-xdist each worker process gets one torch (and BLAS) thread: two workers on two cores, not four
# threads fighting over them. Subprocesses inherit OMP_NUM_THREADS.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--device", default="cpu", help="device for tests that take one (cpu or cuda)")
    parser.addoption(
        "--write-screenshot",
        default=None,
        metavar="FOLDER",
        help="a results folder holding index.html: check its page in Chromium and write docs/report.png from it",
    )


def pytest_configure(config: pytest.Config) -> None:
    time_budget.start(config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    time_budget.finish(session)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    line = time_budget.summary_line(config)
    if line:
        terminalreporter.write_sep("-", line)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/benchmarks" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.benchmark)
        group = shared_setup_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    # A -m of the user's own (-m "not slow") replaces the configured -m 'not benchmark': benchmarks still run only
    # when the expression names them.
    if "benchmark" not in (config.option.markexpr or ""):
        benchmarks = [item for item in items if item.get_closest_marker("benchmark")]
        if benchmarks:
            config.hook.pytest_deselected(items=benchmarks)
            items[:] = [item for item in items if not item.get_closest_marker("benchmark")]


#: Problems whose exact answers take seconds to enumerate and are cached per process (2^20 conjugate evidences:
#: 12-15 s; the two share one configuration): the tests parametrised with them run on one worker.
ENUMERATED_ONCE_PER_PROCESS = ("conjugate-vs-p20", "conjugate-vs-fig4-p20")
ENUMERATED_GROUP = "exact-conjugate-vs-p20"


def shared_setup_group(item: pytest.Item) -> str | None:
    """The pytest-xdist group of a test that uses a module- or session-scoped fixture of the tests, else None.

    Under ``--dist loadgroup`` a group runs on one worker, so an expensive shared setup (a smoke grid, a trained
    flow, an installed plug-in) is made once, not once per worker. A session fixture names the group (its users
    may sit in several modules); a module fixture groups its module. Tests parametrised with a problem whose exact
    answers are enumerated once per process share a group too. Other tests go to whichever worker is free.
    """
    if any(f"[{name}]" in item.nodeid for name in ENUMERATED_ONCE_PER_PROCESS):
        return ENUMERATED_GROUP
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    module_group = None
    for name in info.names_closure:
        for definition in info.name2fixturedefs.get(name, ()):
            if not definition.baseid.startswith("tests"):
                continue  # pytest's and plug-ins' own fixtures (tmp_path_factory, ...)
            if definition.scope == "session":
                return f"session-{name}"
            if definition.scope == "module":
                module_group = f"module-{item.module.__name__}"
    return module_group


@pytest.fixture
def device(request: pytest.FixtureRequest) -> torch.device:
    name = request.config.getoption("--device")
    if name == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA not available")
    return torch.device(name)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


class GaussianModels(Problem):
    """Test problem: model bits select active coordinates; pi(m, theta) = w_m N(theta_A; mu_m, diag(sd_m^2)).

    The four models (bits 00, 10, 01, 11) have exactly known probabilities
    ``WEIGHTS``; model 00 has no parameters. A shared coordinate has a
    different mean and scale in each model, as in real nested models.
    """

    name = "test-gaussians"
    WEIGHTS = (0.1, 0.2, 0.3, 0.4)

    def __init__(self) -> None:
        self.model_space = BinarySpace(2)
        self.dim_max = 2
        self.mu = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, -1.0], [-1.5, 3.0]], dtype=torch.float64)
        self.sd = torch.tensor([[1.0, 1.0], [0.5, 1.0], [1.0, 2.0], [0.3, 0.7]], dtype=torch.float64)
        self.log_w = torch.tensor(self.WEIGHTS, dtype=torch.float64).log()

    def mask(self, model_index: Tensor) -> Tensor:
        return self.model_space.bits(model_index)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        return torch.full(model_index.shape, -math.log(4.0), dtype=torch.float64, device=model_index.device)

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        mu = rows(self.mu.to(theta), model_index)
        sd = rows(self.sd.to(theta), model_index)
        active = self.mask(model_index)
        x = torch.where(active, theta, mu)
        per = -0.5 * ((x - mu) / sd) ** 2 - sd.log() - LOG_SQRT_2PI
        return rows(self.log_w.to(theta), model_index) + torch.where(active, per, 0.0).sum(-1)

    def reference_model_probs(self) -> ModelProbs:
        return ModelProbs.from_dense(torch.tensor(self.WEIGHTS, dtype=torch.float64))

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws:
        m = torch.multinomial(
            torch.tensor(self.WEIGHTS, dtype=torch.float64), num_draws, replacement=True, generator=generator
        )
        eps = torch.randn(num_draws, 2, generator=generator, dtype=torch.float64)
        theta = torch.where(self.mask(m), self.mu[m] + self.sd[m] * eps, 0.0)
        return Draws(m, theta)


@pytest.fixture
def gaussian_models() -> GaussianModels:
    return GaussianModels()
