"""Node and workload checks on what users really paste (issue 15, parts 2-3).

Real evidence only: real-world corpus files (tests/realworld/cases), counters captured on this
machine's kernel (tests/data/node, see SOURCES.md there), seed 002's demo rules, and Pod specs and
preStop commands as posted in the upstream threads named in each test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from conftest import DATA, all_findings

from kpdoctor.checks.termination.shutdown import prestop
from kpdoctor.model import Confidence, Finding, Report, Severity

Diag = Callable[..., Report]
REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "realworld" / "cases"
SEED2_SAVE = (
    REPO / "src" / "kpdoctor" / "demo" / "bundles" / "config-ignores-hostname" / "node" / "iptables-legacy-save.txt"
)


def case(name: str, *files: str) -> dict[str, str]:
    return {f: (CASES / name / f).read_text() for f in files}


def of(report: Report, code: str) -> list[Finding]:
    return [f for f in all_findings(report) if f.code == code]


# -- KP302: bind failures inside the ephemeral range ------------------------------------------------
def test_kube_proxy_nodeport_bind_failure_with_the_kernel_default_range(diagnose: Diag) -> None:
    """k8s#40920: kube-proxy could not open NodePort 34104; no sysctl given."""
    (f,) = of(diagnose(case("k8s-40920", "kube-proxy.log", "kubectl-version.txt")), "KP302")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.MEDIUM
    assert "ip_local_port_range 32768-60999 (the kernel default: no ip_local_port_range was given" in f.summary
    assert "NodePort 34104 of ccp/memcached:11211 failed to bind" in f.summary
    assert f.evidence[0].artifact.endswith("kube-proxy.log") and f.evidence[0].line == 1
    assert "ip_local_reserved_ports=34104,30000-32767" in f.fix[0]


def test_a_daemon_bind_failure_inside_a_widened_range_is_critical(diagnose: Diag) -> None:
    """rancher#12510: the ingress controller's 10254 inside ip_local_port_range 1024-65535."""
    r = diagnose(case("rancher-12510", "ingress-controller.log", "ip_local_port_range.txt", "lsof.txt"))
    (f,) = of(r, "KP302")
    assert f.severity == Severity.CRITICAL and f.confidence == Confidence.HIGH
    assert "1024-65535 (widened below the kernel default 32768)" in f.summary
    assert "tcp port 10254 failed to bind" in f.summary
    assert any(c.artifact.endswith("ip_local_port_range.txt") for c in f.evidence)
    assert any(c.artifact.endswith("ingress-controller.log") for c in f.evidence)


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


def test_a_small_share_of_failed_inserts_stays_info(diagnose: Diag) -> None:
    """weave#3287: 199 failed inserts against 3.3 million since boot."""
    (f,) = of(diagnose(case("weave-3287", "conntrack-S.txt")), "KP300")
    assert f.severity == Severity.INFO and f.confidence == Confidence.MEDIUM
    assert "199 failed conntrack inserts (conntrack.insert_failed) since boot, 0.0061% of 3,266,123" in f.summary
    assert "run `conntrack -S` twice a minute apart" in f.summary


def test_failed_inserts_with_dns_dnat_rules_are_a_warning(diagnose: Diag) -> None:
    """weave#3287's counters with seed 002's rules, which DNAT UDP DNS to two CoreDNS Pods."""
    r = diagnose({**case("weave-3287", "conntrack-S.txt"), "iptables-save.txt": SEED2_SAVE.read_text()})
    (f,) = of(r, "KP300")
    assert f.severity == Severity.WARNING
    assert "DNATs UDP DNS to 2 backend(s)" in f.summary
    assert any("--to-destination 10.188.171.9:53" in c.text and "-p udp" in c.text for c in f.evidence)


# -- workloads without a Service, and preStop hooks -------------------------------------------------
def deployment_of_43576(lifecycle: dict[str, Any] | None = None, grace: int | None = None) -> str:
    """k8s#43576's Deployment (its Service document left out), optionally with a preStop hook."""
    docs = list(yaml.safe_load_all((CASES / "k8s-43576" / "zero-downtime-test.yaml").read_text()))
    dep = next(d for d in docs if d["kind"] == "Deployment")
    spec = dep["spec"]["template"]["spec"]
    if lifecycle is not None:
        spec["containers"][0]["lifecycle"] = lifecycle
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return json.dumps(dep)


def exec_hook(command: list[str]) -> dict[str, Any]:
    return {"preStop": {"exec": {"command": command}}}


def test_workload_checks_run_without_a_service_and_say_so(diagnose: Diag) -> None:
    r = diagnose({"deploy.json": deployment_of_43576()})
    (f,) = of(r, "KP401")
    assert f.severity == Severity.INFO and f.confidence == Confidence.LOW
    assert "Deployment/zero-downtime-test (no Service given)" in f.summary
    assert "No Service object was given" in f.summary
    assert f.subject["service"] is None and f.subject["workload"] == "Deployment/zero-downtime-test"


def test_prestop_sleep_with_units_and_chained_commands() -> None:
    """Real hooks: imroc/kubernetes-guide `[sleep, 5s]`; k8s#20473 `sleep 30; nginx -s quit`."""
    assert prestop({"lifecycle": exec_hook(["sleep", "5s"])}).seconds == 5
    assert prestop({"lifecycle": exec_hook(["/bin/sh", "-c", "sleep 30; nginx -s quit"])}).seconds == 30
    chained = "echo 'Starting graceful shutdown...' && nginx -s quit && sleep 10 && echo 'Graceful shutdown completed'"
    assert prestop({"lifecycle": exec_hook(["/bin/sh", "-c", chained])}).seconds == 10
    assert prestop({"lifecycle": {}}).present is False
    assert prestop({}, fragment=True).present is None  # a pasted fragment without lifecycle: unknown


def test_prestop_sleeping_the_whole_grace_period(diagnose: Diag) -> None:
    hook = exec_hook(["/bin/sh", "-c", "sleep 30; nginx -s quit"])  # k8s#20473, kfox1111
    (f,) = of(diagnose({"deploy.json": deployment_of_43576(hook)}), "KP402")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.MEDIUM  # no Service: one step lower
    assert "sleeps 30 s in preStop, and terminationGracePeriodSeconds is 30 (the default)" in f.summary
    assert "No Service object was given" in f.summary


def test_a_prestop_loop_without_bound_ends_with_sigkill(diagnose: Diag) -> None:
    """MeshWeaver#2043: preStop polled /drain until the grace period killed the container."""
    script = (CASES / "MeshWeaver-2043" / "preStop.sh").read_text().strip()
    p = prestop({"lifecycle": exec_hook(["/bin/sh", "-c", script])})
    assert p.loop == script and p.seconds is None
    (f,) = of(diagnose({"deploy.json": deployment_of_43576(exec_hook(["/bin/sh", "-c", script]), grace=60)}), "KP402")
    assert f.severity == Severity.WARNING and "waits without a bound" in f.summary
    assert "terminationGracePeriodSeconds (60)" in f.summary and "timeout" in f.fix[0]


def test_a_loop_waiting_for_the_application_to_exit_is_its_shutdown(diagnose: Diag) -> None:
    """The Kubernetes docs' preStop for nginx: quit, then wait for nginx to be gone."""
    hook = exec_hook(["/bin/sh", "-c", "nginx -s quit; while killall -0 nginx; do sleep 1; done"])
    p = prestop({"lifecycle": hook})
    assert p.present and p.loop is None and p.seconds is None
    assert of(diagnose({"deploy.json": deployment_of_43576(hook)}), "KP402") == []
