"""KP126: kube-proxy runs without (or with a wrong) cluster CIDR."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start
from kpdoctor.checks.registry import check
from kpdoctor.facts import Facts
from kpdoctor.model import Confidence, Finding, Severity
from kpdoctor.parse.logscan import signature

# kube-proxy echoes the payload of a failed restore: a rule with an empty `-s` argument (two
# spaces) is what kube-proxy 1.5 wrote for local-traffic Services without a cluster CIDR.
EMPTY_SOURCE = signature("restore-rule-empty-source", "-s  -j", r"-A (KUBE-[A-Z0-9-]+) .*-s  -j ", failure=True)
# Later releases say so at start: `detect-local-mode set to ClusterCIDR, but no cluster CIDR
# defined` (a warning healthy clusters whose CNI masquerades itself print too), and
# `clusterCIDR fd00::/104 has incorrect IP version: expect isIPv6=false` (kube-proxy stops).
NO_CLUSTER_CIDR = signature("no-cluster-cidr", "luster CIDR", r"[Nn]o cluster CIDR (for family [A-Za-z0-9]+ )?defined")
CIDR_WRONG_FAMILY = signature(
    "cluster-cidr-wrong-family",
    "has incorrect IP version",
    r"[Cc]luster ?CIDR .* has incorrect IP version",
    failure=True,
)


@check(
    "KP126",
    cause="cluster-cidr-misconfigured",
    title="kube-proxy's cluster CIDR is missing or wrong",
    severity=Severity.WARNING,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=("kube-proxy-rule-generation-bug", *RESTORE_SYMPTOMS),
)
def cluster_cidr_misconfigured(facts: Facts) -> Iterator[Finding]:
    """kube-proxy has no usable cluster CIDR, so it writes invalid rules or mis-judges locality.

    Symptom: every restore fails on a rule with an empty source (`-A KUBE-XLB-... -s  -j
        KUBE-SVC-...`, then `Bad argument`), or Service traffic from outside the Pod network
        is not masqueraded; the log says `Detect-local-mode set to ClusterCIDR, but no cluster
        CIDR defined` or `clusterCIDR ... has incorrect IP version`.
    Cause: `--cluster-cidr`/`clusterCIDR` unset (or of the other IP family). kube-proxy 1.5
        generated an empty `-s` for local-traffic Services without it; later releases skip the
        masquerade rules that depend on it.
    How it is detected: the empty-source rule in the payload kube-proxy echoes, and the
        start-up lines that say the CIDR is missing or of the wrong family.
    Fix: set `clusterCIDR` (`--cluster-cidr`) to the Pod network's range (both families in
        dual-stack, comma-separated), or use a detectLocalMode that does not need it.
    References: https://github.com/kubernetes/kubernetes/issues/36652;
        https://github.com/kubernetes/kubernetes/issues/36835
    """
    empty = facts.log.hits(EMPTY_SOURCE.id)
    wrong = facts.log.hits(CIDR_WRONG_FAMILY.id)
    missing = facts.log.hits(NO_CLUSTER_CIDR.id)
    if not empty and not wrong and not missing:
        return
    f = start(
        facts, "KP126", empty or wrong or missing, confidence=Confidence.HIGH if empty or wrong else Confidence.LOW
    )
    if wrong and not empty:
        f.severity = Severity.CRITICAL
        f.summary = (
            "kube-proxy's cluster CIDR is of the other IP family than the node it runs for, and it does not start."
        )
    elif empty:
        f.severity = Severity.CRITICAL
        f.summary = (
            f"kube-proxy wrote a rule in {empty[0].groups[0]} with an empty source (`-s  -j`): it has no cluster "
            "CIDR, and iptables-restore rejects the whole payload, so no rule is updated."
        )
    else:
        f.severity = Severity.INFO  # healthy clusters whose CNI masquerades print it too
        f.summary = (
            "kube-proxy runs without a cluster CIDR: it does not tell traffic from outside the Pod network apart, "
            "so it masquerades none of it. Harmless when the CNI masquerades; the cause when off-cluster clients "
            "reach Services but get no answer."
        )
    f.fix = [
        "Set `clusterCIDR` in the KubeProxyConfiguration (or `--cluster-cidr`) to the Pod network's range "
        "(both families, comma-separated, in dual-stack), then restart kube-proxy."
    ]
    yield f
