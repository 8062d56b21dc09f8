"""What the cluster says this node should do with each Service's traffic.

From Services, EndpointSlices (or v1 Endpoints), the node's identity and its addresses, build one
:class:`Case` per Service port x traffic class x address family: the packet to send and the
outcomes that are correct for it. Behaviour that changed across kube-proxy releases follows the
version found; with no version every outcome that some release would produce is accepted, and the
case says so (``alternatives`` holds each, with the release behaviour it stands for).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kpdoctor.dataplane.addresses import IPAddress, IPNetwork, address_text, endpoint_text, host_address, host_port
from kpdoctor.dataplane.service_info import DEFAULT_AFFINITY_TIMEOUT, read_service
from kpdoctor.model import Cite
from kpdoctor.parse.k8s import SERVICE_NAME_LABEL, K8sObject, as_dict, as_list, is_ip, port_problem, port_value, shown
from kpdoctor.parse.kubectl_describe import DESCRIBED
from kpdoctor.parse.kubectl_table import TABLE_ROW
from kpdoctor.versions import KubeVersion

_slice_endpoints: Callable[[object, int, Callable[[object, int], bool]], tuple[list[Any], list[int]]] | None
try:  # the core reads a slice's endpoints (rust/src/cluster.rs); _slice_rows without it
    from kpdoctor._core import slice_endpoints as _slice_endpoints
except ImportError:
    _slice_endpoints = None

ZONE_LABEL = "topology.kubernetes.io/zone"

# The traffic classes verified per Service port: (short label for tables, who sends to what).
TRAFFIC_CLASSES = {
    "pod-to-clusterip": ("pod", "Pods to the ClusterIP"),
    "node-to-clusterip": ("node", "the node to the ClusterIP"),
    "external-to-nodeport": ("nodeport", "outside clients to the NodePort"),
    "external-to-externalip": ("externalIP", "outside clients to the external IP"),
    "external-to-loadbalancer": ("LB", "outside clients to the load-balancer IP"),
    "external-to-loadbalancer-outside-source-ranges": ("LB-denied", "clients outside loadBalancerSourceRanges"),
    "pod-to-clusterip-undeclared-port": ("pod-other-port", "Pods to the ClusterIP on a port no Service declares"),
}

# Stand-in clients: documentation ranges (RFC 5737 / RFC 3849) that are nobody's address.
EXTERNAL_CLIENTS = {
    4: ["198.51.100.77", "203.0.113.201", "192.0.2.77"],
    6: ["2001:db8:ffff::77", "2001:db8:fffe::77"],
}
DEFAULT_POD_CLIENT = {4: "10.255.255.254", 6: "fd00:ffff::fe"}

# Releases where endpoint selection changed (upstream feature-gate history).
TERMINATING_FALLBACK = KubeVersion(1, 26, 0)  # ProxyTerminatingEndpoints on by default (cluster and local)
TERMINATING_ALPHA = KubeVersion(1, 22, 0)  # alpha: local endpoints only, behind the gate
ITP_DEFAULT_ON = KubeVersion(1, 22, 0)  # ServiceInternalTrafficPolicy beta
ITP_ALPHA = KubeVersion(1, 21, 0)
HINTS_DEFAULT_ON = KubeVersion(1, 24, 0)  # TopologyAwareHints on by default
TRAFFIC_DISTRIBUTION_ON = KubeVersion(1, 31, 0)  # spec.trafficDistribution beta


class Endpoint:
    """One endpoint address of a Service port, with its conditions (a plain slotted class: a
    large cluster has 50,000 of them, and a frozen dataclass costs 5x more to build)."""

    __slots__ = ("addr", "ip", "node", "port", "ready", "serving", "terminating", "zones")

    def __init__(
        self,
        ip: str,
        port: int,
        node: str | None,
        ready: bool,
        serving: bool,
        terminating: bool,
        zones: tuple[str, ...] | None,  # topology hints (forZones); None: no hints
    ) -> None:
        self.ip, self.port, self.node = ip, port, node
        self.ready, self.serving, self.terminating, self.zones = ready, serving, terminating, zones
        self.addr = host_port(ip, port)  # as kube-proxy's DNAT names it

    def __repr__(self) -> str:
        return f"Endpoint({self.addr}, node={self.node}, ready={self.ready})"


@dataclass(slots=True)
class ServicePort:
    """One port of one Service in one address family, with everything kube-proxy reads."""

    namespace: str
    name: str
    port_name: str
    protocol: str  # TCP | UDP | SCTP
    port: int
    family: int
    node_port: int | None = None
    cluster_ip: str | None = None
    external_ips: list[str] = field(default_factory=list)
    lb_ips: list[str] = field(default_factory=list)
    source_ranges: list[IPNetwork] = field(default_factory=list)
    etp_local: bool = False
    itp_local: bool = False
    affinity: bool = False
    # sessionAffinityConfig.clientIP.timeoutSeconds (kube-proxy's default: 10800 s, 3 hours)
    affinity_timeout: int = DEFAULT_AFFINITY_TIMEOUT
    affinity_timeout_shown: bool = True  # False: a description, which does not print it
    topology: str | None = None  # "hints" | "PreferClose" when the Service asks for topology routing
    endpoints: list[Endpoint] = field(default_factory=list)
    endpoints_known: bool = True
    cite: Cite | None = None
    # What in the objects this port is built from the API server would have refused: its
    # traffic classes are uncertain, saying why (never verified as if the value were valid).
    problems: list[str] = field(default_factory=list)
    node_port_problem: str | None = None  # only its NodePort is unreadable
    notes: list[str] = field(default_factory=list)  # said with each of its results

    @property
    def service(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def label(self) -> str:
        """kube-proxy's name for it (``ns/name:port``), as in its rule comments."""
        return f"{self.service}:{self.port_name}" if self.port_name else self.service


