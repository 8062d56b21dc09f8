"""KP107 iptables-save-parse-panic: the panic itself, and a dump whose legacy-tables warning is
spliced into a rule (decided by kube-proxy's version)."""

from __future__ import annotations

from checks.helpers import Diag
from conftest import none_of, one

from kpdoctor.model import Confidence, Severity


def test_save_parse_panic(diagnose: Diag) -> None:
    line = 'E0618 02:00:00.000000       1 runtime.go:69] Observed a panic: "slice bounds out of range" (runtime error: slice bounds out of range)\n'
    r = diagnose({"kp.log": "I0618 01:00:00.000000 1 server.go:548] Version: v1.14.3-tke.20\n" + line * 10})
    f = r.visible()[0]
    assert f.cause == "iptables-save-parse-panic" and f.fixed_in == ["v1.14.3-tke.27"]


# k8s-78443 (kubernetes#78443): iptables-nft-save's stderr landed in the middle of a DNAT rule.
SPLICED_78443 = (
    "-A KUBE-SEP-UTOQBKGE7K7Y45HY -p tcp -m tcp -j DNAT --to-destina# Warning: iptables-legacy tables present, "
    "use iptables-legacy-save to see them\n"
    "tion 10.131.0.45:443\n"
)


def test_a_spliced_warning_is_the_parse_panic_corruption(diagnose: Diag) -> None:
    r = diagnose({"iptables-save-garbled.txt": SPLICED_78443})
    f = one(r, "KP107")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.MEDIUM  # version unknown
    assert "kube-proxy --version" in f.summary
    assert f.evidence[0].line == 1 and "--to-destina# Warning" in f.evidence[0].text
    assert r.findings[0].code == "KP107"
    # kube-proxy 1.14 (before the fix): critical; 1.15+ reads stderr apart: nothing to say.
    old = one(diagnose({"d.txt": SPLICED_78443, "v.txt": "Kubernetes v1.14.3\n"}), "KP107")
    assert old.severity == Severity.CRITICAL and old.confidence == Confidence.HIGH
    assert "1.15" in old.fix[0] and old.fixed_in == ["v1.15.0"]
    none_of(diagnose({"d.txt": SPLICED_78443, "v.txt": "Kubernetes v1.15.0\n"}), "KP107")
