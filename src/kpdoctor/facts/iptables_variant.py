"""The iptables variant (legacy or nf_tables) of the node and of a failing binary.

Several causes ask it (a backend mismatch, a kernel without a table, kubelet's chains): the node's
own backend is read here once, from its `iptables --version`, else inferred from the OS or
kernel release; a failing binary's from the banner in its error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kpdoctor import lazy_re
from kpdoctor.model import Cite, Confidence
from kpdoctor.parse.logscan import Hit
from kpdoctor.versions import IptablesVersion, KernelVersion

if TYPE_CHECKING:
    from kpdoctor.facts import Facts

# OSes whose iptables defaults to nf_tables, where old legacy-only images break. (The seed names
# Ubuntu 20.04 too, but its iptables 1.8.4 points every ip*tables link at xtables-legacy-multi:
# canonical/snapd#8544; Ubuntu switched to nf_tables by default later, 22.04 is nft.)
NFT_DEFAULT_OS = lazy_re.compile(
    r"tlinux ?(2\.6|3\.[12])|tencentos|centos.*\b8|rhel.*\b([89]|1\d)|ubuntu.*\b(2[2-9])\.|debian.*\b(1[0-9])\b|fedora",
    re.I,
)
# The backend a node's own iptables (and so kubelet's) uses, from its OS release when nobody ran
# `iptables --version` there: what each distribution ships. First match wins.
_RHEL_LIKE = r"\b(centos|red hat enterprise linux|rhel|rocky|almalinux|oracle linux)\b\D{0,40}?"
OS_BACKENDS: list[tuple[re.Pattern[str], str, str]] = [
    (
        lazy_re.compile(r"red hat enterprise linux coreos|\brhcos\b", re.I),
        "nft",
        "RHEL CoreOS is RHEL 8+: iptables-nft only",
    ),
    (
        lazy_re.compile(_RHEL_LIKE + r"\b[4-7](\.\d+)*\b", re.I),
        "legacy",
        "RHEL/CentOS 7 ships iptables 1.4.21, legacy only",
    ),
    (lazy_re.compile(_RHEL_LIKE + r"\b([89]|1\d)(\.\d+)*\b", re.I), "nft", "RHEL 8 and later ship only iptables-nft"),
    (
        lazy_re.compile(r"\bubuntu\b\D{0,20}?\b(1[0-8])\.", re.I),
        "legacy",
        "Ubuntu 18.04 and older ship iptables 1.6, legacy only",
    ),
    (
        lazy_re.compile(r"\bubuntu\b\D{0,20}?\b(19|20)\.", re.I),
        "legacy",
        "Ubuntu 20.04's iptables 1.8.4 uses the legacy backend by default",
    ),
    (
        lazy_re.compile(r"\bdebian\b\D{0,40}?\b[5-9]\b", re.I),
        "legacy",
        "Debian 9 and older ship iptables 1.6, legacy only",
    ),
    (
        lazy_re.compile(r"\bamazon linux 2023\b|\bamzn\b\D{0,5}2023\b", re.I),
        "nft",
        "Amazon Linux 2023's iptables is iptables-nft",
    ),
    (
        lazy_re.compile(r"\bamazon linux 2\b|\bamzn\b\D{0,5}2\b", re.I),
        "legacy",
        "Amazon Linux 2's iptables uses the legacy backend",
    ),
    # iptables 1.8 (the first with nf_tables) came with Fedora 29: older releases are legacy-only.
    (
        lazy_re.compile(r"\bfedora\b\D{0,30}?\b([1-9]|1\d|2[0-8])\b", re.I),
        "legacy",
        "Fedora 28 and older ship iptables 1.6 or older, legacy only",
    ),
    (NFT_DEFAULT_OS, "nft", "it defaults to the nf_tables backend"),
]
NFT_SINCE_KERNEL = (3, 13, 0)  # nf_tables was merged in Linux 3.13: older kernels are legacy-only


@dataclass(frozen=True, slots=True)
class HostIptables:
    """The variant the node's own iptables (kubelet's) uses, and how that is known: from its
    `iptables --version` (``version``), or inferred from its OS or kernel release."""

    variants: frozenset[str]  # one, or both when host-side versions of both backends were given
    source: str  # "version" | "OS release" | "kernel release"
    text: str  # "iptables v1.8.4 (nf_tables)" or "CentOS Linux 7 (Core): RHEL/CentOS 7 ships ..."
    cites: tuple[Cite, ...]

    def says(self, backend: str) -> bool | None:
        """Does the node use ``backend``? None when the evidence holds both."""
        if len(self.variants) > 1:
            return None if backend in self.variants else False
        return backend in self.variants

    @property
    def confidence(self) -> Confidence:
        return Confidence.HIGH if self.source == "version" and len(self.variants) == 1 else Confidence.MEDIUM

    @property
    def inferred(self) -> bool:
        return self.source != "version"

    def describe(self) -> str:
        if len(self.variants) > 1:
            return f"host-side iptables of both backends were given ({self.text}: several nodes, or both installed)"
        if self.inferred:
            return f"inferred from the {self.source}: {self.text}"
        return self.text


def os_variant(text: str) -> tuple[str, str] | None:
    """(backend, why) for an OS release text (PRETTY_NAME, ID, VERSION_ID or a Node's osImage)."""
    for rx, backend, why in OS_BACKENDS:
        if rx.search(text):
            return backend, why
    return None


def kernel_variant(k: KernelVersion) -> tuple[str, str] | None:
    """(backend, why) from a kernel release whose distribution fixes the host's iptables."""
    major = int((k.distro_version or "0").split(".")[0] or 0)
    if k.distro == "rhel" and major:
        if major <= 7:
            return "legacy", f"a RHEL/CentOS {major} kernel: that OS ships iptables 1.4.21, legacy only"
        return "nft", f"a RHEL {major} kernel: RHEL 8 and later ship only iptables-nft"
    if k.distro == "amazon" and k.distro_version == "2023":
        return "nft", "an Amazon Linux 2023 kernel: its iptables is iptables-nft"
    if k.distro == "amazon" and k.distro_version == "2":
        return "legacy", "an Amazon Linux 2 kernel: its iptables uses the legacy backend"
    if k.base < NFT_SINCE_KERNEL:
        return "legacy", "a kernel older than 3.13, which has no nf_tables"
    return None


def host_iptables(facts: Facts) -> HostIptables | None:
    """The node's backend: its `iptables --version` (every host-side one given), else inferred
    from /etc/os-release, the Node's osImage, `uname -r` or the Node's kernelVersion."""
    hosts = [(v, a) for v, a in facts.iptables_versions("host") if v.value.effective_variant]
    if hosts:
        backends = frozenset(str(v.value.effective_variant) for v, _ in hosts)
        text = ", ".join(dict.fromkeys(str(v.value) for v, _ in hosts))
        return HostIptables(backends, "version", text, tuple(v.cite for v, _ in hosts))
    osr = facts.os_release
    if osr:
        d, c = osr
        text = " ".join(d.get(k, "") for k in ("PRETTY_NAME", "ID", "VERSION_ID"))
        hit = os_variant(text)
        if hit:
            return HostIptables(
                frozenset([hit[0]]), "OS release", f"{d.get('PRETTY_NAME') or text.strip()}: {hit[1]}", (c,)
            )
    image = facts.node_info("osImage")
    if image is not None and (hit := os_variant(image[0])):
        return HostIptables(frozenset([hit[0]]), "OS release", f"{image[0]}: {hit[1]}", (image[1],))
    kernels = [k for k in (facts.kernel, facts.node_info_kernel) if k is not None]
    for k in kernels:
        hit = kernel_variant(k.value)
        if hit:
            return HostIptables(frozenset([hit[0]]), "kernel release", f"{k.value} is {hit[1]}", (k.cite,))
    return None


def banner(hit: Hit) -> IptablesVersion | None:
    """The iptables binary that failed, from the banner in its error (``iptables-restore v1.8.4
    (legacy)``, ``ip6tables-restore v1.6.0``, ``iptables v1.6.0``)."""
    rec = hit.record or hit.text
    found = IptablesVersion.banners(rec)
    return found[0] if found else None
