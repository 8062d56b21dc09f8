"""Connect times from load-test tools (ApacheBench's "Connection Times (ms)" table, hey's
"DNS+dialup" line): where they sit tells dropped SYNs apart from slow servers.

Linux retransmits an unanswered SYN after 1 s, then 2 s more (3 s), then 4 s more (7 s): connect
times bunched at those marks are first SYNs the path dropped, whatever the tool.
"""

from __future__ import annotations

from dataclasses import dataclass

from kpdoctor import lazy_re

# A connect time this close to a retransmit mark (and not below it) is that mark.
SYN_RETRANSMIT_MS = (1000.0, 3000.0, 7000.0)
_NEAR = 0.08

# ab:  "Connect:        0  722 457.9    999    3009" (min mean [+/-sd] median max)
_AB_HEADER = lazy_re.compile(r"^\s*Connection Times \(ms\)\s*$")
_AB_CONNECT = lazy_re.compile(r"^\s*Connect:\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)\s+(\d+)\s*$")
# hey: "  DNS+dialup:   0.0008 secs, 0.0001 secs, 1.0310 secs" (average, fastest, slowest)
_HEY_DIAL = lazy_re.compile(r"^\s*DNS\+dialup:\s+([\d.]+) secs,\s+([\d.]+) secs,\s+([\d.]+) secs\s*$")


@dataclass(frozen=True, slots=True)
class ConnectTimes:
    """One tool's summary of how long connecting took, in milliseconds."""

    tool: str  # "ab" | "hey"
    line: int  # 0-based line of the row in the text
    text: str
    fastest: float
    typical: float  # ab's median, hey's average
    slowest: float

    @property
    def most_waited(self) -> float | None:
        """The retransmit mark the typical connection waited for, or None."""
        return at_mark(self.typical)

    @property
    def some_waited(self) -> float | None:
        """The retransmit mark the slowest connection waited for, or None."""
        return at_mark(self.slowest)


def at_mark(ms: float) -> float | None:
    """The SYN retransmit mark ``ms`` sits at (within 8 %, never below it by more), or None."""
    for mark in SYN_RETRANSMIT_MS:
        if mark * (1 - _NEAR / 4) <= ms <= mark * (1 + _NEAR):
            return mark
    return None


def connect_times(text: str) -> list[ConnectTimes]:
    """Every connect-time summary in ``text``."""
    out: list[ConnectTimes] = []
    lines = text.splitlines()
    in_ab = False
    for i, ln in enumerate(lines):
        if _AB_HEADER.match(ln):
            in_ab = True
            continue
        if in_ab and (m := _AB_CONNECT.match(ln)):
            mn, _mean, _sd, median, mx = m.groups()
            out.append(ConnectTimes("ab", i, ln.strip(), float(mn), float(median), float(mx)))
            in_ab = False
            continue
        if m := _HEY_DIAL.match(ln):
            avg, fast, slow = (float(x) * 1000 for x in m.groups())
            out.append(ConnectTimes("hey", i, ln.strip(), fast, avg, slow))
    return out


def looks_like_load_test(text: str) -> bool:
    """Every text the sniffer cannot type passes here: the literals first, the rows only then."""
    return ("Connection Times (ms)" in text or "DNS+dialup:" in text) and bool(connect_times(text))
