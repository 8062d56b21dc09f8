"""rule-sync-stale from kube-proxy's own /healthz and /metrics, in the formats it really serves."""

from __future__ import annotations

from pathlib import Path

from conftest import write

from kpdoctor.diagnose import diagnose_paths
from kpdoctor.parse.health import parse_healthz, parse_metrics

# kube-proxy formats both times with %q, i.e. Go's time.Time.String() (monotonic clock suffix).
STALE_HEALTHZ = (
    '{"lastUpdated": "2024-05-01 10:00:00.123456789 +0000 UTC m=+3600.000000001",'
    '"currentTime": "2024-05-01 10:07:30.5 +0000 UTC m=+4050.5", "nodeEligible": true}'
)
FRESH_HEALTHZ = (
    '{"lastUpdated": "2024-05-01 10:07:30.5 +0000 UTC m=+4050.5",'
    '"currentTime": "2024-05-01 10:07:30.5 +0000 UTC m=+4050.5", "nodeEligible": true}'
)
METRICS = """\
# HELP kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds [ALPHA] The last time a sync of proxy rules was queued
# TYPE kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds 1.7145576e+09
# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were successfully synced
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds 1.7145570e+09
# HELP kubeproxy_sync_proxy_rules_iptables_restore_failures_total [ALPHA] Cumulative proxy iptables restore failures
# TYPE kubeproxy_sync_proxy_rules_iptables_restore_failures_total counter
kubeproxy_sync_proxy_rules_iptables_restore_failures_total 21
"""


def test_go_time_strings_are_read() -> None:
    hz = parse_healthz(STALE_HEALTHZ)
    assert hz is not None and abs(hz.age - 450.376544) < 1e-3
    assert parse_healthz(FRESH_HEALTHZ).age == 0  # type: ignore[union-attr]
    assert parse_healthz('{"lastUpdated": "2024-05-01T10:00:00Z", "currentTime": "2024-05-01T10:01:00Z"}').age == 60  # type: ignore[union-attr]


def test_stale_healthz_is_rule_sync_stale(tmp_path: Path) -> None:
    p = write(tmp_path, "healthz", STALE_HEALTHZ)
    report, _ = diagnose_paths([p])
    [f] = report.findings
    assert f.cause == "rule-sync-stale" and f.code == "KP206" and "last successful sync 8 min before" in f.summary
    assert f.evidence[0].artifact.endswith("healthz") and "lastUpdated" in f.evidence[0].text


def test_fresh_healthz_is_quiet(tmp_path: Path) -> None:
    report, _ = diagnose_paths([write(tmp_path, "healthz.json", FRESH_HEALTHZ)])
    assert report.findings == []


def test_metrics_with_a_change_waiting_and_failures(tmp_path: Path) -> None:
    m = parse_metrics(METRICS)
    assert m.get("kubeproxy_sync_proxy_rules_iptables_restore_failures_total") == 21
    report, _ = diagnose_paths([write(tmp_path, "metrics.txt", METRICS)])
    [f] = report.findings
    assert f.code == "KP206" and "10 min" in f.summary and "21 time(s)" in f.summary
    assert any(c.text.startswith("kubeproxy_sync_proxy_rules_last_timestamp_seconds") for c in f.evidence)


def test_healthz_sync_syncperiod_from_config(tmp_path: Path) -> None:
    """With syncPeriod 5m the limit is 10 minutes: 7.5 minutes is not stale yet."""
    cfg = write(
        tmp_path,
        "config.yaml",
        """\
        apiVersion: kubeproxy.config.k8s.io/v1alpha1
        kind: KubeProxyConfiguration
        iptables:
          syncPeriod: 5m0s
        """,
    )
    report, _ = diagnose_paths([write(tmp_path, "healthz.json", STALE_HEALTHZ), cfg])
    assert [f for f in report.findings if f.code == "KP206"] == []
