"""KP110 from the netlink race itself (k/k#71071): empty replies for virtual servers kube-proxy keeps."""

from __future__ import annotations

from collections.abc import Callable

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
