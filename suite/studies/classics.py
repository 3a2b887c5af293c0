"""The classics (issue 52): every transdimensional method at equal time on the field's five classic problems.

``tdbench study classics`` runs each method on ``coal-mining``, ``galaxy``, ``lynx-ar``, ``pines`` and ``us-crime``
at the quick profile's time budgets (equal compute per problem, 3 seeds) and prints the model-probability error
(``model_prob_tv`` against the exact answers, and against the SMC reference for ``galaxy``). The papers report
posterior summaries, not a sampler's error, so the table's paper column is empty; the details below it give the
answers the methods are scored on, beside the papers' own figures where they were checked (docs/problems.md, "The
classics"). Methods that do not apply (per-model fits on the 32,768 models of ``us-crime``) have no runs.
"""

from __future__ import annotations

from pathlib import Path

from suite.core.registry import make_problem
from suite.studies.study import Study, Variant

PROBLEMS = ("coal-mining", "galaxy", "lynx-ar", "pines", "us-crime")
#: The transdimensional samplers and the per-model VI families, each at its quick preset.
METHODS = (
    "rjmcmc-baseline",
    "rjmcmc-naive",
    "trj",
    "ctrj",
    "vti-surrogate",
    "vti-mcg",
    "mif",
    "iaf",
    "fr-vip",
    "fr",
    "mf",
)
#: The papers' own figures that the suite's answers were checked against (docs/problems.md).
PAPER_FIGURES = {
    "pines": "Friel & Wyse (2012): log p(y | M1) = -310.128, log p(y | M2) = -301.704",
    "galaxy": "Richardson & Green (1997), Table 1 (their k_max = 30; as the sBIC package quotes it): p(k | y) for "
    "k = 3..10 0.061, 0.128, 0.182, 0.199, 0.160, 0.109, 0.071, 0.040",
}
#: Models listed per problem in the details.
TOP_MODELS = 5


def answers_details(study: Study, out: Path) -> str:
    """The answers the methods are scored on (the most probable models), with the papers' checked figures."""
    lines = ["The answers scored against (most probable models; exact unless a standard error is given):", ""]
    for name in study.problems:
        problem = make_problem(name)
        reason = problem.unavailable_reason()
        reference = None if reason else problem.reference_model_probs()
        if reference is None:
            lines.append(f"- {name}: unavailable here ({reason or 'no reference stored'})")
            continue
        top = reference.top(TOP_MODELS)
        entries = []
        for i, index in enumerate(top.index.tolist()):
            key = tuple(index) if isinstance(index, list) else index
            se = "" if top.se is None or float(top.se[i]) == 0 else f" ± {float(top.se[i]):.2g}"
            label = getattr(problem, "model_label", problem.model_space.identifier)(key)  # us-crime: covariates
            entries.append(f"{label}: {float(top.prob[i]):.4f}{se}")
        lines.append(f"- {name}: " + ", ".join(entries))
        if name in PAPER_FIGURES:
            lines.append(f"  - paper: {PAPER_FIGURES[name]}")
    return "\n".join(lines)


CLASSICS = Study(
    name="classics",
    description=(
        f"every transdimensional method at equal time on the classic problems ({', '.join(PROBLEMS)}), "
        "quick budgets, 3 seeds"
    ),
    problems=PROBLEMS,
    variants=tuple(Variant(method, method) for method in METHODS),
    metric="model_prob_tv",
    grid={"profile": "quick", "seeds": 3},
    paper_source="no sampler errors are reported by the papers; their posterior figures are in the details",
    details=answers_details,
    expected_runtime="about 20 minutes",
)
