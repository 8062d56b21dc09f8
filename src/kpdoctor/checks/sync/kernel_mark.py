"""KP114: the kernel cannot load the (IPv6) MARK target: a netfilter regression."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start
from kpdoctor.facts import Facts
from kpdoctor.facts.log import RESTORE_VARIANT
from kpdoctor.knowledge import VersionRow, check, signature
from kpdoctor.model import Confidence, Finding, Severity
from kpdoctor.parse.logscan import Hit
from kpdoctor.versions import IptablesVersion, KernelVersion

# The MARK signatures take quotes escaped too (felix and structured logs quote the restore's
# stderr: `\"--set-mark\"`), as the extension and incompatible-table signatures do.
UNKNOWN_MARK_OPTION = signature(
    "mark-unknown-option",
    "unknown option ",
    r'unknown option \\?"--(xor-mark|set-xmark|set-mark|or-mark|and-mark)\\?"',
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
    r'MARK: bad value for option \\?"--(set-mark|xor-mark|or-mark)\\?"',
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
MARK_SIGNATURES = (UNKNOWN_MARK_OPTION, MARK_REVISION, MARK_BAD_VALUE, MARK_KERNEL_TOO_OLD)

# Kernels known to ship the regression (commit 0bfcb7b71e73; fixed by "netfilter: xtables: fix
# typo causing some targets not to load on IPv6"), and the nearest good ones. Ubuntu ABIs are
# per kernel line: the main kernel (generic, lowlatency...) and each cloud kernel number their
# own (6.8.0-1025 is an aws build; a gcp 6.8.0-1025 is another kernel).
BROKEN_UBUNTU: dict[tuple[tuple[int, int, int], str], set[int]] = {
    ((5, 15, 0), "generic"): {127, 128},  # 128 still without the fix (tailscale#14410)
    ((6, 8, 0), "generic"): {56, 57},
    ((6, 8, 0), "aws"): {1025},
}
GOOD_UBUNTU = {
    ((5, 15, 0), "generic"): "5.15.0-126 (or a later fixed ABI)",
    ((6, 8, 0), "generic"): "6.8.0-55 (or a later fixed ABI)",
}
# Upstream stable releases (and every kernel built from one: Fedora, Arch, Amazon, Bottlerocket...).
BROKEN_UPSTREAM = {(5, 15, 168), (6, 6, 57), (6, 6, 58), (6, 11, 4), (6, 11, 5)}
GOOD_UPSTREAM = {
    (5, 15): "5.15.167 (or a later 5.15 release with the fix)",
    (6, 6): "6.6.59",
    (6, 11): "6.11.6",
}
FIX_COMMIT = "netfilter: xtables: fix typo causing some targets not to load on IPv6"


def kernel_status(k: KernelVersion) -> tuple[bool | None, str | None]:
    """(known broken?, the release to move to), by the kernel's own numbering: an Ubuntu ABI
    within its kernel line, an upstream-based release by its upstream version (a Fedora
    ``6.11.4-301.fc41`` or an Arch ``6.6.57-1-lts`` is upstream 6.11.4 / 6.6.57), nothing for
    backported bases (RHEL, SUSE, Debian ABIs) whose changelog is the only answer."""
    line = k.ubuntu_line
    if k.abi is not None and line is not None:
        key = (k.base, line)
        broken = k.abi in BROKEN_UBUNTU.get(key, set())
        return (True if broken else None), GOOD_UBUNTU.get(key)
    up = k.upstream
    if up is None:
        return None, None
    if up in BROKEN_UPSTREAM:
        return True, GOOD_UPSTREAM.get(up[:2])
    return None, GOOD_UPSTREAM.get(up[:2])


# Who ran the failing binary, when its caller says so: kube-proxy's own sync, or another agent's
# call quoted by that agent (go-iptables' "running [CMD]", Cilium's "unable to run 'CMD'").
_KUBE_PROXY_RESTORE = "Failed to execute iptables-restore"
_QUOTED_COMMAND = lazy_re.compile(r"running \[([^\]]{1,300})\]|unable to run '([^']{1,300})'")
_WHAT = {
    UNKNOWN_MARK_OPTION.id: 'unknown option "--{0}"',
    MARK_REVISION.id: "Extension MARK revision not supported",
    MARK_BAD_VALUE.id: 'MARK: bad value for option "--{0}"',
    MARK_KERNEL_TOO_OLD.id: "MARK target: kernel too old for --{0}-mark",
}


@dataclass(frozen=True, slots=True)
class Writer:
    """A failing call as its record shows it: the binary's banner, the command its caller
    quoted, and whether it was kube-proxy's own restore."""

    binary: str | None
    command: str | None
    kube_proxy: bool

    @property
    def label(self) -> str:
        binary = self.binary or (self.command.split()[0].rsplit("/", 1)[-1] if self.command else "iptables")
        if self.kube_proxy:
            return f"kube-proxy's {binary}"
        if self.command:
            cmd = self.command if len(self.command) <= 90 else self.command[:87] + "..."
            return f"{binary} (`{cmd}`)"
        return binary


