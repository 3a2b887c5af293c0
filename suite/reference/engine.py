"""The reference engine: exact answers where a problem has them, otherwise SMC evidences and NUTS draws.

For every model m of an enumerable problem:

1. log Z_m = log p(D, m) by adaptive tempered SMC (BlackJAX), repeated over
   independent runs; the runs' spread gives the Monte Carlo error. SMC
   tempers from the prior when the problem provides one, otherwise from a
   Student-t fitted to preliminary NUTS draws.
2. Optionally (``EngineSettings.evidence`` "bridge" or "both") log Z_m again by
   bridge sampling (:mod:`suite.reference.bridge`) from each model's NUTS
   draws (SMC particles where NUTS fails its R-hat check or is not run) and
   a Gaussian-mixture proposal; "bridge" uses those evidences, "both" uses
   them when every model's bridge diagnostics are OK and SMC's otherwise.
   The provenance records both and which was used. With "quadrature", a problem
   that integrates its models deterministically (:class:`QuadratureEvidence`) gives
   exact log Z_m instead; SMC still gives the gold draws.
3. p(m | D) = Z_m / sum_j Z_j, with standard errors by the delta method.
4. Gold-standard transdimensional draws: the number of draws of each model
   is multinomial(N, p(m | D)); each model's draws come from NumPyro NUTS
   (several chains from dispersed SMC particles, thinned evenly), or from the
   SMC particles when NUTS fails its R-hat check (multimodal posteriors).
"""

from __future__ import annotations

import math
import platform
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from suite.core.problem import Problem
from suite.reference.bridge import (
    BridgeResult,
    BridgeSettings,
    batched_log_joint,
    bridge_log_evidence,
    model_log_density,
)
from suite.reference.jax_target import JaxTarget
from suite.reference.nuts import NUTSSampler, NUTSSettings
from suite.reference.smc import SMCSettings, StudentTInitial, combine_runs, run_smc
from suite.store.references import Reference

#: Largest acceptable split R-hat for NUTS draws to be used as gold draws.
MAX_RHAT = 1.05
#: Evidence estimators: SMC only, bridge sampling only, or both (bridge used when its diagnostics are OK); or the
#: problem's own quadrature (exact up to a stated discretisation error).
EVIDENCE_METHODS = ("smc", "bridge", "both", "quadrature")


@runtime_checkable
class QuadratureEvidence(Protocol):
    """A problem that integrates every model's evidence deterministically (block-vs: tensor-product quadrature)."""

    def quadrature_log_evidences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """log p(D | m) of every model, in model-index order, and a bound on each one's discretisation error."""
        ...


@dataclass(frozen=True)
class EngineSettings:
    """Everything that decides a reference estimate."""

    smc: SMCSettings = field(default_factory=SMCSettings)
    nuts: NUTSSettings = field(default_factory=NUTSSettings)
    num_gold_draws: int = 10_000
    seed: int = 0
    #: NUTS runs only for the most probable models (each run costs seconds and compiled code that JAX
    #: keeps in memory); the other models' gold draws are SMC particles.
    max_nuts_models: int = 32
    #: Which log evidences give the model probabilities: "smc", "bridge" or "both" (see the module docstring).
    evidence: str = "smc"
    bridge: BridgeSettings = field(default_factory=BridgeSettings)

    def __post_init__(self) -> None:
        """Check the evidence method."""
        if self.evidence not in EVIDENCE_METHODS:
            raise ValueError(f"evidence must be one of {EVIDENCE_METHODS}, got {self.evidence!r}")

    def as_dict(self) -> dict[str, Any]:
        """Settings as a JSON-able dict."""
        out = {
            "smc": self.smc.as_dict(),
            "nuts": self.nuts.as_dict(),
            "num_gold_draws": self.num_gold_draws,
            "seed": self.seed,
            "max_nuts_models": self.max_nuts_models,
        }
        if self.evidence == "quadrature":  # no bridge settings: they decide nothing
            out.update(evidence=self.evidence)
        elif self.evidence != "smc":  # settings of SMC-only references stay as they were
            out.update(evidence=self.evidence, bridge=self.bridge.as_dict())
        return out


def versions() -> dict[str, str]:
    """Versions of the software a reference depends on."""
    import blackjax
    import jax
    import numpyro

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "jax": jax.__version__,
        "numpyro": numpyro.__version__,
        "blackjax": blackjax.__version__,
        "numpy": np.__version__,
    }


