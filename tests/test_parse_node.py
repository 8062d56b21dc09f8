"""Node parsers (conntrack, sysctl, SNMP counters, sockets, links, kernel log) on real captures.

The files under tests/data/node/ were captured on Debian 12 (kernel 6.18, iproute2 6.1, net-tools 2.10,
conntrack-tools 1.4.7) inside throw-away network namespaces; see tests/data/node/SOURCES.md. Formats this
machine cannot produce (old kernels and tools) are written inline, following the tools' print formats.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kpdoctor.parse.conntrack import (
    parse_conntrack_entries,
    parse_conntrack_stats,
    parse_nf_conntrack_stat,
)
from kpdoctor.parse.kernel_log import parse_kernel_log
from kpdoctor.parse.links import parse_ip_link
from kpdoctor.parse.netstat import parse_netstat_s, parse_nstat
from kpdoctor.parse.sockets import parse_ss_listen
from kpdoctor.parse.sysctl import int_values, parse_sysctl, port_set

NODE = Path(__file__).resolve().parent / "data" / "node"


def read(name: str) -> str:
    return (NODE / name).read_text(encoding="utf-8")


# -- conntrack -S ---------------------------------------------------------------------------------------------


def test_conntrack_s_new_field_set_real() -> None:
    st = parse_conntrack_stats(read("conntrack-S-6.18-invalid.txt"), first_line=10)
    assert st is not None
    assert st.cpus == 2
    assert st.entries is None
    assert st.totals["invalid"] == 12  # 0 on cpu 0, 12 on cpu 1
    assert st.totals["clash_resolve"] == 0 and st.totals["chaintoolong"] == 0
    assert "ignore" not in st.totals and "searched" not in st.totals
    assert set(st.totals) == {
        "found",
        "invalid",
        "insert",
        "insert_failed",
        "drop",
        "early_drop",
        "error",
        "search_restart",
        "clash_resolve",
        "chaintoolong",
    }
    assert st.line == 10
    assert st.text.startswith("cpu=0") and st.text.endswith("chaintoolong=0")


# kernel 3.10 (CentOS 7): printf("cpu=%-4u\t") then "%s=%u " per attribute the kernel sent.
CONNTRACK_S_3X = (
    "cpu=0   \tsearched=1187347 found=62463734 new=1233431 invalid=1129 ignore=53 delete=1221334 "
    "delete_list=1221290 insert=1233387 insert_failed=7 drop=2 early_drop=0 error=73 search_restart=0 \n"
    "cpu=1   \tsearched=988801 found=51002133 new=1033002 invalid=871 ignore=12 delete=1022001 "
    "delete_list=1021950 insert=1032990 insert_failed=5 drop=1 early_drop=3 error=40 search_restart=0 \n"
)
# kernel 4.15 (Ubuntu 18.04).
CONNTRACK_S_4X = (
    "cpu=0   \tfound=175 invalid=3 ignore=84573 insert=0 insert_failed=12 drop=12 early_drop=0 error=0 "
    "search_restart=87 \n"
    "cpu=1   \tfound=180 invalid=1 ignore=90811 insert=0 insert_failed=30 drop=30 early_drop=0 error=0 "
    "search_restart=65 \n"
    "cpu=2   \tfound=160 invalid=0 ignore=80002 insert=0 insert_failed=9 drop=9 early_drop=0 error=1 "
    "search_restart=70 \n"
)


def test_conntrack_s_kernel_3x_fields() -> None:
    st = parse_conntrack_stats(CONNTRACK_S_3X, first_line=4)
    assert st is not None
    assert st.cpus == 2
    assert st.totals["searched"] == 1187347 + 988801
    assert st.totals["delete_list"] == 1221290 + 1021950
    assert st.totals["insert_failed"] == 12
    assert st.totals["drop"] == 3
    assert st.totals["early_drop"] == 3
    assert st.totals["error"] == 113
    assert "clash_resolve" not in st.totals
    assert st.line == 4


def test_conntrack_s_kernel_4x_fields() -> None:
    st = parse_conntrack_stats(CONNTRACK_S_4X)
    assert st is not None
    assert st.cpus == 3
    assert st.totals["insert_failed"] == 51
    assert st.totals["drop"] == 51
    assert st.totals["ignore"] == 84573 + 90811 + 80002
    assert st.totals["search_restart"] == 222
    assert "searched" not in st.totals and "clash_resolve" not in st.totals


def test_conntrack_s_proc_fallback_and_tolerated_forms() -> None:
    # conntrack(8) falls back to /proc: /proc names, decimal values, "entries" on every row.
    text = (
        "cpu=0   \tentries=4784 clashres=2292 found=0 new=0 invalid=10 ignore=0 delete=0 chainlength=1 insert=0 "
        "insert_failed=3 drop=3 early_drop=0 icmp_error=2 expect_new=0 expect_create=0 expect_delete=0 "
        "search_restart=4 \n"
        "cpu=1   \tentries=4784 clashres=100 found=0 new=0 invalid=0 ignore=0 delete=0 chainlength=0 insert=0 "
        "insert_failed=1 drop=1 early_drop=0 icmp_error=0 expect_new=0 expect_create=0 expect_delete=0 "
        "search_restart=0 \n"
    )
    st = parse_conntrack_stats(text)
    assert st is not None
    assert st.entries == 4784  # taken once, not summed
    assert "entries" not in st.totals
    assert st.totals["clash_resolve"] == 2392
    assert st.totals["chaintoolong"] == 1
    assert st.totals["error"] == 2
    assert st.totals["insert_failed"] == 4
    # A row without cpu= counts as one row.
    st = parse_conntrack_stats("found=1 invalid=2 insert_failed=3 drop=4\n")
    assert st is not None and st.cpus == 1 and st.totals["insert_failed"] == 3


def test_conntrack_s_old_summary_form() -> None:
    # Old conntrack-tools: printf("%-10s\t\t%-8u\n", name, value) from /proc (decimal).
    text = (
        "entries   \t\t120     \n"
        "searched  \t\t1187347 \n"
        "found     \t\t62463734\n"
        "new       \t\t1233431 \n"
        "insert_failed\t\t42      \n"
        "drop      \t\t5       \n"
        "icmp_error\t\t73      \n"
    )
    st = parse_conntrack_stats(text, first_line=3)
    assert st is not None
    assert st.entries == 120
    assert st.totals["searched"] == 1187347
    assert st.totals["insert_failed"] == 42
    assert st.totals["error"] == 73
    assert st.cpus == 1
    assert st.line == 3 and st.text.startswith("entries")


# -- /proc/net/stat/nf_conntrack --------------------------------------------------------------------------------


def test_proc_stat_current_header_real() -> None:
    st = parse_nf_conntrack_stat(read("proc-stat-nf_conntrack-6.18-invalid.txt"), first_line=20)
    assert st is not None
    assert st.cpus == 2
    assert st.entries == 7  # 00000007 on both rows: the global count, once
    assert st.totals["invalid"] == 12  # 0x0c on cpu 1
    assert st.totals["clash_resolve"] == 0
    assert st.totals["chaintoolong"] == 0
    assert st.totals["error"] == 0
    assert "clashres" not in st.totals and "chainlength" not in st.totals and "icmp_error" not in st.totals
    assert "searched" not in st.totals and "delete_list" not in st.totals
    assert st.line == 21
    assert st.text.startswith("00000007  00000000")


PROC_OLD = (  # <= 5.9
    "entries  searched found new invalid ignore delete delete_list insert insert_failed drop early_drop icmp_error"
    "  expect_new expect_create expect_delete search_restart\n"
    "000012b0  00000010 0000ff00 00000100 00000002 00000003 000000f0 000000e0 00000100 0000000a 00000001 00000000"
    " 00000004  00000000 00000000 00000000 00000001\n"
    "000012b0  00000020 0000ff00 00000200 00000000 00000001 000001f0 000001e0 00000200 00000006 00000002 00000001"
    " 00000000  00000000 00000000 00000000 00000002\n"
)
PROC_510 = (  # 5.10 - 5.14: column 2 renamed to clashres
    "entries  clashres found new invalid ignore delete delete_list insert insert_failed drop early_drop icmp_error"
    "  expect_new expect_create expect_delete search_restart\n"
    "00000400  00000005 00000000 00000000 00000001 00000000 00000000 00000000 00000000 00000002 00000002 00000000"
    " 00000000  00000000 00000000 00000000 00000000\n"
    "00000400  0000000b 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001 00000001 00000000"
    " 00000003  00000000 00000000 00000000 00000000\n"
    "00000400  00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000"
    " 00000000  00000000 00000000 00000000 00000000\n"
)


def test_proc_stat_old_header_keeps_searched_and_delete_list() -> None:
    st = parse_nf_conntrack_stat(PROC_OLD)
    assert st is not None
    assert st.cpus == 2
    assert st.entries == 0x12B0
    assert st.totals["searched"] == 0x30
    assert st.totals["delete_list"] == 0xE0 + 0x1E0
    assert st.totals["found"] == 0x1FE00
    assert st.totals["insert_failed"] == 16
    assert st.totals["drop"] == 3
    assert st.totals["early_drop"] == 1
    assert st.totals["error"] == 4  # icmp_error
    assert st.totals["search_restart"] == 3
    assert "clash_resolve" not in st.totals and "chaintoolong" not in st.totals


def test_proc_stat_510_header_clashres() -> None:
    st = parse_nf_conntrack_stat(PROC_510, first_line=7)
    assert st is not None
    assert st.cpus == 3
    assert st.entries == 1024
    assert st.totals["clash_resolve"] == 16
    assert st.totals["delete_list"] == 0  # still delete_list before 5.15
    assert "chaintoolong" not in st.totals
    assert st.totals["insert_failed"] == 3
    assert st.totals["error"] == 3
    assert st.line == 8


def test_proc_stat_rows_that_do_not_fit_are_skipped() -> None:
    text = PROC_510 + "00000400 zzzz\nnot a row at all\n"
    st = parse_nf_conntrack_stat(text)
    assert st is not None and st.cpus == 3
    assert parse_nf_conntrack_stat("00000001 00000002\n") is None  # no header


# -- conntrack entries ----------------------------------------------------------------------------------------


def test_conntrack_l_real_nat_entries() -> None:
    # Router netns: DNAT 10.96.0.10:80 -> 10.0.1.7:8080 and MASQUERADE out of 10.0.1.1.
    # The "conntrack v1.4.7 (conntrack-tools): 7 flow entries have been shown." line (stderr) is line 1.
    entries = parse_conntrack_entries(read("conntrack-L-nat.txt"), first_line=100)
    assert len(entries) == 7
    by_line = {e.line: e for e in entries}
    assert 100 not in by_line

    udp_unreplied = by_line[101]
    assert (udp_unreplied.proto, udp_unreplied.state) == ("udp", None)
    assert udp_unreplied.flags == ("UNREPLIED",)
    assert (udp_unreplied.src, udp_unreplied.dst, udp_unreplied.sport, udp_unreplied.dport) == (
        "10.244.0.5",
        "10.0.1.7",
        33292,
        9999,
    )
    assert udp_unreplied.snat and not udp_unreplied.dnat

    syn = by_line[102]
    assert syn.state == "SYN_SENT" and syn.flags == ("UNREPLIED",) and syn.timeout == 119

    svc = by_line[103]
    assert svc.proto == "tcp" and svc.state == "ESTABLISHED"
    assert (svc.dst, svc.dport) == ("10.96.0.10", 80)
    assert (svc.reply_src, svc.reply_sport, svc.reply_dst, svc.reply_dport) == ("10.0.1.7", 8080, "10.0.1.1", 49690)
    assert svc.flags == ("ASSURED",)
    assert svc.dnat and svc.snat

    icmp = by_line[104]
    assert icmp.proto == "icmp" and icmp.state is None
    assert icmp.sport is None and icmp.dport is None and icmp.reply_sport is None
    assert icmp.snat and not icmp.dnat

    dns = by_line[105]
    assert dns.proto == "udp" and dns.flags == () and dns.dnat and dns.reply_sport == 5353

    local6 = by_line[107]
    assert (local6.src, local6.dst, local6.dport) == ("::1", "::1", 6443)
    assert not local6.snat and not local6.dnat


def test_proc_nf_conntrack_real() -> None:
    entries = parse_conntrack_entries(read("proc-nf_conntrack-nat.txt"))
    assert len(entries) == 7
    assert [e.family for e in entries] == ["ipv4"] * 6 + ["ipv6"]
    v6 = entries[-1]
    assert v6.src == "::1" and v6.reply_dst == "::1"  # 0000:...:0001 compressed
    assert v6.line == 7
    svc = entries[2]
    assert svc.state == "ESTABLISHED" and svc.dnat and svc.reply_sport == 8080 and svc.timeout == 431999


def test_conntrack_entries_port_only_nat_and_events() -> None:
    text = (
        # SNAT that only changed the source port (same address): --random-fully style.
        "udp      17 25 src=10.0.0.5 dst=10.0.0.9 sport=5000 dport=53 src=10.0.0.9 dst=10.0.0.5 sport=53 "
        "dport=61234 mark=0 use=1\n"
        "    [NEW] tcp      6 120 SYN_SENT src=10.0.0.5 dst=10.96.0.1 sport=40000 dport=443 [UNREPLIED] "
        "src=10.0.0.2 dst=10.0.0.5 sport=6443 dport=40000\n"
        "tcp      6 431999 ESTABLISHED src=10.0.0.1 dst=10.96.0.1\n"  # cut: no reply tuple
    )
    e = parse_conntrack_entries(text, first_line=5)
    assert len(e) == 2
    assert e[0].snat and not e[0].dnat
    assert e[1].line == 6 and e[1].dnat and not e[1].snat and e[1].flags == ("UNREPLIED",)


# -- sysctl ---------------------------------------------------------------------------------------------------


def test_sysctl_a_real() -> None:
    s = parse_sysctl(read("sysctl-a-netns.txt"), first_line=2)
    port_range = s["net.ipv4.ip_local_port_range"]
    assert port_range.value == "32768 60999"  # a TAB in the output
    assert port_range.line == 372
    assert port_range.text == "net.ipv4.ip_local_port_range = 32768\t60999"
    assert int_values(port_range.value) == [32768, 60999]
    assert s["net.core.somaxconn"].value == "4096"
    assert s["net.netfilter.nf_conntrack_max"].value == "262144"
    reserved = s["net.ipv4.ip_local_reserved_ports"]
    assert reserved.value == "8080,30000-32767"
    assert port_set(reserved.value) == [(8080, 8080), (30000, 32767)]
    # Interface names with dots print as slashes.
    assert s["net.ipv4.conf.flannel/1.rp_filter"].value == "0"
    # A multi-line value repeats the key on consecutive lines.
    assert s["kernel.core_modes"].value == "file pipe socket"


def test_sysctl_named_with_errors_and_forms() -> None:
    s = parse_sysctl(read("sysctl-named.txt"), first_line=1)
    assert list(s) == [
        "net.ipv4.ip_local_port_range",
        "net.core.somaxconn",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.conf.flannel/1.rp_filter",
    ]
    assert s["net.ipv4.conf.flannel/1.rp_filter"].line == 5  # line 4 is "sysctl: cannot stat ..."
    text = (
        "net/ipv4/ip_forward = 1\n"
        "/proc/sys/net/core/somaxconn=128\n"
        "net/ipv4/conf/flannel.1/rp_filter = 2\n"
        "net.ipv4.ip_local_reserved_ports =\n"
        "sysctl: permission denied on key 'net.ipv6.conf.all.stable_secret'\n"
        "# net.ipv4.tcp_syncookies = 1\n"
        "net.ipv4.tcp_rmem = 4096\t131072  6291456\n"
    )
    s = parse_sysctl(text, first_line=11)
    assert s["net.ipv4.ip_forward"].value == "1" and s["net.ipv4.ip_forward"].line == 11
    assert s["net.core.somaxconn"].value == "128"
    assert s["net.ipv4.conf.flannel/1.rp_filter"].value == "2"
    assert s["net.ipv4.ip_local_reserved_ports"].value == ""
    assert port_set(s["net.ipv4.ip_local_reserved_ports"].value) == []
    assert "net.ipv6.conf.all.stable_secret" not in s and "net.ipv4.tcp_syncookies" not in s
    assert s["net.ipv4.tcp_rmem"].value == "4096 131072 6291456"


def test_sysctl_value_helpers() -> None:
    assert int_values("32768 60999") == [32768, 60999]
    assert int_values("abc 5 x7 -1") == [5, -1]
    assert int_values("") == []
    assert port_set("8080,9000-9100") == [(8080, 8080), (9000, 9100)]
    assert port_set("9100-9000, x, 70000-x,22") == [(22, 22)]


# -- netstat -s / nstat ---------------------------------------------------------------------------------------


def test_netstat_s_real_v4() -> None:
    c = parse_netstat_s(read("netstat-s-overflow.txt"), first_line=50)
    assert c.source == "netstat -s"
    assert c.values["TcpExtListenOverflows"] == 18
    assert c.lines["TcpExtListenOverflows"] == (85, "18 times the listen queue of a socket overflowed")
    assert c.values["TcpExtListenDrops"] == 18
    assert c.values["UdpRcvbufErrors"] == 199
    assert c.lines["UdpRcvbufErrors"] == (81, "199 receive buffer errors")
    assert c.values["UdpSndbufErrors"] == 0
    assert c.values["UdpInErrors"] == 199
    assert c.values["UdpOutDatagrams"] == 200
    assert c.values["TcpRetransSegs"] == 12
    # "Name: value" lines: the section is the prefix.
    assert c.values["TcpExtTCPLostRetransmit"] == 6
    assert c.values["TcpExtTcpTimeoutRehash"] == 12
    assert c.values["IpExtInOctets"] == 207128
    assert c.values["IpForwarding"] == 2
    assert not any(k.startswith("Udp6") for k in c.values)  # no Udp6 section without -6


def test_netstat_s_real_v6() -> None:
    c = parse_netstat_s(read("netstat-s6-overflow.txt"))
    assert c.values["Udp6InErrors"] == 199
    assert c.lines["Udp6InErrors"] == (20, "199 packet receive errors")
    assert c.values["Udp6RcvbufErrors"] == 199
    assert c.values["Udp6OutDatagrams"] == 200
    assert c.values["Ip6OutForwDatagrams"] == 0
    assert c.values["Ip6InOctets"] == 209600
    assert "UdpInErrors" not in c.values and "UdpRcvbufErrors" not in c.values
    assert c.values["TcpActiveOpens"] == 8  # the -6 output repeats Tcp:


def test_netstat_s_drop_phrases_and_old_spellings() -> None:
    text = """\