NO_BACKENDS: tuple[str, ...] = ()
"""The backends of a refused expectation."""


@dataclass(frozen=True, slots=True)
class Expectation:
    """One correct outcome: forwarded to these backends (evenly), or refused (DROP/REJECT)."""

    # sorted, each once; empty: refused (a tuple: 80 bytes for five backends, a frozenset 720)
    backends: tuple[str, ...]
    why: str

    @property
    def refused(self) -> bool:
        return not self.backends


@dataclass(slots=True)
class Case:
    sp: ServicePort
    traffic: str  # pod-to-clusterip | node-to-clusterip | external-to-nodeport | ...
    src: IPAddress | None
    dst: IPAddress | None
    dport: int
    hook: str  # prerouting | output
    alternatives: list[Expectation]
    notes: list[str] = field(default_factory=list)
    unknown: str | None = None  # why this case cannot be evaluated (missing evidence)

    @property
    def destination(self) -> str:
        if self.dst is None:
            return f"?:{self.dport}"
        return endpoint_text(self.dst, self.dport)

    @property
    def source(self) -> str | None:
        return None if self.src is None else address_text(self.src)


@dataclass(frozen=True, slots=True)
class Behaviour:
    """Endpoint-selection rules of the kube-proxy in use; None where the release is unknown."""

    version: KubeVersion | None
    fallback_cluster: bool | None
    fallback_local: bool | None
    itp: bool | None
    hints: bool | None
    traffic_distribution: bool | None

    @classmethod
    def of(cls, version: KubeVersion | None, gates: dict[str, bool] | None = None) -> Behaviour:
        gates = gates or {}
        if version is None:
            return cls(None, None, None, None, None, None)

        def since(v: KubeVersion, gate: str | None = None, alpha: KubeVersion | None = None) -> bool:
            up = version.upstream
            if gate and gate in gates:
                return gates[gate] and (alpha is None or up >= alpha.upstream)
            return up >= v.upstream

        fb_local = since(TERMINATING_FALLBACK, "ProxyTerminatingEndpoints", TERMINATING_ALPHA)
        fb_cluster = since(TERMINATING_FALLBACK, "ProxyTerminatingEndpoints", TERMINATING_FALLBACK)
        itp = since(ITP_DEFAULT_ON, "ServiceInternalTrafficPolicy", ITP_ALPHA)
        hints = since(HINTS_DEFAULT_ON, "TopologyAwareHints", KubeVersion(1, 21, 0))
        td = since(TRAFFIC_DISTRIBUTION_ON, "ServiceTrafficDistribution", KubeVersion(1, 30, 0))
        return cls(version, fb_cluster, fb_local, itp, hints, td)


def _choices(flag: bool | None) -> list[bool]:
    return [flag] if flag is not None else [True, False]


