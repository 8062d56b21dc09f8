"""KP203: Local traffic policy refused although endpoints run on this node (seed 002)."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.checks.common import start
from kpdoctor.checks.dataplane.common import (
    RULES,
    by_service,
    capped,
    classes,
    finding_for,
    kube_proxy_rule,
    verification_not_evaluated,
)
from kpdoctor.checks.sync.node_ip import corroborated, no_local_drops, services_with_endpoint_objects
from kpdoctor.dataplane.results import Result
from kpdoctor.dataplane.session import Verified
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Confidence, Finding, Severity

NOTE_TITLE = 'Rules drop Local-policy traffic as "has no local endpoints" (normal without a local Pod)'


def _applies(r: Result) -> bool:
    return (
        r.kind in ("refused", "partly-refused")
        and r.local_policy
        and bool(r.local_endpoints)
        and all(kube_proxy_rule(e) for e in r.refusals())
    )


@check(
    "KP203",
    cause="local-endpoints-not-recognised",
    title="Local-policy traffic is dropped although endpoints run on this node",
    severity=Severity.CRITICAL,
    needs=RULES,
    abstains=verification_not_evaluated,
    settles=True,
)
def local_endpoints_not_recognised(facts: Facts, verified: Verified) -> Iterator[Finding]:
    """externalTrafficPolicy=Local (or internalTrafficPolicy=Local) traffic is dropped as "has no
    local endpoints" while the Service's endpoints run on this very node.

    Symptom: an LB or NodePort Service with externalTrafficPolicy=Local times out on every node,
        or on this one, while its Pods are Running here; the rules carry `"<svc> has no local
        endpoints" -j DROP` (or `-j KUBE-MARK-DROP` in KUBE-XLB, before 1.25); the health check
        node port says "localEndpoints": 0.
    Cause: kube-proxy decides which endpoints are local by comparing their nodeName with its own
        node name. When that name is wrong (hostnameOverride ignored because --config is set,
        a hostnameOverride copied from another node, short vs FQDN hostname), no endpoint is
        local and Local-policy traffic is dropped.
    How it is detected: the Service's external (or internal, for internalTrafficPolicy=Local)
        traffic is evaluated through the node's rules and ends in kube-proxy's DROP/REJECT,
        while EndpointSlices place ready endpoints on this node (their nodeName is this node's
        name, taken from --node, the bundle or the Node object, never from kube-proxy's config).
        kube-proxy writes "has no local endpoints" rules on every healthy node that runs no Pod
        of a Local-policy Service, so such rules without the Node's name or the Service's
        EndpointSlices (and without what KP111 reads: the loopback fallback in the log, a
        hostnameOverride that is not the Node's name) are an info note naming what to give;
        with both given and no endpoint on this node, nothing is reported.
    Fix: give kube-proxy the Node's exact name (hostnameOverride in the config file, set per node
        from spec.nodeName; on 1.13+ `--hostname-override` works with --config too) and restart
        it.
    References: seed 002; https://github.com/kubernetes/kubernetes/issues/57518;
        https://kubernetes.io/docs/reference/networking/virtual-ips/#traffic-policies
    """
    ver = verified.verification
    out: list[Finding] = []
    for label, rs in sorted(by_service(ver.problems(), _applies).items()) if ver is not None else []:
        local = sorted({e for r in rs for e in r.local_endpoints})
        node = facts.node
        where = f'node "{node.name}"' if node else "this node"
        summary = (
            f"{label}: the node drops {classes(rs)} as having no local endpoints, although "
            f"{len(local)} endpoint(s) run on {where}: {', '.join(local[:4])}."
        )
        f = finding_for(facts, "KP203", label, rs, summary, severity=Severity.CRITICAL)
        f.fix = [
            "Make kube-proxy use this Node's exact name (hostnameOverride per node from spec.nodeName) and restart it."
        ]
        out.append(f)
    if not out:
        note = _undecided_note(facts)
        if note is not None:
            out.append(note)
    yield from capped(facts, "KP203", out, "whose local endpoints are not recognised")


def _undecided_note(facts: Facts) -> Finding | None:
    """ "has no local endpoints" rules with nothing to say whether they are wrong: an info note
    naming what would decide it, unless the EndpointSlices given already place every such
    Service's endpoints elsewhere, or KP111 reports the wrong node name itself."""
    drops = no_local_drops(facts)
    if not drops or corroborated(facts):
        return None
    node = facts.node
    known = services_with_endpoint_objects(facts)
    undecided = sorted({s for s, _ in drops if node is None or s not in known})
    if not undecided:
        return None
    need = []
    if node is None:
        need.append("this Node's name (--node)")
    if any(s not in known for s in undecided):
        need.append("the EndpointSlices (`kubectl get endpointslices -A -o json`)")
    f = start(facts, "KP203", [], confidence=Confidence.LOW, severity=Severity.INFO)
    f.title = NOTE_TITLE
    f.summary = (
        f'Rules drop external traffic for {len(undecided)} Service(s) as "has no local endpoints": '
        + ", ".join(undecided[:5])
        + (f" and {len(undecided) - 5} more" if len(undecided) > 5 else "")
        + ". kube-proxy writes this on every node that runs no Pod of an externalTrafficPolicy: Local "
        "Service, so it is normal unless one of their Pods runs here (then kube-proxy has the wrong "
        f"node name). Give {' and '.join(need)} to tell."
    )
    f.evidence = [c for s, c in drops if s in undecided][:3]
    f.subject = {"service": undecided[0], "workload": None}
    if node:
        f.subject["node"] = node.name
    f.fix = [
        "Check with `kubectl get endpointslices -A -o wide` whether an endpoint of these Services has this "
        "node's nodeName; if so, give kube-proxy the Node's exact name (hostnameOverride per node from "
        "spec.nodeName) and restart it."
    ]
    return f