Tcp:
    12 active connections openings
    3 passive connection openings
    1000 segments send out
    7 segments retransmited
    2 bad segments received.
UdpLite:
    4 receive buffer errors
    5 send buffer errors
TcpExt:
    9 packets pruned from receive queue because of socket buffer overrun
    8 packets pruned from receive queue
    6 packets collapsed in receive queue due to low socket buffer
    2 packets dropped from out-of-order queue because of socket buffer overrun
    11 SYNs to LISTEN sockets ignored
    40 TIMES THE LISTEN QUEUE OF A SOCKET OVERFLOWED
    Quick ack mode was activated 17 times
    TCPBacklogDrop: 4
    TCPRcvQDrop: 5
    TCPTimeWaitOverflow: 6
Udp:
    3 packets send
Icmp:
    ICMP input histogram:
        destination unreachable: 7
    ICMP output histogram:
        destination unreachable: 9
"""
    c = parse_netstat_s(text)
    assert c.values["TcpActiveOpens"] == 12
    assert c.values["TcpOutSegs"] == 1000
    assert c.values["TcpRetransSegs"] == 7
    assert c.values["TcpInErrs"] == 2
    assert c.values["UdpLiteRcvbufErrors"] == 4
    assert c.values["UdpLiteSndbufErrors"] == 5
    assert c.values["TcpExtPruneCalled"] == 9
    assert c.values["TcpExtRcvPruned"] == 8
    assert c.values["TcpExtTCPRcvCollapsed"] == 6
    assert c.values["TcpExtOfoPruned"] == 2
    assert c.values["TcpExtListenDrops"] == 11
    assert c.values["TcpExtListenOverflows"] == 40
    assert c.values["TcpExtDelayedACKLost"] == 17
    assert c.values["TcpExtTCPBacklogDrop"] == 4
    assert c.values["TcpExtTCPRcvQDrop"] == 5
    assert c.lines["TcpExtTCPRcvQDrop"] == (19, "TCPRcvQDrop: 5")
    assert c.values["TcpExtTCPTimeWaitOverflow"] == 6
    assert c.values["UdpOutDatagrams"] == 3
    assert c.values["IcmpInDestUnreachs"] == 7
    assert c.values["IcmpOutDestUnreachs"] == 9


def test_nstat_az_real() -> None:
    c = parse_nstat(read("nstat-az-overflow.txt"), first_line=3)
    assert c.source == "nstat"
    assert len(c.values) == 390
    assert c.values["TcpExtListenOverflows"] == 18
    assert c.lines["TcpExtListenOverflows"] == (187, "TcpExtListenOverflows           18                 0.0")
    assert c.values["TcpExtListenDrops"] == 18
    assert c.values["UdpRcvbufErrors"] == 199
    assert c.values["Udp6RcvbufErrors"] == 199
    assert c.values["Udp6InErrors"] == 199
    for zero in (
        "TcpExtPruneCalled",
        "TcpExtRcvPruned",
        "TcpExtTCPRcvQDrop",
        "TcpExtTCPBacklogDrop",
        "TcpExtTCPTimeWaitOverflow",
        "UdpSndbufErrors",
        "Udp6SndbufErrors",
        "UdpLiteRcvbufErrors",
    ):
        assert c.values[zero] == 0


def test_nstat_delta_and_json_real() -> None:
    c = parse_nstat(read("nstat-delta.txt"))
    assert c.values["TcpExtTW"] == 1
    assert c.values["UdpNoPorts"] == 1
    assert c.values["IpExtInOctets"] == 618
    assert "TcpExtListenOverflows" not in c.values  # plain nstat leaves zeros out
    j = parse_nstat(read("nstat-j.json"), first_line=4)
    assert j.values == c.values
    assert j.lines["TcpExtTW"] == (4, "TcpExtTW 1")


# -- sockets --------------------------------------------------------------------------------------------------


def test_ss_ltn_real() -> None:
    ls = parse_ss_listen(read("ss-ltn.txt"), first_line=30)
    assert [(x.address, x.port, x.recv_q, x.send_q) for x in ls] == [
        ("0.0.0.0", 30080, 0, 4096),
        ("127.0.0.1", 8080, 3, 10),  # 3 connections waiting in a backlog-10 queue
        ("127.0.0.1", 10249, 0, 128),
        ("::", 10256, 0, 4096),  # listen(100000) capped by somaxconn
        ("::ffff:127.0.0.1", 9090, 0, 5),
    ]
    assert all(x.proto == "tcp" and x.process is None and x.pid is None for x in ls)
    assert ls[0].line == 31
    assert ls[2].interface == "lo"
    assert ls[1].text == "LISTEN 3      10              127.0.0.1:8080       0.0.0.0:*"


def test_ss_ltnp_and_lntup_real() -> None:
    ls = parse_ss_listen(read("ss-ltnp.txt"))
    assert {(x.port, x.process, x.pid) for x in ls} == {
        (p, "python3", 24952) for p in (30080, 8080, 10249, 10256, 9090)
    }
    both = parse_ss_listen(read("ss-lntup.txt"))
    udp = [(x.address, x.port) for x in both if x.proto == "udp"]
    assert udp == [("0.0.0.0", 53), ("127.0.0.1", 5353), ("::", 8472)]
    assert len([x for x in both if x.proto == "tcp"]) == 5
    assert both[0].line == 2


def test_ss_without_state_column_real() -> None:
    ls = parse_ss_listen(read("ss-tn-state-listening.txt"))
    assert [(x.port, x.recv_q, x.send_q) for x in ls] == [
        (30080, 0, 4096),
        (8080, 3, 10),
        (10249, 0, 128),
        (10256, 0, 4096),
        (9090, 0, 5),
    ]


def test_netstat_listeners_real() -> None:
    ls = parse_ss_listen(read("netstat-lntup.txt"))
    assert len(ls) == 8
    assert all(x.recv_q == 0 and x.send_q == 0 and x.source == "netstat" for x in ls)
    assert (ls[1].proto, ls[1].address, ls[1].port, ls[1].process, ls[1].pid) == (
        "tcp",
        "127.0.0.1",
        8080,
        "python3",
        24952,
    )
    assert (ls[3].proto, ls[3].address, ls[3].port) == ("tcp", "::", 10256)  # tcp6 :::10256
    assert [(x.proto, x.port) for x in ls[5:]] == [("udp", 53), ("udp", 5353), ("udp", 8472)]
    assert ls[0].line == 3


def test_ss_old_iproute2_forms() -> None:
    text = """\
