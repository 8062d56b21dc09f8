"""KP117: kube-proxy exits because the kernel will not let it write the conntrack limits."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start
from kpdoctor.facts import Facts
from kpdoctor.knowledge import VersionRow, check, signature
from kpdoctor.model import Confidence, Finding, Severity
from kpdoctor.versions import kernel_carries

# Kernels carrying "netfilter: conntrack: Make global sysctls readonly in non-init netns"
# (torvalds/linux 671c54ea8c7f; stable backport d0febd81ae77): 5.12.2 and 5.10.35 (kind#2240).
READONLY_SINCE = {(5, 10): 35, (5, 12): 2}  # stable backports: line -> first patch level
READONLY_FROM = (5, 13)  # every later line has it

CONNTRACK_WRITE_REFUSED = signature(
    "conntrack-sysctl-write-refused",
    "nf_conntrack",
    r"(open|write) (/proc/sys/net/netfilter/nf_conntrack_max|/sys/module/nf_conntrack/parameters/hashsize): "
    r"(permission denied|read-only file system|operation not supported)",
    failure=True,
)


def readonly_kernel(release: tuple[int, int, int]) -> bool | None:
    """Does this kernel refuse nf_conntrack_max writes outside the initial netns? None: 5.11
    (not known whether that stable line took the backport)."""
    return kernel_carries(release, READONLY_FROM, READONLY_SINCE, frozenset({(5, 11)}))


@check(
    "KP117",
    cause="conntrack-sysctl-readonly",
    title="kube-proxy cannot write the conntrack limits in its network namespace",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=RESTORE_SYMPTOMS,
    versions=(
        VersionRow(
            "kernel",
            "5.10.35+, 5.12.2+, 5.13 and later (5.11: unknown)",
            "",
            "https://github.com/kubernetes-sigs/kind/issues/2240",
        ),
        VersionRow("kind", "before 0.11.0", "0.11.0", "https://github.com/kubernetes-sigs/kind/pull/2241"),
        VersionRow(
            "k3s",
            "before the supervisor sets nf_conntrack_max",
            "k3s#3337 (May 2021 releases)",
            "https://github.com/k3s-io/k3s/pull/3337",
        ),
    ),
)
def conntrack_sysctl_readonly(facts: Facts) -> Iterator[Finding]:
    """kube-proxy exits at start: the conntrack sysctls are read-only where it runs.

    Symptom: kube-proxy crash-loops right after `Set sysctl 'net/netfilter/nf_conntrack_max'
        to 131072` with `F0513 ... server.go:495] open /proc/sys/net/netfilter/nf_conntrack_max:
        permission denied` (structured: `"Error running ProxyServer" err="... permission
        denied"`, 1.36: `could not set conntrack parameters from kube-proxy configuration`), or
        `write /sys/module/nf_conntrack/parameters/hashsize: operation not supported`. Typical
        of kind, minikube (docker driver), k3d, and kube-proxy in LXC/LXD containers.
    Cause: from Linux 5.12.2 and 5.10.35 (commit 671c54ea8c7f) nf_conntrack_max is global and
        read-only outside the initial network namespace; the hashsize parameter never could be
        written from another one. kube-proxy in a container's namespace (a node that is itself
        a container) tries to raise them and gives up.
    How it is detected: the refused write in the log; the node's kernel release (uname, the
        Node's kernelVersion) against the releases carrying the change.
    Fix: tell kube-proxy to leave the limit alone: `conntrack.maxPerCore: 0` (and
        `conntrack.min: 0`) in the KubeProxyConfiguration, or `--conntrack-max-per-core=0`;
        set nf_conntrack_max on the host instead. kind 0.11.0+, and current minikube, k3s,
        k3d and microk8s releases do this; or run kube-proxy in the host network namespace.
    References: https://github.com/kubernetes-sigs/kind/issues/2240;
        https://github.com/kubernetes-sigs/kind/pull/2241; https://github.com/kubernetes/minikube/issues/11418;
        https://github.com/k3s-io/k3s/pull/3337; https://github.com/kubernetes/kubernetes/issues/141943
    """
    hits = facts.log.hits(CONNTRACK_WRITE_REFUSED.id)
    if not hits:
        return
    f = start(facts, "KP117", hits, confidence=Confidence.HIGH)
    what = hits[0].groups[1] or "nf_conntrack_max"
    f.summary = (
        f"kube-proxy could not write {what} ({hits[0].groups[2]}) and stopped: the conntrack limits are read-only "
        "in the network namespace it runs in (a node that is a container: kind, minikube, k3d, LXC)."
    )
    f.confidence_reason = "the refused write (the kernel release is not in the evidence)"
    k = facts.node_kernel
    if k is not None:
        f.confidence_reason = f"the refused write and kernel {k.value}"
        f.versions_found["kernel"] = str(k.value)
        f.evidence.append(k.cite)
        # a distribution's frozen base (RHEL 4.18, Ubuntu 5.4) may carry the change as a backport
        frozen = k.value.distro in ("rhel", "ubuntu", "debian", "suse", "amazon") and k.value.base < READONLY_FROM
        ro = None if frozen else readonly_kernel(k.value.base)
        if ro:
            f.summary += (
                f" Kernel {k.value} makes nf_conntrack_max read-only outside the host's namespace "
                "(5.12.2, 5.10.35 and later)."
            )
        elif ro is False and "hashsize" not in what:
            f.confidence = Confidence.MEDIUM
            f.summary += (
                f" Kernel {k.value} predates that change: the namespace itself (LXC, a user namespace) refuses it."
            )
    f.fix = [
        "Set `conntrack.maxPerCore: 0` (and `conntrack.min: 0`) in the KubeProxyConfiguration (or "
        "`--conntrack-max-per-core=0`) so kube-proxy leaves the limit as it is; raise nf_conntrack_max on the host.",
        "kind 0.11.0 and later, and current minikube, k3s/k3d and microk8s releases configure this; upgrade them.",
    ]
    if f.ongoing is False:
        f.severity = Severity.WARNING
    yield f
