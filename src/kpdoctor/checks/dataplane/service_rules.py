"""KP200/KP201: Service ports the node does not forward, and forwarding no Service owns."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from kpdoctor.checks.common import PRINTED_SERVICES, start
from kpdoctor.checks.dataplane.common import (
    CLUSTER,
    MAX_CITES,
    RULES,
    by_service,
    capped,
    classes,
    finding_for,
    verification_not_evaluated,
)
from kpdoctor.dataplane.results import StaleRule
from kpdoctor.dataplane.session import Verified
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Confidence, Finding, Severity


@check(
    "KP200",
    cause="service-rules-missing",
    title="A Service port has no forwarding rules on this node",
    severity=Severity.CRITICAL,
    needs=RULES,
    abstains=verification_not_evaluated,
    needs_all=CLUSTER,
    needs_all_or=PRINTED_SERVICES,
    settles=True,
)
def service_rules_missing(facts: Facts, verified: Verified) -> Iterator[Finding]:
    """The cluster has the Service, the node's rules do nothing with its traffic.

    Symptom: connections to the ClusterIP (or NodePort, LB IP) time out from this node while
        the Service and its Pods look healthy; `iptables-save | grep <ClusterIP>` (in nftables
        mode, `nft list map ip kube-proxy service-ips`) finds nothing.
    Cause: kube-proxy has not written the Service's rules: its syncs fail (see the sync findings
        folded with this one), it lost its watch on the apiserver and never saw the Service, it
        runs in another mode than the rules collected, or someone flushed the tables.
    How it is detected: kpdoctor sends the Service's traffic through the node's actual rules
        (every table and chain, as the kernel would, in the mode kube-proxy runs in) and the
        packet leaves untouched: no DNAT, no REJECT. In nftables mode kube-proxy's own catch-all
        (`cluster-ips-check`: reject unknown ports of a ClusterIP, drop unallocated ClusterIPs)
        refuses a Service it has no element for: that is missing rules too. For a Service
        without endpoints the REJECT kube-proxy writes is missing. A Service whose endpoints
        are not shown (a `kubectl get svc` row, or Services given without their
        EndpointSlices) is judged only when its traffic is left untouched: kube-proxy writes a
        DNAT or a REJECT for every port of a Service that is not headless.
    Fix: fix what stops kube-proxy from syncing (folded findings), then restart kube-proxy so a
        full sync rewrites every rule; check `kubeproxy_sync_proxy_rules_last_timestamp_seconds`
        moves and run `kpdoctor verify` again.
    References: https://kubernetes.io/docs/reference/networking/virtual-ips/;
        https://kubernetes.io/docs/tasks/debug/debug-application/debug-service/
    """
    ver = verified.verification
    if ver is None:
        return
    out: list[Finding] = []
    missing = by_service(ver.problems(), lambda r: r.kind == "no-rules")
    # counted once (per label it was quadratic), and only when some port has no rules
    totals = Counter(label for _, label, _ in ver.statuses()) if missing else Counter[str]()
    for label, rs in sorted(missing.items()):
        total = totals[label]
        refused_only = all(r.expected and all(a.refused for a in r.expected) for r in rs)
        unshown = all(not r.expected for r in rs)  # its endpoints are not in the evidence
        if refused_only:
            summary = (
                f"{label} has no endpoints, and the node has no REJECT for it: clients wait for a timeout "
                f"instead of failing fast ({classes(rs)})."
            )
            sev = Severity.WARNING
        else:
            scope = "any of its traffic" if len(rs) == total else f"{len(rs)} of {total} traffic classes"
            fate = "The packets leave untouched."
            if any(e.no_service_rule for r in rs for e in r.actual):
                fate = "kube-proxy's own rule for addresses it has no Service rule for refuses them."
            summary = f"{label}: the node's rules do not forward {scope}: {classes(rs)}. {fate}"
            if unshown:
                summary += (
                    " Its endpoints are not shown, but kube-proxy writes rules for every port of a Service that is "
                    "not headless: a DNAT to its endpoints, or a REJECT when it has none."
                )
            sev = Severity.CRITICAL
        f = finding_for(facts, "KP200", label, rs, summary, severity=sev)
        f.fix = [
            "Restart kube-proxy on this node after fixing any sync failure reported here, then run "
            "`kpdoctor verify` again."
        ]
        out.append(f)
    yield from capped(facts, "KP200", out, "have no forwarding rules")


# How the state a mode switch left is removed, by the mode that left it.
_LEFTOVER_FIX = {
    "iptables": "Remove iptables mode's rules: run `kube-proxy --cleanup` once with the old "
    "configuration (mode iptables), or flush the KUBE-SVC/KUBE-SEP chains; then restart kube-proxy.",
    "ipvs": "Remove IPVS mode's state: `ipvsadm -C` and `ip link delete kube-ipvs0` (or `kube-proxy "
    "--cleanup` with mode ipvs), then restart kube-proxy.",
}


@check(
    "KP201",
    cause="stale-service-rules",
    title="The node forwards an address no Service owns",
    severity=Severity.WARNING,
    needs=RULES,
    needs_all=CLUSTER,
    reads_verification=True,
    settles=True,
)
def stale_service_rules(facts: Facts, verified: Verified) -> Iterator[Finding]:
    """Rules for a Service that no longer exists (or no longer has that address) still forward.

    Symptom: after a Service was deleted and recreated, clients that cached the old ClusterIP
        (or a DNS answer) still reach old backends from this node and not from others; a
        NodePort answers although no Service uses it.
    Cause: kube-proxy stopped applying changes (sync failures, a broken apiserver watch) so the
        old Service's chains were never removed; or the rules come from a kube-proxy that no
        longer runs (another mode, another backend) and nobody cleaned them up.
    How it is detected: every destination address and port the nat rules match on (in
        nftables mode, every element of kube-proxy's `service-ips` and `service-nodeports` maps)
        is sent through the rules; those that are DNATed although no Service, NodePort or
        hostPort in the cluster owns them are reported, with the Service the rule comments (or
        chain names) still name.
        After a mode switch, the old mode's state is judged against the mode kube-proxy runs
        in: its iptables Service rules still live on an IPVS or nftables node (they DNAT before
        IPVS or nftables see the packet), IPVS virtual servers no Service owns on an iptables
        node (the ClusterIPs on kube-ipvs0 still take the packets).
    Fix: fix the sync failure reported with this finding and restart kube-proxy (a full sync
        deletes chains it does not own any more); rules left by a kube-proxy in another mode are
        removed with `kube-proxy --cleanup` (run for that mode).
    References: seed 003; https://github.com/kubernetes/kubernetes/issues/92050
    """
    ver = verified.verification
    if ver is None or not ver.stale:
        return
    stale = [s for s in ver.stale if not s.leftover_of]
    for mode in dict.fromkeys(s.leftover_of for s in ver.stale if s.leftover_of):
        yield _leftovers(facts, [s for s in ver.stale if s.leftover_of == mode], mode, ver.mode)
    for s in stale[:5]:
        named = f" (the rules still name {s.label})" if s.label else ""
        what = "NodePort " if s.nodeport else ""
        f = start(
            facts,
            "KP201",
            [],
            confidence=Confidence.HIGH if s.label else Confidence.MEDIUM,
            summary=f"{what}{s.destination}/{s.protocol} is still forwarded to {', '.join(s.backends[:4])} "
            f"although no Service owns it{named}.",
        )
        f.subject = {"service": s.label, "workload": None}
        f.evidence = s.rules[:MAX_CITES]
        f.fix = ["Restart kube-proxy after fixing its sync (a full sync removes chains no Service owns)."]
        f.ongoing = True
        yield f
    if len(stale) > 5:
        rest = stale[5:]
        f = start(
            facts,
            "KP201",
            [],
            confidence=Confidence.MEDIUM,
            summary=f"{len(rest)} more stale destinations: {', '.join(s.destination for s in rest[:20])}.",
        )
        f.evidence = [s.rules[0] for s in rest[:3] if s.rules]
        f.ongoing = True
        yield f


def _leftovers(facts: Facts, stale: list[StaleRule], mode: str, running: str | None) -> Finding:
    """One finding for all that one old mode still forwards: its cause is one mode switch."""
    shown = [
        f"{'NodePort ' if s.nodeport else ''}{s.destination}/{s.protocol} -> {', '.join(s.backends[:2])}"
        + (" ..." if len(s.backends) > 2 else "")
        for s in stale[:6]
    ]
    more = f" and {len(stale) - 6} more" if len(stale) > 6 else ""
    f = start(
        facts,
        "KP201",
        [],
        confidence=Confidence.HIGH,
        summary=f"{mode} mode's state, left behind by a mode switch, still forwards {len(stale)} destination(s) "
        f"on this node although kube-proxy runs in {running} mode: {'; '.join(shown)}{more}.",
    )
    named = list(dict.fromkeys(s.label for s in stale if s.label))
    f.subject = {"service": named[0] if len(named) == 1 else None, "workload": None}
    f.evidence = [c for s in stale[:2] for c in s.rules[:2]]
    f.fix = [_LEFTOVER_FIX.get(mode, "Remove the old mode's state (`kube-proxy --cleanup`).")]
    f.ongoing = True
    return f
