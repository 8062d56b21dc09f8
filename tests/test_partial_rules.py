"""Partial evidence is partial, never healthy (issue 15, part 2): with only the nat table of a
node, what the filter table would do is unknown. Seed 002's real nat table (the demo bundle
config-ignores-hostname, cut to its *nat section as a user pastes it) with the cluster's objects."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kpdoctor.demo import demo_path
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Severity

BUNDLE = demo_path("config-ignores-hostname")


def _nat_only(tmp: Path) -> Path:
    text = (BUNDLE / "node" / "iptables-legacy-save.txt").read_text()
    nat = re.search(r"^\*nat\n.*?^COMMIT\n", text, re.M | re.S)
    assert nat is not None
    p = tmp / "nat.txt"
    p.write_text(nat.group(0))
    return p


def test_a_nat_only_dump_drops_by_mark_and_cites_the_no_local_endpoints_rule(tmp_path: Path) -> None:
    cluster = sorted((BUNDLE / "cluster").glob("*.json"))
    rep, _ = diagnose_paths([_nat_only(tmp_path), *cluster], command="verify")
    (f,) = rep.visible()
    assert f.cause == "local-endpoints-not-recognised"
    assert any("has no local endpoints" in c.text and "KUBE-MARK-DROP" in c.text for c in f.evidence)
    assert "leave untouched" not in f.summary
    (r,) = [r for r in rep.verification.results if r.status == "mismatch"]
    assert [(e.verdict, e.probability) for e in r.actual] == [("DROP", 1.0)]


def test_the_same_dump_from_a_node_without_local_endpoints_is_healthy(tmp_path: Path) -> None:
    """The endpoints run on another node: dropping Local-policy traffic is what kube-proxy must do."""
    cluster = []
    for p in sorted((BUNDLE / "cluster").glob("*.json")):
        text = p.read_text()
        if p.name == "endpoints.json":
            text = text.replace('"nodeName": "ip-10-188-166-140.ec2.internal"', '"nodeName": "ip-10-188-168-54.ec2.internal"')
        if p.name == "pods.json":
            pods = json.loads(text)
            pods["items"] = [i for i in pods["items"] if "2048" not in i["metadata"]["name"]]
            text = json.dumps(pods)
        out = tmp_path / p.name
        out.write_text(text)
        cluster.append(out)
    rep, _ = diagnose_paths([_nat_only(tmp_path), *cluster], command="verify")
    assert not [f for f in rep.findings if f.severity >= Severity.WARNING], [f.title for f in rep.findings]
