"""How full the conntrack table is, from the commands people run to look at it.

`conntrack -L` ends with its own summary on stderr, `N flow entries have been shown.`: on a
terminal it is there even when the listing is piped through grep or wc, and it is often the only
count a report holds. `conntrack -C` prints the table's use alone, a bare number. Each command runs
here for real, in a network namespace this test creates (a conntrack match so that the namespace
tracks flows, then UDP flows to its loopback), under a pseudo-terminal, so the text is what the
user saw; it is given to kpdoctor with its prompt line and bare.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.facts import Facts
from kpdoctor.model import Severity

from .netns import Netns, require_lab

require_lab()

FLOWS = 12
# UDP flows from their own source ports to four ports of the namespace's loopback
SEND = f"""
import socket
for i in range({FLOWS}):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"x", ("127.0.0.1", 9990 + i % 4))
"""
LISTINGS = (
    "conntrack -L",
    "conntrack -L | grep dport=9991",
    "conntrack -L | grep dport=9991 | wc -l",  # as posted in write-ups: the summary, then the number
    "conntrack -L -p udp",
)
# the listing counted with its summary sent away: only the number is left
COUNTED = ("conntrack -L 2>/dev/null | wc -l", "cat /proc/net/nf_conntrack | wc -l")


@pytest.fixture(scope="module")
def seen() -> Iterator[dict[str, str]]:
    """Each command as a terminal showed it, and the count the kernel gives (`conntrack -C`)."""
    out = {}
    with Netns() as ns:
        ns.check(["ip", "link", "set", "lo", "up"])
        ns.check(["iptables-legacy", "-A", "OUTPUT", "-m", "conntrack", "--ctstate", "NEW", "-j", "ACCEPT"])
        ns.check([sys.executable, "-c", SEND])
        for cmd in (*LISTINGS, *COUNTED, "conntrack -C", "sysctl net.netfilter.nf_conntrack_max"):
            code, text = ns.run_tty(["sh", "-c", cmd])
            assert code == 0, (cmd, text)
            out[cmd] = text
    yield out


def _pasted(tmp: Path, cmd: str, text: str, prompt: bool) -> Path:
    p = tmp / ("with-prompt.txt" if prompt else "bare.txt")
    p.write_text((f"root@node-1:~# {cmd}\n" if prompt else "") + text)
    return p


def test_the_namespace_tracks_the_flows_sent(seen: dict[str, str]) -> None:
    assert int(seen["conntrack -C"].strip()) == FLOWS
    assert f"{FLOWS} flow entries have been shown." in seen["conntrack -L"]


@pytest.mark.parametrize("prompt", [True, False], ids=["with-prompt", "bare"])
@pytest.mark.parametrize("cmd", LISTINGS)
def test_a_listing_says_how_many_entries_the_table_held_however_it_was_filtered(
    seen: dict[str, str], tmp_path: Path, cmd: str, prompt: bool
) -> None:
    ev = load([_pasted(tmp_path, cmd, seen[cmd], prompt)])
    assert [a.kind for a in ev.artifacts] == [Kind.CONNTRACK_ENTRIES], (ev.artifacts, ev.problems, seen[cmd])
    listed = Facts(ev).node_state.conntrack_listed
    assert listed is not None and listed[0] == FLOWS, listed


@pytest.mark.parametrize("cmd", COUNTED)
def test_a_listing_counted_whole_says_how_many_entries_the_table_held(
    seen: dict[str, str], tmp_path: Path, cmd: str
) -> None:
    assert seen[cmd].strip() == str(FLOWS), seen[cmd]
    listed = Facts(load([_pasted(tmp_path, cmd, seen[cmd], True)])).node_state.conntrack_listed
    assert listed is not None and listed[0] == FLOWS, listed


def test_conntrack_count_is_the_tables_use(seen: dict[str, str], tmp_path: Path) -> None:
    ev = load([_pasted(tmp_path, "conntrack -C", seen["conntrack -C"], True)])
    setting = Facts(ev).node_state.setting("net.netfilter.nf_conntrack_count")
    assert setting is not None and setting.int() == FLOWS


def test_a_table_far_from_its_limit_is_not_reported(seen: dict[str, str], tmp_path: Path) -> None:
    paste = "".join(f"root@node-1:~# {c}\n{seen[c]}" for c in ("conntrack -L", "sysctl net.netfilter.nf_conntrack_max"))
    (tmp_path / "paste.txt").write_text(paste)
    rep, _ = diagnose_paths([tmp_path / "paste.txt"], min_severity=Severity.INFO)
    assert "KP301" not in [f.code for f in rep.findings]


@pytest.mark.parametrize("cmd", ["conntrack -L | grep dport=9991", "conntrack -C"])
def test_a_table_at_its_limit_is_full(seen: dict[str, str], tmp_path: Path, cmd: str) -> None:
    """The namespace's limit cannot be lowered (nf_conntrack_max is the initial namespace's), so
    the limit line is sysctl's format with the value the listing reached: the table at its limit."""
    paste = f"root@node-1:~# {cmd}\n{seen[cmd]}root@node-1:~# sysctl net.netfilter.nf_conntrack_max\n"
    paste += f"net.netfilter.nf_conntrack_max = {FLOWS}\n"
    (tmp_path / "paste.txt").write_text(paste)
    rep, _ = diagnose_paths([tmp_path / "paste.txt"], min_severity=Severity.INFO)
    first = rep.findings[0]
    assert (first.code, first.severity) == ("KP301", Severity.CRITICAL), [f.summary for f in rep.findings]
    # a listing's count is a floor (one family, what its filters select); conntrack -C's is the use
    assert ("at least" in first.summary) == cmd.startswith("conntrack -L"), first.summary
