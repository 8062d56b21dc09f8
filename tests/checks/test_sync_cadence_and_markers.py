"""KP108 from the log's own cadence (k/k#111219), and kube-proxy logs that hold only routine lines
are read as kube-proxy's (pkg/proxy/topology.go; client-go listing Endpoints/EndpointSlices).
KP108 from the sync flags (TKE's IPVS defaults); a zero-valued config dump reads as defaults."""

from __future__ import annotations

from collections.abc import Callable

from checks.helpers import CASES, Diag
from conftest import all_findings, none_of, one

from kpdoctor.model import Report, Severity

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


THIRD = '2022-07-05T07:15:18.350117291Z I0705 07:15:18.350101    2171 proxier.go:865] "Syncing iptables rules"\n'


def test_two_syncs_in_a_row_are_the_runners_burst_before_1_35(diagnose: Diagnose) -> None:
    """kube-proxy's runner (pkg/util/async, burstSyncs 2) lets two syncs start back to back, as
    a healthy kube-proxy does at start; a third within minSyncPeriod is more than it allows."""
    two = one(diagnose({"kube-proxy.log": BACK_TO_BACK}), "KP108")  # suspected: what decides is named
    assert two.suspected and two.severity == Severity.INFO and two.decided_by
    assert "177 ms apart" in two.summary
    f = one(diagnose({"kube-proxy.log": BACK_TO_BACK + THIRD}), "KP108")
    assert not f.suspected and f.severity == Severity.WARNING
    assert "3 full iptables syncs within 364 ms" in f.summary and len(f.evidence) == 2


def test_from_1_35_two_syncs_closer_than_min_sync_period_are_too_many() -> None:
    """pkg/proxy/runner keeps minSyncPeriod between any two runs: iptables from 1.35, nftables
    from 1.34; before, pkg/util/async's runner let two run back to back."""
    from kpdoctor.checks.sync.config_checks import burst_syncs
    from kpdoctor.versions import KubeVersion

    v = KubeVersion.parse
    assert [burst_syncs("iptables", v(x)) for x in ("v1.20.2", "v1.34.9", "v1.35.0")] == [2, 2, 1]
    assert [burst_syncs("nftables", v(x)) for x in ("v1.33.1", "v1.34.9")] == [2, 1]
    assert burst_syncs("iptables", None) == 2  # unknown: what the most lenient release allows


# A real kube-proxy 1.20.2's start (the lab's, tests/lab): version and flags, then three syncs
# within 175 ms as its informers sync, then the runner's cadence.
START_UP = (
    'I1129 09:50:44.597421    5859 flags.go:59] FLAG: --iptables-min-sync-period="1s"\n'
    "I1129 09:50:44.603640    5859 proxier.go:333] iptables(IPv4) sync params: minSyncPeriod=1s, syncPeriod=30s, "
    "burstSyncs=2\n"
    "I1129 09:50:44.603708    5859 server.go:650] Version: v1.20.2\n"
    "I1129 09:50:44.905419    5859 proxier.go:861] Syncing iptables rules\n"
    "I1129 09:50:44.934447    5859 proxier.go:825] syncProxyRules took 29.246879ms\n"
    "I1129 09:50:45.028931    5859 proxier.go:861] Syncing iptables rules\n"
    "I1129 09:50:45.051133    5859 proxier.go:825] syncProxyRules took 22.312993ms\n"
    "I1129 09:50:45.079936    5859 proxier.go:861] Syncing iptables rules\n"
    "I1129 09:50:45.105689    5859 proxier.go:825] syncProxyRules took 25.866153ms\n"
    "I1129 09:50:46.106161    5859 proxier.go:861] Syncing iptables rules\n"
    "I1129 09:50:46.131928    5859 proxier.go:825] syncProxyRules took 26.043033ms\n"
)


def test_the_syncs_of_kube_proxys_start_up_are_not_a_cadence(diagnose: Diagnose) -> None:
    """Every release syncs at once when its informers have synced: a start-up flurry is normal;
    the same flurry later in the process's life is not."""
    none_of(diagnose({"kube-proxy.log": START_UP}), "KP108")
    later = START_UP.replace("09:50:4", "09:55:4").split("\n")[3:]  # the syncs again, 5 minutes on
    one(diagnose({"kube-proxy.log": START_UP + "\n".join(later)}), "KP108")


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
