"""What the command line prints shows control characters escaped, never raw (issue 51, H4).

Record reasons, environment fields, file names and plug-in errors are text from files anyone could have written; an
escape sequence in them (``ESC ] 0 ; title BEL`` sets the terminal's title, others move the cursor or rewrite the
screen) must not reach the terminal as such. Rather than escaping at each of the many places that print such text,
:func:`escaped_output` wraps ``sys.stdout`` and ``sys.stderr`` for the length of a command, so that everything it
prints, warnings included, goes through one ``str.translate`` table (C0 and C1 controls but tab, newline and
carriage return, DEL, and the bidirectional overrides shown as ``\\x1b``, ``\\u202e``). The one sequence let
through is tqdm's cursor-up (``ESC [ A``), which nested progress bars need.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO

#: Code points shown escaped: C0 controls but tab, newline and carriage return; DEL; C1 controls; and the Unicode
#: bidirectional embeddings, overrides and isolates, which reorder what a terminal shows ("Trojan source").
_CONTROLS = [c for c in range(0x20) if chr(c) not in "\t\n\r"] + list(range(0x7F, 0xA0))
_BIDI = list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A))
ESCAPES: dict[int, str] = {c: f"\\x{c:02x}" for c in _CONTROLS} | {c: f"\\u{c:04x}" for c in _BIDI}
#: tqdm moves the cursor up with this to redraw nested bars: the one sequence printed as it is.
CURSOR_UP = "\x1b[A"
_PIECES = re.compile(f"({re.escape(CURSOR_UP)})")


def escape_controls(text: str) -> str:
    """``text`` with control characters written as escapes (tab, newline and carriage return kept).

    Example:
        >>> escape_controls("ok\\x1b]0;pwned\\x07 done\\n")
        'ok\\\\x1b]0;pwned\\\\x07 done\\n'
    """
    return text.translate(ESCAPES)


class EscapingStream:
    """A text stream that writes to ``stream`` with :func:`escape_controls` applied (tqdm's cursor-up kept)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        """Write ``text`` escaped; returns the length of ``text``, as a stream's ``write`` does."""
        pieces = _PIECES.split(text)
        self.stream.write("".join(p if p == CURSOR_UP else escape_controls(p) for p in pieces))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def escaped_output() -> Iterator[None]:
    """For the ``with`` block, ``sys.stdout`` and ``sys.stderr`` escape control characters (restored after)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingStream(sys.stdout), EscapingStream(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
