"""KP209: a Service address (externalIP, load-balancer IP) is also a node's own address.

kube-proxy treats a Service's externalIPs and load-balancer ingress IPs as addresses it owns. In
IPVS mode it binds each one on the dummy interface kube-ipvs0 of every node and adds it to the
ipset KUBE-IPVS-IPS: the address becomes local on every node (so no node routes to the real host
any more), and KUBE-IPVS-FILTER rejects new connections to it on every port no Service uses (ssh,
the kubelet, the apiserver). The node that owns the address goes NotReady or unreachable
(kubernetes#104679, #127410, #93175, #75290; k3s#7183). In iptables and nftables mode the Service's
ports on that address are DNATed for every client, so the node's own service on such a port
(443 to an apiserver, 22) is taken over. A load-balancer pool that hands out node addresses
(MetalLB layer 2, ServiceLB) does the same, and in L2 mode another node may answer ARP for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.checks.common import PRINTED_SERVICES, start, suspect
from kpdoctor.checks.dataplane.common import capped
from kpdoctor.dataplane.addresses import IPAddress, host_address
from kpdoctor.dataplane.modes import IPVS_INTERFACE
from kpdoctor.facts import Facts
from kpdoctor.facts.cluster import node_down, node_ready
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse import system
from kpdoctor.parse.clients import SshAttempt
from kpdoctor.parse.kubectl_table import TABLE_ROW

IP_ADDR_KINDS = (Kind.IP_ADDR, Kind.IP_LINK)
# the ipset IPVS mode keeps every kube-ipvs0 address in (KUBE-6-IPVS-IPS for IPv6)
IPVS_ADDRESS_SETS = ("KUBE-IPVS-IPS", "KUBE-6-IPVS-IPS")
# interfaces whose addresses are not the node's own (loopback, IPVS mode's dummy interface)
NOT_HOST = ("lo", IPVS_INTERFACE)


@dataclass(frozen=True, slots=True)
class _Owner:
    """Whose address it is: a node (named, when its Node object or its own ``ip addr`` says), or a
    machine the user reaches with ssh (``node`` is then how to name it)."""

    node: str
    cite: Cite
    here: bool  # read from this node's own interfaces (not a Node object)
    ssh: SshAttempt | None = None  # the ssh command that names it (no Node object or interface did)

    @property
    def who(self) -> str:
        return self.node if self.ssh is not None else f"node {self.node}"


def _bound(facts: Facts) -> list[tuple[Artifact, system.BoundAddress]]:
    """Every address on an interface in ``ip addr`` output, JSON or text (text with addresses
    is typed with ``ip link``'s), with the output it is in."""
    return [(a, b) for k in IP_ADDR_KINDS for a in facts.of(k) for b in system.bound_addresses(a.read_text())[1]]


def _cite(art: Artifact, b: system.BoundAddress, prefix: str = "") -> Cite:
    return Cite(art.name, art.first_line + b.line if b.line >= 0 else None, prefix + b.text)


def _ip(value: object) -> IPAddress | None:
    return host_address(value.strip()) if isinstance(value, str) else None


def _node_addresses(facts: Facts, bound: list[tuple[Artifact, system.BoundAddress]]) -> dict[IPAddress, _Owner]:
    """Every node address the evidence shows: the Node objects' InternalIP/ExternalIP, and the
    addresses on this node's own interfaces (not loopback, not kube-ipvs0)."""
    out: dict[IPAddress, _Owner] = {}
    for node, a in facts.cluster.node_addresses():
        if a.type in ("InternalIP", "ExternalIP") and (ip := _ip(a.address)) is not None:
            cite = facts.object_cite(node, f"Node {node.name}: {a.type} {ip}")
            out.setdefault(ip, _Owner(node.name, cite, False))
    here = facts.node.name if facts.node else "this node"
    for art, b in bound:
        if b.interface not in NOT_HOST and not b.address.is_loopback and not b.address.is_link_local:
            out.setdefault(b.address, _Owner(here, _cite(art, b), True))
    for attempt, cite in facts.ssh_attempts:
        if (ip := _ip(attempt.host)) is not None:
            out.setdefault(ip, _Owner(f"the machine `{attempt.command}` connects to", cite, False, attempt))
    return out


def _service_addresses(facts: Facts) -> Iterator[tuple[str, str, IPAddress, Cite]]:
    """(Service, which field, address, citation) for every externalIP and load-balancer IP."""
    for view in facts.cluster.services:
        svc, label = view.obj, view.key
        for value in view.external_ips:
            if (ip := _ip(value)) is not None:
                yield label, "externalIPs", ip, facts.object_cite(svc, f"Service {label}: externalIPs {ip}")
        for value in view.lb_ingress_ips:
            if (ip := _ip(value)) is not None:
                # a table's EXTERNAL-IP of a LoadBalancer Service holds both, not saying which
                field = "EXTERNAL-IP" if svc.fragment == TABLE_ROW else "load-balancer IP"
                yield label, field, ip, facts.object_cite(svc, f"Service {label}: load-balancer ingress {ip}")


def _ipvs_bound(
    facts: Facts, bound: list[tuple[Artifact, system.BoundAddress]], wanted: dict[IPAddress, _Owner]
) -> dict[IPAddress, Cite]:
    """Which of the node addresses ``wanted`` kube-proxy's IPVS mode took over on this node (on
    kube-ipvs0, or in KUBE-IPVS-IPS)."""
    out: dict[IPAddress, Cite] = {}
    for art, b in bound:
        if b.interface == IPVS_INTERFACE and b.address in wanted:
            out.setdefault(b.address, _cite(art, b, f"{IPVS_INTERFACE}: "))
    for name in IPVS_ADDRESS_SETS:
        s = facts.ipsets.get(name)
        if s is None:
            continue
        for ip in wanted:
            if s.family == ip.version and s.holds((int(ip),)):
                out.setdefault(ip, Cite(s.artifact, s.line, f"{name} holds {ip}"))
    return out


def _ipvs(facts: Facts, bound: dict[IPAddress, Cite]) -> bool:
    """Does kube-proxy run in IPVS mode (or has it bound one of the node's addresses)?"""
    return facts.running_mode.mode == "ipvs" or bool(bound)


def _consequence(ipvs: bool, where: str, owner: _Owner) -> str:
    if ipvs:
        return (
            f"In IPVS mode kube-proxy binds it on {IPVS_INTERFACE} of every node{where}: the address is local on "
            f"every node, so traffic to {owner.who} never leaves them, and new connections to it on any port no "
            "Service uses (ssh, the kubelet, the apiserver) are rejected: the node goes NotReady or unreachable."
        )
    return (
        "kube-proxy forwards the Service's ports on that address to the Service's Pods for every client, so "
        f"connections to {owner.who} on those ports (443 to an apiserver, 22 to ssh) reach the Pods instead; with a "
        "layer-2 load balancer, another node may answer ARP for the address."
    )


@check(
    "KP209",
    cause="service-vip-is-node-address",
    title="A Service address is also a node's own address",
    severity=Severity.CRITICAL,
    needs=[Kind.K8S_OBJECTS, *PRINTED_SERVICES, *IP_ADDR_KINDS, Kind.SSH_ATTEMPTS],
)
def vip_is_node_address(facts: Facts) -> Iterator[Finding]:
    """A Service's externalIP or load-balancer IP equals an address of a node, and kube-proxy captures it.

    Symptom: right after a Service gets externalIPs or a load-balancer address, one node goes
        NotReady or cannot be reached from the others (ssh hangs or is refused, `ping` says
        "Destination Host Unreachable", "no route to host"), while the same Service works in
        iptables mode; or connections to the node on the Service's port reach the Service.
    Cause: the address given to the Service (by hand in `externalIPs`, or from a load-balancer
        pool such as MetalLB's or k3s ServiceLB's that contains node addresses) is a node's own.
        kube-proxy takes every externalIP and load-balancer IP as its own: in IPVS mode it binds
        it on kube-ipvs0 of every node and adds it to KUBE-IPVS-IPS, whose KUBE-IPVS-FILTER
        rejects new connections on every port no Service uses; in iptables/nftables mode it
        DNATs the Service's ports on that address.
    How it is detected: the externalIPs and load-balancer ingress IPs of the Services (their
        objects, or the EXTERNAL-IP of `kubectl get svc`) are compared with the Node objects'
        InternalIP/ExternalIP (or `kubectl get nodes -o wide`'s INTERNAL-IP/EXTERNAL-IP) and
        with this node's own interface addresses (`ip addr`, loopback and kube-ipvs0 left out). Without the
        Services, an address on kube-ipvs0 (or in KUBE-IPVS-IPS) that another interface of
        the node also holds is the same capture seen on the node. IPVS mode (kube-proxy's
        mode, or kube-ipvs0 holding the address) makes it critical; otherwise a warning. A
        load-balancer address pool (MetalLB's IPAddressPool or legacy ConfigMap) holding a
        node's address, or the address of a machine the user reaches with ssh, is the same
        mistake before (or after) a Service gets it: a warning, critical when that ssh failed.
    Fix: give the Service an address no node uses (remove the node address from `externalIPs`,
        or from the load-balancer address pool) and let kube-proxy sync (it unbinds the address
        from kube-ipvs0); the node is reachable again at once.
    References: https://github.com/kubernetes/kubernetes/issues/104679;
        https://github.com/kubernetes/kubernetes/issues/127410;
        https://github.com/kubernetes/kubernetes/issues/93175;
        https://github.com/k3s-io/k3s/issues/7183;
        https://github.com/metallb/metallb/issues/1397
    """
    interfaces = _bound(facts)
    nodes = _node_addresses(facts, interfaces)
    if not nodes:
        yield from _suspected(facts)
        return
    bound = _ipvs_bound(facts, interfaces, nodes)
    ipvs = _ipvs(facts, bound)
    out: list[Finding] = []
    seen: set[IPAddress] = set()
    pairs: set[tuple[str, IPAddress]] = set()
    for label, field, ip, cite in _service_addresses(facts):
        owner = nodes.get(ip)
        if owner is None or (label, ip) in pairs:
            continue
        pairs.add((label, ip))
        seen.add(ip)
        on_ipvs = bound.get(ip)
        where = f" (this node has it there: {on_ipvs.text})" if on_ipvs else ""
        f = start(facts, "KP209", [], confidence=Confidence.HIGH, severity=None if ipvs else Severity.WARNING)
        f.summary = f"Service {label}'s {field} {ip} is the address of {owner.who}. " + _consequence(ipvs, where, owner)
        if not ipvs and owner.ssh is None and _not_ready(facts, owner.node):
            f.summary += (
                f" Node {owner.node} is not Ready, as a node whose address kube-proxy's IPVS mode took over is: "
                "`kubectl -n kube-system get cm kube-proxy -o yaml` (mode) or `ip addr show kube-ipvs0` on a node "
                "tells whether it runs in IPVS mode."
            )
        f.evidence = [cite, owner.cite] + ([on_ipvs] if on_ipvs else [])
        f.subject = {"service": label, "workload": None}
        f.ongoing = True
        f.fix = [f"Give {label} an address no node uses instead of {ip} (its {field}), then let kube-proxy sync."]
        out.append(f)
    for ip, on_ipvs in sorted(bound.items(), key=lambda kv: (kv[0].version, int(kv[0]))):
        owner = nodes.get(ip)
        if owner is None or ip in seen or not owner.here:
            continue  # a Node object's address bound here is named above, with its Service
        seen.add(ip)
        f = start(facts, "KP209", [], confidence=Confidence.MEDIUM)
        f.summary = (
            f"{ip} is an address of this node and kube-proxy's IPVS mode has bound it too ({on_ipvs.text}): a "
            "Service's externalIP or load-balancer IP is set to it. "
            + _consequence(True, "", owner)
            + " Give the Services (`kubectl get svc -A -o wide`) to name which one."
        )
        f.evidence = [owner.cite, on_ipvs]
        f.ongoing = True
        f.fix = [
            "Find the Service with this address (`kubectl get svc -A -o wide | grep " + str(ip) + "`) and give "
            "it an address no node uses."
        ]
        out.append(f)
    out += _pools_holding_hosts(facts, nodes, seen)
    yield from capped(facts, "KP209", out, "whose address is a node's")


def _not_ready(facts: Facts, name: str) -> bool:
    """Is the Node of this name shown not Ready (its object, or a `kubectl get nodes` row)?"""
    return any(n.name == name and node_down(n) for n in facts.cluster.nodes())


def _suspected(facts: Facts) -> Iterator[Finding]:
    """No node address is shown, but a Service has externalIPs and a Node is not Ready: what the
    mistake looks like from the cluster's side (the node whose address a Service took goes
    NotReady). Suspected: the node's addresses decide it. (A load-balancer IP is left out: a cloud
    hands out addresses no node has.)"""
    external = [(label, ip, cite) for label, field, ip, cite in _service_addresses(facts) if field == "externalIPs"]
    down = [n for n in facts.cluster.nodes() if node_down(n)]
    if not external or not down:
        return
    ips = sorted({ip for _, ip, _ in external}, key=lambda ip: (ip.version, int(ip)))
    services = sorted({label for label, _, _ in external})
    names = ", ".join(n.name for n in down[:3]) + (f" and {len(down) - 3} more" if len(down) > 3 else "")
    f = start(facts, "KP209", [], confidence=Confidence.LOW, severity=Severity.WARNING)
    f.summary = (
        f"Service {', '.join(services[:3])} has external address(es) {', '.join(map(str, ips[:4]))} "
        f"and node {names} is not Ready. If one of those addresses is a node's own, kube-proxy takes it as the "
        "Service's (in IPVS mode it binds it on kube-ipvs0 of every node and rejects every other port on it): "
        "that node goes NotReady. The nodes' addresses (`kubectl get nodes -o wide`) decide it."
    )
    suspect(
        f,
        "a Service has externalIPs and a node is not Ready; the nodes' addresses are not shown",
        ["kubectl get nodes -o wide", "ip -br addr (on the node that is not Ready)"],
    )
    f.evidence = [c for _, _, c in external[:3]] + [
        facts.object_cite(n, f"Node {n.name}: Ready {node_ready(n)}") for n in down[:3]
    ]
    f.subject = {"service": services[0], "workload": None}
    f.fix = [
        "Compare the Services' external addresses with `kubectl get nodes -o wide` (INTERNAL-IP, EXTERNAL-IP); "
        "give a Service that holds a node's address one no node uses."
    ]
    yield f


def _pools_holding_hosts(facts: Facts, hosts: dict[IPAddress, _Owner], seen: set[IPAddress]) -> list[Finding]:
    """A load-balancer address pool that holds a node's (or an ssh'd machine's) address: the pool
    hands it to the next LoadBalancer Service, and kube-proxy then captures it on every node."""
    out = []
    for pool in facts.cluster.address_pools:
        for ip, owner in hosts.items():
            entry = pool.holding(ip.version, int(ip))
            if entry is None or ip in seen:
                continue
            seen.add(ip)
            failed = owner.ssh.failure if owner.ssh is not None else None
            f = start(facts, "KP209", [], confidence=Confidence.MEDIUM if owner.ssh else Confidence.HIGH)
            f.severity = Severity.CRITICAL if failed else Severity.WARNING
            f.confidence_reason = (
                "a load-balancer pool holds the address of a machine reached with ssh"
                + (", and that ssh failed" if failed else "")
                if owner.ssh
                else "a load-balancer pool holds a node's address"
            )
            f.summary = (
                f"Load-balancer address pool {pool.name} ({pool.obj.kind} {pool.obj.name}) holds {entry}, which "
                f"includes {ip}, the address of {owner.who}. The load balancer hands it to a Service, and kube-proxy "
                "then takes it as the Service's own on every node (IPVS: bound on kube-ipvs0, other ports "
                "rejected), and in layer-2 mode another node may answer ARP for it: the machine is cut off."
            )
            if failed:
                f.summary += f" The ssh to it failed: {failed}"
            f.evidence = [Cite(pool.obj.artifact, pool.obj.line, f"{pool.name}: addresses {entry}"), owner.cite]
            if owner.ssh is not None and owner.ssh.failure_line is not None and owner.cite.line is not None:
                line = owner.cite.line + owner.ssh.failure_line - owner.ssh.line
                f.evidence.append(Cite(owner.cite.artifact, line, owner.ssh.failure or ""))
            f.ongoing = True if failed else None
            f.fix = [
                f"Take {ip} out of pool {pool.name} (no node's or other machine's address may be in it), give the "
                "Service holding it another address (`kubectl get svc -A -o wide | grep " + str(ip) + "`), and let "
                "kube-proxy sync.",
            ]
            out.append(f)
    return out
