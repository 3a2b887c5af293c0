"""No line of README.md or a Markdown page under docs/ is over 120 characters. Only a URL alone on its line may be
longer (it cannot be broken); any other exception must be listed here with the reason it cannot be wrapped."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 120
#: Table rows that cannot fit: (file, the row's first cell) -> why.
LONG_TABLE_ROWS: dict[tuple[str, str], str] = {}
#: Other lines that cannot be wrapped: (file, how the line starts) -> why.
LONG_LINES: dict[tuple[str, str], str] = {}
#: A URL alone on its line (a link reference definition's destination) cannot be broken.
BARE_URL = re.compile(r"\s*https?://\S+")


def _pages() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "README.md", "docs/*.md", "docs/**/*.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(set(listed))


def _first_cell(line: str) -> str:
    return re.split(r"(?<!\\)\|", line.strip())[1].strip()


def _allowed(page: str, line: str) -> bool:
    if line.lstrip().startswith("|"):
        return (page, _first_cell(line)) in LONG_TABLE_ROWS
    if BARE_URL.fullmatch(line):
        return True
    return any(page == name and line.lstrip().startswith(start) for name, start in LONG_LINES)


def test_no_markdown_line_is_over_120_characters_but_the_listed_ones() -> None:
    pages = _pages()
    assert "README.md" in pages and "docs/running.md" in pages, pages
    too_long = [
        f"{page}:{number}: {len(line)} characters"
        for page in pages
        for number, line in enumerate((ROOT / page).read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > WIDTH and not _allowed(page, line)
    ]
    assert not too_long, "lines over 120 characters (wrap them, or list them here with a reason):\n" + "\n".join(
        too_long
    )


def test_every_listed_exception_is_still_there() -> None:
    found = set()
    for page in _pages():
        for line in (ROOT / page).read_text(encoding="utf-8").splitlines():
            if len(line) > WIDTH and line.lstrip().startswith("|"):
                found.add((page, _first_cell(line)))
            elif len(line) > WIDTH:
                found.update(key for key in LONG_LINES if key[0] == page and line.lstrip().startswith(key[1]))
    stale = (set(LONG_TABLE_ROWS) | set(LONG_LINES)) - found
    assert not stale, f"listed as too long but now fit (remove them from the lists): {sorted(stale)}"
