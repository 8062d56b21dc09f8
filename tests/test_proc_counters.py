"""The kernel's own counter files, /proc/net/netstat and /proc/net/snmp, read as nstat names their
counters (TcpExtListenOverflows, UdpNoPorts): real counters of a network namespace made for the
test (deleted after it), where a listener with a backlog of 0 is flooded with connections and a
closed UDP port is sent datagrams."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import one, write
from lab.netns import Netns, lab_available

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Severity
from kpdoctor.parse.netstat import parse_nstat

pytestmark = pytest.mark.skipif(lab_available() is not None, reason=str(lab_available()))

_PROGRAM = """
import socket, sys, time
srv = socket.socket(); srv.bind(("127.0.0.1", 9090)); srv.listen(0)
clients = []
for _ in range(20):
    c = socket.socket(); c.setblocking(False)
    try:
        c.connect(("127.0.0.1", 9090))
    except BlockingIOError:
        pass
    clients.append(c)
time.sleep(1.5)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3):
    u.sendto(b"x", ("127.0.0.1", 9999))
time.sleep(0.2)
sys.stdout.write(open("/proc/net/netstat").read() + open("/proc/net/snmp").read())
"""


@pytest.fixture(scope="module")
def proc_counters() -> str:
    with Netns() as ns:
        ns.check(["ip", "link", "set", "lo", "up"])
        return ns.check([sys.executable, "-c", _PROGRAM], timeout=30)


def test_proc_net_counters_read_by_their_nstat_names(proc_counters: str) -> None:
    c = parse_nstat(proc_counters)
    assert (c.get("TcpExtListenOverflows") or 0) > 0 and c.get("UdpNoPorts") == 3
    assert c.get("TcpExtListenOverflows") == c.get("TcpExtListenDrops")
    line, text = c.lines["UdpNoPorts"]
    assert text.startswith("Udp: ") and proc_counters.splitlines()[line - 1].strip() == text


def test_the_files_as_evidence(proc_counters: str, tmp_path: Path) -> None:
    path = write(tmp_path, "proc-net.txt", proc_counters)
    (art,) = load([path]).artifacts
    assert art.kind == Kind.NSTAT and art.attrs.get("format") == "proc"
    report, _ = diagnose_paths([path], min_severity=Severity.INFO)
    f = one(report, "KP304")
    assert "TcpExtListenOverflows" in f.summary and f.evidence[0].text.startswith("TcpExt: ")
    # the same counters as a shell session shows them
    session = "$ cat /proc/net/netstat /proc/net/snmp\n" + proc_counters
    report, _ = diagnose_paths([write(tmp_path, "session.txt", session)], min_severity=Severity.INFO)
    one(report, "KP304")


def test_a_names_line_without_its_values_is_not_read() -> None:
    assert parse_nstat("Udp: InDatagrams NoPorts InErrors\nTcp: 1 2 3\n").values == {}
    assert parse_nstat("Udp: InDatagrams NoPorts InErrors\nUdp: 1 2\n").values == {}  # a value short
