"""The report page from committed quick records (facts added in a temporary copy), read as HTML and in Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from suite.report.build import write_report
from suite.report.html import IMAGE_CHECK, write_index
from suite.results.facts import add_missing_facts
from suite.results.records import load_records
from suite.results.schema import METRIC_MEANINGS
from tests.quick_records import quick_records_dir

REPO = Path(__file__).resolve().parents[3]
QUICK = quick_records_dir()
#: Bars (sas), a scatter and a sweep (robust-vs), DAG metrics (linear-dag-d4), the papers' numbers (funnel).
PROBLEMS = ("funnel", "linear-dag-d4", "robust-vs", "sas")
FAILURE = '<script>alert("boom")</script> & RuntimeError'
NOT_APPLICABLE_ROW = {
    "problem": "sas",
    "method": "dagma",
    "seed": None,
    "status": "not_applicable",
    "reason": "needs a DAG problem",
    "metrics": {},
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """A results folder: quick records with facts, one failed run, pictures, and ``index.html``; and its records."""
    out = tmp_path_factory.mktemp("report")
    (out / "records").mkdir()
    for path in sorted(QUICK.glob("*.json")):
        if path.name.split("__")[0] in PROBLEMS:
            shutil.copy(path, out / "records" / path.name)
    add_missing_facts(out)
    failed = json.loads(next((out / "records").glob("sas__mf__seed0__*.json")).read_text())
    failed.update(method="broken", status="failed", reason=FAILURE, metrics={}, model_probs=None, trace=None)
    (out / "records" / "sas__broken__seed0__0000000000.json").write_text(json.dumps(failed))
    records = [*load_records(out), NOT_APPLICABLE_ROW]
    write_report(records, out, "quick")  # the pictures, the tables and the page
    return out, records


class Page(HTMLParser):
    """The elements of a page: (tag, attributes, all the text inside) in document order."""

    VOID = frozenset({"br", "img", "meta", "link", "hr", "input"})

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str], str]] = []
        self.open: list[int] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}, ""))
        if tag not in self.VOID:
            self.open.append(len(self.elements) - 1)

    def handle_endtag(self, tag: str) -> None:
        while self.open and self.elements[self.open.pop()][0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        for i in self.open:
            tag, attrs, text = self.elements[i]
            self.elements[i] = (tag, attrs, text + data)

    def find(self, tag: str, **attrs: str) -> list[tuple[str, dict[str, str], str]]:
        """Elements of ``tag`` whose attributes include ``attrs`` (``class_`` for ``class``)."""
        wanted = {k.rstrip("_"): v for k, v in attrs.items()}
        return [e for e in self.elements if e[0] == tag and all(e[1].get(k) == v for k, v in wanted.items())]


def cell(page: Page, problem: str, method: str) -> tuple[str, dict[str, str], str]:
    """The overview cell of (problem, method), found by its hover text."""
    (found,) = [e for e in page.find("td") if e[1].get("title", "").startswith(f"{problem} / {method}:")]
    return found


@pytest.mark.slow
def test_overview_sections_and_pictures(folder: tuple[Path, list[dict]]) -> None:
    out, records = folder
    problems = sorted({rec["problem"] for rec in records})
    page = Page((out / "index.html").read_text())
    assert len(page.find("table", id="overview-matrix")) == 1
    assert [e[1]["data-problem"] for e in page.find("tr") if "data-problem" in e[1]] == problems
    sections = page.find("section", class_="problem")
    assert [e[1]["data-problem"] for e in sections] == problems
    assert [e[1]["id"] for e in sections] == [e[1]["href"][1:] for e in page.find("a", class_="row")]
    images = [e[1]["src"] for e in page.find("img")]
    assert images and all((out / src).is_file() for src in images)
    pngs = {p.name for p in out.glob("*.png")}
    assert set(images) == pngs  # every picture written is shown, and nothing else
    assert "leaderboard_sas.png" in pngs and "leaderboard_robust-vs.png" in pngs and "curves_sas.png" in pngs
    assert "leaderboard_funnel.png" not in pngs  # one model: nothing to compare
    assert "sweep_robust-vs-cardinality.png" in images
    assert len(page.find("table", class_="dag")) == 1 and len(page.find("table", class_="papers")) == 1
    assert page.find("script") and not any(e[1].get("src") for e in page.find("script"))  # inline only


@pytest.mark.slow
def test_cells_best_failed_not_applicable_and_escaping(folder: tuple[Path, list[dict]]) -> None:
    out, records = folder
    text = (out / "index.html").read_text()
    page = Page(text)
    not_applicable = cell(page, "sas", "dagma")
    assert not_applicable[1]["class"] == "na" and "needs a DAG problem" in not_applicable[1]["title"]
    failed = cell(page, "sas", "broken")
    assert failed[1]["class"] == "failed" and FAILURE in failed[1]["title"]  # the parser unescapes attributes
    assert any(FAILURE in e[2] for e in page.find("li"))  # and the failure is listed
    assert "<script>alert" not in text and "&lt;script&gt;alert(&quot;boom&quot;)" in text
    # starred: the best and every method tied with it, shown with the mean over seeds at the common budget
    finals: dict[str, list[float]] = {}
    for rec in records:
        if rec["problem"] == "sas" and rec["status"] == "ok":
            finals.setdefault(rec["method"], []).append(rec["metrics"]["model_prob_tv"]["value"])
    board = pd.read_csv(out / "leaderboard_sas.csv")
    tied = board.loc[board["tied_with_best"] & (board["over_budget"] == 0), "method"].tolist()
    starred = [e for e in page.find("td", class_="best") if e[1]["title"].startswith("sas /")]
    assert sorted(e[1]["title"].split(":")[0] for e in starred) == sorted(f"sas / {m}" for m in tied)
    best = board["method"][0]
    assert cell(page, "sas", best)[2].strip() == f"{np.mean(finals[best]):.3g} ★"
    assert cell(page, "linear-dag-d4", "dagma")[2].strip() == "-"  # a point estimate has no model probabilities
    commits = {rec["environment"]["git"] for rec in records if rec.get("environment")}
    assert commits and all(commit in text for commit in commits)


@pytest.mark.slow
def test_missing_picture_is_not_linked_and_page_is_stable(folder: tuple[Path, list[dict]], tmp_path: Path) -> None:
    out, records = folder
    for path in out.glob("*.png"):
        if path.name != "curves_sas.png":
            shutil.copy(path, tmp_path / path.name)
    first = write_index(records, tmp_path, "quick").read_text()
    assert 'src="leaderboard_sas.png"' in first and "curves_sas.png" not in first
    assert write_index(records, tmp_path, "quick").read_text() == first  # regenerating gives the same bytes


def test_records_without_facts_are_refused_with_the_fix(tmp_path: Path) -> None:
    record = json.loads(next(QUICK.glob("sas__*.json")).read_text())
    record.pop("problem_facts", None)
    with pytest.raises(ValueError, match=r"tdbench facts"):
        write_index([record], tmp_path)
    assert not (tmp_path / "index.html").exists()


BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("problems", "methods") or name == "suite.core.registry":
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
from pathlib import Path
from suite.report.html import write_index
from suite.results.records import load_records
from suite.report.build import write_report
out = Path(sys.argv[1])
print(write_index(load_records(out), out, "quick"))
"""