@dataclass(slots=True)
class NodeView:
    """The node as far as the evidence shows it."""

    name: str | None
    addresses: dict[int, list[IPAddress]]  # by family, the primary first
    zone: str | None = None
    pod_cidrs: list[IPNetwork] = field(default_factory=list)
    # why the node's name or Node object is not known, when the evidence says more than "none
    # given" ("2 Nodes in the evidence: give --node NAME (a, b)")
    unknown_why: str | None = None

    def primary(self, family: int) -> IPAddress | None:
        addrs = self.addresses.get(family) or []
        return addrs[0] if addrs else None

    def local(self) -> list[IPAddress]:
        """Every address of the node, all families (what ``--dst-type LOCAL`` matches)."""
        return [a for addrs in self.addresses.values() for a in addrs]


def _bool(v: Any, default: bool) -> bool:
    return default if v is None else bool(v)


def _text(v: object) -> str | None:
    return v if isinstance(v, str) and v else None


def _endpoints_from_slices(
    slices: list[K8sObject], port_name: str, protocol: str, family: int, problems: list[str], notes: list[str]
) -> list[Endpoint]:
    """The endpoints kube-proxy takes for one port from a Service's slices. What the API server
    would have refused (an address that is none, null or "", a port of -1) goes to ``problems``
    with where it is, instead of becoming a backend such as "None:80"; what is valid but odd (a
    slice without ports, whose endpoints kube-proxy ignores) to ``notes``."""
    want = "IPv4" if family == 4 else "IPv6"
    out: dict[str, Endpoint] = {}
    for sl in slices:
        body = sl.body
        if body.get("addressType", want) != want:
            continue
        if not as_list(body.get("ports")) and as_list(body.get("endpoints")):
            notes.append(f"EndpointSlice {sl.name} ({sl.where}) has no ports: kube-proxy takes none of its endpoints")
            continue
        port = next(
            (
                p
                for p in as_list(body.get("ports"))
                if isinstance(p, dict)
                and (p.get("name") or "") == port_name
                and str(p.get("protocol") or "TCP").upper() == protocol
            ),
            None,
        )
        if port is None or port.get("port") is None:
            continue
        number = port_value(port.get("port"))
        if number is None:
            problems.append(f"EndpointSlice {sl.name} ({sl.where}): {port_problem(port.get('port'))}")
            continue
        endpoints = as_list(body.get("endpoints"))
        # the bulk of a cluster (50,000 endpoints at 10,000 Services): read in the core
        rows, unread = (_slice_endpoints or _slice_rows)(endpoints, family, is_ip)
        bad = [shown(_first_address(endpoints[n])) for n in unread]
        for ip, node, ready, serving, terminating, zones in rows:
            e = Endpoint(ip, number, node, ready, serving, terminating, zones)
            prev = out.get(e.addr)
            if prev is None or (e.ready and not prev.ready):
                out[e.addr] = e
        if bad:
            problems.append(
                f"EndpointSlice {sl.name} ({sl.where}): endpoint address {', '.join(bad[:3])} is not an {want} address"
            )
    return list(out.values())


def _first_address(ep: object) -> object:
    """An endpoint's first address as written (its address list, or nothing, when it has none)."""
    addrs = ep.get("addresses") if isinstance(ep, dict) else None
    return addrs[0] if isinstance(addrs, list) and addrs else addrs


def _slice_rows(
    endpoints: list[Any], family: int, ip_test: Callable[[object, int], bool]
) -> tuple[list[tuple[Any, ...]], list[int]]:
    """``_core.slice_endpoints`` without the core: per endpoint whose first address is of
    ``family``, (address, node, ready, serving, terminating, zones); and the positions of the
    others."""
    rows: list[tuple[Any, ...]] = []
    unread: list[int] = []
    for n, ep in enumerate(endpoints):
        first = _first_address(ep)
        if not isinstance(ep, dict) or not isinstance(ep.get("addresses"), list) or not ip_test(first, family):
            unread.append(n)
            continue
        cond = ep.get("conditions")
        if isinstance(cond, dict):
            ready = _bool(cond.get("ready"), True)
            serving = _bool(cond.get("serving"), ready)
            terminating = _bool(cond.get("terminating"), False)
        else:
            ready, serving, terminating = True, True, False
        node = ep.get("nodeName")
        if not isinstance(node, str) or not node:
            node = _text(as_dict(ep.get("topology")).get("kubernetes.io/hostname"))
        zones = None
        if "hints" in ep and "forZones" in (hints := as_dict(ep["hints"])):
            zones = tuple(str(as_dict(z).get("name", "")) for z in as_list(hints.get("forZones")))
        rows.append((first, node, ready, serving, terminating, zones))
    return rows, unread


