"""KP126 graded by what the node shows; how complete a sysctl listing is (issue "Right on real nodes").

The sysctl listings are real: tests/data/node/sysctl-a-netns.txt is `sysctl -a` in a network
namespace of this project's machines, sysctl-named.txt `sysctl KEY...` (SOURCES.md there); the
conntrack entries are made with the real conntrack binary in a namespace.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA
from lab.netns import Netns, conntrack_unavailable

from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Severity
from kpdoctor.parse.sysctl import COMPLETE, FILTERED, KEYS, listing_of, parse_sysctl

FULL = DATA / "node" / "sysctl-a-netns.txt"
NAMED = DATA / "node" / "sysctl-named.txt"

CONFIG = """apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: "{cidr}"
iptables:
  masqueradeAll: {masq}
"""


def _services(local: bool, node_cidr: str | None = "10.244.1.0/24") -> dict[str, object]:
    spec: dict[str, object] = {
        "type": "NodePort",
        "clusterIP": "10.96.0.30",
        "clusterIPs": ["10.96.0.30"],
        "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080, "nodePort": 30080}],
    }
    if local:
        spec["externalTrafficPolicy"] = "Local"
    node: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.2"}]},
    }
    if node_cidr:
        node["spec"] = {"podCIDR": node_cidr}
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": "shop", "name": "web"}, "spec": spec},
            node,
        ],
    }


def _kp126(tmp: Path, cidr: str, masq: str, local: bool, conntrack: str | None = None) -> list[tuple[Severity, str]]:
    (tmp / "config.yaml").write_text(CONFIG.format(cidr=cidr, masq=masq))
    (tmp / "svc.json").write_text(json.dumps(_services(local)))
    paths = [tmp / "config.yaml", tmp / "svc.json"]
    if conntrack is not None:
        (tmp / "ct.txt").write_text(conntrack)
        paths.append(tmp / "ct.txt")
    rep, _ = diagnose_paths(paths, min_severity=Severity.INFO)
    return [(f.severity, f.confidence.label) for f in rep.findings if f.code == "KP126"]


def test_an_empty_cluster_cidr_with_local_policy_services_is_a_warning(tmp_path: Path) -> None:
    assert _kp126(tmp_path, "", "false", local=True) == [(Severity.WARNING, "medium")]


def test_an_empty_cluster_cidr_alone_is_info(tmp_path: Path) -> None:
    assert _kp126(tmp_path, "", "false", local=False) == [(Severity.INFO, "low")]


def test_masquerade_all_or_a_cidr_means_no_finding(tmp_path: Path) -> None:
    assert _kp126(tmp_path, "", "true", local=True) == []
    assert _kp126(tmp_path, "10.244.0.0/16", "false", local=True) == []


def _tcp_entry(client: str) -> str:
    """`conntrack -L -p tcp` of one established flow from ``client`` to the ClusterIP, translated
    to a backend: inserted with the real conntrack binary into a throw-away namespace."""
    reason = conntrack_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with Netns() as ns:
        # conntrack's own argv: original tuple, then the reply tuple the DNAT made
        insert = ["conntrack", "-I", "-p", "tcp", "-s", client, "-d", "10.96.0.30", "--sport", "51522",
                  "--dport", "80", "-r", "10.244.2.7", "-q", client, "--reply-port-src", "8080",
                  "--reply-port-dst", "51522", "--state", "ESTABLISHED", "-t", "300", "-u", "ASSURED"]  # fmt: skip
        res = ns.run(insert, timeout=10)
        if res.returncode != 0:
            pytest.skip(f"conntrack -I cannot insert an entry here: {res.stderr.strip()}")
        return ns.check(["conntrack", "-L", "-p", "tcp"], timeout=10)


def test_an_off_cluster_client_reaching_a_cluster_ip_is_a_confident_warning(tmp_path: Path) -> None:
    outside = _tcp_entry("172.20.5.9")  # no Pod, no Node: a client routed to the Service range
    assert "src=172.20.5.9 dst=10.96.0.30" in outside
    assert _kp126(tmp_path, "", "false", local=False, conntrack=outside) == [(Severity.WARNING, "high")]
    pod = _tcp_entry("10.244.1.9")  # a Pod of this Node's range: masqueraded or not, it is answered
    assert _kp126(tmp_path, "", "false", local=False, conntrack=pod) == [(Severity.INFO, "low")]
    node = _tcp_entry("192.168.0.2")  # the Node itself
    assert _kp126(tmp_path, "", "false", local=False, conntrack=node) == [(Severity.INFO, "low")]


def test_listings_know_how_complete_they_are() -> None:
    full = parse_sysctl(FULL.read_text())
    named = parse_sysctl(NAMED.read_text())
    assert listing_of(None, full) == COMPLETE
    assert listing_of(None, named) in (FILTERED, KEYS)
    assert listing_of("sysctl -a", named) == COMPLETE  # the command says so, whatever survived
    assert listing_of("sudo sysctl -a | grep bridge", full) == FILTERED
    assert listing_of("sysctl net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables", named) == KEYS
    assert listing_of("cat /proc/sys/net/ipv4/ip_forward", {}) == KEYS
    # a grep of sysctl -a keeps one directory: not complete however long
    grepped = {k: v for k, v in full.items() if k.startswith("net.")}
    assert listing_of(None, grepped) == FILTERED
