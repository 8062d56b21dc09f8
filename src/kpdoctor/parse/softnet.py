"""``/proc/net/softnet_stat``: each CPU's receive path, and the packets it dropped before any
protocol saw them.

net/core/net-procfs.c (softnet_seq_show) prints one row per online CPU, no header, 8-digit hex
numbers separated by one space: ``processed``, ``dropped`` (the input backlog held
net.core.netdev_max_backlog packets: enqueue_to_backlog dropped this one), ``time_squeeze``
(the receive softirq ran out of budget or time with work left: not a loss), five zeros (``was
fastroute``), ``cpu_collision`` (0 since 4.x), ``received_rps`` (2.6.35), ``flow_limit_count``
(packets the RPS flow limit dropped, 3.11); 9 to 11 columns up to Linux 5.9, then the backlog's length and the CPU's
index (13, 5.10), the two queues' lengths (15, 6.x), time and budget squeezes apart (17). The
five zeros tell its rows from other /proc/net/stat tables' (whose fourth to eighth columns
count).

Nothing here raises.
"""

from __future__ import annotations

from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.parse.evidence_shape import EvidenceShape
from kpdoctor.parse.netstat import Counters

_HEX = r"[0-9a-f]{8}"
# processed dropped time_squeeze, 0 0 0 0 0 (was fastroute), cpu_collision [received_rps flow_limit_count ...]
ROW = lazy_re.compile(rf"^{_HEX} {_HEX} {_HEX}(?: 00000000){{5}}(?: {_HEX}){{1,9}}\s*$")


@dataclass(frozen=True, slots=True)
class SoftnetRow:
    """One CPU's row."""

    line: int
    text: str
    cpu: int  # the row's place (the CPU's index column from 5.10, else its order)
    processed: int
    dropped: int
    time_squeeze: int
    flow_limit_count: int


def parse_softnet(text: str, first_line: int = 1) -> list[SoftnetRow]:
    """Every CPU's row, in order (other lines skipped)."""
    out: list[SoftnetRow] = []
    for ln, raw in enumerate(text.splitlines(), first_line):
        line = raw.strip()
        if not ROW.match(line):
            continue
        v = [int(w, 16) for w in line.split()]
        cpu = v[12] if len(v) >= 13 else len(out)
        out.append(SoftnetRow(ln, line[:300], cpu, v[0], v[1], v[2], v[10] if len(v) >= 11 else 0))
    return out


def counters_of(text: str, first_line: int = 1) -> Counters:
    """The CPUs' rows summed as counters ``softnet.<name>``, each cited at the row that counted
    most of it (for comparing snapshots)."""
    rows = parse_softnet(text, first_line)
    out = Counters(source="/proc/net/softnet_stat")
    for name in ("processed", "dropped", "time_squeeze", "flow_limit_count"):
        if rows:
            top = max(rows, key=lambda r: getattr(r, name))
            out.values[f"softnet.{name}"] = sum(getattr(r, name) for r in rows)
            out.lines[f"softnet.{name}"] = (top.line, top.text)
    return out


SHAPE = EvidenceShape(
    Kind.SOFTNET_STAT,
    "softnet-stat",
    ROW,
    parse_softnet,
    # /proc/net/softnet_stat on this project's machine (Linux 6.18, two CPUs: 15 columns)
    example=(
        "00007402 00000000 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 "
        "00000000 00000000 00000000 00000000\n"
        "0000b4aa 00000000 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 "
        "00000000 00000001 00000000 00000000\n"
    ),
)
