"""Healthy kube-proxy logs of every era, as published in upstream issues, raise nothing at
warning or above, bare or wrapped the way users collect them."""

from __future__ import annotations

from pathlib import Path

import pytest

from kpdoctor.diagnose import diagnose_paths, exit_code
from kpdoctor.model import Severity

LOGS = Path(__file__).resolve().parent / "data" / "logs"
HEALTHY = sorted(LOGS.glob("healthy-*.log")) + sorted(LOGS.glob("benign-*.log"))
WRAPPERS = {
    "bare": "",
    "cri": "2023-12-04T15:32:28.549370123Z stderr F ",
    "journald": "Dec 04 15:32:28 node3 kube-proxy[1234]: ",
    "kubectl-prefix": "[pod/kube-proxy-x7k2p/kube-proxy] ",
}


def test_there_are_healthy_logs_of_several_eras() -> None:
    names = {p.name for p in HEALTHY}
    assert {"healthy-glog-era.log", "healthy-structured-era.log", "healthy-nftables.log"} <= names


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("log", HEALTHY, ids=lambda p: p.name)
def test_healthy_log_is_clean(log: Path, wrapper: str, tmp_path: Path) -> None:
    prefix = WRAPPERS[wrapper]
    p = tmp_path / "kube-proxy.log"
    p.write_text("".join(prefix + line + "\n" for line in log.read_text().splitlines()))
    report, evidence = diagnose_paths([p], min_severity=Severity.WARNING)
    assert [a.name for a in evidence.artifacts] == [str(p)], evidence.problems
    assert report.visible() == [], [f"{f.code} {f.summary}" for f in report.visible()]
    assert exit_code(report) == 0


# Real excerpts from upstream issues (tests/data/logs/SOURCES.md) -> causes kpdoctor must report
# at warning or above (an empty set: nothing).
EXPECTED = {
    "benign-dualstack-healthcheck.log": set(),
    "benign-dualstack-healthcheck-2.log": set(),
    "benign-ipvs-cleanup-too-many-links.log": set(),
    "benign-ipvs-modprobe.log": set(),
    "benign-ipvs-modprobe-2.log": set(),
    "benign-nftables-cleanup.log": set(),
    "healthy-glog-era.log": set(),
    "healthy-glog-era-2.log": set(),
    "healthy-glog-era-3.log": set(),
    "healthy-nftables.log": set(),
    "healthy-structured-era.log": set(),
    "healthy-structured-era-2.log": set(),
    "healthy-glog-era-4.log": set(),
    "healthy-glog-era-5-ipvs.log": set(),
    "healthy-structured-era-3.log": set(),
    "k3s-combined.log": set(),
    "ipvs-startup-no-panic-89729.log": set(),
    "ipvs-startup-panic-2.log": {"kube-proxy-panic"},  # a run-time panic (k/k#109052), not the start-up one
    # the missing chain alone: first the backend mismatch, then (low, an alternative) the chain never created
    "iptables-backend-mismatch.log": {"iptables-backend-mismatch", "kubelet-chains-missing"},
    "iptables-backend-mismatch-2.log": {"iptables-backend-mismatch", "kubelet-chains-missing"},
    "ipvs-graceful-termination.log": {"ipvs-sync-deadlock"},
    "ipvs-graceful-termination-2.log": {"ipvs-sync-deadlock"},
    "ipvs-prerequisites.log": {"ipvs-prerequisites-missing"},
    "ipvs-prerequisites-2.log": {"ipvs-prerequisites-missing"},
    "ipvs-prerequisites-3.log": {"ipvs-prerequisites-missing"},
    "ipvs-startup-panic.log": {"kube-proxy-startup-panic"},
    "kernel-mark-regression.log": {"kernel-mark-target-regression"},
    "multiple-kube-proxy.log": {"multiple-kube-proxy"},
    "multiple-kube-proxy-2.log": {"multiple-kube-proxy"},
    "node-ip-unresolved.log": {"node-ip-unresolved"},
    "node-ip-unresolved-2.log": {"node-ip-unresolved", "ipvs-prerequisites-missing"},
    "node-ip-unresolved-3.log": {"node-ip-unresolved"},
    "xtables-lock.log": {"iptables-restore-no-wait", "xtables-lock-held-too-long"},
    "xtables-lock-2.log": {"iptables-restore-no-wait"},
}


def test_every_real_excerpt_has_an_expectation() -> None:
    assert {p.name for p in LOGS.glob("*.log")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_excerpt(name: str) -> None:
    report, evidence = diagnose_paths([LOGS / name], min_severity=Severity.WARNING)
    assert [a.kind.value for a in evidence.artifacts] == ["kube-proxy log"]
    top = {f.cause for f in report.visible()}
    assert top == EXPECTED[name], [f"{f.code} {f.summary}" for f in report.visible()]
    assert not any(f.alternative_to for f in report.visible()[:1])  # an alternative reading is never the first
