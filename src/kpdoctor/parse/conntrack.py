"""Conntrack counters and table entries.

Why: insert races (``insert_failed``, ``clash_resolve``), a full table (``drop``, ``early_drop``) and NAT that
was or was not applied are read from conntrack's own statistics and entries.

Formats:

* ``conntrack -S``: one ``cpu=N<TAB>key=value ...`` line per CPU. The kernel decides which fields exist
  (3.x: ``searched new delete delete_list ...``; 4.x: ``found invalid ignore ...``; 5.10+: ``clash_resolve``
  instead of ``ignore``; 5.15+: ``chaintoolong``). Old conntrack-tools print ``name<TAB><TAB>value`` lines
  instead, decimal values from ``/proc`` (from its first CPU row only, so they are not node totals).
* ``/proc/net/stat/nf_conntrack``: a header, then one hex row per possible CPU. ``entries`` repeats the
  global count on every row. Column 2 is ``searched`` up to 5.9 and ``clashres`` from 5.10, column 8 is
  ``delete_list`` up to 5.14 and ``chainlength`` from 5.15; ``icmp_error`` holds the ``error`` counter.
* ``conntrack -L``'s summary on stderr (src/conntrack.c, 1.4.0-1.4.9: the program's banner
  ``conntrack vX (conntrack-tools): `` then ``N flow entries have been shown.``; ``deleted``,
  ``updated``, ``created`` for -D, -U, -I). It says how many entries the listing held, whatever a
  pipe did to the entries themselves (``conntrack -L | grep 6379`` still prints it on the terminal):
  at least that many are in the table (-L lists one family, IPv4 unless ``-f ipv6``, and only what
  its filters select).
* ``conntrack -L`` and ``/proc/net/nf_conntrack`` (the same, prefixed by ``ipv4     2`` / ``ipv6     10``).
  With ``net.netfilter.nf_conntrack_timestamp=1`` both add ``delta-time=N`` (the entry's age in seconds)
  and ``-o ktimestamp`` a ``[start=Sat Nov 28 13:14:22 2026]`` stamp; with ``nf_conntrack_acct=1``,
  ``packets=`` and ``bytes=`` follow each tuple.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from kpdoctor import lazy_re
from kpdoctor.parse.numbers import MAX_DIGITS, is_int, to_int

# /proc column names -> the names ctnetlink (conntrack -S) uses.
_ALIASES = {"icmp_error": "error", "clashres": "clash_resolve", "chainlength": "chaintoolong"}
_NAME = lazy_re.compile(r"^[a-z][a-z0-9_]*$")
# Every counter name conntrack -S or /proc has printed; a row must have at least one of them.
_KNOWN = {
    "entries", "searched", "found", "new", "invalid", "ignore", "delete", "delete_list", "insert", "insert_failed",
    "drop", "early_drop", "error", "icmp_error", "search_restart", "clash_resolve", "clashres", "chaintoolong",
    "chainlength", "expect_new", "expect_create", "expect_delete", "unknown1", "unknown2", "unknown3", "unknown4",
}  # fmt: skip


@dataclass(slots=True)
class ConntrackStats:
    """Counters summed over CPUs (``entries`` is global, taken once)."""

    totals: dict[str, int] = field(default_factory=dict)
    cpus: int = 0
    entries: int | None = None
    line: int = 0  # file line of the first data row
    text: str = ""


def _canonical(name: str) -> str:
    return _ALIASES.get(name, name)


def _add(stats: ConntrackStats, values: dict[str, int], line: int, text: str) -> None:
    if not stats.cpus:
        stats.line, stats.text = line, text
    stats.cpus += 1
    for k, v in values.items():
        if k == "entries":
            stats.entries = v if stats.entries is None else max(stats.entries, v)
        else:
            stats.totals[k] = stats.totals.get(k, 0) + v


def _kv_row(raw: str) -> dict[str, int] | None:
    """``[cpu=N] key=value ...`` with integer values only, else None."""
    values: dict[str, int] = {}
    for tok in raw.split():
        key, eq, val = tok.partition("=")
        if not eq or not _NAME.match(key):
            return None
        n = to_int(val)
        if n is None:
            return None
        if key != "cpu":
            values[_canonical(key)] = n
    return values if any(_canonical(k) in values for k in _KNOWN) else None


_SUMMARY = lazy_re.compile(r"^([a-z][a-z0-9_]*)\s+(\d+)$")


def parse_conntrack_stats(text: str, first_line: int = 1) -> ConntrackStats | None:
    """``conntrack -S``: per-CPU ``key=value`` rows (any field set), or the old per-counter summary."""
    stats = ConntrackStats()
    summary: dict[str, int] = {}
    summary_at: tuple[int, str] | None = None
    for i, raw in enumerate(text.splitlines()):
        s = raw.strip()
        if not s:
            continue
        row = _kv_row(s)
        if row is not None:
            _add(stats, row, first_line + i, s)
            continue
        m = _SUMMARY.match(s)
        value = to_int(m.group(2)) if m else None
        if m and value is not None and m.group(1) in _KNOWN:
            summary[_canonical(m.group(1))] = value
            if summary_at is None:
                summary_at = (first_line + i, s)
    if not stats.cpus and summary and summary_at is not None:
        _add(stats, summary, *summary_at)
    return stats if stats.cpus else None


def parse_nf_conntrack_stat(text: str, first_line: int = 1) -> ConntrackStats | None:
    """``/proc/net/stat/nf_conntrack``: a header line, then hex rows keyed by the header's names."""
    stats = ConntrackStats()
    header: list[str] | None = None
    for i, raw in enumerate(text.splitlines()):
        toks = raw.split()
        if not toks:
            continue
        if "entries" in toks and "found" in toks and all(_NAME.match(t) for t in toks):  # not arp_cache's
            header = [_canonical(t) for t in toks]
            continue
        if header is None or len(toks) != len(header) or any(len(t) > MAX_DIGITS or not t.isascii() for t in toks):
            continue
        try:
            values = [int(t, 16) for t in toks]
        except ValueError:
            continue
        _add(stats, dict(zip(header, values, strict=True)), first_line + i, raw.strip())
    return stats if stats.cpus else None