@pytest.mark.slow
def test_page_is_written_without_problem_or_method_code(folder: tuple[Path, list[dict]], tmp_path: Path) -> None:
    out, _ = folder
    shutil.copytree(out / "records", tmp_path / "records")
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER, str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert 'id="overview-matrix"' in (tmp_path / "index.html").read_text()


# ------------------------------------------------------------------------------------------- in a real browser


def chromium() -> str:
    """The Chromium executable; skips the test where it is missing, except under CI, where that is a failure."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path("/usr/bin/chromium").is_file():
        found = "/usr/bin/chromium"
    if found is None:
        message = "chromium is not installed (Debian: apt-get install chromium); the browser test needs it"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def browse(page: Path, *action: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium on a page from disk, isolated from the network and from any profile."""
    with tempfile.TemporaryDirectory() as profile:
        command = [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=10000",
            *action,
            page.resolve().as_uri(),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def check_rendered(out: Path) -> None:
    """The page of ``out`` as Chromium renders it: the overview, one section per problem, every image loaded."""
    dom = Page(browse(out / "index.html", "--dump-dom").stdout)
    assert dom.find("body", **{"data-images-checked": "yes"})  # the page's script ran after every image settled
    assert len(dom.find("table", id="overview-matrix")) == 1
    problems = {p.name.split("__")[0] for p in (out / "records").glob("*.json")}
    assert {e[1]["data-problem"] for e in dom.find("section", class_="problem")} == problems
    images = dom.find("img")
    assert images and all(e[1].get("data-state") == "loaded" for e in images), [e[1] for e in images]


def screenshot(out: Path, png: Path) -> None:
    """Write the top of ``out``'s page as ``png`` and check it is a picture of the window's width."""
    browse(out / "index.html", f"--screenshot={png}", "--window-size=1400,2000")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert int.from_bytes(data[16:20], "big") == 1400  # IHDR width: the window asked for


@pytest.mark.slow
def test_page_renders_in_chromium(folder: tuple[Path, list[dict]], tmp_path: Path) -> None:
    out, _ = folder
    check_rendered(out)
    # the check itself tells a broken picture from a loaded one
    broken = tmp_path / "broken.html"
    broken.write_text(f'<!DOCTYPE html><html><body><img src="missing.png"><script>{IMAGE_CHECK}</script></body></html>')
    assert Page(browse(broken, "--dump-dom").stdout).find("img", **{"data-state": "broken"})
    screenshot(out, tmp_path / "report.png")


#: Written into a copy of the page: where each table's box and first column are once scrolled to the far right.
LAYOUT_PROBE = """
window.addEventListener("load", function () {
  var tables = Array.from(document.querySelectorAll("table")).map(function (table) {
    var box = table.parentElement, first = table.querySelector("tbody tr > :first-child");
    var wide = box.scrollWidth > box.clientWidth + 1;
    box.scrollLeft = box.scrollWidth;
    var offset = first.getBoundingClientRect().left - box.getBoundingClientRect().left;
    return {id: table.id || table.className, overflow: getComputedStyle(box).overflowX, wide: wide,
            scrolled: box.scrollLeft, first_offset: offset};
  });
  document.body.setAttribute("data-layout", JSON.stringify(
    {viewport: window.innerWidth, page_width: document.scrollingElement.scrollWidth, tables: tables}));
});
"""
#: Characters beyond ASCII the page may show: ones that DejaVu Sans, Segoe UI (Symbol) and Apple's system fonts
#: have. Not ⏱ (U+23F1), which headless Chromium showed as an empty box.
COMMON_GLYPHS = frozenset("±×÷·–—…≤≥≈−µσπθτΔ²³½°→←✓★⚠")


def missing_glyphs(characters: set[str]) -> set[str]:
    """The characters no installed font has, as fontconfig says (an empty set where fc-list is missing)."""
    if shutil.which("fc-list") is None:
        return set()
    return {
        c for c in characters if not subprocess.run(["fc-list", f":charset={ord(c):x}"], capture_output=True).stdout
    }


@pytest.mark.slow
def test_page_at_1400_px_scrolls_wide_tables_in_their_box_keeps_the_first_column_and_shows_common_glyphs(
    folder: tuple[Path, list[dict]], tmp_path: Path
) -> None:
    out, _ = folder
    copy = tmp_path / "page"
    shutil.copytree(out, copy)
    text = (copy / "index.html").read_text()
    (copy / "probe.html").write_text(text.replace("</body>", f"<script>{LAYOUT_PROBE}</script></body>"))
    dom = Page(browse(copy / "probe.html", "--dump-dom", "--window-size=1400,2000").stdout)
    layout = json.loads(dom.find("body")[0][1]["data-layout"])
    assert layout["viewport"] == 1400
    assert layout["page_width"] <= 1400, "something sticks out of the page: the window scrolls sideways"
    tables = layout["tables"]
    assert tables and all(t["overflow"] == "auto" for t in tables), tables  # every table in a box of its own
    overview = next(t for t in tables if t["id"] == "overview-matrix")
    assert overview["wide"], "the overview fits at 1,400 px here: this test would not see it scroll"
    for table in (t for t in tables if t["wide"]):
        assert table["scrolled"] > 0 and abs(table["first_offset"]) <= 1, table  # the first column stays
    # every abbreviation a picture shows is explained in its caption
    captions = {e[1]["class"]: e[2] for e in dom.find("figure")}
    assert captions and all(text.strip() for text in captions.values())
    explained = {
        "model-probs": ["TV in a panel's title: the method's total variation"],
        "summary": ["(n): the number of problems", "tau: a method's time"],
    }
    for kind, terms in explained.items():
        assert all(term in captions[kind] for term in terms), (kind, captions[kind])
    curves = [e[2] for e in dom.find("figure", class_="curves")]
    assert curves and all(any(f"{m} ({meaning})" in c for m, meaning in METRIC_MEANINGS.items()) for c in curves)
    shown = {c for c in dom.find("body")[0][2] if ord(c) > 127}
    assert shown <= COMMON_GLYPHS, sorted(shown - COMMON_GLYPHS)
    assert not missing_glyphs(shown), "drawn as empty boxes here"


def test_screenshot_for_the_docs(request: pytest.FixtureRequest) -> None:
    """docs/report.png from a results folder: ``python -m pytest -n 0 --write-screenshot results/quick -k
    screenshot tests/suite/report/test_html.py``."""
    folder = request.config.getoption("--write-screenshot")
    if not folder:
        pytest.skip("writes docs/report.png only when --write-screenshot names a results folder")
    out = Path(folder)
    check_rendered(out)
    screenshot(out, REPO / "docs" / "report.png")
