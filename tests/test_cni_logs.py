"""CNI agents' logs (messages/flannel.yaml, messages/calico.yaml): every line is read as its
program's, never as kube-proxy's; a failure is named from the program's own messages, with the
causes it points to; a routine log raises nothing. Every log under tests/data/cni is real posted
output (tests/data/cni/README.md names the thread of each).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import all_findings

from kpdoctor.messages import catalogue
from kpdoctor.model import Report, Severity
from kpdoctor.parse.logwrap import FELIX, KLOG_HEADER, unwrap, writer_of

Diag = Callable[..., Report]
DATA = Path(__file__).parent / "data" / "cni"
ROUTINE = {
    "flannel": ["healthy-v0.14-host-gw.log", "k3s-embedded-flannel-start.log"],
    "calico": ["healthy-felix-bird-monitor-addresses.log", "healthy-felix-summary.log"],
}
COMPONENTS = ("flannel", "calico")


def _logs(component: str) -> list[Path]:
    return sorted((DATA / component).iterdir())


def _failing(component: str) -> list[Path]:
    return [p for p in _logs(component) if p.name not in ROUTINE.get(component, [])]


@pytest.mark.parametrize("path", _logs("flannel"), ids=lambda p: p.name)
def test_no_line_of_flannel_s_log_is_taken_for_kube_proxy_s(path: Path) -> None:
    """flanneld logs with klog's header and PID 1, as kube-proxy's DaemonSet does: its source files
    and its messages say whose line it is."""
    for line in path.read_text().splitlines():
        un = unwrap(line)
        m = KLOG_HEADER.match(un.inner)
        if m is None:
            continue
        writer = writer_of(un.source, un.inner)
        assert writer != "kube-proxy", line
        base = m.group("src").rsplit(":", 1)[0]
        if base in ("vxlan_network.go", "kube.go", "route_network.go", "match.go", "iptables_restore.go"):
            assert writer == "flannel", line


@pytest.mark.parametrize("path", _logs("calico"), ids=lambda p: p.name)
def test_calico_node_s_lines_are_calico_s(path: Path) -> None:
    """Felix, calico-node's start-up and the CNI plugin log in Calico's own format
    (`2022-05-20 11:00:53.272 [INFO][60] felix/file.go 194: ...`): never kube-proxy's."""
    for line in path.read_text().splitlines():
        un = unwrap(line)
        writer = writer_of(un.source, un.inner)
        assert writer != "kube-proxy", line
        if FELIX.match(un.inner):
            assert writer == "calico-node", line


@pytest.mark.parametrize("component", COMPONENTS)
def test_the_catalogue_holds_each_cni_agent_s_failures(component: str) -> None:
    failures = [m for m in catalogue().of(component) if m.kind != "benign"]
    assert len(failures) >= 30 and not any(m.client for m in failures)


@pytest.mark.parametrize(
    "path", [p for c in COMPONENTS for p in _failing(c)], ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_a_failing_cni_agent_log_is_read_and_its_failure_named(path: Path, diagnose: Diag) -> None:
    """Read (never "nothing usable", never taken for a whole kube-proxy log), and a finding cites
    a line of it."""
    report = diagnose({path.name: path.read_text()})
    assert [i.kind for i in report.inputs] == ["log lines"]
    cited = [c for f in all_findings(report) for c in f.evidence if c.artifact.endswith(path.name)]
    assert cited, [f.code for f in all_findings(report)]


@pytest.mark.parametrize(
    "path", [DATA / c / name for c in COMPONENTS for name in ROUTINE[c]], ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_a_routine_cni_agent_log_raises_nothing(path: Path, diagnose: Diag) -> None:
    report = diagnose({path.name: path.read_text()})
    assert not [f for f in all_findings(report) if f.severity >= Severity.WARNING]


def test_flannel_failing_to_reach_the_apiserver_through_the_service_vip_points_at_the_service_path(
    diagnose: Diag,
) -> None:
    """kubernetes/kubernetes#77061: flanneld's first API call through 10.96.0.1:443 times out. The
    Service address works only once kube-proxy has programmed the node: the lead is the node's
    Service path (suspected, decided by the node's rules), never kube-proxy's own use of the VIP
    (KP129)."""
    name = "apiserver-service-vip-timeout.log"
    report = diagnose({name: (DATA / "flannel" / name).read_text()})
    (f,) = [f for f in all_findings(report) if f.code == "KP130"]
    assert f.cause == "service-rules-missing" and f.suspected
    assert "iptables-drop-rule" in f.summary
    assert not [g for g in all_findings(report) if g.code == "KP129"]
