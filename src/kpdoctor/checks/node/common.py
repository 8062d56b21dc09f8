"""What the packet-loss checks share: reading drop counters the same way, and sysctl advice."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kpdoctor.facts.node import Change, NodeState, Sample
from kpdoctor.model import Cite, Severity

SINCE_BOOT = "a total since boot (one snapshot: when it happened is unknown)"
# A since-boot total that is at least this share of the traffic it belongs to is a warning on its
# own: averaged over the node's whole uptime, one packet or connection in a hundred lost is far
# above the near-zero these counters show on a healthy node, whenever it happened.
SIGNIFICANT_SHARE = 0.01


@dataclass(frozen=True, slots=True)
class Meaning:
    """What a drop counter counts, and the counter(s) of the traffic it is a share of."""

    label: str
    base: tuple[str, ...] = ()
    base_label: str = ""
    in_base: bool = False  # the drops are part of the base (else the share is drops / (base + drops))
    zero_base_uncounted: bool = False  # a base of 0 means "not counted" (recent kernels' conntrack insert)


MEANINGS: dict[str, Meaning] = {
    # UDP drops are counted in InErrors, not in In/OutDatagrams (counted when a socket reads/sends)
    "UdpRcvbufErrors": Meaning("UDP receive-buffer errors", ("UdpInDatagrams",), "UDP datagrams that arrived"),
    "UdpSndbufErrors": Meaning("UDP send-buffer errors", ("UdpOutDatagrams",), "UDP datagrams sent or dropped"),
    "Udp6RcvbufErrors": Meaning("UDPv6 receive-buffer errors", ("Udp6InDatagrams",), "UDPv6 datagrams that arrived"),
    "Udp6SndbufErrors": Meaning("UDPv6 send-buffer errors", ("Udp6OutDatagrams",), "UDPv6 datagrams sent or dropped"),
    "TcpExtTCPRcvQDrop": Meaning(
        "TCP segments dropped at a full receive queue", ("TcpInSegs",), "TCP segments received", True
    ),
    "TcpExtPruneCalled": Meaning("TCP receive queues pruned", ("TcpInSegs",), "TCP segments received", True),
    "TcpExtListenOverflows": Meaning(
        "listen-queue overflows", ("TcpPassiveOpens",), "connection attempts (passive opens plus overflows)"
    ),
    "TcpExtListenDrops": Meaning(
        "SYNs dropped at listening sockets", ("TcpPassiveOpens",), "connection attempts (passive opens plus drops)"
    ),
    "conntrack.insert_failed": Meaning(
        "failed conntrack inserts", ("conntrack.insert",), "attempted inserts", zero_base_uncounted=True
    ),
    "conntrack.drop": Meaning(
        "packets conntrack dropped", ("conntrack.insert",), "new entries plus drops", zero_base_uncounted=True
    ),
    "conntrack.early_drop": Meaning(
        "entries evicted early", ("conntrack.insert",), "new entries plus evictions", zero_base_uncounted=True
    ),
    "TcpExtIPReversePathFilter": Meaning(
        "packets dropped by the reverse-path filter", ("IpInReceives",), "IP packets received", True
    ),
    # Losses no check of its own reads (KP140 reports them as unexplained). Names as nstat prints
    # the kernel's SNMP MIBs (include/uapi/linux/snmp.h) and conntrack its per-CPU statistics.
    "TcpExtTCPBacklogDrop": Meaning(
        "TCP segments dropped at a full socket backlog", ("TcpInSegs",), "TCP segments received", True
    ),
    "TcpExtTCPOFODrop": Meaning(
        "out-of-order TCP segments dropped (receive memory)", ("TcpInSegs",), "TCP segments received", True
    ),
    "TcpExtTCPZeroWindowDrop": Meaning(
        "TCP segments dropped at a zero window", ("TcpInSegs",), "TCP segments received", True
    ),
    "TcpExtTCPReqQFullDrop": Meaning(
        "SYNs dropped at a full request queue", ("TcpPassiveOpens",), "connection attempts (passive opens plus drops)"
    ),
    "TcpExtTCPAbortOnMemory": Meaning(
        "TCP connections aborted for lack of memory", ("TcpActiveOpens", "TcpPassiveOpens"), "connections opened"
    ),
    "IpInDiscards": Meaning(
        "incoming IP packets discarded (no buffer space)", ("IpInReceives",), "IP packets received", True
    ),
    "IpOutDiscards": Meaning(
        "outgoing IP packets discarded (no buffer space)", ("IpOutRequests",), "IP packets sent", True
    ),
    "IpFragFails": Meaning(
        "IP packets that had to be fragmented and could not be (DF set)", ("IpOutRequests",), "IP packets sent", True
    ),
    "IpReasmFails": Meaning("IP fragments that failed to reassemble", ("IpReasmReqds",), "fragments received", True),
    # the neighbour tables' own counts (/proc/net/stat/arp_cache, ip -s ntable; parse/neigh_stats):
    # neigh_alloc refusing a new entry at gc_thresh3, and packets dropped while a neighbour's address
    # was being resolved (the queue of unres_qlen packets per entry was full: __neigh_event_send)
    **{
        f"neigh.{table}.table_fulls": Meaning(f"new neighbours refused: the {label} was full")
        for table, label in (("arp_cache", "ARP table"), ("ndisc_cache", "IPv6 neighbour table"), ("table", "table"))
    },
    **{
        f"neigh.{table}.unresolved_discards": Meaning(f"packets dropped awaiting {label} resolution (unres_qlen full)")
        for table, label in (("arp_cache", "ARP"), ("ndisc_cache", "IPv6 neighbour"), ("table", "neighbour"))
    },
    # /proc/net/softnet_stat (parse/softnet): dropped before any protocol saw them
    "softnet.dropped": Meaning(
        "packets dropped at a full input backlog (net.core.netdev_max_backlog)",
        ("softnet.processed",),
        "packets the CPUs received",
    ),
    "softnet.flow_limit_count": Meaning(
        "packets dropped by RPS flow limits", ("softnet.processed",), "packets the CPUs received"
    ),
    "conntrack.chaintoolong": Meaning(
        "conntrack inserts refused: hash chain too long",
        ("conntrack.insert",),
        "attempted inserts",
        zero_base_uncounted=True,
    ),
}


@dataclass(frozen=True, slots=True)
class Total:
    """A non-zero since-boot total, with its share of the traffic it belongs to when known."""

    name: str
    sample: Sample
    share: float | None = None
    of: int | None = None  # the traffic the share is of

    def describe(self) -> str:
        m = MEANINGS.get(self.name)
        text = f"{self.sample.value:,} {labelled(self.name)} since boot"
        if self.share is not None and self.of is not None and m is not None:
            text += f", {_pct(self.share)} of {self.of:,} {m.base_label}"
        return text


def labelled(name: str) -> str:
    """A counter's name with what it counts, when known: "UDP receive-buffer errors (UdpRcvbufErrors)"."""
    m = MEANINGS.get(name)
    return f"{m.label} ({name})" if m else name


