"""Misspecified robust variable selection (VTI, Davies et al. 2025, sec. 5.1 and App. E).

A linear regression y_i = x_i^T (beta * mask) + noise on n = 50 simulated rows with an intercept and
``num_covariates`` covariates; the model is the subset gamma in {0, 1}^num_covariates of covariates included (the
intercept always is), so mask(gamma) = [1, gamma] and there are 2^num_covariates models (128 by default), with a
uniform model prior. Priors: beta_j ~ N(0, prior_scale^2) on every active coefficient (1.5 "focused", 10 "wide").

Likelihood (CODE ≠ PAPER; this follows the authors' code, avti ``RobustVS.log_prob``): with
r_i = y_i - x_i^T (beta * mask), a = 0.1, s1 = 1, s2 = 10 fixed whatever the data-generating noise,

    log p(y | beta, gamma) = sum_i [m_i + log((1-a) e^{u_i - m_i} + a e^{v_i - m_i} + 1e-15)],
    u_i = -r_i^2 / (2 s1^2),  v_i = -r_i^2 / (2 s2^2),  m_i = max(u_i, v_i) = v_i,

i.e. unnormalised Gaussian kernels. The VTI code's saturated target also puts N(0, 1) on inactive coordinates; here
they are ignored. Data (avti ``RobustVS._generate``, see :mod:`problems.robust_vs.data`) come from three
misspecification levels, "none", "mid" and "high"; ``robust-vs`` (registered) is mid, prior 1.5, data seed 1000.

Details: docs/problems.md, "robust-vs in detail (`problems/robust_vs/problem.py`)".
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from problems.robust_vs.data import SETTINGS, generate
from suite.core.backend import TORCH
from suite.core.model_space import BinarySpace
from suite.core.problem import LOG_SQRT_2PI, Problem
from suite.core.registry import register_problem, register_problem_variant
from suite.core.tensor_ops import DeviceCache

#: Likelihood constants of the authors' code (never the data-generating ones).
OUTLIER_WEIGHT = 0.1
LIK_SIGMA1 = 1.0
LIK_SIGMA2 = 10.0
LOG_EPS = 1e-15
#: Per observation the log-likelihood is -C2 r^2 + log((1 - a) exp(-C12 r^2) + a + 1e-15).
C2 = 0.5 / LIK_SIGMA2**2
C12 = 0.5 / LIK_SIGMA1**2 - C2
#: Mixture terms are multiplied in groups of GROUP (a power of two) before their log is taken.
GROUP = 4
#: Spaces up to 2^16 models look masks and per-model constants up in tables.
MAX_TABULATED_BITS = 16
#: The cardinality sweep (number of candidate covariates) the registered instances belong to.
SWEEP_NAME = "robust-vs cardinality (VTI App. E.1, Fig. 4)"


@register_problem("robust-vs")
class RobustVS(Problem):
    """Misspecified robust variable selection of VTI sec. 5.1: 2^7 = 128 covariate subsets, mixture-noise likelihood."""

    #: Compute seconds each method gets in the quick profile (equal-time leaderboard).
    time_budgets: ClassVar[dict[str, float]] = {"quick": 7.0}

    main_metric: ClassVar[str] = "model_prob_tv"
    #: The registered 7-covariate problem is the first point of VTI Fig. 4's cardinality sweep.
    sweep: ClassVar[tuple[str, int] | None] = (SWEEP_NAME, 7)
    #: 128 models: NUTS for the 16 most probable only (the rest use SMC particles), shorter runs.
    reference_settings: ClassVar[dict] = {"nuts": {"num_warmup": 300, "num_samples": 300}, "max_nuts_models": 16}

    def __init__(
        self,
        num_covariates: int = 7,
        misspecification: str = "mid",
        prior_scale: float = 1.5,
        data_seed: int = 1000,
        num_observations: int = 50,
    ) -> None:
        if misspecification not in SETTINGS:
            raise ValueError(f"misspecification must be one of {', '.join(SETTINGS)}; got {misspecification!r}")
        if not isinstance(num_covariates, int) or not 4 <= num_covariates <= 62:
            raise ValueError(
                f"num_covariates must be an int in [4, 62] (int(0.4 * (num_covariates + 1)) >= 2 relevant columns "
                f"and model indices in int64); got {num_covariates!r}"
            )
        if not (isinstance(prior_scale, int | float) and math.isfinite(prior_scale) and prior_scale > 0):
            raise ValueError(f"prior_scale must be positive and finite (1.5 focused, 10 wide); got {prior_scale!r}")
        if not isinstance(data_seed, int):
            raise ValueError(f"data_seed must be an int; got {data_seed!r}")
        if not isinstance(num_observations, int) or num_observations < 1:
            raise ValueError(f"num_observations must be a positive int; got {num_observations!r}")
        self._config = {
            "num_covariates": num_covariates,
            "misspecification": misspecification,
            "prior_scale": float(prior_scale),
            "data_seed": data_seed,
            "num_observations": num_observations,
        }
        self.model_space = BinarySpace(num_covariates)
        self.dim_max = num_covariates + 1
        data = generate(num_observations, self.dim_max, SETTINGS[misspecification], data_seed)
        self.x, self.y, self.relevant, self.outliers = data.x, data.y, data.relevant, data.outliers
        #: Index of the data-generating model (its relevant covariates), for marking it in plots.
        self.true_model_index = sum(1 << (j - 1) for j in self.relevant if j > 0)
        self._prior_scale = float(prior_scale)
        self._log_model_prior = -num_covariates * math.log(2.0)
        self._log_norm = math.log(self._prior_scale) + LOG_SQRT_2PI  # -log N(0; 0, s^2) per active coefficient
        self._tabulated = num_covariates <= MAX_TABULATED_BITS
        self._device = self._constants()

    def _constants(self) -> DeviceCache:
        """Data and tables for the log joint, on the CPU in float64 (DeviceCache copies them per device/dtype)."""
        x, y, n, p = self.x, self.y, self.x.shape[0], self.dim_max
        # Observations are padded with neutral columns (mixture term exactly 1) to a multiple of GROUP, so
        # that the per-observation terms can be multiplied in groups of GROUP before one log per group.
        padded = -(-n // GROUP) * GROUP
        xt_scaled = torch.zeros(p, padded, dtype=torch.float64)
        xt_scaled[:, :n] = x.T * math.sqrt(C12)
        neg_y_scaled = torch.zeros(padded, dtype=torch.float64)
        neg_y_scaled[:n] = -y * math.sqrt(C12)
        log_inlier_weight = torch.full((padded,), -math.inf, dtype=torch.float64)
        log_inlier_weight[:n] = math.log(1.0 - OUTLIER_WEIGHT)
        outlier_weight = torch.ones(padded, dtype=torch.float64)
        outlier_weight[:n] = OUTLIER_WEIGHT + LOG_EPS
        # The Gaussian parts, -C2 |y - X b|^2 - |b|^2 / (2 s^2), as the quadratic form b^T Q b + lin^T b + const.
        quad = -C2 * (x.T @ x) - 0.5 / self._prior_scale**2 * torch.eye(p, dtype=torch.float64)
        self._quad_const = -C2 * float(y @ y)
        shifts = torch.arange(p, dtype=torch.int64)
        tables = {}
        if self._tabulated:
            masks = self._bits(self.model_space.all_indices(), shifts)
            # per model: log p(m) - |active| log(s sqrt(2 pi)) + the constant of the quadratic form
            num_active = masks.sum(-1).to(torch.float64)
            tables = {"masks": masks, "offset": self._log_model_prior + self._quad_const - num_active * self._log_norm}
        return DeviceCache(
            xt_scaled=xt_scaled,
            neg_y_scaled=neg_y_scaled,
            log_inlier_weight=log_inlier_weight,
            outlier_weight=outlier_weight,
            quad=quad,
            lin=2.0 * C2 * (x.T @ y),
            shifts=shifts,
            **tables,
        )

    # ------------------------------------------------------------------ contract
    def config(self) -> dict[str, Any]:
        """Constructor arguments."""
        return dict(self._config)

    def mask(self, model_index: Tensor) -> Tensor:
        """[1, gamma_1, ..., gamma_p]: the intercept and the included covariates."""
        return self._mask(TORCH, model_index)

    def log_model_prior(self, model_index: Tensor) -> Tensor:
        """Uniform over the 2^num_covariates subsets."""
        return torch.full(model_index.shape, self._log_model_prior, dtype=torch.float64, device=model_index.device)

    def log_prior_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """sum over active j of log N(beta_j; 0, prior_scale^2)."""
        active = self._mask(xp, model_index)
        beta = xp.where(active, theta, 0.0)
        num_active = xp.row_sum(xp.cast(active, theta))
        return xp.axpy(xp.row_sum(beta * beta) * (-0.5 / self._prior_scale**2), num_active, -self._log_norm)

    def log_joint_with(self, xp: Any, model_index: Any, theta: Any) -> Any:
        """log p(gamma) + log N(beta_active; 0, s^2 I) + the mixture-kernel log-likelihood of the authors' code.

        Per observation the likelihood term is -C2 r^2 + log((1-a) e^{-C12 r^2} + a + 1e-15); the
        Gaussian parts (-C2 r^2 summed, and the prior's -|beta|^2 / (2 s^2)) form one quadratic in beta.
        """
        active = self._mask(xp, model_index)
        beta = xp.where(active, theta, 0.0)
        if self._tabulated:
            offset = xp.take(xp.constant(self._device, "offset", theta), model_index)
        else:
            num_active = xp.row_sum(xp.cast(active, theta))
            offset = num_active * (-self._log_norm) + (self._log_model_prior + self._quad_const)
        quadratic = beta @ xp.constant(self._device, "quad", theta) + xp.constant(self._device, "lin", theta)
        gaussian = xp.row_sum(quadratic * beta)
        return xp.nan_to_neg_inf(self._log_mixture(xp, beta) + gaussian + offset)

    # ------------------------------------------------------------------ pieces
    def _mask(self, xp: Any, model_index: Any) -> Any:
        """Active coordinates as bools ``[B, dim_max]`` (table lookup for small spaces, else bit arithmetic)."""
        if self._tabulated:
            return xp.take(xp.constant(self._device, "masks", model_index, exact_dtype=False), model_index)
        shifts = xp.constant(self._device, "shifts", model_index, exact_dtype=False)
        return self._bits(model_index, shifts)

    @staticmethod
    def _bits(model_index: Any, shifts: Any) -> Any:
        """Bit j of 2 m + 1: 1 for the intercept (j = 0), gamma_j for covariate j >= 1."""
        return ((2 * model_index + 1)[:, None] >> shifts) & 1 == 1

    def _log_mixture(self, xp: Any, beta: Any) -> Any:
        """sum_i log((1-a) e^{-C12 r_i^2} + a + 1e-15), r = y - X beta: one log per GROUP observations."""
        # s = sqrt(C12) (X beta - y) from one matmul with prescaled data, so that -C12 r^2 = -s^2.
        s = beta @ xp.constant(self._device, "xt_scaled", beta) + xp.constant(self._device, "neg_y_scaled", beta)
        inlier = xp.exp(xp.fma(xp.constant(self._device, "log_inlier_weight", beta), s, s, -1.0))
        terms = inlier + xp.constant(self._device, "outlier_weight", beta)  # each in [0.1, 1]
        for _ in range(GROUP.bit_length() - 1):  # products of GROUP terms stay >= 0.1^GROUP (float32-safe)
            half = terms.shape[1] // 2
            terms = terms[:, :half] * terms[:, half:]
        return xp.row_sum(xp.log(terms))

    # ------------------------------------------------------------ prior sampling
    def sample_prior(self, model_index: Tensor, generator: torch.Generator) -> Tensor:
        """beta_j ~ N(0, prior_scale^2) on the active coordinates, exactly 0 elsewhere (float64)."""
        z = torch.randn(
            len(model_index), self.dim_max, generator=generator, dtype=torch.float64, device=generator.device
        )
        return torch.where(self.mask(model_index.to(generator.device)), z * self._prior_scale, 0.0)


class _RobustVSSweep(RobustVS):
    """robust-vs with more candidate covariates (VTI App. E.1's cardinality sweep), judged against RJMCMC.

    The per-model SMC reference engine cannot visit 2^p models, so the gold
    standard is a long vectorised ``rjmcmc-baseline`` run
    (:mod:`suite.reference.rjmcmc_gold`): model probabilities of the visited
    models with chain-group standard errors, and gold draws from its chains.
    """

    num_covariates: ClassVar[int]
    reference_settings: ClassVar[dict] = {"evidence": "rjmcmc"}
    planned_in: ClassVar[tuple[str, ...]] = ("paper",)


def _register_sweep(num_covariates: int, profiles: tuple[str, ...] = ("paper",)) -> type[RobustVS]:
    """Register ``robust-vs-p<num_covariates>`` (2^num_covariates models)."""
    doc = (
        f"Misspecified robust variable selection with {num_covariates} candidate covariates "
        f"(2^{num_covariates} = {2**num_covariates:,} models), judged against a long RJMCMC run."
    )
    return register_problem_variant(
        f"robust-vs-p{num_covariates}",
        _RobustVSSweep,
        {"num_covariates": num_covariates},
        doc,
        num_covariates=num_covariates,
        planned_in=profiles,
        sweep=(SWEEP_NAME, num_covariates),
    )


#: The sweep's points in the authors' code (avti's cardinality experiment): p = 9, 14, 19, 24 candidate covariates.
AUTHORS_POINTS = (9, 14, 19, 24)
#: Points registered besides: 12, 16, 20 (the suite's first sweep; p = 16 is the smoke profile's, run in CI).
EXTRA_POINTS = (12, 16, 20)


def _sweep_profiles(num_covariates: int) -> tuple[str, ...]:
    """Where ``--problems all`` plans a point: the authors' points in paper, p = 16 in smoke, the rest when named."""
    profiles = ("paper",) if num_covariates in AUTHORS_POINTS else ()
    return ("smoke", *profiles) if num_covariates == 16 else profiles


#: VTI App. E.1's cardinality sweep (|M| from 2^9 to 2^24). ``--problems all`` in the paper profile plans the
#: authors' points, so the sweep's x axis is theirs; p = 16 runs in smoke (CI). Named explicitly, every point runs
#: in any profile (the default quick run leaves them out to stay within its 15-minute budget).
SWEEP = {p: _register_sweep(p, _sweep_profiles(p)) for p in sorted(AUTHORS_POINTS + EXTRA_POINTS)}


class _RobustVSReplicates(RobustVS):
    """robust-vs over VTI Fig. 2's 10 replicate data sets (data seeds 1000..1009), each judged against RJMCMC.

    The authors' gold standard for Fig. 2 is a vectorised RJMCMC run per data set (spec (d)); the suite makes
    one per data seed (:mod:`suite.reference.rjmcmc_gold`, quick size: 1,024 chains, ~30 s each here), which
    ``tdbench study vti-robust-vs`` computes before its runs. Named explicitly only (no profile plans it).
    """

    reference_settings: ClassVar[dict] = {"evidence": "rjmcmc"}
    planned_in: ClassVar[tuple[str, ...]] = ()
    data_sets: ClassVar[dict[str, int]] = {"smoke": 1, "quick": 10, "paper": 10}
    first_data_seed: ClassVar[int] = 1000
    #: The command that makes the references of every data set (``suite.reference`` makes the default's only).
    reference_command: ClassVar[str] = "tdbench study vti-robust-vs"


#: VTI Fig. 2's two halves: mid and high misspecification, 10 data sets each.
FIG2 = {
    level: register_problem_variant(
        f"robust-vs-fig2-{level}",
        _RobustVSReplicates,
        {"misspecification": level},
        f"robust-vs with {level} misspecification over VTI Fig. 2's 10 data sets (seeds 1000..1009), "
        "each judged against its own RJMCMC gold standard.",
    )
    for level in ("mid", "high")
}
