"""KP210: a firewall's final catch-all REJECT/DROP in FORWARD or INPUT, in every dump form; rules
that match something are not catch-all."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import none_of, one

from kpdoctor.model import Confidence, Report

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
