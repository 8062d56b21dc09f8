"""Healthy kube-proxy logs of every era, as published in upstream issues, raise nothing at
warning or above, bare or wrapped the way users collect them."""

from __future__ import annotations

from pathlib import Path

import pytest

from kpdoctor.diagnose import diagnose_paths, exit_code
from kpdoctor.model import Severity

REAL = Path(__file__).resolve().parent / "data" / "real-logs"
HEALTHY = sorted(REAL.glob("healthy-*.log"))
WRAPPERS = {
    "bare": "",
    "cri": "2023-12-04T15:32:28.549370123Z stderr F ",
    "journald": "Dec 04 15:32:28 node3 kube-proxy[1234]: ",
    "kubectl-prefix": "[pod/kube-proxy-x7k2p/kube-proxy] ",
}


def test_there_are_healthy_logs_of_several_eras() -> None:
    names = {p.name for p in HEALTHY}
    assert {"healthy-glog-era.log", "healthy-structured-era.log"} <= names


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("log", HEALTHY, ids=lambda p: p.name)
def test_healthy_log_is_clean(log: Path, wrapper: str, tmp_path: Path) -> None:
    prefix = WRAPPERS[wrapper]
    p = tmp_path / "kube-proxy.log"
    p.write_text("".join(prefix + line + "\n" for line in log.read_text().splitlines()))
    report, evidence = diagnose_paths([p], min_severity=Severity.WARNING)
    assert [a.name for a in evidence.artifacts] == [str(p)], evidence.problems
    assert report.visible() == [], [f"{f.code} {f.summary}" for f in report.visible()]
    assert exit_code(report, evidence) == 0
