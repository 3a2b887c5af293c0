"""TRJ Figs. 7/9: bridge estimates of the most probable model's probability on block variable selection.

Proposal types: the standard proposal (new coordinates from N(0, 10^2), as the paper's), TRJ through affine maps,
per-model rational-quadratic flows (RQMA-NF) and one conditional flow (CTRJ). The paper makes 80 repetitions of
one estimate each at N = 1,000 to 8,000 draws; this study makes ``REPLICATES`` fits at ``DRAWS``, each on the
training and evaluation draws of its own reference-engine run (``--fresh-draws``: independent replicates, ~3
minutes of SMC each), so that the replicates' spread is that over independent draw sets. The estimates are scored
on block-vs's exact model probabilities (quadrature, :meth:`BlockVS.quadrature_model_probs`);
the stored SMC reference is printed beside them.
"""

from __future__ import annotations

from functools import cache

from suite.core.problem import Problem
from suite.core.types import ModelProbs
from suite.studies.bbe import BBEStudy

PROPOSALS = ("standard", "affine", "rq", "ctrj")


@cache
def exact_model_probs(problem: Problem) -> ModelProbs:
    """block-vs's exact p(m | D) by quadrature (~10 s, once per problem object)."""
    return problem.quadrature_model_probs()  # type: ignore[attr-defined]  (BlockVS's; the study names block-vs)


DRAWS = (4000,)
REPLICATES = 5
FLOW_ITERATIONS = 1000

TRJ_BLOCKVS = BBEStudy(
    name="trj-blockvs",
    description=(
        f"TRJ Figs. 7/9: Bartolucci bridge estimates of the most probable model on block-vs for "
        f"{', '.join(PROPOSALS)}; {REPLICATES} fits at N = {DRAWS[0]:,} draws per set from independent reference "
        f"runs, {FLOW_ITERATIONS:,} flow iterations"
    ),
    problem="block-vs",
    proposals=PROPOSALS,
    draws=DRAWS,
    replicates=REPLICATES,
    repeats=1,
    flow_iterations=FLOW_ITERATIONS,
    model=None,
    paper_source="TRJ paper Figs. 7 and 9 (80 repetitions, N = 1,000 to 8,000)",
    paper_claim="the flow-based proposals (affine, RQMA-NF, CTRJ) estimate far more precisely than the standard one",
    paper_order=(("rq", "standard"), ("ctrj", "standard"), ("affine", "standard"), ("rq", "affine")),
    fresh_draws=True,
    expected_runtime="about 11 minutes",
    # Scored on the exact probabilities (quadrature, ~10 s once); the stored SMC reference is a 2-sigma draw.
    exact_truth=exact_model_probs,
)
