"""KP203 local-endpoints-not-recognised: the note on "has no local endpoints" rules nothing decides."""

from __future__ import annotations

from checks.helpers import REAL_S, Diag, note


def test_iptables_S_rules_are_read_too(diagnose: Diag) -> None:
    r = diagnose({"rules-S.txt": REAL_S.read_text()})
    (f,) = note(r)
    assert "ns2/svc2" in f.summary
    assert (
        f.evidence[0].artifact.endswith("rules-S.txt") and "ns2/svc2:p80 has no local endpoints" in f.evidence[0].text
    )
