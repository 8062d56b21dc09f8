"""Load tests' connect times (ab, hey): bunched at the SYN retransmit timer, most first SYNs were
dropped; KP307 reads that as IPVS connection reuse unless the mode says otherwise (k/k#71114);
KP307 from the IPVS sysctls and the kernel, and from a busy real server (kube-router#544)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from checks.helpers import IPVS_CONFIG, codes, run
from conftest import none_of, one, write

from kpdoctor.model import Confidence, Report, Severity
from kpdoctor.parse.loadtest import at_mark, connect_times

Diagnose = Callable[..., Report]

# ApacheBench's summary as posted in k/k#71114 (connections to a Service through IPVS)
AB_SLOW = """Server Software:        nginx/1.15.5
Server Hostname:        10.0.0.147
Server Port:            8080

Document Path:          /
Document Length:        612 bytes

Concurrency Level:      300
Time taken for tests:   120.017 seconds
Complete requests:      48983
Failed requests:        0
Total transferred:      41390635 bytes
HTML transferred:       29977596 bytes
Requests per second:    408.13 [#/sec] (mean)
Time per request:       735.051 [ms] (mean)
Time per request:       2.450 [ms] (mean, across all concurrent requests)
Transfer rate:          336.79 [Kbytes/sec] received

Connection Times (ms)
              min  mean[+/-sd] median   max
Connect:        0  722 457.9    999    3009
"""
# Real ab 2.3 output made here: `ab -n 200 -c 10` against Python's http.server on loopback, whose
# listen backlog of 5 overflows now and then: a few connects wait 1 s, the median does not.
SOME_WAIT = Path(__file__).parents[1] / "data" / "connect_times" / "ab-loopback-small-backlog.txt"
HEY = """Details (average, fastest, slowest):
  DNS+dialup:   1.0032 secs, 0.0001 secs, 3.0107 secs
  DNS-lookup:   0.0000 secs, 0.0000 secs, 0.0000 secs
"""


def test_the_retransmit_marks() -> None:
    assert at_mark(999) == 1000 and at_mark(3009) == 3000 and at_mark(7050) == 7000
    assert at_mark(722) is None and at_mark(1500) is None and at_mark(1) is None


def test_ab_and_hey_summaries_are_read() -> None:
    (ab,) = connect_times(AB_SLOW)
    assert (ab.tool, ab.fastest, ab.typical, ab.slowest, ab.line) == ("ab", 0, 999, 3009, 20)
    (hey,) = connect_times(HEY)
    assert hey.tool == "hey" and hey.most_waited == 1000 and hey.some_waited == 3000


def test_most_connections_waiting_a_second_is_ipvs_reuse_at_low_confidence(diagnose: Diagnose) -> None:
    f = one(diagnose({"ab.txt": AB_SLOW}), "KP307")
    assert f.confidence == Confidence.LOW and "999 ms" in f.summary
    assert [c.line for c in f.evidence] == [21]


def test_with_ipvs_in_use_it_is_medium(diagnose: Diagnose) -> None:
    log = 'I1101 10:00:00.000000       1 server_others.go:186] "Using ipvs Proxier"\n'
    f = one(diagnose({"ab.txt": AB_SLOW, "kube-proxy.log": log}), "KP307")
    assert f.confidence == Confidence.MEDIUM


def test_a_few_slow_connects_are_not_most_of_them(diagnose: Diagnose) -> None:
    (ct,) = connect_times(SOME_WAIT.read_text())
    assert ct.some_waited == 1000 and ct.most_waited is None
    none_of(diagnose({"ab.txt": SOME_WAIT.read_text()}), "KP307")


def test_another_proxy_mode_says_nothing(diagnose: Diagnose) -> None:
    log = 'I1101 10:00:00.000000       1 server_others.go:212] "Using iptables Proxier"\n'
    none_of(diagnose({"ab.txt": AB_SLOW, "kube-proxy.log": log}), "KP307")


def test_conn_reuse_mode_zero_on_an_old_kernel(tmp_path: Path) -> None:
    s = write(
        tmp_path,
        "sysctl.txt",
        "net.ipv4.vs.conn_reuse_mode = 0\nnet.ipv4.vs.conntrack = 1\nnet.ipv4.vs.expire_nodest_conn = 1\n",
    )
    u = write(tmp_path, "uname.txt", "Linux node-1 5.4.0-150-generic #167-Ubuntu SMP x86_64 GNU/Linux\n")
    cfg = write(tmp_path, "config.yaml", IPVS_CONFIG)
    f = one(run([s, u, cfg]), "KP307")
    assert f.severity == Severity.WARNING
    assert "terminated Pod" in f.summary
    assert any("Upgrade the kernel (5.4.0-150-generic) to 5.9" in x for x in f.fix)


def test_conn_reuse_mode_zero_on_a_fixed_kernel_with_old_kube_proxy(tmp_path: Path) -> None:
    s = write(tmp_path, "sysctl.txt", "net.ipv4.vs.conn_reuse_mode = 0\nnet.ipv4.vs.conntrack = 1\n")
    u = write(tmp_path, "uname.txt", "5.10.0-28-amd64\n")
    v = write(tmp_path, "version.txt", "Kubernetes v1.20.15\n")
    cfg = write(tmp_path, "config.yaml", IPVS_CONFIG)
    f = one(run([s, u, v, cfg]), "KP307")
    assert any(x.startswith("sysctl -w net.ipv4.vs.conn_reuse_mode=1") for x in f.fix)
    assert any("Upgrade kube-proxy (v1.20.15) to 1.22" in x for x in f.fix)


def test_one_second_delay_on_old_kernels_and_quiet_on_new(tmp_path: Path) -> None:
    s = write(tmp_path, "sysctl.txt", "net.ipv4.vs.conn_reuse_mode = 1\nnet.ipv4.vs.conntrack = 1\n")
    cfg = write(tmp_path, "config.yaml", IPVS_CONFIG)
    old = write(tmp_path, "u1.txt", "4.19.0-26-amd64\n")
    assert "1 s delay" in one(run([s, cfg, old]), "KP307").summary
    new = write(tmp_path, "u2.txt", "6.1.0-18-amd64\n")
    assert "KP307" not in codes(run([s, cfg, new]))


# kube-router#544 as posted: the ipvsadm package of a CentOS 7 node, then a NodePort's real
# server with its inactive connections piling up under a load test
RPM_EL7 = "$ rpm -q ipvsadm\nipvsadm-1.27-7.el7.x86_64\n\n"
BUSY_RS = (
    "$ ipvsadm -ln | grep -A1 30530\nTCP  10.200.1.146:30530 rr\n"
    "  -> 172.32.9.68:80               Masq    1      0          {n}\n"
)


def test_busy_real_server_on_an_old_kernel_without_the_sysctls(tmp_path: Path) -> None:
    f = one(run([write(tmp_path, "t.txt", RPM_EL7 + BUSY_RS.format(n=757))]), "KP307")
    assert f.severity == Severity.WARNING and f.confidence.label == "low"
    assert "RHEL/CentOS 7" in f.summary and "757 inactive" in f.summary
    assert [c.line for c in f.evidence] == [6, 2]
    # quiet: few inactive connections; a 5.9+ kernel; the sysctls given (the other branches decide)
    assert "KP307" not in codes(run([write(tmp_path, "a.txt", RPM_EL7 + BUSY_RS.format(n=12))]))
    new = RPM_EL7.replace("$ rpm -q ipvsadm\nipvsadm-1.27-7.el7.x86_64", "$ uname -r\n5.14.0-362.8.1.el9_3.x86_64")
    assert "KP307" not in codes(run([write(tmp_path, "b.txt", new + BUSY_RS.format(n=757))]))
    ctl = "$ sysctl net.ipv4.vs.conntrack\nnet.ipv4.vs.conntrack = 0\n"
    assert "KP307" not in codes(run([write(tmp_path, "c.txt", RPM_EL7 + BUSY_RS.format(n=757) + ctl)]))
