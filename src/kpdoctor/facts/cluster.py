"""Typed views of the cluster's objects that checks reason about.

Objects arrive as parsed JSON/YAML: any field may be missing or of the wrong type. Each view reads
its object once, defensively (a field of the wrong shape reads as absent), so no check walks a raw
dict and no two checks disagree on what a Service's addresses or an endpoint's state are.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kpdoctor.dataplane.addresses import IPAddress, IPNetwork, Span, address_span
from kpdoctor.dataplane.service_info import read_service
from kpdoctor.parse.k8s import SERVICE_NAME_LABEL, K8sObject, Objects, as_dict, as_list, is_ip, port_value
from kpdoctor.parse.kubectl_describe import DESCRIBED
from kpdoctor.parse.structured import StructuredError, load_yaml_all


def _strings(v: object) -> tuple[str, ...]:
    return tuple(x.strip() for x in as_list(v) if isinstance(x, str) and x.strip())


def _ref(obj: K8sObject) -> str:
    return f"{obj.namespace}/{obj.name}" if obj.namespace else obj.name


@dataclass(frozen=True, slots=True)
class ServicePortView:
    protocol: str
    port: int | None
    node_port: int | None


@dataclass(frozen=True, slots=True)
class ServiceView:
    """A Service: its addresses and ports."""

    obj: K8sObject
    key: str  # namespace/name
    type: str
    cluster_ips: tuple[str, ...]  # without "None" (headless)
    external_ips: tuple[str, ...]
    lb_ingress_ips: tuple[str, ...]  # status.loadBalancer.ingress[].ip, for type LoadBalancer
    ports: tuple[ServicePortView, ...]

    @classmethod
    def of(cls, obj: K8sObject) -> ServiceView:
        info = read_service(obj)
        lb = info.ingress_ips if info.type == "LoadBalancer" else ()  # (ipMode Proxy ones too)
        ports = tuple(
            ServicePortView(
                p.written_protocol,  # not upper-cased
                p.raw_port if isinstance(p.raw_port, int) else None,
                p.raw_node_port if isinstance(p.raw_node_port, int) else None,
            )
            for p in info.ports
        )
        external = tuple(x.strip() for x in info.external_ips if isinstance(x, str) and x.strip())
        return cls(obj, _ref(obj), info.type, info.named_cluster_ips, external, lb, ports)

    @property
    def node_ports(self) -> tuple[int, ...]:
        return tuple(p.node_port for p in self.ports if p.node_port is not None)


@dataclass(frozen=True, slots=True)
class EndpointView:
    """One endpoint of an EndpointSlice (or an address of a v1 Endpoints subset)."""

    addresses: tuple[str, ...]
    ready: bool
    terminating: bool
    node_name: str | None


def _ports(rows: list[Any]) -> tuple[tuple[str, int], ...]:
    """(protocol, port) of an EndpointSlice's ports or an Endpoints subset's (TCP when unsaid)."""
    out = []
    for p in rows:
        p = as_dict(p)
        n = port_value(p.get("port"))
        if n is not None:
            out.append((str(p.get("protocol") or "TCP").upper(), n))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SliceView:
    """An EndpointSlice, or a v1 Endpoints object read the same way (``legacy``)."""

    obj: K8sObject
    service: str | None  # namespace/name of the Service it belongs to
    endpoints: tuple[EndpointView, ...]
    legacy: bool = False
    ports: tuple[tuple[str, int], ...] = ()  # (protocol, port) its endpoints take, protocol upper-case

    @classmethod
    def of_slice(cls, obj: K8sObject) -> SliceView:
        labels = as_dict(as_dict(obj.body.get("metadata")).get("labels"))
        svc = labels.get(SERVICE_NAME_LABEL)
        eps = []
        for ep in as_list(obj.body.get("endpoints")):
            if not isinstance(ep, dict):
                continue
            cond = as_dict(ep.get("conditions"))
            node = ep.get("nodeName")
            eps.append(
                EndpointView(
                    _strings(ep.get("addresses")),
                    cond.get("ready", True) is not False,
                    cond.get("terminating") is True,
                    node if isinstance(node, str) else None,
                )
            )
        key = f"{obj.namespace}/{svc}" if isinstance(svc, str) and svc else None
        return cls(obj, key, tuple(eps), ports=_ports(as_list(obj.body.get("ports"))))

    @classmethod
    def of_endpoints(cls, obj: K8sObject) -> SliceView:
        eps = []
        for ss in as_list(obj.body.get("subsets")):
            for field, ready in (("addresses", True), ("notReadyAddresses", False)):
                for a in as_list(as_dict(ss).get(field)):
                    a = as_dict(a)
                    ip, node = a.get("ip"), a.get("nodeName")
                    if isinstance(ip, str) and ip:
                        eps.append(EndpointView((ip,), ready, False, node if isinstance(node, str) else None))
        rows = [p for ss in as_list(obj.body.get("subsets")) for p in as_list(as_dict(ss).get("ports"))]
        return cls(obj, _ref(obj), tuple(eps), legacy=True, ports=_ports(rows))

    @property
    def annotations(self) -> dict[str, object]:
        return as_dict(as_dict(self.obj.body.get("metadata")).get("annotations"))


@dataclass(frozen=True, slots=True)
class NodeAddressView:
    type: str
    address: str


@dataclass(frozen=True, slots=True)
class ContainerStatusView:
    name: str
    restart_count: int
    last_terminated: dict[str, object]
    # its state now: "running", or why it waits or ended (CrashLoopBackOff, Error...); None: not shown
    state: str | None = None
    ready: bool | None = None


@dataclass(frozen=True, slots=True)
class PodView:
    obj: K8sObject
    node_name: str | None
    phase: str | None
    container_statuses: tuple[ContainerStatusView, ...]

    @classmethod
    def of(cls, obj: K8sObject) -> PodView:
        spec, status = as_dict(obj.body.get("spec")), as_dict(obj.body.get("status"))
        node, phase = spec.get("nodeName"), status.get("phase")
        statuses = []
        for cs in as_list(status.get("containerStatuses")):
            if not isinstance(cs, dict):
                continue
            count = cs.get("restartCount")
            state = as_dict(cs.get("state"))
            now = None
            if "running" in state:
                now = "running"
            elif (why := as_dict(state.get("waiting") or state.get("terminated")).get("reason")) is not None:
                now = str(why)
            elif state:
                now = "waiting" if "waiting" in state else "terminated" if "terminated" in state else None
            ready = cs.get("ready")
            statuses.append(
                ContainerStatusView(
                    str(cs.get("name") or ""),
                    count if isinstance(count, int) else 0,
                    as_dict(as_dict(cs.get("lastState")).get("terminated")),
                    now,
                    ready if isinstance(ready, bool) else None,
                )
            )
        return cls(
            obj,
            node if isinstance(node, str) and node else None,
            phase if isinstance(phase, str) else None,
            tuple(statuses),
        )


def address_range(text: str) -> Span | None:
    """A load-balancer pool entry as an integer range: ``192.168.1.3-192.168.1.5`` (either end
    may carry a prefix length, as MetalLB allows), ``192.168.10.0/24``, or one address."""
    first, sep, last = text.strip().partition("-")
    lo = address_span(first.strip())
    if not sep:
        return lo
    hi = address_span(last.strip())
    if lo is None or hi is None or lo[0] != hi[0] or hi[2] < lo[1]:
        return None
    return (lo[0], lo[1], hi[2])


@dataclass(frozen=True, slots=True)
class AddressPoolView:
    """A load balancer's pool of addresses it hands to Services (MetalLB's IPAddressPool, or an
    address pool in its legacy `config` ConfigMap)."""

    obj: K8sObject
    name: str
    entries: tuple[tuple[str, Span], ...]  # as written, and as a range

    def holding(self, version: int, n: int) -> str | None:
        """The entry that holds address ``n`` (of IP ``version``), or None."""
        return next((text for text, (v, lo, hi) in self.entries if v == version and lo <= n <= hi), None)

    @staticmethod
    def _entries(values: object) -> tuple[tuple[str, Span], ...]:
        return tuple((v, span) for v in _strings(values) if (span := address_range(v)) is not None)

    @classmethod
    def of_crd(cls, obj: K8sObject) -> list[AddressPoolView]:
        return [cls(obj, obj.name, cls._entries(as_dict(obj.body.get("spec")).get("addresses")))]

    @classmethod
    def of_configmap(cls, obj: K8sObject) -> list[AddressPoolView]:
        """The pools of MetalLB's legacy ConfigMap (before 0.13): YAML in ``data.config``."""
        config = as_dict(obj.body.get("data")).get("config")
        if not isinstance(config, str) or "address-pools" not in config:
            return []
        try:
            docs = load_yaml_all(config)
        except StructuredError:
            return []
        pools = [as_dict(p) for d in docs for p in as_list(as_dict(d).get("address-pools"))]
        return [cls(obj, str(p.get("name") or obj.name), cls._entries(p.get("addresses"))) for p in pools]


