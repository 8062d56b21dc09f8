"""A Service's ports and addresses, read once: what kube-proxy's ``newBaseServiceInfo``
(pkg/proxy/serviceport.go) takes from a Service object, here from untrusted JSON.

Every field of a Service's spec and status that the data plane and the checks use is read here,
and the rest of kpdoctor reads :class:`ServiceInfo`: the expected Service ports
(dataplane/expected.py), the destinations Services own (stale rules), ``--service`` selection,
the checks' ``ServiceView``. A field of the wrong shape reads as absent and nothing raises; a value
the API server would have refused is kept as given (``raw_*``) with why, in the words the user
reads (:func:`~kpdoctor.parse.k8s.port_problem`). A Service is read once per run (:func:`read_service`).

Where readers take a field differently on purpose, each reading is here, named:
``cluster_ips`` is kube-proxy's (``clusterIPs``, else ``clusterIP``; "None" first is headless),
``named_cluster_ips`` every address either field names; ``lb_ips`` are the load-balancer IPs
kube-proxy programs (type LoadBalancer, ``ipMode`` not Proxy), ``ingress_ips`` every address the
status gives; a port's ``node_port`` is read whatever the type (:attr:`ServiceInfo.node_ports`
says whether kube-proxy opens it).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from kpdoctor import memo
from kpdoctor.dataplane.addresses import IPNetwork
from kpdoctor.parse.k8s import (
    PROTOCOLS,
    K8sObject,
    as_dict,
    as_list,
    cluster_ips,
    is_ip,
    port_problem,
    port_value,
    protocol_problem,
    shown,
)

PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
DEFAULT_AFFINITY_TIMEOUT = 10800  # seconds; the API server's default for ClientIP affinity
TOPOLOGY_MODE = "service.kubernetes.io/topology-mode"
TOPOLOGY_HINTS = "service.kubernetes.io/topology-aware-hints"  # before 1.27
TRAFFIC_DISTRIBUTIONS = ("PreferClose", "PreferSameZone", "PreferSameNode")
NODE_PORT_TYPES = ("NodePort", "LoadBalancer")  # the types whose ports kube-proxy opens on the node


class PortInfo:
    """One entry of ``spec.ports`` (a plain slotted class: a large cluster has tens of thousands)."""

    __slots__ = (
        "name",
        "node_port",
        "node_port_problem",
        "port",
        "problems",
        "protocol",
        "raw_node_port",
        "raw_port",
        "raw_protocol",
        "written_protocol",
    )

    def __init__(self, entry: dict[str, Any]) -> None:
        name, raw_protocol = entry.get("name"), entry.get("protocol")
        raw_port, raw_node_port = entry.get("port"), entry.get("nodePort")
        self.name = name if isinstance(name, str) else _text(name or "")
        self.raw_protocol: object = raw_protocol
        proto = raw_protocol or "TCP"  # absent: TCP, as the API server defaults it
        self.written_protocol = proto if isinstance(proto, str) else _text(proto)  # as written
        self.protocol = self.written_protocol.upper()
        self.raw_port: object = raw_port
        self.port = number = port_value(raw_port)  # None: not a port number (-1, "http", null)
        self.raw_node_port: object = raw_node_port
        self.node_port = node_port = port_value(raw_node_port)  # whatever the Service's type
        # why the API server would have refused the port (its number, then its protocol)
        self.problems: tuple[str, ...] = ()
        if number is None or not (raw_protocol is None or raw_protocol in PROTOCOLS):
            self.problems = tuple(p for p in (port_problem(raw_port), protocol_problem(raw_protocol)) if p)
        # why its nodePort is no port (0 and absent: none allocated, nothing wrong)
        self.node_port_problem = None
        if node_port is None and raw_node_port not in (None, 0):
            self.node_port_problem = port_problem(raw_node_port, "nodePort")

    @property
    def readable(self) -> bool:
        """A port number and a protocol kube-proxy programs (no value the API server refuses)."""
        return self.port is not None and protocol_problem(self.raw_protocol) is None

    def __repr__(self) -> str:
        return f"PortInfo({self.name!r}, {self.raw_port!r}/{self.raw_protocol!r}, nodePort={self.raw_node_port!r})"


class ServiceInfo:
    """What kube-proxy reads of one Service object, read once (see the module's docstring)."""

    __slots__ = (
        "affinity",
        "affinity_timeout",
        "cluster_ips",
        "etp_local",
        "external_ips",
        "has_spec",
        "health_check_node_port",
        "ingress_ips",
        "itp_local",
        "lb_ips",
        "named_cluster_ips",
        "namespace",
        "obj",
        "other_proxy",
        "port_entries",
        "ports",
        "ref",
        "source_ranges",
        "topology",
        "type",
    )

    def __init__(self, obj: K8sObject) -> None:
        # (read on every run for every Service: each field once, the common shapes first)
        body = obj.body
        spec = as_dict(body.get("spec"))
        meta = as_dict(body.get("metadata"))
        self.obj = obj
        self.namespace = namespace = obj.namespace or "default"
        self.ref = f"{namespace}/{obj.name}"
        self.has_spec = bool(spec)  # absent, not a mapping, or empty
        kind = spec.get("type") or "ClusterIP"
        self.type = kind = kind if isinstance(kind, str) else _text(kind)
        # kube-proxy's: clusterIPs (else clusterIP) as given, empty values left out, "None" kept
        self.cluster_ips: tuple[object, ...] = tuple(cluster_ips(spec))
        # every address clusterIP and clusterIPs name, each once ("None" and empty left out)
        first, listed = spec.get("clusterIP"), spec.get("clusterIPs")
        named = [first] if isinstance(first, str) and first and first != "None" else []
        if isinstance(listed, list):
            named += [ip for ip in listed if isinstance(ip, str) and ip and ip != "None"]
            if len(named) > 1:
                named = list(dict.fromkeys(named))
        self.named_cluster_ips = tuple(named)
        external = spec.get("externalIPs")
        self.external_ips: tuple[Any, ...] = tuple(external) if isinstance(external, list) else ()  # as given
        ingress, lb = [], []
        status = body.get("status")
        if status:
            load_balancer = kind == "LoadBalancer"
            for i in as_list(as_dict(as_dict(status).get("loadBalancer")).get("ingress")):
                if isinstance(i, dict):
                    ip = i.get("ip")
                    if isinstance(ip, str) and ip:
                        ingress.append(ip)
                        # ipMode Proxy: the load balancer proxies, and kube-proxy leaves the IP alone
                        if load_balancer and is_ip(ip) and i.get("ipMode") != "Proxy":
                            lb.append(ip)
        self.ingress_ips = tuple(ingress)  # status.loadBalancer.ingress[].ip, whatever the type and mode
        self.lb_ips = tuple(lb)  # the load-balancer IPs kube-proxy programs
        ranges: list[IPNetwork] = []
        for r in as_list(spec.get("loadBalancerSourceRanges")):
            try:
                ranges.append(ipaddress.ip_network(str(r).strip(), strict=False))
            except ValueError:
                continue
        self.source_ranges = tuple(ranges)
        entries = as_list(spec.get("ports"))
        self.port_entries = len(entries)  # entries that are no port (a string, null) count too
        self.ports = tuple([PortInfo(p) for p in entries if isinstance(p, dict)])
        self.etp_local = kind in NODE_PORT_TYPES and spec.get("externalTrafficPolicy") == "Local"
        self.itp_local = spec.get("internalTrafficPolicy") == "Local"
        self.affinity = spec.get("sessionAffinity") == "ClientIP"
        config = spec.get("sessionAffinityConfig")
        self.affinity_timeout = _affinity_timeout(config) if isinstance(config, dict) else DEFAULT_AFFINITY_TIMEOUT
        annotations = meta.get("annotations")
        topology = None
        if isinstance(annotations, dict) and (
            _text(annotations.get(TOPOLOGY_MODE, "")).lower() == "auto"
            or _text(annotations.get(TOPOLOGY_HINTS, "")).lower() in ("auto", "true")
        ):
            topology = "hints"
        if spec.get("trafficDistribution") in TRAFFIC_DISTRIBUTIONS:
            topology = str(spec["trafficDistribution"])
        self.topology = topology  # "hints" | a trafficDistribution | None
        health = spec.get("healthCheckNodePort")
        self.health_check_node_port = None if health is None else port_value(health)
        # another proxy owns the Service: kube-proxy writes nothing for it
        labels = meta.get("labels")
        self.other_proxy = isinstance(labels, dict) and PROXY_NAME_LABEL in labels

    @property
    def node_ports(self) -> bool:
        """Does kube-proxy open this Service's nodePorts (type NodePort or LoadBalancer)?"""
        return self.type in NODE_PORT_TYPES

    @property
    def headless(self) -> bool:
        """clusterIP "None": no ClusterIP, nothing kube-proxy programs."""
        return bool(self.cluster_ips) and self.cluster_ips[0] == "None"

    def __repr__(self) -> str:
        return f"ServiceInfo({self.ref}, {self.type}, {self.cluster_ips!r}, {list(self.ports)!r})"


_READ: dict[int, ServiceInfo] = memo.table()


def read_service(obj: K8sObject) -> ServiceInfo:
    """One Service object, read as kube-proxy reads it (``newBaseServiceInfo``); once per run:
    the expected Service ports, the destinations Services own and the checks' views all take the
    same reading (objects are never changed once parsed; the entry keeps its object alive, so
    its id stays its own)."""
    info = _READ.get(id(obj))
    if info is None or info.obj is not obj:
        if len(_READ) > 100_000:
            _READ.clear()
        info = _READ[id(obj)] = ServiceInfo(obj)
    return info


def _text(v: object) -> str:
    """``str(v)``, but never raising: an integer too long to print (YAML's ``0xfff...``) reads as
    :func:`shown` names it."""
    try:
        return str(v)
    except ValueError:
        return shown(v)


def _affinity_timeout(config: dict[str, Any]) -> int:
    """How long ClientIP affinity keeps a client on its backend (the API's default when unset)."""
    client = config.get("clientIP")
    value = client.get("timeoutSeconds") if isinstance(client, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else DEFAULT_AFFINITY_TIMEOUT
