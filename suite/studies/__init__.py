"""Studies: one command regenerates one of the papers' figures or tables (``tdbench study NAME``).

A study runs named variants (a method with fixed options) on a few problems through the ordinary runner, each
variant into its own results folder (``<out>/<variant>/``, a normal folder that ``tdbench report`` reads), then
writes the comparison with the paper: ``<out>/<study>.csv``, ``.md`` and ``.png``. Adding a study is one module
in this package that builds a :class:`suite.studies.study.Study` and registers it in :data:`STUDIES`. TRJ's
bridge-estimate figures are :class:`suite.studies.bbe.BBEStudy` objects instead (``tdbench bbe-study`` per N).
"""

from __future__ import annotations

from suite.studies.bayesdag_fig2 import BAYESDAG_FIG2
from suite.studies.bbe import BBEStudy
from suite.studies.classics import CLASSICS
from suite.studies.mif_ablations import MIF_ABLATIONS
from suite.studies.study import Study
from suite.studies.trj_blockvs import TRJ_BLOCKVS
from suite.studies.trj_fa import TRJ_FA
from suite.studies.vti_cardinality import VTI_CARDINALITY
from suite.studies.vti_robust_vs import VTI_ROBUST_VS

#: Registered studies by name; each has ``name``, ``description`` and ``run(out, seeds, force) -> exit code``.
STUDIES: dict[str, Study | BBEStudy] = {
    study.name: study
    for study in (MIF_ABLATIONS, TRJ_FA, TRJ_BLOCKVS, VTI_ROBUST_VS, VTI_CARDINALITY, BAYESDAG_FIG2, CLASSICS)
}
