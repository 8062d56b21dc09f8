"""KP108 from the log's own cadence (k/k#111219), and kube-proxy logs that hold only routine lines
are read as kube-proxy's (pkg/proxy/topology.go; client-go listing Endpoints/EndpointSlices)."""

from __future__ import annotations

from collections.abc import Callable

from conftest import none_of, one

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
