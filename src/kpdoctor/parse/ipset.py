"""``ipset save`` and ``ipset list`` output: each set's type and members, as a packet matches them.

IPVS mode keeps its Service addresses in ipsets (``KUBE-CLUSTER-IP`` holds ``10.96.0.10,udp:53``,
``KUBE-NODE-PORT-TCP`` the NodePorts, ``KUBE-LOOP-BACK`` ``ip,proto:port,ip`` triples for hairpin
masquerade) and its iptables rules match them with ``-m set --match-set NAME dst,dst``: a rule
is evaluated by building, from the packet, the key the set's type describes, dimension by
dimension, each from the side the match names.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from kpdoctor import lazy_re

_SAVE_CREATE = lazy_re.compile(r"^create\s+(\S+)\s+(\S+)(.*)$")
_SAVE_ADD = lazy_re.compile(r"^add\s+(\S+)\s+(\S+)")
_LIST_NAME = lazy_re.compile(r"^Name:\s*(\S+)")
_LIST_TYPE = lazy_re.compile(r"^Type:\s*(\S+)")
_LIST_HEADER = lazy_re.compile(r"^Header:\s*(.*)$")
_PORT = lazy_re.compile(r"^(?:(\w+):)?(\d{1,5})(?:-(\d{1,5}))?$")  # (more digits: no port)


@dataclass(slots=True)
class IpSet:
    """One set: its dimensions (``hash:ip,port`` -> ip, port) and members as keys."""

    name: str
    type: str
    family: int  # 4 or 6; 0 for a set of ports only (bitmap:port), which any packet can match
    line: int
    dims: tuple[str, ...]
    members: set[tuple[object, ...]] = field(default_factory=set)  # exact keys
    spans: list[tuple[tuple[object, ...], int]] = field(default_factory=list)  # keys with a net or range
    unreadable: list[str] = field(default_factory=list)
    size: int = 0
    artifact: str = ""  # the evidence file it was read from (set by the reader of the files)

    def add(self, member: str) -> None:
        key = self._key(member)
        if key is None:
            self.unreadable.append(member)
            return
        self.size += 1
        if any(isinstance(k, tuple) and len(k) == 3 for k in key):
            self.spans.append((key, self.size))
        else:
            self.members.add(key)

    def _key(self, member: str) -> tuple[object, ...] | None:
        parts = member.split(",")
        if len(parts) != len(self.dims):
            return None
        key: list[object] = []
        for dim, part in zip(self.dims, parts, strict=True):
            if dim in ("ip", "net"):
                try:
                    net = ipaddress.ip_network(part, strict=False)
                except ValueError:
                    return None
                if net.num_addresses == 1:
                    key.append(int(net.network_address))
                else:
                    key.append(("span", int(net.network_address), int(net.broadcast_address)))
            elif dim == "port":
                m = _PORT.match(part)
                if m is None:
                    return None
                proto = (m.group(1) or "tcp").lower() if not self.type.startswith("bitmap") else None
                lo = int(m.group(2))
                hi = int(m.group(3)) if m.group(3) else lo
                key.append((proto, lo) if lo == hi else ("span", (proto, lo), (proto, hi)))
            else:
                key.append(part)
        return tuple(key)

    def holds(self, key: tuple[object, ...]) -> bool:
        """Is ``key`` (one value per dimension, as :meth:`_key` builds them) a member?"""
        if key in self.members:
            return True
        return any(all(_within(v, m) for v, m in zip(key, member, strict=True)) for member, _ in self.spans)


def _within(v: object, m: object) -> bool:
    if isinstance(m, tuple) and len(m) == 3 and m[0] == "span":
        lo, hi = m[1], m[2]
        try:
            return type(v) is type(lo) and lo <= v <= hi  # type: ignore[operator]
        except TypeError:
            return False
    return v == m


def _dims(set_type: str) -> tuple[str, ...]:
    """``hash:ip,port,net`` -> ("ip", "port", "net")."""
    _, _, rest = set_type.partition(":")
    return tuple(d.strip() for d in rest.split(",") if d.strip())


def _family(set_type: str, header: str) -> int:
    if set_type.startswith("bitmap:port"):
        return 0
    return 6 if re.search(r"\bfamily\s+inet6\b", header) else 4


def looks_like_ipset(text: str) -> bool:
    """``ipset save`` (create/add lines) or ``ipset list`` (Name:/Type: blocks)."""
    head = text[:65536]
    if re.search(r"^create\s+\S+\s+(hash|bitmap|list):\S+", head, re.M):
        return True
    return bool(re.search(r"^Name:\s*\S+\s*\nType:\s*(hash|bitmap|list):", head, re.M))


def parse_ipsets(text: str, first_line: int = 1) -> dict[str, IpSet]:
    """Every set of an ``ipset save`` or ``ipset list`` output; what cannot be read is left out
    (a member that does not fit its type is kept in the set's ``unreadable``)."""
    sets: dict[str, IpSet] = {}
    current: IpSet | None = None
    in_members = False
    pending_name: tuple[str, int] | None = None
    for i, raw in enumerate(text.splitlines()):
        line = raw.strip()
        ln = first_line + i
        if m := _SAVE_CREATE.match(line):
            s = IpSet(m.group(1), m.group(2), _family(m.group(2), m.group(3)), ln, _dims(m.group(2)))
            sets[s.name] = s
            continue
        if m := _SAVE_ADD.match(line):
            target = sets.get(m.group(1))
            if target is not None:
                target.add(m.group(2))
            continue
        if m := _LIST_NAME.match(line):
            pending_name, current, in_members = (m.group(1), ln), None, False
            continue
        if (m := _LIST_TYPE.match(line)) and pending_name is not None:
            current = IpSet(pending_name[0], m.group(1), _family(m.group(1), ""), pending_name[1], _dims(m.group(1)))
            sets[current.name] = current
            continue
        if current is not None and (m := _LIST_HEADER.match(line)):
            current.family = _family(current.type, m.group(1))
            continue
        if current is not None and line == "Members:":
            in_members = True
            continue
        if in_members and current is not None:
            if not line:
                in_members = False
                continue
            current.add(line.split()[0])
    return sets
