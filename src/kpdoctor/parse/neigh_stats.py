"""The kernel's neighbour (ARP/NDP) table counters: ``/proc/net/stat/arp_cache`` (and
``ndisc_cache``) and ``ip -s ntable show``.

The kernel counts, per table, each time a new neighbour could not be added because the table
held gc_thresh3 entries and a forced garbage collection freed none (net/core/neighbour.c,
neigh_alloc: the same moment it logs ``neighbor table overflow!``, rate-limited, while the
counter counts every one): ``table_fulls``. It also shows the table's entries now, and with ``ip
-s ntable`` its thresholds, so a table at its limit is seen even before a refusal.

- ``/proc/net/stat/arp_cache`` (neigh_stat_seq_show): a header naming the 13 columns (``entries
  allocs destroys hash_grows lookups hits res_failed rcv_probes_mcast rcv_probes_ucast
  periodic_gc_runs forced_gc_runs unresolved_discards table_fulls``; spaced differently before
  and after Linux 6.1), then one row of 8-digit hex numbers per possible CPU: ``entries`` is the
  table's (the same in every row), the others are that CPU's share, summed here. It exists in the
  node's (initial) network namespace only; the table itself is one for every namespace.
- ``ip -s ntable show`` (iproute2 ipntable.c): per table a block ``inet arp_cache`` / ``inet6
  ndisc_cache`` with ``thresh1 N thresh2 N thresh3 N gc_int N``, ``config ... entries N`` and
  under ``stats`` ``... table_fulls N``; then one block per device (``dev eth0``: parameters
  only, not read).

Nothing here raises.
"""

from __future__ import annotations

from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.parse.evidence_shape import EvidenceShape
from kpdoctor.parse.netstat import Counters

COLUMNS = (
    "entries", "allocs", "destroys", "hash_grows", "lookups", "hits", "res_failed", "rcv_probes_mcast",
    "rcv_probes_ucast", "periodic_gc_runs", "forced_gc_runs", "unresolved_discards", "table_fulls",
)  # fmt: skip
_PROC_HEADER = r"entries\s+allocs\s+destroys\s+hash_grows\s+lookups\s+hits\s+res_failed\s+\S+\s+\S+\s+periodic_gc_runs"
_PROC_ROW = r"[0-9a-f]{8}(?:\s+[0-9a-f]{8,16}){12}\s*$"
_TABLE = r"inet6? (?:arp_cache|ndisc_cache)\s*$"
_THRESH = r"thresh1 \d+ thresh2 \d+ thresh3 \d+"
_FULLS = r"table_fulls \d+\s*$"
# (ip -s ntable indents its lines: the indentation is allowed here, as a paste keeps it)
SIGNATURE = lazy_re.compile(rf"^\s*(?:{_PROC_HEADER}|{_TABLE}|{_THRESH}|{_FULLS})")
AROUND = lazy_re.compile(
    rf"^\s*(?:{_PROC_ROW}|config key_len|last_flush |hash_rnd |refcnt \d+ reachable|gc_stale \d+|app_probes |"
    r"anycast_delay |stats allocs |res_failed \d+ lookups|rcv_probes_mcast \d+|periodic_gc_runs \d+|dev \S+\s*$)"
)
_PAIRS = lazy_re.compile(r"\b([a-z_]+[0-9]?) (\d+)\b")
_HEADER = lazy_re.compile(rf"^{_PROC_HEADER}")
_ROW = lazy_re.compile(rf"^{_PROC_ROW}")
_TABLE_LINE = lazy_re.compile(rf"^{_TABLE}")


@dataclass(frozen=True, slots=True)
class NeighTable:
    """One neighbour table as a listing shows it; ``line``/``text``: where its refusals are counted
    (the header of /proc's rows, or ``table_fulls N``)."""

    line: int
    text: str
    table: str | None  # arp_cache, ndisc_cache; None when /proc's file name was not given
    entries: int | None
    table_fulls: int
    forced_gc_runs: int | None
    unresolved_discards: int | None
    thresh3: int | None  # ip -s ntable only (/proc's file leaves it to the gc_thresh3 sysctl)