State      Recv-Q Send-Q        Local Address:Port          Peer Address:Port
LISTEN     0      128                       *:22                       *:*      users:(("sshd",1234,3))
LISTEN     129    128                      :::10250                   :::*
LISTEN     0      128               [fe80::1]%eth0:22                   [::]:*
ESTAB      0      0              10.0.0.5:22              10.0.0.9:50000
"""
    ls = parse_ss_listen(text)
    assert [(x.address, x.port, x.recv_q, x.send_q, x.process, x.pid) for x in ls] == [
        ("0.0.0.0", 22, 0, 128, "sshd", 1234),
        ("::", 10250, 129, 128, None, None),
        ("fe80::1", 22, 0, 128, None, None),
    ]
    assert ls[2].interface == "eth0"
    udp = parse_ss_listen(
        "State  Recv-Q Send-Q Local Address:Port Peer Address:Port\nUNCONN 0 0 10.0.0.5%eth0:68 0.0.0.0:*\n"
    )
    assert [(x.proto, x.address, x.port, x.interface) for x in udp] == [("udp", "10.0.0.5", 68, "eth0")]


# -- links ----------------------------------------------------------------------------------------------------


def test_ip_link_text_real() -> None:
    links = {x.name: x for x in parse_ip_link(read("ip-link.txt"), first_line=40)}
    assert list(links) == ["lo", "cni0", "veth1", "veth0", "vethab12cd34", "vxlan.calico", "flannel.1"]
    pod = links["vethab12cd34"]
    assert (pod.index, pod.mtu, pod.link_netnsid, pod.peer, pod.up, pod.line) == (5, 1500, 0, "if2", True, 48)
    assert pod.kind is None  # not shown without -d
    assert links["veth1"].master == "cni0"
    assert links["vxlan.calico"].mtu == 1450
    assert not links["flannel.1"].up and links["flannel.1"].state == "DOWN"
    assert links["cni0"].up and links["cni0"].state == "DOWN"  # admin up, no carrier
    assert links["lo"].mtu == 65536
    assert links["vxlan.calico"].text.startswith("6: vxlan.calico: <BROADCAST")


def test_ip_d_link_kinds_real() -> None:
    links = {x.name: x for x in parse_ip_link(read("ip-d-link.txt"))}
    assert {n: x.kind for n, x in links.items()} == {
        "lo": None,
        "cni0": "bridge",
        "veth1": "veth",
        "veth0": "veth",
        "vethab12cd34": "veth",
        "vxlan.calico": "vxlan",
        "flannel.1": "vxlan",
    }
    assert links["veth1"].slave_kind == "bridge"
    assert links["vethab12cd34"].link_netnsid == 0
    assert links["flannel.1"].line == 19


def test_ip_addr_real() -> None:
    links = parse_ip_link(read("ip-addr.txt"))
    assert [(x.name, x.mtu, x.line) for x in links] == [
        ("lo", 65536, 1),
        ("cni0", 1500, 7),
        ("veth1", 1500, 11),
        ("veth0", 1500, 15),
        ("vethab12cd34", 1500, 21),
        ("vxlan.calico", 1450, 25),
        ("flannel.1", 1500, 29),
    ]
    assert all(x.kind is None for x in links)  # "inet ..." lines are not a kind


def test_ip_json_real() -> None:
    plain = parse_ip_link(read("ip-j-link.json"), first_line=9)
    assert len(plain) == 7
    assert all(x.line == 9 for x in plain)  # one line of JSON
    pod = plain[4]
    assert (pod.name, pod.link_netnsid, pod.peer, pod.kind) == ("vethab12cd34", 0, "if2", None)
    detailed = {x.name: x for x in parse_ip_link(read("ip-j-d-link.json"))}
    assert detailed["flannel.1"].kind == "vxlan" and not detailed["flannel.1"].up
    assert detailed["veth1"].master == "cni0" and detailed["veth1"].slave_kind == "bridge"
    assert detailed["cni0"].kind == "bridge"
    assert '"ifname":"flannel.1"' in detailed["flannel.1"].text
    pretty = {x.name: x for x in parse_ip_link(read("ip-j-p-d-link.json"), first_line=2)}
    assert pretty["lo"].line == 4 and pretty["flannel.1"].line == 269  # the object's "ifname" line
    assert pretty["vxlan.calico"].mtu == 1450 and pretty["vxlan.calico"].kind == "vxlan"


def test_ip_d_link_tunnels() -> None:
    # ipip / wireguard as iproute2 prints them with -d (this machine has neither module loaded).
    text = """\
