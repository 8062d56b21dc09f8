"""KP308 and KP320 ip-forward-disabled."""

from __future__ import annotations

from pathlib import Path

import pytest
from checks.helpers import IPVS_CONFIG, run
from conftest import one, write

from kpdoctor.model import Severity


def test_forwarding_off(tmp_path: Path) -> None:
    s = write(tmp_path, "s.txt", "net.ipv4.ip_forward = 0\nnet.ipv6.conf.all.forwarding = 0\n")
    assert one(run([s]), "KP308").severity == Severity.WARNING  # nothing says this is a Kubernetes node
    f = one(run([s, write(tmp_path, "config.yaml", IPVS_CONFIG)]), "KP308")
    assert f.severity == Severity.CRITICAL
    assert f.summary.startswith("net.ipv4.ip_forward = 0")  # IPv6 only matters with IPv6 Services
    assert f.fix[0].startswith("sysctl -w net.ipv4.ip_forward=1")


# KP320: an entry script's trace (the log of its Pod) that read forwarding as 0. The traces are as
# bash 5.2 and dash 0.5.12 print them (tests/lab/test_entry_script_trace.py runs busybox, dash and
# bash for real): bash one `+` deeper inside a command substitution and quoting `[`, dash not.
BASH_TRACE = """+ trap exit TERM INT
+ for dest_ip in 10.43.107.199 fd00:43::10
+ echo 10.43.107.199
+ grep -Eq :
++ cat /proc/sys/net/ipv4/ip_forward
+ '[' 0 '!=' 1 ']'
+ exit 1
"""


def test_a_script_that_stopped_on_ipv4_forwarding_says_the_node_does_not_forward(tmp_path: Path) -> None:
    log = write(tmp_path, "lb.log", "$ kubectl logs -n kube-system svclb-traefik-x2kq9 lb-port-80\n" + BASH_TRACE)
    f = one(run([log]), "KP320")
    assert (f.severity, f.confidence.label) == (Severity.CRITICAL, "high")
    assert f.summary.startswith("net.ipv4.ip_forward = 0 in the network namespace of Pod svclb-traefik-x2kq9: k3s")
    assert [c.line for c in f.evidence] == [6, 7, 8]
    assert f.fix[0].startswith("sysctl -w net.ipv4.ip_forward=1 on the node")


def test_a_script_that_read_forwarding_and_went_on_is_a_warning(tmp_path: Path) -> None:
    trace = "+ echo fd00:43::10\n+ cat /proc/sys/net/ipv6/conf/all/forwarding\n+ [ 0 = 1 ]\n+ echo skipped\n"
    f = one(run([write(tmp_path, "entry.log", trace)]), "KP320")
    assert (f.severity, f.confidence.label) == (Severity.WARNING, "medium")
    assert "the Pod whose log this is" in f.summary and "went on" in f.summary


@pytest.mark.parametrize(
    "trace",
    [
        "+ cat /proc/sys/net/ipv6/conf/all/forwarding\n+ '[' 1 '!=' 1 ']'\n+ ip6tables -t nat -I PREROUTING\n",
        "+ cat /proc/sys/net/core/somaxconn\n+ '[' 0 -lt 1024 ']'\n+ exit 1\n",  # another setting
        "+ cat /proc/sys/net/ipv4/ip_forward\n+ echo 0\n+ exit 1\n",  # the value is not shown
    ],
)
def test_a_trace_that_shows_forwarding_on_or_nothing_of_it_says_nothing(trace: str, tmp_path: Path) -> None:
    assert not [f for f in run([write(tmp_path, "entry.log", trace)]).visible() if f.code == "KP320"]


def test_a_markdown_list_of_plus_items_is_not_a_trace(tmp_path: Path) -> None:
    notes = "Steps I tried:\n+ restart kube-proxy\n+ reboot the node\n+ check the firewall\n"
    report = run([write(tmp_path, "notes.md", notes)])
    assert not [i for i in report.inputs if "shell trace" in str(i)]


def test_a_finding_on_two_traces_rests_on_two_inputs_not_two_other_ones(tmp_path: Path) -> None:
    """The confidence names what it rests on: two inputs, nothing besides them to be "other" than."""
    a = write(tmp_path, "a.log", "$ kubectl logs svclb-traefik-x2kq9 -c lb-tcp-80\n" + BASH_TRACE)
    b = write(tmp_path, "b.log", "$ kubectl logs svclb-traefik-x2kq9 -c lb-tcp-443\n" + BASH_TRACE)
    assert one(run([a, b]), "KP320").confidence_reason == "2 inputs"
