"""Load tests' connect times (ab, hey): bunched at the SYN retransmit timer, most first SYNs were
dropped; KP307 reads that as IPVS connection reuse unless the mode says otherwise (k/k#71114)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conftest import none_of, one

from kpdoctor.model import Confidence, Report
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
