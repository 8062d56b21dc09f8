"""`kubectl get svc`, `kubectl get nodes` and `kubectl get endpoints` tables, as kubectl prints them
for a real kube-apiserver v1.20: kpdoctor reads them into the Services' and Nodes' addresses and
versions, and names a Service whose externalIP is a node's address from the tables as it does
from the objects; an Endpoints row into the ready ip:port pairs it shows, whole or not.

The objects are made in the lab's apiserver (Node status written through its status
subresource, as a kubelet does); the tables are printed by Debian's kubectl 1.20 (the test set-up
downloads it) and, when there is one on the PATH, by that kubectl too (a newer client prints the
same server-side table).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from test_deploy import find_kubectl_120

from kpdoctor.bundle.loader import load
from kpdoctor.facts import Facts
from kpdoctor.parse.kubectl_table import shown_endpoints

from .control_plane import ControlPlane
from .kpdoctor_run import diagnose_json

NODES = (  # name, InternalIP, Ready
    ("cp-1", "192.168.56.10", "True"),
    ("w-1", "192.168.56.11", "False"),
)
NODE_INFO = {
    "machineID": "",
    "systemUUID": "",
    "bootID": "",
    "kernelVersion": "5.15.0-76-generic",
    "osImage": "Ubuntu 22.04.2 LTS",
    "containerRuntimeVersion": "containerd://1.6.21",
    "kubeletVersion": "v1.20.2",
    "kubeProxyVersion": "v1.20.2",
    "operatingSystem": "linux",
    "architecture": "amd64",
}


def _ok(got: tuple[int, Any]) -> Any:
    status, body = got
    assert status in (200, 201), body
    return body


def lab_nodes(cp: ControlPlane, service: str, labels: bool = False) -> None:
    """The Nodes of NODES (w-1 NotReady; status written through its subresource, as a kubelet
    does), with kubelet's hostname and OS labels when ``labels``, and a NodePort Service named
    ``service`` whose externalIP is w-1's address."""
    for name, ip, ready in NODES:
        meta: dict[str, Any] = {"name": name}
        if labels:
            meta["labels"] = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        _ok(cp.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": meta}))
        node = _ok(cp.request("GET", f"/api/v1/nodes/{name}"))
        node["status"] = {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "nodeInfo": NODE_INFO,
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletReady" if ready == "True" else "NodeStatusUnknown",
                    "lastHeartbeatTime": "2026-11-29T10:00:00Z",
                    "lastTransitionTime": "2026-11-29T10:00:00Z",
                }
            ],
        }
        _ok(cp.request("PUT", f"/api/v1/nodes/{name}/status", node))
    web = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service},
        "spec": {
            "type": "NodePort",
            "selector": {"app": service},
            "externalIPs": [NODES[1][1]],
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    }
    _ok(cp.request("POST", "/api/v1/namespaces/default/services", web))


def _cluster(cp: ControlPlane) -> None:
    """Two Nodes (w-1 NotReady), a NodePort Service whose externalIP is w-1's address, and a
    LoadBalancer Service with an ingress address no node has."""
    lab_nodes(cp, "web")
    lb = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "front"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "front"}, "ports": [{"port": 443, "protocol": "TCP"}]},
    }
    _ok(cp.request("POST", "/api/v1/namespaces/default/services", lb))
    got = _ok(cp.request("GET", "/api/v1/namespaces/default/services/front"))
    got["status"] = {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}
    _ok(cp.request("PUT", "/api/v1/namespaces/default/services/front/status", got))


def _kubectls(tmp: Path) -> list[str]:
    """Debian's kubectl 1.20 (required: the test set-up provides it), and the PATH's if another."""
    path, why = find_kubectl_120(tmp)
    assert path is not None, why
    out = [path]
    other = shutil.which("kubectl")
    if other and os.path.realpath(other) != os.path.realpath(path):
        out.append(other)
    return out


