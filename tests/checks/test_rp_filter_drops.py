"""KP315 rp-filter-drops: reverse-path filtering that drops packets on asymmetric paths.

The kernel's own evidence: its counter (LINUX_MIB_IPRPFILTER, `IPReversePathFilter` under
`TcpExt:` in `netstat -s`, `TcpExtIPReversePathFilter` in nstat) and its martian-source lines
(net/ipv4/route.c: "martian source %pI4 from %pI4, on dev %s", the destination first); the
settings as sysctl and `grep -H . /proc/sys/...` print them.
"""

from __future__ import annotations

from pathlib import Path

from checks.helpers import run
from conftest import none_of, one, write

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.facts import Facts
from kpdoctor.model import Confidence, Severity

# posted: cloudnativelabs/kube-router#511 (dmesg) and #812 (the journal's form)
MARTIAN = "[81635.233492] IPv4: martian source 10.104.5.122 from 10.116.4.1, on dev kube-bridge\n"
MARTIAN_JOURNAL = (
    "Nov 14 02:48:18 ip-10-0-0-182.ec2.internal kernel: IPv4: martian source 100.96.236.156 from 10.0.0.41, "
    "on dev tun-102522758\n"
)
STRICT = (
    "net.ipv4.conf.all.arp_filter = 0\n"
    "net.ipv4.conf.all.rp_filter = 1\n"
    "net.ipv4.conf.default.rp_filter = 1\n"
    "net.ipv4.conf.eth0.rp_filter = 0\n"
    "net.ipv4.conf.kube-bridge.rp_filter = 1\n"
)
NETSTAT = """Ip:
    Forwarding: 1
    8812341 total packets received
    0 forwarded
TcpExt:
    12 packets pruned from receive queue because of socket buffer overrun
    TCPSackShiftFallback: 177
    IPReversePathFilter: {}
    TCPRcvCoalesce: 1501457
"""


def test_a_grep_of_proc_sys_is_read_as_settings(tmp_path: Path) -> None:
    """`grep -H . /proc/sys/net/ipv4/conf/*/rp_filter`: the file, a colon, its value; a dot in an
    interface's name is a slash in sysctl's dotted form."""
    text = (
        "/proc/sys/net/ipv4/conf/all/rp_filter:2\n"
        "/proc/sys/net/ipv4/conf/eth0/rp_filter:0\n"
        "/proc/sys/net/ipv4/conf/flannel.1/rp_filter:1\n"
    )
    facts = Facts(load([write(tmp_path, "rp.txt", text)]))
    assert [a.kind for a in facts.evidence.artifacts] == [Kind.SYSCTL]
    got = {k: v.value for k, v in facts.node_state.sysctls.items()}
    assert got == {
        "net.ipv4.conf.all.rp_filter": "2",
        "net.ipv4.conf.eth0.rp_filter": "0",
        "net.ipv4.conf.flannel/1.rp_filter": "1",
    }
    assert facts.node_state.setting("net.ipv4.conf.flannel/1.rp_filter").cite.line == 3  # type: ignore[union-attr]


def test_a_martian_source_with_strict_filtering_is_a_warning(tmp_path: Path) -> None:
    f = one(run([write(tmp_path, "dmesg.txt", MARTIAN), write(tmp_path, "sysctl.txt", STRICT)]), "KP315")
    assert f.cause == "rp-filter-drops" and f.severity == Severity.WARNING and f.confidence == Confidence.MEDIUM
    # the kernel prints the destination first: the packet came from 10.116.4.1
    assert "from 10.116.4.1 to 10.104.5.122 arriving on kube-bridge" in f.summary
    assert "conf/all = 1" in f.summary and not f.suspected
    assert any("martian source" in e.text for e in f.evidence)
    assert any(e.text == "net.ipv4.conf.all.rp_filter = 1" for e in f.evidence)


def test_a_martian_source_alone_is_suspected_and_says_what_decides(tmp_path: Path) -> None:
    f = one(run([write(tmp_path, "journal.txt", MARTIAN_JOURNAL)]), "KP315")
    assert f.suspected and f.confidence == Confidence.LOW
    assert any("rp_filter" in d for d in f.decided_by) and any("TcpExtIPReversePathFilter" in d for d in f.decided_by)
    assert "on tun-102522758" in f.summary


def test_martians_the_filter_does_not_make_are_not_its_drops(tmp_path: Path) -> None:
    """A loopback or zero source is refused on any interface (not this cause); a martian on an
    interface whose filtering is shown off has another reason."""
    loop = "[ 12.5] IPv4: martian source 10.96.0.1 from 127.0.0.1, on dev eth0\n"
    none_of(run([write(tmp_path, "a.txt", loop)]), "KP315")
    off = "net.ipv4.conf.all.rp_filter = 0\nnet.ipv4.conf.kube-bridge.rp_filter = 0\n"
    none_of(run([write(tmp_path, "dmesg.txt", MARTIAN), write(tmp_path, "sysctl.txt", off)]), "KP315")


def test_the_kernel_s_counter_proves_it_and_two_snapshots_say_it_is_now(tmp_path: Path) -> None:
    f = one(run([write(tmp_path, "netstat.txt", NETSTAT.format(4))]), "KP315")
    assert f.confidence == Confidence.HIGH and f.severity == Severity.INFO  # 4 of 8.8 million, since boot
    assert "4 packets dropped by the reverse-path filter (TcpExtIPReversePathFilter) since boot" in f.summary
    assert "IPReversePathFilter: 4" in [e.text for e in f.evidence]
    paste = (
        "$ nstat -az TcpExtIPReversePathFilter\n#kernel\nTcpExtIPReversePathFilter       2360               0.0\n"
        "$ sleep 60; nstat -az TcpExtIPReversePathFilter\n#kernel\nTcpExtIPReversePathFilter       2871               0.0\n"
    )
    grown = one(run([write(tmp_path, "nstat.txt", paste), write(tmp_path, "sysctl.txt", STRICT)]), "KP315")
    assert grown.severity == Severity.WARNING and grown.confidence == Confidence.HIGH
    assert "(TcpExtIPReversePathFilter) grew by 511 between the two snapshots (2360 -> 2871)" in grown.summary
    none_of(run([write(tmp_path, "kp140.txt", NETSTAT.format(4))]), "KP140")  # the check reads its own counter


def test_strict_filtering_alone_is_a_lead_at_info(tmp_path: Path) -> None:
    f = one(run([write(tmp_path, "sysctl.txt", STRICT)]), "KP315")
    assert f.severity == Severity.INFO and f.suspected and f.confidence == Confidence.LOW
    assert "every interface strict" in f.summary
    loose = "net.ipv4.conf.all.rp_filter = 2\nnet.ipv4.conf.eth0.rp_filter = 2\n"
    none_of(run([write(tmp_path, "loose.txt", loose)]), "KP315")  # loose alone drops only the unroutable
