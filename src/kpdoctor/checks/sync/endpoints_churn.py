"""KP128: Endpoints rewritten every few seconds by leader election, each write a kube-proxy sync."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import note_version, start
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check, signature
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.versions import KubeVersion

LEADER_ANNOTATION = "control-plane.alpha.kubernetes.io/leader"
# From 1.19 kube-proxy reads EndpointSlices, and the mirroring controller skips Endpoints that
# carry the leader annotation: their renewals no longer reach kube-proxy.
SLICES_SINCE = KubeVersion(1, 19, 0)
# The same writes seen in a log: the apiserver's request log (its own, or merged into one
# process's log as localkube and k3s do) names the client, whose user agent ends in
# `/leader-election`; kube-proxy's config loop logs each Endpoints update it receives.
LEADER_ENDPOINTS_WRITE = signature(
    "leader-election-endpoints-write",
    "leader-election",
    r"(PUT|PATCH) /api/v1/namespaces/([^/ ]+)/endpoints/([^: ]+).*leader-election",
)
# ... or an Endpoints watch event that another watcher logged, the annotation in the object
LEADER_ENDPOINTS_EVENT = signature(
    "leader-election-endpoints-event",
    "control-plane.alpha.kubernetes.io/leader",
    r"control-plane\.alpha\.kubernetes\.io/leader.*/api/v1/namespaces/([^/ ]+)/endpoints/([^] ,\"]+)",
)


@check(
    "KP128",
    cause="endpoints-churn",
    title="Endpoints rewritten every few seconds drive kube-proxy's syncs",
    severity=Severity.WARNING,
    needs=[Kind.K8S_OBJECTS, Kind.KUBE_PROXY_LOG],
    explains=("sync-too-frequent",),
)
def endpoints_churn(facts: Facts) -> Iterator[Finding]:
    """Leader election renews an annotation on Endpoints objects every few seconds.

    Symptom: kube-proxy syncs back to back and burns CPU on a quiet cluster; a watch on
        Endpoints shows `MODIFIED` for kube-scheduler and kube-controller-manager every two
        seconds, with only `control-plane.alpha.kubernetes.io/leader`'s renewTime changing.
    Cause: components that elect their leader through an Endpoints object (the control plane
        before Leases, and operators that still do) write it on every renewal; kube-proxy
        before 1.19 watched Endpoints and queued a sync for every change.
    How it is detected: Endpoints objects carrying the leader annotation (each a write every
        renewal period); how many such objects or events the evidence holds; or, in a log,
        the apiserver's request lines for Endpoints writes by a `leader-election` client
        (medium confidence in kube-proxy's own log: localkube and k3s merge both into one), or
        an Endpoints watch event carrying the annotation that another watcher logged (low);
        kube-proxy's version (1.19+ reads EndpointSlices, which skip those Endpoints).
    Fix: move those components to Lease-based leader election
        (`--leader-elect-resource-lock=leases`), or kube-proxy to 1.19+ (EndpointSlices);
        raise `iptables.minSyncPeriod` to batch syncs meanwhile.
    References: https://github.com/kubernetes/kubernetes/issues/23812
    """
    held = [e.obj for e in facts.cluster.endpoints if LEADER_ANNOTATION in e.annotations]
    kpv = facts.kube_proxy_version
    if kpv is not None and kpv.value.at_least(SLICES_SINCE):
        return  # EndpointSlices: these renewals do not reach kube-proxy
    if not held:
        yield from _from_log(facts)
        return
    names = list(dict.fromkeys(f"{e.namespace}/{e.name}" for e in held))
    f = start(facts, "KP128", [], confidence=Confidence.MEDIUM)
    f.summary = (
        f"{len(names)} Endpoints object(s) ({', '.join(names[:3])}) carry a leader-election annotation that is "
        "renewed every few seconds: each renewal is an Endpoints update every kube-proxy before 1.19 syncs for."
    )
    if len(held) > len(names):
        f.summary += f" The evidence holds {len(held)} versions of them."
    for e in held[:3]:
        f.evidence.append(Cite(e.artifact, e.line, f"Endpoints {e.namespace}/{e.name}: {LEADER_ANNOTATION}"))
    note_version(f, kpv, "kube-proxy")
    f.fix = [
        "Move those components to Lease-based leader election (`--leader-elect-resource-lock=leases`), or "
        "kube-proxy to 1.19+ (EndpointSlices skip these Endpoints); meanwhile raise `iptables.minSyncPeriod`.",
    ]
    yield f


def _from_log(facts: Facts) -> Iterator[Finding]:
    """The renewals seen in a log (the apiserver's request lines, a watcher's events); in
    kube-proxy's own log they are updates it received, not a guess."""
    writes = facts.log.hits(LEADER_ENDPOINTS_WRITE.id, LEADER_ENDPOINTS_EVENT.id)
    if not writes:
        return
    # in kube-proxy's own log (localkube and k3s merge the apiserver's into it), not a fragment
    # of another program's: kube-proxy then receives each of those writes
    own = any(
        h.sig == LEADER_ENDPOINTS_WRITE.id and a.name == h.artifact and not a.attrs.get("fragment")
        for h in writes
        for a in facts.of(Kind.KUBE_PROXY_LOG)
    )
    names = list(dict.fromkeys("/".join(map(str, h.groups[-2:])) for h in writes))
    count = facts.log.count(LEADER_ENDPOINTS_WRITE.id, LEADER_ENDPOINTS_EVENT.id)
    f = start(facts, "KP128", writes, confidence=Confidence.MEDIUM if own else Confidence.LOW)
    f.summary = (
        f"A leader-election client rewrites the Endpoints object(s) {', '.join(names[:3])} "
        f"({count} write(s) in the log): every renewal is an Endpoints "
        "update that kube-proxy before 1.19 syncs its rules for."
    )
    f.confidence_reason = (
        "leader-election writes to Endpoints in kube-proxy's own log"
        if own
        else "leader-election writes to Endpoints seen by another watcher, or outside kube-proxy's log"
    )
    note_version(f, facts.kube_proxy_version, "kube-proxy")
    f.fix = [
        "Move those components to Lease-based leader election (`--leader-elect-resource-lock=leases`), or "
        "kube-proxy to 1.19+ (EndpointSlices skip these Endpoints); meanwhile raise `iptables.minSyncPeriod` "
        "(`--iptables-min-sync-period`) so updates are batched.",
    ]
    yield f