def model_prob_se(prob: np.ndarray, log_z_se: np.ndarray) -> np.ndarray:
    """Delta-method standard errors of p_m = Z_m / sum Z from independent errors of log Z_m.

    dp_m = p_m (e_m - sum_j p_j e_j), so var p_m = p_m^2 [(1 - p_m)^2 s_m^2 + sum_{j != m} p_j^2 s_j^2].
    """
    weighted = (prob * log_z_se) ** 2
    var = prob**2 * ((1 - prob) ** 2 * log_z_se**2 + weighted.sum() - weighted)
    return np.sqrt(var)


def quadrature_log_z(problem: Problem, models: np.ndarray, log_prior: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log p(D, m) of ``models`` by the problem's quadrature (:class:`QuadratureEvidence`), and its error bound."""
    log_evidence, error = (t.detach().cpu().numpy() for t in problem.quadrature_log_evidences())  # type: ignore[attr-defined]
    return log_evidence[models] + log_prior, error[models]


def _nuts_inits(pool: np.ndarray, chains: int, generator: torch.Generator) -> np.ndarray:
    """Distinct random rows of ``pool`` ``[N, D]`` as chain starting points."""
    pick = torch.randperm(len(pool), generator=generator)[:chains].numpy()
    return pool[pick]


def even_subset(draws: np.ndarray, count: int) -> np.ndarray:
    """``count`` evenly spaced rows of ``draws`` (thinning); all of them when there are fewer."""
    if count >= len(draws):
        return draws
    positions = np.linspace(0, len(draws) - 1, count).round().astype(np.int64)
    return draws[positions]


def order_keeping_copies_together(model_index: np.ndarray, theta: np.ndarray, generator: torch.Generator) -> np.ndarray:
    """A random order of the gold draws in which copies of one draw stand next to each other.

    Gold draws taken from resampled SMC particles repeat (factor analysis k = 2: 6,775 distinct among 8,902).
    The stored draws are split in halves by position (scoring "test" first, learning "train" second); with
    copies kept together, a particle sits in one half only (but for the one group the boundary may cut), so a
    method never learns from the very draws it is scored on. Distinct draws are shuffled as groups.
    """
    rows = np.concatenate([model_index[:, None].astype(np.float64), theta], axis=1)
    _, group = np.unique(rows, axis=0, return_inverse=True)
    group = group.reshape(-1)
    rank = torch.randperm(int(group.max()) + 1, generator=generator).numpy()
    return np.argsort(rank[group], kind="stable")


def estimate_reference(
    problem: Problem, settings: EngineSettings | None = None, log: Any = print, models: np.ndarray | None = None
) -> Reference:
    """Estimate the reference of ``problem`` with SMC and NUTS, even when the problem has an exact answer.

    ``models`` restricts the work to some models (for validation); the model
    probabilities are then over those models only.
    """
    settings = settings or EngineSettings()
    if settings.evidence == "quadrature" and not isinstance(problem, QuadratureEvidence):
        raise ValueError(
            f"{problem.name}: evidence 'quadrature' needs a problem with quadrature_log_evidences(); "
            f"choose one of {EVIDENCE_METHODS[:3]}"
        )
    started, clock = datetime.now(UTC).isoformat(), time.perf_counter()
    target = JaxTarget.of(problem)
    all_models = problem.model_space.all_indices()
    models = all_models.numpy() if models is None else np.asarray(models, dtype=np.int64)
    k = len(models)
    generator = torch.Generator().manual_seed(settings.seed)
    nuts = NUTSSampler(target, settings.nuts)
    chains = settings.nuts.num_chains

    initial, preliminary = None, {}
    if not problem.has_prior:
        log(f"{problem.name}: no prior to temper from; preliminary NUTS on {k} models to fit Student-t starts")
        for i, m in enumerate(models):
            inits = torch.randn(chains, target.dim, generator=generator, dtype=torch.float64).numpy()
            preliminary[int(m)] = nuts.sample(int(m), inits, seed=settings.seed + 7919 * i)
        initial = StudentTInitial.fit(np.stack([preliminary[int(m)].draws.reshape(-1, target.dim) for m in models]))

    log(f"{problem.name}: SMC, {k} models x {settings.smc.num_runs} runs x {settings.smc.num_particles} particles")
    smc = run_smc(target, models, initial, settings.smc, seed=settings.seed)
    if not smc.finished.all():
        raise RuntimeError(f"SMC did not reach the posterior within {settings.smc.max_steps} steps for some models")
    log_z, log_z_se = combine_runs(smc.log_z)
    log_prior = problem.log_model_prior(torch.as_tensor(models)).numpy()
    log_z_smc, log_z_se_smc = log_z, log_z_se
    if settings.evidence == "quadrature":
        log_z, log_z_se = quadrature_log_z(problem, models, log_prior)
        log(f"{problem.name}: model probabilities from quadrature evidences (error bound {log_z_se.max():.1e})")
    prob = np.exp(log_z - log_z.max())
    prob /= prob.sum()
    prob_se = model_prob_se(prob, log_z_se)

    use_bridge = settings.evidence in ("bridge", "both")
    picks = torch.multinomial(torch.as_tensor(prob), settings.num_gold_draws, replacement=True, generator=generator)
    counts = torch.bincount(picks, minlength=k)
    pools = smc.resampled(generator)
    per_model: dict[str, Any] = {}
    masks = problem.mask(torch.as_tensor(models)).numpy()
    rank = np.empty(k, dtype=np.int64)
    rank[np.argsort(-prob, kind="stable")] = np.arange(k)
    # Per model: a pool of posterior draws [N, D] (None when no gold draws are needed), and for the bridge the
    # same draws as chains [C, S, D] with a cap on their effective number (resampled SMC particles repeat).
    model_pools: list[np.ndarray | None] = []
    chain_draws: list[tuple[np.ndarray, float | None]] = []
    for i, m in enumerate(models):
        count = int(counts[i])
        diag: dict[str, Any] = {
            "log_z_runs": smc.log_z[i].tolist(),
            "smc_steps": smc.num_steps[i].tolist(),
            "smc_acceptance": smc.acceptance[i].tolist(),
        }
        wanted = max(count, settings.bridge.min_draws) if use_bridge else count
        outputs = []
        if wanted == 0:
            pool = None
        elif rank[i] >= settings.max_nuts_models:
            pool, diag["draws_from"] = pools[i], f"smc (NUTS only for the {settings.max_nuts_models} most probable)"
        else:
            rounds = math.ceil(wanted / (chains * settings.nuts.num_samples))
            outputs = [
                nuts.sample(int(m), _nuts_inits(pools[i], chains, generator), seed=settings.seed + 104_729 * i + r)
                for r in range(rounds)
            ]
            rhat = max(o.max_rhat for o in outputs)
            diag.update(
                nuts_rhat=rhat,
                nuts_ess=sum(o.min_ess for o in outputs),
                nuts_divergences=sum(o.divergences for o in outputs),
            )
            if rhat <= MAX_RHAT:
                pool, diag["draws_from"] = np.concatenate([o.draws.reshape(-1, target.dim) for o in outputs]), "nuts"
            else:
                pool, diag["draws_from"] = pools[i], "smc (NUTS R-hat too large)"
                log(
                    f"  model {problem.model_space.identifier(int(m))}: NUTS R-hat {rhat:.3f} > {MAX_RHAT}; "
                    "gold draws from SMC particles"
                )
        if use_bridge:
            if diag.get("draws_from") == "nuts":
                chain_draws.append((np.concatenate([o.draws for o in outputs])[..., masks[i]], None))
            else:
                # SMC runs as chains; their particles' effective number is at most the sum of the runs' Kish ESS.
                runs = smc.particles.shape[1]
                weights = smc.weights[i]
                kish = float(((weights.sum(1) ** 2) / (weights**2).sum(1)).sum())
                chain_draws.append((pools[i].reshape(runs, -1, target.dim)[..., masks[i]], kish / 2))
        model_pools.append(pool)
        per_model[problem.model_space.identifier(int(m))] = diag

    evidence_used = "quadrature" if settings.evidence == "quadrature" else "smc"
    if use_bridge:
        log(f"{problem.name}: bridge sampling, {k} models, {settings.bridge.num_components} mixture components")
        batched = batched_log_joint(target)
        results: list[BridgeResult] = []
        for i, m in enumerate(models):
            draws, max_ess = chain_draws[i]
            result = bridge_log_evidence(
                model_log_density(target, int(m), batched), draws, settings.bridge, settings.seed + 7 * i, max_ess
            )
            results.append(result)
            ident = problem.model_space.identifier(int(m))
            per_model[ident]["bridge"] = {"log_z": result.log_z, "log_z_se": result.log_z_se, **result.diagnostics}
            log(
                f"  model {ident}: log p(D, m) bridge {result.log_z:.4f} ± {result.log_z_se:.4f}, "
                f"SMC {log_z_smc[i]:.4f} ± {log_z_se_smc[i]:.4f}"
            )
        log_z_bridge = np.array([r.log_z for r in results])
        log_z_se_bridge = np.array([r.log_z_se for r in results])
        all_ok = all(r.ok(settings.bridge.max_log_z_se) for r in results)
        if settings.evidence == "bridge" or all_ok:
            evidence_used = "bridge"
            log_z, log_z_se = log_z_bridge, log_z_se_bridge
            if not all_ok:
                log(
                    f"  warning: bridge diagnostics not OK for some models (se > {settings.bridge.max_log_z_se} "
                    "or not converged); using bridge evidences anyway (evidence='bridge')"
                )
        else:
            log("  bridge diagnostics not OK for some models; model probabilities from SMC")
        prob = np.exp(log_z - log_z.max())
        prob /= prob.sum()
        prob_se = model_prob_se(prob, log_z_se)
        picks = torch.multinomial(torch.as_tensor(prob), settings.num_gold_draws, replacement=True, generator=generator)
        counts = torch.bincount(picks, minlength=k)

    gold_index, gold_theta = [], []
    for i, m in enumerate(models):
        count, pool = int(counts[i]), model_pools[i]
        per_model[problem.model_space.identifier(int(m))]["gold_draws"] = count
        if count == 0:
            continue
        if pool is None:  # only when the bridge changed the probabilities: a model SMC gave no gold draws
            pool = pools[i]
            per_model[problem.model_space.identifier(int(m))]["draws_from"] = "smc"
        chosen = even_subset(pool, count) if count <= len(pool) else pool[np.resize(np.arange(len(pool)), count)]
        gold_index.append(np.full(count, m, dtype=np.int64))
        gold_theta.append(np.where(masks[i], chosen, 0.0))
    gold_index_arr, gold_theta_arr = np.concatenate(gold_index), np.concatenate(gold_theta)
    order = order_keeping_copies_together(gold_index_arr, gold_theta_arr, generator)
    gold_index_arr, gold_theta_arr = gold_index_arr[order], gold_theta_arr[order]

    worst = max((d.get("nuts_rhat", 1.0) for d in per_model.values() if d.get("draws_from") == "nuts"), default=1.0)
    method = "smc-evidence+nuts-draws" if initial is None else "nuts+t-tempered-smc-evidence"
    if evidence_used == "bridge":
        method = "bridge-evidence+nuts-draws" if initial is None else "nuts+t-tempered-smc+bridge-evidence"
    if evidence_used == "quadrature":
        method = "quadrature-evidence+smc-draws" if settings.max_nuts_models == 0 else "quadrature-evidence+nuts-draws"
    provenance = {
        "method": method,
        "smc_initial": "prior" if initial is None else "student-t fitted to NUTS draws",
        "settings": settings.as_dict(),
        "versions": versions(),
        "started_at": started,
        "seconds": round(time.perf_counter() - clock, 1),
        "models": [int(m) for m in models],
        "max_log_evidence_se": float(log_z_se.max()),
        "max_prob_se": float(prob_se.max()),
        "max_nuts_rhat_used": float(worst),
        "per_model": per_model,
    }
    if use_bridge:
        provenance.update(
            evidence=settings.evidence,
            evidence_used=evidence_used,
            log_z_smc=log_z_smc.tolist(),
            log_z_se_smc=log_z_se_smc.tolist(),
            log_z_bridge=log_z_bridge.tolist(),
            log_z_se_bridge=log_z_se_bridge.tolist(),
        )
    if evidence_used == "quadrature":
        provenance.update(
            evidence="quadrature",
            evidence_used="quadrature",
            log_z_smc=log_z_smc.tolist(),
            log_z_se_smc=log_z_se_smc.tolist(),
        )
    if preliminary:
        provenance["preliminary_nuts_rhat"] = {int(m): o.max_rhat for m, o in preliminary.items()}
    return Reference(
        problem=problem.name,
        config=problem.config(),
        log_evidence=log_z - log_prior,
        log_evidence_se=log_z_se,
        log_model_prior=log_prior,
        prob=prob,
        prob_se=prob_se,
        gold_model_index=gold_index_arr,
        gold_theta=gold_theta_arr,
        provenance=provenance,
    )