def _print(kubectl: str, cp: ControlPlane, *args: str) -> str:
    done = subprocess.run(
        [kubectl, "--kubeconfig", str(cp.kubeconfig), "get", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _kp209(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["code"] == "KP209"]


def test_tables_are_read_like_the_objects(control_plane: ControlPlane, tmp_path: Path) -> None:
    cp = control_plane
    _cluster(cp)
    objects = tmp_path / "objects.json"
    objects.write_text(_print(_kubectls(tmp_path)[0], cp, "svc,nodes", "-o", "json"))
    (whole,) = _kp209(diagnose_json(objects))
    assert "192.168.56.11" in whole["summary"] and "w-1" in whole["summary"]

    for kubectl in _kubectls(tmp_path):
        wide = tmp_path / "wide.txt"
        wide.write_text(f"$ kubectl get svc,nodes -o wide\n{_print(kubectl, cp, 'svc,nodes', '-o', 'wide')}")
        facts = Facts(load([wide]))
        assert {a.kind.value for a in facts.evidence.artifacts} == {"kubectl get services/nodes table"}
        services = {s.obj.name: s for s in facts.cluster.services}
        assert services["web"].external_ips == ("192.168.56.11",) and services["web"].node_ports
        assert services["front"].lb_ingress_ips == ("203.0.113.7",)
        first = ipaddress.ip_network(cp.service_cidr).network_address + 1
        assert services["kubernetes"].cluster_ips == (str(first),)
        addresses = {(n.name, a.type, a.address) for n, a in facts.cluster.node_addresses()}
        assert addresses == {(name, "InternalIP", ip) for name, ip, _ in NODES}
        kernel = facts.node_kernel
        assert kernel is not None and kernel.value.base == (5, 15, 0)
        info = facts.node_info("osImage")
        assert info is not None and info[0] == "Ubuntu 22.04.2 LTS"
        assert info[1].text.split()[0] == "node/cp-1"  # cited at the row, as printed (`get svc,nodes`)

        (found,) = _kp209(diagnose_json(wide))
        assert found["confidence"] == "high", found
        assert "192.168.56.11" in found["summary"] and "w-1" in found["summary"]
        assert "Node w-1 is not Ready" in found["summary"]  # what IPVS mode's capture does to it
        cited = [e["text"].split()[0] for e in found["evidence"]]
        assert cited[:2] == ["service/web", "node/w-1"], found["evidence"]

        # Without -o wide the Nodes' addresses are not shown: suspected, naming what decides it.
        narrow = tmp_path / "narrow.txt"
        narrow.write_text(_print(kubectl, cp, "svc") + "\n" + _print(kubectl, cp, "nodes"))
        (suspected,) = _kp209(diagnose_json(narrow))
        assert suspected["confidence"] == "low" and suspected["severity"] == "warning", suspected
        assert "w-1" in suspected["summary"] and "kubectl get nodes -o wide" in suspected["summary"]

        # The rows a grep keeps, without their header, are still read.
        rows = "".join(ln + "\n" for ln in _print(kubectl, cp, "svc", "-A").splitlines()[1:] if "web" in ln)
        grepped = tmp_path / "grepped.txt"
        grepped.write_text(rows + _print(kubectl, cp, "nodes", "-o", "wide"))
        (again,) = _kp209(diagnose_json(grepped))
        assert again["confidence"] == "high" and "192.168.56.11" in again["summary"]


ENDPOINTS = {  # name: (ready addresses, not-ready addresses, ports)
    "many": (["10.244.1.5", "10.244.1.6", "10.244.2.7", "10.244.2.8"], ["10.244.3.9"], [8080]),
    "two": (["10.244.1.5", "10.244.2.7"], ["10.244.3.9"], [8443]),
    "v6": (["fd00:10:244::5"], [], [80]),
    "dns": (["10.244.0.3"], [], [53, 9153]),
    "none": ([], ["10.244.3.9"], [80]),
}


def test_endpoints_tables_are_read_like_the_objects(control_plane: ControlPlane, tmp_path: Path) -> None:
    """Each row shows the ready ip:port pairs (never a not-ready address), whole only without
    " + N more..."; the IPv6 address in brackets, as kube-proxy's DNAT names it."""
    cp = control_plane
    for name, (ready, not_ready, ports) in ENDPOINTS.items():
        subset: dict[str, Any] = {"ports": [{"name": f"p{p}", "port": p, "protocol": "TCP"} for p in ports]}
        if ready:
            subset["addresses"] = [{"ip": ip} for ip in ready]
        if not_ready:
            subset["notReadyAddresses"] = [{"ip": ip} for ip in not_ready]
        ep = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name}, "subsets": [subset]}
        _ok(cp.request("POST", "/api/v1/namespaces/default/endpoints", ep))
    for kubectl in _kubectls(tmp_path):
        table = _print(kubectl, cp, "endpoints", "-A")
        if dump := os.environ.get("KPDOCTOR_LAB_DUMP"):
            version = "1.20" if kubectl == _kubectls(tmp_path)[0] else "path"
            Path(dump, f"get-endpoints-kubectl-{version}.txt").write_text(table)
        rows = {r.name: r for r in shown_endpoints(table)}
        for name, (ready, _, ports) in ENDPOINTS.items():
            pairs = [f"[{ip}]:{p}" if ":" in ip else f"{ip}:{p}" for p in ports for ip in ready]
            if not pairs:  # kubectl prints an empty cell (no ready address in a subset): nothing to read
                assert name not in rows or not rows[name].whole
                continue
            row = rows[name]
            assert (row.namespace, row.backends, row.more) == ("default", tuple(pairs[:3]), max(0, len(pairs) - 3))
            assert row.whole == (0 < len(pairs) <= 3), row
        facts = Facts(load([_write(tmp_path / "ep.txt", f"$ kubectl get endpoints -A\n{table}")]))
        listed = facts.listed_backends
        assert listed[("default", "two")].backends == {"10.244.1.5:8443", "10.244.2.7:8443"}
        assert ("default", "many") not in listed and ("default", "none") not in listed


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


