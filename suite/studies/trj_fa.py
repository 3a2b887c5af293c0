"""TRJ Fig. 5: bridge estimates of P(k = 2 | {2, 3}) on the exchange-rate factor analysis, per proposal type.

Proposal types as in TRJ sec. 5.2: the standard (Brooks et al. 2003) proposal, Lopes & West's independence
proposal, and TRJ through affine maps, per-model rational-quadratic flows (RQMA-NF) and one conditional flow
(CTRJ). The paper makes 10 training/evaluation pairs x 100 estimates with N = 2,000 and 16,000 proposals per
estimate, its draws per model from per-model runs (PyMC SMC for two factors, NUTS for three). This study does the same
(``--draws-per-model``: N training and N evaluation draws of each model from per-model runs of each fit's own, so
2N proposals per estimate) at N = ``DRAWS`` per model, i.e. 2,000 and 16,000 proposals per estimate as in the
paper, with ``REPLICATES`` fits x ``REPEATS`` estimates at the smaller N and ``LARGE_BUDGET`` at the larger
(budget and results in docs/studies.md).

Before 2026-11-28 the study drew N from the pooled posterior (stored reference), so the three-factor model
(probability 0.11) got about 11% of them and its 21-D spline flow overfitted: rq then came out behind the standard
proposal (docs/studies.md).
"""

from __future__ import annotations

from suite.studies.bbe import BBEStudy

PROPOSALS = ("standard", "lopes-west", "affine", "rq", "ctrj")
#: Draws of each model per training (and per evaluation) set: 2,000 and 16,000 proposals per estimate.
DRAWS = (1000, 8000)
REPLICATES = 5
REPEATS = 20
#: At N = 8,000 one estimate costs 34 s (rq) and 48 s (ctrj) of spline inverses on one core and the fits 4 and
#: 2.5 minutes, so fewer fits and estimates keep the study near an hour.
LARGE_BUDGET = (8000, 3, 4)
FLOW_ITERATIONS = 1000

TRJ_FA = BBEStudy(
    name="trj-fa",
    description=(
        f"TRJ Fig. 5: Bartolucci bridge estimates of P(k=2) on factor-analysis-k23 (exchange rates, k in {{2, 3}}) "
        f"for {', '.join(PROPOSALS)}; N = {DRAWS[0]:,} and {DRAWS[1]:,} draws of each model per training and per "
        f"evaluation set ({2 * DRAWS[0]:,} and {2 * DRAWS[1]:,} proposals per estimate) from per-model runs of each "
        f"fit's own; {REPLICATES} fits x {REPEATS} estimates at N = {DRAWS[0]:,}, {LARGE_BUDGET[1]} x "
        f"{LARGE_BUDGET[2]} at N = {DRAWS[1]:,}; {FLOW_ITERATIONS:,} flow iterations"
    ),
    problem="factor-analysis-k23",
    proposals=PROPOSALS,
    draws=DRAWS,
    replicates=REPLICATES,
    repeats=REPEATS,
    flow_iterations=FLOW_ITERATIONS,
    model=0,
    paper_source="TRJ paper Fig. 5 (10 fits x 100 estimates, N = 2,000 and 16,000)",
    paper_claim="RQMA-NF has the smallest spread around the truth, Lopes & West the largest",
    draws_per_model=True,
    budgets=(LARGE_BUDGET,),
    paper_order=(
        ("rq", "standard"),
        ("rq", "affine"),
        ("rq", "lopes-west"),
        ("standard", "lopes-west"),
        ("affine", "lopes-west"),
        ("ctrj", "lopes-west"),
    ),
    expected_runtime="about 47 minutes",
)
