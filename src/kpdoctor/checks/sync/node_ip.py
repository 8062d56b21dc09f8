"""KP111: kube-proxy could not resolve its own node and fell back to 127.0.0.1.

"has no local endpoints" rules alone are no evidence of it: kube-proxy writes them on every
healthy node that runs no Pod of an externalTrafficPolicy: Local Service. They become a finding
only with corroboration (the loopback fallback or "not found" in the log, a hostnameOverride that
is not this Node's name, EndpointSlices placing an endpoint here); otherwise KP203 notes them at
info, asking for what would decide it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import unquote

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import SYNC_SYMPTOMS, start
from kpdoctor.facts import Facts
from kpdoctor.facts.log import captures, structured_value
from kpdoctor.knowledge import check, messages
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.logscan import Hit

NODE_NOT_FOUND = messages("node-info-not-found", "kube-proxy/server-node-info-failed")
NODE_IP_UNKNOWN = messages("node-ip-unknown", "kube-proxy/server-node-ip-failed")
INVALID_NODE_IP = messages("invalid-node-ip", "kube-proxy/proxier-invalid-node-ip-fallback-localhost")
CANT_DETERMINE_IP = messages(
    "cant-determine-node-ip",
    "kube-proxy/server-node-ip-fallback-loopback",
    "kube-proxy/server-node-ip-fallback-loopback-1-30",
)
DETECTED = messages("detected-node-ip", "kube-proxy/server-detected-node-ip")
# client-go's request log (-v=6 and above), for kube-proxy's GET of its own Node answered 404. Every
# request of a verbose log is one of these, each with its own URL: not kept per URL, but a Node's
# GET answered 404 is kept apart (its node name in the variant) from the rest.
REQUEST = messages(
    "client-go-get",
    "kube-proxy/client-go-get-response",
    keyed=False,
    variant=r'/api/v1/nodes/[^/?" ]+"? (?:status=")?404 ',
)
_NODE_GET = lazy_re.compile(r"^(?:https?://[^/]+)?/api/v1/nodes/([^/?]+)(?:\?|$)")
LOOPBACK = ("127.0.0.1", "::1")
# the apiserver's NotFound for the Node kube-proxy looked up, in the lookup's error
_NODE_NOT_FOUND = lazy_re.compile(r'nodes "([^"]+)" not found')
NO_LOCAL = "has no local endpoints"
# The Service a "has no local endpoints" rule names, in any form of the rules: iptables-save and
# -S (`--comment "ns/svc: has no local endpoints"`, 1.25+ `"ns/svc:port has no local endpoints"`)
# and -L (`/* ns/svc:port has no local endpoints */`).
# A variable reference nothing expanded: Kubernetes expands `$(VAR)` in command/args, a shell
# `${VAR}`/`$VAR`; kube-proxy then takes the text literally as its node name.
_UNEXPANDED = lazy_re.compile(r"\$\{\w+\}|\$\(\w+\)|^\$\w+$")
_SHELL_C = lazy_re.compile(r"(^|[\s/])(ba|da|a)?sh\s+-c\b")
TRUSTED_NODE_ORIGINS = ("--node", "manifest", "Node object")


def lookup_name(facts: Facts) -> tuple[str, Hit] | None:
    """The node name kube-proxy looked up and did not find (from its log): its "not found"
    error, or client-go's own log of the GET of that Node answered 404."""
    for h in facts.log.hits(*NODE_NOT_FOUND.ids):
        m = _NODE_NOT_FOUND.search(h.record)
        if m is not None:
            return m.group(1), h
    return next(iter(node_gets_not_found(facts)), None)


def node_gets_not_found(facts: Facts) -> list[tuple[str, Hit]]:
    """(Node name, line) for each GET of a Node the apiserver answered 404 in client-go's request
    log: the Node kube-proxy looks up by its hostname (override) does not exist. The name as the
    URL carries it, decoded (kube-proxy lower-cases the override: ``$(NODE_NAME)`` reads
    ``$(node_name)``)."""
    out = []
    for h in facts.log.hits(*REQUEST.ids):
        got = captures(h)
        verb = structured_value(h, "verb") or "GET"  # the printf form is catalogued for GET only
        url = structured_value(h, "url") or got.get("path", "")
        status = structured_value(h, "status") or got.get("status", "")
        m = _NODE_GET.match(url)
        if verb == "GET" and m is not None and status.strip().startswith("404"):
            out.append((unquote(m.group(1)), h))
    return out


