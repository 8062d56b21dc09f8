"""KP105: kube-proxy's watch connection to the apiserver is broken (stale HTTP/2 connection)."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, apply_remedy, kube_proxy_remedy, start, version_rows
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check, signature
from kpdoctor.model import Confidence, Finding, Severity
from kpdoctor.versions import FixRow

STREAM_ERROR = signature(
    "http2-stream-error-closed-connection",
    "closed connection",
    r"Stream error http2\.StreamError.*may be caused by closed connection",
)
CLOSED_CONN = signature(
    "watch-use-of-closed-connection",
    "closed network connection",
    r"(Failed to (list|watch)|failed to list|watch of).*use of closed network connection",
)
CONN_LOST = signature("http2-client-connection-lost", "http2: client connection lost", r"http2: client connection lost")
# Before 1.0 (v0.x, api v1beta1), kube-proxy's own watch loop re-requested a resource version whose
# history etcd had cleared, forever, without listing again (k/k#3216, patched by k/k#3410).
# Modern client-go relists on "too old resource version": that one is benign and not matched.
WATCH_EXPIRED_V0 = signature(
    "watch-channel-history-cleared",
    "channel: ",
    r"Got error status on Watch(Endpoints|Services) channel: .*(outdated and cleared|history has been cleared)",
    failure=True,
)

FIXES = [
    FixRow((1, 18), "v1.18.4-tke.26", vendor="tke"),
    FixRow((1, 18), status="unaffected", vendor="tke", above=True),
    FixRow((1, 18), status="no-fix", vendor="tke", below=True, note="TKE clusters before 1.18 need a cluster upgrade"),
    FixRow((1, 20), status="unaffected", above=True, note="1.20+ enables HTTP/2 health checks"),
    FixRow((1, 20), "v1.20.0"),
    FixRow((1, 19), "v1.19.5"),
    FixRow((1, 18), "v1.18.18"),
    FixRow((1, 18), status="no-fix", below=True, note="1.17 and older have no upstream fix"),
]


@check(
    "KP105",
    cause="apiserver-connection-stale",
    title="kube-proxy's connection to the apiserver is stale",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=RESTORE_SYMPTOMS,
    versions=version_rows(FIXES, "seed 000; https://github.com/kubernetes/kubernetes/pull/95981"),
)
def apiserver_stale(facts: Facts) -> Iterator[Finding]:
    """kube-proxy keeps using a dead HTTP/2 connection to the apiserver and stops seeing changes.

    Symptom: `Failed to list *core.Endpoints: Stream error http2.StreamError{StreamID:0xea1,
        Code:0x2, Cause:error(nil)} when reading response body, may be caused by closed
        connection. Please retry.` or "use of closed network connection" repeating; new Services
        and endpoint changes never reach the node's rules until kube-proxy is restarted.
    Cause: Go's HTTP/2 client kept a broken TCP connection in its pool (golang/go#39750-class);
        client-go only gained HTTP/2 health checks (ReadIdleTimeout/PingTimeout) in 1.20
        (k/k#95981), backported to 1.19.5 and 1.18.18.
    How it is detected: the stream-error / closed-connection lines from kube-proxy's reflectors,
        with the kube-proxy version compared to the fixed releases. Before 1.0 the same outcome
        had another cause and message: the watch channels re-requesting an index etcd had
        cleared ("Got error status on WatchEndpoints channel ... outdated and cleared").
    Fix: upgrade kube-proxy (upstream 1.18.18+, 1.19.5+, 1.20+; TKE 1.18 -> v1.18.4-tke.26;
        TKE clusters before 1.18: upgrade the cluster); restart kube-proxy now to reconnect; do
        not set HTTP2_READ_IDLE_TIMEOUT_SECONDS=0; check idle timeouts on load balancers in
        front of the apiserver.
    References: seed 000; https://github.com/kubernetes/kubernetes/issues/87615;
        https://github.com/kubernetes/kubernetes/pull/95981;
        https://github.com/kubernetes/kubernetes/pull/100376;
        https://github.com/kubernetes/kubernetes/issues/3216 (v0.x watch channels)
    """
    hits = facts.log.hits(STREAM_ERROR.id, CLOSED_CONN.id, CONN_LOST.id)
    if not hits:
        yield from _expired_watch_v0(facts)
        return
    f = start(
        facts,
        "KP105",
        hits,
        confidence=Confidence.HIGH if facts.log.count(STREAM_ERROR.id) else Confidence.MEDIUM,
        summary="kube-proxy's list/watch calls fail on a closed HTTP/2 connection, so it stops "
        "seeing Service and endpoint changes.",
        severity=Severity.CRITICAL,
    )
    if (f.occurrences or 0) == 1 and f.ongoing is False:
        f.severity = Severity.INFO
        f.summary += " It happened once and kube-proxy recovered."
    rem, found, where = kube_proxy_remedy(facts, FIXES)
    apply_remedy(f, rem, found, where)
    if rem.affected is False and f.severity > Severity.INFO:
        f.confidence = Confidence.MEDIUM
        f.summary += " This version has the HTTP/2 health check, so look at the network path to the apiserver too."
    f.fix.append(
        "Restart kube-proxy now to drop the dead connection (`kubectl -n kube-system delete pod <kube-proxy pod>`)."
    )
    yield f


def _expired_watch_v0(facts: Facts) -> Iterator[Finding]:
    """kube-proxy v0.x stuck re-watching an expired resource version."""
    hits = facts.log.hits(WATCH_EXPIRED_V0.id)
    if not hits:
        return
    kinds = sorted({h.groups[0] for h in hits if h.groups and h.groups[0]})
    f = start(
        facts,
        "KP105",
        hits,
        confidence=Confidence.HIGH,
        severity=Severity.CRITICAL,
        summary=f"kube-proxy's {' and '.join(kinds) or 'watch'} channel(s) keep asking etcd for a history it "
        "has cleared ('outdated and cleared') and never list again, so Service and endpoint changes stop "
        "reaching the node (kube-proxy before 1.0).",
    )
    f.fix = [
        "Upgrade: kube-proxy from before 1.0 (api v1beta1) has this watch loop; the loop was fixed by "
        "https://github.com/kubernetes/kubernetes/pull/3410.",
        "Restart kube-proxy now to list the current state again.",
    ]
    yield f
