"""A listing the collection could not read is unknown, never empty: when the EndpointSlices (or
Endpoints) were not collected (a list that failed, the agent's watch not synced), a Service
without any is not verified against "no endpoints". That was how an agent that could not read
EndpointSlices raised false critical findings (every Service "out of sync") on a healthy node."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import UPSTREAM

from kpdoctor.bundle.contents import Collected, NotCollected
from kpdoctor.bundle.loader import add_collected, load
from kpdoctor.diagnose import diagnose_evidence
from kpdoctor.model import Severity

FIX = UPSTREAM / "iptables" / "TestOverallIPTablesRules"


def _evidence(tmp_path: Path, absent: list[NotCollected]) -> tuple[object, list[str]]:
    save = tmp_path / "nft.save"
    save.write_text(Path(f"{FIX}.nft.save").read_text())
    doc = json.loads(Path(f"{FIX}.cluster.json").read_text())
    rest = [o for o in doc["items"] if o["kind"] != "EndpointSlice"]
    slices = [o for o in doc["items"] if o["kind"] == "EndpointSlice"]
    listing = json.dumps({"kind": "List", "apiVersion": "v1", "items": rest}).encode()
    got = [Collected("cluster/services.json", listing, "GET /api/v1/services")]
    if not absent:
        data = json.dumps({"kind": "List", "apiVersion": "v1", "items": slices}).encode()
        got.append(Collected("cluster/endpointslices.json", data, "GET /apis/discovery.k8s.io/v1/endpointslices"))
    ev = add_collected(load([save]), got, absent)
    report = diagnose_evidence(ev, command="verify", min_severity=Severity.INFO)
    return report, [f.cause for f in report.findings if f.severity == Severity.CRITICAL]


def test_endpointslices_not_collected_are_unknown_not_none(tmp_path: Path) -> None:
    report, critical = _evidence(tmp_path, [NotCollected("cluster/endpointslices.json", "500 Internal Server Error")])
    assert critical == []
    ver = report.verification  # type: ignore[attr-defined]
    assert ver is not None and ver.count("mismatch") == 0
    assert ver.count("uncertain") > 0  # not verified: what the Services' endpoints are is not known


def test_the_same_node_with_its_endpointslices_is_verified_clean(tmp_path: Path) -> None:
    report, critical = _evidence(tmp_path, [])
    ver = report.verification  # type: ignore[attr-defined]
    assert critical == [] and ver is not None and ver.count("mismatch") == 0 and ver.count("ok") > 0
