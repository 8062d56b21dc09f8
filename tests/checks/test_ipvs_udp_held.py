"""IPVS's connection table read against its listing: KP321 stale-udp-conntrack (UDP clients held to a
real server that is draining or gone) and KP307 ipvs-connection-reuse (new connections on one).

Real formats: `ipvsadm --list -nc` rows as a kube-proxy IPVS node printed them
(tests/data/ipvsadm/conn-kube-proxy-udp.txt), /proc/net/ip_vs_conn rows (ip_vs_conn-proc.txt),
`ipvsadm -Ln` as ipvsadm.c prints a virtual server and its real servers, and the graceful
termination sweep's line `Not deleting, RS %v: %v ActiveConn, %v InactiveConn`
(pkg/proxy/ipvs/graceful_termination.go, 1.14) with the values a 1.14.3 node logged.
"""

from __future__ import annotations

from pathlib import Path

from checks.helpers import run
from conftest import DATA, none_of, one, write

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.facts import Facts
from kpdoctor.model import Confidence, Severity
from kpdoctor.parse.ipvs_conn import parse_connections

CONN = (DATA / "ipvsadm" / "conn-kube-proxy-udp.txt").read_text()
PROC = (DATA / "ipvsadm" / "ip_vs_conn-proc.txt").read_text()
# the DNS Service's UDP virtual server of the node CONN was read on
HEADER = (
    "IP Virtual Server version 1.2.1 (size=4096)\n"
    "Prot LocalAddress:Port Scheduler Flags\n"
    "  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n"
)


def listing(*reals: tuple[str, int, int]) -> str:
    rows = "".join(f"  -> {addr:<28}Masq    {w:<6} 0          {inact}\n" for addr, w, inact in reals)
    return HEADER + "UDP  10.96.0.10:53 rr\n" + rows


def kube_proxy_version(v: str) -> str:
    return (
        f"I0613 08:00:00.000000       1 server.go:548] Version: {v}\n"
        "I0613 08:00:00.100000       1 server_others.go:189] Using ipvs Proxier.\n"
    )


def test_the_connection_table_is_read_in_both_formats(tmp_path: Path) -> None:
    rows = parse_connections(CONN)
    assert [(r.protocol, r.state, r.expires, str(r.virtual), str(r.destination)) for r in rows] == [
        ("TCP", "ESTABLISHED", 14 * 60 + 52, "10.96.0.1:443", "172.38.40.214:6443"),
        ("UDP", "UDP", 3 * 60 + 39, "10.96.0.10:53", "10.244.0.39:53"),
    ]
    assert rows[1].line == 5 and not rows[1].template
    proc = parse_connections(PROC)
    assert [(str(r.client), str(r.virtual), str(r.destination), r.state, r.expires) for r in proc] == [
        ("217.33.199.29:49697", "81.20.49.101:443", "10.117.106.12:443", "ESTABLISHED", 857),
        ("54.39.252.69:64533", "81.20.49.146:443", "10.117.102.30:443", "SYN_RECV", 9),
        ("217.33.199.29:36894", "81.20.49.101:443", "10.117.106.12:443", "TIME_WAIT", 115),
    ]
    for text in (CONN, PROC):
        facts = Facts(load([write(tmp_path, "t.txt", text)]))
        assert [a.kind for a in facts.evidence.artifacts] == [Kind.IPVS_CONNECTIONS]
    # a persistence template: client port 0, state NONE
    [t] = parse_connections("TCP 00:57  NONE        110.184.96.173:0   122.225.32.142:80  122.225.32.136:80\n")
    assert t.template


