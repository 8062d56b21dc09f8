"""``ip -br addr`` (``ip -brief address``): one row per interface, its state and its addresses.

What kpdoctor asks for when it needs a node's own addresses in one screen (a Service address that
is also a node's, kube-ipvs0's addresses in IPVS mode). iproute2 prints a row per interface
(ip/ipaddress.c, brief mode): the name (``veth1@if3``, ``eth0.100@eth0``: its link after ``@``)
padded to 16 columns, the operational state (``UP``, ``DOWN``, ``UNKNOWN``, ``DORMANT``,
``LOWERLAYERDOWN``, ``NOTPRESENT``, ``TESTING``) padded to 14, then every address as
``address/prefix`` separated by spaces; an interface without one ends after its state.
``ip -br link`` prints the MAC and the ``<FLAGS>`` there instead; its rows are read around the
address rows (a paste of both), and give no address.

Nothing here raises.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.parse.evidence_shape import EvidenceShape

_STATES = r"(?:UP|DOWN|UNKNOWN|DORMANT|LOWERLAYERDOWN|NOTPRESENT|TESTING)"
_NAME = r"[\w.+-]{1,15}(?:@[\w.+-]{1,15})?"  # the interface, and its link after `@`
_ADDR = r"[0-9a-fA-F.:]{2,39}/\d{1,3}"
# a row with at least one address: only `ip -br addr` prints these
ADDRESS_ROW = lazy_re.compile(rf"^{_NAME}\s+{_STATES}\s+{_ADDR}(?:\s+{_ADDR})*\s*$")
# its rows without an address, and `ip -br link`'s rows (MAC, flags)
AROUND = lazy_re.compile(
    rf"^{_NAME}\s+{_STATES}\s*(?:(?:[0-9a-f]{{2}}(?::[0-9a-f]{{2}}){{5}}\s+)?<[A-Z0-9_,-]*>\s*)?$"
)


@dataclass(frozen=True, slots=True)
class BriefRow:
    """One interface of ``ip -br addr``: its name (without ``@link``), state and addresses."""

    line: int
    text: str
    interface: str
    state: str
    addresses: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]


def row(line: str, number: int = 0) -> BriefRow | None:
    """One line as a row of ``ip -br addr`` or ``ip -br link`` (no addresses), or None."""
    line = line.strip()
    with_addresses = len(line) <= 4000 and ADDRESS_ROW.match(line) is not None
    if not with_addresses and (len(line) > 4000 or not AROUND.match(line)):
        return None
    words = line.split()
    addrs = []
    for word in words[2:] if with_addresses else []:
        try:
            addrs.append(ipaddress.ip_address(word.split("/", 1)[0]))
        except ValueError:
            continue
    return BriefRow(number, line[:300], words[0].split("@", 1)[0], words[1], tuple(addrs))


def parse_brief(text: str, first_line: int = 1) -> list[BriefRow]:
    """Every row of ``ip -br addr`` output that shows an interface (with addresses or not), in order."""
    return [r for ln, raw in enumerate(text.splitlines(), first_line) if (r := row(raw, ln)) is not None]


SHAPE = EvidenceShape(
    Kind.IP_ADDR,
    "ip-brief",
    ADDRESS_ROW,
    parse_brief,
    around=AROUND,
    # `ip -br addr` (iproute2 6.1) in a network namespace holding a bridge with a veth on it and
    # kube-ipvs0 with two Service addresses, as IPVS mode binds them
    example=(
        "lo               UNKNOWN        127.0.0.1/8 ::1/128 \n"
        "kube-ipvs0       DOWN           10.96.0.1/32 10.96.0.10/32 \n"
        "cni0             UNKNOWN        10.244.1.1/24 fe80::80a6:26ff:fe4b:6eeb/64 \n"
        "eth0@veth9c1f    UP             192.168.56.11/24 fe80::349e:edff:fe4c:3630/64 \n"
        "veth9c1f@eth0    UP             fe80::b8ba:c1ff:fe88:8942/64 \n"
    ),
)
