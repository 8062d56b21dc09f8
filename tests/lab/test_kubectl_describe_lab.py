"""`kubectl describe service` and `kubectl describe node`, as kubectl prints them for a real
kube-apiserver v1.20: kpdoctor reads each Service as its object says (type, addresses, ports,
policies), its endpoints only where the description shows every one and nothing but readiness
decides which a node uses, and each Node's addresses, conditions and System Info.

The Services and their v1 Endpoints (what kubectl 1.20's describer reads; the lab has no
endpoints controller) are made in the lab's apiserver; the descriptions are printed by Debian's
kubectl 1.20 and, when there is one on the PATH, by that kubectl too (1.31 on reads EndpointSlices,
which a 1.20 apiserver serves only as v1beta1: it prints the endpoints as `<none>`, read as not
shown).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from kpdoctor.bundle.loader import load
from kpdoctor.dataplane.expected import service_ports
from kpdoctor.facts import Facts
from kpdoctor.parse.kubectl_describe import DESCRIBED, described_objects

from .control_plane import ControlPlane
from .kpdoctor_run import diagnose_json
from .test_kubectl_tables_lab import _kubectls, _ok, lab_nodes

PODS = ["10.244.1.10", "10.244.1.11", "10.244.1.12", "10.244.1.13", "10.244.1.14"]

SERVICES: list[dict[str, Any]] = [
    {  # two named ports, both with every endpoint shown
        "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}},
        "spec": {
            "selector": {"app": "web"},
            "ports": [
                {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"},
            ],
        },
    },
    {  # more endpoints than a description lists
        "metadata": {"name": "many"},
        "spec": {"selector": {"app": "many"}, "ports": [{"port": 8443, "targetPort": 443, "protocol": "TCP"}]},
    },
    {  # a node decides which endpoints it uses: not judged from a description
        "metadata": {"name": "local", "annotations": {"example.com/owner": "team-a"}},
        "spec": {
            "type": "NodePort",
            "selector": {"app": "local"},
            "externalTrafficPolicy": "Local",
            "externalIPs": ["192.0.2.10", "192.0.2.11"],
            "ports": [{"name": "web", "port": 80, "targetPort": "http", "nodePort": 31080, "protocol": "TCP"}],
        },
    },
    {  # a load balancer with its address; affinity, whose timeout a description does not print
        "metadata": {"name": "front"},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": "front"},
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
            "loadBalancerSourceRanges": ["198.51.100.0/24"],
            "ports": [{"port": 443, "targetPort": 8443, "protocol": "TCP"}],
        },
    },
    {  # headless: nothing kube-proxy programs
        "metadata": {"name": "db"},
        "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432, "protocol": "TCP"}]},
    },
]
ENDPOINTS = {"web": PODS[:2], "many": PODS, "local": PODS[:1], "front": PODS[1:3], "db": PODS[:1]}


def _cluster(cp: ControlPlane) -> None:
    for svc in SERVICES:
        _ok(cp.request("POST", "/api/v1/namespaces/default/services", {"apiVersion": "v1", "kind": "Service", **svc}))
        name = svc["metadata"]["name"]
        ports = [
            {
                **({"name": p["name"]} if "name" in p else {}),
                "port": p["targetPort"] if isinstance(p.get("targetPort"), int) else 8080,
                "protocol": p["protocol"],
            }
            for p in svc["spec"]["ports"]
        ]
        subsets = [{"addresses": [{"ip": ip} for ip in ENDPOINTS[name]], "ports": ports}]
        body = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name}, "subsets": subsets}
        _ok(cp.request("POST", "/api/v1/namespaces/default/endpoints", body))
    got = _ok(cp.request("GET", "/api/v1/namespaces/default/services/front"))
    got["status"] = {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}
    _ok(cp.request("PUT", "/api/v1/namespaces/default/services/front/status", got))


def _keep(name: str, text: str) -> None:
    """With KPDOCTOR_LAB_DUMP=DIR, the output is also written there (how tests/data/kubectl's
    descriptions were made)."""
    folder = os.environ.get("KPDOCTOR_LAB_DUMP")
    if folder:
        Path(folder, name).write_text(text)


def _described(kubectl: str, cp: ControlPlane, kind: str) -> tuple[dict[str, Any], str]:
    """The objects of ``kind`` by name (`kubectl get -o json`), and `kubectl describe` of them."""
    whole = {o["metadata"]["name"]: o for o in json.loads(_kubectl(kubectl, cp, "get", kind, "-o", "json"))["items"]}
    text = _kubectl(kubectl, cp, "describe", kind)
    _keep(f"describe-{kind}-{_version(kubectl, cp)}.txt", text)
    return whole, text


def _kubectl(kubectl: str, cp: ControlPlane, *args: str) -> str:
    done = subprocess.run(
        [kubectl, "--kubeconfig", str(cp.kubeconfig), *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_descriptions_are_read_like_the_objects(control_plane: ControlPlane, tmp_path: Path) -> None:
    cp = control_plane
    _cluster(cp)
    for kubectl in _kubectls(tmp_path):
        whole, text = _described(kubectl, cp, "svc")
        read = described_objects(text, "describe.txt")
        services = {o.name: o for o in read.of("Service")}
        assert set(services) == set(whole)  # `kubernetes` too
        for name, svc in services.items():
            assert svc.fragment == DESCRIBED and svc.namespace == "default"
            assert text.splitlines()[svc.line - 1].split() == ["Name:", name]  # cited at its Name line
            want, got = whole[name]["spec"], svc.body["spec"]
            assert got.get("type") == want["type"]
            assert got.get("clusterIP") == want["clusterIP"]  # "None" when headless, as the API has it
            assert got.get("externalIPs", []) == want.get("externalIPs", [])
            assert got.get("sessionAffinity") == want["sessionAffinity"]
            assert got.get("externalTrafficPolicy") == want.get("externalTrafficPolicy")
            assert got.get("loadBalancerSourceRanges", []) == want.get("loadBalancerSourceRanges", [])
            ports = [
                {k: p[k] for k in ("name", "port", "protocol", "targetPort", "nodePort") if k in p}
                for p in want["ports"]
            ]
            assert got["ports"] == ports
        assert services["front"].body["status"]["loadBalancer"]["ingress"] == [{"ip": "203.0.113.7"}]
        assert services["web"].body["metadata"]["labels"] == {"app": "web", "tier": "front"}
        assert services["local"].body["metadata"]["annotations"] == {"example.com/owner": "team-a"}

        # endpoints: only where every one is shown and readiness alone decides
        endpoints = {o.name: o for o in read.of("Endpoints")}
        sps, _ = service_ports(read.of("Service"), [], read.of("Endpoints"))
        known = {(sp.name, sp.port_name): sorted(e.addr for e in sp.endpoints) for sp in sps if sp.endpoints_known}
        if "EndpointSlice" in kubectl_reads(kubectl, cp):
            assert not endpoints and not known  # the 1.20 apiserver has no discovery/v1 slices
            continue
        assert set(endpoints) == {"web", "front", "kubernetes"}, set(endpoints)
        assert known[("web", "http")] == [f"{ip}:8080" for ip in PODS[:2]]
        assert known[("web", "dns")] == [f"{ip}:5353" for ip in PODS[:2]]
        assert known[("front", "")] == [f"{ip}:8443" for ip in PODS[1:3]]
        assert not [k for k in known if k[0] in ("many", "local")]
        affinity = next(sp for sp in sps if sp.name == "front")
        assert affinity.affinity and not affinity.affinity_timeout_shown


def _version(kubectl: str, cp: ControlPlane) -> str:
    """``kubectl-1.20``: the client's release."""
    version = json.loads(_kubectl(kubectl, cp, "version", "--client", "-o", "json"))["clientVersion"]
    return f"kubectl-{version['major']}.{''.join(ch for ch in version['minor'] if ch.isdigit())}"


