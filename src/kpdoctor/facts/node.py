"""The node's own state (seed 004): sysctls, drop counters, listeners, links, kernel log, conntrack.

Counters are totals since boot. One snapshot says what happened at some time since the node
started; two snapshots (a bundle's ``node/counters/T0`` and ``T1``, or two outputs of the same
command, in the order given) say what is happening now. A check asks :meth:`NodeState.change`
for the growth between the first and last snapshot, and :meth:`NodeState.total` when there is
only one, and words its finding accordingly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.model import Cite
from kpdoctor.parse.conntrack import (
    ConntrackEntry,
    ConntrackStats,
    parse_conntrack_entries,
    parse_conntrack_stats,
    parse_conntrack_summaries,
    parse_nf_conntrack_stat,
)
from kpdoctor.parse.kernel_log import KernelLine, parse_kernel_log
from kpdoctor.parse.links import Link, parse_ip_link
from kpdoctor.parse.neigh_stats import counters_of as neighbour_counters
from kpdoctor.parse.netstat import Counters, parse_netstat_s, parse_nstat
from kpdoctor.parse.shellwords import unwrapped
from kpdoctor.parse.sockets import Connection, Listener, parse_connections, parse_ss_listen
from kpdoctor.parse.softnet import counters_of as softnet_counters
from kpdoctor.parse.sysctl import COMPLETE, Sysctl, int_values, listing_of, parse_sysctl

if TYPE_CHECKING:
    from kpdoctor.facts import Facts

CONNTRACK = "conntrack."  # prefix of conntrack's own counters (conntrack.insert_failed ...)


@dataclass(frozen=True, slots=True)
class Setting:
    """One sysctl as read, with where."""

    name: str
    value: str
    cite: Cite

    def ints(self) -> list[int]:
        return int_values(self.value)

    def int(self) -> int | None:
        v = self.ints()
        return v[0] if v else None


@dataclass(frozen=True, slots=True)
class Sample:
    """A counter's value in one snapshot."""

    value: int
    cite: Cite
    snapshot: str  # T0, T1, or the artifact (name:first line)
    time: datetime | None


@dataclass(frozen=True, slots=True)
class Change:
    """A counter between the first and the last snapshot."""

    first: Sample
    last: Sample

    @property
    def growth(self) -> int:
        return self.last.value - self.first.value

    @property
    def seconds(self) -> float | None:
        s = interval(self.first.time, self.last.time)
        return s if s is not None and s > 0 else None

    @property
    def rate(self) -> float | None:
        s = self.seconds
        return self.growth / s if s else None

    def describe(self, name: str) -> str:
        when = f"in {self.seconds:.1f} s ({self.rate:.2f}/s)" if self.seconds else "between the two snapshots"
        return f"{name} grew by {self.growth} {when} ({self.first.value} -> {self.last.value})"


def interval(first: datetime | None, last: datetime | None) -> float | None:
    """Seconds from ``first`` to ``last`` (negative when given the other way round), or None when
    either is unknown or one has a zone and the other not."""
    if first is None or last is None:
        return None
    try:
        return (last - first).total_seconds()
    except TypeError:
        return None


_TIME_FORMATS = (
    "%a %b %d %H:%M:%S %Z %Y",  # date(1) in the C locale
    "%a %d %b %Y %H:%M:%S %Z",
    "%a %b %d %H:%M:%S %Y",
    "%Y-%m-%d %H:%M:%S",
)


def parse_time(text: str | None) -> datetime | None:
    """When a snapshot was taken: ISO 8601 (manifests) or ``date`` output (transcripts)."""
    if not text:
        return None
    t = text.strip()
    try:
        return datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        pass
    t = re.sub(r"\s+", " ", t)
    for fmt in _TIME_FORMATS:
        try:
            return datetime.strptime(t, fmt)
        except ValueError:
            continue
    return None


POD_PREFIXES = ("cali", "veth", "lxc", "azv", "eni", "gke", "vethwe")  # CNIs' names for Pod veths


def pod_facing(ln: Link) -> bool:
    """A veth whose peer lives in another network namespace (a Pod), or a CNI's veth by name."""
    if ln.kind not in (None, "veth"):
        return False
    return ln.link_netnsid is not None or ln.name.startswith(POD_PREFIXES)


