"""KP100: kube-proxy's rule sync keeps failing (the symptom every restore failure shares)."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import SYNC_SYMPTOMS, start
from kpdoctor.facts import Facts
from kpdoctor.facts.log import RESTORE_FAILED, SYNC_FAILED
from kpdoctor.knowledge import check
from kpdoctor.model import Confidence, Finding, Severity


# Root causes that make iptables-restore fail; when one is found this symptom folds under it.
@check(
    "KP100",
    cause="rule-sync-stale",
    title="kube-proxy's rule sync is failing",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=SYNC_SYMPTOMS,
)
def restore_failing(facts: Facts) -> Iterator[Finding]:
    """kube-proxy cannot apply its rules: every sync ends in a failed iptables-restore.

    Symptom: Services stop following their endpoints: new Services have no rules, deleted Pods
        keep receiving traffic. The log repeats "Failed to execute iptables-restore" and, since
        about 1.21, "Sync failed" retryingTime=...
    Cause: the restore payload is rejected. The specific reason is in the error text (backend
        mismatch, xtables lock, a kernel that cannot load a target...); kpdoctor reports that
        root cause separately and folds this symptom under it. When no known reason matches,
        this finding stands alone with the error lines to read.
    How it is detected: restore-failure and "Sync failed" lines in kube-proxy's log, and whether
        any sync succeeded after the last failure (a "SyncProxyRules complete"/"syncProxyRules
        took" line with no failure since the previous one).
    Fix: fix the root cause named with this finding; then watch the log for a successful sync
        (or `kubeproxy_sync_proxy_rules_last_timestamp_seconds` moving).
    References: seed 000;
        https://github.com/kubernetes/kubernetes/blob/master/pkg/proxy/iptables/proxier.go (syncProxyRules);
        https://cloud.tencent.com/document/product/457/79797
    """
    hits = facts.log.hits(*RESTORE_FAILED.ids, *SYNC_FAILED.ids)
    if not hits:
        return
    restore = facts.log.hits(*RESTORE_FAILED.ids) or hits
    failed = facts.log.count(*RESTORE_FAILED.ids) or facts.log.count(*SYNC_FAILED.ids)
    f = start(facts, "KP100", restore, confidence=Confidence.HIGH, summary=f"iptables-restore failed {failed} time(s).")
    f.fix = ["Fix the root cause reported with this finding, then confirm a sync succeeds."]
    v6_only = all("ip6tables" in h.record for h in restore)
    if v6_only and facts.log.successes_between(restore[0], restore[-1]):
        # Dual-stack: one proxier per family. Successful syncs between IPv6 failures are IPv4's.
        after = facts.log.successes_after_count(restore[-1])
        f.ongoing = after < 2
        f.summary += " Every failure is IPv6 (ip6tables-restore) while other syncs succeed: IPv6 Service rules are " + (
            "stale." if f.ongoing else "recovered (several syncs succeeded after the last failure)."
        )
    elif f.ongoing:
        f.summary += " No sync has succeeded since the last failure: the node's rules are stale."
    elif f.ongoing is False:
        f.summary += " A later sync succeeded."
    else:
        kpv = facts.kube_proxy_version
        level = "4" if kpv is not None and kpv.value.line < (1, 21) else "2 (4 before 1.21)"
        f.summary += f" The log has no sync outcome lines (kube-proxy logs them at --v={level})."
    if f.ongoing is False:
        f.severity = Severity.WARNING if (f.occurrences or 0) > 3 else Severity.INFO
    yield f
