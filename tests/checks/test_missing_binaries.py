"""KP118 conntrack-binary-missing and KP119 iptables-binary-missing: each era's exec failure."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import none_of, one

from kpdoctor.model import Report, Severity

Diagnose = Callable[..., Report]


@pytest.mark.parametrize(
    ("log", "severity"),
    [
        (
            "E0610 15:55:24.811934       1 proxier.go:603] conntrack return with error: Error looking for path of "
            'conntrack: exec: "conntrack": executable file not found in $PATH\n',
            Severity.WARNING,
        ),
        (
            'E0815 10:00:00.000000       1 cleanup.go:70] "Failed to delete stale service connections" err="error '
            "deleting connection tracking state for UDP service IP: 10.0.0.10, error: error looking for path of "
            'conntrack: executable file not found in $PATH" IP="10.0.0.10"\n',
            Severity.CRITICAL,  # a UDP Service's clean-up failed
        ),
    ],
)
def test_conntrack_binary_missing_any_mode(diagnose: Diagnose, log: str, severity: Severity) -> None:
    report = diagnose({"kube-proxy.log": log})
    f = one(report, "KP118")
    assert f.severity == severity and "v1.32.0" in f.fixed_in
    none_of(report, "KP113")  # not an IPVS prerequisite when IPVS was not asked for


@pytest.mark.parametrize(
    "log",
    [
        "F0820 20:42:51.104210    6613 server.go:101] Unable to create proxer: failed to initialize iptables: error "
        'creating chain "KUBE-PORTALS-CONTAINER": exec: "iptables": executable file not found in $PATH:\n',
        'E0101 00:00:00.000000       1 proxier.go:1500] Failed to execute iptables-restore: exec: "ip6tables-restore": '
        "executable file not found in $PATH\n",
    ],
)
def test_iptables_binary_missing(diagnose: Diagnose, log: str) -> None:
    f = one(diagnose({"kube-proxy.log": log}), "KP119")
    assert "PATH" in " ".join(f.fix)
