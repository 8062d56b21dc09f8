"""Kernel SNMP counters: listen-queue overflows, UDP buffer errors, pruned receive queues.

Why: these counters show packets the kernel dropped at the socket, after kube-proxy's rules let them through.

Formats:

* ``nstat`` / ``nstat -a`` / ``nstat -az``: ``#kernel``, then ``Name value rate`` lines (``nstat -j``: JSON).
* net-tools ``netstat -s`` and ``netstat -s -6``: ``Section:`` headers, then phrase lines (``18 times the listen
  queue of a socket overflowed``) or, for counters net-tools has no phrase for, ``Name: value``. Counters are
  keyed by their nstat name: the section gives the prefix (``Udp`` / ``Udp6`` / ``UdpLite``), so ``TCPRcvQDrop: 5``
  under ``TcpExt:`` is ``TcpExtTCPRcvQDrop``, and ``Udp6RcvbufErrors: 199`` stays as it is. Phrases are matched
  case-insensitively, including the spellings of old net-tools (1.60: ``segments send out``, ``SYNs to LISTEN
  sockets ignored``...). net-tools leaves out many zero counters, so a missing counter is not a zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kpdoctor import lazy_re
from kpdoctor.parse.numbers import to_int
from kpdoctor.parse.structured import load_json


@dataclass(slots=True)
class Counters:
    """Counter values by nstat name, and where each was read."""

    values: dict[str, int] = field(default_factory=dict)
    lines: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (file line, stripped text)
    source: str = ""  # "netstat -s" | "nstat"

    def get(self, name: str) -> int | None:
        return self.values.get(name)

    def _set(self, name: str, value: int, line: int, text: str) -> None:
        if name not in self.values:  # the first snapshot in the text wins
            self.values[name] = value
            self.lines[name] = (line, text)


# Phrase templates ("%" is the number) -> counter suffix, per kind of section. From net-tools statistics.c
# (2.10 and 1.60).
_IP = {
    "% total packets received": "InReceives",
    "% with invalid headers": "InHdrErrors",
    "% with invalid addresses": "InAddrErrors",
    "% forwarded": "ForwDatagrams",
    "% with unknown protocol": "InUnknownProtos",
    "% incoming packets discarded": "InDiscards",
    "% incoming packets delivered": "InDelivers",
    "% requests sent out": "OutRequests",
    "% outgoing packets dropped": "OutDiscards",
    "% dropped because of missing route": "OutNoRoutes",
    "% fragments dropped after timeout": "ReasmTimeout",
    "% reassemblies required": "ReasmReqds",
    "% packets reassembled ok": "ReasmOKs",
    "% packet reassemblies failed": "ReasmFails",
    "% packet reassembles failed": "ReasmFails",
    "% outgoing packets fragmented ok": "FragOKs",
    "% fragments received ok": "FragOKs",
    "% outgoing packets failed fragmentation": "FragFails",
    "% fragments failed": "FragFails",
    "% fragments created": "FragCreates",
    "default ttl is %": "DefaultTTL",
}
_IP6 = {
    **_IP,
    "% forwarded": "OutForwDatagrams",
    "% incoming multicast packets": "InMcastPkts",
    "% incoming packets with no route": "InNoRoutes",
    "% with packets too big": "InTooBigErrors",
    "% with truncated packets": "InTruncatedPkts",
    "% outgoing multicast packets": "OutMcastPkts",
}
_ICMP = {
    "% icmp messages received": "InMsgs",
    "% input icmp message failed": "InErrors",
    "% icmp messages sent": "OutMsgs",
    "% icmp messages failed": "OutErrors",
}
# ICMP histograms: "destination unreachable: 3" under "ICMP input/output histogram:".
_ICMP_IN = {
    "destination unreachable": "InDestUnreachs",
    "timeout in transit": "InTimeExcds",
    "wrong parameters": "InParmProbs",
    "source quenches": "InSrcQuenchs",
    "source quenchs": "InSrcQuenchs",
    "redirects": "InRedirects",
    "echo requests": "InEchos",
    "echo replies": "InEchoReps",
    "timestamp request": "InTimestamps",
    "timestamp reply": "InTimestampReps",
    "address mask request": "InAddrMasks",
    "address mask replies": "InAddrMaskReps",
}
_ICMP_OUT = {
    "destination unreachable": "OutDestUnreachs",
    "time exceeded": "OutTimeExcds",
    "wrong parameters": "OutParmProbs",
    "source quench": "OutSrcQuenchs",
    "redirect": "OutRedirects",
    "echo requests": "OutEchos",
    "echo request": "OutEchos",
    "echo replies": "OutEchoReps",
    "timestamp requests": "OutTimestamps",
    "timestamp replies": "OutTimestampReps",
    "address mask requests": "OutAddrMasks",
    "address mask replies": "OutAddrMaskReps",
}
_ICMP6_IN = {
    "destination unreachable": "InDestUnreachs",
    "echo replies": "InEchoReplies",
    "echo requests": "InEchos",
    "group member queries": "InGroupMembQueries",
    "group member reductions": "InGroupMembReductions",
    "group member responses": "InGroupMembResponses",
    "neighbour advertisement": "InNeighborAdvertisements",
    "neighbour solicits": "InNeighborSolicits",
    "parameter problem": "InParmProblems",
    "packets too big": "InPktTooBigs",
    "redirects": "InRedirects",
    "router advertisement": "InRouterAdvertisements",
    "router solicits": "InRouterSolicits",
    "received icmpv6 time exceeded": "InTimeExcds",
}
_ICMP6_OUT = {
    "destination unreachable": "OutDestUnreachs",
    "echo replies": "OutEchoReplies",
    "echo requests": "OutEchos",
    "group member queries": "OutGroupMembQueries",
    "group member reductions": "OutGroupMembReductions",
    "group member responses": "OutGroupMembResponses",
    "neighbor advertisements": "OutNeighborAdvertisements",
    "neighbor solicits": "OutNeighborSolicits",
    "parameter problem": "OutParmProblems",
    "packets too big": "OutPktTooBigs",
    "redirects": "OutRedirects",
    "router advertisement": "OutRouterAdvertisements",
    "router solicits": "OutRouterSolicits",
    "sent icmpv6 time exceeded": "OutTimeExcds",
}
_TCP = {
    "% active connection openings": "ActiveOpens",
    "% active connections openings": "ActiveOpens",
    "% active opens": "ActiveOpens",
    "% passive connection openings": "PassiveOpens",
    "% passive opens": "PassiveOpens",
    "% failed connection attempts": "AttemptFails",
    "% connection resets received": "EstabResets",
    "% connections established": "CurrEstab",
    "% segments received": "InSegs",
    "% segments sent out": "OutSegs",
    "% segments send out": "OutSegs",
    "% segments retransmitted": "RetransSegs",
    "% segments retransmited": "RetransSegs",
    "% bad segments received": "InErrs",
    "% resets sent": "OutRsts",
}
_UDP = {
    "% packets received": "InDatagrams",
    "% packets to unknown port received": "NoPorts",
    "% packet receive errors": "InErrors",
    "% packets sent": "OutDatagrams",
    "% packets send": "OutDatagrams",
    "% receive buffer errors": "RcvbufErrors",
    "% send buffer errors": "SndbufErrors",
}
_TCPEXT = {
    "% delayed acks further delayed because of locked socket": "DelayedACKLocked",
    "quick ack mode was activated % times": "DelayedACKLost",
    "% delayed acks sent": "DelayedACKs",
    "% resets received for embryonic syn_recv sockets": "EmbryonicRsts",
    "% syns to listen sockets dropped": "ListenDrops",
    "% syns to listen sockets ignored": "ListenDrops",
    "% times the listen queue of a socket overflowed": "ListenOverflows",
    "% icmp packets dropped because socket was locked": "LockDroppedIcmps",
    "% packets dropped from out-of-order queue because of socket buffer overrun": "OfoPruned",
    "% icmp packets dropped because they were out-of-window": "OutOfWindowIcmps",
    "% active connections rejected because of time stamp": "PAWSActive",
    "% packets rejected in established connections because of timestamp": "PAWSEstab",
    "% packets rejects in established connections because of timestamp": "PAWSEstab",
    "% passive connections rejected because of time stamp": "PAWSPassive",
    "% packets pruned from receive queue because of socket buffer overrun": "PruneCalled",
    "% packets pruned from receive queue": "RcvPruned",
    "ran % times out of system memory during packet sending": "SockMallocOOM",
    "% invalid syn cookies received": "SyncookiesFailed",
    "% syn cookies received": "SyncookiesRecv",
    "% syn cookies sent": "SyncookiesSent",
    "% times unable to send rst due to no memory": "TCPAbortFailed",
    "% connections reset due to early user close": "TCPAbortOnClose",
    "% connections reset due to unexpected data": "TCPAbortOnData",
    "% connections aborted after user close in linger timeout": "TCPAbortOnLinger",
    "% connections aborted due to memory pressure": "TCPAbortOnMemory",
    "% connections reset due to unexpected syn": "TCPAbortOnSyn",
    "% connections aborted due to timeout": "TCPAbortOnTimeout",
    "% bytes directly in process context from backlog": "TCPDirectCopyFromBacklog",
    "% bytes directly received in process context from prequeue": "TCPDirectCopyFromPrequeue",
    "% dsacks for out of order packets received": "TCPDSACKOfoRecv",
    "% dsacks sent for out of order packets": "TCPDSACKOfoSent",
    "% dsacks sent for old packets": "TCPDSACKOldSent",
    "% dsacks received": "TCPDSACKRecv",
    "% congestion window recovered without slow start using dsack": "TCPDSackUndo",
    "% congestion windows recovered without slow start by dsack": "TCPDSACKUndo",
    "detected reordering % times using fack": "TCPFACKReorder",
    "% fast retransmits": "TCPFastRetrans",
    "% forward retransmits": "TCPForwardRetrans",
    "% congestion windows fully recovered without slow start": "TCPFullUndo",
    "% predicted acknowledgments": "TCPHPAcks",
    "% packet headers predicted": "TCPHPHits",
    "% packet headers predicted and directly queued to user": "TCPHPHitsToUser",
    "% timeouts in loss state": "TCPLossFailures",
    "% tcp data loss events": "TCPLoss",
    "% congestion windows recovered without slow start after partial ack": "TCPLossUndo",
    "% retransmits lost": "TCPLostRetransmit",
    "tcp ran low on memory % times": "TCPMemoryPressures",
    "% congestion windows partially recovered using hoe heuristic": "TCPPartialUndo",
    "% packets directly queued to recvmsg prequeue": "TCPPrequeued",
    "% packets dropped from prequeue": "TCPPrequeueDropped",
    "% acknowledgments not containing data payload received": "TCPPureAcks",
    "% acknowledgments not containing data received": "TCPPureAcks",
    "% packets collapsed in receive queue due to low socket buffer": "TCPRcvCollapsed",
    "% timeouts after reno fast retransmit": "TCPRenoFailures",
    "% reno fast retransmits failed": "TCPRenoRecoveryFail",
    "% classic reno fast retransmits failed": "TCPRenoRecoveryFail",
    "% times recovered from packet loss due to fast retransmit": "TCPRenoRecovery",
    "detected reordering % times using reno fast retransmit": "TCPRenoReorder",
    "% timeouts after sack recovery": "TCPSackFailures",
    "% sack retransmits failed": "TCPSackRecoveryFail",
    "% times recovered from packet loss by selective acknowledgements": "TCPSackRecovery",
    "% bad sack blocks received": "TCPSACKReneging",
    "detected reordering % times using sack": "TCPSACKReorder",
    "% times receiver scheduled too late for direct processing": "TCPSchedulerFailed",
    "% retransmits in slow start": "TCPSlowStartRetrans",
    "% other tcp timeouts": "TCPTimeouts",
    "detected reordering % times using time stamp": "TCPTSReorder",
    "% tcp sockets finished time wait in slow timer": "TWKilled",
    "% tcp sockets finished time wait in fast timer": "TW",
    "% time wait sockets recycled by time stamp": "TWRecycled",
}


def _tables(section: str) -> dict[str, str]:
    if section in ("Ip", "Ip6"):
        return _IP6 if section == "Ip6" else _IP
    if section in ("Icmp", "Icmp6"):
        return _ICMP
    if section in ("Tcp", "Tcp6"):
        return _TCP
    if section in ("Udp", "Udp6", "UdpLite", "UdpLite6"):
        return _UDP
    if section == "TcpExt":
        return _TCPEXT
    return {}


_SECTION = lazy_re.compile(r"^([A-Z][A-Za-z0-9]*):$")
_NAMED = lazy_re.compile(r"^([A-Za-z][A-Za-z0-9_]*):\s+(\d+)$")
_HIST = lazy_re.compile(r"^([a-z][a-z0-9 ]*[a-z0-9]):\s+(\d+)$", re.IGNORECASE)
_NUMBER = lazy_re.compile(r"(?<![\w.])(\d+)(?![\w.])")


def _template(s: str) -> tuple[str, int] | None:
    """``18 SYNs to LISTEN sockets dropped`` -> (``% syns to listen sockets dropped``, 18)."""
    nums = _NUMBER.findall(s)
    value = to_int(nums[0]) if len(nums) == 1 else None
    if value is None:
        return None
    tmpl = " ".join(_NUMBER.sub("%", s).lower().rstrip(".").split())
    return tmpl, value


def _phrases_of_one_section() -> dict[str, tuple[str, str]]:
    """Each phrase that only one section prints (``% times the listen queue of a socket
    overflowed`` is TcpExt's), with that section and its counter: what a line grep'd out of
    ``netstat -s`` without its section header still says."""
    seen: dict[str, list[tuple[str, str]]] = {}
    for section in ("Ip", "Icmp", "Tcp", "Udp", "TcpExt"):
        for phrase, suffix in _tables(section).items():
            seen.setdefault(phrase, []).append((section, suffix))
    return {phrase: places[0] for phrase, places in seen.items() if len(places) == 1}


def netstat_phrase(line: str) -> tuple[str, str, int] | None:
    """(section, counter suffix, value) of a ``netstat -s`` line only one section prints."""
    t = _template(line.strip())
    if t is None:
        return None
    place = _ONE_SECTION.get(t[0])
    return (place[0], place[1], t[1]) if place else None


def parse_netstat_s(text: str, first_line: int = 1) -> Counters:
    """net-tools ``netstat -s`` / ``netstat -s -6``, keyed by nstat names; also its lines grep'd
    out without their section headers (``netstat -s | grep -E 'drop|overflow'``), by the
    phrases only one section prints."""
    c = Counters(source="netstat -s")
    section = ""
    hist = ""
    for i, raw in enumerate(text.splitlines()):
        s = raw.strip()
        if not s:
            continue
        line = first_line + i
        m = _SECTION.match(s)
        if m:
            section, hist = m.group(1), ""
            continue
        if not section:
            known = netstat_phrase(s)
            if known is not None:
                c._set(known[0] + known[1], known[2], line, s)
            continue
        low = s.lower()
        if low in ("icmp input histogram:", "icmp output histogram:"):
            hist = "in" if "input" in low else "out"
            continue
        m = _NAMED.match(s)
        if m:
            name, value = m.group(1), to_int(m.group(2))
            if value is not None:
                c._set(name if name.startswith(section) else section + name, value, line, s)
            continue
        m = _HIST.match(s)
        if m and hist and section in ("Icmp", "Icmp6"):
            table = (_ICMP_IN if hist == "in" else _ICMP_OUT) if section == "Icmp" else None
            if table is None:
                table = _ICMP6_IN if hist == "in" else _ICMP6_OUT
            suffix = table.get(" ".join(m.group(1).lower().split()))
            value = to_int(m.group(2))
            if suffix and value is not None:
                c._set(section + suffix, value, line, s)
            continue
        t = _template(s)
        if t is None:
            continue
        suffix = _tables(section).get(t[0])
        if suffix:
            c._set(section + suffix, t[1], line, s)
    return c


_ONE_SECTION = _phrases_of_one_section()
_NSTAT = lazy_re.compile(r"^([A-Za-z][A-Za-z0-9_]*)\s+(\d+)(?:\s+\S+)?$")


# /proc/net/snmp, /proc/net/netstat (and snmp6's neighbours): a line of names under a prefix,
# then the line of their values under the same prefix ("Udp: InDatagrams NoPorts ..." /
# "Udp: 5521 12 ..."). nstat names each counter by the two joined: UdpNoPorts.
PROC_PAIR = lazy_re.compile(r"^([A-Z][A-Za-z0-9]*): ([A-Z][A-Za-z0-9_]*(?: [A-Za-z0-9_]+)*)\s*$")
_PROC_VALUES = lazy_re.compile(r"^([A-Z][A-Za-z0-9]*): (-?\d+(?: -?\d+)*)\s*$")


def parse_nstat(text: str, first_line: int = 1) -> Counters:
    """``nstat`` / ``nstat -a`` / ``nstat -az`` (``Name value rate``), ``nstat -j`` JSON, or the
    kernel's own /proc/net/snmp and /proc/net/netstat (their counters named as nstat names them)."""
    c = Counters(source="nstat")
    if text.lstrip().startswith("{"):
        _nstat_json(c, text, first_line)
        return c
    names: tuple[str, list[str]] | None = None  # a /proc/net line of names, waiting for its values
    for i, raw in enumerate(text.splitlines()):
        s = raw.strip()
        v = _PROC_VALUES.match(s)
        if v and names is not None and names[0] == v.group(1):
            values = v.group(2).split()
            if len(values) == len(names[1]):
                for name, value in zip(names[1], values, strict=True):
                    number = to_int(value)
                    if number is not None and number >= 0:
                        c._set(names[0] + name, number, first_line + i, s)
            names = None
            continue
        p = PROC_PAIR.match(s)
        if p:
            names = (p.group(1), p.group(2).split())
            continue
        m = _NSTAT.match(s)
        value = to_int(m.group(2)) if m else None
        if m and value is not None:
            c._set(m.group(1), value, first_line + i, s)
    return c


_JSON_KEY = lazy_re.compile(r'"([^"\\]*)"\s*:')


def _nstat_json(c: Counters, text: str, first_line: int) -> None:
    try:
        doc = load_json(text)
    except ValueError:
        return
    first_seen: dict[str, int] = {}  # each quoted key's first line, found in one pass
    for n, ln in enumerate(text.splitlines()):
        for key in _JSON_KEY.findall(ln):
            first_seen.setdefault(key, n)
    groups = [g for g in doc.values() if isinstance(g, dict)] if isinstance(doc, dict) else []
    for group in groups:
        for name, value in group.items():
            if not isinstance(value, int) or isinstance(value, bool):
                continue
            at = first_seen.get(name, 0)
            c._set(str(name), value, first_line + at, f"{name} {value}")