def _pct(share: float) -> str:
    return f"{share:.1%}" if share >= 0.01 else f"{share:.2%}" if share >= 0.0001 else f"{share:.4%}"


@dataclass(slots=True)
class CounterReading:
    """Drop counters as the evidence shows them: growing now (two snapshots) or totals."""

    growing: list[tuple[str, Change]] = field(default_factory=list)
    totals: list[Total] = field(default_factory=list)  # non-zero, not known to grow

    @property
    def cites(self) -> list[Cite]:
        out: list[Cite] = []
        for _, c in self.growing:
            out += [c.first.cite, c.last.cite]
        out += [t.sample.cite for t in self.totals]
        return list(dict.fromkeys(out))

    @property
    def significant(self) -> list[Total]:
        """Totals that are a large share of their traffic (see SIGNIFICANT_SHARE)."""
        return [t for t in self.totals if t.share is not None and t.share >= SIGNIFICANT_SHARE]

    def describe(self) -> str:
        if self.growing:
            return "; ".join(c.describe(labelled(n)) for n, c in self.growing)
        totals = "; ".join(t.describe() for t in self.totals)
        return totals + " (a total since boot, from one snapshot: when is unknown)"

    def confirm(self, command: str) -> str:
        """How to tell whether totals grow now: a second snapshot."""
        if self.growing or not self.totals:
            return ""
        return (
            f" To see whether it is happening now, run `{command}` twice a minute apart and give both"
            " outputs (kpdoctor compares them)."
        )

    def severity(self, confirmed: Severity) -> Severity:
        """``confirmed`` when a counter grows between snapshots or a total is a large share of its
        traffic (a warning at most: when it happened is unknown); otherwise a total is info."""
        if self.growing:
            return confirmed
        return min(confirmed, Severity.WARNING) if self.significant else Severity.INFO


def read_counters(node: NodeState, names: list[str]) -> CounterReading:
    out = CounterReading()
    for name in names:
        ch = node.change(name)
        if ch is not None:
            if ch.growth > 0:
                out.growing.append((name, ch))
            continue  # two snapshots and no growth: nothing happening now
        tot = node.total(name)
        if tot is not None and tot.value > 0:
            out.totals.append(_with_share(node, name, tot))
    return out


def _with_share(node: NodeState, name: str, tot: Sample) -> Total:
    """The total with its share of its base, read from the same snapshot when the base is there."""
    m = MEANINGS.get(name)
    if m is None or not m.base:
        return Total(name, tot)
    base = 0
    for b in m.base:
        s = node.total(b)
        if s is None or s.snapshot != tot.snapshot:
            return Total(name, tot)
        base += s.value
    if base <= 0 and m.zero_base_uncounted:
        return Total(name, tot)  # a kernel that does not count the base (conntrack insert=0)
    of = base if m.in_base else base + tot.value
    if of <= 0:
        return Total(name, tot)
    return Total(name, tot, min(tot.value / of, 1.0), of)


def sysctl_advice(node: NodeState, name: str, suggested: int | str, *, only_raise: bool = True) -> str | None:
    """``sysctl -w name=value`` (persisted), unless the node already has at least that."""
    cur = node.setting(name)
    if cur is not None and only_raise and isinstance(suggested, int):
        v = cur.int()
        if v is not None and v >= suggested:
            return None
    now = f" (now {cur.value})" if cur is not None else ""
    return f"sysctl -w {name}={suggested}{now}; persist it in /etc/sysctl.d/90-kpdoctor.conf (`{name} = {suggested}`)"


def setting_cites(node: NodeState, names: list[str]) -> list[Cite]:
    return [s.cite for n in names if (s := node.setting(n)) is not None]


def as_dict(v: object) -> dict[str, Any]:
    """A field of a Kubernetes object that should be an object: {} when it is anything else."""
    return v if isinstance(v, dict) else {}


def as_list(v: object) -> list[Any]:
    """A field that should be a list: [] when it is anything else (null, a string, a number)."""
    return v if isinstance(v, list) else []
