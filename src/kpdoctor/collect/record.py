"""What one collection step produced, and the clock every step shares.

A :class:`Collected` is one bundle artifact with the story of how it was obtained (the manifest
entry); a :class:`NotCollected` says why an artifact is absent, so the report can tell *unknown*
from *healthy*. :class:`Budget` bounds the whole collection: each step asks it for a timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kpdoctor.bundle.contents import Collected, NotCollected

__all__ = ["Budget", "Collected", "Gathered", "NotCollected", "Progress", "quiet", "utc_now"]

Progress = Callable[[str], None]
"""Told a short description of each step as it starts (``"iptables-legacy-save"``)."""


def quiet(_: str) -> None:
    """A :data:`Progress` that shows nothing."""


def utc_now() -> str:
    """Now, as the manifest writes times: ISO-8601 UTC with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Gathered:
    """What one collection step got: artifacts, and the absent ones with why."""

    artifacts: list[Collected] = field(default_factory=list)
    skipped: list[NotCollected] = field(default_factory=list)

    def add(self, result: Collected | NotCollected) -> Collected | NotCollected:
        if isinstance(result, Collected):
            self.artifacts.append(result)
        else:
            self.skipped.append(result)
        return result


class Budget:
    """The time left for the whole collection; each step gets at most what remains."""

    def __init__(self, seconds: float) -> None:
        self.total = seconds
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def timeout(self, want: float) -> float:
        """``want`` seconds, or less when the budget is nearly spent (0 when it is spent)."""
        return min(want, self.left())

    @property
    def spent(self) -> bool:
        return self.left() <= 0.05