8: tunl0@NONE: <NOARP,UP,LOWER_UP> mtu 1480 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000
    link/ipip 0.0.0.0 brd 0.0.0.0 promiscuity 0  allmulti 0 minmtu 0 maxmtu 0
    ipip ipip remote any local any ttl inherit nopmtudisc addrgenmode eui64 numtxqueues 1 numrxqueues 1
9: wireguard.cali: <POINTOPOINT,NOARP,UP,LOWER_UP> mtu 1440 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000
    link/none  promiscuity 0  allmulti 0 minmtu 0 maxmtu 2147483552
    wireguard addrgenmode none numtxqueues 1 numrxqueues 1 gso_max_size 65536 gso_max_segs 65535
10: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9001 qdisc mq state UP mode DEFAULT group default qlen 1000
    link/ether 02:11:22:33:44:55 brd ff:ff:ff:ff:ff:ff promiscuity 0  allmulti 0 minmtu 128 maxmtu 9216
    altname enp0s5
"""
    links = parse_ip_link(text)
    assert [(x.name, x.kind, x.mtu, x.peer) for x in links] == [
        ("tunl0", "ipip", 1480, "NONE"),
        ("wireguard.cali", "wireguard", 1440, None),
        ("eth0", None, 9001, None),
    ]


# -- kernel log -----------------------------------------------------------------------------------------------


def test_kernel_log_dmesg_formats_real() -> None:
    lines = parse_kernel_log(read("dmesg-formats.txt"), first_line=5)
    assert len(lines) == 15
    assert {x.message for x in lines} == {
        "Bridge firewalling registered",
        "xt_nfacct: accounting object `ct_state_invalid_dropped_pkts' does not exist",
    }
    plain, dash_t, dash_x, iso, raw = lines[0], lines[3], lines[6], lines[9], lines[12]
    assert (plain.seconds, plain.timestamp, plain.line) == (0.425403, None, 5)
    assert (dash_t.seconds, dash_t.timestamp) == (None, "Sat Nov 21 17:03:18 2026")
    assert dash_x.seconds == 0.425403 and dash_x.text.startswith("kern  :notice:")
    assert (iso.seconds, iso.timestamp) == (None, "2026-11-21T17:03:18,425403+00:00")
    assert raw.seconds == 0.425403 and raw.text == "<5>[    0.425403] Bridge firewalling registered"


def test_kernel_log_conntrack_table_full() -> None:
    text = """\
