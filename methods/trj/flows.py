"""Learned transports for TRJ (TRJ paper sec. 3 and App. B): rational-quadratic spline flows fitted to draws.

Both classes map target to reference N(0, I) by T = h^{-1} o F o h o s:
s standardises, h is the elementwise sigmoid (h^{-1} = logit), and F is three
[reverse permutation, masked rational-quadratic autoregressive transform] layers
on [0, 1]: the layer of nflows' ``MaskedPiecewiseRationalQuadraticAutoregressiveTransform``
(10 bins, no tails, nflows' MADE with two residual blocks, hidden width 32 n capped
at 256), with the spline evaluated by :func:`methods.flows.splines.rq_spline`, which
gives nflows' values with fewer passes over the bin tables (the spline, not the MADE,
dominates training time for small hidden widths). The MADE, spline, sandwich and
affine pieces come from the shared flow library :mod:`methods.flows`.

* :class:`SplineTransport` (TRJ): one flow per model of an enumerable space, on the
  model's active coordinates; inactive coordinates pass through.
* :class:`ConditionalSplineTransport` (CTRJ, App. B.1): one flow over the saturated
  space conditioned on the model's context, acting on all coordinates; inactive
  ones are auxiliary N(0, 1) variables.

The forward direction (target -> reference) is one conditioner pass per layer;
the inverse is sequential over coordinates, as for any autoregressive flow.
F starts as the identity (zeroed final MADE layer, spline derivatives 1), so an
untrained transport is the standardisation s.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from methods.common.moments import safe_cholesky
from methods.flows.affine import CholeskyAffine
from methods.flows.made import MADEConditioner
from methods.flows.sandwich import log_sigmoid_derivative, logit, sigmoid_sandwich
from methods.flows.splines import DERIVATIVE_AT_IDENTITY, rq_spline
from methods.trj.transports import AffineTransport, active_log_prob
from suite.core.problem import Problem, std_normal_log_prob
from suite.core.tensor_ops import host_generator, row_sum

NUM_LAYERS = 3
NUM_BINS = 10
NUM_BLOCKS = 2
HIDDEN_PER_FEATURE = 32
MAX_HIDDEN = 256
SD_FLOOR = 1e-10


#: ``fit`` keywords of the TRJ code's factor-analysis flows (RationalQuadraticFlowFAV): minibatch 32, no
#: doubling, learning-rate factor 0.995 for the first 200 steps, up to 3000 iterations with early stopping.
FACTOR_ANALYSIS_FIT = {"iterations": 3000, "batch_size": 32, "double_batch_every": None, "lr_factor_early": 0.995}

#: ``stop(part, parts)`` is called after each training step of the ``part``-th of ``parts`` flows being fitted
#: (0-based; the conditional flow is part 0 of 1) and ends that flow's training when it returns True (the
#: ``trj``/``ctrj`` methods use it to count steps and to end fitting at a time budget's milestones).
StopFn = Callable[[int, int], bool]


# --------------------------------------------------------------------------- the spline stack
def _unit_interval(x: Tensor) -> Tensor:
    # A spline output can leave [0, 1] by a rounding error; the next spline's bin search assumes [0, 1].
    return x.clamp(0.0, 1.0)


class _SplineLayer(MADEConditioner):
    """Masked RQ autoregressive layer on [0, 1]^n: y_i = RQS(x_i; MADE(x_<i, context)_i), identity-initialised.

    The layer of nflows' ``MaskedPiecewiseRationalQuadraticAutoregressiveTransform`` (tails None, residual
    MADE) with the leaner :func:`~methods.flows.splines.rq_spline`. With a context, the conditioner's
    zero-initialised shortcut from the context lets every coordinate's spline depend on the model.
    """

    def __init__(self, features: int, hidden: int, context_dim: int | None) -> None:
        super().__init__(features, hidden, context_dim, NUM_BLOCKS, 3 * NUM_BINS + 1)
        with torch.no_grad():
            self.net.final_bias.view(features, self.multiplier)[:, 2 * NUM_BINS :] = DERIVATIVE_AT_IDENTITY

    def forward(self, x: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """One conditioner pass: y and log |det dy/dx| ``[B]``."""
        y, log_d = rq_spline(x, self.conditioner(x, context))
        return _unit_interval(y), row_sum(log_d)

    def inverse(self, y: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Coordinate by coordinate: after pass i the first i coordinates of x are exact."""
        x = torch.zeros_like(y)
        log_d = torch.zeros_like(y)
        for _ in range(self.features):
            x, log_d = rq_spline(y, self.conditioner(x, context), inverse=True)
            x = _unit_interval(x)
        return x, row_sum(log_d)


