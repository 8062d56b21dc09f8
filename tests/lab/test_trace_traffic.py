"""``kpdoctor trace`` agrees with the kernel: real TCP connections through upstream kube-proxy rules
loaded into a namespace node land where the trace says (or fail where it predicts a drop).

The node holds upstream's TestOverallIPTablesRules payload (restored with real iptables-restore,
both backends); Pods 10.180.0.1-5 serve on port 80 and answer with their own address; a client on
the node's link (outside the pod network, like an external client) connects. kpdoctor reads what
the node really has: ``iptables-save`` and ``ip -j addr`` taken inside the node namespace.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import UPSTREAM

from kpdoctor.bundle.loader import load as load_evidence
from kpdoctor.dataplane.trace import trace
from kpdoctor.facts import Facts

from .iptables_capture import load
from .netns import require_lab
from .topology import Lab

require_lab()

FIX = UPSTREAM / "iptables"
NAME = "TestOverallIPTablesRules"
NODE_IP, CLIENT_IP = "192.168.0.2", "192.168.0.100"
PODS = ["10.180.0.1", "10.180.0.2", "10.180.0.3", "10.180.0.4", "10.180.0.5"]
MANY = 200


@pytest.fixture(scope="module", params=["legacy", "nft"])
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    backend: str = request.param
    tmp = tmp_path_factory.mktemp(f"lab-{backend}")
    with Lab(NODE_IP, CLIENT_IP, PODS) as lab:
        load(lab.node, (FIX / f"{NAME}.rules").read_text(), backend)
        with lab.servers(port=80):
            yield lab, backend, tmp


def _evidence(lab: Lab, backend: str, tmp: Path) -> Facts:
    """What kpdoctor reads from the live node namespace."""
    save = tmp / f"iptables-{backend}-save.txt"
    save.write_text(lab.node.check([f"iptables-{backend}-save"]))
    addr = tmp / "ip-addr.json"
    addr.write_text(lab.node_addresses())
    doc = json.loads((FIX / f"{NAME}.cluster.json").read_text())
    for it in doc["items"]:  # the Node as the lab built it
        if it["kind"] == "Node":
            it["status"]["addresses"] = [{"type": "InternalIP", "address": NODE_IP}]
    cl = tmp / "cluster.json"
    cl.write_text(json.dumps(doc))
    return Facts(load_evidence([save, addr, cl]))


def _predict(facts: Facts, dst: str, port: int) -> dict[str, float]:
    """Trace a new connection from the client: outcome -> probability."""
    import ipaddress

    [t] = trace(
        facts.rulesets,
        facts.node_view,
        ipaddress.ip_address(dst),
        port,
        "tcp",
        ipaddress.ip_address(CLIENT_IP),
        "prerouting",
    )
    out: Counter[str] = Counter()
    for b in t.branches:
        key = b.endpoint.split(":")[0] if b.endpoint and b.verdict == "ACCEPT" else b.verdict
        out[key] += b.probability
    return dict(out)


def _observed(results: list[str]) -> Counter[str]:
    return Counter({"refused": "REJECT", "timeout": "DROP"}.get(r, r) for r in results)


def test_single_endpoint_lands_where_the_trace_says(node) -> None:  # type: ignore[no-untyped-def]
    lab, backend, tmp = node
    facts = _evidence(lab, backend, tmp)
    for dst, port in [("172.30.0.41", 80), ("172.30.0.43", 80), (NODE_IP, 3003), ("172.30.0.45", 80)]:
        predicted = _predict(facts, dst, port)
        assert len(predicted) == 1, (dst, predicted)
        seen = _observed(lab.connect(dst, port, count=3))
        assert set(seen) == set(predicted), (dst, port, predicted, seen)


def test_many_connections_spread_over_the_predicted_backends(node) -> None:  # type: ignore[no-untyped-def]
    lab, backend, tmp = node
    facts = _evidence(lab, backend, tmp)
    for dst in ("172.30.0.44", "192.168.99.33"):  # ClusterIP and external IP of the 2-endpoint Service
        predicted = _predict(facts, dst, 80)
        assert predicted == {"10.180.0.4": 0.5, "10.180.0.5": 0.5}, predicted
        seen = _observed(lab.connect(dst, 80, count=MANY))
        assert sum(seen.values()) == MANY
        assert set(seen) == set(predicted), seen  # every connection on a predicted backend, each one hit
        assert min(seen.values()) > MANY * 0.3, seen  # 50/50 (p < 1e-8 of failing by chance)


def test_predicted_reject_and_drop_fail_for_real(node) -> None:  # type: ignore[no-untyped-def]
    lab, backend, tmp = node
    facts = _evidence(lab, backend, tmp)
    # ns6/svc6 has no endpoints: REJECT; ns2/svc2 (eTP=Local, no local endpoint): DROP from outside
    for dst, port, verdict in [("172.30.0.46", 80, "REJECT"), ("192.168.99.22", 80, "DROP"), (NODE_IP, 3001, "DROP")]:
        assert _predict(facts, dst, port) == {verdict: 1.0}
        seen = _observed(lab.connect(dst, port, count=1, timeout=1.0))
        assert seen == Counter({verdict: 1}), (dst, port, seen)


def test_foreign_drop_rule_is_traced_and_real(node) -> None:  # type: ignore[no-untyped-def]
    lab, backend, tmp = node
    ipt = f"iptables-{backend}"
    rule = ["FORWARD", "-d", "10.180.0.1/32", "-p", "tcp", "-j", "DROP"]
    lab.node.check([ipt, "-I", *rule])
    try:
        facts = _evidence(lab, backend, tmp)
        assert _predict(facts, "172.30.0.41", 80) == {"DROP": 1.0}
        [t] = trace(
            facts.rulesets,
            facts.node_view,
            __import__("ipaddress").ip_address("172.30.0.41"),
            80,
            "tcp",
            __import__("ipaddress").ip_address(CLIENT_IP),
            "prerouting",
        )
        assert t.branches[0].steps[-1].rule.startswith("-A FORWARD -d 10.180.0.1/32")
        assert _observed(lab.connect("172.30.0.41", 80, count=1, timeout=1.0)) == Counter({"DROP": 1})
    finally:
        lab.node.check([ipt, "-D", *rule])
    assert _observed(lab.connect("172.30.0.41", 80, count=1)) == Counter({"10.180.0.1": 1})