def _endpoints_from_v1(
    obj: K8sObject, port_name: str, protocol: str, family: int, problems: list[str]
) -> list[Endpoint]:
    """The same from v1 Endpoints (clusters before EndpointSlices)."""
    out: dict[str, Endpoint] = {}
    for subset in as_list(obj.body.get("subsets")):
        if not isinstance(subset, dict):
            problems.append(f"Endpoints {obj.name} ({obj.where}): a subset is {shown(subset)}, not an object")
            continue
        port = next(
            (
                p
                for p in as_list(subset.get("ports"))
                if isinstance(p, dict)
                and (p.get("name") or "") == port_name
                and str(p.get("protocol") or "TCP").upper() == protocol
            ),
            None,
        )
        if port is None:
            continue
        number = port_value(port.get("port"))
        if number is None:
            problems.append(f"Endpoints {obj.name} ({obj.where}): {port_problem(port.get('port'))}")
            continue
        for key, ready in (("addresses", True), ("notReadyAddresses", False)):
            for a in as_list(subset.get(key)):
                ip = as_dict(a).get("ip")
                if not is_ip(ip):
                    problems.append(f"Endpoints {obj.name} ({obj.where}): address {shown(a)} has no IP address")
                    continue
                assert isinstance(ip, str) and isinstance(a, dict)
                if (":" in ip) != (family == 6):
                    continue
                e = Endpoint(ip, number, _text(a.get("nodeName")), ready, ready, False, None)
                out.setdefault(e.addr, e)
    return list(out.values())


def _family(ip: str) -> int | None:
    a = host_address(ip)
    return a.version if a is not None else None


# Why a case's backends cannot be judged: its Service's endpoints are not in the evidence. Its
# packet is still sent through the rules: kube-proxy writes something for every port of a Service
# that is not headless (a DNAT to its endpoints, or a REJECT/drop when it has none), so a packet
# the rules leave untouched proves the rules missing whatever the endpoints are (verify.py).
ENDPOINTS_UNKNOWN = "no EndpointSlices or Endpoints in the evidence"


def partial_listing(services: Iterable[K8sObject]) -> bool:
    """Are some Services only rows of a `kubectl get svc` table, or descriptions? Such a listing
    may leave out namespaces (no -A), rows (a grep) or every other Service (a describe names
    one): rules no Service in it owns prove nothing stale."""
    return any(s.fragment in (TABLE_ROW, DESCRIBED) for s in services)


def service_ports(
    services: Iterable[K8sObject],
    slices: list[K8sObject],
    endpoints: list[K8sObject],
    endpoints_exported: bool = False,
    unverified: list[tuple[str, str]] | None = None,
    carry: tuple[dict[Any, Any], dict[Any, Any]] | None = None,
) -> tuple[list[ServicePort], int]:
    """Every Service port per family kube-proxy programs, and how many Services that covers.

    ``endpoints_exported``: the evidence is an export of the cluster's objects that would hold
    EndpointSlices if there were any, so a Service without any has no endpoints (rather than
    unknown ones). ``unverified`` gets the Services that give no port to verify although they
    are not headless (no spec, no clusterIP, no ports), with why: such a verification is not
    clean.

    ``carry``: (the previous run's, this run's) ports by the identity of the objects they come
    from: a Service whose objects are the very same as in the previous run (the node agent keeps
    them parsed) keeps its ports, never built again (dataplane/reuse.py)."""
    by_svc: dict[tuple[str, str], list[K8sObject]] = {}
    for sl in slices:
        svc = as_dict(as_dict(sl.body.get("metadata")).get("labels")).get(SERVICE_NAME_LABEL)
        if svc and isinstance(svc, str):
            by_svc.setdefault((sl.namespace or "default", svc), []).append(sl)
    v1 = {(e.namespace or "default", e.name): e for e in endpoints}
    # a description's endpoints are its Service's alone: they say nothing of another Service's
    known = bool(slices) or any(e.fragment != DESCRIBED for e in endpoints) or endpoints_exported
    out: list[ServicePort] = []
    count = 0
    for svc in services:
        key = (svc.namespace or "default", svc.name)
        slist, v1e = by_svc.get(key), v1.get(key)
        made = None
        ident = (id(svc), tuple(map(id, slist or ())), id(v1e), known)
        if carry is not None:
            hit = carry[0].get(ident)
            if hit is not None and hit[0] is svc:  # the ids are the same objects: the entry keeps them alive
                made = hit
        if made is None:
            # a `kubectl get svc` row: the Service is shown, its endpoints never are; a
            # description: when it showed them all (parse/kubectl_describe)
            if svc.fragment == DESCRIBED:
                endpoints_shown = bool(slist) or (v1e is not None and v1e.fragment == DESCRIBED)
            else:
                endpoints_shown = known and svc.fragment != TABLE_ROW
            made = (svc, slist, v1e, *_ports_of(svc, slist, v1e, endpoints_shown))
        if carry is not None:
            carry[1][ident] = made
        sps, unv, counted = made[3], made[4], made[5]
        out.extend(sps)
        count += counted
        if unverified is not None:
            unverified.extend(unv)
    return out, count


