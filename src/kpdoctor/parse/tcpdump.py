"""``tcpdump`` output: one packet per line, as tcpdump prints them with numeric addresses.

Users capture on the node while a Service fails and paste what scrolled by. What a capture
proves is in the packets' addresses and TCP fields: a connection's SYN went to one address, its
SYN-ACK came back from another (a reply that skipped the Service NAT on its way back), and so on.

The lines are read as tcpdump's printers write them (tcpdump 4.9-4.99: print-ip.c, print-ip6.c,
print-tcp.c, print-udp.c, print-domain.c):

- a timestamp (``18:02:52.563172``; ``-tttt`` a date first; ``-tt`` seconds since the epoch;
  ``-t`` none), then with ``-i any`` in tcpdump 4.99 the interface and the direction (``eth0  In``);
- ``IP`` or ``IP6``, then ``SRC > DST:`` where an endpoint with a port is the address, a dot and
  the port (``10.200.2.63.58096``, ``fd00::1.443``; ``-n`` without the second ``n`` names well
  known ports: ``.http``, ``.domain``);
- TCP: ``Flags [S.], seq 2511416864, ack 1, win 64240, options [...], length 0`` (``seq A:B``
  for data; ``cksum`` with ``-v``); UDP: ``UDP, length 12``, DNS: ``12345+ A? example.com. (29)``
  (a query's id and flags) and ``12345 1/0/0 A 10.0.0.1 (45)`` (its answer); ICMP: ``ICMP echo
  request, id 1, seq 1, length 64``;
- with ``-v`` the IP header comes first on its own line (``IP (tos 0x0, ttl 64, ... length 60)``)
  and the packet on the next, indented.

Host names (a capture without ``-n``) are not addresses: those lines are not read. Nothing here
raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.dataplane.addresses import host_port
from kpdoctor.parse.evidence_shape import EvidenceShape

_TIME = r"(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+|\d\d:\d\d:\d\d\.\d+|\d{9,11}\.\d+)"
_IFACE = r"(?:[\w.@-]+\s+(?:In|Out|B|M|P)\s+)"
_V4 = r"\d{1,3}(?:\.\d{1,3}){3}"
_V6 = r"[0-9a-fA-F]*:[0-9a-fA-F:]*"
# an endpoint: an address, then a dot and the port (digits, or a service name with -n)
_END4 = rf"{_V4}(?:\.[a-z0-9][\w-]*)?"
_END6 = rf"{_V6}(?:\.[a-z0-9][\w-]*)?"
# A packet's line (what types a text as tcpdump's, and a run of lines as a capture)
PACKET_LINE = lazy_re.compile(
    rf"^(?:{_TIME}\s+)?{_IFACE}?(?:IP {_END4} > {_END4}|IP6 {_END6} > {_END6}): \S|"
    rf"^{_TIME}\s+{_IFACE}?IP6? \((?:tos|flowlabel|hlim) |"  # -v: the IP header first
    rf"^\s*(?:{_END4} > {_END4}|{_END6} > {_END6}): \[(?:bad udp cksum|udp sum ok|no cksum)"  # -v: its packet line
)
# tcpdump's own lines around the packets (stderr, mixed into a paste), with -v the lines of a
# packet inside a tunnel (VXLAN's inner packet: its IP header without a timestamp, then its line),
# and with -x/-xx/-X the packet's bytes (print-ascii.c: a tab, the offset as "0x%04x:", two
# spaces, hex in groups of four digits, with -X the bytes as ASCII after them)
NOISE_LINE = lazy_re.compile(
    r"^(?:tcpdump: |listening on \S+, link-type |dropped privs to |\d+ packets? (?:captured|received by filter|"
    r"dropped by kernel)|IP6? \((?:tos|flowlabel|hlim) |\s*0x[0-9a-f]{4}:  [0-9a-f]{2}|"
    rf"\s*(?:{_END4} > {_END4}|{_END6} > {_END6}): (?:Flags \[|UDP|ICMP))"
)
_HEADER_V = lazy_re.compile(rf"^(?P<time>{_TIME})\s+(?:(?P<iface>[\w.@-]+)\s+(?:In|Out|B|M|P)\s+)?IP6? \(")
_PACKET = lazy_re.compile(
    rf"^(?:(?P<time>{_TIME})\s+)?(?:(?P<iface>[\w.@-]+)\s+(?:In|Out|B|M|P)\s+)?(?P<ip>IP6?)\s+"
    rf"(?P<src>{_V4}|{_V6}|[\w.-]+?)(?:\.(?P<sport>[a-z0-9][\w-]*))? > "
    rf"(?P<dst>{_V4}|{_V6}|[\w.-]+?)(?:\.(?P<dport>[a-z0-9][\w-]*))?: (?P<rest>.*)$"
)
# the -v form's second line: the packet, indented, without timestamp or IP
_INDENTED = lazy_re.compile(
    rf"^\s*(?P<src>{_V4}|{_V6}|[\w.-]+?)(?:\.(?P<sport>[a-z0-9][\w-]*))? > "
    rf"(?P<dst>{_V4}|{_V6}|[\w.-]+?)(?:\.(?P<dport>[a-z0-9][\w-]*))?: (?P<rest>.*)$"
)
_FLAGS = lazy_re.compile(
    r"^Flags \[(?P<flags>[^\]]*)\](?:, cksum [^,]*(?:, \([^)]*\))?)?"
    r"(?:, seq (?P<seq>\d+)(?::\d+)?)?(?:, ack (?P<ack>\d+))?"
)
_DNS = lazy_re.compile(r"^(?P<id>\d+)(?P<flags>[+*%$|-]*)\s")
# the names tcpdump -n (without -nn) gives the ports a Service failure involves
# (and the VXLAN ports: tcpdump names Linux's default 8472 "otv", IANA's 4789 "vxlan")
_PORT_NAMES = {
    "http": 80,
    "https": 443,
    "domain": 53,
    "ssh": 22,
    "ntp": 123,
    "http-alt": 8080,
    "otv": 8472,
    "vxlan": 4789,
}
# -v's verdict on a UDP checksum, first in the packet's text (print-udp.c: udpipaddr_print)
_UDP_SUM = lazy_re.compile(
    r"^\[(?:(?P<bad>bad udp cksum 0x[0-9a-f]+ -> 0x[0-9a-f]+!)|(?P<ok>udp sum ok)|(?P<none>no cksum))\] "
)


@dataclass(frozen=True, slots=True)
class CapturedPacket:
    """One packet of a capture: its addresses and ports, and what its protocol says."""

    line: int
    text: str
    time: str | None
    iface: str | None
    family: int  # 4 | 6
    src: str
    sport: int | None
    dst: str
    dport: int | None
    proto: str  # "tcp" | "udp" | "icmp" | "other"
    flags: str | None = None  # TCP: as printed ("S", "S.", "R", "R.", "P.", "F.")
    seq: int | None = None  # TCP: the first sequence number printed
    ack: int | None = None  # TCP: the acknowledgement number printed
    dns_id: int | None = None  # DNS: the message id (a query's and its answer's are the same)
    udp_checksum: str | None = None  # UDP with -v: "bad", "ok" or "none" (a zero checksum: not computed)

    @property
    def source(self) -> str:
        return _endpoint(self.src, self.sport)

    @property
    def destination(self) -> str:
        return _endpoint(self.dst, self.dport)


def _endpoint(addr: str, port: int | None) -> str:
    return addr if port is None else host_port(addr, port)


def _port(text: str | None) -> int | None:
    if text is None:
        return None
    if text.isdigit():
        n = int(text)
        return n if n < 65536 else None
    return _PORT_NAMES.get(text)


def _address(text: str, family: int) -> bool:
    if family == 4:
        return bool(re.fullmatch(_V4, text)) and all(int(p) < 256 for p in text.split("."))
    return ":" in text


def _packet(
    m: re.Match[str], family: int, line: int, text: str, time: str | None, iface: str | None
) -> CapturedPacket | None:
    src, dst = m.group("src"), m.group("dst")
    if not (_address(src, family) and _address(dst, family)):
        return None  # host names (no -n): not addresses
    sport, dport = _port(m.group("sport")), _port(m.group("dport"))
    rest = m.group("rest")
    flags = seq = ack = dns_id = None
    udp_checksum = None
    if (u := _UDP_SUM.match(rest)) is not None:
        udp_checksum = "bad" if u.group("bad") else "ok" if u.group("ok") else "none"
        rest = rest[u.end() :]
    if udp_checksum is not None:
        proto = "udp"
        if 53 in (sport, dport) and (d := _DNS.match(rest)) is not None:
            dns_id = int(d.group("id"))
    elif (t := _FLAGS.match(rest)) is not None:
        proto = "tcp"
        flags = t.group("flags")
        seq = int(t.group("seq")) if t.group("seq") else None
        ack = int(t.group("ack")) if t.group("ack") else None
    elif rest.startswith(("ICMP", "ICMP6")):
        proto = "icmp"
    elif 53 in (sport, dport) and (d := _DNS.match(rest)) is not None:
        proto, dns_id = "udp", int(d.group("id"))
    elif rest.startswith(("UDP", "udp")) or 53 in (sport, dport):
        proto = "udp"
    else:
        proto = "other"
    return CapturedPacket(
        line, text, time, iface, family, src, sport, dst, dport, proto, flags, seq, ack, dns_id, udp_checksum
    )


def _closing(line: str, at: int) -> int:
    """Where the parenthesis opened at ``at`` closes (the end of the line if it does not)."""
    depth = 0
    for i in range(at, len(line)):
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        if depth == 0:
            return i
    return len(line)


def parse_tcpdump(text: str, first_line: int = 1) -> list[CapturedPacket]:
    """Every packet line of ``text`` (any other line is passed over), in order."""
    out: list[CapturedPacket] = []
    header: tuple[str | None, str | None, int] | None = None  # a -v header line: time, interface, family
    for i, raw in enumerate(text.splitlines()):
        ln = first_line + i
        line = raw.rstrip()
        if (h := _HEADER_V.match(line)) is not None:
            header = (h.group("time"), h.group("iface"), 6 if "IP6 (" in line[: h.end()] else 4)
            rest = line[_closing(line, h.end() - 1) + 1 :]
            if not rest.strip():
                continue  # IPv4: the packet follows on the next line
            line = rest  # IPv6: on the same line, after the header
        if header is not None and (m := _INDENTED.match(line)) is not None:
            p = _packet(m, header[2], ln, line.strip(), header[0], header[1])
            header = None
            if p is not None:
                out.append(p)
            continue
        header = None
        m = _PACKET.match(line.strip())
        if m is None:
            # -v's packet line whose header line was left out of the paste: read when it says its
            # UDP checksum (nothing else prints an address.port pair with that verdict)
            v = _INDENTED.match(line)
            if v is not None and _UDP_SUM.match(v.group("rest")):
                fam = 6 if ":" in v.group("src") else 4
                p = _packet(v, fam, ln, line.strip(), None, None)
                if p is not None:
                    out.append(p)
            continue
        p = _packet(m, 6 if m.group("ip") == "IP6" else 4, ln, line.strip(), m.group("time"), m.group("iface"))
        if p is not None:
            out.append(p)
    return out


SHAPE = EvidenceShape(
    Kind.PACKET_CAPTURE,
    "tcpdump",
    PACKET_LINE,
    parse_tcpdump,
    around=NOISE_LINE,
    # tcpdump 4.99.3 -i any -nn on a bridged node (tests/data/tcpdump)
    example=(
        "tcpdump: verbose output suppressed, use -v[v]... for full protocol decode\n"
        "listening on any, link-type LINUX_SLL2 (Linux cooked v2), snapshot length 262144 bytes\n"
        "21:20:21.334222 veth0 P   IP 10.200.2.63.40350 > 10.32.0.102.80: Flags [S], seq 1889227187, win 64240, "
        "options [mss 1460,sackOK,TS val 3875641284 ecr 0,nop,wscale 10], length 0\n"
        "21:20:21.334363 veth1 P   IP 10.200.2.65.80 > 10.200.2.63.40350: Flags [S.], seq 1213296814, ack "
        "1889227188, win 65160, options [mss 1460,sackOK,TS val 2932659407 ecr 3875641284,nop,wscale 10], length 0\n"
        "21:20:21.334371 veth0 P   IP 10.200.2.63.40350 > 10.200.2.65.80: Flags [R], seq 1889227188, win 0, length 0\n"
        "\n"
        "16 packets captured\n"
    ),
)
