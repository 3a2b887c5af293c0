"""Plug-ins written against the old import paths (``suite.problem``, ``suite.method``, ...) keep working for one
release: the old modules warn with the new path and forward every name."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
OLD_PATHS = ("problem", "method", "types", "model_space", "tensor_ops", "context", "registry")

PLUGIN = '''
import math

import torch

from suite.context import RunContext
from suite.core.data import unavailable_reason
from suite.method import Method, Result
from suite.model_space import CategoricalSpace
from suite.problem import Problem
from suite.registry import available_problems
from suite.tensor_ops import DeviceCache
from suite.types import ModelProbs

PRIOR = (0.25, 0.75)


class OldPathGaussians(Problem):
    """N(0, 1) in one coordinate or N(0, I) in two, with model prior 1/4, 3/4 (so p(m) is the prior)."""

    def __init__(self) -> None:
        self.model_space = CategoricalSpace(["one", "two"])
        self.dim_max = 2
        self._tables = DeviceCache(masks=torch.tensor([[True, False], [True, True]]))

    def mask(self, model_index):
        return self._tables.get("masks", model_index.device)[model_index]

    def log_model_prior(self, model_index):
        return torch.tensor(PRIOR, dtype=torch.float64, device=model_index.device).log()[model_index]

    def log_joint(self, model_index, theta):
        mask = self.mask(model_index)
        normal = -0.5 * theta * theta - 0.5 * math.log(2 * math.pi)
        return self.log_model_prior(model_index).to(theta.dtype) + (mask * normal).sum(-1)

    def unavailable_reason(self):
        return unavailable_reason()  # no data file needed: None

    def reference_model_probs(self):
        return ModelProbs.from_dense(torch.tensor(PRIOR, dtype=torch.float64))


class OldPathUniform(Method):
    """q(m) uniform over the models (a plug-in that only needs the old paths)."""

    def run(self, problem: Problem, context: RunContext) -> Result:
        assert "oldpath-gaussians" in available_problems()
        size = problem.num_models
        return Result(model_probs=ModelProbs.from_dense(torch.full((size,), 1.0 / size, dtype=torch.float64)))
'''

ENTRY_POINTS = """\
[tdbench.problems]
oldpath-gaussians = oldpath_plugin:OldPathGaussians

[tdbench.methods]
oldpath-uniform = oldpath_plugin:OldPathUniform
"""


@pytest.mark.parametrize("name", OLD_PATHS)
def test_an_old_path_warns_with_the_new_one_and_forwards_its_names(name: str) -> None:
    sys.modules.pop(f"suite.{name}", None)
    with pytest.warns(DeprecationWarning, match=rf"suite\.{name} is deprecated: import from suite\.core\.{name}"):
        old = importlib.import_module(f"suite.{name}")
    new = importlib.import_module(f"suite.core.{name}")
    public = [n for n in vars(new) if not n.startswith("_")]
    assert public and all(getattr(old, n) is getattr(new, n) for n in public)
    with pytest.raises(AttributeError):
        old.no_such_name  # noqa: B018


#: Modules that left the contracts (``suite.core``) for the layers they belong to: old path -> new path.
MOVED_OUT_OF_CORE = {
    "suite.core.data": "suite.data.locate",
    "suite.core.data_download": "suite.data.download",
    "suite.core.data_registry": "suite.data.catalog",
    "suite.core.reference_store": "suite.store.references",
    "suite.core.origin": "suite.origin",
    "suite.core.guards": "suite.run.guards",
}


@pytest.mark.parametrize(("old_path", "new_path"), sorted(MOVED_OUT_OF_CORE.items()))
def test_a_module_moved_out_of_core_warns_from_its_old_path_and_forwards(old_path: str, new_path: str) -> None:
    sys.modules.pop(old_path, None)
    with pytest.warns(
        DeprecationWarning, match=rf"{re.escape(old_path)} is deprecated: import from {re.escape(new_path)}"
    ):
        old = importlib.import_module(old_path)
    new = importlib.import_module(new_path)
    public = [n for n in vars(new) if not n.startswith("_")]
    assert public and all(getattr(old, n) is getattr(new, n) for n in public)


@pytest.mark.slow
def test_an_installed_plugin_on_the_old_paths_runs_through_its_entry_points(tmp_path: Path) -> None:
    # What `pip install --target site` of the plug-in leaves, written directly (a setuptools build takes seconds):
    # the package and a dist-info folder whose entry_points.txt importlib.metadata reads from the path.
    site = tmp_path / "site"
    (site / "oldpath_plugin").mkdir(parents=True)
    (site / "oldpath_plugin" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "oldpath_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: oldpath-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)

    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    code = "import sys; from suite.cli import main; sys.exit(main(sys.argv[1:]))"
    arguments = ["run", "--problems", "oldpath-gaussians", "--methods", "oldpath-uniform", "--profile", "smoke"]
    arguments += ["--seeds", "1", "--no-progress", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", code, *arguments],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for name in OLD_PATHS:
        assert f"suite.{name} is deprecated: import from suite.core.{name}" in done.stderr
    assert "suite.core.data is deprecated: import from suite.data.locate" in done.stderr
    records = [json.loads(path.read_text()) for path in (out / "records").glob("*.json")]
    assert [(r["problem"], r["method"], r["status"]) for r in records] == [
        ("oldpath-gaussians", "oldpath-uniform", "ok")
    ]
    # q is uniform and the truth is the prior (1/4, 3/4): total variation 1/4 exactly.
    assert records[0]["metrics"]["model_prob_tv"]["value"] == pytest.approx(0.25, abs=1e-12)


def test_a_problem_class_that_still_sets_profiles_is_planned_by_it_with_a_warning() -> None:
    from suite.core.problem import Problem

    with pytest.warns(DeprecationWarning, match=r"Old\.profiles is deprecated: .* planned_in"):

        class Old(Problem):
            profiles = ("paper",)

            def mask(self, model_index):  # pragma: no cover - never called
                raise NotImplementedError

            def log_model_prior(self, model_index):  # pragma: no cover - never called
                raise NotImplementedError

    assert Old.planned_in == ("paper",) and Problem.planned_in == ("smoke", "quick", "paper")