SLICES = {  # slice name: (address type, ports, endpoints as (address, ready))
    "web-x7k2p": ("IPv4", [8080], [("10.244.1.5", True), ("10.244.2.7", False)]),
    "big-q4vzb": ("IPv4", [80, 443], [(f"10.244.3.{i}", True) for i in range(1, 5)]),
    "v6-bq4vz": ("IPv6", [80], [("fd00:10:244::5", True)]),
}


def test_endpointslice_tables_show_every_endpoint_ready_or_not(control_plane: ControlPlane, tmp_path: Path) -> None:
    """An EndpointSlice row shows every endpoint's address (not-ready ones too) and the ports,
    three of each at most; its Service is its name without the generated suffix."""
    cp = control_plane
    for name, (family, ports, endpoints) in SLICES.items():
        body = {
            "apiVersion": "discovery.k8s.io/v1beta1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": name.rsplit("-", 1)[0]}},
            "addressType": family,
            "ports": [{"name": f"p{p}", "port": p, "protocol": "TCP"} for p in ports],
            "endpoints": [{"addresses": [a], "conditions": {"ready": ready}} for a, ready in endpoints],
        }
        _ok(cp.request("POST", "/apis/discovery.k8s.io/v1beta1/namespaces/default/endpointslices", body))
    for kubectl in _kubectls(tmp_path):
        table = _print(kubectl, cp, "endpointslices")
        if dump := os.environ.get("KPDOCTOR_LAB_DUMP"):
            version = "1.20" if kubectl == _kubectls(tmp_path)[0] else "path"
            Path(dump, f"get-endpointslices-kubectl-{version}.txt").write_text(table)
        rows = {r.name: r for r in shown_endpoints(table) if not r.ready_only}
        for name, (family, ports, endpoints) in SLICES.items():
            row = rows[name.rsplit("-", 1)[0]]
            pairs = [f"[{a}]:{p}" if family == "IPv6" else f"{a}:{p}" for p in ports[:3] for a, _ in endpoints[:3]]
            assert (row.namespace, row.backends, row.more) == (None, tuple(pairs), max(0, len(endpoints) - 3)), row
        listed = Facts(
            load([_write(tmp_path / "slices.txt", f"$ kubectl get endpointslices\n{table}")])
        ).listed_backends
        assert listed[(None, "web")].backends == {"10.244.1.5:8080", "10.244.2.7:8080"}  # the not-ready one too
        assert not listed[(None, "web")].ready_only and (None, "big") not in listed
