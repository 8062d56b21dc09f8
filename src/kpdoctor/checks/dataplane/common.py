"""Turning verification results into findings: grouping by Service, shared wording, causes."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start
from kpdoctor.dataplane.expected import TRAFFIC_CLASSES
from kpdoctor.dataplane.results import Entry, Result
from kpdoctor.dataplane.session import Verified
from kpdoctor.facts import Facts
from kpdoctor.model import Cite, Confidence, Finding, Severity

# What verification needs: rules, and the cluster's Services to hold them against.
RULES = [Kind.IPTABLES_SAVE, Kind.IPTABLES_RULES_S, Kind.NFT_RULESET, Kind.NFT_RULESET_TEXT, Kind.IPVSADM]
CLUSTER = [Kind.K8S_OBJECTS]


# Rules that do not follow the cluster are what a broken sync leaves behind: these causes explain
# them (ranking folds the verification finding under whichever is present).
def verification_not_evaluated(verified: Verified) -> str | None:
    """Why the checks on the verification abstain: it was not evaluated (the node runs a proxy
    mode kpdoctor does not read, or the mode is not known), so its absence of results is no
    verdict."""
    if verified.failed:
        return f"verification {verified.failed}"
    ver = verified.verification
    if ver is not None and not ver.evaluated:
        if ver.mode:
            return f"verification not evaluated (kube-proxy runs in {ver.mode} mode)"
        return f"verification not evaluated: {ver.reason}"
    return None


MAX_FINDINGS = 5  # per check; beyond this, one finding sums the rest up
MAX_CITES = 4


def kube_proxy_rule(e: Entry) -> bool:
    """Did kube-proxy (or kubelet) write the rule that decided? The backend names the owner of
    every rule by its chain (both name theirs KUBE-*, kube-router's KUBE-ROUTER-* and policy
    chains are its own, and nftables tables by name); a built-in chain's rule or policy is
    someone else's (the backends name no owner for a policy)."""
    return e.owner in ("kube-proxy", "kubelet") and e.rule is not None


def by_service(results: Iterable[Result], pick: Callable[[Result], bool]) -> dict[str, list[Result]]:
    out: dict[str, list[Result]] = {}
    for r in results:
        if r.status == "mismatch" and pick(r):
            out.setdefault(r.label, []).append(r)
    return out


def classes(rs: list[Result]) -> str:
    names = list(dict.fromkeys(f"{TRAFFIC_CLASSES[r.traffic][1]} ({r.destination})" for r in rs))
    return "; ".join(names)


def finding_for(
    facts: Facts,
    code: str,
    label: str,
    rs: list[Result],
    summary: str,
    severity: Severity | None = None,
    confidence: Confidence = Confidence.HIGH,
) -> Finding:
    f = start(facts, code, [], confidence=confidence, summary=summary, severity=severity)
    f.subject = {"service": label, "workload": None}
    cites: list[Cite] = []
    for r in rs:
        for c in r.rules:
            if c not in cites:
                cites.append(c)
    f.evidence = cites[:MAX_CITES]
    svc = rs[0].service_cite
    if svc is not None:
        f.evidence.append(svc)
    f.ongoing = True
    return f


def capped(facts: Facts, code: str, findings: list[Finding], what: str) -> list[Finding]:
    """At most MAX_FINDINGS per check; the rest become one finding that names them."""
    if len(findings) <= MAX_FINDINGS:
        return findings
    rest = findings[MAX_FINDINGS - 1 :]
    names = [f.subject.get("service") or "?" for f in rest]
    f = start(
        facts,
        code,
        [],
        confidence=max(x.confidence for x in rest),
        severity=max(x.severity for x in rest),
        summary=f"{len(rest)} more Services {what}: {', '.join(n for n in names[:20] if n)}"
        + (" ..." if len(names) > 20 else "")
        + ".",
    )
    f.evidence = [c for x in rest[:3] for c in x.evidence[:1]]
    f.fix = rest[0].fix
    f.ongoing = True
    f.explained_by = list(rest[0].explained_by)  # what explains the findings it sums up
    f.occurrences = len(rest)
    return [*findings[: MAX_FINDINGS - 1], f]
