"""KP303 socket buffer overflows and KP304 listen (SYN/accept) queue overflows."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start
from kpdoctor.checks.node.common import read_counters, setting_cites, sysctl_advice
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity

BUFFER_COUNTERS = [
    "UdpRcvbufErrors",
    "UdpSndbufErrors",
    "Udp6RcvbufErrors",
    "Udp6SndbufErrors",
    "TcpExtTCPRcvQDrop",
    "TcpExtPruneCalled",
]
BUFFER_SYSCTLS = {  # seed 004's values for a busy node; only ever raised
    "net.core.rmem_max": 26214400,
    "net.core.wmem_max": 26214400,
    "net.core.rmem_default": 8388608,
}
QUEUE_COUNTERS = ["TcpExtListenOverflows", "TcpExtListenDrops"]
QUEUE_SYSCTLS = {"net.core.somaxconn": 32768, "net.ipv4.tcp_max_syn_backlog": 8096}  # seed 004


@check(
    "KP303",
    cause="socket-buffer-overflow",
    title="Socket buffers overflow: the kernel drops packets it has already received",
    severity=Severity.WARNING,
    needs=[Kind.NETSTAT, Kind.NSTAT],
    counters=BUFFER_COUNTERS,
)
def buffer_overflow(facts: Facts) -> Iterator[Finding]:
    """Packets are dropped because a socket's receive (or send) buffer is full.

    Symptom: UDP (DNS, metrics, logging) loses datagrams and TCP throughput collapses under load;
        `netstat -s | grep "buffer errors"` grows.
    Cause: the application reads slower than traffic arrives, or the buffer limits
        (net.core.rmem_max/wmem_max, rmem_default, tcp_rmem/tcp_wmem) are too small for the
        rate.
    How it is detected: UDP and UDP6 `receive buffer errors` / `send buffer errors`
        (UdpRcvbufErrors, UdpSndbufErrors...), TCPRcvQDrop and TCP receive-queue pruning, from
        `netstat -s`, `nstat` or /proc/net/snmp. Growth between two snapshots is a warning. Totals from a
        single snapshot (since boot) are stated with their share of the datagrams or segments
        they belong to: info, or a warning when 1% or more was lost, with how to confirm it
        (a second snapshot).
    Fix: raise the limits (seed 004: net.core.rmem_max and wmem_max 26214400, rmem_default
        8388608; tcp_rmem/tcp_wmem maxima accordingly) and let the application ask for a larger
        SO_RCVBUF; find the slow reader (`ss -lump` shows each socket's drops).
    References: https://www.kernel.org/doc/html/latest/networking/ip-sysctl.html;
        https://man7.org/linux/man-pages/man7/udp.7.html
    """
    node = facts.node_state
    reading = read_counters(node, BUFFER_COUNTERS)
    if not (reading.growing or reading.totals):
        return
    f = start(
        facts,
        "KP303",
        [],
        confidence=Confidence.HIGH if reading.growing else Confidence.MEDIUM,
        severity=reading.severity(Severity.WARNING),
        summary="Socket buffers overflow: " + reading.describe() + "." + reading.confirm("netstat -s"),
    )
    f.evidence = reading.cites[:4] + setting_cites(node, [*BUFFER_SYSCTLS, "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"])
    f.ongoing = True if reading.growing else None
    for name, value in BUFFER_SYSCTLS.items():
        adv = sysctl_advice(node, name, value)
        if adv:
            f.fix.append(adv)
    f.fix.append("Let the application request a larger buffer (SO_RCVBUF) and find the slow reader with `ss -lump`.")
    yield f


@check(
    "KP304",
    cause="listen-queue-overflow",
    title="SYN or accept queues overflow: connection attempts are dropped",
    severity=Severity.WARNING,
    needs=[Kind.NETSTAT, Kind.NSTAT, Kind.LISTENERS],
    counters=QUEUE_COUNTERS,
)
def listen_queue(facts: Facts) -> Iterator[Finding]:
    """A listening socket's queue is full, so the kernel drops new connection attempts.

    Symptom: connections to a Service time out or take 1 s+ (SYN retransmits) under load
        while the Pods look healthy.
    Cause: the application accepts too slowly (overloaded, stuck) or its backlog is small:
        the accept queue is min(listen backlog, net.core.somaxconn); half-open connections wait
        in the SYN queue (net.ipv4.tcp_max_syn_backlog).
    How it is detected: `times the listen queue of a socket overflowed` and `SYNs to LISTEN
        sockets dropped` (TcpExtListenOverflows, TcpExtListenDrops) from `netstat -s`, `nstat` or /proc/net/netstat;
        growth between two snapshots is a warning; totals from one snapshot are stated with
        their share of connection attempts (passive opens): info, a warning at 1% or more. A
        listener in `ss -ltn` whose Recv-Q (connections waiting to be accepted) has reached its
        Send-Q (the backlog) is full right now: a warning on its own, naming port and process.
    Fix: make the application accept faster (more workers) and give listen() a larger backlog;
        raise net.core.somaxconn (seed 004: 32768) and net.ipv4.tcp_max_syn_backlog (8096) on
        the node and, for Pods, in the Pod's sysctls (somaxconn is per network namespace).
    References: https://man7.org/linux/man-pages/man2/listen.2.html;
        https://kubernetes.io/docs/tasks/administer-cluster/sysctl-cluster/
    """
    node = facts.node_state
    reading = read_counters(node, QUEUE_COUNTERS)
    full = [(a, ls) for a, ls in node.listeners if ls.send_q > 0 and ls.recv_q >= ls.send_q]
    if not (reading.growing or reading.totals or full):
        return
    parts = []
    if reading.growing or reading.totals:
        parts.append(reading.describe())
    for _, ls in full[:5]:
        who = f" ({ls.process}, pid {ls.pid})" if ls.process else ""
        parts.append(
            f"listener {ls.address}:{ls.port}{who} has {ls.recv_q} connections waiting for a backlog of {ls.send_q}"
        )
    severity = Severity.WARNING if full else reading.severity(Severity.WARNING)
    f = start(
        facts,
        "KP304",
        [],
        confidence=Confidence.HIGH if (reading.growing or full) else Confidence.MEDIUM,
        severity=severity,
        summary="Listen queues overflow: " + "; ".join(parts) + "." + ("" if full else reading.confirm("netstat -s")),
    )
    f.evidence = reading.cites[:4] + [Cite(a.name, ls.line, ls.text) for a, ls in full[:3]]
    f.evidence += setting_cites(node, list(QUEUE_SYSCTLS))
    f.ongoing = True if (reading.growing or full) else None
    if full:
        f.subject = {"service": None, "workload": None, "listener": f"{full[0][1].address}:{full[0][1].port}"}
    for name, value in QUEUE_SYSCTLS.items():
        adv = sysctl_advice(node, name, value)
        if adv:
            f.fix.append(adv)
    f.fix.append(
        "Make the application accept faster and pass a larger backlog to listen(); for a Pod set "
        'securityContext.sysctls [{name: net.core.somaxconn, value: "32768"}] (per network namespace).'
    )
    yield f
