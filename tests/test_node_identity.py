"""Which node the evidence is from (docs/verification.md, "Which node"): the rules after the
hostname, on the node's own `ip addr` (tests/data/node/ip-addr.txt, real output: 10.244.0.1 on
cni0) and kube-proxy's configuration."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import DATA

from kpdoctor.diagnose import diagnose_paths

IP_ADDR = DATA / "node" / "ip-addr.txt"


def _nodes(*nodes: tuple[str, list[str]]) -> dict[str, object]:
    items = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {"addresses": [{"type": "InternalIP", "address": a} for a in addrs]},
        }
        for name, addrs in nodes
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _node(tmp: Path, nodes: dict[str, object], override: str | None = None) -> tuple[str | None, str | None]:
    (tmp / "nodes.json").write_text(json.dumps(nodes))
    paths = [IP_ADDR, tmp / "nodes.json"]
    if override is not None:
        (tmp / "config.yaml").write_text(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
            f"hostnameOverride: {override}\n"
        )
        paths.append(tmp / "config.yaml")
    rep, _ = diagnose_paths(paths)
    return rep.node, rep.node_rule


def test_the_node_whose_address_is_on_an_interface_here(tmp_path: Path) -> None:
    name, rule = _node(tmp_path, _nodes(("a", ["10.1.0.5"]), ("b", ["10.244.0.1"])))
    assert name == "b" and rule == "the Node whose addresses are the node's own (10.244.0.1 on cni0)"


def test_loopback_never_names_a_node(tmp_path: Path) -> None:
    name, _ = _node(tmp_path, _nodes(("a", ["10.1.0.5"]), ("b", ["127.0.0.1"])))
    assert name is None


def test_the_override_decides_only_among_nodes_whose_addresses_agree(tmp_path: Path) -> None:
    both = _nodes(("a", ["10.244.0.1"]), ("b", ["10.244.0.1"]), ("c", ["10.1.0.7"]))
    name, rule = _node(tmp_path, both, override="b")
    assert name == "b" and rule is not None and rule.startswith("the Node kube-proxy's hostnameOverride names")
    assert _node(tmp_path, both, override="c")[0] is None  # c's addresses are not this node's
    assert _node(tmp_path, both)[0] is None  # two Nodes claim the address, nothing chooses