@dataclass(slots=True)
class ConntrackEntry:
    """One tracked flow: the original and the reply tuple."""

    proto: str
    state: str | None
    src: str
    dst: str
    sport: int | None
    dport: int | None
    reply_src: str
    reply_dst: str
    reply_sport: int | None
    reply_dport: int | None
    flags: tuple[str, ...]
    line: int
    text: str = ""
    timeout: int | None = None  # seconds left, as printed
    family: str | None = None  # ipv4 / ipv6 when the line says (/proc, -o extended)
    # seconds since the entry was created (``delta-time=``, printed when the kernel stamps entries:
    # net.netfilter.nf_conntrack_timestamp=1), None when not shown
    age: int | None = None

    @property
    def snat(self) -> bool:
        """Source NAT: the reply does not come back to the original source."""
        if self.reply_dst != self.src:
            return True
        return self.sport is not None and self.reply_dport is not None and self.reply_dport != self.sport

    @property
    def dnat(self) -> bool:
        """Destination NAT: the reply comes from somewhere other than the original destination."""
        if self.reply_src != self.dst:
            return True
        return self.dport is not None and self.reply_sport is not None and self.reply_sport != self.dport


def _addr(v: str) -> str:
    """``0000:...:0001`` (``/proc``) -> ``::1``; anything unparsable is kept."""
    if ":" not in v:
        return v
    try:
        return ipaddress.ip_address(v).compressed
    except ValueError:
        return v


def _port(v: str | None) -> int | None:
    n = to_int(v) if v is not None and not v.startswith("-") else None
    return n if n is not None and n <= 65535 else None


def _seconds(v: str) -> int | None:
    return to_int(v) if not v.startswith("-") else None


_EVENT = lazy_re.compile(r"^\[[^\]]*\]$")  # conntrack -E "[NEW]", "-o timestamp" "[1700000000.123]"


# An address masked before posting, as a label in angle brackets: `src=<SRC IP A>`. One word here
# (the same label twice is the same address: NAT is still told from the tuples).
MASKED = r"<[^<>=\n]*>"
_MASK = lazy_re.compile(r"(?<==)" + MASKED)