def _ports_of(
    svc: K8sObject, slist: list[K8sObject] | None, v1e: K8sObject | None, known: bool
) -> tuple[list[ServicePort], list[tuple[str, str]], int]:
    """One Service's ports (see :func:`service_ports`), the reasons it gives none to verify, and
    whether it counts as a Service kube-proxy programs (1) or not (0)."""
    out: list[ServicePort] = []
    unverified: list[tuple[str, str]] = []
    count = 0
    info = read_service(svc)
    if info.type == "ExternalName":
        return out, unverified, count
    if not svc.name:  # reported by parse/k8s; kube-proxy never saw it
        unverified.append((f"(a Service without a name, {svc.where})", "no metadata.name"))
        return out, unverified, count
    ips = info.cluster_ips
    if not info.has_spec or not ips:
        unverified.append((info.ref, f"{'no clusterIP' if info.has_spec else 'no spec'} ({svc.where})"))
        return out, unverified, count
    if info.headless:
        return out, unverified, count
    count += 1
    if info.other_proxy:
        return out, unverified, count  # another proxy owns it; kube-proxy writes nothing
    if not info.ports:
        unverified.append((info.ref, f"no ports ({svc.where})"))
    ns = info.namespace
    lb, ranges, external = info.lb_ips, info.source_ranges, info.external_ips
    node_ports = info.node_ports
    cite = Cite(svc.artifact, svc.line, f"Service {ns}/{svc.name}")
    for port in info.ports:  # (entries that are no port: reported by parse/k8s; none to verify)
        proto = port.protocol[:16]
        pname = port.name
        number = port.port
        np_problem = port.node_port_problem if node_ports else None
        for ip in ips:
            fam = _family(str(ip))
            problems = list(port.problems)
            if fam is None:
                problems.append(f"clusterIP {shown(ip)} is not an IP address")
                fam = 6 if ":" in str(ip) else 4
            sp = ServicePort(
                ns,
                svc.name,
                pname,
                proto,
                number if number is not None else _shown_port(port.raw_port),
                fam,
                node_port=port.node_port if node_ports else None,
                cluster_ip=str(ip),
                external_ips=[x for x in external if is_ip(x, fam)],
                lb_ips=[x for x in lb if _family(x) == fam],
                source_ranges=[r for r in ranges if r.version == fam],
                etp_local=info.etp_local,
                itp_local=info.itp_local,
                affinity=info.affinity,
                affinity_timeout=info.affinity_timeout,
                affinity_timeout_shown=svc.fragment != DESCRIBED,
                topology=info.topology,
                cite=cite,
            )
            if slist:
                sp.endpoints = _endpoints_from_slices(slist, pname, proto, fam, problems, sp.notes)
            elif v1e is not None:
                sp.endpoints = _endpoints_from_v1(v1e, pname, proto, fam, problems)
            sp.endpoints_known = known
            if problems:
                where = f"Service {ns}/{svc.name} ({svc.where})"
                sp.problems = [
                    p if p.startswith(("EndpointSlice ", "Endpoints ")) else f"{where}: {p}" for p in problems
                ]
            if np_problem:
                sp.node_port_problem = f"Service {ns}/{svc.name} ({svc.where}): {np_problem}"
            out.append(sp)
    return out, unverified, count


def _shown_port(v: object) -> int:
    """The number to show for a port that is not one (-1, 10**12); 0 when it is no number."""
    return v if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 10**15 else 0


def _usable(eps: list[Endpoint], fallback: bool) -> list[Endpoint]:
    """kube-proxy's choice: ready endpoints; with none, serving-terminating ones (if enabled)."""
    ready = [e for e in eps if e.ready]
    if ready or not fallback:
        return ready
    return [e for e in eps if e.serving and e.terminating]


