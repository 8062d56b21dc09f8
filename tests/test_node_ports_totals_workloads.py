"""Node and workload checks on what users really paste (issue 15, parts 2-3).

Real evidence only: real-world corpus files (tests/realworld/cases), counters captured on this
machine's kernel (tests/data/node, see SOURCES.md there), seed 002's demo rules, and Pod specs and
preStop commands as posted in the upstream threads named in each test.
"""

from __future__ import annotations

from collections.abc import Callable

from checks.helpers import case, exec_hook, of
from conftest import DATA

from kpdoctor.checks.termination.shutdown import prestop
from kpdoctor.model import Confidence, Report, Severity

Diag = Callable[..., Report]


# -- KP302: bind failures inside the ephemeral range ------------------------------------------------
def test_bind_failures_outside_the_range_are_not_this_cause(diagnose: Diag) -> None:
    """rke2#1458: kube-proxy's 10249/10256 taken by a second kube-proxy, not an ephemeral port."""
    r = diagnose(case("rke2-1458", "kube-proxy.log"))
    assert of(r, "KP302") == []
    assert [f.cause for f in r.visible()][:1] == ["multiple-kube-proxy"]


# -- since-boot totals, with their size and share -------------------------------------------------
def test_netstat_totals_are_stated_with_their_share(diagnose: Diag) -> None:
    r = diagnose({"netstat-s.txt": (DATA / "node" / "netstat-s-overflow.txt").read_text()})
    (q,) = of(r, "KP304")
    assert q.severity == Severity.WARNING and q.confidence == Confidence.MEDIUM
    assert "18 listen-queue overflows (TcpExtListenOverflows) since boot, 90.0% of 20" in q.summary
    assert "run `netstat -s` twice a minute apart" in q.summary
    (b,) = of(r, "KP303")
    assert b.severity == Severity.WARNING
    assert "199 UDP receive-buffer errors (UdpRcvbufErrors) since boot, 100.0% of 199 UDP datagrams" in b.summary


# -- workloads without a Service, and preStop hooks -------------------------------------------------
def test_prestop_sleep_with_units_and_chained_commands() -> None:
    """Real hooks: imroc/kubernetes-guide `[sleep, 5s]`; k8s#20473 `sleep 30; nginx -s quit`."""
    assert prestop({"lifecycle": exec_hook(["sleep", "5s"])}).seconds == 5
    assert prestop({"lifecycle": exec_hook(["/bin/sh", "-c", "sleep 30; nginx -s quit"])}).seconds == 30
    chained = "echo 'Starting graceful shutdown...' && nginx -s quit && sleep 10 && echo 'Graceful shutdown completed'"
    assert prestop({"lifecycle": exec_hook(["/bin/sh", "-c", chained])}).seconds == 10
    assert prestop({"lifecycle": {}}).present is False
    assert prestop({}, fragment=True).present is None  # a pasted fragment without lifecycle: unknown
