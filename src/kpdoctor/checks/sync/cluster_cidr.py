"""KP126: kube-proxy runs without (or with a wrong) cluster CIDR."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start, suspect
from kpdoctor.facts import Facts
from kpdoctor.facts.cluster import node_ips, pod_cidrs
from kpdoctor.knowledge import check, messages, signature
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.conntrack import ConntrackEntry
from kpdoctor.parse.iptables import Rule
from kpdoctor.parse.k8s import as_dict

# kube-proxy echoes the payload of a failed restore: a rule with an empty `-s` argument (two
# spaces) is what kube-proxy 1.5 wrote for local-traffic Services without a cluster CIDR.
EMPTY_SOURCE = signature("restore-rule-empty-source", "-s  -j", r"-A (KUBE-[A-Z0-9-]+) .*-s  -j ", failure=True)
# Later releases say so at start: `detect-local-mode set to ClusterCIDR, but no cluster CIDR
# defined` (a warning healthy clusters whose CNI masquerades itself print too), and
# `clusterCIDR fd00::/104 has incorrect IP version: expect isIPv6=false` (kube-proxy stops).
NO_CLUSTER_CIDR = messages(
    "no-cluster-cidr",
    "kube-proxy/server-detect-local-no-cluster-cidr",
    "kube-proxy/server-detect-local-no-cluster-cidr-for-family",
    "kube-proxy/server-detect-local-no-ipv4-cluster-cidr",
    "kube-proxy/server-detect-local-no-ipv6-cluster-cidr",
)
CIDR_WRONG_FAMILY = messages("cluster-cidr-wrong-family", "kube-proxy/proxier-cluster-cidr-wrong-family", failure=True)


@check(
    "KP126",
    cause="cluster-cidr-misconfigured",
    title="kube-proxy's cluster CIDR is missing or wrong",
    severity=Severity.WARNING,
    needs=[Kind.KUBE_PROXY_LOG, Kind.KUBE_PROXY_CONFIG, Kind.KUBE_PROXY_CMDLINE, Kind.IPTABLES_SAVE],
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
        start-up lines that say the CIDR is missing or of the wrong family; or its
        configuration (flags, config file) without clusterCIDR and with masqueradeAll off; or a
        whole iptables-save dump whose ClusterIP rules (kube-proxy's `"ns/svc:port cluster IP"`
        comment) include no jump to KUBE-MARK-MASQ: kube-proxy writes one per ClusterIP for
        traffic from outside the Pod network (`! -s <clusterCIDR>`, or the other local-traffic
        detectors' `! -i`), or for all traffic with masqueradeAll, and none without a CIDR
        (suspected: its flags or config decide).
        A missing CIDR is graded by what the node shows it breaks: a client outside the Pod
        network and the nodes reaching a ClusterIP (conntrack) is a warning with high
        confidence; Services with externalTrafficPolicy: Local (whose Pod traffic kube-proxy
        tells by the CIDR) a warning with medium confidence; otherwise info.
    Fix: set `clusterCIDR` (`--cluster-cidr`) to the Pod network's range (both families in
        dual-stack, comma-separated), or use a detectLocalMode that does not need it.
    References: https://github.com/kubernetes/kubernetes/issues/36652;
        https://github.com/kubernetes/kubernetes/issues/36835
    """
    empty = facts.log.hits(EMPTY_SOURCE.id)
    wrong = facts.log.hits(*CIDR_WRONG_FAMILY.ids)
    missing = facts.log.hits(*NO_CLUSTER_CIDR.ids)
    unset = _unset_in_config(facts)
    unmasqueraded = _no_masquerade_rules(facts) if not (empty or wrong or missing or unset) else None
    if not empty and not wrong and not missing and unset is None and unmasqueraded is None:
        return
    f = start(
        facts, "KP126", empty or wrong or missing, confidence=Confidence.HIGH if empty or wrong else Confidence.LOW
    )
    if unset is not None and unset not in f.evidence:
        f.evidence.append(unset)
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
        _grade_unset(facts, f)
    if unmasqueraded is not None:
        f.evidence.append(unmasqueraded)
        f.summary = f.summary.replace("kube-proxy runs without", "kube-proxy seems to run without", 1)
        f.summary += (
            " Shown by its rules: no ClusterIP rule of this dump jumps to KUBE-MARK-MASQ, which kube-proxy writes for "
            "traffic from outside the Pod network when it has one."
        )
        suspect(
            f,
            "the rules kube-proxy writes with a cluster CIDR are absent; its configuration is not given",
            ["kube-proxy's flags (`ps -ef | grep kube-proxy`) or its config file's clusterCIDR"],
            confidence=f.confidence,
        )
    f.fix = [
        "Set `clusterCIDR` in the KubeProxyConfiguration (or `--cluster-cidr`) to the Pod network's range "
        "(both families, comma-separated, in dual-stack), then restart kube-proxy."
    ]
    yield f


