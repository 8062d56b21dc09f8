"""KP108 from the log's own cadence (k/k#111219), and kube-proxy logs that hold only routine lines
are read as kube-proxy's (pkg/proxy/topology.go; client-go listing Endpoints/EndpointSlices).
KP108 from the sync flags (TKE's IPVS defaults); a zero-valued config dump reads as defaults."""

from __future__ import annotations

from collections.abc import Callable

from checks.helpers import CASES, Diag
from conftest import all_findings, none_of, one

from kpdoctor.model import Report

Diagnose = Callable[..., Report]

BACK_TO_BACK = (
    '2022-07-05T07:15:17.986545884Z I0705 07:15:17.986509    2171 proxier.go:865] "Syncing iptables rules"\n'
    '2022-07-05T07:15:18.162082913Z I0705 07:15:18.162045    2171 proxier.go:832] "SyncProxyRules complete" '
    'elapsed="175.66099ms"\n'
    '2022-07-05T07:15:18.163698528Z I0705 07:15:18.163140    2171 proxier.go:865] "Syncing iptables rules"\n'
)
SPACED = (
    'I0705 07:15:17.986509    2171 proxier.go:865] "Syncing iptables rules"\n'
    'I0705 07:15:18.162045    2171 proxier.go:832] "SyncProxyRules complete" elapsed="175.66099ms"\n'
    'I0705 07:15:48.163140    2171 proxier.go:865] "Syncing iptables rules"\n'
)


def test_full_syncs_closer_than_min_sync_period(diagnose: Diagnose) -> None:
    f = one(diagnose({"kube-proxy.log": BACK_TO_BACK}), "KP108")
    assert "177 ms apart" in f.summary and len(f.evidence) == 2


def test_syncs_at_the_normal_cadence_are_nothing(diagnose: Diagnose) -> None:
    none_of(diagnose({"kube-proxy.log": SPACED}), "KP108")


def test_routine_kube_proxy_lines_are_read_as_its_log(diagnose: Diagnose) -> None:
    log = (
        'I0722 11:01:53.493532       1 topology.go:165] "Skipping topology aware endpoint filtering since node is '
        'missing label" label="topology.kubernetes.io/zone"\n'
    )
    report = diagnose({"kube-proxy.log": log})
    assert report.checks_run > 0 and [f for f in report.findings if f.severity >= 2] == []


def test_sync_too_frequent_tke_ipvs_defaults(diagnose: Diag) -> None:
    cmd = "/usr/local/bin/kube-proxy --proxy-mode=ipvs --ipvs-min-sync-period=1s --ipvs-sync-period=5s --kubeconfig=/etc/k\n"
    r = diagnose({"cmdline.txt": cmd})
    f = r.visible()[0]
    assert f.cause == "sync-too-frequent" and "5s" in f.summary
    assert "--ipvs-min-sync-period=0s --ipvs-sync-period=30s" in f.fix[0]


def test_a_zero_valued_dump_reads_as_defaults(diagnose: Diag) -> None:
    """k8s#107156: every unset field printed as 0s/0/"": no "minSyncPeriod is 0" finding."""
    r = diagnose({"config.conf": (CASES / "k8s-107156" / "config.conf").read_text()})
    assert not [f for f in all_findings(r) if f.cause == "sync-too-frequent"]
