"""What users paste about node identity and kube-proxy's configuration (issue 15, parts 2-3).

Evidence is real: seed 002's demo bundle (its nat table and log), real `iptables -S` output of
kube-proxy's upstream rules (tests/data/iptables/real) with the upstream test's EndpointSlices,
and files and lines of the real-world corpus and of the upstream threads named in each test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import yaml
from conftest import DATA, UPSTREAM, all_findings

from kpdoctor.checks.sync.xtables_lock import _mounts_lock
from kpdoctor.facts.workloads import is_fragment
from kpdoctor.model import Confidence, Finding, Report, Severity
from kpdoctor.parse.k8s import K8sObject
from kpdoctor.parse.kpconfig import parse_config_file

Diag = Callable[..., Report]
REPO = Path(__file__).resolve().parents[1]
SEED2 = REPO / "src" / "kpdoctor" / "demo" / "bundles" / "config-ignores-hostname"
CASES = REPO / "tests" / "realworld" / "cases"
REAL_S = DATA / "iptables" / "real" / "legacy-S.txt"
INPUTS = UPSTREAM / "iptables" / "TestOverallIPTablesRules.testinputs.json"


def nat_table(save: str) -> str:
    """The nat table of an iptables-save dump, whole lines only (header to COMMIT)."""
    lines = save.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln == "*nat")
    end = next(i for i in range(start, len(lines)) if lines[i] == "COMMIT")
    return "\n".join(lines[start - 1 : end + 1]) + "\n"


def kp111(report: Report) -> list[Finding]:
    return [f for f in all_findings(report) if f.code == "KP111"]


def note(report: Report) -> list[Finding]:
    """KP203's info note on "has no local endpoints" rules nothing decides."""
    return [f for f in all_findings(report) if f.code == "KP203" and f.severity == Severity.INFO]


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


def test_iptables_S_rules_are_read_too(diagnose: Diag) -> None:
    r = diagnose({"rules-S.txt": REAL_S.read_text()})
    (f,) = note(r)
    assert "ns2/svc2" in f.summary
    assert (
        f.evidence[0].artifact.endswith("rules-S.txt") and "ns2/svc2:p80 has no local endpoints" in f.evidence[0].text
    )


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


def test_a_variable_nothing_expanded_is_no_node_name(diagnose: Diag) -> None:
    """kubeadm#857: the documented workaround passed `${NODE_NAME}`, which Kubernetes never expands."""
    r = diagnose({"pgrep.txt": (CASES / "kubeadm-857" / "pgrep.txt").read_text()})
    (f,) = kp111(r)
    assert f.severity == Severity.WARNING and "${NODE_NAME}" in f.summary and "nothing expanded" in f.summary
    kp112 = [g for g in all_findings(r) if g.code == "KP112"]
    assert kp112 and kp112[0].severity == Severity.WARNING and kp112[0].confidence == Confidence.LOW
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


def test_a_zero_valued_dump_reads_as_defaults(diagnose: Diag) -> None:
    """k8s#107156: every unset field printed as 0s/0/"": no "minSyncPeriod is 0" finding."""
    r = diagnose({"config.conf": (CASES / "k8s-107156" / "config.conf").read_text()})
    assert not [f for f in all_findings(r) if f.cause == "sync-too-frequent"]


def test_a_flag_that_differs_from_the_file_is_a_warning(diagnose: Diag) -> None:
    """k8s#98302: `--profiling=true` next to --config has no effect (pprof answers 404)."""
    posted = (CASES / "k8s-98302" / "kube-proxy-config.txt").read_text().splitlines()
    conf = "\n".join(ln for ln in posted if not ln.startswith(("cat <<EOF", "EOF"))) + "\n"
    flags = "kube-proxy --config=/tmp/kube-proxy.yaml --master=https://localhost:6443 --profiling=true\n"
    r = diagnose({"kube-proxy.yaml": conf, "cmdline.txt": flags})
    (f,) = [g for g in all_findings(r) if g.code == "KP112"]
    assert f.severity == Severity.WARNING and f.confidence == Confidence.HIGH
    assert "--profiling=true (config: unset (default))" in f.summary
    assert "master" not in f.summary  # honoured with --config
    assert any(c.artifact.endswith("kube-proxy.yaml") and c.line == 2 for c in f.evidence)


def test_flags_equal_to_the_file_are_only_info(diagnose: Diag) -> None:
    """Seed 002's config has `bindAddress: 0.0.0.0`; the same flag ignored changes nothing."""
    conf = (SEED2 / "kube-proxy" / "config.yaml").read_text()
    flags = "kube-proxy --v=2 --config=/var/lib/kube-proxy-config/config --bind-address=0.0.0.0\n"
    (f,) = [g for g in all_findings(diagnose({"config.yaml": conf, "cmdline.txt": flags})) if g.code == "KP112"]
    assert f.severity == Severity.INFO and "same values" in f.summary


# -- xtables lock (KP102) -------------------------------------------------------------------------
FRAGMENT = """\
      - command:
        - /bin/sh
        - -c
        - /usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf --hostname-override=$HOSTNAME
        env:
        - name: HOSTNAME
          valueFrom:
            fieldRef:
"""  # kubeadm#857, comment by thibault-ketterer (2023-09-26): a containers list, nothing else


def test_a_spec_fragment_without_volumes_is_unknown_not_unshared() -> None:
    containers = yaml.safe_load(FRAGMENT)
    frag = K8sObject("Pod", "", None, "", {"spec": {"containers": containers}}, "ds.yaml", 1)
    assert is_fragment(frag) and _mounts_lock(frag) is None
    whole = K8sObject(
        "DaemonSet",
        "apps/v1",
        "kube-system",
        "kube-proxy",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "kube-proxy"},
            "spec": {"template": {"spec": {"containers": containers}}},
        },
        "ds.yaml",
        1,
    )
    assert not is_fragment(whole) and _mounts_lock(whole) is False