def alternatives(
    sp: ServicePort,
    node: NodeView,
    beh: Behaviour,
    policies: list[bool],
) -> tuple[list[Expectation], str]:
    """Every correct outcome for one traffic class, and a note when more than one is accepted.

    ``policies``: whether the Local traffic policy applies (both values when the release in use
    may or may not honour it)."""
    found: dict[tuple[str, ...], list[str]] = {}
    for local_policy in policies:
        for fb in _choices(beh.fallback_local if local_policy else beh.fallback_cluster):
            if local_policy:
                chosen = _usable([e for e in sp.endpoints if e.node == node.name], fb)
                why = "ready endpoints on this node"
            else:
                chosen = _usable(sp.endpoints, fb)
                why = "ready endpoints" if len(policies) == 1 else "ready endpoints (traffic policy ignored)"
            if chosen and not any(e.ready for e in chosen):
                why = "serving terminating endpoints (fallback from kube-proxy 1.26)"
            sets = [(chosen, why)]
            if not local_policy and sp.topology and node.zone and chosen:
                enabled = beh.hints if sp.topology == "hints" else beh.traffic_distribution
                if enabled is not False and all(e.zones is not None for e in chosen):
                    zoned = [e for e in chosen if node.zone in (e.zones or ())]
                    if zoned:
                        hinted = (zoned, f"endpoints hinted for zone {node.zone}")
                        sets = [hinted] if enabled else [hinted, (chosen, why + " (topology hints not used)")]
            for eps, w in sets:
                key = tuple(sorted({e.addr for e in eps})) if eps else NO_BACKENDS
                if not key:
                    w = "no usable endpoints on this node: refused" if local_policy else "no usable endpoints: refused"
                found.setdefault(key, []).append(w)
    alts = [Expectation(k, "; ".join(dict.fromkeys(v))) for k, v in found.items()]
    note = ""
    if len(alts) > 1:
        note = (
            "kube-proxy version unknown: accepting the behaviour of any release ("
            + " | ".join(a.why for a in alts)
            + ")"
        )
    return alts, note


def _pick(cands: Iterable[str], avoid: list[IPNetwork], family: int) -> IPAddress | None:
    for c in cands:
        a = host_address(c)
        if a is not None and a.version == family and not any(a in n for n in avoid):
            return a
    return None


def _case(
    sp: ServicePort,
    node: NodeView,
    beh: Behaviour,
    known: dict[tuple[bool, ...], tuple[list[Expectation], str]],
    traffic: str,
    src: IPAddress | None,
    dst: IPAddress | None,
    dport: int,
    hook: str,
    policies: list[bool],
    refuse: bool = False,
    unknown: str | None = None,
) -> Case:
    if refuse:
        alts, note = [Expectation(NO_BACKENDS, "source outside loadBalancerSourceRanges: dropped")], ""
    else:
        key = tuple(policies)
        if key not in known:  # the traffic classes of a port share their expectations
            known[key] = alternatives(sp, node, beh, policies)
        alts, note = known[key]
    why = unknown
    if not refuse and not sp.endpoints_known:
        why = why or ENDPOINTS_UNKNOWN
        alts, note = [], ""  # what it should reach is not known: only rules for it at all are judged
    if any(policies) and (node.name is None or node.unknown_why) and not refuse:
        # a name that is no Node's in the evidence is as good as none: never judge "local" by it
        why = why or (node.unknown_why or "node name unknown (give --node)") + ": local endpoints cannot be told"
    if src is None and why is None:
        why = "no client address outside the Service's source ranges and pod network"
    notes = list(sp.notes)
    if sp.affinity:
        notes.append("session affinity (ClientIP): a returning client goes to its earlier backend")
    if note:
        notes.append(note)
    return Case(sp, traffic, src, dst, dport, hook, alts, notes, why)


@dataclass(frozen=True, slots=True)
class Deviations:
    """Where a proxy mode departs from the behaviour every mode shares, as the cases follow it.

    Shared by every mode, and so not here: NodePort traffic is sent to the node's primary
    address (in nftables mode's ``nodeport-ips`` by default, a local address for the others),
    never to 127.0.0.1 (which only iptables mode answers)."""

    # a ClusterIP's ports that no Service declares are rejected (nftables: "no-endpoint-services"
    # and the cluster-ips set); elsewhere such a packet leaves un-DNATed
    undeclared_ports_refused: bool = False
    # the node holds every ClusterIP as its own address (IPVS binds them to kube-ipvs0), so rules
    # matching a local destination match them too
    clusterips_local: bool = False


