"""``tdbench data list`` and ``tdbench data fetch [NAME ...]``: the external data files, where they are, downloads."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from suite.data import locate
from suite.data.catalog import KNOWN_FILES


def human_size(size: int) -> str:
    """A size in bytes as B, KiB or MiB."""
    if size < 1024:
        return f"{size} B"
    return f"{size / 1024:.1f} KiB" if size < 1024 * 1024 else f"{size / 1024**2:.1f} MiB"


def status(name: str) -> tuple[str, str, Path | None]:
    """(present, corrupt or missing; the label of its folder or ''; its path or None), without downloading."""
    found = locate.find(name)
    if found is None:
        return "missing", "", None
    label, path = found
    return ("present" if locate.intact(path, KNOWN_FILES[name]) else "corrupt"), label, path


def search_order() -> str:
    """The search order as one line, with the download step and whether it is on."""
    folders = ", ".join(f"{label} {folder}" for label, folder in locate.search_folders())
    if not os.environ.get(locate.ENV_VAR):
        folders = f"{locate.ENV_VAR} (unset), {folders}"
    download = f"off: {locate.OFFLINE_VAR} is set" if locate.offline() else "on first use"
    return f"Search order: {folders}; then a download into the cache ({download})."


def list_files() -> int:
    """Print each known file: present, corrupt or missing, where, its size and its URL; the exit code (0)."""
    print(search_order())
    width = max(len(name) for name in KNOWN_FILES)
    for name, spec in KNOWN_FILES.items():
        state, label, path = status(name)
        size = human_size(path.stat().st_size if path is not None else spec.size)
        where = f"{label}: {path}" if path is not None else "-"
        print(f"{name:<{width}}  {state:<7}  {size:>9}  {where}")
        print(f"{'':<{width}}  from {locate.source_url(spec)}")
    return 0


class Terminated(KeyboardInterrupt):
    """SIGTERM during ``tdbench data fetch``, raised like Ctrl-C so that the download in progress is unwound."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block SIGTERM (``timeout``, a scheduler) raises :class:`Terminated` in the main thread.

    Its default action ends the process at once, leaving the temporary file of a download in the cache.
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def fetch_files(names: list[str], prog: str) -> int:
    """Download the named files (by default every one not present and intact) into the cache; the exit code.

    Ctrl-C (SIGTERM likewise) stops it with one line saying so and exit status 130 (143); the file being downloaded
    is not kept, those downloaded before it are.
    """
    unknown = [name for name in names if name not in KNOWN_FILES]
    if unknown:
        print(
            f"{prog}: error: unknown data file {unknown[0]!r}; valid names: {', '.join(KNOWN_FILES)}", file=sys.stderr
        )
        return 2
    wanted = names or [name for name in KNOWN_FILES if status(name)[0] != "present"]
    if not wanted:
        print(f"All {len(KNOWN_FILES)} data files are present and intact.")
        return 0
    failed = 0
    with sigterm_interrupts():
        for name in wanted:
            try:
                if not fetch_one(name, prog):
                    failed += 1
            except KeyboardInterrupt as exc:
                signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
                print(
                    f"{prog}: interrupted by {signum.name} while downloading {name!r}; nothing of it was kept",
                    file=sys.stderr,
                )
                return 128 + signum
    return 1 if failed else 0


def fetch_one(name: str, prog: str) -> bool:
    """Download one file unless it is present and intact, printing where it is; whether it is there now."""
    state, _, path = status(name)
    if state == "present":
        print(f"{name}: present at {path}")
        return True
    try:
        print(f"{name}: downloaded to {locate.fetch(name)}")
        locate.locate(name, download=False)
    except locate.DataUnavailable as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return False
    return True


def build_parser(prog: str) -> argparse.ArgumentParser:
    """The parser of ``tdbench data`` with its ``list`` and ``fetch`` commands."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="The external data sets some problems need (docs/data.md): list where each is, or download "
        f"them into the cache ({locate.CACHE_VAR} or the user's cache folder).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("list", help="each data file: present, corrupt or missing, where, its size and URL")
    fetch = commands.add_parser(
        "fetch",
        help="download data files into the cache (by default every one that is missing)",
        description="Download data files into the cache, checking each one's SHA-256. Downloads here are not "
        f"turned off by {locate.OFFLINE_VAR}, which only stops downloads on first use.",
    )
    fetch.add_argument("names", nargs="*", metavar="NAME", help=f"one of: {', '.join(KNOWN_FILES)}")
    return parser


def main(arguments: list[str] | None = None, prog: str = "tdbench data") -> int:
    """Entry point of ``tdbench data``; the exit code."""
    parser = build_parser(prog)
    args = parser.parse_args(sys.argv[1:] if arguments is None else arguments)
    if args.command == "list":
        return list_files()
    if args.command == "fetch":
        return fetch_files(args.names, f"{prog} fetch")
    parser.print_help()
    return 2
