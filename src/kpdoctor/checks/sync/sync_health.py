"""KP206: kube-proxy's last successful sync is old (its healthz and metrics say so)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import SYNC_SYMPTOMS, start
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.health import parse_healthz, parse_metrics
from kpdoctor.parse.kpconfig import parse_duration

LAST_SYNC = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
LAST_QUEUED = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"
FAILURES = (
    "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
    "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
)
DEFAULT_SYNC_PERIOD = 30.0


def _threshold(facts: Facts) -> tuple[float, str]:
    """kube-proxy calls itself unhealthy when a change waits longer than twice syncPeriod."""
    s = facts.kp_config.setting("iptables.syncPeriod")
    period = parse_duration(str(s.value)) if s.value else None
    period = period or DEFAULT_SYNC_PERIOD
    return 2 * period, f"2 x syncPeriod {period:g}s"


def _ago(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


@check(
    "KP206",
    cause="rule-sync-stale",
    title="kube-proxy has not synced its rules for too long",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_HEALTHZ, Kind.KUBE_PROXY_METRICS],
    explains=SYNC_SYMPTOMS,
)
def sync_health(facts: Facts) -> Iterator[Finding]:
    """kube-proxy's own health endpoint and metrics say its last successful sync is old.

    Symptom: `curl 127.0.0.1:10256/healthz` returns 503 (or a `lastUpdated` far behind
        `currentTime`); Service changes (new Pods, deleted Pods, new Services) do not reach this
        node; `kubeproxy_sync_proxy_rules_last_timestamp_seconds` stops moving.
    Cause: every sync fails (the restore errors folded here, or logged), kube-proxy is wedged
        (a deadlock, a hung iptables call holding the lock), or it no longer hears from the
        apiserver while changes queue up.
    How it is detected: healthz JSON (`lastUpdated` vs `currentTime`) older than twice the
        sync period (the limit kube-proxy's own healthz uses); metrics whose last queued change
        is newer than the last successful sync by more than that, or whose last sync is that old
        at collection time; non-zero iptables-restore failure counters are cited.
    Fix: read the sync failure reason in kube-proxy's log (kpdoctor reports known ones as their
        own findings) and fix it; restart kube-proxy if it is wedged; then watch
        `kubeproxy_sync_proxy_rules_last_timestamp_seconds` advance.
    References: https://kubernetes.io/docs/reference/instrumentation/metrics/;
        https://github.com/kubernetes/kubernetes/blob/master/pkg/proxy/healthcheck/proxy_health.go
    """
    limit, why = _threshold(facts)
    evidence: list[Cite] = []
    stale: list[str] = []
    for a in facts.of(Kind.KUBE_PROXY_HEALTHZ):
        hz = parse_healthz(a.text)
        if hz is None:
            continue
        evidence.append(Cite(a.name, a.first_line + hz.line - 1, hz.text))
        if hz.age > limit:
            stale.append(f"healthz: last successful sync {_ago(hz.age)} before {hz.current_time.isoformat()}")
    failures = 0.0
    for a in facts.of(Kind.KUBE_PROXY_METRICS):
        m = parse_metrics(a.text, a.first_line)
        last, queued = m.get(LAST_SYNC), m.get(LAST_QUEUED)
        for name in (LAST_SYNC, LAST_QUEUED, *FAILURES):
            if name in m.lines:
                line, text = m.lines[name]
                evidence.append(Cite(a.name, line, text))
        failures += sum(m.get(n) or 0.0 for n in FAILURES)
        if last is not None and queued is not None and queued - last > limit:
            stale.append(
                f"metrics: a change queued {_ago(queued - last)} after the last successful sync is not applied"
            )
        elif last is not None and facts.evidence.collected_at:
            try:
                now = datetime.fromisoformat(facts.evidence.collected_at.replace("Z", "+00:00")).timestamp()
            except ValueError:
                now = None
            if now is not None and now - last > limit and (queued is None or queued > last):
                stale.append(f"metrics: last successful sync {_ago(now - last)} before collection")
    if not stale:
        return
    f = start(
        facts,
        "KP206",
        [],
        confidence=Confidence.HIGH,
        summary="kube-proxy's rules are stale: " + "; ".join(stale) + f" (limit {why}).",
    )
    if failures:
        f.summary += f" iptables-restore has failed {failures:g} time(s) since kube-proxy started."
    f.evidence = evidence[:5]
    f.ongoing = True
    f.explained_by = ["rule-sync-stale"]  # the log's sync-failure finding, when there is one
    f.fix = [
        "Fix the sync failure kube-proxy logs (known causes are reported with this finding), restart "
        "kube-proxy if it is wedged, and confirm kubeproxy_sync_proxy_rules_last_timestamp_seconds advances."
    ]
    yield f