def node_ips(node: K8sObject) -> list[IPAddress]:
    """A Node's InternalIP and ExternalIP addresses, the InternalIPs first (the node's primary)."""
    rows = [a for a in as_list(as_dict(node.body.get("status")).get("addresses")) if isinstance(a, dict)]
    rows.sort(key=lambda a: {"InternalIP": 0, "ExternalIP": 1}.get(str(a.get("type")), 9))
    out: list[IPAddress] = []
    for a in rows:
        if a.get("type") in ("InternalIP", "ExternalIP") and is_ip(a.get("address")):
            ip = ipaddress.ip_address(str(a.get("address")))
            if ip not in out:
                out.append(ip)
    return out


def node_ready(node: K8sObject) -> str | None:
    """The status of a Node's Ready condition ("True", "False", "Unknown"), None when not shown."""
    for c in as_list(as_dict(node.body.get("status")).get("conditions")):
        c = as_dict(c)
        if c.get("type") == "Ready" and isinstance(c.get("status"), str):
            return str(c["status"])
    return None


def node_down(node: K8sObject) -> bool:
    """Is the Node shown not Ready (its Ready condition False or Unknown)?"""
    return node_ready(node) in ("False", "Unknown")


def pod_cidrs(node: K8sObject) -> list[IPNetwork]:
    """The Pod ranges a Node was given (spec.podCIDRs, else spec.podCIDR)."""
    spec = as_dict(node.body.get("spec"))
    return networks(c for c in as_list(spec.get("podCIDRs")) or [spec.get("podCIDR")] if isinstance(c, str))