def _entry(s: str, line: int) -> ConntrackEntry | None:
    toks = _MASK.sub(lambda m: m.group(0).replace(" ", "_"), s).split()
    family = None
    while toks and _EVENT.match(toks[0]):
        toks.pop(0)
    if len(toks) >= 2 and toks[0] in ("ipv4", "ipv6") and is_int(toks[1]):
        family, toks = toks[0], toks[2:]
    if len(toks) < 3 or not is_int(toks[1]) or "=" in toks[0]:
        return None
    proto = toks[0]
    rest = toks[2:]
    timeout = None
    if rest and is_int(rest[0]):
        timeout = to_int(rest.pop(0))
    state = None
    if rest and "=" not in rest[0] and not rest[0].startswith("["):
        state = rest.pop(0)
    tuples: list[dict[str, str]] = []
    flags: list[str] = []
    age = None
    for tok in rest:
        if tok.startswith("[") and tok.endswith("]"):
            flags.append(tok[1:-1])
            continue
        key, eq, val = tok.partition("=")
        if not eq:
            continue
        if key == "delta-time":
            age = _seconds(val)
            continue
        if key == "src":
            if len(tuples) == 2:
                break  # a third tuple (e.g. an expectation's master): not ours
            tuples.append({})
        if tuples and key in ("src", "dst", "sport", "dport") and key not in tuples[-1]:
            tuples[-1][key] = val
    if len(tuples) != 2 or not all("src" in t and "dst" in t for t in tuples):
        return None
    o, r = tuples
    return ConntrackEntry(
        proto=proto,
        state=state,
        src=_addr(o["src"]),
        dst=_addr(o["dst"]),
        sport=_port(o.get("sport")),
        dport=_port(o.get("dport")),
        reply_src=_addr(r["src"]),
        reply_dst=_addr(r["dst"]),
        reply_sport=_port(r.get("sport")),
        reply_dport=_port(r.get("dport")),
        flags=tuple(flags),
        line=line,
        text=s,
        timeout=timeout,
        family=family,
        age=age,
    )


# An entry quoted inside a sentence: `Response : "udp  17 27 src=10.0.0.5 dst=... [UNREPLIED] ..."`
# (straight or typographic quotes, backticks); a line that starts with one is matched as it is.
PROTOCOLS = "tcp|udp|icmp|icmpv6|sctp|dccp|gre|udplite|unknown"  # what conntrack names a flow's protocol
# An entry's start up to its first destination, as a line of `conntrack -L` begins (for typing)
ENTRY_START = r"(?:ipv[46]\s+\d+\s+)?(?:" + PROTOCOLS + r")\s+\d+\s+\d+\s.*\bsrc=(?:" + MASKED + r"|\S+) dst="
QUOTED_ENTRY = lazy_re.compile(
    r"[\"“”'‘’`]\s*((?:ipv[46]\s+\d+\s+)?(?:" + PROTOCOLS + r")\s+\d+\s+\d+\s"
    r"[^\"“”`]*?\bsrc=(?:" + MASKED + r"|\S+) dst=.*)"
)
_CLOSING_QUOTES = "\"“”'‘’`"
# conntrack's own summary (stderr), pasted on the same line: not part of the entry
_SUMMARY_TAIL = lazy_re.compile(r"\s+con+track v[\d.]+ \(conntrack-tools\):.*$")


# conntrack's summary line (see the module docstring); what it counted is the last word
SUMMARY = lazy_re.compile(
    r"\bconntrack v(\d[\w.~+-]*) \(conntrack-tools\): (\d{1,15}) flow entries have been "
    r"(shown|deleted|updated|created)\."
)
# a text that starts with a listing's summary (-L prints it first when stderr is the terminal)
SUMMARY_SHOWN_LINE = lazy_re.compile(
    r"^\s*conntrack v\d[\w.~+-]* \(conntrack-tools\): \d+ flow entries have been shown\."
)


@dataclass(frozen=True, slots=True)
class ConntrackSummary:
    """``conntrack v1.4.7 (conntrack-tools): 4 flow entries have been shown.``"""

    count: int
    verb: str  # shown (-L, -G), deleted, updated, created
    version: str  # conntrack-tools' version
    line: int
    text: str


def parse_conntrack_summaries(text: str, first_line: int = 1) -> list[ConntrackSummary]:
    """Every summary line conntrack printed, in order (one per command run)."""
    out: list[ConntrackSummary] = []
    if "flow entries have been" not in text:
        return out
    for i, raw in enumerate(text.splitlines()):
        m = SUMMARY.search(raw)
        if m is not None:
            out.append(ConntrackSummary(int(m.group(2)), m.group(3), m.group(1), first_line + i, raw.strip()))
    return out


def parse_conntrack_entries(text: str, first_line: int = 1) -> list[ConntrackEntry]:
    """``conntrack -L`` (also ``-o extended``, ``-E``) and ``/proc/net/nf_conntrack``, and entries
    quoted inside a sentence; other lines are skipped."""
    out: list[ConntrackEntry] = []
    for i, raw in enumerate(text.splitlines()):
        s = raw.strip()
        if not s or "src=" not in s:
            continue
        e = _entry(s, first_line + i)
        if e is None and (m := QUOTED_ENTRY.search(s)) is not None:
            quoted = m.group(1)
            end = min((quoted.find(q) for q in _CLOSING_QUOTES if q in quoted), default=len(quoted))
            e = _entry(_SUMMARY_TAIL.sub("", quoted[:end]).strip(), first_line + i)
        if e is not None:
            out.append(e)
    return out