def local_endpoint_services(facts: Facts, node: str) -> dict[str, list[str]]:
    """namespace/name -> endpoint IPs the cluster places on ``node`` (EndpointSlices or Endpoints)."""
    out: dict[str, list[str]] = {}
    cl = facts.cluster
    for s in cl.slices + cl.endpoints:
        for ep in s.endpoints:
            if s.service and ep.node_name == node and (ep.ready or not s.legacy):
                out.setdefault(s.service, []).extend(ep.addresses)
    return out


def services_with_endpoint_objects(facts: Facts) -> set[str]:
    """namespace/name of every Service whose EndpointSlices or Endpoints are in the evidence."""
    cl = facts.cluster
    return {s.service for s in cl.slices + cl.endpoints if s.service}


def no_local_drops(facts: Facts) -> list[tuple[str, Cite]]:
    """(namespace/name, rule) for every "has no local endpoints" rule, in any rule format."""
    return [(s.split(":")[0], c) for s, c in facts.services_commented(NO_LOCAL)]


@dataclass(slots=True)
class NameProblem:
    """kube-proxy's own node name is not this Node's: what, and where it is read."""

    summary: str
    evidence: list[Cite] = field(default_factory=list)


def name_problem(facts: Facts) -> NameProblem | None:
    """The hostnameOverride kube-proxy uses, when it cannot be this Node's name: different from a
    Node name the user or the evidence gave (kube-proxy lower-cases it first), or a variable
    reference nothing expanded (no Node can be called ``${NODE_NAME}``)."""
    s = facts.kp_config.setting("hostnameOverride")
    value = str(s.value).strip() if s.value is not None else ""
    if s.origin not in ("flag", "config") or not value:
        return None
    where = [Cite(s.source.artifact, s.source.line, s.source.text)] if s.source else []
    how = "--hostname-override" if s.origin == "flag" else "hostnameOverride (config file)"
    src_text = s.source.text if s.source else ""
    if _UNEXPANDED.search(value) and not _SHELL_C.search(src_text):
        if "$(" in value and any(a.name == (s.source.artifact if s.source else "") for a in facts.of(Kind.K8S_OBJECTS)):
            return None  # kubelet expands $(VAR) of a Pod spec's command/args
        return NameProblem(
            f"kube-proxy runs with {how}={value}: a variable reference nothing expanded (Kubernetes "
            "expands $(VAR) in command/args, a shell ${VAR}), so kube-proxy takes the literal text as "
            "its node name, which no Node has.",
            where,
        )
    node = facts.node
    if node is None or (node.origin not in TRUSTED_NODE_ORIGINS and facts.node_object is None):
        return None
    if value.lower() == node.name.lower():
        return None
    return NameProblem(
        f'kube-proxy runs with {how}={value}, but this node is "{node.name}" ({node.origin}): '
        "it looks up the wrong Node and judges endpoints local by the wrong name.",
        where,
    )


def fallback_hits(facts: Facts) -> list[Hit]:
    """The log lines of the failed Node lookup and the loopback fallback."""
    loopback = [
        h
        for h in facts.log.hits(*DETECTED.ids)
        if (structured_value(h, "address") or captures(h).get("value", "")).strip() in LOOPBACK
    ]
    hits = facts.log.hits(*NODE_NOT_FOUND.ids, *NODE_IP_UNKNOWN.ids, *INVALID_NODE_IP.ids, *CANT_DETERMINE_IP.ids)
    gets = [h for _, h in node_gets_not_found(facts)]
    return sorted(hits + loopback + gets, key=lambda h: h.order)


def corroborated(facts: Facts) -> bool:
    """Is there evidence beyond "has no local endpoints" rules that kube-proxy has the wrong node
    (what makes KP111 report)?"""
    if fallback_hits(facts) or name_problem(facts) is not None:
        return True
    node = facts.node
    local = local_endpoint_services(facts, node.name) if node else {}
    return any(s in local for s, _ in no_local_drops(facts))