def writer(hit: Hit) -> Writer:
    """Which program failed, from the hit's record: its banner (the one at or after the hit),
    kube-proxy's own restore error line, or the command another caller quoted."""
    rec = hit.record or hit.text
    at = rec.find(hit.text) if hit.text else -1
    banners = IptablesVersion.banners(rec[at:] if at >= 0 else rec) or IptablesVersion.banners(rec)
    m = _QUOTED_COMMAND.search(rec)
    command = (m.group(1) or m.group(2) or "").strip() if m else None
    own = _KUBE_PROXY_RESTORE in rec or _KUBE_PROXY_RESTORE in hit.header
    return Writer(str(banners[0]) if banners else None, command or None, own)


def writers(hits: list[Hit]) -> list[Writer]:
    """The distinct failing calls. A caller's quoted command and the binary's own error are
    often split over two lines (stderr after the command): a hit without a command takes the
    one quoted on the lines just above it, and one without a banner the banner just below."""
    seen = [(h, writer(h)) for h in hits]
    out: list[Writer] = []
    for h, w in seen:
        near = [v for g, v in seen if g.artifact == h.artifact and 0 < abs(g.line - h.line) <= 2]
        command = w.command or next((v.command for v in near if v.command), None)
        binary = w.binary or next((v.binary for v in near if v.binary), None)
        merged = Writer(binary, command, w.kube_proxy or any(v.kube_proxy for v in near))
        if merged not in out:
            out.append(merged)
    return out


