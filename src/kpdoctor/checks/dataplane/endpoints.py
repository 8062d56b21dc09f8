"""KP202: the node sends a Service to other backends than its ready endpoints."""

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
    kube_proxy_rule,
    verification_not_evaluated,
)
from kpdoctor.dataplane.results import Result
from kpdoctor.dataplane.session import Verified
from kpdoctor.dataplane.verify import affinity_difference
from kpdoctor.facts import Facts, ListedBackends
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity


def _applies(r: Result) -> bool:
    if r.kind in ("backends", "not-refused", "affinity"):
        return True
    if r.kind in ("refused", "partly-refused"):
        # kube-proxy's own "has no endpoints" while the cluster has some (not a local-policy case,
        # and not someone else's DROP: those are KP203 and KP204)
        if any(e.no_real_servers for e in r.refusals()):
            return False  # an IPVS virtual server without real servers: KP208 says so
        return all(kube_proxy_rule(e) for e in r.refusals()) and not (r.local_policy and r.local_endpoints)
    return False


# kube-proxy's comment on a Service's rules: "namespace/name:port" (ServicePortName.String(), no
# ":port" for an unnamed port); newer releases add " -> ip:port" to a KUBE-SVC rule's, the
# endpoint it picks (upstream's fixtures: "ns1/svc1:p80 -> 10.180.0.1:80")
_COMMENT = lazy_re.compile(r'--comment (?:"(?P<quoted>[^"]*)"|(?P<bare>\S+))')
_DNAT = lazy_re.compile(r"-j DNAT .*?--to-destination (\S+)")
_SERVICE_COMMENT = lazy_re.compile(
    r"^(?P<ns>[a-z0-9][-a-z0-9]*)/(?P<name>[a-z0-9][-a-z0-9.]*)(?::\S*)?(?: -> (?P<ep>\S+))?$"
)


def _backends_outside_listing(facts: Facts, verified: Verified | None) -> Iterator[Finding]:
    """Rules that send a Service to an ``ip:port`` its listing of ready endpoints (all of them)
    does not hold: the DNAT of a KUBE-SEP chain, or a KUBE-SVC rule's "-> ip:port", as a
    grep'd dump, ``iptables -S`` or a whole dump shows them, against EndpointSlices, a
    described Service or a `kubectl get endpoints` row. A whole dump with the Service's objects
    is verified in full instead (this is for what verification does not judge)."""
    # a whole dump verified with the objects is judged in full there: against it, only what
    # verification does not read (a `kubectl get endpoints` row)
    if verified is not None and all(rs.form == "save" for rs in facts.rulesets):
        listed = unverified = facts.backends_in_tables
    else:
        listed = facts.listed_backends
        unverified = {k: v for k, v in listed.items() if not v.objects}
    stale: dict[str, dict[str, Cite]] = {}
    listing: dict[str, ListedBackends] = {}
    namespaces: dict[str, set[str]] = {}  # a Service name's namespaces in the rules
    for rs in facts.rulesets:
        want = unverified if verified is not None and rs.form == "save" else listed
        if not want:
            continue
        names = {name for _, name in want}
        for t in rs.tables.values():
            if t.name not in ("nat", "unknown"):
                continue
            for r in t.rules:
                # a dump of 10,000 Services has 100,000 such rules: read with a regex, not tokenised
                if not r.chain.startswith(("KUBE-SEP-", "KUBE-SVC-")) or (c := _COMMENT.search(r.body)) is None:
                    continue
                m = _SERVICE_COMMENT.match(c["quoted"] if c["quoted"] is not None else c["bare"])
                if m is None or m["name"] not in names:
                    continue
                namespaces.setdefault(m["name"], set()).add(m["ns"])
                dest = m["ep"]
                if r.chain.startswith("KUBE-SEP-") and (d := _DNAT.search(r.body)) is not None:
                    dest = d[1]
                hit = want.get((m["ns"], m["name"])) or want.get((None, m["name"]))
                if not dest or hit is None:
                    continue
                if dest not in hit.backends:
                    svc = f"{m['ns']}/{m['name']}"
                    stale.setdefault(svc, {}).setdefault(dest, Cite(rs.artifact, r.line, r.text.strip()))
                    listing.setdefault(svc, hit)
    for svc, dests in sorted(stale.items()):
        hit = listing[svc]
        if (None, svc.split("/", 1)[1]) in listed and len(namespaces[svc.split("/", 1)[1]]) > 1:
            continue  # a listing without its namespace, and rules for that name in two: whose is it?
        f = start(facts, "KP202", [], confidence=Confidence.MEDIUM, severity=Severity.CRITICAL)
        shown = ", ".join(sorted(hit.backends)[:4])
        shown += f" and {len(hit.backends) - 4} more" if len(hit.backends) > 4 else ""
        which = "ready endpoints" if hit.ready_only else "endpoints, ready or not"
        f.summary = (
            f"{svc}: the node's rules send it to {len(dests)} backend(s) that are not among its {which}: "
            f"{', '.join(sorted(dests)[:6])} (the listing given has {shown}, every one). kube-proxy has not "
            "applied the Service's current endpoints, if the two listings were taken at the same time."
        )
        f.evidence = [*list(dests.values())[:3], hit.cite]
        f.subject = {"service": svc, "workload": None}
        f.fix = ["Restart kube-proxy after fixing its sync (folded findings); verify again."]
        yield f


