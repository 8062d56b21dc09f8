"""Seed 004's checks on real counters: a healthy lab node stays quiet, a staged overload is found.

The lab node (a network namespace routing to two Pod namespaces) is collected by ``kpdoctor
collect`` run inside it, whose two counter snapshots are 3 s apart; the traffic or overload runs
in between. Traffic stays inside the lab (its own addresses and loopback).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.knowledge import CHECKS
from kpdoctor.model import Finding, Severity

from .netns import lab_available
from .topology import Lab

# Overload the node's own sockets on loopback: a listener with backlog 1 that never accepts,
# hit by 8 connections, and a UDP socket with a 1 kB receive buffer sent 200 datagrams, then 20
# more every 0.2 s until told to stop: the counters grow between the collector's two snapshots
# whenever its first one was taken (its start-up time varies with the machine's load).
OVERLOAD = r"""
import select, socket, sys
lst = socket.socket(); lst.bind(("127.0.0.1", 0)); lst.listen(1)
port = lst.getsockname()[1]
clients = []
for _ in range(8):
    c = socket.socket(); c.setblocking(False)
    try:
        c.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    clients.append(c)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024); u.bind(("127.0.0.1", 0))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(200):
    s.sendto(b"x" * 1000, u.getsockname())
print(port, flush=True)
while not select.select([sys.stdin], [], [], 0.2)[0]:
    for _ in range(20):
        s.sendto(b"x" * 1000, u.getsockname())
"""


@pytest.fixture(scope="module")
def lab():  # type: ignore[no-untyped-def]
    reason = lab_available()
    if reason:
        pytest.skip(reason)
    for tool in ("conntrack", "netstat", "nstat", "ss"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            pytest.skip(f"{tool} not installed (scripts/test installs it)")
    with Lab(node_ip="192.168.0.2", client_ip="192.168.0.100", pods=["10.180.0.1", "10.180.0.2"]) as lab:
        # conntrack and NAT active in the node, as on any Kubernetes node
        lab.node.check(
            [
                "iptables-legacy",
                "-t",
                "nat",
                "-A",
                "POSTROUTING",
                "-s",
                "10.180.0.0/16",
                "-o",
                "to-client",
                "-j",
                "MASQUERADE",
                "--random-fully",
            ]
        )
        yield lab


def _bundle(lab: Lab, root: Path, between) -> Path:  # type: ignore[no-untyped-def]
    """``kpdoctor collect`` in the node namespace, with ``between`` running after its first counter
    snapshot and before its second (3 s later): the node under load while it is being looked at."""
    argv = [sys.executable, "-m", "kpdoctor", "collect", "-o", str(root), "--no-cluster", "--interval", "3"]
    collector = subprocess.Popen(
        lab.node.exec_argv(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(0.7)
        between()
        _, err = collector.communicate(timeout=60)
    finally:
        if collector.poll() is None:
            collector.kill()
            collector.wait()
    assert collector.returncode == 0, err
    return root


def _traffic(lab: Lab) -> None:
    with lab.servers(port=80):
        for ip in lab.pod_ips:
            got = lab.connect(ip, 80, count=10)
            assert all(r == ip for r in got), got


def test_a_healthy_node_gives_nothing_at_warning_or_above(lab: Lab, tmp_path: Path) -> None:
    root = _bundle(lab, tmp_path / "bundle", lambda: _traffic(lab))
    report, _ = diagnose_paths([root], min_severity=Severity.INFO)
    loud = [f"{f.code} {f.severity.label}: {f.summary}" for f in report.findings if f.severity >= Severity.WARNING]
    assert loud == []
    # every node check whose evidence this bundle holds looked at it (KP320 reads a Pod's log,
    # which the node's collection does not gather; IPVS's listings are not in this kernel)
    collected = {Kind(i.kind) for i in report.inputs}
    assert Kind.SYSCTL in collected and Kind.CONNTRACK_STATS in collected, collected
    skipped = {s.code for s in report.skipped if s.code.startswith("KP3") and collected & set(CHECKS[s.code].needs)}
    assert skipped == set()
    assert all(p.message.startswith("not collected: ") for p in report.problems), report.problems


def _overload(lab: Lab, keep: list[subprocess.Popen[str]], ports: list[int]) -> None:
    p = subprocess.Popen(
        lab.node.exec_argv(["python3", "-c", OVERLOAD]), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    keep.append(p)
    assert p.stdout is not None
    ports.append(int(p.stdout.readline()))


def test_staged_overflows_are_found_from_real_counters(lab: Lab, tmp_path: Path) -> None:
    keep: list[subprocess.Popen[str]] = []
    ports: list[int] = []
    try:
        root = _bundle(lab, tmp_path / "bundle", lambda: _overload(lab, keep, ports))
    finally:
        for p in keep:
            p.communicate("", timeout=10)
    report, _ = diagnose_paths([root], min_severity=Severity.INFO)
    by: dict[str, Finding] = {f.code: f for f in report.findings}
    queue = by["KP304"]
    assert queue.severity == Severity.WARNING and queue.ongoing
    assert "(TcpExtListenOverflows) grew by" in queue.summary
    assert f"127.0.0.1:{ports[0]}" in queue.summary  # the listener whose queue is full right now
    assert any(c.artifact.endswith("T1/ss-ltnp.txt") for c in queue.evidence)
    buffers = by["KP303"]
    assert buffers.severity == Severity.WARNING
    assert "(UdpRcvbufErrors) grew by" in buffers.summary
    assert any(c.artifact.endswith("T1/nstat.txt") or c.artifact.endswith("T1/netstat-s.txt") for c in buffers.evidence)
    assert any("net.core.rmem_max" in fx for fx in buffers.fix)