@check(
    "KP114",
    cause="kernel-mark-target-regression",
    title="The kernel cannot load the MARK target (netfilter regression)",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=RESTORE_SYMPTOMS,
    versions=(
        *(
            VersionRow(
                f"kernel (Ubuntu {flavour})",
                f"{'.'.join(map(str, base))}-{sorted(abis)}",
                "use " + GOOD_UBUNTU[(base, flavour)] if (base, flavour) in GOOD_UBUNTU else "",
                "seed 003",
            )
            for (base, flavour), abis in BROKEN_UBUNTU.items()
        ),
        *(
            VersionRow(
                "kernel (upstream stable)",
                ".".join(map(str, v)),
                "use " + GOOD_UPSTREAM[v[:2]] if v[:2] in GOOD_UPSTREAM else "",
                "seed 003",
            )
            for v in sorted(BROKEN_UPSTREAM)
        ),
    ),
)
def kernel_mark_regression(facts: Facts) -> Iterator[Finding]:
    """The node's kernel rejects the MARK target (IPv6): a netfilter regression.

    Symptom: `ip6tables-restore v1.8.4 (legacy): unknown option "--xor-mark"` / `Error occurred at
        line: 16` in kube-proxy's log, or `Warning: Extension MARK revision 0 not supported,
        missing kernel module?`, `MARK: bad value for option "--set-mark"`, `MARK target: kernel
        too old for --or-mark`; the IPv6 (often also the whole) sync fails, kube-proxy may
        crash-loop, Services on that node stop updating. The iptables binary is new enough, so
        the error looks absurd. Other programs that mark packets (kubelet, CNI and VPN agents
        running `ip6tables ... -j MARK`) fail the same way, often first.
    Cause: upstream commit 0bfcb7b71e73 ("netfilter: xtables: avoid NFPROTO_UNSPEC where needed")
        left MARK (and NFLOG/TRACE) unregistered for IPv6. It shipped in upstream stable
        5.15.168, 6.6.57-58 and 6.11.4-5 (so in every kernel built from them: Fedora
        6.11.4-xxx.fcNN, Arch 6.6.57-1-lts, Bottlerocket 5.15.168) and in distribution kernels
        such as Ubuntu 5.15.0-127/128, 6.8.0-56/57 and 6.8.0-1025-aws. Mixed kernel versions
        across nodes make only some nodes fail.
    How it is detected: the MARK errors above in the log, whichever program's call hit them (the
        kernel cannot tell kube-proxy's restore from another agent's ip6tables; the summary names
        the program and the command when the caller quoted it); an old iptables cannot explain
        "--xor-mark" being unknown on iptables >= 1.4. The kernel release (`uname -r`, else the
        Node's nodeInfo) is read by its distribution's scheme: an Ubuntu ABI within its kernel
        line, a package release (`-1-lts`, `-301.fc41`) as the upstream release it packages.
    Fix: move the node to a fixed kernel (Ubuntu: 5.15.0-126 or a fixed later ABI, 6.8.0-55 or
        a fixed later ABI; upstream 6.6.59+, 6.11.6+; a distribution kernel whose changelog has
        "netfilter: xtables: fix typo causing some targets not to load on IPv6") and keep kernel
        versions uniform across the pool; as a stop-gap run kube-proxy single-stack IPv4.
    References: seed 003; https://github.com/rancher/rke2/issues/7438;
        https://github.com/rancher/rke2/issues/8042;
        https://bugs.launchpad.net/ubuntu/+source/linux/+bug/2091990;
        https://github.com/tailscale/tailscale/issues/13863;
        https://github.com/tailscale/tailscale/issues/14410;
        https://github.com/bottlerocket-os/bottlerocket/issues/4295
    """
    hits = facts.log.hits(*(sig.id for sig in MARK_SIGNATURES))
    if not hits:
        return
    kernel = facts.node_kernel
    failed = writers(hits)
    what = next((h for h in hits if h.sig != MARK_REVISION.id), hits[0])
    err = _WHAT[what.sig].format(*(g for g in what.groups if g)) if what.groups else _WHAT[what.sig].format("")
    names = list(dict.fromkeys(w.label for w in failed))
    named = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    f = start(
        facts,
        "KP114",
        hits,
        confidence=Confidence.MEDIUM,
        summary=f"{named} rejects the MARK target ({err}) although that iptables supports it.",
        severity=Severity.CRITICAL,
    )
    if all(w.command and not w.kube_proxy for w in failed):
        f.summary += (
            " The failing call is another program's, not kube-proxy's sync: the kernel refuses MARK to every "
            "writer, and kube-proxy's own rules use the same target."
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
        elif kernel.value.upstream is None and kernel.value.ubuntu_line is None:
            f.summary += (
                f" Kernel {kernel.value} is a {kernel.value.distro} build on a backported base: look for "
                f'"{FIX_COMMIT}" (or the regression, commit 0bfcb7b71e73) in its changelog.'
            )
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
            "later ABI; upstream 6.6.59+ or 6.11.6+; a distribution kernel whose changelog has "
            f'"{FIX_COMMIT}") and keep the pool\'s kernels uniform.'
        )
    f.fix.append("Stop-gap: run kube-proxy IPv4 single-stack until the kernel is fixed.")
    yield f