# Services a cluster cannot work without: when kube-proxy rejects these, everything breaks.
_VITAL = lazy_re.compile(r"^(kube-system/(kube-dns|coredns)|default/kubernetes)(:|$)")


def _without_objects(facts: Facts) -> Iterator[Finding]:
    """Without the Services' objects: rules that send a Service elsewhere than a listing of its
    ready endpoints says, and the Service ports kube-proxy rejects as having no endpoints."""
    yield from _backends_outside_listing(facts, None)
    yield from _rejected_without_objects(facts)


def _rejected_without_objects(facts: Facts) -> Iterator[Finding]:
    """Rules only: the Service ports kube-proxy rejects as having no endpoints, in a note."""
    seen: dict[str, Cite] = {}
    for svc, c in facts.services_commented("has no endpoints"):
        seen.setdefault(svc, c)
    if not seen:
        return
    ports = sorted(seen, key=lambda s: (not _VITAL.match(s), s))
    vital = [s for s in ports if _VITAL.match(s)]
    f = start(facts, "KP202", [], confidence=Confidence.LOW, severity=Severity.INFO)
    f.title = "Services rejected as having no endpoints (the cluster's objects would tell whether rightly)"
    f.summary = (
        f'The node rejects {len(ports)} Service port(s) as "has no endpoints": '
        + ", ".join(ports[:5])
        + (f" and {len(ports) - 5} more" if len(ports) > 5 else "")
        + ". "
        + "".join(
            f"{v} among them: "
            + ("every DNS lookup from Pods fails. " if "/kubernetes" not in v else "in-cluster API calls fail. ")
            for v in vital[:2]
        )
        + "That is right when none of their Pods is ready; when their EndpointSlices list ready endpoints, "
        "kube-proxy's view is stale (a failing sync or watch, or no EndpointSlices written for it). Give the "
        "Services and EndpointSlices (`kubectl get svc,endpointslices -A -o yaml`) to tell."
    )
    f.evidence = [seen[s] for s in ports[:3]]
    f.subject = {"service": ports[0].split(":")[0], "workload": None}
    f.fix = [
        "Compare with `kubectl -n <namespace> get endpointslices -l kubernetes.io/service-name=<name>`: "
        "ready endpoints there mean kube-proxy has not applied them; look at its log for sync or watch "
        "errors and restart it."
    ]
    yield f


