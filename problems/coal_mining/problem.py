"""Coal-mining disasters: Green (1995)'s multiple change-point problem for a Poisson process (his sec. 4).

Data (``coal.csv``, R package ``boot``): the dates of the 191 British coal-mining explosions that killed ten or
more men, 1851-1962, as day numbers t = (y - 1851) * 365.25 on Green's interval [0, L], L = 40907 days.

Model (Green 1995, sec. 4): the events are a Poisson process on [0, L] whose rate is a step function with k
change points 0 < s_1 < ... < s_k < L and heights h_0..h_k; log-likelihood sum_j (n_j log h_j - h_j l_j) for
segments j = [s_j, s_{j+1}) of length l_j holding n_j events. Prior: k ~ Poisson(lambda) truncated to k <= k_max;
gap proportions l_j / L ~ Dirichlet(2, ..., 2) (the even-numbered order statistics of 2k + 1 uniforms); heights
iid Gamma(alpha, beta). Green's values for these data: lambda = 3, alpha = 1, beta = 200 (per day), k_max = 30.

Parametrisation (unconstrained, so that generic samplers run): theta = (z_1..z_{k_max}, u_0..u_{k_max}); model k
uses z_1..z_k and u_0..u_k (dim_max = 2 k_max + 1). The change points are a stick-breaking of [0, L]
(:mod:`problems.coal_mining.transform`), nested in k, with its exact log-Jacobian in the log joint. Heights are
h_j = (alpha / beta) e^{u_j}, Jacobian h_j, so that u ~ N(0, 1), where generic samplers start, lies in the
posterior's range. Ground truth (:mod:`problems.coal_mining.exact`): p(k | y) by a forward recursion over a fine
time grid with the heights integrated out, Richardson-extrapolated; draws exact up to that grid.

Details: docs/problems.md, "coal-mining: Green (1995)'s coal-mining disasters change points".
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from problems.coal_mining import exact, transform
from suite.core.model_space import CountSpace
from suite.core.problem import Problem
from suite.core.registry import register_problem
from suite.core.tensor_ops import DeviceCache, host_generator, row_sum
from suite.core.types import Draws, ModelProbs
from suite.data.locate import DataUnavailable, locate, unavailable_reason

DATA_FILE = "coal.csv"
NUM_EVENTS = 191
#: Days in 1851-1962 (Green 1995, sec. 4: the observation interval [0, L] in days).
LENGTH_DAYS = 40907.0
#: Green (1995, sec. 4)'s hyperparameters: k ~ Poisson(3) truncated at 30; heights ~ Gamma(1, 200) per day.
POISSON_MEAN = 3.0
K_MAX = 30
ALPHA = 1.0
BETA = 200.0
#: Equal cells of the coarsest exact grid (event times are added as boundaries; then halved twice).
GRID_CELLS = 200
#: Draws per chunk of the backward sampler (a chunk holds a [distinct next cells, cells] table of CDFs).
DRAW_CHUNK = 4096
#: Mixed into the seed of training draws so that they never share a stream with the scoring draws.
TRAINING_STREAM = 0xC0A1_5EED
#: Exact answers by configuration, shared by instances (three grid recursions take about a second).
_EXACT_CACHE: dict[tuple, exact.Refinement] = {}


def load_coal_days() -> Tensor:
    """The 191 disaster day numbers (1 January 1851 = 1), sorted float64; checks count and integrality."""
    path = locate(DATA_FILE)
    years = np.genfromtxt(path, delimiter=",", skip_header=1, usecols=(1,), dtype=np.float64)
    days = (years - 1851.0) * 365.25
    if years.shape != (NUM_EVENTS,) or not np.isfinite(days).all() or np.abs(days - np.round(days)).max() > 1e-6:
        raise DataUnavailable(f"{path}: expected {NUM_EVENTS} dates that are whole days over 365.25 after 1851")
    days = np.sort(np.round(days))
    if days[0] <= 0 or days[-1] >= LENGTH_DAYS:
        raise DataUnavailable(f"{path}: dates outside 1851-1962")
    return torch.from_numpy(days.copy())


@register_problem("coal-mining")
class CoalMining(Problem):
    """Green (1995) sec. 4: coal-mining disasters as a Poisson process with a step rate, k = 0..30 steps."""

    main_metric: ClassVar[str] = "model_prob_tv"
    #: Not smoke: the conformance tests run every method on smoke problems under a test-time budget.
    #: Not in the default quick run (five classics x eleven methods x three seeds would take it past its 15-minute
    #: budget): `--problems classics` runs them in any profile (docs/problems.md).
    planned_in: ClassVar[tuple[str, ...]] = ("paper",)
    groups: ClassVar[tuple[str, ...]] = ("classics",)
    #: 16 s: generic nested samplers move between change-point configurations slowly (a birth splits only the last
    #: segment), and at 8 s rjmcmc-baseline's TV sat at the 0.05 line (docs/problems.md, "coal-mining").
    time_budgets: ClassVar[dict[str, float]] = {"quick": 16.0}
    num_observations = NUM_EVENTS

    def __init__(
        self, k_max: int = K_MAX, poisson_mean: float = POISSON_MEAN, alpha: float = ALPHA, beta: float = BETA
    ) -> None:
        if not isinstance(k_max, int) or isinstance(k_max, bool) or not 1 <= k_max <= 60:
            raise ValueError(f"k_max must be an int in [1, 60]; got {k_max!r}")
        for label, value in (("poisson_mean", poisson_mean), ("alpha", alpha), ("beta", beta)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{label} must be positive and finite; got {value!r}")
        self.k_max, self.poisson_mean, self.alpha, self.beta = k_max, float(poisson_mean), float(alpha), float(beta)
        self.length = LENGTH_DAYS
        self.model_space = CountSpace(0, k_max, "k")
        self.dim_max = 2 * k_max + 1
        counts = torch.arange(k_max + 1, dtype=torch.float64)
        log_prior = counts * math.log(self.poisson_mean) - torch.lgamma(counts + 1.0)
        self._log_model_prior = log_prior - torch.logsumexp(log_prior, 0)
        #: Heights are measured against the prior mean rate alpha / beta: u = log(h beta / alpha).
        self.log_mean_rate = math.log(self.alpha / self.beta)
        slots = torch.arange(k_max + 1)
        masks = torch.cat([slots[:, None] > slots[None, :-1], slots[:, None] >= slots[None, :]], dim=1)
        # Per model: log p(k) + log (2k+1)! + (k+1) log Gamma density constant in u (alpha log alpha - lgamma
        # alpha), + alpha (k_max - k) to cancel the -alpha e^0 of the zeroed inactive heights.
        height_const = self.alpha * math.log(self.alpha) - math.lgamma(self.alpha)
        const = (
            self._log_model_prior
            + torch.lgamma(2.0 * counts + 2.0)
            + (counts + 1.0) * height_const
            + self.alpha * (k_max - counts)
        )
        closed = torch.where(slots[None, :] > slots[:, None], -math.inf, 0.0)  # gap logits of slots beyond k
        self._reason = unavailable_reason(DATA_FILE)
        self.events = load_coal_days() if self._reason is None else None
        tables = {"masks": masks, "const": const, "closed": closed, "log_model_prior": self._log_model_prior}
        if self.events is not None:
            # before[d] = #events < d for d = 0..L: events fall on whole days, so #events < t is before[ceil(t)].
            days = torch.arange(int(self.length) + 1, dtype=torch.float64)
            tables["before"] = torch.searchsorted(self.events, days).to(torch.float64)
        self._device = DeviceCache(**tables)

    # ------------------------------------------------------------------ contract
    def config(self) -> dict[str, Any]:
        """Hyperparameters (Green's by default) and the data file."""
        return {
            "data": DATA_FILE,
            "k_max": self.k_max,
            "poisson_mean": self.poisson_mean,
            "alpha": self.alpha,
            "beta": self.beta,
        }

    def unavailable_reason(self) -> str | None:
        """Why ``coal.csv`` cannot be used, or None."""
        return self._reason

    def mask(self, model_index: Tensor) -> Tensor:
        """Model k: the first k position logits z and the first k + 1 log heights u."""
        return self._device.get("masks", model_index.device).index_select(0, model_index)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """Poisson(lambda) truncated to 0..k_max (Green 1995, sec. 4)."""
        return self._device.get("log_model_prior", model_index.device).index_select(0, model_index)

    def log_joint(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """log p(k) + log p(z, u | k) (Jacobians included) + sum_j (n_j log h_j - h_j l_j); batched, vectorised.

        In z and u: log (2k+1)! + sum_j log p_j + log |dp/dz| + sum_j (alpha u_j - alpha e^{u_j} + const) + likelihood.
        """
        if self.events is None:
            raise DataUnavailable(self._reason or DATA_FILE)
        k_max, device, dtype = self.k_max, theta.device, theta.dtype
        active = self.mask(model_index)
        clean = torch.where(active, theta, 0.0)  # inactive coordinates (even NaN) drop out
        z, u = clean[:, :k_max], clean[:, k_max:]
        on_z = active[:, :k_max].to(dtype)
        closed = self._device.get("closed", device, dtype).index_select(0, model_index)
        log_gap, log_jacobian = transform.gaps_from_logits(z, on_z, closed)
        gap = torch.exp(log_gap)  # 0 beyond slot k
        # Position prior (2k+1)! prod p_j with the Jacobian (the L^k of s = L cumsum p cancels against the prior's).
        log_prior_z = row_sum(torch.where(active[:, k_max:], log_gap, 0.0)) + log_jacobian
        # Events before each segment's right end (the end of segment k is L up to rounding, past the last event).
        right = torch.cumsum(gap, -1) * self.length
        index = torch.ceil(right).to(torch.int64).clamp_(0, int(self.length))
        before = self._device.get("before", device, dtype)[index]
        n = torch.diff(before, dim=-1, prepend=before.new_zeros(len(before), 1))
        h = torch.exp(u)  # height over the prior mean rate; 1 where inactive (cancelled in const)
        rate_days = math.exp(self.log_mean_rate) * self.length
        log_lik = row_sum(n * u - rate_days * h * gap) + self.log_mean_rate * len(self.events)
        log_prior_u = self.alpha * row_sum(u - h)
        const = self._device.get("const", device, dtype).index_select(0, model_index)
        total = const + log_prior_z + log_prior_u + log_lik
        return torch.nan_to_num(total, nan=-math.inf, posinf=math.inf, neginf=-math.inf)

    # --------------------------------------------------------------- ground truth
    def exact_solution(self) -> exact.Refinement:
        """p(k | y) on three nested grids and its Richardson extrapolation (computed once per configuration)."""
        if self.events is None:
            raise DataUnavailable(self._reason or DATA_FILE)
        key = tuple(sorted(self.config().items()))
        if key not in _EXACT_CACHE:
            _EXACT_CACHE[key] = exact.refined_model_probs(
                self.events, self.length, self.alpha, self.beta, self.k_max, self._log_model_prior, GRID_CELLS
            )
        return _EXACT_CACHE[key]

    def reference_model_probs(self) -> ModelProbs | None:
        """p(k | y), Richardson-extrapolated; ``se`` is the discretisation error estimate (not Monte Carlo)."""
        if self.events is None:
            return None
        solution = self.exact_solution()
        prob = solution.extrapolated.clamp_min(0.0)
        return ModelProbs.from_dense(prob / prob.sum(), solution.error)

    def reference_draws(self, num_draws: int, generator: torch.Generator) -> Draws | None:
        """Draws exact on the finest grid: k, change-point cells backward, uniform within cells, Gamma heights."""
        if self.events is None:
            return None
        gen = host_generator(generator)
        solution = self.exact_solution()
        prob = self.reference_model_probs().prob
        model_index = torch.multinomial(prob, num_draws, replacement=True, generator=gen)
        theta = torch.zeros(num_draws, self.dim_max, dtype=torch.float64)
        for start in range(0, num_draws, DRAW_CHUNK):
            part = slice(start, min(start + DRAW_CHUNK, num_draws))
            theta[part] = self._draw_theta(solution.finest, model_index[part], gen)
        return Draws(model_index, theta)

    def _draw_theta(self, recursion: exact.GridRecursion, count: Tensor, gen: torch.Generator) -> Tensor:
        """theta of draws with ``count`` change points each, given the grid recursion."""
        k_max, num = self.k_max, len(count)
        cells = exact.sample_change_cells(recursion, count, gen)
        on_z = cells >= 0
        low = recursion.boundaries[cells.clamp_min(0)]
        width = recursion.boundaries[cells.clamp_min(0) + 1] - low
        uniform = torch.rand(num, k_max, generator=gen, dtype=torch.float64)
        position = torch.where(on_z, low + uniform * width, self.length)  # L beyond k: empty segments
        edges = torch.cat([torch.zeros(num, 1, dtype=torch.float64), position, torch.full((num, 1), self.length)], 1)
        length = edges[:, 1:] - edges[:, :-1]  # [num, k_max + 1]
        below = torch.searchsorted(self.events, edges[:, 1:].contiguous())
        n = torch.diff(below, dim=-1, prepend=torch.zeros_like(below[:, :1])).to(torch.float64)
        on_u = self.mask(count)[:, k_max:]
        shape = torch.where(on_u, self.alpha + n, 1.0)
        h = torch._standard_gamma(shape, generator=gen) / (self.beta + length)
        z = transform.logits_from_positions(position, on_z, self.length)
        u = torch.where(on_u, torch.log(h) - self.log_mean_rate, 0.0)
        return torch.cat([z, u], dim=1)

    def training_draws(self, num_draws: int, generator: torch.Generator) -> Draws | None:
        """Fresh exact draws from a stream derived from ``generator`` that the scoring draws never use."""
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)) ^ TRAINING_STREAM
        return self.reference_draws(num_draws, torch.Generator().manual_seed(seed))

    def posterior_mean_rate(self, times: Tensor, num_draws: int = 4000, seed: int = 0) -> tuple[Tensor, Tensor]:
        """E[x(t) | y] per day at ``times`` and its Monte Carlo standard error (Rao-Blackwellised over heights).

        From exact-on-the-grid draws of k and the change points; each draw contributes the posterior mean height
        (alpha + n_j) / (beta + l_j) of the segment that holds t.
        """
        draws = self.reference_draws(num_draws, torch.Generator().manual_seed(seed))
        if draws is None:
            raise DataUnavailable(self._reason or DATA_FILE)
        positions = self.change_points(draws.model_index, draws.theta)
        edges = torch.cat([torch.zeros(num_draws, 1, dtype=torch.float64), positions], 1)
        edges = torch.cat([edges, torch.full((num_draws, 1), self.length, dtype=torch.float64)], 1)
        below = torch.searchsorted(self.events, edges[:, 1:].contiguous())
        n = torch.diff(below, dim=-1, prepend=torch.zeros_like(below[:, :1])).to(torch.float64)
        mean_height = (self.alpha + n) / (self.beta + (edges[:, 1:] - edges[:, :-1]))
        segment = torch.searchsorted(
            positions.contiguous(), times.to(torch.float64).expand(num_draws, -1).contiguous(), right=True
        )
        values = mean_height.gather(1, segment)
        return values.mean(0), values.std(0) / math.sqrt(num_draws)

    def change_points(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """Change-point positions in days, float64 [B, k_max], L beyond each row's k."""
        k_max = self.k_max
        active = self.mask(model_index.to(theta.device))
        on_z = active[:, :k_max]
        z = torch.where(on_z, theta[:, :k_max].double(), 0.0)
        closed = self._device.get("closed", theta.device, torch.float64).index_select(0, model_index)
        log_gap, _ = transform.gaps_from_logits(z, on_z.double(), closed)
        return torch.where(on_z, self.length * torch.cumsum(log_gap.exp(), -1)[:, :-1], self.length)
