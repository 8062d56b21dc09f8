"""KP111 node-ip-unresolved: "has no local endpoints" drop rules for endpoints on this node, and a
hostname override that is not this node."""

from __future__ import annotations

from checks.helpers import SEED2, Diag, kp111, nat_table

from kpdoctor.model import Confidence, Severity


def test_node_ip_drop_rules_for_local_endpoints(diagnose: Diag) -> None:
    save = (
        "*nat\n:KUBE-XLB-HCMTY43AHEJZZDHI - [0:0]\n:KUBE-MARK-DROP - [0:0]\n"
        '-A KUBE-XLB-HCMTY43AHEJZZDHI -m comment --comment "2048-game/service-2048: has no local endpoints" -j KUBE-MARK-DROP\n'
        "COMMIT\n"
    )
    eps = """{"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "service-2048", "namespace": "2048-game"},
      "subsets": [{"addresses": [{"ip": "10.188.166.183", "nodeName": "ip-10-188-166-140.ec2.internal"}]}]}"""
    r = diagnose({"save.txt": save, "eps.json": eps}, node="ip-10-188-166-140.ec2.internal")
    f = r.visible()[0]
    assert f.cause == "node-ip-unresolved" and "2048-game/service-2048" in f.summary


def test_endpoint_on_this_node_makes_the_drop_rules_critical(diagnose: Diag) -> None:
    nat = nat_table((SEED2 / "node" / "iptables-legacy-save.txt").read_text())
    eps = (SEED2 / "cluster" / "endpoints.json").read_text()
    (f,) = kp111(diagnose({"nat.txt": nat, "endpoints.json": eps}, node="ip-10-188-166-140.ec2.internal"))
    assert f.severity == Severity.CRITICAL and "2 of their endpoints run on this node" in f.summary


def test_hostname_override_that_is_not_this_node(diagnose: Diag) -> None:
    """metalk8s#912/#930: one ConfigMap's hostnameOverride (`bootstrap`) used on node1."""
    line = "12587 /usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf --hostname-override=bootstrap\n"
    (f,) = kp111(diagnose({"pgrep.txt": line}, node="node1"))
    assert f.severity == Severity.WARNING and f.confidence == Confidence.MEDIUM
    assert '--hostname-override=bootstrap, but this node is "node1" (--node)' in f.summary
    assert f.evidence[0].artifact.endswith("pgrep.txt")
    assert kp111(diagnose({"pgrep.txt": line}, node="bootstrap")) == []
    assert kp111(diagnose({"pgrep.txt": line})) == []  # no Node name to compare with
