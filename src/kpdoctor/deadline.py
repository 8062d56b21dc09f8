"""The bound on a whole run (``--timeout``), offline as well as live.

A run that reads a FIFO nobody writes to, a 2 GB log on a slow disk or a pathological input must
end, and end with the report of what was done. One interval timer raises :class:`TimedOut` in the
main thread wherever it is; the stage running then (set with :func:`stage`) names what was cut
short, and the stages that catch it (each path read, each check) record that and stop, so the
report is still written. Forked workers do not inherit the timer (POSIX), and are killed by
:func:`kpdoctor.parallel.run_parts` when their caller is interrupted.
"""

from __future__ import annotations

import signal
import threading
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
