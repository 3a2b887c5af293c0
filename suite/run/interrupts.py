"""Stopping a grid on SIGINT or SIGTERM: the signal becomes :class:`Interrupted`, and workers are ended, not awaited.

``tdbench run`` turns both signals into :class:`Interrupted` (a ``KeyboardInterrupt``) while a grid runs
(:func:`signals_interrupt`). The run that was going on in this process stops where it is, and the worker pool, or
the Dask tasks, are ended within :data:`GRACE_S` seconds (:func:`end_processes`): no record is written for a run
that had not finished, finished runs keep theirs, and the command exits ``128 + signal`` (130, 143). Worker
processes ignore SIGINT (:func:`ignore_interrupts`), so a Ctrl-C in the terminal, which reaches the whole process
group, is handled once, by the parent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from multiprocessing import resource_tracker
from typing import Any

#: Seconds a worker has to end after SIGTERM before it is sent SIGKILL.
GRACE_S = 2.0
#: The signals that stop a grid.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM") if hasattr(signal, name))


class Interrupted(KeyboardInterrupt):
    """A grid stopped by a signal; ``exit_status`` is the shell's ``128 + signal number`` (130, 143)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        """The signal's name (``SIGINT``)."""
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    @property
    def exit_status(self) -> int:
        """128 + the signal's number."""
        return 128 + self.signum


def exit_status(exc: KeyboardInterrupt) -> int:
    """The exit status of an interrupt: 128 + its signal (a plain KeyboardInterrupt is SIGINT's 130)."""
    return exc.exit_status if isinstance(exc, Interrupted) else 128 + signal.SIGINT


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread; restored after.

    A signal this process was started ignoring (``nohup``) stays ignored. Outside the main thread nothing changes
    (Python takes signals only there).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in STOP_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is not signal.SIG_IGN:
            previous[signum] = handler
            signal.signal(signum, _raise_interrupted)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


class DeferredInterrupts:
    """Within the block SIGINT and SIGTERM are noted (``signum``, the first), not raised; SIGINT is also blocked.

    For work that an exception must not cut in half, such as starting a Dask cluster: the caller finishes it,
    cleans up and raises ``Interrupted(signum)``. Processes started within (and threads, which start theirs) begin
    with SIGINT blocked, so a Ctrl-C sent to the whole process group never reaches them.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._mask: set[int] | None = None

    def _note(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum

    def __enter__(self) -> DeferredInterrupts:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in STOP_SIGNALS:
            handler = signal.getsignal(signum)
            if handler is not signal.SIG_IGN:
                self._previous[signum] = handler
                signal.signal(signum, self._note)
        if hasattr(signal, "pthread_sigmask"):
            _start_resource_tracker()
            self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        return self

    def __exit__(self, *exc: object) -> None:
        if self._mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)  # a SIGINT held back is noted now
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now: starting it later unblocks SIGINT in the thread that does."""
    try:
        resource_tracker.ensure_running()
    except (ImportError, OSError, AttributeError):  # not POSIX: no tracker, and no signal masks either
        pass


def ignore_interrupts() -> None:
    """In a worker: ignore SIGINT (the parent stops its workers) and unblock it; SIGTERM keeps ending the process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def end_processes(processes: Iterable[Any], grace_s: float = GRACE_S) -> None:
    """End ``multiprocessing`` processes now: SIGTERM, then SIGKILL to any still alive after ``grace_s`` seconds."""
    alive = [process for process in processes if _alive(process)]
    for how in ("terminate", "kill"):
        for process in alive:
            _send(process, how)
        deadline = time.monotonic() + grace_s
        while alive and time.monotonic() < deadline:
            time.sleep(0.02)
            alive = [process for process in alive if _alive(process)]


def _alive(process: Any) -> bool:
    try:
        return bool(process.is_alive())
    except (ValueError, OSError, AssertionError):  # closed, or not ours to wait for
        return False


def _send(process: Any, how: str) -> None:
    try:
        getattr(process, how)()
    except (ValueError, OSError, AttributeError):  # gone meanwhile, or closed
        pid = getattr(process, "pid", None)
        if pid and how == "kill":
            with contextlib.suppress(OSError):
                os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
