"""KP118: kube-proxy cannot run the conntrack tool to clear stale UDP entries."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import note_version, start
from kpdoctor.facts import Facts
from kpdoctor.knowledge import VersionRow, check, signature
from kpdoctor.model import Confidence, Finding, Severity
from kpdoctor.versions import KubeVersion

# Every era's wording: `Error looking for path of conntrack: exec: "conntrack": executable file
# not found in $PATH` (iptables proxier, glog), `error looking for path of conntrack: executable
# file not found in $PATH` (pkg/util/conntrack, structured).
CONNTRACK_MISSING = signature(
    "conntrack-binary-missing",
    "ooking for path of conntrack",
    r"[Ll]ooking for path of conntrack: (exec: .conntrack.: )?executable file not found",
)
NO_CONNTRACK_BINARY_SINCE = KubeVersion(1, 32, 0)  # k/k#126847: stale entries cleared over netlink


@check(
    "KP118",
    cause="conntrack-binary-missing",
    title="kube-proxy cannot run the conntrack tool",
    severity=Severity.WARNING,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=("stale-udp-conntrack",),
    versions=(
        VersionRow(
            "kube-proxy",
            "before 1.32 (runs the conntrack binary)",
            "1.32.0 (netlink)",
            "https://github.com/kubernetes/kubernetes/pull/126847",
        ),
    ),
)
def conntrack_binary_missing(facts: Facts) -> Iterator[Finding]:
    """kube-proxy cannot find `conntrack`, so stale UDP entries to removed Pods stay.

    Symptom: DNS or another UDP Service keeps failing after its Pods were replaced; kube-proxy
        logs `conntrack returned error: error looking for path of conntrack: exec: "conntrack":
        executable file not found in $PATH` or `"Failed to delete stale service connections"
        err="... error looking for path of conntrack: executable file not found in $PATH"`.
    Cause: before 1.32 kube-proxy (iptables and IPVS modes) ran the `conntrack` binary
        (conntrack-tools) to delete UDP/SCTP conntrack entries of removed endpoints; an image or
        node without it leaves clients talking to dead backends until the entry expires,
        which a steady sender never lets happen. A missing binary does not stop kube-proxy.
    How it is detected: the lookup failure in kube-proxy's log, any proxy mode; more severe
        when the lines name UDP Services (DNS). kube-proxy 1.32 and later clears entries over
        netlink and needs no binary.
    Fix: install conntrack-tools where kube-proxy runs (the node for a binary kube-proxy, the
        image otherwise: upstream images ship it), or move to kube-proxy 1.32+. Until then,
        flush the stale entries by hand: `conntrack -D -p udp --orig-dst SERVICE_IP`.
    References: https://github.com/kubernetes/kubernetes/pull/126847;
        https://github.com/kubernetes/kubernetes/issues/26515
    """
    hits = facts.log.hits(CONNTRACK_MISSING.id)
    if not hits:
        return
    udp = any("UDP" in h.record or ":53" in h.record or "dns" in h.record.lower() for h in hits)
    f = start(facts, "KP118", hits, confidence=Confidence.HIGH)
    f.summary = (
        "kube-proxy cannot find the conntrack binary, so it never deletes the conntrack entries of removed "
        "UDP endpoints: clients with a steady flow (DNS) keep reaching dead Pods."
    )
    if udp:
        f.severity = Severity.CRITICAL
        f.summary += " The failed clean-ups are for UDP Services."
    kpv = facts.kube_proxy_version
    note_version(f, kpv, "kube-proxy")
    f.fix = [
        "Install conntrack-tools where kube-proxy runs (its image, or the node for a binary kube-proxy), or "
        "upgrade to kube-proxy 1.32 or later, which clears entries over netlink.",
        "Meanwhile clear the stale entries of each affected Service: `conntrack -D -p udp --orig-dst SERVICE_IP`.",
    ]
    f.fixed_in = ["v1.32.0"]
    yield f
