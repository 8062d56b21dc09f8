"""The bound on a whole run (``--timeout``), offline as well as live.

A run that reads a FIFO nobody writes to, a 2 GB log on a slow disk or a pathological input must
end, and end with the report of what was done. One interval timer raises :class:`TimedOut` in the
main thread wherever it is; the stage running then (set with :func:`stage`) names what was cut
short, and the stages that catch it (each path read, each check) record that and stop, so the
report is still written. Forked workers do not inherit the timer (POSIX), and are killed by
:func:`kpdoctor.parallel.run_parts` when their caller is interrupted.

One exchange with a server (an API call) has a bound of its own, :func:`bounded`: a socket
timeout bounds each read, so a server that sends a byte a second never trips it. Every socket
the exchange uses is handed to :func:`guard` (kpdoctor's HTTP connections do it themselves), and
a watchdog thread shuts the sockets down when the bound passes: the blocked read returns at once,
in whatever thread it waits, and the caller sees :attr:`Bound.expired`.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import signal
import socket
import threading
import time
from collections.abc import Iterator
from types import FrameType

_state: dict[str, object] = {"stage": "starting", "seconds": 0.0, "expired": False, "message": ""}


class TimedOut(BaseException):
    """The run's ``--timeout`` was reached; ``str()`` says after how long and in which stage.

    A BaseException, so that the handlers that contain a failing check or parser do not swallow
    it as one more bug."""


def stage(name: str) -> None:
    """Say what the run is doing now (``reading x.log``, ``check KP101``)."""
    _state["stage"] = name


def current_stage() -> str:
    return str(_state["stage"])


def expired() -> bool:
    """Whether the bound was reached (the report says so, and is not 'clean')."""
    return bool(_state["expired"])


def message() -> str | None:
    """What the bound cut short ("gave up after 120 s (--timeout) while check KP200"), if it did."""
    return str(_state["message"]) if _state["expired"] else None


def _alarm(signum: int, frame: FrameType | None) -> None:
    _state["expired"] = True
    _state["message"] = f"gave up after {float(str(_state['seconds'])):g} s (--timeout) while {current_stage()}"
    raise TimedOut(_state["message"])


def arm(seconds: float | None) -> None:
    """Start the bound (nothing when ``seconds`` is None or 0, or off the main thread)."""
    _state.update(stage="starting", seconds=seconds or 0.0, expired=False)
    if not seconds or seconds <= 0 or threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def disarm() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.setitimer(signal.ITIMER_REAL, 0)


# -- the bound on one exchange with a server ---------------------------------------------------------


class Bound:
    """An overall deadline on one exchange: its sockets are shut down when it passes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = max(0.0, seconds)
        self.at = time.monotonic() + self.seconds
        self.expired = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = False

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def guard(self, sock: socket.socket) -> None:
        with self._lock:
            if self._done:
                return
            if not self.expired:
                self._socks.append(sock)
                return
        _cut(sock)  # already past: a new connection made after the deadline ends at once

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            socks = list(self._socks)
        for s in socks:
            _cut(s)

    def _close(self) -> None:
        with self._lock:
            self._done = True
            self._socks.clear()


def _cut(sock: socket.socket) -> None:
    """End every read and write on ``sock`` now (the plain socket's shutdown: under TLS too)."""
    with contextlib.suppress(OSError, ValueError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watchdog:
    """One daemon thread that expires the bounds in deadline order."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, Bound]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, bound: Bound) -> None:
        with self._cv:
            heapq.heappush(self._heap, (bound.at, next(self._seq), bound))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="kpdoctor-deadlines", daemon=True)
                self._thread.start()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._heap:
                    self._cv.wait()
                at, _, bound = self._heap[0]
                left = at - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                heapq.heappop(self._heap)
            bound._expire()


_WATCHDOG = _Watchdog()
_local = threading.local()


@contextlib.contextmanager
def bounded(seconds: float) -> Iterator[Bound]:
    """Within this block, the sockets this thread's exchanges use (:func:`guard`) are shut down
    ``seconds`` from now; nested blocks each keep their own bound."""
    bound = Bound(seconds)
    stack: tuple[Bound, ...] = getattr(_local, "bounds", ())
    _local.bounds = (*stack, bound)
    _WATCHDOG.add(bound)
    try:
        yield bound
    finally:
        bound._close()
        _local.bounds = stack


def guard(sock: socket.socket) -> None:
    """Put ``sock`` under the bounds of the exchanges this thread is in (none: nothing)."""
    for bound in getattr(_local, "bounds", ()):
        bound.guard(sock)