SHARED = Deviations()


def local_addresses(node: NodeView, services: Iterable[K8sObject], deviations: Deviations) -> list[IPAddress]:
    """The addresses the node holds as its own (what ``--dst-type LOCAL`` matches): its own,
    and every ClusterIP where the mode binds them locally (IPVS's kube-ipvs0)."""
    local = node.local()
    if deviations.clusterips_local:
        for svc in services:
            cips = read_service(svc).cluster_ips
            local += [a for a in (host_address(ip) for ip in cips if isinstance(ip, str)) if a is not None]
    return local


def cases(
    sps: list[ServicePort],
    node: NodeView,
    beh: Behaviour,
    deviations: Deviations = SHARED,
    carry: tuple[dict[Any, Any], dict[Any, Any]] | None = None,
) -> list[Case]:
    """The traffic classes the cluster defines for this node, per Service port. ``carry``: (the
    previous run's, this run's) cases by Service port object and node: a port kept from the
    previous run (:func:`service_ports`) on the same node keeps its cases, the same objects."""
    out: list[Case] = []
    clients = {f: pod_client(node, f) for f in (4, 6)}
    where = None
    if carry is not None:
        addrs = tuple((f, tuple(map(str, a))) for f, a in sorted(node.addresses.items()))
        where = (node.name, addrs, node.zone, tuple(map(str, node.pod_cidrs)), node.unknown_why, beh)
    for sp in sps:
        if carry is None:
            out.extend(_cases_for(sp, node, beh, clients[sp.family]))
            continue
        key = (id(sp), where)
        hit = carry[0].get(key)
        if hit is None or hit[0] is not sp:
            hit = (sp, _cases_for(sp, node, beh, clients[sp.family]))
        carry[1][key] = hit
        out.extend(hit[1])
    if deviations.undeclared_ports_refused:
        out.extend(_undeclared_ports(sps, node, beh, clients))
    return out


def _undeclared_ports(
    sps: list[ServicePort], node: NodeView, beh: Behaviour, clients: dict[int, IPAddress]
) -> list[Case]:
    """One case per ClusterIP: a port none of its Services declares, which must be refused."""
    declared: dict[str, set[tuple[str, int]]] = {}
    first: dict[str, ServicePort] = {}
    for sp in sps:
        if sp.cluster_ip and not sp.problems:
            declared.setdefault(sp.cluster_ip, set()).add((sp.protocol, sp.port))
            first.setdefault(sp.cluster_ip, sp)
    out = []
    for ip, sp in first.items():
        port = next(p for p in range(1, 65536) if (sp.protocol, p) not in declared[ip])
        refused = [Expectation(NO_BACKENDS, "a port no Service declares on this ClusterIP: rejected")]
        src = clients[sp.family]
        out.append(Case(sp, "pod-to-clusterip-undeclared-port", src, host_address(ip), port, "prerouting", refused))
    return out


def pod_client(node: NodeView, family: int) -> IPAddress:
    """The address a Pod's traffic is sent from: one near the end of the pod network, or a
    stand-in when the cluster CIDR is unknown."""
    pods = [n for n in node.pod_cidrs if n.version == family]
    if pods and pods[0].num_addresses > 2:
        return pods[0][-2]
    return ipaddress.ip_address(DEFAULT_POD_CLIENT[family])


