"""KP203: Local traffic policy refused although endpoints run on this node (seed 002)."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.checks.dataplane.common import (
    CLUSTER,
    RULES,
    by_service,
    capped,
    classes,
    finding_for,
    kube_proxy_rule,
)
from kpdoctor.checks.registry import check
from kpdoctor.dataplane.verify import Result
from kpdoctor.facts import Facts
from kpdoctor.model import Finding, Severity


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
    needs_all=CLUSTER,
)
def local_endpoints_not_recognised(facts: Facts) -> Iterator[Finding]:
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
    Fix: give kube-proxy the Node's exact name (hostnameOverride in the config file, set per node
        from spec.nodeName; on 1.13+ `--hostname-override` works with --config too) and restart
        it.
    References: seed 002; https://github.com/kubernetes/kubernetes/issues/57518;
        https://kubernetes.io/docs/reference/networking/virtual-ips/#traffic-policies
    """
    ver = facts.verification
    if ver is None:
        return
    out: list[Finding] = []
    for label, rs in sorted(by_service(ver.results, _applies).items()):
        local = sorted({e for r in rs for e in r.local_endpoints})
        node = facts.node
        where = f'node "{node.name}"' if node else "this node"
        summary = (
            f"{label}: the node drops {classes(rs)} as having no local endpoints, although "
            f"{len(local)} endpoint(s) run on {where}: {', '.join(local[:4])}."
        )
        f = finding_for(facts, "KP203", label, rs, summary, severity=Severity.CRITICAL)
        f.explained_by = ["node-ip-unresolved", "config-overrides-flags", *f.explained_by]
        f.fix = [
            "Make kube-proxy use this Node's exact name (hostnameOverride per node from spec.nodeName) and restart it."
        ]
        out.append(f)
    yield from capped(facts, "KP203", out, "whose local endpoints are not recognised")