[1234567.123456] nf_conntrack: table full, dropping packet
[1234567.223456] net_ratelimit: 4 callbacks suppressed
[1234568.000001] nf_conntrack: nf_conntrack: table full, dropping packet
[Sat Nov 21 20:00:00 2026] nf_conntrack: table full, dropping packet.
"""
    lines = parse_kernel_log(text, first_line=2)
    assert [x.message for x in lines] == [
        "nf_conntrack: table full, dropping packet",
        "net_ratelimit: 4 callbacks suppressed",
        "nf_conntrack: nf_conntrack: table full, dropping packet",
        "nf_conntrack: table full, dropping packet.",
    ]
    assert lines[0].seconds == 1234567.123456 and lines[0].line == 2
    assert lines[2].seconds == 1234568.000001
    assert lines[3].timestamp == "Sat Nov 21 20:00:00 2026" and lines[3].seconds is None


def test_kernel_log_journal_formats() -> None:
    text = """\
-- Logs begin at Fri 2026-11-20 08:00:00 UTC, end at Sat 2026-11-21 20:05:00 UTC. --
Nov 21 20:00:00 node-1 kernel: nf_conntrack: nf_conntrack: table full, dropping packet
Nov 21 20:00:01 node-1 systemd[1]: Started kubelet.service.
Nov 21 20:00:02.123456 node-1 kernel: nf_conntrack: table full, dropping packet
2026-11-21T20:00:03+0000 node-1 kernel: IPVS: rr: TCP 10.96.0.1:443 - no destination available
2026-11-21T20:00:04.500000+00:00 node-1 containerd[812]: level=info msg="x"
Nov  1 09:00:05 node-1 kernel: [1234567.123456] TCP: request_sock_TCP: Possible SYN flooding on port 30080. Sending cookies.
[ 1234.567890] node-1 kernel: neighbour: arp_cache: neighbor table overflow!
Sat 2026-11-21 20:00:06 UTC node-1 kernel: nf_conntrack: table full, dropping packet
-- Boot 0123456789abcdef0123456789abcdef --
"""
    lines = parse_kernel_log(text, first_line=1)
    assert [(x.line, x.message) for x in lines] == [
        (2, "nf_conntrack: nf_conntrack: table full, dropping packet"),
        (4, "nf_conntrack: table full, dropping packet"),
        (5, "IPVS: rr: TCP 10.96.0.1:443 - no destination available"),
        (7, "TCP: request_sock_TCP: Possible SYN flooding on port 30080. Sending cookies."),
        (8, "neighbour: arp_cache: neighbor table overflow!"),
        (9, "nf_conntrack: table full, dropping packet"),
    ]
    assert lines[0].timestamp == "Nov 21 20:00:00" and lines[0].seconds is None
    assert lines[1].timestamp == "Nov 21 20:00:02.123456"
    assert lines[2].timestamp == "2026-11-21T20:00:03+0000"
    assert lines[3].timestamp == "Nov  1 09:00:05" and lines[3].seconds == 1234567.123456
    assert lines[4].seconds == 1234.56789 and lines[4].timestamp is None
    assert lines[5].timestamp == "Sat 2026-11-21 20:00:06 UTC"
    assert lines[0].text == "Nov 21 20:00:00 node-1 kernel: nf_conntrack: nf_conntrack: table full, dropping packet"


def test_kernel_log_without_prefix_and_lookalikes() -> None:
    text = (
        "nf_conntrack: table full, dropping packet\n"  # dmesg -t
        "[Firmware Bug]: TSC doesn't count with P0 frequency!\n"  # a bracket that is not a time
        "2026-11-21T17:03:18,425403+00:00 ACPI Error: AE_NOT_FOUND, While resolving a named reference\n"
    )
    lines = parse_kernel_log(text)
    assert [(x.message, x.seconds, x.timestamp) for x in lines] == [
        ("nf_conntrack: table full, dropping packet", None, None),
        ("[Firmware Bug]: TSC doesn't count with P0 frequency!", None, None),
        ("ACPI Error: AE_NOT_FOUND, While resolving a named reference", None, "2026-11-21T17:03:18,425403+00:00"),
    ]


# -- garbage --------------------------------------------------------------------------------------------------

JUNK = random.Random(4).randbytes(4000).decode("utf-8", errors="replace")
TEXT_JUNK = 'hello world\nfoo = \n= = =\n[x]\n:::\ncpu=\nsrc=1 dst=2\n{"not": "json"\n[1, 2\n0x 12 zz\n'


@pytest.mark.parametrize("text", [JUNK, TEXT_JUNK, "", "\n\n"])
def test_garbage_gives_nothing(text: str) -> None:
    assert parse_conntrack_stats(text) is None
    assert parse_nf_conntrack_stat(text) is None
    assert parse_conntrack_entries(text) == []
    assert parse_sysctl(text) == {}
    assert parse_netstat_s(text).values == {}
    assert parse_nstat(text).values == {}
    assert parse_ss_listen(text) == []
    assert parse_ip_link(text) == []


def test_garbage_kernel_log() -> None:
    assert parse_kernel_log(JUNK) == []
    assert parse_kernel_log("") == []
    assert parse_kernel_log("-- No entries --\n") == []
    # Plain text is a valid `dmesg -t` line: it is kept as a message.
    assert [x.message for x in parse_kernel_log("hello world\n")] == ["hello world"]