@check(
    "KP202",
    cause="endpoints-out-of-sync",
    title="The node's backends for a Service differ from its ready endpoints",
    severity=Severity.CRITICAL,
    needs=RULES,
    abstains=verification_not_evaluated,
    needs_all=CLUSTER,
    needs_all_or=[Kind.KUBECTL_DESCRIBE],
    partial=_without_objects,
    settles=True,
)
def endpoints_out_of_sync(facts: Facts, verified: Verified) -> Iterator[Finding]:
    """The rules send a Service's traffic to Pods that are gone, or miss Pods that are ready.

    Symptom: a share of connections to a Service fails (connection refused or timeout) from this
        node only; after a rollout, old Pod IPs still receive traffic; new Pods get none; or the
        node rejects a Service as "has no endpoints" while its Pods are ready; or clients stick
        to one Pod although the Service has no session affinity (or do not although it has).
    Cause: kube-proxy has not applied the latest EndpointSlices: its syncs fail, its watch on
        the apiserver is broken (it never hears of the change), or it is wedged. Uneven
        probabilities mean the chain was edited by hand or half-written.
    How it is detected: the Service's traffic is evaluated through the node's rules, with the
        exact probability of each `-m statistic` branch, and the backends reached are compared
        with the ready (or, per the kube-proxy release, serving-terminating) endpoints of its
        EndpointSlices. Stale backends, missing backends and uneven shares are named. Rules that
        are not verified so (a grep'd dump, `iptables -S`, or no Service objects) are read for
        the backend each KUBE-SEP DNAT or KUBE-SVC "-> ip:port" comment names, against a listing
        of all the Service's endpoints: its EndpointSlices or Endpoints, a `kubectl describe
        svc` that shows them all, a `kubectl get endpoints` row without "+ N more" (ready
        ones) or its `kubectl get endpointslices` rows (every one); a backend none of them has
        is named (medium confidence: two listings, perhaps taken apart). In IPVS
        mode the virtual server's persistence (`persistent N` in `ipvsadm -Ln`, `-p N` in
        `-Sn`) is compared with the Service's sessionAffinity and its timeout. Without
        the cluster's objects, the Services kube-proxy rejects as "has no endpoints" are listed
        in a note (the cluster DNS first: every lookup fails then), asking for their
        EndpointSlices: right when no Pod is ready, stale when some are.
    Fix: fix the sync or watch failure reported with this finding and restart kube-proxy; until
        then, the stale backends keep receiving this node's share of the Service's traffic.
    References: https://kubernetes.io/docs/concepts/services-networking/endpoint-slices/;
        https://github.com/kubernetes/kubernetes/issues/87882
    """
    ver = verified.verification
    if ver is None:
        yield from _backends_outside_listing(facts, None)
        return
    out: list[Finding] = []
    for label, rs in sorted(by_service(ver.problems(), _applies).items()):
        stale = sorted({b for r in rs for b in r.stale_backends})
        missing = sorted({b for r in rs for b in r.missing_backends})
        parts = []
        if stale:
            parts.append(
                f"sends traffic to {len(stale)} backend(s) that are not ready endpoints: {', '.join(stale[:6])}"
            )
        if missing:
            parts.append(f"never reaches {len(missing)} ready endpoint(s): {', '.join(missing[:6])}")
        if any(r.kind == "refused" for r in rs):
            ready = sorted({b for r in rs for a in r.expected[:1] for b in a.backends})
            parts.append(f"rejects it as having no endpoints although {len(ready)} are ready ({', '.join(ready[:4])})")
        if any(r.uneven for r in rs):
            parts.append("splits traffic unevenly between its backends")
        if any(r.kind == "not-refused" for r in rs) and not stale:
            parts.append("still forwards it although it has no usable endpoints")
        affinity = next((r.affinity for r in rs if r.affinity is not None), None)
        if affinity is not None:
            parts.append(affinity_difference(*affinity))
        summary = f"{label}: the node " + "; ".join(parts) + f" ({classes(rs)})."
        sev = Severity.WARNING if all(r.uneven for r in rs) else Severity.CRITICAL
        f = finding_for(facts, "KP202", label, rs, summary, severity=sev)
        f.fix = ["Restart kube-proxy after fixing its sync (folded findings); verify again."]
        out.append(f)
    judged = {f.subject.get("service") for f in out if f.subject}
    out += [f for f in _backends_outside_listing(facts, verified) if f.subject.get("service") not in judged]
    yield from capped(facts, "KP202", out, "whose backends are out of sync")
