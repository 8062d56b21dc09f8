"""A Service of 5,000 endpoints, as a real node holds it: kube-proxy's rules for it restored with
real ``iptables-restore`` (both backends) and read back with ``iptables-save``. kpdoctor verifies
it ok with every endpoint at 1/5,000, and ``trace`` lists every one of them.

(The evaluator once recursed once per ``-m statistic`` rule: a Service of about 1,000 endpoints
ended the run with "internal error: RecursionError".)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .netns import Netns, require_lab

require_lab()

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from gen_cluster import generate  # type: ignore[import-not-found]  # noqa: E402

ENDPOINTS = 5000


@pytest.fixture(scope="module", params=["legacy", "nft"])
def evidence(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    backend: str = request.param
    payload, cluster = generate(1, ENDPOINTS)
    tmp = tmp_path_factory.mktemp(f"large-{backend}")
    with Netns() as ns:
        ns.check([f"iptables-{backend}-restore"], input=payload, timeout=120)
        saved = ns.check([f"iptables-{backend}-save"], timeout=60)
    save = tmp / "iptables-save.txt"
    save.write_text(saved)
    objects = tmp / "cluster.json"
    objects.write_text(json.dumps(cluster))
    return [save, objects]


def _kpdoctor(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kpdoctor", *argv], capture_output=True, text=True, timeout=300, check=False
    )


def test_every_endpoint_verifies_at_its_share(evidence: list[Path]) -> None:
    proc = _kpdoctor("verify", "--format", "json", *map(str, evidence))
    assert proc.returncode == 0, proc.stderr
    ver = json.loads(proc.stdout)["verification"]
    assert ver["evaluated"] is True
    assert ver["mismatches"] == 0 and ver["uncertain"] == 0 and ver["ok"] == len(ver["results"]) >= 2
    for r in ver["results"]:
        backends = {a["backend"] for a in r["actual"]}
        assert len(backends) == ENDPOINTS
        assert all(a["probability"] == pytest.approx(1 / ENDPOINTS, abs=1e-6) for a in r["actual"])


def test_trace_lists_every_endpoint(evidence: list[Path]) -> None:
    proc = _kpdoctor("trace", "--service", "ns0/svc0", "--format", "json", *map(str, evidence))
    assert proc.returncode == 0, proc.stderr
    (t,) = json.loads(proc.stdout)["traces"]
    assert len({o["backend"] for o in t["outcomes"]}) == ENDPOINTS
    assert t["summary"] == "100.0% DNAT to a backend"
    text = _kpdoctor("trace", "--service", "ns0/svc0", *map(str, evidence)).stdout
    assert "The other 4,995 branches, one line each" in text
    assert text.count("0.02% DNAT to 10.") == ENDPOINTS  # each endpoint once, at its share
