"""CoSMIC flows: identity on inactive coordinates, exact inverses, normalised factorising densities."""

from __future__ import annotations

import math

import pytest
import torch

from methods.vti.cosmic import CoSMICAffineMAF, CoSMICSplineMAF, partial_reverse_index, strict_left_order
from methods.vti.flows import FlowSpec, build_flow
from tests.methods.flows.nflows_layout import old_layout

FLOWS = ["diag", "affine(2,2)", "spline(2,2)", "sas"]
DIM, CONTEXT = 4, 3


def random_flow(name: str, dim: int = DIM, scale: float = 0.05, seed: int = 0) -> torch.nn.Module:
    """A flow of type ``name`` with every parameter perturbed away from the identity initialisation.

    Perturbed tensor by tensor in nflows' layout (:mod:`tests.methods.flows.nflows_layout`), so that these are the
    flows the tests were tuned on before the MADEs were packed.
    """
    torch.manual_seed(seed)
    flow = build_flow(FlowSpec.parse(name), dim, CONTEXT).double()
    with torch.no_grad():
        for p in old_layout(flow, with_buffers=False):
            p.add_(scale * torch.randn_like(p))
    return flow


def batch(num: int = 64, dim: int = DIM, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random masks (every row has an active coordinate), contexts and base draws."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(num, dim, generator=g) < 0.5
    mask[:, 0] |= ~mask.any(-1)
    context = torch.randn(num, CONTEXT, generator=g, dtype=torch.float64)
    z = torch.randn(num, dim, generator=g, dtype=torch.float64)
    return mask, context, z


@pytest.mark.parametrize("name", FLOWS)
def test_inactive_coordinates_pass_through_unchanged(name: str) -> None:
    flow = random_flow(name)
    mask, context, z = batch()
    with torch.no_grad():
        theta, _ = flow.sample(z, mask, context)
        back, _ = flow.inverse(theta, mask, context)
    assert torch.equal(theta[~mask], z[~mask])
    assert torch.equal(back[~mask], theta[~mask])
    assert not torch.allclose(theta[mask], z[mask])  # the active block is transformed


@pytest.mark.parametrize("name", FLOWS)
def test_inverse_and_log_determinants_cancel(name: str) -> None:
    flow = random_flow(name)
    mask, context, z = batch()
    with torch.no_grad():
        theta, logdet = flow.sample(z, mask, context)
        z_back, logdet_inv = flow.inverse(theta, mask, context)
    torch.testing.assert_close(z_back, z, rtol=0, atol=1e-10)
    torch.testing.assert_close(logdet + logdet_inv, torch.zeros_like(logdet), rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", FLOWS)
def test_log_determinant_matches_autograd_jacobian(name: str) -> None:
    flow = random_flow(name)
    mask, context, z = batch(num=6)
    _, logdet = flow.sample(z, mask, context)
    for row in range(z.shape[0]):
        active = mask[row]

        def active_map(za: torch.Tensor, row: int = row, active: torch.Tensor = active) -> torch.Tensor:
            full = z[row : row + 1].clone()
            full[0, active] = za
            return flow.sample(full, mask[row : row + 1], context[row : row + 1])[0][0, active]

        jac = torch.autograd.functional.jacobian(active_map, z[row, active])
        torch.testing.assert_close(logdet[row].detach(), torch.linalg.slogdet(jac)[1], rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", FLOWS)
def test_density_factorises_over_active_and_inactive_blocks(name: str) -> None:
    """Prop. 2.2: q~(theta_m, u | m) = q(theta_m | m) nu(u), and theta_m does not depend on u."""
    flow = random_flow(name)
    mask, context, z = batch()
    other_u = torch.where(mask, z, 3.0 * torch.randn_like(z))
    with torch.no_grad():
        theta, _ = flow.sample(z, mask, context)
        theta_other, _ = flow.sample(other_u, mask, context)
        assert torch.equal(theta[mask], theta_other[mask])
        z_back, logdet = flow.inverse(theta_other, mask, context)
        saturated = (-0.5 * z_back**2 - 0.5 * math.log(2 * math.pi)).sum(-1) + logdet
        log_nu_u = torch.where(mask, 0.0, -0.5 * other_u**2 - 0.5 * math.log(2 * math.pi)).sum(-1)
        marginal = flow.log_prob(torch.where(mask, theta, 0.0), mask, context)
    torch.testing.assert_close(saturated, marginal + log_nu_u, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", FLOWS)
@pytest.mark.parametrize("active", [[True, False], [False, True], [True, True]])
@pytest.mark.slow
def test_active_block_density_integrates_to_one(name: str, active: list[bool]) -> None:
    """Trapezoid quadrature of q(theta_m | m) over a wide grid, for several contexts (models).

    The grid reaches +-40 for the sinh-arcsinh tails. Spline densities have kinks at
    the knots, where the trapezoid rule is only O(h^2): measured on the 1-D case,
    1e-3 at spacing 0.05 and 5e-6 at 0.005; so 1-D grids use spacing 0.005 and the
    2-D spline case a gentler flow (smaller perturbation) at spacing 0.1 and a 1e-3
    tolerance. Smooth flows at spacing 0.1 err far below 1e-4.
    """
    d = sum(active)
    spline_2d = d == 2 and name.startswith("spline")
    flow = random_flow(name, dim=2, scale=0.05 if spline_2d else 0.2, seed=3)
    half_width, n = (40.0, 16001) if d == 1 else ((20.0, 401) if spline_2d else (40.0, 801))
    grid = torch.linspace(-half_width, half_width, n, dtype=torch.float64)
    points = torch.cartesian_prod(*[grid] * d).reshape(-1, d)
    theta = torch.zeros(points.shape[0], 2, dtype=torch.float64)
    theta[:, torch.tensor(active)] = points
    mask = torch.tensor(active).expand_as(theta)
    for context_seed in range(2):
        context = torch.randn(1, CONTEXT, generator=torch.Generator().manual_seed(context_seed), dtype=torch.float64)
        with torch.no_grad():
            density = flow.log_prob(theta, mask, context.expand(theta.shape[0], -1)).exp()
        values = density.reshape([n] * d)
        for _ in range(d):
            values = torch.trapezoid(values, grid, dim=0)
        assert abs(float(values) - 1.0) < (1e-3 if spline_2d else 1e-4)


def test_autoregressive_layers_are_triangular_in_left_aligned_order() -> None:
    torch.manual_seed(0)
    for layer in (CoSMICAffineMAF(5, CONTEXT, 16, 2), CoSMICSplineMAF(5, CONTEXT, 16, 2)):
        layer = layer.double()
        with torch.no_grad():
            for p in layer.parameters():
                p.add_(0.1 * torch.randn_like(p))
        active = torch.ones(1, 5, dtype=torch.bool)
        context = torch.randn(1, CONTEXT, dtype=torch.float64)
        x = torch.randn(5, dtype=torch.float64)
        jac = torch.autograd.functional.jacobian(
            lambda v, layer=layer, active=active, context=context: layer.sample(v[None], active, context)[0][0], x
        )
        assert torch.count_nonzero(torch.triu(jac, diagonal=1)) == 0
        assert torch.count_nonzero(torch.tril(jac, diagonal=-1)) > 0


def test_permutations() -> None:
    mask = torch.tensor([[False, True, False, True], [True, True, True, False]])
    assert strict_left_order(mask).tolist() == [[1, 3, 0, 2], [0, 1, 2, 3]]
    assert partial_reverse_index(mask.sum(-1), 4).tolist() == [[1, 0, 2, 3], [2, 1, 0, 3]]


@pytest.mark.parametrize("name", FLOWS)
def test_zero_initialised_flow_is_the_identity(name: str) -> None:
    flow = build_flow(FlowSpec.parse(name), DIM, CONTEXT).double()
    mask, context, z = batch()
    with torch.no_grad():
        theta, logdet = flow.sample(z, mask, context)
    # The authors' scale is softplus_{ln 2}(0) + 1e-6 = 1 + 1e-6 per affine layer.
    torch.testing.assert_close(theta, z, rtol=1e-5, atol=1e-5)
    assert float(logdet.abs().max()) < 1e-4


def test_float32_flows_work() -> None:
    flow = build_flow(FlowSpec.parse("affine(2,2)"), DIM, CONTEXT)
    mask, context, z = batch()
    theta, logdet = flow.sample(z.float(), mask, context.float())
    assert theta.dtype == torch.float32 and bool(torch.isfinite(logdet).all())


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("diag", ("diag", 0, 0)),
        ("affine(5,5)", ("affine", 5, 5)),
        ("affine55", ("affine", 5, 5)),
        ("spline(4,6)", ("spline", 4, 6)),
        ("Spline(4, 6)", ("spline", 4, 6)),
        ("sas", ("sas", 1, 2)),
    ],
)
def test_flow_names_parse(name: str, expected: tuple[str, int, int]) -> None:
    spec = FlowSpec.parse(name)
    assert (spec.kind, spec.num_layers, spec.num_blocks) == expected


@pytest.mark.parametrize("name", ["maf", "affine(0,2)", "spline(4)", ""])
def test_unknown_flow_names_list_the_valid_ones(name: str) -> None:
    with pytest.raises(ValueError, match=r"valid: diag, affine\(N,M\), spline\(N,M\), sas\(N,M\)"):
        FlowSpec.parse(name)


@pytest.mark.parametrize(("dim", "width"), [(8, 16), (200, 512), (256, 512), (257, 128), (549, 128)])
def test_default_made_width_is_twice_the_dimension_up_to_256_coordinates_then_128(dim: int, width: int) -> None:
    """ub2(2 d_max) up to 256 coordinates; above, the authors' DAG width 128 (wider diverged on dag-mlp-sachs)."""
    flow = build_flow(FlowSpec.parse("affine(1,1)"), dim, 4)
    (layer,) = [module for module in flow.modules() if hasattr(module, "net")]
    assert layer.net.final_weight.shape[1] == width


@pytest.mark.parametrize("name", [*FLOWS, "sas(3,3)"])
def test_a_model_index_context_is_its_one_hot_code(name: str) -> None:
    """Index contexts give the one-hot code's samples, densities and gradients (1e-12: only the batching of the
    context-only networks differs, one row per distinct model instead of one per draw)."""
    num_models = CONTEXT
    flow = random_flow(name)
    mask, _, z = batch()
    model_index = torch.randint(num_models, (z.shape[0],), generator=torch.Generator().manual_seed(2))
    one_hot = torch.nn.functional.one_hot(model_index, num_models).double()
    outputs = []
    for context in (one_hot, model_index):
        flow.zero_grad()
        theta, log_det = flow.sample(z, mask, context)
        log_q = flow.log_prob(theta.detach(), mask, context)
        (theta.sum() + log_det.sum() + log_q.sum()).backward()
        grads = [p.grad.clone() for p in flow.parameters()]
        outputs.append((theta, log_det, log_q, grads))
    (theta_a, det_a, q_a, grads_a), (theta_b, det_b, q_b, grads_b) = outputs
    for a, b in [(theta_a, theta_b), (det_a, det_b), (q_a, q_b), *zip(grads_a, grads_b, strict=True)]:
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