def _ordered(arts: Iterable[Artifact]) -> list[Artifact]:
    """Snapshots in time order: T0 before T1, else as given (command line, transcript order)."""
    indexed = list(enumerate(arts))
    indexed.sort(key=lambda ia: (ia[1].snapshot or "", ia[0]))
    return [a for _, a in indexed]


def _told(a: Artifact) -> str:
    """What names an output besides its text: the command that printed it, and its file's name."""
    return f"{a.attrs.get('command', '')} {a.name}"


class NodeState:
    """Parsed node evidence, each artifact parsed once."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts

    # -- sysctls ------------------------------------------------------------------------
    @cached_property
    def sysctls(self) -> dict[str, Setting]:
        return self._sysctl_listings[0]

    @cached_property
    def sysctl_complete(self) -> Cite | None:
        """The first line of a complete listing of the node's settings (``sysctl -a``), or None
        when every listing given is partial: then a key not shown is unknown, never off."""
        return self._sysctl_listings[1]

    @cached_property
    def _sysctl_listings(self) -> tuple[dict[str, Setting], Cite | None]:
        out: dict[str, Setting] = {}
        complete: Cite | None = None
        for a in self.facts.of(Kind.SYSCTL):
            text = a.read_text()
            name = a.attrs.get("sysctl")
            written = a.attrs.get("value")
            if name and written is not None and text.strip():
                # a value written by a command (`echo 0 > /proc/sys/...`): the node's from then on
                line = text.strip().splitlines()[0]
                out[name] = Setting(name, " ".join(written.split()), Cite(a.name, a.first_line, line))
                continue
            if name and text.strip() and "=" not in text:  # `cat /proc/sys/...` or `sysctl -n NAME`
                value = " ".join(text.split())
                out[name] = Setting(name, value, Cite(a.name, a.first_line, text.strip().splitlines()[0]))
                continue
            parsed: dict[str, Sysctl] = parse_sysctl(text, a.first_line)
            for name, s in parsed.items():
                out[name] = Setting(name, s.value, Cite(a.name, s.line, s.text))
            listing = listing_of(a.attrs.get("command"), parsed)
            if listing == COMPLETE and complete is None and parsed:
                first = min(parsed.values(), key=lambda s: s.line)
                complete = Cite(a.name, first.line, f"a complete listing of {len(parsed)} settings")
        return out, complete

    def shows(self, prefix: str) -> bool:
        """Whether any listing given shows a setting under ``prefix`` (``net.ipv4.vs.``)."""
        return any(n.startswith(prefix) for n in self.sysctls)

    def absent(self, prefix: str) -> Cite | None:
        """Proof that no setting under ``prefix`` exists on the node (a complete listing without
        one), or None: unknown, when no complete listing was given or one shows it."""
        if self.sysctl_complete is None or self.shows(prefix):
            return None
        return self.sysctl_complete

    def setting(self, name: str) -> Setting | None:
        return self.sysctls.get(name)

    # -- counters -----------------------------------------------------------------------
    def _series(
        self, kind: Kind, parse: Callable[[str, int], ConntrackStats | Counters | None]
    ) -> list[tuple[Artifact, ConntrackStats | Counters]]:
        out = []
        for a in _ordered(self.facts.of(kind)):
            parsed = parse(a.text, a.first_line)
            if parsed is not None and (not isinstance(parsed, Counters) or parsed.values):
                out.append((a, parsed))
        return out

    @cached_property
    def _counter_sources(self) -> list[list[tuple[Artifact, ConntrackStats | Counters]]]:
        """Each source of counters as its own series (two kinds never mix in one change)."""
        return [
            self._series(Kind.CONNTRACK_STATS, parse_conntrack_stats),
            self._series(Kind.NF_CONNTRACK_STAT, parse_nf_conntrack_stat),
            self._series(Kind.NSTAT, parse_nstat),
            self._series(Kind.NETSTAT, parse_netstat_s),
            [
                (a, c)
                for a in _ordered(self.facts.of(Kind.NEIGH_STATS))
                if (c := neighbour_counters(a.text, a.first_line, _told(a))).values
            ],
            self._series(Kind.SOFTNET_STAT, softnet_counters),
        ]

    def samples(self, name: str) -> list[Sample]:
        """The counter in each snapshot of the best source holding it (most snapshots first)."""
        best: list[Sample] = []
        for series in self._counter_sources:
            got = [s for s in (self._sample(a, p, name) for a, p in series) if s is not None]
            if len(got) > len(best):
                best = got
        return best

    def _sample(self, a: Artifact, parsed: ConntrackStats | Counters, name: str) -> Sample | None:
        when = parse_time(a.attrs.get("time"))
        label = a.snapshot or f"{a.name}:{a.first_line}"
        if isinstance(parsed, ConntrackStats):
            if not name.startswith(CONNTRACK):
                return None
            key = name[len(CONNTRACK) :]
            if key not in parsed.totals:
                return None
            return Sample(parsed.totals[key], Cite(a.name, parsed.line, parsed.text), label, when)
        if name not in parsed.values:
            return None
        line, text = parsed.lines.get(name, (a.first_line, name))
        return Sample(parsed.values[name], Cite(a.name, line, text), label, when)

    def change(self, name: str) -> Change | None:
        """Growth between the first and last snapshot, when there are two."""
        s = self.samples(name)
        if len(s) < 2 or s[0].snapshot == s[-1].snapshot:
            return None
        return Change(s[0], s[-1])

    def total(self, name: str) -> Sample | None:
        """The latest value (a total since boot)."""
        s = self.samples(name)
        return s[-1] if s else None

    @cached_property
    def conntrack_entries_total(self) -> tuple[int, Cite] | None:
        """The table's size from the counters' ``entries`` (latest snapshot), if shown."""
        for series in self._counter_sources:
            for a, p in reversed(series):
                if isinstance(p, ConntrackStats) and p.entries is not None:
                    return p.entries, Cite(a.name, p.line, p.text)
        return None

    # -- sockets, links, kernel log, conntrack table -------------------------------------
    @cached_property
    def listeners(self) -> list[tuple[Artifact, Listener]]:
        """Listening sockets of the latest snapshot that has them."""
        arts = _ordered(self.facts.of(Kind.LISTENERS))
        for a in reversed(arts):
            got = parse_ss_listen(a.text, a.first_line)
            if got:
                return [(a, ls) for ls in got]
        return []

    @cached_property
    def connections(self) -> list[tuple[Artifact, Connection]]:
        """Connected sockets of every socket listing given (`netstat -tanp`, `ss -tanp`)."""
        return [(a, c) for a in self.facts.of(Kind.LISTENERS) for c in parse_connections(a.text, a.first_line)]

    @cached_property
    def links(self) -> list[tuple[Artifact, Link]]:
        out: list[tuple[Artifact, Link]] = []
        seen: set[str] = set()
        for a in self.facts.of(Kind.IP_LINK):
            for ln in parse_ip_link(a.text, a.first_line):
                if ln.name not in seen:
                    seen.add(ln.name)
                    out.append((a, ln))
        return out

    @cached_property
    def kernel_log(self) -> list[tuple[Artifact, KernelLine]]:
        return [(a, k) for a in self.facts.of(Kind.KERNEL_LOG) for k in parse_kernel_log(a.read_text(), a.first_line)]

    @cached_property
    def conntrack_listed(self) -> tuple[int, Cite] | None:
        """The largest count of the table's entries a listing gave: a ``conntrack -L`` summary
        (``N flow entries have been shown``), or the lines of ``conntrack -L`` or
        ``/proc/net/nf_conntrack`` counted whole (``| wc -l``, no grep between): at least that
        many entries were in the table then (``conntrack -L`` lists one family, and only what
        its filters select)."""
        shown: list[tuple[int, Cite]] = [
            (s.count, Cite(a.name, s.line, s.text))
            for a in self.facts.of(Kind.CONNTRACK_ENTRIES)
            for s in parse_conntrack_summaries(a.read_text(), a.first_line)
            if s.verb == "shown"
        ]
        for c, a in self.facts.line_counts:
            words = unwrapped(list(c.source))
            whole = not c.patterns and len(c.command.split("|")) == 2  # the listing, then wc
            listing = c.program == "conntrack" and ("-L" in words or "--dump" in words)
            if whole and (listing or (c.program == "cat" and words[-1:] == ["/proc/net/nf_conntrack"])):
                shown.append((c.count, Cite(a.name, c.line, f"{c.command}: {c.text}")))
        return max(shown, key=lambda x: x[0], default=None)

    @cached_property
    def conntrack_entries(self) -> list[tuple[Artifact, ConntrackEntry]]:
        return [
            (a, e)
            for a in self.facts.of(Kind.CONNTRACK_ENTRIES)
            for e in parse_conntrack_entries(a.read_text(), a.first_line)
        ]