def parse_neigh_stats(text: str, first_line: int = 1) -> list[NeighTable]:
    """Every table the text shows, in order."""
    out: list[NeighTable] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if _HEADER.match(line):
            i, got = _proc(lines, i, first_line)
            if got is not None:
                out.append(got)
            continue
        if _TABLE_LINE.match(line) and not (i + 1 < len(lines) and lines[i + 1].strip().startswith("dev ")):
            i, got = _ntable(lines, i, first_line)
            if got is not None:
                out.append(got)
            continue
        i += 1
    return out


def _proc(lines: list[str], at: int, first_line: int) -> tuple[int, NeighTable | None]:
    """/proc/net/stat/arp_cache: its header at ``at``, then its rows, summed (entries: the first)."""
    sums: dict[str, int] = {}
    i = at + 1
    while i < len(lines) and (_ROW.match(lines[i].strip()) or not lines[i].strip()):
        words = lines[i].split()
        if len(words) == len(COLUMNS):
            for name, word in zip(COLUMNS, words, strict=True):
                # entries is the table's, printed in every row; the rest are each CPU's share
                sums[name] = int(word, 16) + (sums.get(name, 0) if name != "entries" else 0)
        i += 1
    if not sums:
        return i, None
    header = lines[at].strip()[:300]
    return i, NeighTable(
        first_line + at, header, None, sums["entries"], sums["table_fulls"], sums["forced_gc_runs"],
        sums["unresolved_discards"], None,
    )  # fmt: skip


def _ntable(lines: list[str], at: int, first_line: int) -> tuple[int, NeighTable | None]:
    """``ip -s ntable``'s block of one table: its name at ``at``, its indented lines after it."""
    name = lines[at].split()[1]
    values: dict[str, int] = {}
    where: tuple[int, str] | None = None
    i = at + 1
    while i < len(lines) and lines[i].strip() and not _TABLE_LINE.match(lines[i].strip()):
        for key, value in _PAIRS.findall(lines[i]):
            values.setdefault(key, int(value))
        if "table_fulls" in lines[i]:
            where = (first_line + i, lines[i].strip()[:300])
        i += 1
    if where is None:  # no stats: `ip ntable show` without -s
        return i, None
    return i, NeighTable(
        where[0], where[1], name, values.get("entries"), values.get("table_fulls", 0), values.get("forced_gc_runs"),
        values.get("unresolved_discards"), values.get("thresh3"),
    )  # fmt: skip


TABLES = ("arp_cache", "ndisc_cache")


def table_named(told: str) -> str | None:
    """The table a command or a file name names (``cat /proc/net/stat/ndisc_cache``), if any."""
    return next((t for t in TABLES if t in told), None)


def counters_of(text: str, first_line: int = 1, told: str = "") -> Counters:
    """The tables' values as counters ``neigh.<table>.<name>`` (entries, table_fulls,
    unresolved_discards, thresh3), for comparing snapshots; ``told``: the command or file name
    that says which table /proc's rows are (``neigh.table.*`` when nothing says)."""
    out = Counters(source="neighbour table")
    named = table_named(told)
    for t in parse_neigh_stats(text, first_line):
        table = t.table or named or "table"
        for key, value in (
            ("entries", t.entries), ("table_fulls", t.table_fulls), ("unresolved_discards", t.unresolved_discards),
            ("thresh3", t.thresh3),
        ):  # fmt: skip
            name = f"neigh.{table}.{key}"
            if value is not None and name not in out.values:
                out.values[name] = value
                out.lines[name] = (t.line, t.text)
    return out


SHAPE = EvidenceShape(
    Kind.NEIGH_STATS,
    "neigh-stats",
    SIGNATURE,
    parse_neigh_stats,
    around=AROUND,
    # /proc/net/stat/arp_cache on this project's machine (Linux 6.18, two CPUs)
    example=(
        "entries  allocs   destroys hash_grows lookups  hits     res_failed rcv_probes_mcast rcv_probes_ucast "
        "periodic_gc_runs forced_gc_runs unresolved_discards table_fulls\n"
        "00000002 00000011 00000020 00000000   00000062 00000004 00000000   00000000         00000000         "
        "0000004c         00000000       00000000            00000000\n"
        "00000002 0000001c 0000000b 00000001   00000062 00000016 00000000   00000000         00000000         "
        "00000000         00000000       00000000            00000000\n"
    ),
)
