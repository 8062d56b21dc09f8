"""``arping`` output: which hardware addresses answered ARP for an IP address.

Users run it when a LoadBalancer or external IP works from some clients only: more than one MAC
answering for one address means more than one host claims it on the segment (IPVS mode binds
every Service address on kube-ipvs0 of every node, and without strict ARP every node answers).

The lines are read as the two arpings Linux distributions ship print them:

- iputils (Debian's iputils-arping, RHEL's default) and busybox (arping.c recv_pack):
  ``Unicast reply from 10.251.0.40 [F6:E7:EB:CF:34:5A]  0.597ms`` (``Broadcast`` for a broadcast
  answer, ``request`` in -D/-U modes; busybox prints the MAC in lower case), around them
  ``ARPING 10.251.0.40 from 10.251.0.11 eth0``, ``Sent 3 probes (1 broadcast(s))``, ``Received 4
  response(s)`` (busybox: ``... (0 request(s), 0 broadcast(s))``);
- Thomas Habets' arping (Debian's arping): ``42 bytes from f6:e7:eb:cf:34:5a (10.251.0.40):
  index=0 time=7.653 usec``, around them ``ARPING 10.251.0.40``, ``Timeout``, ``--- 10.251.0.40
  statistics ---``, ``3 packets transmitted, 6 packets received, 0% unanswered (3 extra)`` and
  ``rtt min/avg/max/std-dev = ...``.

Nothing here raises.
"""

from __future__ import annotations

from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.parse.evidence_shape import EvidenceShape

_V4 = r"\d{1,3}(?:\.\d{1,3}){3}"
_MAC = r"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}"
REPLY_LINE = lazy_re.compile(
    rf"^(?:(?:Unicast|Broadcast) (?:reply|request) from (?P<ip>{_V4}) \[(?P<mac>{_MAC})\]"
    rf"|\d+ bytes from (?P<mac2>{_MAC}) \((?P<ip2>{_V4})\): index=\d+)"
)
# lines only arping prints: an answer, its header, its count of answers (zero when nobody answered:
# still arping's output, read as "no answer", not as an unknown text)
SIGNATURE = lazy_re.compile(
    rf"{REPLY_LINE.pattern}|^(?:ARPING {_V4}(?: from {_V4} \S+)?\s*$|Received \d+ response"
    rf"|\d+ packets transmitted, \d+ packets received)"
)
AROUND = lazy_re.compile(rf"^(?:Sent \d+ probes?|Timeout\s*$|--- {_V4} statistics ---|rtt min/avg/max)")


@dataclass(frozen=True, slots=True)
class ArpReply:
    """One answer to an ARP request: the IP address asked for and the MAC that answered."""

    line: int
    text: str
    ip: str
    mac: str  # lower case, as ip neigh prints it


def parse_arping(text: str, first_line: int = 1) -> list[ArpReply]:
    """Every answer line of arping output, in order (its other lines are skipped)."""
    out = []
    for ln, raw in enumerate(text.splitlines(), first_line):
        line = raw.strip()
        m = REPLY_LINE.match(line)
        if m is not None:
            ip, mac = (m["ip"], m["mac"]) if m["ip"] else (m["ip2"], m["mac2"])
            out.append(ArpReply(ln, line[:300], ip, mac.lower()))
    return out


def claimants(replies: list[ArpReply]) -> dict[str, list[ArpReply]]:
    """The addresses more than one MAC answered for, each with the first answer of every MAC."""
    by_ip: dict[str, dict[str, ArpReply]] = {}
    for r in replies:
        by_ip.setdefault(r.ip, {}).setdefault(r.mac, r)
    return {ip: list(macs.values()) for ip, macs in by_ip.items() if len(macs) > 1}


SHAPE = EvidenceShape(
    Kind.ARP_REPLIES,
    "arping",
    SIGNATURE,
    parse_arping,
    around=AROUND,
    # iputils arping from one network namespace to an address two others bind on a down
    # interface (as kube-proxy's IPVS mode binds Service addresses on kube-ipvs0), arp_ignore=0
    example=(
        "ARPING 10.251.0.40 from 10.251.0.11 eth0\n"
        "Unicast reply from 10.251.0.40 [F6:E7:EB:CF:34:5A]  0.597ms\n"
        "Unicast reply from 10.251.0.40 [06:54:A4:FA:B2:8E]  0.628ms\n"
        "Unicast reply from 10.251.0.40 [06:54:A4:FA:B2:8E]  0.560ms\n"
        "Sent 3 probes (1 broadcast(s))\n"
        "Received 3 response(s)\n"
    ),
)
