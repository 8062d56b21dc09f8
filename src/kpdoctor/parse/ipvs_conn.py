"""IPVS's connection table: ``ipvsadm -Lnc`` (``-Lc``, ``--persistent-conn``) and the file it
reads, ``/proc/net/ip_vs_conn``.

Each row is one connection IPVS tracks: the client's address and port, the virtual service it
reached, the real server IPVS sent it to, its state and the seconds left before IPVS forgets it.
While a row lives, every packet of that client ip:port goes to that real server, whatever the
virtual server's real servers are now: how a UDP client keeps reaching a removed Pod.

How the programs print it:

- the kernel (net/netfilter/ipvs/ip_vs_conn.c, ``ip_vs_conn_seq_show``): the header ``Pro FromIP
  FPrt ToIP     TPrt DestIP   DPrt State       Expires`` (with `` PEName PEData`` from 2.6.37),
  then per row the protocol's name (``ip_vs_proto_name``: TCP, UDP, SCTP, ICMP, ICMPv6, ``IP_<n>``
  for another, ``IP`` for a persistence template of a fwmark service), each IPv4 address as eight
  hex digits and each port as four (``%08X %04X``), an IPv6 address spelled out (``%pI6``), the
  state left-aligned in 11 columns (``%-11s``), the seconds left (``%7lu``), and a persistence
  engine's name and data when the connection has them;
- ipvsadm 1.2x ``list_conn``/``print_conn`` (ipvsadm.c): ``IPVS connection entries``, the header
  ``pro expire state       source             virtual            destination`` (``pe name pe_data``
  after it with ``--persistent-conn``), then per row ``%-3s %-6s %-11s %-18s %-18s %s``: protocol,
  the seconds left as ``mm:ss``, the state, and each address as ``ip:port`` (``[ip6]:port``); with
  ``-n`` the numbers, without it host and service names (``node-1:domain``).

States (``ip_vs_state_name``): TCP's NONE, ESTABLISHED, SYN_SENT, SYN_RECV, FIN_WAIT, TIME_WAIT,
CLOSE, CLOSE_WAIT, LAST_ACK, LISTEN, SYNACK; UDP's UDP; SCTP's NONE, INIT1, INIT, COOKIE_SENT,
COOKIE_REPLIED, COOKIE_WAIT, COOKIE_ECHOED, ESTABLISHED, SHUTDOWN_SENT, SHUTDOWN_RECEIVED,
SHUTDOWN_ACK_SENT, REJECTED, CLOSED; ``ERR!`` for a state the protocol does not name. A
persistence template (``sessionAffinity: ClientIP``) is a row with client port 0 and state NONE.
Nothing here raises.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.dataplane.addresses import host_port, one_spelling
from kpdoctor.parse.evidence_shape import EvidenceShape

_PROTOCOL = r"(?P<protocol>TCP|UDP|SCTP|ICMPv6|ICMP|IP(?:_\d{1,3})?)"
_STATE = r"(?P<state>[A-Z][A-Z0-9_]{1,20}!?)"
_PE = r"(?:\s+(?P<pe>\S+)(?:\s+(?P<pe_data>\S+))?)?"
# an address and port as ipvsadm prints them: 10.96.0.10:53, [fd00::a]:53, or names (without -n)
_END = r"(?:\[[0-9A-Fa-f:.%\w]+\]|[^\s:\[\]]+):[\w-]+"
# ipvsadm -Lnc's row
IPVSADM_ROW = lazy_re.compile(
    rf"^{_PROTOCOL}\s+(?P<minutes>\d{{2,5}}):(?P<seconds>[0-5]\d)\s+{_STATE}\s+"
    rf"(?P<client>{_END})\s+(?P<virtual>{_END})\s+(?P<destination>{_END}){_PE}\s*$"
)
# /proc/net/ip_vs_conn's row: IPv4 in hex; IPv6 spelled out (a destination of the other family
# where the kernel tunnels one family in the other)
_HEX_ADDR = r"(?:[0-9A-F]{8}|[0-9a-f]{4}(?::[0-9a-f]{4}){7})"
PROC_ROW = lazy_re.compile(
    rf"^{_PROTOCOL}\s+(?P<caddr>{_HEX_ADDR})\s+(?P<cport>[0-9A-F]{{4}})\s+(?P<vaddr>{_HEX_ADDR})\s+"
    rf"(?P<vport>[0-9A-F]{{4}})\s+(?P<daddr>{_HEX_ADDR})\s+(?P<dport>[0-9A-F]{{4}})\s+{_STATE}\s+"
    rf"(?P<expires>\d{{1,10}}){_PE}\s*$"
)
# either row, its groups unnamed (the shape's line pattern: a segment's lines are matched by it)
ROW = lazy_re.compile(re.sub(r"\(\?P<\w+>", "(?:", f"{IPVSADM_ROW.pattern}|{PROC_ROW.pattern}"))
# the lines around the rows: ipvsadm's title and column header, the kernel's header
AROUND = lazy_re.compile(
    r"^(?:IPVS connection entries\s*$|pro\s+expire\s+state\s+source\s+virtual\s+destination\b|"
    r"Pro\s+FromIP\s+FPrt\s+ToIP\s+TPrt\s+DestIP\s+DPrt\s+State\s+(?:Origin\s+)?Expires\b)"
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One end of a connection: its address (an IP address's one spelling, or the name ipvsadm
    printed without -n) and its port (a number, or the service name)."""

    address: str
    port: str

    @property
    def key(self) -> tuple[str, str]:
        """(address, port): how a connection's end and a listing's server are compared."""
        return self.address, self.port

    @property
    def numeric(self) -> bool:
        return self.port.isdigit() and _is_ip(self.address)

    def __str__(self) -> str:
        return host_port(self.address, self.port)


