"""Studies: one command regenerates one of the papers' figures or tables (``tdbench study NAME``).

A study runs named variants (a method with fixed options) on a few problems through the ordinary runner, each
variant into its own results folder (``<out>/<variant>/``, a normal folder that ``tdbench report`` reads), then
writes the comparison with the paper: ``<out>/<study>.csv``, ``.md`` and ``.png``. Adding a study is one module
in this package that builds a :class:`suite.studies.study.Study` and registers it in :data:`STUDIES`.
"""

from __future__ import annotations

from suite.studies.mif_ablations import MIF_ABLATIONS
from suite.studies.study import Study

#: Registered studies by name.
STUDIES: dict[str, Study] = {study.name: study for study in (MIF_ABLATIONS,)}
