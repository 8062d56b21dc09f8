"""KP313: the kernel's neighbour (ARP/NDP) table is full, so new neighbours cannot be reached."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.logged import messages_naming, start_logged
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Confidence, Finding, Severity

CAUSE = "neighbour-table-overflow"
GC_THRESH = (
    "net.ipv4.neigh.default.gc_thresh1",
    "net.ipv4.neigh.default.gc_thresh2",
    "net.ipv4.neigh.default.gc_thresh3",
)


@check(
    "KP313",
    cause=CAUSE,
    title="The neighbour (ARP) table overflows",
    severity=Severity.WARNING,
    needs=[Kind.KERNEL_LOG, Kind.KUBE_PROXY_LOG],
    reads_messages=True,
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
        pasted fragment; the gc_thresh settings, when a sysctl listing is given, are named.
    Fix: raise the thresholds above the number of neighbours the node can have, e.g.
        `sysctl -w net.ipv4.neigh.default.gc_thresh1=4096 net.ipv4.neigh.default.gc_thresh2=8192
        net.ipv4.neigh.default.gc_thresh3=16384` (and the net.ipv6 ones), persisted in
        /etc/sysctl.d/.
    References: https://www.kernel.org/doc/html/latest/networking/ip-sysctl.html;
        https://github.com/kubernetes/kops/issues/4533
    """
    logged = messages_naming(facts, CAUSE)
    if not logged:
        return
    f = start_logged(facts, "KP313", logged, confidence=Confidence.HIGH)
    f.summary = "The kernel's neighbour table is full: it drops packets to neighbours it has no entry for."
    node = facts.node_state
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