def kubectl_reads(kubectl: str, cp: ControlPlane) -> str:
    """Which object a kubectl's describer reads endpoints from (1.31 on: EndpointSlices)."""
    minor = int(_version(kubectl, cp).rsplit(".", 1)[1])
    return "EndpointSlice" if minor >= 31 else "Endpoints"


def test_node_descriptions_are_read_like_the_objects(control_plane: ControlPlane, tmp_path: Path) -> None:
    """Two Nodes (one NotReady) and a Service whose externalIP is that Node's address: the
    descriptions give each Node's addresses, conditions and System Info as its object does, and
    the same KP209 finding as the objects' JSON."""
    cp = control_plane
    lab_nodes(cp, "edge", labels=True)
    for kubectl in _kubectls(tmp_path):
        nodes, text = _described(kubectl, cp, "nodes")
        read = {o.name: o for o in described_objects(text, "nodes.txt").of("Node")}
        assert set(read) == set(nodes)
        for name, node in read.items():
            want, got = nodes[name]["status"], node.body["status"]
            assert got["addresses"] == want["addresses"]
            assert [(c["type"], c["status"]) for c in got["conditions"]] == [
                (c["type"], c["status"]) for c in want["conditions"]
            ]
            info = {k: v for k, v in want["nodeInfo"].items() if v}
            shown = {k: v for k, v in info.items() if k in got["nodeInfo"]}
            assert shown == got["nodeInfo"] and {"kernelVersion", "osImage", "kubeletVersion"} <= set(shown)
            assert node.body["metadata"].get("labels", {}) == nodes[name]["metadata"].get("labels", {})

        described = tmp_path / "described.txt"
        services = _kubectl(kubectl, cp, "describe", "svc")
        described.write_text(f"$ kubectl describe svc\n{services}\n$ kubectl describe nodes\n{text}")
        facts = Facts(load([described]))
        assert {a.kind.value for a in facts.evidence.artifacts} == {"kubectl describe services/nodes"}
        kernel = facts.node_kernel
        assert kernel is not None and kernel.value.base == (5, 15, 0)
        found = [f for f in diagnose_json(described)["findings"] if f["code"] == "KP209"]
        assert len(found) == 1 and "192.168.56.11" in found[0]["summary"] and "w-1" in found[0]["summary"], found
        assert "Node w-1 is not Ready" in found[0]["summary"]
