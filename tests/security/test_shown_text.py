"""Text from records reaches people as text (issue 51, round two): control characters escaped on the terminal, no
markup in the Markdown leaderboards, and a huge failure reason cut short where it is shown (the record keeps it).
"""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path

import pytest

from suite import cli
from suite.cli.safe_output import CURSOR_UP, EscapingStream, escape_controls
from tests.security.test_records import _record, _write

TITLE = "\x1b]0;pwned\x07"
SCRIPT = '<script>alert(1)</script><img src=x onerror="alert(2)">'


def _failed(seed: int, reason: str) -> dict:
    record = _record(seed=seed, method="iaf")
    record.update(status="failed", reason=reason, metrics={}, model_probs=None, trace=None)
    return record


def _folder(tmp_path: Path, reason: str) -> Path:
    out = tmp_path / "results"
    for seed in (0, 1):
        _write(out, _record(seed=seed, tv=0.1 + 0.01 * seed))
    _write(out, _failed(0, reason))
    environment = _record(seed=2)
    environment["environment"] = {"python": TITLE, "device": "cpu"}
    _write(out, environment)
    return out


def test_escape_sequences_from_records_are_printed_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """H4: ``\\x1b]0;pwned\\x07`` in a reason set the terminal's title when ``tdbench report`` printed it."""
    out = _folder(tmp_path, f"diverged {TITLE} at step 3")
    planted = out / "records" / f"toy__mf__seed9{TITLE}__0123456789.json"
    planted.write_text("{}")  # an unusable record, named in a warning

    def to_stderr(message, category, filename, lineno, file=None, line=None) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))  # as Python's default

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = to_stderr  # shown as a command shows it, not collected by pytest
        assert cli.main(["report", str(out)]) == 0
    printed = capsys.readouterr()
    shown = printed.out + printed.err
    assert "\x1b" not in shown and "\x07" not in shown
    assert "diverged \\x1b]0;pwned\\x07 at step 3" in shown  # a reason
    assert "seed9\\x1b]0;pwned\\x07__" in shown  # a file name in a warning


def test_the_escaping_stream_keeps_newlines_and_the_progress_bars_cursor_up() -> None:
    sink = io.StringIO()
    stream = EscapingStream(sink)
    assert stream.write(f"a\tb\r{CURSOR_UP}c\x1b[2Jd\u202ee\n") == len(f"a\tb\r{CURSOR_UP}c\x1b[2Jd\u202ee\n")
    assert sink.getvalue() == f"a\tb\r{CURSOR_UP}c\\x1b[2Jd\\u202ee\n"
    assert escape_controls("\x9b\x7f") == "\\x9b\\x7f"


def test_markup_from_records_is_text_in_the_markdown_leaderboards(tmp_path: Path) -> None:
    """H5: raw ``<script>`` and ``<img onerror>`` from a reason landed in ``leaderboard_<p>.md``."""
    out = _folder(tmp_path, SCRIPT)
    assert cli.main(["report", str(out)]) == 0
    text = (out / "leaderboard_toy.md").read_text()
    assert "<script" not in text and "<img" not in text
    assert "&lt;script&gt;" in text


def test_a_10_mb_failure_reason_is_cut_short_where_shown_and_kept_in_the_record(tmp_path: Path) -> None:
    """A 10 MB reason made a 30 MB ``index.html``."""
    reason = "overflow " * (10 * 1024 * 1024 // 9)
    out = _folder(tmp_path, reason)
    assert cli.main(["report", str(out)]) == 0
    # each shows the reason once or twice, 500 characters each; uncut, every one held more than 10 MB
    for name in ("index.html", "leaderboard_toy.md", "leaderboard_toy.csv"):
        assert (out / name).stat().st_size < 200_000, name
    assert "more characters in the record" in (out / "index.html").read_text()
    assert reason in (out / "records" / "toy__iaf__seed0__0123456789.json").read_text()
