"""KP207: the FORWARD chain's DROP policy (Docker's default) dropping forwarded Service traffic,
read from the policy's own packet counter, as users post `iptables -L FORWARD -v` (corpus cases)."""

from __future__ import annotations

from pathlib import Path

from kpdoctor.demo import demo_path
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Severity

CASES = Path(__file__).parent / "realworld" / "cases"


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
