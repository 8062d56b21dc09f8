"""KP118 and KP119: a binary kube-proxy runs is not there (conntrack; the iptables family)."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, note_version, start
from kpdoctor.checks.registry import VersionRow, check
from kpdoctor.facts import Facts
from kpdoctor.model import Confidence, Finding, Severity
from kpdoctor.parse.logscan import signature
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

# `exec: "iptables": executable file not found in $PATH`, `exec: "ip6tables-restore": ...`, and
# a configured absolute path that is not there (`fork/exec /usr/sbin/iptables-save: no such file`).
IPTABLES_MISSING = signature(
    "iptables-binary-missing",
    "executable file not found",  # not "tables": in most of kube-proxy's lines
    r"exec: .(ip6?tables(-save|-restore)?(-legacy|-nft)?).: executable file not found",
    failure=True,
)
IPTABLES_PATH_MISSING = signature(
    "iptables-binary-path-missing",
    "fork/exec",
    r"fork/exec [^ :]*/(ip6?tables(-save|-restore)?(-legacy|-nft)?): no such file or directory",
    failure=True,
)


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


@check(
    "KP119",
    cause="iptables-binary-missing",
    title="an iptables binary kube-proxy runs is missing",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=("iptables-restore-no-wait", *RESTORE_SYMPTOMS),
)
def iptables_binary_missing(facts: Facts) -> Iterator[Finding]:
    """kube-proxy cannot find iptables, ip6tables, or their -save/-restore tools.

    Symptom: kube-proxy exits at start (`Failed to initialize iptables: error creating chain
        "KUBE-PORTALS-CONTAINER": exec: "iptables": executable file not found in $PATH`,
        `failed to create proxier, aborting`) or every sync fails (`exec: "ip6tables-restore":
        executable file not found in $PATH`).
    Cause: kube-proxy runs the iptables family by name from its PATH: an image without
        ip6tables, a process manager (systemd unit, DC/OS executor, a supervisor) whose PATH
        lacks /sbin or /usr/sbin, or a node that never had the package.
    How it is detected: the exec failure in kube-proxy's log, naming the binary.
    Fix: install the iptables package (both families) where kube-proxy runs, or put its
        directory (usually /usr/sbin or /sbin) on kube-proxy's PATH; restart kube-proxy.
    References: https://github.com/kubernetes-retired/kubernetes-mesos/issues/249;
        https://github.com/kubernetes-retired/kubernetes-mesos/issues/454
    """
    hits = facts.log.hits(IPTABLES_MISSING.id, IPTABLES_PATH_MISSING.id)
    if not hits:
        return
    names = sorted({h.groups[0] for h in hits if h.groups and h.groups[0]})
    f = start(facts, "KP119", hits, confidence=Confidence.HIGH)
    f.summary = (
        f"kube-proxy cannot run {', '.join(names) or 'iptables'}: not on its PATH or not installed, so it "
        "cannot write Service rules."
    )
    f.fix = [
        "Install the iptables package (IPv4 and IPv6 tools) where kube-proxy runs, or put its directory "
        "(usually /usr/sbin or /sbin) on kube-proxy's PATH (systemd unit, executor or supervisor environment); "
        "restart kube-proxy.",
    ]
    yield f
