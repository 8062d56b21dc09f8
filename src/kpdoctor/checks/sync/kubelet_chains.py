"""KP121: a chain kubelet is expected to create is missing in one family or on this node."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start
from kpdoctor.checks.registry import check
from kpdoctor.checks.sync.backend_mismatch import CANNOT_LOAD_TARGET, CHAIN_DOES_NOT_EXIST
from kpdoctor.facts import Facts
from kpdoctor.facts.backend import HostBackend, banner
from kpdoctor.model import Confidence, Finding, Severity
from kpdoctor.parse.logscan import Hit
from kpdoctor.versions import KubeVersion

# Chains kubelet created for everyone until 1.27 (KEP-3178, IPTablesOwnershipCleanup): kube-proxy
# and the runtime's hostport code (CNI portmap) jump to them.
KUBELET_CHAINS = frozenset({"KUBE-MARK-DROP", "KUBE-MARK-MASQ", "KUBE-FIREWALL", "KUBE-KUBELET-CANARY"})
KUBELET_STOPPED = KubeVersion(1, 27, 0)


def _one_backend(facts: Facts, hits: list[Hit], chain: str, failing: str | None, host: HostBackend | None) -> Finding:
    """The missing-chain error with nothing from the other family or the hostport code: the
    chain was never made, when the node's iptables uses kube-proxy's backend; otherwise the
    other reading of what KP101 reports as a backend mismatch."""
    same = host is not None and not host.inferred and failing is not None and host.says(failing) is True
    f = start(facts, "KP121", hits, confidence=Confidence.MEDIUM if same else Confidence.LOW)
    if same:
        assert host is not None
        f.evidence.extend(host.cites)
        f.confidence_reason = "the node's own iptables uses kube-proxy's backend"
        f.summary = (
            f"kube-proxy's restore cannot find {chain}, and the node's iptables uses the same backend "
            f"({host.describe()}): the chain is not hidden in the other backend, nothing created it. kubelet "
            f"created {chain} before 1.27 (for its own node-IP family only), and kube-proxy releases that relied on "
            "it fail until it exists."
        )
    else:
        f.severity = Severity.WARNING
        f.alternative_to = "iptables-backend-mismatch"
        f.confidence_reason = "the same error as a backend mismatch; nothing given tells them apart"
        f.summary = (
            f"If the node's iptables uses kube-proxy's backend{f' ({failing})' if failing else ''}, {chain} is not "
            "hidden in the other backend: nothing created it. kubelet created it before 1.27 (for its own node-IP "
            "family only), and kube-proxy releases that relied on it fail until it exists. The host's "
            "`iptables --version` tells this from a backend mismatch."
        )
    f.fix = [
        f"Compare the host's `iptables --version` with kube-proxy's: on one backend, have {chain} created where it "
        "is used (a kube-proxy that creates its own chains, 1.27+; or kubelet managing this family's node IP).",
    ]
    return f


def _ipv6(h: Hit) -> bool:
    return "ip6tables" in h.record or "ip6tables" in h.text


@check(
    "KP121",
    cause="kubelet-chains-missing",
    title="a chain kubelet should create is missing",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=("iptables-backend-mismatch", *RESTORE_SYMPTOMS),
)
def kubelet_chains_missing(facts: Facts) -> Iterator[Finding]:
    """A restore fails on KUBE-MARK-DROP/KUBE-MARK-MASQ because nothing created it here.

    Symptom: `ip6tables-restore v1.6.2: Couldn't load target `KUBE-MARK-DROP':No such file or
        directory` while `iptables -t nat -S` shows the chain; or a Pod with a hostPort cannot
        start: `failed to add hostport mapping ... Chain 'KUBE-MARK-MASQ' does not exist`.
    Cause: kubelet created KUBE-MARK-DROP/KUBE-MARK-MASQ only for its own node-IP family (an
        IPv6 node had them in iptables only), and from 1.27 (IPTablesOwnershipCleanup) not at
        all: kube-proxy makes its own, so the runtime's hostport rules on a node without
        kube-proxy (replaced by Cilium or another proxy) find nothing to jump to. Older
        kube-proxy releases relied on kubelet's chains and failed when they were not there yet.
    How it is detected: the restore's missing-chain error for a kubelet-era chain, all in one
        family while the other family's rules have it; or raised by the hostport code, not by
        kube-proxy. When the node's own iptables is known to use the other backend, the chain
        is there and invisible: that is a backend mismatch (KP101), not this; when nothing
        tells the two apart, KP101 reports the error first and this check the other reading
        (an alternative at low confidence); when the node's own `iptables --version` shows
        kube-proxy's backend, the chain was never made, and this check is the answer.
    Fix: let something create the chain in that family and backend: the replacement proxy's
        own hostPort support (Cilium `hostPort.enabled`), kube-proxy running on the node, or a
        kube-proxy that creates its own chains; for one family, give kubelet the node IPs of
        both families or upgrade it.
    References: https://github.com/kubernetes/kubernetes/issues/67398;
        https://github.com/kubernetes/kubernetes/issues/80462;
        https://github.com/kubernetes/enhancements/tree/master/keps/sig-network/3178-iptables-cleanup
    """
    hits = [
        h
        for h in facts.log.hits(CANNOT_LOAD_TARGET.id, CHAIN_DOES_NOT_EXIST.id)
        if h.groups and h.groups[-1] in KUBELET_CHAINS
    ]
    if not hits:
        return
    chain = str(hits[0].groups[-1])
    host = facts.host_backend
    failing = next((b.effective_backend for h in hits if (b := banner(h)) is not None and b.effective_backend), None)
    if host is not None and failing is not None and host.says(failing) is False:
        return  # the node's chains are in the other backend: a backend mismatch (KP101)
    hostport = [h for h in hits if "hostport" in h.record.lower()]
    v6 = all(_ipv6(h) for h in hits)
    v4 = not any(_ipv6(h) for h in hits)
    other_family = facts.chain_rule(chain, 4 if v6 else 6) if (v6 or v4) else None
    if other_family is None and not hostport:
        yield _one_backend(facts, hits, chain, failing, host)
        return
    f = start(facts, "KP121", hits, confidence=Confidence.HIGH)
    f.confidence_reason = (
        "the other family's rules have the chain" if other_family is not None else "the hostport code's own error"
    )
    if other_family is not None:
        f.evidence.append(other_family)
        fam, other = ("IPv6", "IPv4") if v6 else ("IPv4", "IPv6")
        f.summary = (
            f"{chain} exists in the {other} rules but not for {fam}, so every {fam} restore that jumps to it fails: "
            f"kubelet created it only for its own node-IP family."
        )
    else:
        f.summary = (
            f"The runtime's hostport rules jump to {chain}, which nothing on this node creates: kubelet stopped "
            "creating it in 1.27 and only kube-proxy makes it, so a node without kube-proxy (replaced by another "
            "proxy) cannot start Pods with a hostPort."
        )
        kubelet = facts.node_info("kubeletVersion")
        if kubelet is not None and (kv := KubeVersion.parse(kubelet[0])) is not None:
            f.versions_found["kubelet"] = str(kv)
            f.evidence.append(kubelet[1])
    f.fix = [
        "Have the chain created where it is used: run kube-proxy (1.27+ creates KUBE-MARK-MASQ/KUBE-MARK-DROP itself) "
        "or enable the replacement proxy's own hostPort support; for one missing family, give kubelet both "
        "families' node IPs or upgrade it.",
    ]
    yield f
