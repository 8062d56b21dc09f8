"""Packet-loss counters as deltas between the agent's own readings.

The kernel's counters (conntrack ``insert_failed``, ``TcpExtListenOverflows``...) are totals since
boot: a node up for a year has thousands of old drops. The agent reads them once per cycle; its
first reading only seeds the baseline, and from then on each cycle sees what grew since the last
one. A spike is reported only when it persists (growth in ``persist`` cycles in a row) or when it
spends more than a token bucket allows (``rate`` per second, up to ``burst``): one short burst of
drops after a deploy is not an alarm, a steady trickle or a flood is. A counter that went down
(a reboot, a module reload) seeds the baseline again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

DEFAULT_RATE = 0.1  # drops a second the bucket absorbs (30 in a 5-minute cycle)
DEFAULT_BURST = 100.0
DEFAULT_PERSIST = 2


@dataclass
class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; a spend beyond what is saved is an
    excess (and empties the bucket)."""

    rate: float = DEFAULT_RATE
    burst: float = DEFAULT_BURST
    tokens: float = field(default=-1.0)

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = self.burst

    def spend(self, amount: float, seconds: float) -> bool:
        """Refill for ``seconds``, take ``amount``; True when that was more than there was."""
        self.tokens = min(self.burst, self.tokens + self.rate * max(seconds, 0.0))
        if amount > self.tokens:
            self.tokens = 0.0
            return True
        self.tokens -= amount
        return False


@dataclass
class CounterState:
    value: int | None = None
    at: float | None = None
    delta: int | None = None  # growth since the previous reading (None: this reading seeded it)
    streak: int = 0  # readings in a row that grew
    exceeded: bool = False  # the last growth was more than the bucket allows
    bucket: TokenBucket = field(default_factory=TokenBucket)


class CounterGate:
    """Every counter the checks name, read cycle after cycle (see the module docstring)."""

    def __init__(
        self, rate: float = DEFAULT_RATE, burst: float = DEFAULT_BURST, persist: int = DEFAULT_PERSIST
    ) -> None:
        self.rate, self.burst, self.persist = rate, burst, persist
        self.counters: dict[str, CounterState] = {}

    def observe(self, readings: Mapping[str, int], at: float) -> None:
        """One cycle's totals (``at``: monotonic seconds). A counter absent from a reading keeps
        its state but loses its streak (nothing is known of that cycle)."""
        for name, st in self.counters.items():
            if name not in readings:
                st.delta, st.streak, st.exceeded = None, 0, False
        for name, value in readings.items():
            if name not in self.counters:
                self.counters[name] = CounterState(bucket=TokenBucket(self.rate, self.burst))
            st = self.counters[name]
            if st.value is None or st.at is None or value < st.value:
                st.delta, st.streak, st.exceeded = None, 0, False  # the baseline (again)
            else:
                st.delta = value - st.value
                st.streak = st.streak + 1 if st.delta > 0 else 0
                st.exceeded = st.bucket.spend(st.delta, at - st.at)
            st.value, st.at = value, at

    def seeded(self, name: str) -> bool:
        st = self.counters.get(name)
        return st is not None and st.delta is not None

    def spiking(self, name: str) -> bool:
        """The counter grew in ``persist`` readings in a row, or beyond its bucket."""
        st = self.counters.get(name)
        return st is not None and st.delta is not None and (st.streak >= self.persist or st.exceeded)

    def any_spiking(self, names: Iterable[str]) -> bool:
        return any(self.spiking(n) for n in names)