@dataclass(frozen=True, slots=True)
class IpvsConnection:
    """One row of IPVS's connection table."""

    line: int
    text: str
    protocol: str  # TCP, UDP, SCTP, ...
    state: str  # UDP for every UDP connection; ESTABLISHED, TIME_WAIT, ... for TCP
    expires: int  # seconds left before IPVS forgets it (each packet sets it again)
    client: Endpoint
    virtual: Endpoint
    destination: Endpoint  # the real server

    @property
    def template(self) -> bool:
        """A persistence template (session affinity), not a connection: client port 0, state NONE."""
        return self.client.port == "0" and self.state == "NONE"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def endpoint_of(text: str) -> Endpoint:
    """``10.96.0.10:53`` / ``[fd00::a]:53`` as ipvsadm prints an address (a connection's end, or a
    virtual or real server of ``-Ln``), its address in one spelling."""
    address, _, port = text.rpartition(":")
    return Endpoint(one_spelling(address.removeprefix("[").removesuffix("]")), port)


def _hex_end(address: str, port: str) -> Endpoint:
    if ":" in address:  # %pI6: eight groups of four hex digits
        return Endpoint(one_spelling(address), str(int(port, 16)))
    return Endpoint(str(ipaddress.IPv4Address(int(address, 16))), str(int(port, 16)))


def _row(ln: int, raw: str) -> IpvsConnection | None:
    s = raw.strip()
    if m := IPVSADM_ROW.match(s):
        expires = int(m["minutes"]) * 60 + int(m["seconds"])
        ends = endpoint_of(m["client"]), endpoint_of(m["virtual"]), endpoint_of(m["destination"])
    elif m := PROC_ROW.match(s):
        expires = int(m["expires"])
        ends = _hex_end(m["caddr"], m["cport"]), _hex_end(m["vaddr"], m["vport"]), _hex_end(m["daddr"], m["dport"])
    else:
        return None
    return IpvsConnection(ln, raw, m["protocol"], m["state"], expires, *ends)


def parse_connections(text: str, first_line: int = 1) -> list[IpvsConnection]:
    """Every connection row of ``ipvsadm -Lnc`` or ``/proc/net/ip_vs_conn`` output, in order
    (other lines are skipped: its headers, a grep's leftovers)."""
    return [c for ln, raw in enumerate(text.splitlines(), first_line) if (c := _row(ln, raw)) is not None]


SHAPE = EvidenceShape(
    Kind.IPVS_CONNECTIONS,
    "ipvsadm -Lnc",
    ROW,
    parse_connections,
    around=AROUND,
    # ipvsadm -Lcn on an LVS director, as posted in a public LVS write-up: a persistence template
    # (client port 0, NONE) and the connection it holds
    example=(
        "IPVS connection entries\n"
        "pro expire state       source             virtual            destination\n"
        "TCP 00:57  NONE        110.184.96.173:0   122.225.32.142:80  122.225.32.136:80\n"
        "TCP 01:57  FIN_WAIT    110.184.96.173:54568 122.225.32.142:80  122.225.32.136:80\n"
    ),
)
