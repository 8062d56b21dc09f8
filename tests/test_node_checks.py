"""Seed 004's node checks from evidence in the formats users have: loose files, transcripts, bundles.

Counter formats are those captured on this machine's kernel (tests/data/node/, and the lab test
tests/lab/test_node_counters.py for live namespaces); the values are seed 004's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from checks.helpers import TIMES, bundle, codes, conntrack_s, deployment, objects, run, service
from conftest import one, write

from kpdoctor.model import Report, Severity

PROC_HEADER = (
    "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop "
    "icmp_error  expect_new expect_create expect_delete search_restart\n"
)


# -- conntrack ----------------------------------------------------------------------------------
def test_unchanged_counters_are_quiet(tmp_path: Path) -> None:
    root = bundle(
        tmp_path,
        {
            "node/counters/T0/nf_conntrack-stat.txt": PROC_HEADER + " ".join(["00000010"] * 17) + "\n",
            "node/counters/T1/nf_conntrack-stat.txt": PROC_HEADER + " ".join(["00000010"] * 17) + "\n",
        },
        TIMES,
    )
    assert not codes(run([root])) & {"KP300", "KP301"}


# -- sockets ------------------------------------------------------------------------------------
NETSTAT = """\
Udp:
    1000 packets received
    3 packets to unknown port received
    {rcv} packet receive errors
    900 packets sent
    {rcv} receive buffer errors
    0 send buffer errors
TcpExt:
    {ovf} times the listen queue of a socket overflowed
    {ovf} SYNs to LISTEN sockets dropped
"""


def test_listen_and_buffer_overflows_growing(tmp_path: Path) -> None:
    root = bundle(
        tmp_path,
        {
            "node/counters/T0/netstat-s.txt": NETSTAT.format(rcv=100, ovf=5000),
            "node/counters/T1/netstat-s.txt": NETSTAT.format(rcv=180, ovf=5600),
            "node/sysctl.txt": "net.core.somaxconn = 128\nnet.ipv4.tcp_max_syn_backlog = 512\nnet.core.rmem_max = 212992\n",
        },
        TIMES,
    )
    rep = run([root])
    q = one(rep, "KP304")
    assert q.severity == Severity.WARNING
    assert "(TcpExtListenOverflows) grew by 600" in q.summary
    assert any("net.core.somaxconn=32768 (now 128)" in x for x in q.fix)
    b = one(rep, "KP303")
    assert "(UdpRcvbufErrors) grew by 80" in b.summary
    assert any("net.core.rmem_max=26214400" in x for x in b.fix)


def test_totals_from_one_netstat_are_info(tmp_path: Path) -> None:
    # 2 of 1,002 datagrams (0.2%): small totals since boot stay info
    rep = run([write(tmp_path, "ns.txt", NETSTAT.format(rcv=2, ovf=3))])
    assert one(rep, "KP304").severity == Severity.INFO
    assert one(rep, "KP303").severity == Severity.INFO


# -- termination --------------------------------------------------------------------------------
def test_exec_init_and_unserved_workloads_are_quiet(tmp_path: Path) -> None:
    rep = run(
        [
            objects(
                tmp_path,
                deployment("a", ["sh", "-c", "exec /app/server"], prestop=["sleep", "5"]),
                deployment("b", ["dumb-init", "--", "/start.sh"], prestop=["sleep", "5"]),
                deployment("batch", ["sh", "-c", "job & sleep 1"]),  # no Service selects it
                service("a"),
                service("b"),
            )
        ]
    )
    assert not codes(rep) & {"KP400", "KP401", "KP402"}


# -- ranking ------------------------------------------------------------------------------------
def test_several_causes_rank_critical_first(tmp_path: Path, diagnose: Callable[..., Report]) -> None:
    root = bundle(
        tmp_path,
        {
            "node/counters/T0/conntrack-stats.txt": conntrack_s(10, early_drop=5),
            "node/counters/T1/conntrack-stats.txt": conntrack_s(90, early_drop=900),
            "node/counters/T0/netstat-s.txt": NETSTAT.format(rcv=1, ovf=1),
            "node/counters/T1/netstat-s.txt": NETSTAT.format(rcv=1, ovf=1),
            "node/sysctl.txt": "net.netfilter.nf_conntrack_count = 131000\nnet.netfilter.nf_conntrack_max = 131072\n",
        },
        TIMES,
    )
    rep = run([root])
    assert [f.code for f in rep.findings][:2] == ["KP301", "KP300"]
    assert rep.findings[0].severity == Severity.CRITICAL
    assert "early_drop) grew by 895" in rep.findings[0].summary
    assert not codes(rep) & {"KP303", "KP304"}  # unchanged between the snapshots
