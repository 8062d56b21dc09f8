"""KP208: an IPVS virtual server has no real server although its Service has ready endpoints."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start
from kpdoctor.checks.dataplane.common import (
    CLUSTER,
    RULES,
    by_service,
    capped,
    classes,
    finding_for,
    verification_not_evaluated,
)
from kpdoctor.dataplane.results import Result
from kpdoctor.dataplane.session import Verified
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity


def _applies(r: Result) -> bool:
    """Refused by a virtual server without real servers, while ready endpoints were expected."""
    wanted = any(not a.refused for a in r.expected)
    return wanted and any(e.no_real_servers for e in r.refusals())


# the kernel, when a connection reaches a virtual server without a usable real server
NO_DESTINATION = lazy_re.compile(r"IPVS: \w+: (TCP|UDP|SCTP) (\S+) - no destination available")


def _empty_without_objects(facts: Facts) -> Iterator[Finding]:
    """No cluster objects: virtual servers without real servers that the kernel log shows
    connections reaching ("no destination available"). A Service without ready endpoints has
    such a virtual server too, so it is said with what would tell."""
    empty = {
        (vs.protocol, vs.address): (vs, a)
        for vs, a in facts.ipvs_virtual_servers
        if vs.protocol != "FWM" and not vs.live
    }
    if not empty:
        return
    hits: dict[tuple[str, str], list[Cite]] = {}
    for log, k in facts.node_state.kernel_log:
        m = NO_DESTINATION.search(k.message)
        if m and (m.group(1), m.group(2)) in empty:
            hits.setdefault((m.group(1), m.group(2)), []).append(Cite(log.name, k.line, k.text))
    if not hits:
        return
    keys = sorted(hits)
    f = start(facts, "KP208", [], confidence=Confidence.MEDIUM, severity=Severity.WARNING)
    names = ", ".join(f"{p} {addr}" for p, addr in keys[:4])
    count = sum(len(v) for v in hits.values())
    f.summary = (
        f"IPVS virtual server(s) {names} have no real server, and the kernel turns connections to them away "
        f'("no destination available", {count} line(s)). kube-proxy left them empty unless their Services have '
        "no ready endpoint: give the Services and EndpointSlices (`kubectl get svc,endpointslices -A -o yaml`) "
        "to tell."
    )
    for key in keys[:4]:
        vs, artifact = empty[key]
        f.evidence.append(Cite(artifact, vs.line, vs.text))
        f.evidence.append(hits[key][-1])
    f.fix = [
        "If the Service's Pods are ready, restart kube-proxy on this node (a full sync adds the real servers "
        "again) and look at its log for sync errors."
    ]
    yield f


@check(
    "KP208",
    cause="ipvs-virtual-server-empty",
    title="An IPVS virtual server has no real server although its Service has ready endpoints",
    severity=Severity.CRITICAL,
    needs=RULES,
    abstains=verification_not_evaluated,
    needs_all=CLUSTER,
    needs_all_or=[Kind.KUBECTL_DESCRIBE],
    partial=_empty_without_objects,
    settles=True,
)
def ipvs_virtual_server_empty(facts: Facts, verified: Verified) -> Iterator[Finding]:
    """IPVS mode: the Service's virtual server exists but holds no real server that takes new
    connections, while the Service's EndpointSlices list ready endpoints.

    Symptom: connections to the Service fail from this node (refused, or they hang); `ipvsadm -Ln`
        shows the virtual server (`TCP 10.108.62.55:5473 rr`) with nothing under it, or only real
        servers at weight 0; the kernel logs `IPVS: rr: TCP 10.108.62.55:5473 - no destination
        available`.
    Without the cluster's objects, a virtual server without real servers that the kernel log
        shows connections reaching is reported as a warning asking for the EndpointSlices (a
        Service without ready endpoints has such a virtual server too).
    Cause: kube-proxy has not added the endpoints: its sync is deadlocked (the graceful-termination
        deadlock of 1.11-1.13, folded with this finding), failing, or its watch on the apiserver is
        broken; or real servers were deleted by hand.
    How it is detected: the Service's traffic is evaluated through the node's iptables rules and
        into the virtual server for its address (IPVS mode's own path: ipsets, kube-ipvs0, then
        IPVS at LOCAL_IN); the virtual server has no real server of weight above 0 while the
        EndpointSlices have ready endpoints. A weight-0 real server beside others is a draining
        endpoint, not this.
    Fix: fix what stops kube-proxy from syncing (folded findings) and restart it: a full sync adds
        the real servers again; check with `ipvsadm -Ln -t VIP:PORT`.
    References: seed 001; https://github.com/kubernetes/kubernetes/issues/71071
    """
    ver = verified.verification
    if ver is None:
        return
    out: list[Finding] = []
    for label, rs in sorted(by_service(ver.problems(), _applies).items()):
        servers = sorted({e.rule.text for r in rs for e in r.refusals() if e.rule is not None})
        ready = sorted({b for r in rs for a in r.expected[:1] for b in a.backends})
        summary = (
            f"{label}: its IPVS virtual server ({'; '.join(s.split(' rr')[0] for s in servers[:2])}) has no "
            f"real server taking new connections although {len(ready)} endpoint(s) are ready "
            f"({', '.join(ready[:4])}): {classes(rs)} refused."
        )
        f = finding_for(facts, "KP208", label, rs, summary)
        f.fix = ["Restart kube-proxy after fixing its sync (folded findings); then `kpdoctor verify` again."]
        out.append(f)
    yield from capped(facts, "KP208", out, "whose IPVS virtual servers are empty")
