"""KP210: a firewall's final catch-all REJECT/DROP in FORWARD or INPUT, in every dump form; rules
that match something are not catch-all. KP207, the same cause (iptables-drop-rule): the FORWARD
chain's DROP policy, read from its own packet counter as users post `iptables -L FORWARD -v`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from checks.helpers import CASES
from conftest import none_of, one

from kpdoctor.demo import demo_path
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Confidence, Report, Severity

Diagnose = Callable[..., Report]

SAVE = """*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m state --state RELATED,ESTABLISHED -j ACCEPT
-A INPUT -p tcp -m state --state NEW -m tcp --dport 22 -j ACCEPT
-A INPUT -j REJECT --reject-with icmp-host-prohibited
-A FORWARD -j REJECT --reject-with icmp-host-prohibited
COMMIT
"""
LISTING = """Chain FORWARD (policy ACCEPT 0 packets, 0 bytes)
 pkts bytes target     prot opt in     out     source               destination
 1234  98K KUBE-FORWARD  all  --  *      *       0.0.0.0/0            0.0.0.0/0            /* kubernetes forwarding rules */
  567  34K REJECT     all  --  *      *       0.0.0.0/0            0.0.0.0/0            reject-with icmp-host-prohibited
"""


@pytest.mark.parametrize("text", [SAVE, LISTING, "-A FORWARD -j REJECT --reject-with icmp-host-prohibited\n"])
def test_catch_all_reject_in_forward(diagnose: Diagnose, text: str) -> None:
    f = one(diagnose({"rules.txt": text}), "KP210")
    assert f.confidence == Confidence.MEDIUM and "FORWARD" in f.summary


def test_input_only_is_low(diagnose: Diagnose) -> None:
    f = one(diagnose({"rules.txt": "-A INPUT -j REJECT --reject-with icmp-host-prohibited\n"}), "KP210")
    assert f.confidence == Confidence.LOW and "8472/udp" in f.summary


def test_a_reject_that_matches_something_is_not_catch_all(diagnose: Diagnose) -> None:
    none_of(diagnose({"rules.txt": "-A FORWARD -s 10.0.0.0/8 -p tcp --dport 25 -j REJECT\n"}), "KP210")
    # in `iptables -L` a row's matches are its columns: a source and a port are matches too
    listed = (
        "Chain FORWARD (policy ACCEPT)\n"
        "target     prot opt source               destination\n"
        "REJECT     tcp  --  192.0.2.0/24         0.0.0.0/0            tcp dpt:8080 reject-with icmp-port-unreachable\n"
        "DROP       all  --  0.0.0.0/0            0.0.0.0/0            ctstate INVALID\n"
    )
    none_of(diagnose({"rules.txt": listed}), "KP210")


def _kp207(*paths: Path) -> list[tuple[Severity, str, int | None]]:
    rep, _ = diagnose_paths(paths, min_severity=Severity.INFO)
    return [(f.severity, f.evidence[0].text, f.evidence[0].line) for f in rep.findings if f.code == "KP207"]


def test_a_drop_policy_that_counted_packets_is_a_warning_citing_its_chain_line() -> None:
    (got,) = _kp207(CASES / "rke-485" / "iptables-forward.txt")
    assert got == (Severity.WARNING, "Chain FORWARD (policy DROP 3 packets, 188 bytes)", 2)


def test_a_drop_policy_that_dropped_nothing_is_only_a_note() -> None:
    (got,) = _kp207(CASES / "k8s-39658" / "iptables-forward.txt")
    assert got[0] == Severity.INFO


def test_an_accept_policy_or_a_verified_node_gives_nothing() -> None:
    bundle = demo_path("config-ignores-hostname")
    assert _kp207(bundle / "node" / "iptables-legacy-save.txt") == []  # FORWARD ACCEPT
    assert _kp207(bundle) == []  # with the cluster's objects KP204 evaluates the packets instead