def test_udp_clients_held_to_a_draining_real_server_are_critical_for_dns(tmp_path: Path) -> None:
    report = run(
        [
            write(tmp_path, "ipvsadm-c.txt", CONN),
            write(tmp_path, "ipvsadm.txt", listing(("10.244.0.39:53", 0, 1), ("10.244.1.5:53", 1, 0))),
        ]
    )
    f = one(report, "KP321")
    assert (f.cause, f.severity, f.confidence, f.suspected) == (
        "stale-udp-conntrack",
        Severity.CRITICAL,
        Confidence.HIGH,
        False,
    )
    assert "10.96.0.10:53 to 10.244.0.39:53, at weight 0" in f.summary
    assert "renewed 81 s ago (UDP timeout 300 s, the kernel's default)" in f.summary
    # the listing's line that shows it draining, then the connection held to it
    assert [(c.artifact.rsplit("/", 1)[-1], c.line) for c in f.evidence] == [("ipvsadm.txt", 5), ("ipvsadm-c.txt", 5)]
    assert "ipvsadm -d -u 10.96.0.10:53 -r 10.244.0.39:53" in f.fix[0]


def test_a_real_server_no_longer_listed_or_no_longer_an_endpoint(tmp_path: Path) -> None:
    gone = run([write(tmp_path, "c.txt", CONN), write(tmp_path, "l.txt", listing(("10.244.1.5:53", 1, 0)))])
    said = one(gone, "KP321").summary
    assert "no longer a real server of 10.96.0.10:53" in said and "IPVS drops those clients' packets" in said
    svc = (
        '{"apiVersion":"v1","kind":"List","items":['
        '{"apiVersion":"v1","kind":"Service","metadata":{"namespace":"kube-system","name":"kube-dns"},'
        '"spec":{"clusterIP":"10.96.0.10","clusterIPs":["10.96.0.10"],"ports":[{"name":"dns","port":53,'
        '"protocol":"UDP"}]}},'
        '{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"namespace":"kube-system",'
        '"name":"kube-dns-x","labels":{"kubernetes.io/service-name":"kube-dns"}},"addressType":"IPv4",'
        '"endpoints":[{"addresses":["10.244.1.5"],"conditions":{"ready":true}}],'
        '"ports":[{"name":"dns","port":53,"protocol":"UDP"}]}]}'
    )
    not_ep = run([write(tmp_path, "c2.txt", CONN), write(tmp_path, "objects.json", svc)])
    assert "not a ready endpoint of kube-system/kube-dns" in one(not_ep, "KP321").summary


def test_nothing_when_the_real_server_takes_connections_or_nothing_tells(tmp_path: Path) -> None:
    live = listing(("10.244.0.39:53", 1, 1), ("10.244.1.5:53", 1, 0))
    none_of(run([write(tmp_path, "c.txt", CONN), write(tmp_path, "l.txt", live)]), "KP321")
    none_of(run([write(tmp_path, "c2.txt", CONN)]), "KP321")  # the table alone: nothing to compare with


def test_a_draining_udp_real_server_alone_is_decided_by_kube_proxys_version(tmp_path: Path) -> None:
    drained = listing(("10.244.0.39:53", 0, 12), ("10.244.1.5:53", 1, 3))
    unknown = one(run([write(tmp_path, "l.txt", drained)]), "KP321")
    assert unknown.suspected and unknown.confidence == Confidence.MEDIUM
    assert "kube-proxy --version" in unknown.decided_by
    assert "still holds 12 connection(s)" in unknown.summary
    for affected in ("v1.13.3", "v1.14.3", "v1.11.7", "v1.12.9"):
        f = one(
            run([write(tmp_path, "l.txt", drained), write(tmp_path, "kp.log", kube_proxy_version(affected))]), "KP321"
        )
        assert not f.suspected and f.confidence == Confidence.HIGH, affected
        assert f.versions_found == {"kube-proxy": affected}
    assert f.fixed_in == ["kube-proxy v1.12.10"]
    for fixed in ("v1.14.4", "v1.13.8", "v1.16.0", "v1.29.2", "v1.11.4", "v1.10.13"):
        paths = [write(tmp_path, "l.txt", drained), write(tmp_path, "kp.log", kube_proxy_version(fixed))]
        none_of(run(paths), "KP321")
    # TCP drains on its own (its connections close): weight 0 with connections is the graceful path
    tcp = HEADER + "TCP  10.96.0.1:443 rr\n  -> 172.38.40.214:6443          Masq    0      4          9\n"
    none_of(run([write(tmp_path, "t.txt", tcp)]), "KP321")


