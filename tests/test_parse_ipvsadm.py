"""ipvsadm listings as users paste them: -Ln in every column set, -Sn, collapsed whitespace."""

from __future__ import annotations

from pathlib import Path

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.sniff import sniff
from kpdoctor.knowledge import catalogue
from kpdoctor.parse.ipvsadm import parse_ipvsadm_list

DATA = Path(__file__).parent / "data" / "ipvsadm"


def test_stats_listing_has_real_servers_without_weights() -> None:
    text = (DATA / "stats-kube-router-160.txt").read_text()
    vss = parse_ipvsadm_list(text)
    assert [v.address for v in vss] == ["10.3.0.1:443", "10.3.0.10:53", "10.3.0.42:80"]
    assert all(not v.shown and v.scheduler == "" for v in vss)
    big = vss[2]
    assert [r.address for r in big.reals] == ["10.2.1.22:80", "10.2.1.23:80", "10.2.1.24:80"]
    # --stats prints no weight: every real server counts as taking connections, none as draining
    assert all(r.weight is None and r.takes_new for r in big.reals)
    assert big.reals[0].line == 9
    assert sniff(text, catalogue()).kind is Kind.IPVSADM


def test_persistence_is_read_from_the_flags_column() -> None:
    vss = parse_ipvsadm_list((DATA / "persistent-opsnull-251.txt").read_text())
    by = {v.address: v for v in vss}
    assert by["10.254.0.1:443"].persistent == 10800 and by["10.254.0.1:443"].scheduler == "rr"
    assert by["10.253.102.0:32429"].persistent == 0
    assert [r.weight for r in by["10.254.0.1:443"].reals] == [1, 1]


def test_whitespace_collapsed_paste_keeps_real_servers() -> None:
    """Seed 001's paste lost every indentation: "-> ..." lines still belong to the server above."""
    text = (
        "ipvsadm -Ln\n"
        "IP Virtual Server version 1.2.1 (size=4096)\n"
        "Prot LocalAddress:Port Scheduler Flags\n"
        "-> RemoteAddress:Port Forward Weight ActiveConn InActConn\n"
        "TCP 10.96.0.1:443 rr\n"
        "-> 10.130.29.80:6443 Masq 1 6 0\n"
        "-> 10.130.29.81:6443 Masq 1 1 0\n"
        "TCP 10.108.62.55:5473 rr\n"
        "UDP 10.96.0.10:53 rr\n"
        "-> 10.244.0.137:53 Masq 1 0 0\n"
    )
    vss = parse_ipvsadm_list(text)
    assert [(v.protocol, v.address, len(v.reals)) for v in vss] == [
        ("TCP", "10.96.0.1:443", 2),
        ("TCP", "10.108.62.55:5473", 0),
        ("UDP", "10.96.0.10:53", 1),
    ]
    assert vss[0].reals[0].active == 6
    assert sniff("\n".join(text.splitlines()[4:]), catalogue()).kind is Kind.IPVSADM  # headerless too


def test_save_format() -> None:
    text = (
        "-A -t 10.96.0.1:443 -s rr\n"
        "-a -t 10.96.0.1:443 -r 192.168.0.2:6443 -m -w 1\n"
        "-A -u 10.96.0.10:53 -s rr -p 10800\n"
        "-a -u 10.96.0.10:53 -r 10.244.0.5:53 -m -w 1\n"
        "-a -u 10.96.0.10:53 -r 10.244.1.7:53 -m -w 0\n"
        "-A -t [fd00:10:96::a]:53 -s rr -p 300 -M 64\n"
        "-A --sctp-service 10.96.5.5:9000 -s sh\n"
        "-A -f 7 -s rr\n"
    )
    vss = parse_ipvsadm_list(text, first_line=10)
    by = {(v.protocol, v.address): v for v in vss}
    api = by[("TCP", "10.96.0.1:443")]
    assert api.scheduler == "rr" and api.persistent == 0 and api.line == 10
    assert [(r.address, r.forward, r.weight, r.line) for r in api.reals] == [("192.168.0.2:6443", "Masq", 1, 11)]
    dns = by[("UDP", "10.96.0.10:53")]
    assert dns.persistent == 10800
    assert [r.takes_new for r in dns.reals] == [True, False]  # weight 0: no new connection
    assert by[("TCP", "[fd00:10:96::a]:53")].persistent == 300
    assert by[("SCTP", "10.96.5.5:9000")].scheduler == "sh"
    assert ("FWM", "7") in by
    typed = sniff(text, catalogue())
    assert typed.kind is Kind.IPVSADM and typed.attrs == {"format": "save"}


def test_names_instead_of_addresses_are_kept_unread() -> None:
    """`ipvsadm -L` without -n prints (truncated) names: kept as text, never taken as addresses."""
    vss = parse_ipvsadm_list((DATA / "names-kube-router-415.txt").read_text())
    assert [v.address for v in vss] == ["ip-10-0-62-121.ec2.internal:", "ip-10-0-62-121.ec2.internal:"]
    assert vss[1].reals[0].address == "100.98.125.10:http"


def test_other_column_sets() -> None:
    rate = (
        "Prot LocalAddress:Port                 CPS    InPPS   OutPPS    InBPS   OutBPS\n"
        "  -> RemoteAddress:Port\n"
        "TCP  10.96.0.10:53                       0        0        0        0        0\n"
        "  -> 10.244.0.5:53                       0        0        0        0        0\n"
    )
    (vs,) = parse_ipvsadm_list(rate)
    assert vs.reals[0].weight is None and not vs.shown
    pconn = (
        "Prot LocalAddress:Port            Weight    PersistConn ActiveConn InActConn\n"
        "  -> RemoteAddress:Port\n"
        "TCP  10.96.0.10:53 rr\n"
        "  -> 10.244.0.5:53                 0         0           2          0\n"
    )
    (vs,) = parse_ipvsadm_list(pconn)
    assert vs.reals[0].weight == 0 and vs.reals[0].active == 2 and vs.shown
    thresholds = (
        "Prot LocalAddress:Port            Uthreshold Lthreshold ActiveConn InActConn\n"
        "  -> RemoteAddress:Port\n"
        "TCP  10.96.0.10:53 rr\n"
        "  -> 10.244.0.5:53                 0          0          3          1\n"
    )
    (vs,) = parse_ipvsadm_list(thresholds)
    assert vs.reals[0].weight is None and vs.reals[0].inactive == 1
