"""KP119: an iptables-family binary kube-proxy runs is not there."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check, signature
from kpdoctor.model import Confidence, Finding, Severity

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
