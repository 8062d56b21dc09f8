"""``ipvsadm -Ln`` output: virtual servers and their real servers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kpdoctor.parse.numbers import to_int

_VS = re.compile(r"^(TCP|UDP|SCTP|FWM)\s+(\S+)\s+(\w+)(.*)$")
_RS = re.compile(r"^\s+->\s+(\S+)\s+(\w+)\s+(\d+)\s+(\d+)\s+(\d+)")


@dataclass(slots=True)
class RealServer:
    address: str
    forward: str
    weight: int
    active: int
    inactive: int
    line: int
    text: str = ""


@dataclass(slots=True)
class VirtualServer:
    protocol: str
    address: str
    scheduler: str
    flags: str
    line: int
    text: str
    reals: list[RealServer] = field(default_factory=list)


def parse_ipvsadm_list(text: str, first_line: int = 1) -> list[VirtualServer]:
    out: list[VirtualServer] = []
    for i, raw in enumerate(text.splitlines()):
        ln = first_line + i
        m = _VS.match(raw.strip()) if not raw.startswith((" ", "\t")) else None
        if m:
            out.append(VirtualServer(m.group(1), m.group(2), m.group(3), m.group(4).strip(), ln, raw.strip()))
            continue
        r = _RS.match(raw)
        if r and out and r.group(1) != "RemoteAddress:Port":
            weight, active, inactive = (to_int(r.group(n)) for n in (3, 4, 5))
            if weight is not None and active is not None and inactive is not None:
                out[-1].reals.append(RealServer(r.group(1), r.group(2), weight, active, inactive, ln, raw.strip()))
    return out
