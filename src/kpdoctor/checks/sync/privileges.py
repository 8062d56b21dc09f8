"""KP132: kube-proxy (or the tool it runs) is not allowed to change the node's netfilter state."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS
from kpdoctor.checks.logged import messages_naming, start_logged
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Confidence, Finding, Severity

CAUSE = "kube-proxy-not-privileged"


@check(
    "KP132",
    cause=CAUSE,
    title="kube-proxy lacks the privileges to program the node",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    reads_messages=True,
    explains=(*RESTORE_SYMPTOMS, "stale-udp-conntrack"),
)
def not_privileged(facts: Facts) -> Iterator[Finding]:
    """iptables, ipvsadm, nft or conntrack refuse kube-proxy with "you must be root".

    Symptom: every sync fails at once; kube-proxy's log wraps `Permission denied (you must be
        root)` (iptables, ipvsadm), `Could not process rule: Operation not permitted` (nft) or
        `sorry, you must be root or get CAP_NET_ADMIN capability` (conntrack).
    Cause: the process runs without CAP_NET_ADMIN in the node's network namespace: kube-proxy's
        container lost `privileged: true` (or the NET_ADMIN capability) in its DaemonSet, runs
        as a non-root user, or sits in a user namespace (rootless Kubernetes, some sandboxes)
        whose capabilities do not reach the host's netfilter. The same words in a terminal
        session mean only that the command was typed without root.
    How it is detected: the tools' own refusals (the messages catalogue), inside kube-proxy's log
        lines (critical), or alone in a pasted session (information: the command needs root).
    Fix: give kube-proxy's container `securityContext: {privileged: true}` (as upstream's
        manifests do) or at least `capabilities: {add: [NET_ADMIN]}` and run it as root in the
        host's network namespace (`hostNetwork: true`); rerun a typed command with `sudo`.
    References: https://github.com/kubernetes/kubernetes/blob/master/cluster/addons/kube-proxy/kube-proxy-ds.yaml;
        https://man7.org/linux/man-pages/man7/capabilities.7.html
    """
    logged = messages_naming(facts, CAUSE)
    if not logged:
        return
    # kube-proxy's own: a kube-proxy message wraps the refusal, or kube-proxy wrote the line
    ours = [
        lm
        for lm in logged
        if lm.match.message.component == "kube-proxy" or any(h.writer == "kube-proxy" for h in lm.hits)
    ]
    if ours:
        f = start_logged(facts, "KP132", ours, confidence=Confidence.HIGH)
        f.summary = (
            "The node's netfilter tools refuse kube-proxy: it runs without CAP_NET_ADMIN in the node's "
            "network namespace, so no rule it writes takes effect."
        )
        if f.ongoing is False:
            f.severity = Severity.INFO
            f.summary += " A later sync succeeded: a privileged instance is running."
        f.fix = [
            "Give kube-proxy's container `securityContext: {privileged: true}` (or the NET_ADMIN capability) and "
            "run it as root with `hostNetwork: true`, as upstream's DaemonSet does.",
        ]
        yield f
        return
    f = start_logged(facts, "KP132", logged, confidence=Confidence.MEDIUM, severity=Severity.INFO)
    f.summary = (
        'A command in the evidence was refused for want of root ("you must be root"): its output is missing, '
        "not empty. Nothing here shows kube-proxy itself refused."
    )
    f.fix = ["Run the command again as root (`sudo iptables-save`, `sudo ipvsadm -Ln`...) and send its output."]
    yield f
