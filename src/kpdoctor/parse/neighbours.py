"""The neighbour (ARP/NDP) entries a node lists: ``ip neigh`` and net-tools' ``arp -n`` / ``arp -a``.

What they say for the node: how many neighbours it holds. The kernel keeps one table per family
for every network namespace together (net/core/neighbour.c), refusing new entries at
gc_thresh3 (1024 by default); a listing shows the entries of the namespace it was run in, so its
count is at least the table's share of that namespace: as many rows as gc_thresh3 means the table
is at its limit.

- ``ip neigh`` (iproute2 ip/ipneigh.c print_neigh): ``ADDRESS [dev IF] [lladdr MAC] [router]
  [proxy] [extern_learn] [ref N] [used A/B/C probes N] STATE`` (``dev`` left out when the listing
  was asked for one device; ``-s`` adds the counters, iproute2 6.1 without a space before
  ``probes``); states NUD_*: PERMANENT NOARP REACHABLE STALE NONE INCOMPLETE DELAY PROBE FAILED.
  busybox's ``ip neigh`` prints the same.
- ``arp -n`` (net-tools arp.c): a header ``Address HWtype HWaddress Flags Mask Iface``, then
  ``ADDRESS ether MAC FLAGS [MASK] IF`` or ``ADDRESS (incomplete) IF``; ``arp -a``: ``? (ADDRESS)
  at MAC [ether] [PERM] on IF`` or ``at <incomplete> on IF``.

Nothing here raises.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.parse.evidence_shape import EvidenceShape

_MAC = r"[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}"
_STATES = r"PERMANENT|NOARP|REACHABLE|STALE|NONE|INCOMPLETE|DELAY|PROBE|FAILED"
IP_NEIGH_ROW = lazy_re.compile(
    rf"^(?P<ip>[0-9a-fA-F][0-9a-fA-F.:]{{1,38}})\s+(?:dev\s+(?P<dev>\S+)\s+)?(?:lladdr\s+(?P<mac>{_MAC})\s+)?"
    rf"(?:(?:router|proxy|extern_learn)\s+)*(?:ref\s+\d+\s+)?(?:used\s+\S+?\s*probes\s+\d+\s+)?"
    rf"(?P<state>{_STATES})(?:\s+\S+)*\s*$"
)
ARP_N_ROW = lazy_re.compile(
    rf"^(?P<ip>\d{{1,3}}(?:\.\d{{1,3}}){{3}})\s+(?:ether\s+(?P<mac>{_MAC})\s+[CMPAs]+\s+(?:\S+\s+)?|\(incomplete\)\s+)"
    r"(?P<dev>[\w.@:-]+)\s*$"
)
ARP_A_ROW = lazy_re.compile(
    rf"^\S+ \((?P<ip>[0-9a-fA-F.:]+)\) at (?:(?P<mac>{_MAC}) \[\w+\]|<incomplete>)(?: PERM)? on (?P<dev>\S+)"
)
ARP_HEADER = lazy_re.compile(r"^Address\s+HWtype\s+HWaddress\s+Flags\s+Mask\s+Iface\s*$")
# any of the three rows, its groups unnamed (one pattern may hold a name once)
SIGNATURE = lazy_re.compile(
    re.sub(r"\(\?P<\w+>", "(?:", "|".join(rx.pattern for rx in (IP_NEIGH_ROW, ARP_N_ROW, ARP_A_ROW)))
)


@dataclass(frozen=True, slots=True)
class Neighbour:
    """One entry as a listing shows it."""

    line: int
    text: str
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    interface: str | None
    mac: str | None  # lower case; None while unresolved (INCOMPLETE, FAILED)
    state: str | None  # ip neigh's NUD state; None for arp's rows


def parse_neighbours(text: str, first_line: int = 1) -> list[Neighbour]:
    """Every entry of ``ip neigh`` / ``arp`` output, in order (other lines skipped)."""
    out: list[Neighbour] = []
    for ln, raw in enumerate(text.splitlines(), first_line):
        line = raw.strip()
        if len(line) > 400:
            continue
        m = IP_NEIGH_ROW.match(line) or ARP_N_ROW.match(line) or ARP_A_ROW.match(line)
        if m is None:
            continue
        try:
            address = ipaddress.ip_address(m["ip"])
        except ValueError:
            continue
        groups = m.groupdict()
        mac = groups.get("mac")
        out.append(Neighbour(ln, line, address, groups.get("dev"), mac.lower() if mac else None, groups.get("state")))
    return out


SHAPE = EvidenceShape(
    Kind.NEIGHBOURS,
    "neighbours",
    SIGNATURE,
    parse_neighbours,
    around=ARP_HEADER,
    # `ip neigh` in a network namespace of this project's machine (iproute2 6.1): three permanent
    # entries, one that failed to resolve, one stale
    example=(
        "10.9.0.2 dev eth0 lladdr 02:00:00:00:00:02 PERMANENT \n"
        "10.9.0.3 dev eth0 lladdr 02:00:00:00:00:03 PERMANENT \n"
        "10.9.0.4 dev eth0 lladdr 02:00:00:00:00:04 PERMANENT \n"
        "10.9.0.5 dev eth0 FAILED \n"
        "10.9.0.6 dev eth0 lladdr 02:00:00:00:00:06 STALE \n"
    ),
)
