"""`kubectl describe service` read into partial Services (parse/kubectl_describe.py), from kubectl's
own output: descriptions printed by kubectl 1.20 and 1.32 for a real apiserver
(tests/data/kubectl, made by tests/lab/test_kubectl_describe_lab.py's cluster) and descriptions
users posted (the corpus)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DATA

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.bundle.sniff import sniff
from kpdoctor.dataplane.expected import partial_listing, service_ports
from kpdoctor.facts import Facts
from kpdoctor.knowledge import catalogue
from kpdoctor.parse.kubectl_describe import DESCRIBED, described_objects, is_description

KUBECTL_120 = DATA / "kubectl" / "describe-svc-kubectl-1.20.txt"
KUBECTL_132 = DATA / "kubectl" / "describe-svc-kubectl-1.32.txt"
NODES_120 = DATA / "kubectl" / "describe-nodes-kubectl-1.20.txt"
REALWORLD = Path(__file__).parent / "realworld"


def _known(text: str) -> dict[tuple[str, str], list[str]]:
    read = described_objects(text, "d.txt")
    sps, _ = service_ports(read.of("Service"), [], read.of("Endpoints"))
    return {(sp.name, sp.port_name): sorted(e.addr for e in sp.endpoints) for sp in sps if sp.endpoints_known}


def test_each_description_is_a_partial_service_cited_at_its_name() -> None:
    text = KUBECTL_120.read_text()
    read = described_objects(text, "d.txt", first_line=10)
    services = {o.name: o for o in read.of("Service")}
    assert set(services) == {"db", "front", "kubernetes", "local", "many", "web"}
    assert partial_listing(read.of("Service"))  # a description names only the Services described
    for o in services.values():
        assert o.fragment == DESCRIBED and o.line is not None
        assert (
            text.splitlines()[o.line - 10]
            == f"Name:{' ' * (len(text.splitlines()[o.line - 10]) - 5 - len(o.name))}{o.name}"
        )
    local = services["local"].body["spec"]
    assert local["type"] == "NodePort" and local["externalTrafficPolicy"] == "Local"
    assert local["externalIPs"] == ["192.0.2.10", "192.0.2.11"]
    assert local["ports"] == [{"port": 80, "protocol": "TCP", "name": "web", "targetPort": "http", "nodePort": 31080}]
    assert services["db"].body["spec"]["clusterIP"] == "None"  # headless, as the API has it
    assert services["kubernetes"].body["metadata"]["labels"] == {"component": "apiserver", "provider": "kubernetes"}


def test_endpoints_are_known_only_when_every_one_is_shown_and_readiness_alone_decides() -> None:
    known = _known(KUBECTL_120.read_text())
    assert known[("web", "http")] == ["10.244.1.10:8080", "10.244.1.11:8080"]
    assert known[("web", "dns")] == ["10.244.1.10:5353", "10.244.1.11:5353"]
    assert known[("front", "")] == ["10.244.1.11:8443", "10.244.1.12:8443"]
    # "+ 2 more...", a Local traffic policy (which endpoint is on which node is not shown), headless
    assert not [k for k in known if k[0] in ("many", "local", "db")]
    # kubectl 1.32 against a 1.20 apiserver: no discovery/v1 slices, every Endpoints line <none>
    assert _known(KUBECTL_132.read_text()) == {}


def test_an_ipv6_endpoint_and_a_hidden_not_ready_one() -> None:
    """JoinHostPort brackets an IPv6 endpoint; `<none>` hides serving endpoints kube-proxy may fall
    back to: not "no endpoints"."""
    text = KUBECTL_120.read_text().replace("10.244.1.11:8443,10.244.1.12:8443", "[fd00::b]:8443,[fd00::c]:8443")
    text = text.replace("10.96.163.232", "fd00:96::e8")  # its ClusterIP (IP:, IPs:) of the same family
    assert _known(text)[("front", "")] == ["[fd00::b]:8443", "[fd00::c]:8443"]
    text = KUBECTL_120.read_text().replace("10.244.1.11:8443,10.244.1.12:8443", "<none>")
    assert ("front", "") not in _known(text)


def test_a_description_alone_is_typed_as_one_and_a_pods_is_a_pod() -> None:
    for path in (KUBECTL_120, KUBECTL_132):
        lines = path.read_text().splitlines()
        assert is_description(lines)
        assert sniff("\n".join(lines), catalogue()).kind == Kind.KUBECTL_DESCRIBE
    pod = """Name:         web-5d7c9
Namespace:    default
Priority:     0
Node:         node-1/192.168.56.11
Labels:       app=web
Annotations:  <none>
Status:       Running
IP:           10.244.1.10
IPs:
  IP:           10.244.1.10
Containers:
  web:
    Image:          nginx:1.25
    Port:           80/TCP
    Host Port:      0/TCP
Volumes:
  kube-api-access-x:
    Type:                    Projected (a volume that contains injected data from multiple sources)
"""
    # a Pod's description is a Pod (its ports are no Service's), read as a partial Pod
    assert is_description(pod.splitlines())
    (obj,) = described_objects(pod, "pod.txt").items
    assert (obj.kind, obj.namespace, obj.name, obj.line) == ("Pod", "default", "web-5d7c9", 1)
    assert obj.body["spec"] == {"containers": [{"name": "web", "image": "nginx:1.25"}], "nodeName": "node-1"}


@pytest.mark.parametrize(
    ("case", "name", "endpoints"),
    [
        # kubectl of 2016-2017 (OpenShift's `oc`): no IP Families, tabs and one space as padding
        ("fresh/openshift-origin-6214", "frontend", ["10.1.0.10:8080", "10.1.0.13:8080"]),
        ("fresh/redis-operator-2", "redis-example", None),
    ],
)
def test_posted_descriptions_are_read(case: str, name: str, endpoints: list[str] | None) -> None:
    facts = Facts(load([REALWORLD / case]))
    assert Kind.KUBECTL_DESCRIBE in {a.kind for a in facts.evidence.artifacts}
    (svc,) = [s for s in facts.verified_services() if s.name == name]
    assert svc.fragment == DESCRIBED
    shown = {o.name: o for o in facts.cluster.endpoint_objects()}
    if endpoints is None:
        assert name not in shown
    else:
        assert sorted(f"{a['ip']}:8080" for a in shown[name].body["subsets"][0]["addresses"]) == endpoints


def test_a_node_description_gives_its_addresses_conditions_and_system_info() -> None:
    nodes = {o.name: o for o in described_objects(NODES_120.read_text(), "nodes.txt").of("Node")}
    assert set(nodes) == {"cp-1", "w-1"}
    w1 = nodes["w-1"].body
    assert w1["status"]["addresses"] == [
        {"type": "InternalIP", "address": "192.168.56.11"},
        {"type": "Hostname", "address": "w-1"},
    ]
    assert w1["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    assert w1["status"]["nodeInfo"] == {
        "kernelVersion": "5.15.0-76-generic",
        "osImage": "Ubuntu 22.04.2 LTS",
        "operatingSystem": "linux",
        "architecture": "amd64",
        "containerRuntimeVersion": "containerd://1.6.21",
        "kubeletVersion": "v1.20.2",
        "kubeProxyVersion": "v1.20.2",
    }
    assert w1["metadata"]["labels"] == {"kubernetes.io/hostname": "w-1", "kubernetes.io/os": "linux"}
    assert w1["spec"] == {"unschedulable": False}
    facts = Facts(load([NODES_120]))
    kernel = facts.node_kernel
    assert kernel is not None and kernel.value.base == (5, 15, 0)
