"""KP314: conntrack marks packets of live TCP connections INVALID."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.logged import messages_naming, start_logged
from kpdoctor.facts import Facts
from kpdoctor.knowledge import VersionRow, check
from kpdoctor.model import Confidence, Finding, Severity

CAUSE = "conntrack-invalid-packets"
LIBERAL = "net.netfilter.nf_conntrack_tcp_be_liberal"


@check(
    "KP314",
    cause=CAUSE,
    title="conntrack marks packets of live connections INVALID",
    severity=Severity.WARNING,
    needs=[Kind.KERNEL_LOG, Kind.KUBE_PROXY_LOG],
    reads_messages=True,
    versions=(
        VersionRow(
            "kube-proxy",
            "before 1.15 (INVALID packets escape the Service's DNAT: the Pod resets the connection)",
            "1.15.0 (drops INVALID packets in FORWARD)",
            "https://github.com/kubernetes/kubernetes/pull/74840",
        ),
        VersionRow(
            "kube-proxy",
            "1.15-1.28 (drops every INVALID packet, legitimate asymmetric traffic too)",
            "1.29.0 (no drop rule when nf_conntrack_tcp_be_liberal is set)",
            "https://github.com/kubernetes/kubernetes/pull/120412",
        ),
    ),
)
def conntrack_invalid(facts: Facts) -> Iterator[Finding]:
    """Out-of-window or unexpected TCP packets are INVALID to conntrack: connections are reset or stall.

    Symptom: long or busy TCP connections through a Service end with "connection reset by peer"
        now and then, or stall; with net.netfilter.nf_conntrack_log_invalid set, the kernel logs
        `nf_ct_proto_6: SEQ is over the upper bound (over the window of the receiver)` or
        `invalid packet ignored in state ...`.
    Cause: conntrack classes a packet INVALID when it falls outside the tracked TCP window (a
        retransmission after a long pause, offloads, large windows) or does not fit the state.
        Before kube-proxy 1.15 such a packet skipped the Service's DNAT and reached the Pod
        with the Service's address, so the Pod answered with a reset; since 1.15 kube-proxy
        drops INVALID packets in FORWARD, which also drops legitimate traffic on asymmetric
        (multi-homed, anycast) paths.
    How it is detected: the kernel's own conntrack messages (the messages catalogue), in the
        kernel log or a pasted fragment; the nf_conntrack_tcp_be_liberal setting when a sysctl
        listing is given.
    Fix: `sysctl -w net.netfilter.nf_conntrack_tcp_be_liberal=1` (persisted in /etc/sysctl.d/):
        conntrack then accepts out-of-window packets instead of marking them INVALID, and
        kube-proxy 1.29+ leaves out its INVALID drop rule; before 1.15, upgrade kube-proxy.
    References: https://github.com/kubernetes/kubernetes/issues/74839;
        https://kubernetes.io/blog/2019/03/29/kube-proxy-subtleties-debugging-an-intermittent-connection-reset/;
        https://github.com/kubernetes/kubernetes/pull/120412
    """
    logged = messages_naming(facts, CAUSE)
    if not logged:
        return
    f = start_logged(facts, "KP314", logged, confidence=Confidence.MEDIUM)
    f.summary = "conntrack marks packets of live TCP connections INVALID (the kernel logs them)."
    liberal = facts.node_state.setting(LIBERAL)
    if liberal is not None and liberal.int() == 1:
        f.severity = Severity.INFO
        f.summary += f" {LIBERAL} is 1 here: conntrack accepts such packets, and kube-proxy 1.29+ does not drop them."
    elif liberal is not None:
        f.summary += f" {LIBERAL} is {liberal.value}: they are dropped (kube-proxy 1.15+) or reset the connection."
    f.fix = [
        f"Set `{LIBERAL}=1` (sysctl, persisted in /etc/sysctl.d/); on kube-proxy before 1.15, upgrade it.",
    ]
    yield f
