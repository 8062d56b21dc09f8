"""KP301 conntrack-table-full: from the kernel log and from a nearly full table."""

from __future__ import annotations

from pathlib import Path

from checks.helpers import codes, run
from conftest import one, write

from kpdoctor.model import Severity


def test_table_full_from_dmesg_and_a_nearly_full_table(tmp_path: Path) -> None:
    dmesg = write(
        tmp_path,
        "dmesg.txt",
        "[ 8123.114160] nf_conntrack: nf_conntrack: table full, dropping packet\n"
        "[ 8123.114800] net_ratelimit: 187 callbacks suppressed\n"
        "[ 8128.201233] nf_conntrack: nf_conntrack: table full, dropping packet\n",
    )
    sysctl = write(
        tmp_path, "sysctl.txt", "net.netfilter.nf_conntrack_count = 262000\nnet.netfilter.nf_conntrack_max = 262144\n"
    )
    f = one(run([dmesg, sysctl]), "KP301")
    assert f.severity == Severity.CRITICAL
    assert "262000 of 262144 entries in use (100%)" in f.summary
    assert "2 time(s)" in f.summary
    assert f.evidence[0].line == 1 and f.evidence[1].line == 3
    assert any("nf_conntrack_max=524288" in x for x in f.fix)
    # the log line alone: it happened, when is unknown
    alone = one(run([dmesg]), "KP301")
    assert alone.severity == Severity.WARNING


def test_journalctl_table_full_and_old_kernel_spelling(tmp_path: Path) -> None:
    j = write(
        tmp_path,
        "kern.txt",
        "Nov 21 09:58:01 node-1 kernel: nf_conntrack: table full, dropping packet.\n"
        "Nov 21 09:58:02 node-1 kernel: eth0: link up\n",
    )
    assert one(run([j]), "KP301").severity == Severity.WARNING


def test_proc_sys_values_in_a_transcript(tmp_path: Path) -> None:
    text = (
        "[root@node-1 ~]# cat /proc/sys/net/netfilter/nf_conntrack_count\n131000\n"
        "[root@node-1 ~]# sysctl -n net.netfilter.nf_conntrack_max\n131072\n"
    )
    f = one(run([write(tmp_path, "t.txt", text)]), "KP301")
    assert f.severity == Severity.CRITICAL
    assert "131000 of 131072 entries in use" in f.summary
    assert [c.line for c in f.evidence] == [2, 4]


def test_a_half_full_table_is_quiet(tmp_path: Path) -> None:
    s = write(
        tmp_path, "sysctl.txt", "net.netfilter.nf_conntrack_count = 1000\nnet.netfilter.nf_conntrack_max = 262144\n"
    )
    assert "KP301" not in codes(run([s]))
