"""The README is a front page: short, its links resolve, and its code (method and problem skeletons, API) runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_LINES = 250
#: The pages the sections that left the README went to (issue 20).
REQUIRED_DOCS = ("methods.md", "problems.md", "metrics.md", "reproducing-the-papers.md", "limitations.md")
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _python_block(containing: str) -> str:
    """The README's one Python code block that contains ``containing``."""
    blocks = [block for block in CODE_BLOCK.findall(_readme()) if containing in block]
    assert len(blocks) == 1, f"expected one README python block with {containing!r}, found {len(blocks)}"
    return blocks[0]


def _anchors(page: Path) -> set[str]:
    """GitHub-style anchors of a Markdown page's headings."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def _check_links(page: Path) -> list[str]:
    """Relative links of ``page`` whose file (or heading anchor) does not exist."""
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(target)
    return broken


def _run_python(code: str, timeout: int = 300) -> str:
    """Run ``code`` in a fresh interpreter at the repository root (registrations stay out of this process)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


def test_readme_is_a_front_page_of_at_most_250_lines() -> None:
    lines = _readme().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move sections to docs/"
    for heading in ("## Quick start", "## Python API", "## Adding a method or a problem", "## Layout"):
        assert heading in lines


def test_readme_keeps_a_marked_results_table() -> None:
    text = _readme()
    start, end = text.index("<!-- results-table:start -->"), text.index("<!-- results-table:end -->")
    table = text[start:end].splitlines()[1:]
    assert start < end and table and all(line.startswith("|") for line in table)


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    pages = [README, *sorted(DOCS.glob("*.md"))]
    broken = {page.name: links for page in pages if (links := _check_links(page))}
    assert not broken, f"broken links: {broken}"
    linked = {Path(target.partition("#")[0]).name for target in LINK.findall(_readme())}
    assert set(REQUIRED_DOCS) <= linked, f"README does not link {sorted(set(REQUIRED_DOCS) - linked)}"


def test_docs_pages_that_took_the_readme_sections_exist() -> None:
    for name in REQUIRED_DOCS:
        text = (DOCS / name).read_text(encoding="utf-8")
        assert text.startswith("# ") and len(text.splitlines()) > 10, name
    assert "## VTI" in (DOCS / "methods.md").read_text(encoding="utf-8")
    assert "## Ground truth" in (DOCS / "problems.md").read_text(encoding="utf-8")
    assert "GPU timings" in (DOCS / "reproducing-the-papers.md").read_text(encoding="utf-8")


def test_the_method_and_problem_skeletons_run_and_recover_the_exact_answer() -> None:
    """Exec the README's two skeletons, then score the method on the toy problem (exact) and on ``sas``."""
    method_code, problem_code = _python_block("@register_method"), _python_block("@register_problem")
    driver = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, numpy as np, torch
        from suite.backend import jax_backend
        from suite.context import RunContext
        from suite.registry import make_method, make_problem
        from suite.runner import execute, gold_draws

        jax.config.update("jax_enable_x64", True)
        toy = make_problem("two-gaussians")
        model_index, theta = torch.tensor([0, 1, 1, 0]), torch.randn(4, 2, dtype=torch.float64)
        theta[0, 1] = float("nan")  # an inactive coordinate is ignored
        in_jax = toy.log_joint_with(jax_backend(), jnp.asarray(model_index.numpy()), jnp.asarray(theta.numpy()))
        assert torch.isfinite(toy.log_joint(model_index, theta)).all()
        assert np.allclose(np.asarray(in_jax), toy.log_joint(model_index, theta).numpy(), rtol=0, atol=1e-12)

        for name, bar in (("two-gaussians", 1e-9), ("sas", 0.1)):
            problem = make_problem(name)
            method = make_method("naive-is").resolve(problem, "smoke")
            context = RunContext(seed=0, profile="smoke", num_draws=500)
            record = execute(problem, method, context, draws=gold_draws(problem, 1000))
            assert record["status"] == "ok", record["reason"]
            assert record["metrics"]["model_prob_tv"]["value"] < bar, (name, record["metrics"])
            assert len(record["trace"]["seconds"]) >= 5
        timed = RunContext(seed=1, profile="quick", time_budget_s=0.3)
        record = execute(toy, make_method("naive-is").resolve(toy, "quick"), timed)
        assert record["status"] == "ok" and "stop" in record["counts"], record
        assert make_method("naive-is").supports(make_problem("robust-vs-p16")) is not None
        print("skeletons ok")
        """
    )
    assert "skeletons ok" in _run_python(method_code + "\n" + problem_code + "\n" + driver)


def test_the_python_api_snippet_scores_a_method() -> None:
    code = _python_block("resolve_and_run")
    output = _run_python(code)
    assert output.startswith("ok {'value': ")


@pytest.mark.slow
def test_the_results_snippet_reads_a_finished_run(tmp_path: Path) -> None:
    pytest.importorskip("tdbench.results", reason="the tdbench.results API is not installed")
    out = tmp_path / "smoke"
    run = "from suite.cli import main\n" + (
        f"raise SystemExit(main(['run', '--profile', 'smoke', '--problems', 'sas', '--methods', 'rjmcmc-baseline', "
        f"'--seeds', '1', '--jobs', '1', '--no-progress', '--out', {str(out)!r}]))"
    )
    _run_python(run)
    code = _python_block("results.load").replace('"results/quick"', repr(str(out)))
    output = _run_python(code + "\nprint('draws:', len(draws), draws.theta.dtype)")
    assert "rjmcmc-baseline" in output and "draws: 4096 float32" in output