def _cases_for(sp: ServicePort, node: NodeView, beh: Behaviour, pod_src: IPAddress) -> list[Case]:
    fam = sp.family
    pods = [n for n in node.pod_cidrs if n.version == fam]
    node_ip = node.primary(fam)
    out: list[Case] = []
    case = functools.partial(_case, sp, node, beh, {})

    # internalTrafficPolicy: honoured from 1.22 (1.21 behind a gate); unknown release: both
    internal = [False] if not sp.itp_local else ([True, False] if beh.itp is None else [bool(beh.itp)])
    external = [sp.etp_local]
    no_node = None if node_ip else (node.unknown_why or "node addresses unknown (no Node object or ip addr output)")
    if sp.problems:
        # never verified as if the values were valid: no "rules missing" for port -1
        unknown = "; ".join(sp.problems) + ": not verified"
        case = functools.partial(case, unknown=unknown)
        no_node = unknown
    if sp.cluster_ip:
        cip = host_address(sp.cluster_ip)
        out.append(case("pod-to-clusterip", pod_src, cip, sp.port, "prerouting", internal))
        out.append(case("node-to-clusterip", node_ip, cip, sp.port, "output", internal, unknown=no_node))
    avoid: list[IPNetwork] = [*pods, *sp.source_ranges]
    ext = _pick(EXTERNAL_CLIENTS[fam], avoid, fam)
    if sp.node_port:
        out.append(case("external-to-nodeport", ext, node_ip, sp.node_port, "prerouting", external, unknown=no_node))
    elif sp.node_port_problem:
        why = sp.node_port_problem + ": its NodePort is not verified"
        out.append(case("external-to-nodeport", ext, node_ip, 0, "prerouting", external, unknown=no_node or why))
    for ip in sp.external_ips:
        out.append(case("external-to-externalip", ext, host_address(ip), sp.port, "prerouting", external))
    for ip in sp.lb_ips:
        lb = host_address(ip)
        if not sp.source_ranges:
            out.append(case("external-to-loadbalancer", ext, lb, sp.port, "prerouting", external))
            continue
        inside = sp.source_ranges[0]
        client = inside[-2] if inside.num_addresses > 2 else inside[0]
        out.append(case("external-to-loadbalancer", client, lb, sp.port, "prerouting", external))
        if node_ip is None or not any(node_ip in r for r in sp.source_ranges):
            out.append(
                case(
                    "external-to-loadbalancer-outside-source-ranges",
                    ext,
                    lb,
                    sp.port,
                    "prerouting",
                    [False],
                    refuse=True,
                )
            )
    return out


ANY_PORT = "*"  # in owned ips: (ip, ANY_PORT, 0) owns every port of ip


class Owned(NamedTuple):
    """What some Service or Pod owns, so that rules for it are not stale."""

    ips: set[tuple[int, str, int]]  # (address, protocol, port)
    ports: set[tuple[str, int]]  # node ports (protocol, port)
    unreadable: set[str]  # NS/NAME of Services whose evidence is broken: rules naming them are theirs

    @classmethod
    def nothing(cls) -> Owned:
        """Nothing owned: every forwarding destination is stale (a mode kube-proxy no longer
        runs in owns none of its rules)."""
        return cls(set(), set(), set())


def owned_destinations(services: Iterable[K8sObject], pods: Iterable[K8sObject]) -> Owned:
    """Addresses (ip, proto, port) and node ports (proto, port) some Service or Pod owns.

    A Service whose ports or addresses cannot be read (-1, "http", no spec) owns every port of
    its addresses and every rule that names it: its rules are not "stale" because the evidence
    about it is broken (that is reported once, as an input problem)."""
    ips: set[tuple[int, str, int]] = set()
    ports: set[tuple[str, int]] = set()
    unreadable: set[str] = set()
    for svc in services:
        info = read_service(svc)
        cips = info.cluster_ips
        addrs = [*cips, *info.external_ips, *info.ingress_ips]  # whatever the type and ipMode
        hosts = [a for a in (host_address(ip) for ip in addrs if isinstance(ip, str)) if a is not None]
        # entries that are no port (a string, null) make the Service's ports unreadable too
        readable = info.port_entries > 0 and len(info.ports) == info.port_entries
        for port in info.ports:
            number = port.port
            if number is None or not port.readable:
                readable = False
                continue
            proto = port.protocol.lower()
            for a in hosts:
                ips.add((int(a), proto, number))
            node_port = port.node_port  # whatever the Service's type
            if node_port is not None:
                ports.add((proto, node_port))
        bad_ip = not cips or any(not isinstance(ip, str) or (ip != "None" and host_address(ip) is None) for ip in cips)
        if bad_ip or not svc.name or (not readable and "None" not in cips):
            ips.update((int(a), ANY_PORT, 0) for a in hosts)
            unreadable.add(info.ref)
        hc = info.health_check_node_port
        if hc is not None:
            ports.add(("tcp", hc))
    for pod in pods:
        for c in as_list(as_dict(pod.body.get("spec")).get("containers")):
            for p in as_list(c.get("ports")) if isinstance(c, dict) else []:
                host_port = port_value(p.get("hostPort")) if isinstance(p, dict) else None
                if host_port is not None:
                    ports.add((str(p.get("protocol") or "TCP").lower(), host_port))
    return Owned(ips, ports, unreadable)