def test_the_sweep_keeping_a_udp_real_server_is_proof_without_a_listing(tmp_path: Path) -> None:
    line = (
        "I0613 {t}.000000       1 graceful_termination.go:171] Not deleting, RS "
        "10.96.0.10:53/UDP/172.26.145.1:53: 0 ActiveConn, 10 InactiveConn\n"
    )
    log = "".join(line.format(t=f"08:0{m}:00") for m in range(4))
    f = one(run([write(tmp_path, "kube-proxy.log", log)]), "KP321")
    assert (f.severity, f.confidence, f.occurrences) == (Severity.CRITICAL, Confidence.HIGH, 4)
    assert "172.26.145.1:53 of 10.96.0.10:53 draining at weight 0" in f.summary
    assert "10 connection(s) at the last" in f.summary
    assert f.subject == {"service": "10.96.0.10:53", "backend": "172.26.145.1:53"}
    # a TCP real server the sweep keeps is graceful termination doing its job
    tcp = log.replace("/UDP/", "/TCP/")
    none_of(run([write(tmp_path, "kube-proxy2.log", tcp)]), "KP321")


def test_a_udp_real_server_the_sweep_tries_again_a_minute_later_was_kept(tmp_path: Path) -> None:
    """1.11.6-1.13 print only `Trying to delete rs` per sweep: the same UDP real server in two
    sweeps was not deleted at the first (its connections kept it)."""
    line = (
        "I1219 {t}.000000       1 graceful_termination.go:160] Trying to delete rs: 10.96.0.10:53/UDP/10.244.2.7:53\n"
    )
    twice = line.format(t="03:01:00") + line.format(t="03:02:00")
    f = one(run([write(tmp_path, "kube-proxy.log", twice)]), "KP321")
    assert f.confidence == Confidence.HIGH and "10.244.2.7:53 of 10.96.0.10:53" in f.summary
    assert [c.line for c in f.evidence] == [1, 2]
    none_of(run([write(tmp_path, "once.log", line.format(t="03:01:00"))]), "KP321")  # deleted at the first try


# an LVS director's `ipvsadm -Ln -c` while clients connect (public write-up, code corpus file id 48085124148)
OPENING = (
    "IPVS connection entries\n"
    "pro expire state       source             virtual            destination\n"
    "TCP 00:32  SYN_RECV    192.168.122.1:55989 192.168.122.100:80 10.10.10.10:80\n"
    "TCP 00:42  SYN_RECV    192.168.122.1:55991 192.168.122.100:80 10.10.10.20:80\n"
)


def test_new_tcp_connections_to_a_draining_real_server_prove_connection_reuse(tmp_path: Path) -> None:
    """KP307: the scheduler never picks a real server at weight 0; a connection opened to one
    reused a client port whose old entry IPVS still held."""
    tcp = HEADER + (
        "TCP  192.168.122.100:80 rr\n"
        "  -> 10.10.10.10:80               Masq    0      0          7\n"
        "  -> 10.10.10.20:80               Masq    1      1          4\n"
    )
    f = one(run([write(tmp_path, "c.txt", OPENING), write(tmp_path, "l.txt", tcp)]), "KP307")
    assert (f.confidence, f.suspected) == (Confidence.HIGH, False)
    assert "1 new connection(s) (SYN_RECV) of 192.168.122.100:80 went to 10.10.10.10:80" in f.summary
    assert [c.line for c in f.evidence] == [3]
    # with the settings shown, the finding they make carries the rows too
    sysctl = "net.ipv4.vs.conn_reuse_mode = 0\nnet.ipv4.vs.conntrack = 1\n"
    both = one(
        run([write(tmp_path, "c.txt", OPENING), write(tmp_path, "l.txt", tcp), write(tmp_path, "s.txt", sysctl)]),
        "KP307",
    )
    assert "conn_reuse_mode = 0" in both.summary and "The connection table shows it" in both.summary
    # every real server taking connections: new connections anywhere are the scheduler's
    live = tcp.replace("Masq    0 ", "Masq    1 ")
    none_of(run([write(tmp_path, "c.txt", OPENING), write(tmp_path, "l.txt", live)]), "KP307")
