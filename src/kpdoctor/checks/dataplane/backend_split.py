"""KP205: Service rules in both iptables backends (legacy and nf_tables), both live."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.checks.common import start
from kpdoctor.checks.dataplane.common import CLUSTER, RULES, classes, verification_not_evaluated
from kpdoctor.checks.registry import check
from kpdoctor.facts import Facts
from kpdoctor.model import Cite, Confidence, Finding, Severity


@check(
    "KP205",
    cause="iptables-backend-mismatch",
    title="Service rules exist in both iptables backends",
    severity=Severity.CRITICAL,
    needs=RULES,
    abstains=verification_not_evaluated,
    needs_all=CLUSTER,
)
def backend_split(facts: Facts) -> Iterator[Finding]:
    """kube-proxy's rules are in the legacy and the nf_tables backend at once.

    Symptom: `iptables-legacy-save` and `iptables-nft-save` both list KUBE-SERVICES; Services
        behave differently from what either listing suggests; `iptables-nft-save` warns
        "iptables-legacy tables present".
    Cause: the kernel runs both backends' tables. When kube-proxy (or an earlier kube-proxy
        image) wrote its rules with one backend and the current one writes with the other, the
        old set stays live and is never updated: packets can be DNATed by stale rules first.
    How it is detected: both backends' dumps hold DNAT rules; every Service port is evaluated
        through each backend separately and the outcomes are compared; this finding names the
        Service ports they disagree on (the split itself, and identical sets, are KP101's).
    Fix: find which backend the running kube-proxy uses (`kube-proxy` logs, or `iptables
        --version` inside its container), then remove the other backend's KUBE-* rules (for
        example `iptables-legacy-save | grep -v KUBE- | iptables-legacy-restore`, during a
        maintenance window) and make every component use the node's backend (iptables-wrappers).
    References: seed 000; https://github.com/kubernetes/kubernetes/issues/71305;
        https://github.com/kubernetes-sigs/iptables-wrappers
    """
    ver = facts.verification
    if ver is None or not ver.split:
        return
    split = [r for r in ver.results if r.kind == "split"]
    for fam, artifacts in sorted(ver.split.items()):
        mine = [r for r in split if r.family == fam]
        if not mine:
            continue  # identical sets: KP101 reports the split itself
        labels = sorted({r.label for r in mine})
        summary = (
            f"IPv{fam} Service rules are in both iptables backends and they disagree for "
            f"{len(labels)} Service port(s): {', '.join(labels[:5])}. First: {mine[0].note.split(';')[0]} "
            f"({classes(mine[:1])})."
        )
        f = start(facts, "KP205", [], confidence=Confidence.HIGH, summary=summary, severity=Severity.CRITICAL)
        f.evidence = [Cite(a, None, "holds Service DNAT rules") for a in artifacts]
        for r in mine[:2]:
            f.evidence.extend(r.rules[:2])
        f.subject = {"service": mine[0].label, "workload": None}
        f.ongoing = True
        f.explained_by = ["iptables-backend-mismatch"]  # folds under KP101 (the split, its versions and fix)
        f.fix = [
            "Remove the KUBE-* rules of the backend the running kube-proxy does not use, and run every "
            "iptables user with the node's backend (iptables-wrappers)."
        ]
        yield f