@check(
    "KP111",
    cause="node-ip-unresolved",
    title="kube-proxy could not resolve its own node",
    severity=Severity.CRITICAL,
    needs=[
        Kind.KUBE_PROXY_LOG,
        Kind.IPTABLES_SAVE,
        Kind.IPTABLES_RULES_S,
        Kind.IPTABLES_LIST,
        Kind.KUBE_PROXY_CMDLINE,
        Kind.KUBE_PROXY_CONFIG,
        Kind.PROCESSES,
    ],
    explains=SYNC_SYMPTOMS,
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
        a hostnameOverride pinned to one node in a shared ConfigMap, a `${NODE_NAME}` nothing
        expanded, or --hostname-override ignored because --config is set, see KP112), the
        lookup fails, the node IP falls back to loopback and endpoints on this node are not
        recognised as local.
    How it is detected: the lookup/fallback lines in kube-proxy's log (critical); the name it
        looked up versus the real Node name and the configured hostnameOverride; "has no local
        endpoints" rules (iptables-save, -S or -L) for Services whose EndpointSlices place an
        endpoint on this node (critical); a hostnameOverride that is not this Node's name
        (given by --node, the bundle or the Node object) or is an unexpanded variable (critical
        with such rules, a warning without). kube-proxy writes "has no local endpoints" rules
        on every healthy node without a local Pod of a Local-policy Service, so those rules
        alone are not reported here (KP203 notes them, asking for the Node name and the
        EndpointSlices).
    Fix: make kube-proxy use the Node's exact name: `hostnameOverride` in the config file (per
        node, e.g. from the Downward API `spec.nodeName`), or `--hostname-override=$(NODE_NAME)`
        on 1.13+; or set bindAddress to the node IP. Restart kube-proxy and check the health
        check node port reports localEndpoints > 0.
    References: seed 002; https://github.com/kubernetes/kubernetes/issues/57518;
        https://github.com/kubernetes/kubeadm/issues/857;
        https://github.com/kubernetes-sigs/kubespray/issues/3610
    """
    hits = fallback_hits(facts)
    node = facts.node
    drops = no_local_drops(facts)
    local = local_endpoint_services(facts, node.name) if node else {}
    wrong_drops = [(s, c) for s, c in drops if s in local]
    wrong_name = name_problem(facts)
    if not hits and not wrong_drops and wrong_name is None:
        return  # "has no local endpoints" alone: KP203's note asks for what would decide it
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
    elif wrong_drops:
        f = start(
            facts,
            "KP111",
            [],
            confidence=Confidence.MEDIUM,
            summary="kube-proxy does not recognise this node's endpoints as local.",
            severity=Severity.CRITICAL,
        )
    else:
        f = start(
            facts,
            "KP111",
            [],
            confidence=Confidence.MEDIUM,
            summary="kube-proxy's node name is not this Node's.",
            severity=Severity.CRITICAL if drops else Severity.WARNING,
        )
    if wrong_name is not None:
        f.summary += " " + wrong_name.summary
        f.evidence += [c for c in wrong_name.evidence if c not in f.evidence]
    looked = lookup_name(facts)
    cfg = facts.kp_config
    override = cfg.flags.get("hostname-override")
    if looked:
        f.summary += f' It looked up Node "{looked[0]}"'
        if node and node.name != looked[0]:
            f.summary += f', but this node is "{node.name}" ({node.origin})'
        f.summary += "."
        if wrong_name is None and _UNEXPANDED.search(looked[0]):
            f.summary += (
                f" {looked[0]} is a variable reference nothing expanded: kubelet leaves $(VAR) in a container's "
                "command or args as written when the container's env does not define VAR (kube-proxy lower-cases "
                "the name it looks up), so the variable that should carry the Node's name (the Downward API's "
                "spec.nodeName) is missing from kube-proxy's env."
            )
        if override and override.value and override.value != looked[0]:
            f.summary += f" --hostname-override={override.value} was not used."
            c = Cite(override.source.artifact, override.source.line, override.source.text)
            if c not in f.evidence:
                f.evidence.append(c)
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
    elif drops:
        svcs = sorted({s for s, _ in drops})
        f.summary += (
            f' Rules drop traffic for {", ".join(svcs[:5])} as "has no local endpoints"'
            + ("" if node else "; give --node and the EndpointSlices to see which of them run a Pod here")
            + "."
        )
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
