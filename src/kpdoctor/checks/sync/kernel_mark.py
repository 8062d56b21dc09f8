"""KP114: the kernel cannot load the (IPv6) MARK target: a netfilter regression."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start
from kpdoctor.checks.registry import check
from kpdoctor.facts import Facts
from kpdoctor.facts.log import RESTORE_VARIANT
from kpdoctor.model import Confidence, Finding, Severity
from kpdoctor.parse.logscan import signature
from kpdoctor.versions import KernelVersion

UNKNOWN_MARK_OPTION = signature(
    "mark-unknown-option",
    'unknown option "--',
    r'unknown option "--(xor-mark|set-xmark|set-mark|or-mark|and-mark)"',
    failure=True,
    variant=RESTORE_VARIANT,  # ip6tables or not: kept apart
)
MARK_REVISION = signature(
    "mark-revision-unsupported",
    "MARK",
    r"Extension MARK revision [0-9]+ not supported",
    failure=True,
    variant=RESTORE_VARIANT,  # ip6tables or not: kept apart
)
MARK_BAD_VALUE = signature(
    "mark-bad-value",
    "MARK: bad value",  # not "MARK", in every KUBE-MARK-DROP
    r'MARK: bad value for option "--(set-mark|xor-mark|or-mark)"',
    failure=True,
    variant=RESTORE_VARIANT,  # ip6tables or not: kept apart
)
MARK_KERNEL_TOO_OLD = signature(
    "mark-kernel-too-old",
    "MARK target: kernel too old",
    r"MARK target: kernel too old for --(or|and|xor)-mark",
    failure=True,
    variant=RESTORE_VARIANT,  # ip6tables or not: kept apart
)

# Kernels known to ship the regression (commit 0bfcb7b71e73; fixed by "netfilter: xtables: fix
# typo causing some targets not to load on IPv6"), and the nearest good ones.
BROKEN_UBUNTU = {(5, 15, 0): {127}, (6, 8, 0): {56, 57, 1025}}
GOOD_UBUNTU = {(5, 15, 0): "5.15.0-126 (or a later fixed ABI)", (6, 8, 0): "6.8.0-55 (or a later fixed ABI)"}
BROKEN_UPSTREAM = {(6, 6, 57), (6, 6, 58), (6, 11, 4), (6, 11, 5)}
GOOD_UPSTREAM = {(6, 6): "6.6.59", (6, 11): "6.11.6"}


def kernel_status(k: KernelVersion) -> tuple[bool | None, str | None]:
    """(known broken?, the release to move to)."""
    if k.abi is not None:
        broken = k.abi in BROKEN_UBUNTU.get(k.base, set())
        return (True if broken else None), GOOD_UBUNTU.get(k.base)
    if k.base in BROKEN_UPSTREAM:
        return True, GOOD_UPSTREAM.get(k.base[:2])
    return None, GOOD_UPSTREAM.get(k.base[:2])


@check(
    "KP114",
    cause="kernel-mark-target-regression",
    title="The kernel cannot load the MARK target (netfilter regression)",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
)
def kernel_mark_regression(facts: Facts) -> Iterator[Finding]:
    """The node's kernel rejects kube-proxy's MARK rules (IPv6): a netfilter regression.

    Symptom: `ip6tables-restore v1.8.4 (legacy): unknown option "--xor-mark"` / `Error occurred at
        line: 16` in kube-proxy's log, or `Warning: Extension MARK revision 0 not supported,
        missing kernel module?`, `MARK: bad value for option "--set-mark"`; the IPv6 (often also
        the whole) sync fails, kube-proxy may crash-loop, Services on that node stop updating.
        The iptables binary is new enough, so the error looks absurd.
    Cause: upstream commit 0bfcb7b71e73 ("netfilter: xtables: avoid NFPROTO_UNSPEC where needed")
        left MARK (and NFLOG/TRACE) unregistered for IPv6. It shipped in upstream stable 6.6.57-58
        and 6.11.4-5 and in distribution kernels such as Ubuntu 5.15.0-127, 6.8.0-56/57 and
        6.8.0-1025-aws. Mixed kernel versions across nodes make only some nodes fail.
    How it is detected: the MARK option errors above in kube-proxy's log (an old iptables cannot
        explain "--xor-mark" being unknown on iptables >= 1.4), with the node's kernel release
        from `uname -r` compared to the known broken and fixed releases.
    Fix: move the node to a fixed kernel (Ubuntu: 5.15.0-126 or a fixed later ABI, 6.8.0-55 or
        a fixed later ABI; upstream 6.6.59+, 6.11.6+) and keep kernel versions uniform across
        the pool; as a stop-gap run kube-proxy single-stack IPv4.
    References: seed 003; https://github.com/rancher/rke2/issues/7438;
        https://github.com/rancher/rke2/issues/8042;
        https://bugs.launchpad.net/ubuntu/+source/linux/+bug/2091990;
        https://github.com/tailscale/tailscale/issues/13863
    """
    hits = facts.log.hits(UNKNOWN_MARK_OPTION.id, MARK_REVISION.id, MARK_BAD_VALUE.id, MARK_KERNEL_TOO_OLD.id)
    kernel = facts.kernel
    if not hits:
        return
    f = start(
        facts,
        "KP114",
        hits,
        confidence=Confidence.MEDIUM,
        summary="iptables-restore rejects kube-proxy's MARK rules although the iptables binary supports them.",
        severity=Severity.CRITICAL,
    )
    if any("ip6tables" in h.record for h in hits):
        f.summary += " Only the IPv6 path (ip6tables) fails, as in the known regression."
    target: str | None = None
    if kernel:
        f.versions_found["kernel"] = str(kernel.value)
        f.evidence.append(kernel.cite)
        broken, target = kernel_status(kernel.value)
        if broken:
            f.confidence = Confidence.HIGH
            f.summary += f" Kernel {kernel.value} is a release known to carry the regression."
        else:
            f.summary += (
                f" Kernel {kernel.value} is not on the list of known broken releases; compare it with a working node."
            )
    else:
        f.summary += " Add `uname -r` to confirm the kernel release."
    if target:
        f.fixed_in.append(target)
        f.fix.append(f"Move this node to kernel {target}; keep every node of the pool on the same kernel.")
    else:
        f.fix.append(
            "Move the node to a kernel without the regression (Ubuntu 5.15.0-126 / 6.8.0-55 or a fixed "
            "later ABI; upstream 6.6.59+ or 6.11.6+) and keep the pool's kernels uniform."
        )
    f.fix.append("Stop-gap: run kube-proxy IPv4 single-stack until the kernel is fixed.")
    yield f
