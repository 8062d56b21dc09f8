"""KP204: a rule kube-proxy did not write drops or rejects Service traffic."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.checks.dataplane.common import CLUSTER, RULES, by_service, capped, classes, finding_for, kube_proxy_rule
from kpdoctor.checks.registry import check
from kpdoctor.dataplane.verify import Result
from kpdoctor.facts import Facts
from kpdoctor.model import Finding, Severity


def _applies(r: Result) -> bool:
    return r.kind in ("refused", "partly-refused") and any(not kube_proxy_rule(e) for e in r.refusals())


@check(
    "KP204",
    cause="iptables-drop-rule",
    title="A rule outside kube-proxy drops Service traffic",
    severity=Severity.CRITICAL,
    needs=RULES,
    needs_all=CLUSTER,
)
def iptables_drop_rule(facts: Facts) -> Iterator[Finding]:
    """A firewall rule or chain policy that kube-proxy did not write drops Service traffic.

    Symptom: a Service works from some nodes and not from this one, or only for some backends;
        kube-proxy's rules look right and its log is clean.
    Cause: another component's rule (a host firewall, firewalld or ufw through iptables, a CNI or
        security agent, a hand-written `-j DROP`) or a DROP policy on FORWARD (Docker sets one)
        matches the Service's packets before or after kube-proxy's DNAT.
    How it is detected: the Service's traffic is evaluated through every table of both iptables
        backends; the packet ends in a DROP/REJECT rule (or a chain's DROP policy) outside the
        KUBE-* chains that kube-proxy and kubelet own. The finding cites that rule.
    Fix: allow the traffic in the component that owns the rule (for a FORWARD policy of DROP,
        accept traffic to and from the pod network), or remove the rule; then run
        `kpdoctor verify` again.
    References: seed 004; https://kubernetes.io/docs/reference/networking/ports-and-protocols/
    """
    ver = facts.verification
    if ver is None:
        return
    out: list[Finding] = []
    for label, rs in sorted(by_service(ver.results, _applies).items()):
        rules = [e.rule for r in rs for e in r.refusals() if not kube_proxy_rule(e) and e.rule is not None]
        share = max(sum(e.probability for e in r.refusals() if not kube_proxy_rule(e)) for r in rs)
        first = rules[0] if rules else None
        what = first.text if first is not None else "a rule outside kube-proxy"
        where = f" (line {first.line} of {first.artifact})" if first is not None and first.line else ""
        part = "all" if share >= 0.999 else f"{share:.0%}"
        summary = f"{label}: `{what}`{where} drops {part} of the traffic from {classes(rs)}."
        f = finding_for(facts, "KP204", label, rs, summary, severity=Severity.CRITICAL)
        f.evidence = [c for c in dict.fromkeys(rules)][:3] + [c for c in f.evidence if c not in rules][:2]
        f.explained_by = []
        f.fix = [f"Allow this traffic in the component that owns `{what}`, or remove that rule."]
        out.append(f)
    yield from capped(facts, "KP204", out, "dropped by rules outside kube-proxy")
