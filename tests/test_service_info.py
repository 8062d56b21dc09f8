"""One reading of a Service's ports and addresses (dataplane/service_info.py), as kube-proxy's
``newBaseServiceInfo`` takes them: each field read once, its quirks kept, nothing raising, and
every reader (expected ports, owned destinations, ``--service``, the checks' view) agreeing."""

from __future__ import annotations

from typing import Any

from kpdoctor import memo
from kpdoctor.dataplane.expected import owned_destinations, service_ports
from kpdoctor.dataplane.selection import resolve_service
from kpdoctor.dataplane.service_info import DEFAULT_AFFINITY_TIMEOUT, read_service
from kpdoctor.facts.cluster import ServiceView
from kpdoctor.parse.k8s import K8sObject, read_object


def service(spec: dict[str, Any], status: dict[str, Any] | None = None, **meta: Any) -> K8sObject:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop", **meta},
        "spec": spec,
    }
    if status is not None:
        body["status"] = status
    obj, _ = read_object(body, "svc.json", 3)
    return obj


LB = {
    "type": "LoadBalancer",
    "clusterIP": "10.96.0.10",
    "clusterIPs": ["10.96.0.10", "fd00::10"],
    "externalIPs": ["192.0.2.1", " 192.0.2.2 ", 7],
    "loadBalancerSourceRanges": ["198.51.100.0/24", "nonsense", "2001:db8::/32"],
    "externalTrafficPolicy": "Local",
    "sessionAffinity": "ClientIP",
    "ports": [{"name": "http", "port": 80, "nodePort": 30080}, {"name": "dns", "port": 53, "protocol": "udp"}, "x"],
}
LB_STATUS = {
    "loadBalancer": {
        "ingress": [{"ip": "203.0.113.5"}, {"ip": "203.0.113.6", "ipMode": "Proxy"}, {"hostname": "lb.example"}]
    }
}


def test_a_load_balancer_is_read_as_kube_proxy_reads_it() -> None:
    info = read_service(service(LB, LB_STATUS))
    assert info.ref == "shop/web" and info.type == "LoadBalancer" and not info.headless
    assert info.cluster_ips == ("10.96.0.10", "fd00::10") and info.named_cluster_ips == ("10.96.0.10", "fd00::10")
    assert info.lb_ips == ("203.0.113.5",)  # ipMode Proxy: the load balancer's, not kube-proxy's
    assert info.ingress_ips == ("203.0.113.5", "203.0.113.6")
    assert [str(r) for r in info.source_ranges] == ["198.51.100.0/24", "2001:db8::/32"]
    assert info.etp_local and info.affinity and info.affinity_timeout == DEFAULT_AFFINITY_TIMEOUT
    assert info.port_entries == 3 and [(p.name, p.port, p.protocol) for p in info.ports] == [
        ("http", 80, "TCP"),  # absent: TCP
        ("dns", 53, "UDP"),  # upper-cased, but refused as written
    ]
    assert info.ports[1].problems == ('protocol "udp" is not one kube-proxy programs (TCP, UDP, SCTP)',)
    assert not info.ports[1].readable and info.ports[0].readable


def test_every_reader_takes_the_same_reading() -> None:
    obj = service(LB, LB_STATUS)
    memo.clear()
    sps, count = service_ports([obj], [], [])
    assert count == 1 and [(s.port_name, s.family, s.lb_ips, s.node_port) for s in sps] == [
        ("http", 4, ["203.0.113.5"], 30080),
        ("http", 6, [], 30080),
        ("dns", 4, ["203.0.113.5"], None),
        ("dns", 6, [], None),
    ]
    assert sps[0].external_ips == ["192.0.2.1"] and sps[2].problems[0].startswith("Service shop/web (svc.json line 3)")
    owned = owned_destinations([obj], [])
    assert owned.unreadable == {"shop/web"}  # a port it cannot read: every rule naming it is its own
    view = ServiceView.of(obj)
    assert view.external_ips == ("192.0.2.1", "192.0.2.2") and view.lb_ingress_ips == ("203.0.113.5", "203.0.113.6")
    assert [p.protocol for p in view.ports] == ["TCP", "udp"]  # the view keeps the protocol as written
    assert resolve_service([obj], "shop/web:53/udp")[0] == "shop/web:dns"
    assert read_service(obj) is read_service(obj)  # read once per run
    memo.clear()


def test_headless_external_name_and_other_proxies() -> None:
    assert read_service(service({"clusterIP": "None", "ports": [{"port": 80}]})).headless
    assert service_ports([service({"type": "ExternalName", "externalName": "example.com"})], [], []) == ([], 0)
    other = service(
        {"clusterIP": "10.96.0.11", "ports": [{"port": 80}]}, labels={"service.kubernetes.io/service-proxy-name": "x"}
    )
    assert read_service(other).other_proxy and service_ports([other], [], []) == ([], 1)
    unverified: list[tuple[str, str]] = []
    service_ports([service({"clusterIP": "10.96.0.12"})], [], [], unverified=unverified)
    assert unverified == [("shop/web", "no ports (svc.json line 3)")]


def test_node_ports_are_read_whatever_the_type_but_open_only_for_node_port_types() -> None:
    spec = {"clusterIP": "10.96.0.13", "ports": [{"port": 80, "nodePort": 30013}, {"port": 81, "nodePort": -1}]}
    info = read_service(service(spec))
    assert not info.node_ports and [p.node_port for p in info.ports] == [30013, None]
    assert info.ports[1].node_port_problem == "nodePort -1 is out of range (1-65535)"
    sps, _ = service_ports([service(spec)], [], [])
    assert [(s.node_port, s.node_port_problem) for s in sps] == [(None, None), (None, None)]
    assert ("tcp", 30013) in owned_destinations([service(spec)], []).ports  # its owner, whatever the type


def test_values_too_long_to_print_never_raise() -> None:
    huge = int("f" * 4000, 16)  # YAML's 0xfff...: past Python's digits limit for str()
    obj = service(
        {"type": huge, "clusterIP": "10.96.0.14", "ports": [{"port": 80, "name": huge, "protocol": huge}]},
        annotations={"service.kubernetes.io/topology-mode": huge},
    )
    info = read_service(obj)
    assert info.type == "a number too large to show" and info.topology is None
    assert info.ports[0].name == "a number too large to show" and not info.ports[0].readable
    service_ports([obj], [], [])
    ServiceView.of(obj)
