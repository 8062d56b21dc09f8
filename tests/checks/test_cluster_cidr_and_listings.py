"""KP126 graded by what the node shows; how complete a sysctl listing is (issue "Right on real nodes").

The sysctl listings are real: tests/data/node/sysctl-a-netns.txt is `sysctl -a` in a network
namespace of this project's machines, sysctl-named.txt `sysctl KEY...` (SOURCES.md there).
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import DATA

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


def test_an_off_cluster_client_reaching_a_cluster_ip_is_a_confident_warning(tmp_path: Path) -> None:
    # conntrack -L's shape (tests/data/node/conntrack-L-nat.txt): a client at 172.20.5.9 (no Pod,
    # no Node) reaching the ClusterIP, translated to a backend
    entry = (
        "tcp      6 86397 ESTABLISHED src=172.20.5.9 dst=10.96.0.30 sport=51522 dport=80 src=10.244.2.7 "
        "dst=172.20.5.9 sport=8080 dport=51522 [ASSURED] mark=0 use=1\n"
    )
    assert _kp126(tmp_path, "", "false", local=False, conntrack=entry) == [(Severity.WARNING, "high")]
    pod = entry.replace("172.20.5.9", "10.244.1.9")
    assert _kp126(tmp_path, "", "false", local=False, conntrack=pod) == [(Severity.INFO, "low")]


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