def _unset_in_config(facts: Facts) -> Cite | None:
    """Where kube-proxy's configuration shows clusterCIDR empty with masqueradeAll off (the
    config file's line, or its flags without --cluster-cidr); None when it is set, when
    masqueradeAll masquerades everything anyway, or when the configuration is not given."""
    cfg = facts.kp_config
    cidr = cfg.setting("clusterCIDR")
    if str(cidr.value or "").strip() or not (cfg.flags or cfg.file):
        return None
    src = cidr.source
    if cidr.origin == "unknown":
        if cfg.file is None or cfg.config_flag is not None or not cfg.file.shows("clusterCIDR"):
            return None  # flags and a --config not given (or a part of it without the field): not known
        src = cfg.file.cite("clusterCIDR")  # the file alone, taken as the configuration in use
    if cfg.flags_from_log and cfg.file is None:
        return None  # the FLAG: lines kube-proxy logs at -v=1+ may be cut: a flag not shown is unknown
    if str(cfg.setting("iptables.masqueradeAll").value or "").lower() == "true":
        return None
    if src is not None:
        return Cite(src.artifact, src.line, src.text)
    first = next(iter(cfg.flags.values()), None)
    return Cite(first.source.artifact, first.source.line, first.source.text) if first is not None else None


def _no_masquerade_rules(facts: Facts) -> Cite | None:
    """The first ClusterIP rule of a whole iptables-save dump none of whose ClusterIP rules
    jumps to KUBE-MARK-MASQ (kube-proxy without a local-traffic detector and masqueradeAll
    off); None when one does, or when no whole dump with ClusterIP rules is given (a grep'd or
    cut dump shows what is in it, not what is not; comments stripped say nothing)."""
    for rs in facts.rulesets:
        nat = rs.tables.get("nat")
        if nat is None or not rs.whole("nat"):
            continue
        # (one that masquerades is looked for among the rules naming the mark chain too: at
        # 10,000 Services, half of the 20,000 ClusterIP rules only jump to their Service's chain)
        if any(_cluster_ip(r) and r.target == "KUBE-MARK-MASQ" for r in nat.containing("cluster IP", "KUBE-MARK-MASQ")):
            return None
        first = next((r for r in nat.containing("cluster IP") if _cluster_ip(r)), None)
        if first is not None:
            return Cite(rs.artifact, first.line, first.text.strip())
    return None


def _cluster_ip(r: Rule) -> bool:
    """A rule kube-proxy writes for a ClusterIP (its comment says so)."""
    return "cluster IP" in r.text and (r.comment or "").endswith(" cluster IP")


def _grade_unset(facts: Facts, f: Finding) -> None:
    """Grade a missing cluster CIDR by what the node shows it breaks: Services with
    externalTrafficPolicy: Local (kube-proxy sends only traffic it knows comes from Pods, by the
    cluster CIDR, to all endpoints: without it, Pods on a node without a local endpoint lose their
    traffic to those NodePorts and load-balancer addresses), and clients from outside the Pod
    network seen reaching ClusterIPs (conntrack), whose traffic is not masqueraded."""
    local = [
        s.key
        for s in facts.cluster.services
        if s.type in ("NodePort", "LoadBalancer")
        and as_dict(s.obj.body.get("spec")).get("externalTrafficPolicy") == "Local"
    ]
    outside = _off_cluster_clients(facts)
    lead = "kube-proxy runs without a cluster CIDR (and masqueradeAll off): it cannot tell Pods' traffic from other "
    if outside:
        a, e = outside[0]
        f.severity, f.confidence = Severity.WARNING, Confidence.HIGH
        f.confidence_reason = "a client outside the Pod network and the nodes reaches a ClusterIP"
        f.summary = (
            lead + f"traffic, so it masquerades none of it: {e.src} (outside the Pod network) reaches ClusterIP "
            f"{e.dst}:{e.dport} unmasqueraded, and its backend's replies go straight back to it, un-translated."
        )
        f.evidence.append(Cite(a.name, e.line, e.text.strip()))
    elif local:
        f.severity, f.confidence = Severity.WARNING, Confidence.MEDIUM
        f.confidence_reason = "Services with externalTrafficPolicy: Local exist"
        f.summary = (
            lead + f"traffic. {len(local)} Service(s) with externalTrafficPolicy: Local ({', '.join(local[:3])}) "
            "depend on it: Pods on a node without a local endpoint lose their traffic to those Services' NodePorts "
            "and load-balancer addresses, and off-cluster clients of ClusterIPs are not masqueraded."
        )
        svc = next(s.obj for s in facts.cluster.services if s.key == local[0])
        f.evidence.append(Cite(svc.artifact, svc.line, f"{svc.ref}: externalTrafficPolicy: Local"))
    else:
        f.severity, f.confidence = Severity.INFO, Confidence.LOW
        f.summary = (
            lead + "traffic, so it masquerades none that comes from outside the Pod network. Harmless when the CNI "
            "masquerades and no client outside the cluster reaches ClusterIPs; the cause when such clients reach "
            "Services but get no answer, or Pods cannot reach externalTrafficPolicy: Local Services' node ports."
        )


def _off_cluster_clients(facts: Facts) -> list[tuple[Artifact, ConntrackEntry]]:
    """Conntrack entries of a client outside every Node's Pod range and every Node address to a
    ClusterIP, translated to a backend; none when the Nodes' Pod ranges are not given."""
    nodes = facts.objects.of("Node")
    pods = [net for n in nodes for net in pod_cidrs(n)]
    addrs = {str(ip) for n in nodes for ip in node_ips(n)}
    if not pods:
        return []
    vips = {ip for s in facts.cluster.services for ip in s.cluster_ips}
    out = []
    for a, e in facts.node_state.conntrack_entries:
        if e.dst not in vips or e.reply_src == e.dst or e.src in addrs:
            continue
        try:
            src = ipaddress.ip_address(e.src)
        except ValueError:
            continue
        if src.is_loopback or any(src in net for net in pods if net.version == src.version):
            continue
        out.append((a, e))
    return out
