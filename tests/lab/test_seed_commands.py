"""The seeds' own commands as people run them, each read from its full and its filtered output.

Seed 004 tells users to look with `netstat -s | grep "buffer errors"`, `netstat -s | grep -E
'drop|overflow'`, `conntrack -S` and `ss -lnt`; seed 001 with `ipvsadm -Ln`. Each command runs
here for real in a network namespace this test creates (the overload staged in it: a listener
with a backlog of 1 that never accepts, a UDP socket with a 1 kB buffer), and its output is given
to kpdoctor as people paste it: with the command's prompt line, and bare. Both must be read as
what they are and name the loss they show. IPVS is not in this kernel: `ipvsadm -Ln` is a
captured listing, filtered the way people filter it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import DATA

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.facts import Facts
from kpdoctor.model import Severity

from .netns import Netns, require_lab
from .test_node_counters import OVERLOAD

require_lab()

COMMANDS = (
    "netstat -s",
    'netstat -s | grep "buffer errors"',
    "netstat -s | grep -E 'drop|overflow'",
    "conntrack -S",
    "ss -lnt",
    "sysctl -a 2>/dev/null | grep conntrack",
    "sysctl -a 2>/dev/null",
    # ss's rows a grep keeps (no header left): the listener's port, filled in when it is known
    "ss -lnt | grep :{port}",
    "ss -ltan | grep :{port}",
)


@pytest.fixture(scope="module")
def outputs() -> Iterator[dict[str, str]]:
    """Each command's output while the lab's overload (test_node_counters.OVERLOAD: a listener
    with backlog 1 that never accepts, a UDP socket with a 1 kB buffer) holds its sockets."""
    out = {}
    with Netns() as ns:
        ns.check(["ip", "link", "set", "lo", "up"])
        load = subprocess.Popen(
            ns.exec_argv([sys.executable, "-c", OVERLOAD]), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert load.stdout is not None
            port = load.stdout.readline().strip()  # the overload is done
            assert port
            time.sleep(1)
            out["port"] = port
            for cmd in COMMANDS:
                out[cmd] = ns.check(["sh", "-c", cmd.format(port=port)], timeout=30)
        finally:
            load.communicate("", timeout=30)
    yield out


def _pasted(tmp: Path, cmd: str, text: str, prompt: bool) -> Path:
    p = tmp / ("with-prompt.txt" if prompt else "bare.txt")
    p.write_text((f"root@node-1:~# {cmd}\n" if prompt else "") + text)
    return p


@pytest.mark.parametrize("prompt", [True, False], ids=["with-prompt", "bare"])
@pytest.mark.parametrize(
    ("cmd", "kind", "counter"),
    [
        ("netstat -s", Kind.NETSTAT, "TcpExtListenOverflows"),
        ('netstat -s | grep "buffer errors"', Kind.NETSTAT, "UdpRcvbufErrors"),
        ("netstat -s | grep -E 'drop|overflow'", Kind.NETSTAT, "TcpExtListenOverflows"),
        ("conntrack -S", Kind.CONNTRACK_STATS, "conntrack.insert_failed"),
    ],
)
def test_each_counter_command_is_read_full_and_filtered(
    outputs: dict[str, str], tmp_path: Path, cmd: str, kind: Kind, counter: str, prompt: bool
) -> None:
    ev = load([_pasted(tmp_path, cmd, outputs[cmd], prompt)])
    assert [a.kind for a in ev.artifacts] == [kind], (ev.artifacts, ev.problems)
    sample = Facts(ev).node_state.total(counter)
    assert sample is not None, (counter, outputs[cmd][:400])
    if counter != "conntrack.insert_failed":  # the staged overload shows in these
        assert sample.value > 0


@pytest.mark.parametrize("prompt", [True, False], ids=["with-prompt", "bare"])
@pytest.mark.parametrize("cmd", ["sysctl -a 2>/dev/null", "sysctl -a 2>/dev/null | grep conntrack"])
def test_sysctl_is_read_full_and_grepped_and_says_which(
    outputs: dict[str, str], tmp_path: Path, cmd: str, prompt: bool
) -> None:
    """Both give the conntrack settings; only the full listing proves a key absent (a grep'd
    one is "not shown" for anything it filtered out)."""
    ev = load([_pasted(tmp_path, cmd, outputs[cmd], prompt)])
    assert [a.kind for a in ev.artifacts] == [Kind.SYSCTL], (ev.artifacts, ev.problems)
    node = Facts(ev).node_state
    assert node.setting("net.netfilter.nf_conntrack_max") is not None
    assert (node.sysctl_complete is not None) == ("grep" not in cmd)


@pytest.mark.parametrize("prompt", [True, False], ids=["with-prompt", "bare"])
@pytest.mark.parametrize(
    "cmd", ["netstat -s | grep -E 'drop|overflow'", "ss -lnt", "ss -lnt | grep :{port}", "ss -ltan | grep :{port}"]
)
def test_the_staged_listen_overflow_is_named_from_either_command(
    outputs: dict[str, str], tmp_path: Path, cmd: str, prompt: bool
) -> None:
    pasted = _pasted(tmp_path, cmd.format(port=outputs["port"]), outputs[cmd], prompt)
    rep, _ = diagnose_paths([pasted], min_severity=Severity.INFO)
    assert [f.cause for f in rep.findings][:1] == ["listen-queue-overflow"], [f.summary for f in rep.findings]


def test_the_buffer_errors_grep_names_the_socket_buffer_overflow(outputs: dict[str, str], tmp_path: Path) -> None:
    cmd = 'netstat -s | grep "buffer errors"'
    rep, _ = diagnose_paths([_pasted(tmp_path, cmd, outputs[cmd], True)], min_severity=Severity.INFO)
    assert [f.cause for f in rep.findings][:1] == ["socket-buffer-overflow"], [f.summary for f in rep.findings]


@pytest.mark.parametrize("prompt", [True, False], ids=["with-prompt", "bare"])
@pytest.mark.parametrize("filtered", [False, True], ids=["full", "grep"])
def test_ipvsadm_is_read_full_and_filtered(tmp_path: Path, prompt: bool, filtered: bool) -> None:
    listing = DATA / "ipvsadm" / "persistent-opsnull-251.txt"  # a numeric listing (-Ln), as posted
    text = listing.read_text().split("\n", 1)[1]  # the listing without the prompt it was posted with
    cmd = "ipvsadm -Ln"
    if filtered:  # `ipvsadm -Ln | grep -A3 TCP`: the header lines gone
        text = "".join(ln + "\n" for ln in text.splitlines() if "TCP" in ln or ("->" in ln and "Remote" not in ln))
        cmd += " | grep -A3 TCP"
    ev = load([_pasted(tmp_path, cmd, text, prompt)])
    assert [a.kind for a in ev.artifacts] == [Kind.IPVSADM], (ev.artifacts, ev.problems)
    assert Facts(ev).ipvs_listed, text[:300]
