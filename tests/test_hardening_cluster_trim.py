"""Trimming what no check reads never changes a diagnosis (issue 36, item 9).

The agent and ``collect_cluster`` keep a cluster's objects without ``managedFields``, kubectl's
last-applied copy, and (Services, EndpointSlices, Endpoints) the metadata no check reads and the
slices' ``targetRef``\\ s (``collect.kubeapi.trim``). Here every object of real evidence (the
upstream kube-proxy fixtures, in both backends; the demo bundles' cluster objects) is given what
kube-apiserver adds, then diagnosed as it is and trimmed: the findings, the verification and the
checks run are the same (line numbers aside: the trimmed files are shorter).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import UPSTREAM

from kpdoctor import memo
from kpdoctor.bundle.loader import load
from kpdoctor.collect.kubeapi import trim
from kpdoctor.demo import demo_path
from kpdoctor.diagnose import diagnose_evidence

Obj = dict[str, Any]


def served(obj: Obj, i: int) -> Obj:
    """``obj`` as kube-apiserver serves it: what the API adds, and kubectl's last-applied copy."""
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        return obj
    applied = {k: v for k, v in obj.items() if k in ("apiVersion", "kind", "spec")}
    meta.setdefault("uid", f"00000000-0000-4000-8000-{i:012d}")
    meta.setdefault("creationTimestamp", "2026-01-05T10:00:00Z")
    meta.setdefault("generation", 1)
    meta["selfLink"] = f"/api/v1/x/{meta.get('name')}"
    notes = meta.setdefault("annotations", {})
    if isinstance(notes, dict):
        notes["kubectl.kubernetes.io/last-applied-configuration"] = json.dumps(applied) + "\n"
    meta["managedFields"] = [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                              "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:ports": {".": {}}}}}]
    if obj.get("kind") == "EndpointSlice":
        meta.setdefault("ownerReferences", [{"apiVersion": "v1", "kind": "Service", "name": "x", "uid": "u"}])
        for j, ep in enumerate(obj.get("endpoints") or []):
            if isinstance(ep, dict):
                ep["targetRef"] = {"kind": "Pod", "name": f"pod-{j}", "namespace": meta.get("namespace"), "uid": "p"}
    return obj


def _rewrite(path: Path, trimmed: bool) -> None:
    doc = json.loads(path.read_text())
    items = doc.get("items") if isinstance(doc, dict) and isinstance(doc.get("items"), list) else None
    objs = items if items is not None else [doc]
    out = []
    for i, o in enumerate(objs):
        if not isinstance(o, dict):
            out.append(o)
            continue
        o = served(o, i)
        kind = o.get("kind") or (str(doc.get("kind"))[:-4] if str(doc.get("kind")).endswith("List") else None)
        out.append(trim(o, kind) if trimmed else o)
    path.write_text(json.dumps({**doc, "items": out} if items is not None else out[0], indent=2))


def _normal(doc: Any) -> Any:
    """A report without where things are (line numbers, line lists)."""
    if isinstance(doc, dict):
        return {k: _normal(v) for k, v in doc.items() if k not in ("line", "lines", "first_line", "where")}
    if isinstance(doc, list):
        return [_normal(v) for v in doc]
    if isinstance(doc, str):
        return re.sub(r"lines? \d+(?:-\d+)?", "line N", doc)
    return doc


def _diagnose(files: list[Path], node: str) -> Any:
    ev = load([str(f) for f in files])
    try:
        report = diagnose_evidence(ev, node=node, command="verify")
    finally:
        ev.close()
        memo.clear()
    doc = report.to_json()
    doc.pop("tool", None)
    doc.pop("inputs", None)
    ver = report.verification.to_json() if report.verification is not None else None
    return _normal({"report": doc, "verification": ver, "checks_run": report.checks_run})


def _upstream_cases() -> list[tuple[str, list[str]]]:
    cases = []
    for cluster in sorted((UPSTREAM / "iptables").glob("*.cluster.json")):
        stem = cluster.name.removesuffix(".cluster.json")
        for rules in ("legacy.save", "nft.save"):
            cases.append((f"{stem} {rules}", [f"iptables/{stem}.cluster.json", f"iptables/{stem}.{rules}",
                                                f"iptables/{stem}.kube-proxy.yaml"]))
    for cluster in sorted((UPSTREAM / "nftables").glob("*.cluster.json")):
        stem = cluster.name.removesuffix(".cluster.json")
        cases.append((stem, [f"nftables/{stem}.cluster.json", f"nftables/{stem}.ruleset.json",
                             f"nftables/{stem}.kube-proxy.yaml"]))
    return cases


@pytest.mark.parametrize(("name", "files"), _upstream_cases(), ids=[c[0] for c in _upstream_cases()])
def test_trimming_the_upstream_fixtures_changes_no_verification(name: str, files: list[str], tmp_path: Path) -> None:
    results = []
    for trimmed in (False, True):
        d = tmp_path / "case"  # the same path both times: the reports name their files
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        paths = []
        for f in files:
            src = UPSTREAM / f
            if not src.exists():
                continue
            paths.append(d / src.name)
            shutil.copy(src, paths[-1])
            if src.name.endswith(".cluster.json"):
                _rewrite(paths[-1], trimmed)
        results.append(_diagnose(paths, "test-node"))
    served_doc, trimmed_doc = results
    assert trimmed_doc["verification"] is not None and trimmed_doc["checks_run"] > 0
    assert trimmed_doc == served_doc


DEMOS = [d.name for d in sorted(demo_path("tke-backend-mismatch").parent.iterdir())
         if (d / "cluster").is_dir() and any((d / "cluster").glob("*.json"))]


@pytest.mark.parametrize("demo", DEMOS)
def test_trimming_the_demo_bundles_changes_no_finding(demo: str, tmp_path: Path) -> None:
    results = []
    for trimmed in (False, True):
        d = tmp_path / demo
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(demo_path(demo), d)
        for f in sorted((d / "cluster").glob("*.json")):
            _rewrite(f, trimmed)
        results.append(_diagnose([d], None))  # type: ignore[arg-type]
    assert results[1]["report"]["findings"] or results[1]["checks_run"] > 0
    assert results[1] == results[0]
