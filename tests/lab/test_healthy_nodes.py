"""No alarm on a healthy node, whatever part of its state was given (issue "Right on real nodes").

Every node here is healthy and real: kube-proxy's rules (bench/gen_cluster.py's 1.28 layout) are
loaded into a network namespace with one iptables backend and saved back with the same backend;
the sysctl listings are what ``sysctl -a`` and ``sysctl KEY...`` print in a namespace set up as
kube-proxy leaves a node (ip_forward and route_localnet on); the addresses are what ``ip -j addr``
prints for the node's interface there. Over both backends x a complete, a partial and no sysctl
listing x one to five Nodes x the node's identity given by its hostname, the bundle's manifest
or its addresses only, ``diagnose`` exits 0 with nothing at warning and ``verify`` finds every
Service ok, without ``--node``. The same nodes with br_netfilter really off (the namespace's
bridge-nf-call-iptables set to 0, in a complete listing) still raise KP309, and a wrong identity
is reported with the rule that chose it.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kpdoctor.diagnose import diagnose_paths, exit_code
from kpdoctor.model import Severity

from .netns import Netns, require_lab

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import gen_cluster  # type: ignore[import-not-found,unused-ignore]

require_lab()

SERVICES, ENDPOINTS = 12, 2
OTHERS = [("node1", "192.168.0.11"), ("node2", "192.168.0.12"), ("node3", "192.168.0.13"), ("node4", "192.168.0.14")]


def _namespace_state(ns: Netns, bridge_off: bool) -> dict[str, str]:
    """The node's settings and address as kube-proxy leaves a node: forwarding and route_localnet
    on (kube-proxy's iptables mode sets it), eth0 holding the node's address (one end of a veth pair
    whose other end stays in the namespace: no traffic leaves it)."""
    ns.check(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.route_localnet=1"])
    if bridge_off:
        ns.check(["sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=0"])
    ns.check(["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"])
    ns.check(["ip", "addr", "add", f"{gen_cluster.NODE_IP}/24", "dev", "eth0"])
    ns.check(["ip", "link", "set", "eth0", "up"])
    full = ns.check(["sysctl", "-a"], timeout=60)
    keys = sorted(line.split(" = ", 1)[0] for line in full.splitlines() if " = " in line)
    out = {"full": full, "addr": ns.check(["ip", "-j", "addr"])}
    for seed in range(1, 6):  # five different random subsets, each with the key forwarding needs
        picked = {*random.Random(seed).sample(keys, 4 * seed), "net.ipv4.ip_forward"}
        out[f"partial-{seed}"] = ns.check(["sysctl", *sorted(picked)])
    return out


@pytest.fixture(scope="module")
def captured() -> Iterator[dict[str, Any]]:
    """Per backend, the rules saved back from a real kernel; the settings of a healthy and of a
    br_netfilter-off namespace."""
    save, cluster = gen_cluster.generate(SERVICES, ENDPOINTS)
    out: dict[str, Any] = {"cluster": cluster}
    for backend in ("legacy", "nft"):
        with Netns() as ns:
            ns.check([f"iptables-{backend}-restore"], input=save)
            out[backend] = ns.check([f"iptables-{backend}-save"])
    for off in (False, True):
        with Netns() as ns:
            out["bridge-off" if off else "healthy"] = _namespace_state(ns, off)
    yield out


def _bundle(
    tmp: Path, captured: dict[str, Any], backend: str, sysctl: str, nodes: int, identity: str, state: str = "healthy"
) -> Path:
    root = tmp / f"{backend}-{sysctl}-{nodes}-{identity}-{state}"
    (root / "node").mkdir(parents=True)
    (root / "cluster").mkdir()
    cluster = json.loads(json.dumps(captured["cluster"]))
    for name, ip in OTHERS[: nodes - 1]:
        cluster["items"].append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name},
                "status": {"addresses": [{"type": "InternalIP", "address": ip}]},
            }
        )
    (root / "cluster" / "services.json").write_text(json.dumps(cluster))
    (root / "node" / f"iptables-{backend}-save.txt").write_text(captured[backend])
    listing = captured[state]
    if sysctl != "absent":
        (root / "node" / "sysctl.txt").write_text(listing[f"partial-{nodes}" if sysctl == "partial" else sysctl])
    manifest: dict[str, Any] = {"tool": {"name": "kpdoctor", "version": "0.1.0"}, "artifacts": []}
    if identity == "manifest":
        manifest["node"] = gen_cluster.NODE
    elif identity == "hostname":
        (root / "node" / "hostname").write_text(gen_cluster.NODE + "\n")
    else:
        (root / "node" / "ip-addr.json").write_text(listing["addr"])
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


MATRIX = [
    (b, s, n, i)
    for b in ("legacy", "nft")
    for s in ("full", "partial", "absent")
    for n in (1, 2, 3, 4, 5)
    for i in ("hostname", "manifest", "addresses")
]


@pytest.mark.parametrize(("backend", "sysctl", "nodes", "identity"), MATRIX)
def test_a_healthy_node_is_clean(
    tmp_path: Path, captured: dict[str, Any], backend: str, sysctl: str, nodes: int, identity: str
) -> None:
    root = _bundle(tmp_path, captured, backend, sysctl, nodes, identity)
    rep, _ = diagnose_paths([root])
    loud = [(f.code, f.summary) for f in rep.findings if f.severity >= Severity.WARNING]
    assert not loud
    assert exit_code(rep) == 0
    assert rep.node == gen_cluster.NODE
    ver, _ = diagnose_paths([root], command="verify")
    assert exit_code(ver) == 0
    v = ver.verification
    assert v is not None and v.evaluated
    assert {r.status for r in v.results} == {"ok"}, [r.note for r in v.results if r.status != "ok"][:3]
    assert v.services_checked == SERVICES
    if nodes > 1:
        rule = {"manifest": "named by the bundle's manifest", "hostname": "hostname", "addresses": "addresses"}
        assert rule[identity] in (rep.node_rule or "")


@pytest.mark.parametrize("identity", ["hostname", "manifest", "addresses"])
@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_br_netfilter_off_in_a_complete_listing_still_raises_kp309(
    tmp_path: Path, captured: dict[str, Any], backend: str, identity: str
) -> None:
    root = _bundle(tmp_path, captured, backend, "full", 3, identity, state="bridge-off")
    rep, _ = diagnose_paths([root])
    (f,) = [f for f in rep.findings if f.code == "KP309"]
    assert f.severity >= Severity.WARNING
    assert any("bridge-nf-call-iptables = 0" in c.text for c in f.evidence)


def test_a_partial_listing_without_bridge_keys_says_nothing_of_br_netfilter(
    tmp_path: Path, captured: dict[str, Any]
) -> None:
    """The reported defect: `sysctl net.ipv4.ip_forward ...` has no net.bridge.* key, which is
    not "br_netfilter not loaded", even with Pods on a bridge."""
    root = _bundle(tmp_path, captured, "nft", "partial", 1, "manifest")
    assert "net.bridge" not in (root / "node" / "sysctl.txt").read_text()
    links = [
        {"ifindex": 3, "ifname": "cni0", "flags": ["UP"], "mtu": 1450, "link_type": "ether", "linkinfo": {"info_kind": "bridge"}},
        {"ifindex": 4, "ifname": "veth1a2b", "flags": ["UP"], "mtu": 1450, "master": "cni0", "link_netnsid": 0,
         "linkinfo": {"info_kind": "veth"}},
    ]  # fmt: skip
    (root / "node" / "ip-link.json").write_text(json.dumps(links))
    rep, _ = diagnose_paths([root])
    assert not [f for f in rep.findings if f.code == "KP309"]


def test_a_wrong_identity_is_reported_with_the_rule_that_chose_it(tmp_path: Path, captured: dict[str, Any]) -> None:
    root = _bundle(tmp_path, captured, "legacy", "full", 3, "manifest")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["node"] = "node2"
    (root / "manifest.json").write_text(json.dumps(manifest))
    rep, _ = diagnose_paths([root], min_severity=Severity.INFO)
    assert rep.node == "node2"
    assert rep.node_rule == "named by the bundle's manifest"
    doc = rep.to_json()
    assert doc["subject"]["node_rule"] == "named by the bundle's manifest"


def test_addresses_decide_when_the_hostname_names_no_node(tmp_path: Path, captured: dict[str, Any]) -> None:
    root = _bundle(tmp_path, captured, "nft", "absent", 4, "addresses")
    (root / "node" / "hostname").write_text("ip-192-168-0-2\n")  # the cloud's hostname, not the Node's name
    rep, _ = diagnose_paths([root])
    assert rep.node == gen_cluster.NODE
    assert rep.node_rule is not None and "addresses are the node's own" in rep.node_rule
    assert "eth0" in rep.node_rule
