"""Cases the native core settles as "ok" (``IptablesRules.settled``) are rows built only when read,
and the verification is the same as when every case is evaluated at once.

Three sources: every folder of evidence the tests and the corpus hold that gives a verification
with iptables rules, a generated cluster (bench/gen_cluster.py) with every kind of disagreement
the verifier names, and that cluster verified as a user runs it. For each: the report with cases
settled equals the report with none settled (the backend's ``settled`` answering False for all),
and every settled row, once built, is "ok".
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kpdoctor
from kpdoctor.dataplane.expected import Case
from kpdoctor.dataplane.iptables.backend import IptablesBackend
from kpdoctor.dataplane.results import Result, Verification

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS.parent / "bench"))
import gen_cluster  # type: ignore[import-not-found,unused-ignore]  # noqa: E402


def evidence_sets() -> Iterator[list[Path]]:
    """Every corpus case and every fixture folder under tests/data that holds iptables rules, as a
    whole; and, in a folder of several tests' files (upstream's ``TestX.legacy.save``,
    ``TestX.cluster.json``...), each test's other files with each of its rule dumps."""
    roots = [p for p in sorted((TESTS / "realworld").glob("*/*")) if (p / "case.yaml").is_file()]
    roots += sorted({p.parent for p in (TESTS / "data").rglob("*") if p.is_file()})
    for folder in roots:
        files = [p for p in sorted(folder.iterdir()) if p.is_file() and p.stat().st_size < 4_000_000]
        rules = [p for p in files if b"-A KUBE-" in p.read_bytes()]
        if not rules:
            continue
        yield [folder]
        tests: dict[str, list[Path]] = {}
        for p in files:
            tests.setdefault(re.sub(r"\.[a-z-]+(\.json|\.yaml|\.save)?$", "", p.name), []).append(p)
        for group in tests.values():
            if len(tests) > 1:
                rest = [p for p in group if p not in rules]
                yield from ([dump, *rest] for dump in group if dump in rules and rest)


class Settling:
    """Records which cases the backend settled; ``off`` makes it settle none."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, off: bool = False) -> None:
        self.cases: list[Case] = []
        real = IptablesBackend.settled

        def settled(backend: IptablesBackend, cases: list[Case]) -> list[bool]:
            if off:
                return [False] * len(cases)
            got = real(backend, cases)
            self.cases += [c for c, ok in zip(cases, got, strict=True) if ok]
            return got

        monkeypatch.setattr(IptablesBackend, "settled", settled)


def _report(inputs: list[Path], monkeypatch: pytest.MonkeyPatch, off: bool) -> tuple[dict[str, Any], Settling]:
    with monkeypatch.context() as m:
        settling = Settling(m, off)
        report = kpdoctor.run(inputs)
        ver = report.verification
        if ver is not None and not off:
            _built_ok(ver, settling)
        return report.to_json(), settling


def _built_ok(ver: Verification, settling: Settling) -> None:
    """Every settled row is "ok" once built; the accessors answered without building any."""
    settled = {id(c) for c in settling.cases}
    at = [i for i, r in enumerate(ver.rows) if isinstance(r, Case) and id(r) in settled]
    assert len(at) == len(settled)  # nothing built them before the report was asked for
    before = ver.statuses()
    for i in at:
        assert ver.row(i).status == "ok", ver.row(i)
    assert ver.statuses() == before
    assert all(isinstance(r, Result) for r in ver.rows)


def test_the_tests_evidence_verifies_the_same_with_settled_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    sets = settled = 0
    for inputs in evidence_sets():
        fast, settling = _report(inputs, monkeypatch, off=False)
        if not settling.cases:
            continue
        sets += 1
        settled += len(settling.cases)
        full, _ = _report(inputs, monkeypatch, off=True)
        assert fast == full, inputs
    assert sets >= 5 and settled >= 20, (sets, settled)


def _disagreeing_cluster(tmp_path: Path) -> tuple[Path, Path]:
    """A generated node where some Services' rules disagree with the cluster: a Service with an
    endpoint the rules lack, one whose rules keep a gone endpoint, one without rules at all."""
    save, cluster = gen_cluster.write(tmp_path, 60, 3)
    objects = json.loads(cluster.read_text())
    slices = [o for o in objects["items"] if o["kind"] == "EndpointSlice" and len(o.get("endpoints") or []) >= 2]
    added, dropped = slices[3], slices[7]
    extra = json.loads(json.dumps(added["endpoints"][0]))
    extra["addresses"] = ["10.244.250.250"]
    added["endpoints"].append(extra)
    dropped["endpoints"] = dropped["endpoints"][:1]
    svc = objects["items"].index(
        next(o for o in objects["items"] if o["kind"] == "Service" and o["metadata"]["name"] != "kubernetes")
    )
    new = json.loads(json.dumps(objects["items"][svc]))
    new["metadata"]["name"] = "made-after-the-last-sync"
    new["spec"]["clusterIP"] = new["spec"]["clusterIPs"][0] = "10.96.250.250"
    objects["items"].append(new)
    cluster.write_text(json.dumps(objects))
    return save, cluster


def test_a_node_whose_rules_disagree_verifies_the_same_with_settled_cases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save, cluster = _disagreeing_cluster(tmp_path)
    fast, settling = _report([save, cluster], monkeypatch, off=False)
    full, _ = _report([save, cluster], monkeypatch, off=True)
    assert fast == full
    ver = fast["verification"]
    assert ver["mismatches"] >= 3 and settling.cases
    assert len(settling.cases) == ver["ok"]  # every ok case of this node is settled, none other


@pytest.mark.parametrize("services", [30, 80])
def test_verify_text_counts_settled_rows_as_json_does(tmp_path: Path, services: int) -> None:
    """The text report of a node of more than 50 Services reads no settled row, of fewer it lists
    each Service port (building its rows); either way its counts are the JSON report's."""
    save, cluster = gen_cluster.write(tmp_path, services, 3)
    outs = {}
    for fmt in ("text", "json"):
        done = subprocess.run(
            [sys.executable, "-m", "kpdoctor", "verify", "-f", fmt, str(save), str(cluster)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        outs[fmt] = done.stdout
    doc = json.loads(outs["json"])["verification"]
    assert doc["ok"] == len(doc["results"]) > services
    assert f"{len(doc['results'])} Service port x traffic class: {doc['ok']} ok, 0 mismatch" in outs["text"]
    labels = {f"{r['service']}:{r['port']}" if r["port"] else r["service"] for r in doc["results"]}
    listed = [label for label in labels if f"\n{label} " in outs["text"]]
    assert len(listed) == (len(labels) if services < 50 else 0), outs["text"]
