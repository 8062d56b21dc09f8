"""KP111: kube-proxy could not resolve its own node and fell back to 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start
from kpdoctor.checks.registry import check
from kpdoctor.facts import Facts
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.logscan import Hit, signature

NODE_NOT_FOUND = signature(
    "node-info-not-found",
    "Failed to retrieve node",
    r'Failed to retrieve node info: (nodes "([^"]+)" not found|.*)',
)
NODE_IP_UNKNOWN = signature("node-ip-unknown", "Failed to retrieve node", r"Failed to retrieve node IP: (.*)")
INVALID_NODE_IP = signature(
    "invalid-node-ip",
    "invalid nodeIP, initializing kube-proxy with",
    r"invalid nodeIP, initializing kube-proxy with 127\.0\.0\.1 as nodeIP",
)
CANT_DETERMINE_IP = signature(
    "cant-determine-node-ip",
    "an't determine this node's IP",
    r"[Cc]an't determine this node's IP, assuming (127\.0\.0\.1|loopback)",
)
DETECTED_LOOPBACK = signature(
    "detected-node-ip-loopback", "Detected node IP", r'"Detected node IP" address="(127\.0\.0\.1|::1)"'
)
NO_LOCAL = "has no local endpoints"


def lookup_name(facts: Facts) -> tuple[str, Hit] | None:
    """The node name kube-proxy looked up and did not find (from its log)."""
    for h in facts.log.hits(NODE_NOT_FOUND.id):
        if h.groups and len(h.groups) > 1 and h.groups[1]:
            return h.groups[1], h
    return None


def local_endpoint_services(facts: Facts, node: str) -> dict[str, list[str]]:
    """namespace/name -> endpoint IPs the cluster places on ``node`` (EndpointSlices or Endpoints)."""
    out: dict[str, list[str]] = {}
    for sl in facts.objects.of("EndpointSlice"):
        svc = ((sl.body.get("metadata") or {}).get("labels") or {}).get("kubernetes.io/service-name")
        for ep in sl.body.get("endpoints") or []:
            if isinstance(ep, dict) and ep.get("nodeName") == node and svc:
                out.setdefault(f"{sl.namespace}/{svc}", []).extend(ep.get("addresses") or [])
    for e in facts.objects.of("Endpoints"):
        for ss in e.body.get("subsets") or []:
            for a in (ss or {}).get("addresses") or []:
                if isinstance(a, dict) and a.get("nodeName") == node:
                    out.setdefault(f"{e.namespace}/{e.name}", []).append(str(a.get("ip")))
    return out


@check(
    "KP111",
    cause="node-ip-unresolved",
    title="kube-proxy could not resolve its own node",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG, Kind.IPTABLES_SAVE],
)
def node_ip_unresolved(facts: Facts) -> Iterator[Finding]:
    """kube-proxy did not find its Node, used 127.0.0.1, and now treats local Pods as remote.

    Symptom: `Failed to retrieve node info: nodes "ip-10-188-166-140" not found` then `invalid
        nodeIP, initializing kube-proxy with 127.0.0.1 as nodeIP` (or "Can't determine this
        node's IP, assuming 127.0.0.1"); externalTrafficPolicy=Local Services drop NodePort/LB
        traffic: `-A KUBE-XLB-... "2048-game/service-2048: has no local endpoints" -j
        KUBE-MARK-DROP` while the Service's Pods run on this very node; the health check node
        port answers "localEndpoints": 0.
    Cause: kube-proxy finds its Node by name (--hostname-override / hostnameOverride, else the
        OS hostname). When that name is not the Node's name (short vs FQDN hostnames on AWS,
        a hostnameOverride pinned to one node in a shared ConfigMap, or --hostname-override
        ignored because --config is set, see KP112), the lookup fails, the node IP falls back
        to loopback and endpoints on this node are not recognised as local.
    How it is detected: the lookup/fallback lines in kube-proxy's log; the name it looked up
        versus the real Node name and the configured hostnameOverride; "has no local
        endpoints" rules in iptables-save for Services whose endpoints have nodeName equal to
        this node.
    Fix: make kube-proxy use the Node's exact name: `hostnameOverride` in the config file (per
        node, e.g. from the Downward API `spec.nodeName`), or `--hostname-override=$(NODE_NAME)`
        on 1.13+; or set bindAddress to the node IP. Restart kube-proxy and check the health
        check node port reports localEndpoints > 0.
    References: seed 002; https://github.com/kubernetes/kubernetes/issues/57518;
        https://github.com/kubernetes/kubeadm/issues/857;
        https://github.com/kubernetes-sigs/kubespray/issues/3610
    """
    hits = facts.log.hits(
        NODE_NOT_FOUND.id, NODE_IP_UNKNOWN.id, INVALID_NODE_IP.id, CANT_DETERMINE_IP.id, DETECTED_LOOPBACK.id
    )
    node = facts.node
    drops: list[tuple[str, Cite]] = []
    local = local_endpoint_services(facts, node.name) if node else {}
    for rs in facts.rulesets:
        for r in rs.all_rules():
            c = r.comment or ""
            if NO_LOCAL in c:
                svc = c.split(NO_LOCAL)[0].rstrip(": ").split(":")[0]
                drops.append((svc, Cite(rs.artifact, r.line, r.text.strip())))
    wrong_drops = [(s, c) for s, c in drops if s in local]
    if not hits and not wrong_drops:
        return
    if hits:
        f = start(
            facts,
            "KP111",
            hits,
            confidence=Confidence.HIGH,
            summary="kube-proxy could not find its Node object and fell back to 127.0.0.1 as node IP.",
            severity=Severity.CRITICAL,
        )
        f.ongoing = None if not facts.log.has_sync_markers else f.ongoing
    else:
        f = start(
            facts,
            "KP111",
            [],
            confidence=Confidence.MEDIUM,
            summary="kube-proxy does not recognise this node's endpoints as local.",
            severity=Severity.CRITICAL,
        )
    looked = lookup_name(facts)
    cfg = facts.kp_config
    override = cfg.flags.get("hostname-override")
    if looked:
        f.summary += f' It looked up Node "{looked[0]}"'
        if node and node.name != looked[0]:
            f.summary += f', but this node is "{node.name}" ({node.origin})'
        f.summary += "."
        if override and override.value and override.value != looked[0]:
            f.summary += f" --hostname-override={override.value} was not used."
            f.evidence.append(Cite(override.source.artifact, override.source.line, override.source.text))
            if cfg.config_flag is not None:
                f.explained_by.append("config-overrides-flags")
    elif cfg.config_flag is not None and any(
        i.flag.name in ("hostname-override", "bind-address") for i in cfg.ignored_flags()
    ):
        f.explained_by.append("config-overrides-flags")
    if wrong_drops:
        svcs = sorted({s for s, _ in wrong_drops})
        f.summary += (
            f' The node drops external traffic for {", ".join(svcs[:5])} as "has no local endpoints" '
            f"although {sum(len(local[s]) for s in svcs)} of their endpoints run on this node."
        )
        for _, dc in wrong_drops[:3]:
            f.evidence.append(dc)
    elif drops and not node:
        f.summary += (
            ' Rules drop traffic as "has no local endpoints"; give --node and the EndpointSlices '
            "to check whether that is wrong."
        )
        f.confidence = Confidence.MEDIUM
        for _, dc in drops[:2]:
            f.evidence.append(dc)
    if node:
        f.subject["node"] = node.name
    f.fix = [
        "Make kube-proxy use this Node's exact name: set hostnameOverride in the KubeProxyConfiguration "
        "(per node, e.g. from the Downward API spec.nodeName) or `--hostname-override=$(NODE_NAME)` on 1.13+.",
        "Alternatively set bindAddress to the node's IP so the loopback fallback is not used.",
        "Restart kube-proxy; `curl http://<node-ip>:<healthCheckNodePort>/` must report localEndpoints > 0.",
    ]
    yield f
