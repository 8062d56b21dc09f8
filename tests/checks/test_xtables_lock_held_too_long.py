"""KP104 xtables-lock-held-too-long: another component holds the xtables lock, named from the lock
table and the process list; one transient failure then syncs is benign."""

from __future__ import annotations

from checks.helpers import Diag
from conftest import all_findings

from kpdoctor.model import Severity


def test_lock_held_too_long_names_holder(diagnose: Diag) -> None:
    line = (
        "E1008 21:01:55.367127  145725 proxier.go:780] Failed to ensure that filter chain KUBE-SERVICES exists: "
        'error creating chain "KUBE-EXTERNAL-SERVICES": exit status 4: Another app is currently holding the xtables lock. '
        "Stopped waiting after 5s.\n"
    )
    locks = "1: FLOCK  ADVISORY  WRITE 2211 00:17:1234 0 EOF\n1: -> FLOCK  ADVISORY  WRITE 145725 00:17:1234 0 EOF\n2: POSIX  ADVISORY  WRITE 800 fd:01:55 0 EOF\n"
    ps = (
        "UID          PID    PPID  C STIME TTY          TIME CMD\n"
        "root        2211    2100  3 Oct08 ?        00:10:00 /usr/local/bin/kube-router --run-firewall=true\n"
        "root      145725  145700  1 Oct08 ?        00:01:00 /usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf\n"
    )
    r = diagnose({"kp.log": line * 6, "locks": locks, "ps.txt": ps})
    f = r.visible()[0]
    assert f.cause == "xtables-lock-held-too-long"
    assert "kube-router" in f.summary and any("2211" in c.text for c in f.evidence)


def test_single_transient_lock_failure_then_syncs_is_benign(diagnose: Diag) -> None:
    log = (
        'E1012 13:47:04.628717       1 proxier.go:1447] "Failed to execute iptables-restore" err=<\n'
        "\texit status 4: Another app is currently holding the xtables lock. Stopped waiting after 5s.\n >\n"
        'I1012 13:47:04.628800       1 proxier.go:858] "Sync failed" retryingTime="30s"\n'
        'I1012 13:47:04.628900       1 proxier.go:820] "SyncProxyRules complete" elapsed="5.01s"\n'
        'I1012 13:47:34.700000       1 proxier.go:820] "SyncProxyRules complete" elapsed="80ms"\n'
        'I1012 13:48:04.700000       1 proxier.go:820] "SyncProxyRules complete" elapsed="81ms"\n'
    )
    r = diagnose({"kp.log": log}, min_severity=Severity.WARNING)
    assert r.visible() == []
    info = diagnose({"kp.log": log})
    assert any(f.cause == "xtables-lock-held-too-long" and f.ongoing is False for f in all_findings(info))