class SplineStack(nn.Module):
    """F: three [reverse permutation, masked RQ autoregressive spline] layers on [0, 1]^n, identity-initialised.

    A last reversal after an odd number of layers puts the coordinates back in
    their slots (a volume-preserving permutation), so the untrained stack is the
    identity and z_i stays associated with theta_i.
    """

    def __init__(
        self, features: int, context_dim: int | None = None, max_hidden: int = MAX_HIDDEN, num_layers: int = NUM_LAYERS
    ) -> None:
        super().__init__()
        hidden = min(HIDDEN_PER_FEATURE * features, max_hidden)
        self.layers = nn.ModuleList(_SplineLayer(features, hidden, context_dim) for _ in range(num_layers))

    def forward(self, u: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Target side -> reference side on [0, 1]^n, and the log-determinant ``[B]``."""
        log_det = u.new_zeros(u.shape[0])
        for layer in self.layers:
            u, ld = layer(u.flip(-1), context)
            log_det = log_det + ld
        return (u.flip(-1) if len(self.layers) % 2 else u), log_det

    def inverse(self, v: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Reference side -> target side (sequential over coordinates), and the log-determinant ``[B]``."""
        log_det = v.new_zeros(v.shape[0])
        v = v.flip(-1) if len(self.layers) % 2 else v
        for layer in reversed(self.layers):
            v, ld = layer.inverse(v, context)
            v = v.flip(-1)
            log_det = log_det + ld
        return v, log_det


def _sandwich_forward(stack: SplineStack, x: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """z = logit(F(sigmoid(x))) and log |det dz/dx| ``[B]``."""
    return sigmoid_sandwich(x, lambda u: stack(u, context))


def _sandwich_inverse(stack: SplineStack, z: Tensor, context: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """x = logit(F^{-1}(sigmoid(z))) and log |det dx/dz| ``[B]``."""
    return sigmoid_sandwich(z, lambda v: stack.inverse(v, context))


# --------------------------------------------------------------------------- training
@dataclass
class FitSettings:
    """Optimiser, schedule and early-stopping settings shared by both flows (TRJ code's RationalQuadraticFlow2)."""

    iterations: int = 1000
    learning_rate: float = 3e-3
    batch_size: int = 128
    validation_fraction: float = 0.1
    double_batch_every: int | None = 250  # None: fixed batch size
    lr_factor_early: float = 0.992
    lr_factor_late: float = 0.9971
    lr_switch: int = 200
    evaluate_every: int = 10  # validation NLL of the whole held-out set, no gradient
    check_every: int = 100  # compare the mean of the last window of validation NLLs with the previous window's


@dataclass
class FitRecord:
    """Diagnostics of one fit: what was fitted, iterations run, final NLLs (nats per draw) and wall time."""

    model: int | None  # None for the conditional flow
    kind: str  # "flow" or "affine"
    num_train: int
    num_validation: int
    iterations: int
    train_nll: float
    validation_nll: float
    seconds: float  # wall clock
    cpu_seconds: float = math.nan  # this process's CPU time (all threads)


def _maximise_likelihood(
    module: nn.Module,
    batch_nll: Callable[[Tensor], Tensor],
    validation_nll: Callable[[], Tensor] | None,
    sample_rows: Callable[[int], Tensor],
    settings: FitSettings,
    progress: bool = False,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Adam on ``batch_nll(rows)`` with the TRJ schedule and early stopping; leaves the best state in ``module``.

    ``stop()``, called after each step, ends the training early when it returns True. Returns the number of
    iterations run.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    try:  # the fused kernel saves about a quarter of a small-batch iteration on CPU
        optimiser = torch.optim.Adam(params, lr=settings.learning_rate, fused=True)
    except (RuntimeError, TypeError):
        optimiser = torch.optim.Adam(params, lr=settings.learning_rate)

    def factor(step: int) -> float:
        return settings.lr_factor_early if step < settings.lr_switch else settings.lr_factor_late

    scheduler = torch.optim.lr_scheduler.MultiplicativeLR(optimiser, lr_lambda=factor)
    history: list[float] = []
    best_loss, best_state = math.inf, None
    previous_window = math.inf
    done = 0
    bar = _progress_bar(settings.iterations, progress)
    for step in range(settings.iterations):
        if validation_nll is not None and step % settings.evaluate_every == 0:
            with torch.no_grad():
                loss = float(validation_nll())
            history.append(loss)
            if loss < best_loss:
                best_loss, best_state = loss, copy.deepcopy(module.state_dict())
            if step > 0 and step % settings.check_every == 0:
                recent = history[-(settings.check_every // settings.evaluate_every) :]
                window = sum(recent) / len(recent)
                if not window < previous_window:
                    break
                previous_window = window
        doublings = 0 if settings.double_batch_every is None else step // settings.double_batch_every
        batch = settings.batch_size * 2**doublings
        loss = batch_nll(sample_rows(batch))
        optimiser.zero_grad(set_to_none=True)
        if torch.isfinite(loss):
            loss.backward()
            optimiser.step()
        scheduler.step()
        done = step + 1
        if bar is not None:
            bar.update(1)
            bar.set_postfix(nll=float(loss))
        if stop is not None and stop():
            break
    if bar is not None:
        bar.close()
    if validation_nll is not None:
        with torch.no_grad():
            if float(validation_nll()) > best_loss and best_state is not None:
                module.load_state_dict(best_state)
    return done


def _progress_bar(total: int, enabled: bool) -> object | None:
    if not enabled:
        return None
    return tqdm(total=total, leave=False)


def _split(num: int, fraction: float, generator: torch.Generator, device: torch.device) -> tuple[Tensor, Tensor]:
    """Random training and validation row indices."""
    order = torch.randperm(num, generator=generator).to(device)
    num_val = round(fraction * num) if fraction > 0 else 0
    return order[num_val:], order[:num_val]


def _seed_from(generator: torch.Generator) -> int:
    return int(torch.randint(0, 2**62, (1,), generator=generator))


def _freeze(module: nn.Module) -> nn.Module:
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


# --------------------------------------------------------------------------- per-model maps
class _FlowBlock(nn.Module):
    """T_k on a model's active block: z = logit(F(sigmoid((x - mean) / sd)))."""

    def __init__(self, mean: Tensor, sd: Tensor, max_hidden: int, num_layers: int = NUM_LAYERS) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("sd", sd)
        self.register_buffer("log_sd_sum", torch.log(sd).sum())
        self.stack = SplineStack(mean.shape[0], max_hidden=max_hidden, num_layers=num_layers)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Target -> reference on the block ``[N, n_k]``."""
        z, log_det = _sandwich_forward(self.stack, (x - self.mean) / self.sd)
        return z, log_det - self.log_sd_sum

    def inverse(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """Reference -> target on the block."""
        x, log_det = _sandwich_inverse(self.stack, z)
        return x * self.sd + self.mean, log_det + self.log_sd_sum


#: Fallback T_k: z = L^{-1} (x - mean) with the draws' mean and Cholesky factor (AffineTransport on a block).
_AffineBlock = CholeskyAffine


def _affine_block(x: Tensor) -> _AffineBlock:
    mean = x.mean(0)
    centred = x - mean
    cov = centred.T @ centred / x.shape[0]
    return _AffineBlock(mean, safe_cholesky(cov.unsqueeze(0))[0])


def _fit_flow_block(
    x: Tensor,
    settings: FitSettings,
    generator: torch.Generator,
    max_hidden: int,
    progress: bool,
    num_layers: int,
    stop: Callable[[], bool] | None = None,
) -> tuple[_FlowBlock, int, Tensor, Tensor, float, float]:
    """Maximum likelihood fit of one model's flow.

    Returns the frozen block, iterations run, the training and validation rows,
    and their final NLLs (nats per draw).
    """
    mean = x.mean(0)
    sd = x.std(0, correction=0).clamp_min(SD_FLOOR)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_seed_from(generator))
        block = _FlowBlock(mean, sd, max_hidden, num_layers).to(dtype=x.dtype, device=x.device)
    train, val = _split(x.shape[0], settings.validation_fraction, generator, x.device)
    # s and h are fixed: map the draws to [0, 1] once and train F on them.
    x_std = (x - mean) / sd
    u = torch.sigmoid(x_std)
    fixed = row_sum(log_sigmoid_derivative(x_std)) - block.log_sd_sum

    def nll(rows: Tensor) -> Tensor:
        v, log_det = block.stack(u[rows])
        z, log_dlogit = logit(v)
        return -(row_sum(std_normal_log_prob(z) + log_dlogit) + log_det + fixed[rows]).mean()

    def sample_rows(n: int) -> Tensor:
        return train[torch.randint(0, train.numel(), (n,), generator=generator).to(x.device)]

    iterations = _maximise_likelihood(
        block, nll, (lambda: nll(val)) if val.numel() else None, sample_rows, settings, progress, stop
    )
    _freeze(block)
    with torch.no_grad():
        train_nll = float(nll(train))
        val_nll = float(nll(val)) if val.numel() else math.nan
    return block, iterations, train, val, train_nll, val_nll


def _affine_nll(block: _AffineBlock, x: Tensor) -> float:
    with torch.no_grad():
        z, log_det = block(x)
        return float(-(row_sum(std_normal_log_prob(z)) + log_det).mean())


# --------------------------------------------------------------------------- TRJ: a flow per model
class SplineTransport:
    """Per-model RQ spline flows T_k on the active coordinates (the TRJ paper's "RQ NF"); inactive ones pass through.

    Models with fewer than ``min_draws`` draws get the affine transport (mean and
    Cholesky factor of their draws) instead; ``records`` (one per model) says
    which, with the fit's iterations, NLLs and time.
    """

    def __init__(self, blocks: list[nn.Module], masks: Tensor, records: list[FitRecord]) -> None:
        self.blocks, self.masks, self.records = blocks, masks, records
        self.active = [m.nonzero().flatten() for m in masks]
        self._cache: dict[tuple[torch.dtype, torch.device], list[nn.Module]] = {}

    @classmethod
    def fit(
        cls,
        problem: Problem,
        model_index: Tensor,
        theta: Tensor,
        *,
        iterations: int = 1000,
        learning_rate: float = 3e-3,
        batch_size: int = 128,
        validation_fraction: float = 0.1,
        double_batch_every: int | None = 250,
        lr_factor_early: float = 0.992,
        min_draws: int | None = None,
        max_hidden: int = MAX_HIDDEN,
        num_layers: int = NUM_LAYERS,
        generator: torch.Generator | None = None,
        progress: bool = False,
        stop: StopFn | None = None,
    ) -> SplineTransport:
        """Fit each model's flow by maximum likelihood on its draws (one optimisation per model).

        ``min_draws`` defaults to max(50, 10 n_k) per model; below it a model gets
        the affine transport, and below n_k + 2 draws the affine transport of
        moments shrunk towards the pooled ones (``AffineTransport.fit(shrink=True)``).
        ``stop`` (see :data:`StopFn`) sees the flow-fitted models as parts 0 to n - 1, in model order.
        """
        num_models = problem.model_space.num_models
        if num_models is None:
            raise ValueError("per-model spline transports need an enumerable model space")
        generator = torch.Generator().manual_seed(0) if generator is None else host_generator(generator)
        settings = FitSettings(
            iterations, learning_rate, batch_size, validation_fraction, double_batch_every, lr_factor_early
        )
        masks = problem.mask(problem.model_space.all_indices(theta.device))
        dims = masks.sum(-1).tolist()
        draws = torch.bincount(model_index, minlength=num_models).tolist()
        theta = theta.detach()
        # Models with very few (or no) draws get moments shrunk towards the pooled ones.
        shrunk = AffineTransport.fit(problem, model_index, theta, shrink=True)
        blocks: list[nn.Module] = []
        records: list[FitRecord] = []
        needs = [max(50, 10 * dims[k]) if min_draws is None else min_draws for k in range(num_models)]
        flow_models = [k for k in range(num_models) if dims[k] > 0 and draws[k] >= max(dims[k] + 2, needs[k])]
        for k in range(num_models):
            start, cpu_start = time.perf_counter(), time.process_time()
            x = theta[model_index == k][:, masks[k]]
            need = needs[k]
            if draws[k] < dims[k] + 2 or dims[k] == 0:
                chol = shrunk.chol[k][masks[k]][:, masks[k]]
                block = _AffineBlock(shrunk.mean[k][masks[k]], chol).to(dtype=x.dtype, device=x.device)
                record = FitRecord(k, "affine (shrunk to pooled moments)", x.shape[0], 0, 0, math.nan, math.nan, 0.0)
            elif draws[k] < need:
                block = _affine_block(x)
                nll = _affine_nll(block, x)
                record = FitRecord(k, "affine", x.shape[0], 0, 0, nll, math.nan, 0.0)
            else:
                part = flow_models.index(k)
                block, its, train, val, train_nll, val_nll = _fit_flow_block(
                    x,
                    settings,
                    generator,
                    max_hidden,
                    progress,
                    num_layers,
                    None if stop is None else lambda part=part: stop(part, len(flow_models)),
                )
                record = FitRecord(k, "flow", train.numel(), val.numel(), its, train_nll, val_nll, 0.0)
            record.seconds, record.cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
            blocks.append(block)
            records.append(record)
        return cls(blocks, masks, records)

    def _blocks_for(self, dtype: torch.dtype, device: torch.device) -> list[nn.Module]:
        """The blocks in the inputs' dtype and on their device (converted copies are cached)."""
        first = next(iter(self.blocks[0].buffers()))
        if first.dtype == dtype and first.device == device:
            return self.blocks
        key = (dtype, device)
        if key not in self._cache:
            self._cache[key] = [copy.deepcopy(b).to(dtype=dtype, device=device) for b in self.blocks]
        return self._cache[key]

    def _apply(self, model_index: Tensor, x: Tensor, inverse: bool) -> tuple[Tensor, Tensor]:
        """Each model's map on its rows' active block; other coordinates are copied."""
        blocks = self._blocks_for(x.dtype, x.device)
        out = x.clone()
        log_det = x.new_zeros(x.shape[0])
        order = torch.argsort(model_index, stable=True)
        counts = torch.bincount(model_index, minlength=len(blocks)).tolist()
        start = 0
        for k, count in enumerate(counts):
            if count == 0:
                continue
            rows_k, start = order[start : start + count], start + count
            cols = self.active[k].to(x.device)
            if cols.numel() == 0:
                continue
            block_in = x.index_select(0, rows_k).index_select(1, cols)
            block_out, ld = blocks[k].inverse(block_in) if inverse else blocks[k](block_in)
            out.index_put_((rows_k.unsqueeze(-1), cols), block_out)
            log_det.index_copy_(0, rows_k, ld)
        return out, log_det

    def to_reference(self, model_index: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
        """z = T_m(theta) on each row's active coordinates and log |det dz/dtheta| ``[B]``."""
        return self._apply(model_index, theta, inverse=False)

    def from_reference(self, model_index: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """theta = T_m^{-1}(z) on each row's active coordinates and log |det dtheta/dz| ``[B]``."""
        return self._apply(model_index, z, inverse=True)

    def log_prob(self, model_index: Tensor, theta: Tensor) -> Tensor:
        """The fitted density log q_m(theta_m) of each row's active coordinates, ``[B]``."""
        z, log_det = self.to_reference(model_index, theta)
        return active_log_prob(z, log_det, self.masks.to(theta.device).index_select(0, model_index))


# --------------------------------------------------------------------------- CTRJ: one conditional flow
class _ConditionalFlow(nn.Module):
    """The parameters of T~(. | k): pooled standardisation and the conditional spline stack."""

    def __init__(
        self, mean: Tensor, sd: Tensor, dim: int, context_dim: int, max_hidden: int, num_layers: int = NUM_LAYERS
    ) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("sd", sd)
        self.register_buffer("log_sd", torch.log(sd))
        self.stack = SplineStack(dim, context_dim=context_dim, max_hidden=max_hidden, num_layers=num_layers)

    def standardise(self, xi: Tensor, active: Tensor) -> tuple[Tensor, Tensor]:
        """s(xi | k): standardised active coordinates, auxiliaries unchanged; and its log-determinant ``[B]``."""
        x = torch.where(active, (xi - self.mean) / self.sd, xi)
        return x, -row_sum(torch.where(active, self.log_sd, 0.0))


class ConditionalSplineTransport:
    """Conditional RQ spline flow T~(xi | k) on the saturated space (TRJ App. B.1, CTRJ).

    Active coordinates are standardised with pooled means and sds (over the rows
    where they are active, each model weighted equally); inactive coordinates
    are auxiliary variables u ~ N(0, 1), already on the reference scale. Both
    directions act on all ``dim_max`` coordinates and condition on
    ``problem.context(k)``. The flow models the saturated vector: the density of
    the active coordinates alone would need the auxiliaries integrated out, so
    only :meth:`log_prob_saturated` is offered.
    """

    def __init__(self, problem: Problem, flow: _ConditionalFlow, record: FitRecord | None = None) -> None:
        self.problem, self.flow, self.record = problem, flow, record
        self._cache: dict[tuple[torch.dtype, torch.device], _ConditionalFlow] = {}

    @classmethod
    def fit(
        cls,
        problem: Problem,
        model_index: Tensor,
        theta: Tensor,
        *,
        iterations: int = 1000,
        learning_rate: float = 3e-3,
        batch_size: int = 128,
        validation_fraction: float = 0.1,
        double_batch_every: int | None = 250,
        lr_factor_early: float = 0.992,
        max_hidden: int = MAX_HIDDEN,
        num_layers: int = NUM_LAYERS,
        generator: torch.Generator | None = None,
        progress: bool = False,
        stop: StopFn | None = None,
    ) -> ConditionalSplineTransport:
        """Maximum likelihood on saturated draws with fresh N(0, 1) auxiliaries and equal total weight per model.

        ``stop`` (see :data:`StopFn`) sees the one flow as part 0 of 1.
        """
        start, cpu_start = time.perf_counter(), time.process_time()
        generator = torch.Generator().manual_seed(0) if generator is None else host_generator(generator)
        settings = FitSettings(
            iterations, learning_rate, batch_size, validation_fraction, double_batch_every, lr_factor_early
        )
        theta = theta.detach()
        active = problem.mask(model_index)
        _, group, counts = torch.unique(model_index, return_inverse=True, return_counts=True)
        weight = 1.0 / counts.to(theta.dtype)[group]
        mean, sd = _pooled_moments(theta, active, weight)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_seed_from(generator))
            flow = _ConditionalFlow(mean, sd, problem.dim_max, problem.context_dim, max_hidden, num_layers)
            flow = flow.to(dtype=theta.dtype, device=theta.device)
        context = problem.context(model_index, theta.dtype).to(theta.device)
        x_std, fixed_log_det = flow.standardise(torch.where(active, theta, 0.0), active)
        train, val = _split(theta.shape[0], settings.validation_fraction, generator, theta.device)

        def fresh(n: int) -> Tensor:
            return torch.randn(n, theta.shape[-1], generator=generator, dtype=theta.dtype).to(theta.device)

        def nll(rows: Tensor, aux: Tensor, w: Tensor | None = None) -> Tensor:
            x = torch.where(active[rows], x_std[rows], aux)
            z, log_det = _sandwich_forward(flow.stack, x, context[rows])
            log_q = row_sum(std_normal_log_prob(z)) + log_det + fixed_log_det[rows]
            return -log_q.mean() if w is None else -(w * log_q).sum()

        train_weight = weight[train].cpu()
        val_aux, val_weight = fresh(val.numel()), weight[val] / weight[val].sum()

        def sample_rows(n: int) -> Tensor:
            return train[torch.multinomial(train_weight, n, replacement=True, generator=generator).to(theta.device)]

        iterations_run = _maximise_likelihood(
            flow.stack,
            lambda rows: nll(rows, fresh(rows.numel())),
            (lambda: nll(val, val_aux, val_weight)) if val.numel() else None,
            sample_rows,
            settings,
            progress,
            None if stop is None else lambda: stop(0, 1),
        )
        _freeze(flow)
        with torch.no_grad():
            w_train = weight[train] / weight[train].sum()
            train_nll = float(nll(train, fresh(train.numel()), w_train))
            val_nll = float(nll(val, val_aux, val_weight)) if val.numel() else math.nan
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        record = FitRecord(
            None, "flow", train.numel(), val.numel(), iterations_run, train_nll, val_nll, seconds, cpu_seconds
        )
        return cls(problem, flow, record)

    def _flow_for(self, like: Tensor) -> _ConditionalFlow:
        """The flow in ``like``'s dtype and on its device (converted copies are cached)."""
        if self.flow.mean.dtype == like.dtype and self.flow.mean.device == like.device:
            return self.flow
        key = (like.dtype, like.device)
        if key not in self._cache:
            self._cache[key] = copy.deepcopy(self.flow).to(dtype=like.dtype, device=like.device)
        return self._cache[key]

    def to_reference(self, model_index: Tensor, xi: Tensor) -> tuple[Tensor, Tensor]:
        """z = T~(xi | k) on all coordinates and log |det dz/dxi| ``[B]``."""
        flow = self._flow_for(xi)
        x, log_det_s = flow.standardise(xi, self.problem.mask(model_index))
        z, log_det = _sandwich_forward(flow.stack, x, self.problem.context(model_index, xi.dtype).to(xi.device))
        return z, log_det + log_det_s

    def from_reference(self, model_index: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """xi = T~^{-1}(z | k) on all coordinates and log |det dxi/dz| ``[B]``."""
        flow = self._flow_for(z)
        active = self.problem.mask(model_index)
        x, log_det = _sandwich_inverse(flow.stack, z, self.problem.context(model_index, z.dtype).to(z.device))
        xi = torch.where(active, x * flow.sd + flow.mean, x)
        return xi, log_det + row_sum(torch.where(active, flow.log_sd, 0.0))

    def log_prob_saturated(self, model_index: Tensor, xi: Tensor) -> Tensor:
        """log q~(xi | k) = sum over all coordinates of log N(z_i; 0, 1) + log |det dz/dxi|, ``[B]``."""
        z, log_det = self.to_reference(model_index, xi)
        return row_sum(std_normal_log_prob(z)) + log_det


def _pooled_moments(theta: Tensor, active: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    """Weighted mean and sd of each coordinate over the rows where it is active (0 and 1 where never active)."""
    tiny = torch.finfo(theta.dtype).tiny
    w = torch.where(active, weight.unsqueeze(-1), 0.0)
    total = w.sum(0)
    mean = (w * torch.where(active, theta, 0.0)).sum(0) / total.clamp_min(tiny)
    centred = torch.where(active, theta - mean, 0.0)
    var = (w * centred * centred).sum(0) / total.clamp_min(tiny)
    seen = total > 0
    return torch.where(seen, mean, 0.0), torch.where(seen, var.sqrt().clamp_min(SD_FLOOR), 1.0)