def networks(texts: Iterable[str]) -> list[IPNetwork]:
    """The address ranges among ``texts`` (``10.244.0.0/16``), each once; the rest skipped."""
    out: list[IPNetwork] = []
    for t in texts:
        try:
            net = ipaddress.ip_network(t.strip()[:64], strict=False)
        except ValueError:
            continue
        if net not in out:
            out.append(net)
    return out


def _not_named(rows: list[K8sObject], better: list[K8sObject]) -> list[K8sObject]:
    """The rows no object of ``better`` names (a row without its namespace matches any)."""
    named = {(o.namespace, o.name) for o in better}
    names = {name for _, name in named}
    return [o for o in rows if (o.namespace, o.name) not in named and (o.namespace or o.name not in names)]


class ClusterFacts:
    """The typed views of one run's objects, each built on first use. ``carry``: (the previous
    run's, this run's) views by object: an object a caller kept from one run to the next (the
    node agent's watches) keeps its view."""

    def __init__(
        self,
        objects: Objects,
        carry: tuple[dict[int, Any], dict[int, Any]] | None = None,
        tables: Objects | None = None,
    ) -> None:
        self.objects = objects
        self._carry = carry
        self.tables = tables if tables is not None else Objects()  # partial objects of `kubectl get` tables

    def table_only(self, kind: str) -> list[K8sObject]:
        """The partial objects of ``kind`` (table rows, descriptions) no whole object names, nor,
        for a table row, a description; each once. The whole object says more than a
        description, a description more than a row (a row without its namespace matches any)."""
        if not self.tables.items:
            return []
        rows = _not_named(self.tables.of(kind), self.objects.of(kind))
        described: dict[tuple[str | None, str], K8sObject] = {}
        for o in rows:
            if o.fragment == DESCRIBED:
                described.setdefault((o.namespace, o.name), o)  # described twice: the first
        shown = list(described.values())
        kept = {id(o) for o in [*shown, *_not_named([o for o in rows if o.fragment != DESCRIBED], shown)]}
        return [o for o in rows if id(o) in kept]

    def _views(self, kind: str, make: Callable[[K8sObject], Any]) -> list[Any]:
        if self._carry is None:
            return [make(o) for o in self.objects.of(kind)]
        before, now = self._carry
        out = []
        for o in self.objects.of(kind):
            hit = before.get(id(o))
            if hit is None or hit[0] is not o:  # the entry keeps its object alive: same id, same object
                hit = (o, make(o))
            now[id(o)] = hit
            out.append(hit[1])
        return out

    @cached_property
    def services(self) -> list[ServiceView]:
        """Every Service given (:meth:`service_objects`), as views."""
        return self._views("Service", ServiceView.of) + [ServiceView.of(o) for o in self.table_only("Service")]

    def service_objects(self) -> list[K8sObject]:
        """Every Service given: whole objects, then the rows of `kubectl get svc` tables no object
        names (the Services verification takes: a row's endpoints are unknown)."""
        return self.objects.of("Service") + self.table_only("Service")

    def endpoint_objects(self) -> list[K8sObject]:
        """Every v1 Endpoints given: whole objects, then those a `kubectl describe service` showed
        whole, of the Services verification takes from it (:meth:`service_objects`)."""
        described = {(o.namespace, o.name) for o in self.table_only("Service")}
        whole = {(o.namespace, o.name) for o in self.objects.of("Endpoints")}
        shown = [o for o in self.tables.of("Endpoints") if (o.namespace, o.name) in described - whole]
        return self.objects.of("Endpoints") + shown

    @property
    def services_exported(self) -> bool:
        """Were Service objects given (an export that lists them), not only `kubectl get svc`
        rows (a listing that may leave out namespaces or rows)?"""
        return bool(self.objects.of("Service"))

    @cached_property
    def slices(self) -> list[SliceView]:
        return self._views("EndpointSlice", SliceView.of_slice)

    @cached_property
    def endpoints(self) -> list[SliceView]:
        """v1 Endpoints objects, read like slices."""
        return [SliceView.of_endpoints(o) for o in self.objects.of("Endpoints")]

    def endpoints_of(self) -> dict[str, list[EndpointView]]:
        """Each Service's endpoints: from its EndpointSlices, else from its v1 Endpoints."""
        out: dict[str, list[EndpointView]] = {}
        for s in self.slices:
            if s.service:
                out.setdefault(s.service, []).extend(s.endpoints)
        for e in self.endpoints:
            if e.service and e.service not in out:
                out[e.service] = list(e.endpoints)
        return out

    @cached_property
    def address_pools(self) -> list[AddressPoolView]:
        """Load-balancer address pools (MetalLB's IPAddressPool objects and legacy ConfigMap)."""
        out = [p for o in self.objects.of("IPAddressPool") for p in AddressPoolView.of_crd(o)]
        out += [p for o in self.objects.of("ConfigMap") for p in AddressPoolView.of_configmap(o)]
        return [p for p in out if p.entries]

    def nodes(self) -> list[K8sObject]:
        """Every Node given: whole objects, then the rows of `kubectl get nodes` tables."""
        return self.objects.of("Node") + self.table_only("Node")

    def node_addresses(self) -> Iterator[tuple[K8sObject, NodeAddressView]]:
        """Every Node's addresses (InternalIP, ExternalIP, Hostname...), a `kubectl get nodes -o
        wide` row's too."""
        for node in self.nodes():
            for a in as_list(as_dict(node.body.get("status")).get("addresses")):
                a = as_dict(a)
                kind, addr = a.get("type"), a.get("address")
                if isinstance(kind, str) and isinstance(addr, str) and addr:
                    yield node, NodeAddressView(kind, addr.strip())

    def pods(self, objs: list[K8sObject] | None = None) -> list[PodView]:
        """Pods (all, or the given ones) as views."""
        return [PodView.of(o) for o in (self.objects.of("Pod") if objs is None else objs)]
