"""ethtool -S: a network driver's own counters, read as ethtool prints them, and its loss counters
reported when no check explains them (KP140)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from conftest import none_of
from lab.netns import Netns, lab_available

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.facts import Facts
from kpdoctor.model import Severity
from kpdoctor.parse import ethtool
from kpdoctor.parse.ethtool import counts_losses, parse_ethtool_stats

DATA = Path(__file__).parent / "data" / "ethtool"


def _kp140(paths: list[Path]) -> list[str]:
    report, _ = diagnose_paths(paths, min_severity=Severity.INFO)
    return [f.summary for f in report.findings if f.code == "KP140"]


def test_a_listing_is_read_counter_by_counter() -> None:
    counters = parse_ethtool_stats((DATA / "e1000-posted.txt").read_text(), 10)
    assert len(counters) == 36 and counters[0].line == 12 and counters[0].name == "rx_packets"
    carrier = next(c for c in counters if c.name == "tx_carrier_errors")
    assert (carrier.value, carrier.text, carrier.listing) == (6559, "tx_carrier_errors: 6559", 0)
    assert [c.name for c in counters if counts_losses(c.name) and c.value] == ["tx_carrier_errors"]
    assert not counts_losses("rx_packets") and not counts_losses("tx_tcp_seg_good")
    assert counts_losses("rx_queue_0_drops") and counts_losses("rx_no_buffer_count") and counts_losses("rx_crc_errors")


def test_a_driver_s_loss_counter_is_reported_and_a_quiet_driver_is_not(tmp_path: Path) -> None:
    (found,) = _kp140([DATA / "e1000-posted.txt"])
    assert "6,559 tx_carrier_errors (`ethtool -S`)" in found and "rx_csum_offload" not in found
    assert _kp140([DATA / "veth-6.1.txt"]) == []
    facts = Facts(load([DATA / "veth-6.1.txt"]))
    assert [a.kind for a in facts.evidence.artifacts] == [Kind.NIC_STATS] and len(facts.records(ethtool.SHAPE)) == 10


def test_a_counter_that_grows_between_two_listings_is_ongoing(tmp_path: Path) -> None:
    """Two listings of one driver in one paste (a second `ethtool -S` a minute later)."""
    first = "$ ethtool -S eth0\nNIC statistics:\n     rx_packets: 1000\n     rx_missed_errors: 2418845\n"
    second = "$ ethtool -S eth0\nNIC statistics:\n     rx_packets: 2000\n     rx_missed_errors: 2426175\n"
    paste = tmp_path / "paste.txt"
    paste.write_text(first + second)
    report, _ = diagnose_paths([paste], min_severity=Severity.INFO)
    (f,) = [f for f in report.findings if f.code == "KP140"]
    assert f.severity == Severity.WARNING and f.ongoing and "rx_missed_errors grew by 7,330" in f.summary
    none_of(report, "KP309")


def test_an_interface_s_loss_counters_are_reported_from_ip_s_link(tmp_path: Path) -> None:
    """`ip -s link` in a namespace where a veth's peer is down: what it sent (ARP for a
    neighbour) was dropped (TX dropped, counted by the veth driver), read from the real output;
    the interfaces whose counters are all zero say nothing."""
    reason = lab_available()
    if reason is not None:
        pytest.skip(reason)
    send = "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('10.99.0.2', 9))"
    with Netns() as ns:
        ns.check(["ip", "link", "add", "name", "veth0", "type", "veth", "peer", "name", "veth1"])
        ns.check(["ip", "addr", "add", "10.99.0.1/24", "dev", "veth0"])
        ns.check(["ip", "link", "set", "veth0", "up"])  # veth1 stays down: veth0 drops what it sends
        ns.run([sys.executable, "-c", send])
        time.sleep(1.5)  # ARP retries
        listing = ns.check(["ip", "-s", "link"])
    (tmp_path / "ip-s-link.txt").write_text(listing)
    (found,) = _kp140([tmp_path / "ip-s-link.txt"])
    assert "TX dropped on veth0" in found and " on lo" not in found, (found, listing)
