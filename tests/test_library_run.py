"""The run as a library (issue 20): kpdoctor.run is repeatable, keeps nothing between runs, keeps
its memory flat over many runs, contains a stage's bug, and reads a live collection in memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kpdoctor
from kpdoctor import memo
from kpdoctor.bundle.contents import Collected, NotCollected
from kpdoctor.bundle.loader import Evidence, add_collected, load
from kpdoctor.dataplane import session
from kpdoctor.model import Severity

ROOT = Path(__file__).resolve().parent.parent
DEMOS = ROOT / "src" / "kpdoctor" / "demo" / "bundles"
KP = [sys.executable, "-m", "kpdoctor"]


def _stable(doc: dict[str, object]) -> dict[str, object]:
    """A report without what differs between two runs of the same evidence (the clock)."""
    return {k: v for k, v in doc.items() if k not in ("generated_at", "elapsed_ms")}


def test_run_matches_the_command_line_and_repeats_identically() -> None:
    demo = DEMOS / "tke-backend-mismatch"
    first = kpdoctor.run([demo], min_severity=Severity.INFO).to_json()
    assert memo.size() == 0  # a finished run leaves no memo entries behind
    second = kpdoctor.run([demo], min_severity=Severity.INFO).to_json()
    assert _stable(first) == _stable(second)
    cli = subprocess.run(
        [*KP, "diagnose", str(demo), "--format", "json", "--min-severity", "info"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        timeout=120,
    )
    assert cli.returncode == 1, cli.stderr
    from_cli = json.loads(cli.stdout)
    assert [f["code"] for f in from_cli["findings"]] == [f["code"] for f in first["findings"]]  # type: ignore[index, union-attr]
    assert from_cli["findings"] == first["findings"]


def test_a_bug_in_the_verification_stage_is_its_own_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(inputs: object, part: object) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(session, "verify_part", broken)
    report = kpdoctor.run([DEMOS / "config-ignores-hostname"], min_severity=Severity.INFO)
    assert [e.stage for e in report.errors] == ["verification"]
    assert report.checks_run > 0  # the rest of the report is still produced
    skipped = {s.code: s.reason for s in report.skipped}
    assert "verification not evaluated: the verification failed" in skipped["KP200"]


def test_a_live_collection_is_read_in_memory() -> None:
    log = b"E1008 21:00:01.112374       1 proxier.go:1553] Failed to execute iptables-restore: exit status 2\n"
    arts = [
        Collected("kube-proxy/log.txt", log, source="kubectl logs", started_at="2026-11-27T10:00:00Z"),
        Collected("node/iptables-version.txt", b"iptables v1.8.4 (nf_tables)\n"),
        Collected("node/ipvsadm-list.txt", b"", exit_code=127, stderr="ipvsadm: not found"),
        Collected("notes/README.txt", b"for a person reading the bundle"),
    ]
    ev = add_collected(Evidence(), arts, [NotCollected("node/locks.txt", "no /proc/locks")], node="n1")
    assert [(a.name, a.kind.value) for a in ev.artifacts] == [
        ("kube-proxy/log.txt", "kube-proxy log"),
        ("node/iptables-version.txt", "iptables --version"),
    ]
    assert ev.node == "n1"
    said = {p.source: p.message for p in ev.problems}
    assert said["node/ipvsadm-list.txt"].startswith("not collected (exit 127: ipvsadm: not found")
    assert said["node/locks.txt"] == "not collected: no /proc/locks"
    # given together with paths, the collection comes first, as the live bundle always did
    both = add_collected(load([DEMOS / "tke-backend-mismatch" / "node" / "uname.txt"]), arts[:1])
    assert both.artifacts[0].name == "kube-proxy/log.txt"


def test_reading_evidence_needs_no_collector_and_types_with_the_declared_signatures() -> None:
    """The loader types a log by the signatures the checks declare: the entry points import the
    checks (docs/architecture.md); a caller that did not is told so, never typed with none."""
    code = (
        "import sys\n"
        "from kpdoctor.bundle.loader import load\n"
        "try:\n"
        "    load([sys.argv[1]])\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
        "import kpdoctor.checks\n"
        "ev = load([sys.argv[1]])\n"
        "assert 'kpdoctor.collect' not in ''.join(m for m in sys.modules if m.startswith('kpdoctor.collect'))\n"
        "print(ev.artifacts[0].kind.value)\n"
    )
    log = ROOT / "tests" / "realworld" / "cases" / "k3s-6093" / "k3s.log"
    got = subprocess.run(
        [sys.executable, "-c", code, str(log)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    said = got.stdout.strip().splitlines()
    assert said[0] == "no log signature is declared: import kpdoctor.checks first (the entry points do)"
    assert said[1] == "kube-proxy log"  # typed by its signatures


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "runs"),
    [(["--demo", "tke-backend-mismatch"], 1000), (["--services", "1000"], 120)],
    ids=["demo-1000-runs", "1000-services-120-runs"],
)
def test_memory_stays_flat_over_many_runs(how: list[str], runs: int) -> None:
    """RSS after the last run within 10 MB of RSS after run 100 (bench/run_memory.py; the full
    1,000 runs on a 1,000-Service node are measured there: 20 minutes is too long for the suite)."""
    got = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run_memory.py"), *how, "--runs", str(runs), "--json"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    out = json.loads(got.stdout.strip().splitlines()[-1])
    assert out["growth_after_100_mb"] <= 10, out
    assert out["memo_entries_left"] == 0
    assert got.returncode == 0, got.stderr
