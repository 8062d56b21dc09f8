"""KP110 from the netlink race itself (k/k#71071): empty replies for virtual servers kube-proxy keeps;
and seed 001's deadlock from graceful-termination lines and the IPVS table."""

from __future__ import annotations

from collections.abc import Callable

from checks.helpers import Diag
from conftest import none_of, one

from kpdoctor.model import Confidence, Report

Diagnose = Callable[..., Report]

RACE = (
    "E1129 21:09:11.422553       1 proxier.go:1485] Failed to get IPVS service, error: Expected only one service "
    "obtained=0\n"
    "E1129 21:09:11.422699       1 proxier.go:1116] Failed to sync endpoint for service: 172.17.0.1:31800/TCP, "
    "err: Expected only one service obtained=0\n"
)


def test_empty_netlink_replies_are_the_race_at_low_confidence(diagnose: Diagnose) -> None:
    f = one(diagnose({"kube-proxy.log": RACE}), "KP110")
    assert f.confidence == Confidence.LOW and f.occurrences == 2
    assert "v1.13.2" in f.fixed_in and "version" in f.confidence_reason


def test_a_release_outside_the_affected_ranges_rules_it_out(diagnose: Diagnose) -> None:
    version = 'I1129 21:09:00.000000       1 server_others.go:1] "Version info" version="v1.14.3"\n'
    none_of(diagnose({"kube-proxy.log": version + RACE}), "KP110")


def test_ipvs_deadlock_seed_001(diagnose: Diag) -> None:
    gt = "".join(
        f"I0111 06:5{i}:48.874607 1 graceful_termination.go:160] Trying to delete rs: 10.96.0.1:443/TCP/10.130.29.80:6443\n"
        for i in range(5)
    )
    ipvs = (
        "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n"
        "  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n"
        "TCP  10.96.0.1:443 rr\n  -> 10.130.29.80:6443            Masq    1      6          0\n"
        "TCP  10.108.62.55:5473 rr\n"
    )
    r = diagnose({"kp.log": "I0111 06:00:00.000000 1 server.go:464] Version: v1.13.0\n" + gt, "ipvs.txt": ipvs})
    f = r.visible()[0]
    assert f.cause == "ipvs-sync-deadlock" and f.fixed_in == ["v1.13.2"] and f.confidence.label == "high"
    assert any("10.108.62.55:5473" in c.text for c in f.evidence)
