"""KP313: the kernel's neighbour (ARP/NDP) table is full, so new neighbours cannot be reached."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start, suspect
from kpdoctor.checks.logged import messages_naming, start_logged
from kpdoctor.checks.node.common import read_counters
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse import neighbours
from kpdoctor.parse.neigh_stats import TABLES

CAUSE = "neighbour-table-overflow"
GC_THRESH = (
    "net.ipv4.neigh.default.gc_thresh1",
    "net.ipv4.neigh.default.gc_thresh2",
    "net.ipv4.neigh.default.gc_thresh3",
)
# the kernel's count of refused entries, per table (checks/node/common.MEANINGS)
FULLS = [f"neigh.{table}.table_fulls" for table in (*TABLES, "table")]
DEFAULT_THRESH3 = 1024  # net/ipv4/arp.c and net/ipv6/ndisc.c: .gc_thresh3 = 1024
COUNT_ONCE = "cat /proc/net/stat/arp_cache"
COUNT_AGAIN = f"{COUNT_ONCE} (twice, a minute apart: table_fulls growing)"


@check(
    "KP313",
    cause=CAUSE,
    title="The neighbour (ARP) table overflows",
    severity=Severity.WARNING,
    needs=[Kind.KERNEL_LOG, Kind.KUBE_PROXY_LOG, Kind.NEIGH_STATS, Kind.NEIGHBOURS],
    reads_messages=True,
    counters=FULLS,
)
def neighbour_overflow(facts: Facts) -> Iterator[Finding]:
    """The kernel cannot add neighbour entries: traffic to Pods or nodes it has no entry for is lost.

    Symptom: some Pods or Services are unreachable from a node, intermittently and more as the
        cluster grows; dmesg says `neighbour: arp_cache: neighbor table overflow!` (or, in old
        kernels, `Neighbour table overflow.`).
    Cause: the node talks to more neighbours (Pods on a flat or bridged network, nodes on one L2
        segment) than net.ipv4.neigh.default.gc_thresh3 allows (1024 by default); the kernel
        then refuses new entries and drops the packets that would need them.
    How it is detected: the kernel's own message (the messages catalogue), in the kernel log or a
        pasted fragment, or its own count of the entries it refused (`table_fulls` of
        /proc/net/stat/arp_cache or ndisc_cache, `ip -s ntable show`: counted each time it
        would log the message): growing between two readings, it happens now; a total from one
        reading happened since boot. A table holding gc_thresh3 entries (`ip -s ntable` shows
        both; the sysctl or the default 1024 otherwise), or as many entries listed by `ip neigh`
        or `arp -n`, with nothing refused yet is the suspected cause. The gc_thresh settings,
        when a sysctl listing is given, are named.
    Fix: raise the thresholds above the number of neighbours the node can have, e.g.
        `sysctl -w net.ipv4.neigh.default.gc_thresh1=4096 net.ipv4.neigh.default.gc_thresh2=8192
        net.ipv4.neigh.default.gc_thresh3=16384` (and the net.ipv6 ones), persisted in
        /etc/sysctl.d/.
    References: https://www.kernel.org/doc/html/latest/networking/ip-sysctl.html;
        https://github.com/kubernetes/kops/issues/4533
    """
    logged = messages_naming(facts, CAUSE)
    node = facts.node_state
    counted = read_counters(node, FULLS)
    if logged:
        f = start_logged(facts, "KP313", logged, confidence=Confidence.HIGH)
        f.summary = "The kernel's neighbour table is full: it drops packets to neighbours it has no entry for."
        f.evidence += counted.cites[:2]
    elif counted.growing or counted.totals:
        full_now = _at_limit(facts)
        f = start(facts, "KP313", [], confidence=Confidence.HIGH if counted.growing or full_now else Confidence.MEDIUM)
        f.evidence = counted.cites[:4] + ([full_now[1]] if full_now else [])
        f.ongoing = True if counted.growing else None
        f.summary = (
            f"The neighbour table overflowed: {counted.describe()}."
            + (f" It holds its limit now ({full_now[0]})." if full_now else counted.confirm(COUNT_ONCE))
        )
    elif (full_now := _at_limit(facts)) is not None:
        f = start(facts, "KP313", [], confidence=Confidence.MEDIUM)
        f.evidence = [full_now[1]]
        suspect(
            f,
            "the table holds as many entries as gc_thresh3 allows; nothing shows a refusal yet",
            ["dmesg -T | grep -i 'table overflow'", COUNT_AGAIN],
            Confidence.MEDIUM,
        )
        f.summary = (
            f"The neighbour table is at its limit ({full_now[0]}): the next new neighbour is refused, and its "
            "packets dropped, unless garbage collection frees an entry."
        )
    else:
        return
    limits = [(k, s) for k in GC_THRESH if (s := node.setting(k)) is not None]
    if limits:
        f.summary += (
            " The node's thresholds: " + ", ".join(f"{k.rsplit('.', 1)[-1]}={s.value}" for k, s in limits) + "."
        )
    f.fix = [
        "Raise net.ipv4.neigh.default.gc_thresh1/2/3 (and the net.ipv6 ones) above the number of neighbours the "
        "node can have, and persist them in /etc/sysctl.d/.",
    ]
    yield f


def _at_limit(facts: Facts) -> tuple[str, Cite] | None:
    """A table whose entries reach its gc_thresh3, said and cited: its count (``ip -s ntable``
    shows the limit beside it; /proc's rows only the count), or as many entries listed (``ip
    neigh``, ``arp -n``: one namespace's share of the table, so at least that many), against the
    sysctl or the kernel's default."""
    node = facts.node_state
    listed = _listed(facts)
    for table in (*TABLES, "table"):
        family = "ipv6" if table == "ndisc_cache" else "ipv4"
        name = "the IPv6 neighbour table" if family == "ipv6" else "the ARP table"
        shown = node.total(f"neigh.{table}.thresh3")
        setting = node.setting(f"net.{family}.neigh.default.gc_thresh3")
        limit = shown.value if shown is not None else (setting.int() if setting is not None else None)
        limit = limit if limit is not None and limit > 0 else DEFAULT_THRESH3
        entries = node.total(f"neigh.{table}.entries")
        if entries is not None and entries.value >= limit:
            return f"{name}: {entries.value} entries, gc_thresh3 {limit}", entries.cite
        rows = listed.get(6 if family == "ipv6" else 4, [])
        if table != "table" and len(rows) >= limit:
            return f"{name}: {len(rows)} entries listed, gc_thresh3 {limit}", rows[-1]
    return None


def _listed(facts: Facts) -> dict[int, list[Cite]]:
    """The neighbour entries the node's listings show, one per address and interface, by IP version."""
    seen: dict[tuple[str, str | None], Cite] = {}
    for n, cite in facts.records(neighbours.SHAPE):
        seen.setdefault((str(n.address), n.interface), cite)
    out: dict[int, list[Cite]] = {}
    for (address, _), cite in seen.items():
        out.setdefault(6 if ":" in address else 4, []).append(cite)
    return out
