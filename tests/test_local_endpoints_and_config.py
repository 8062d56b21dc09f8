"""What users paste about node identity and kube-proxy's configuration (issue 15, parts 2-3).

Evidence is real: seed 002's demo bundle (its nat table and log), real `iptables -S` output of
kube-proxy's upstream rules (tests/data/iptables/real) with the upstream test's EndpointSlices,
and files and lines of the real-world corpus and of the upstream threads named in each test.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from checks.helpers import CASES, REAL_S, SEED2, kp111, nat_table, note
from conftest import UPSTREAM, all_findings

from kpdoctor.model import Confidence, Report, Severity
from kpdoctor.parse.kpconfig import parse_config_file

Diag = Callable[..., Report]
INPUTS = UPSTREAM / "iptables" / "TestOverallIPTablesRules.testinputs.json"


def upstream_objects() -> str:
    d = json.loads(INPUTS.read_text())
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": d["services"] + d["endpointSlices"]})


# -- "has no local endpoints" (KP111) -------------------------------------------------------------
def test_seed_002_nat_dump_with_its_log_is_the_unresolved_node(diagnose: Diag) -> None:
    nat = nat_table((SEED2 / "node" / "iptables-legacy-save.txt").read_text())
    r = diagnose({"nat.txt": nat, "kube-proxy.log": (SEED2 / "kube-proxy" / "log.txt").read_text()})
    (f,) = kp111(r)
    assert f.cause == "node-ip-unresolved" and f.severity == Severity.CRITICAL
    assert f.confidence == Confidence.HIGH
    assert "2048-game/service-2048" in f.summary and '"ip-10-188-166-140"' in f.summary
    assert any("has no local endpoints" in c.text and c.artifact.endswith("nat.txt") for c in f.evidence)
    assert note(r) == []  # corroborated: the finding, not the note


def test_seed_002_nat_dump_from_a_healthy_node_is_only_a_note(diagnose: Diag) -> None:
    """The same rules are what kube-proxy writes on every node without a local Pod of the Service."""
    nat = nat_table((SEED2 / "node" / "iptables-legacy-save.txt").read_text())
    r = diagnose({"nat.txt": nat})
    assert diagnose({"nat.txt": nat}, min_severity=Severity.WARNING).visible() == []
    assert kp111(r) == []
    (f,) = note(r)
    assert f.cause == "local-endpoints-not-recognised" and f.confidence == Confidence.LOW
    assert "2048-game/service-2048" in f.summary
    assert "--node" in f.summary and "EndpointSlices" in f.summary
    assert f.evidence[0].text.startswith("-A KUBE-XLB-HCMTY43AHEJZZDHI")


def test_endpoint_slices_placing_the_endpoints_elsewhere_settle_it(diagnose: Diag) -> None:
    """Upstream's test node runs no endpoint of ns2/svc2 (its slice has no nodeName): healthy."""
    r = diagnose({"rules-S.txt": REAL_S.read_text(), "objects.json": upstream_objects()}, node="test-node")
    assert kp111(r) == [] and note(r) == []
    # without the node's name the slices cannot say which endpoints are local: still a note,
    # and one that takes nothing else under it (it is no root cause of the rest)
    r = diagnose({"rules-S.txt": REAL_S.read_text(), "objects.json": upstream_objects()})
    (f,) = note(r)
    assert "this Node's name (--node)" in f.summary and "kubectl get endpointslices" not in f.summary
    assert kp111(r) == [] and f.folded == [] and f in r.findings


def test_a_variable_nothing_expanded_is_no_node_name(diagnose: Diag) -> None:
    """kubeadm#857: the documented workaround passed `${NODE_NAME}`, which Kubernetes never expands."""
    r = diagnose({"pgrep.txt": (CASES / "kubeadm-857" / "pgrep.txt").read_text()})
    (f,) = kp111(r)
    assert f.severity == Severity.WARNING and "${NODE_NAME}" in f.summary and "nothing expanded" in f.summary
    kp112 = [g for g in all_findings(r) if g.code == "KP112"]
    assert kp112 and kp112[0].severity == Severity.INFO and kp112[0].confidence == Confidence.LOW
    assert kp112[0].suspected and "kube-proxy --version" in kp112[0].decided_by  # the version decides
    assert "version is not in the evidence" in kp112[0].summary


# -- config file ------------------------------------------------------------------------------------
def test_config_citations_point_at_the_field_when_kind_is_not_first() -> None:
    """k8s#107156's config: `kind:` is on line 34; a field is cited on its own line."""
    text = (CASES / "k8s-107156" / "config.conf").read_text()
    cf = parse_config_file(text, "config.conf", 1)
    assert cf is not None and cf.source.line == 34
    lines = text.splitlines()
    for dotted, want in (("iptables.syncPeriod", "  syncPeriod: 0s"), ("ipvs.syncPeriod", "  syncPeriod: 0s")):
        src = cf.cite(dotted)
        assert src.line is not None and lines[src.line - 1] == want
    assert cf.cite("iptables.syncPeriod").line == 24 and cf.cite("ipvs.syncPeriod").line == 30
    # inside a transcript the document starts later: the offset is the document's, not kind:'s
    shifted = parse_config_file(text, "t.txt", 10)
    assert shifted is not None and shifted.cite("iptables.syncPeriod").line == 33
