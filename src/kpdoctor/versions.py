"""Version parsing and comparison for kube-proxy (upstream and vendor builds), iptables, kernels.

A generic semver library ranks ``v1.18.4-tke.35`` *below* ``v1.18.4`` (as a pre-release), which
is wrong for vendor builds. The rule here (DESIGN.md): compare the upstream major.minor.patch
first, then, only within the same vendor, the vendor build number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kpdoctor import lazy_re

# A version is a few dozen characters; the patterns below are slow on long runs of digits and
# int() refuses more than 4,300 of them: hostile text is cut and absurd numbers are not versions.
MAX_VERSION_TEXT = 300
_HUGE_NUMBER = lazy_re.compile(r"\d{10,}")


def _version_text(text: str) -> str:
    """``text`` as the version patterns may read it: cut, and with 10-digit numbers blanked."""
    return _HUGE_NUMBER.sub("?", text.strip()[:MAX_VERSION_TEXT])


_KUBE_RE = lazy_re.compile(
    r"v?(?P<maj>\d+)\.(?P<min>\d+)(?:\.(?P<patch>\d+))?"
    r"(?P<rest>(?:[-+][0-9A-Za-z][0-9A-Za-z.\-+]*)?)"
)
# Vendor suffixes, most specific first. Each captures the vendor build number.
_VENDORS: list[tuple[str, re.Pattern[str]]] = [
    ("tke", lazy_re.compile(r"-tke\.(\d+)")),
    ("eks", lazy_re.compile(r"-eks(?:build)?[.-](\d+)")),
    ("eks", lazy_re.compile(r"-eks-[0-9a-f]+")),
    ("gke", lazy_re.compile(r"-gke\.(\d+)")),
    ("k3s", lazy_re.compile(r"\+k3s(\d+)")),
    ("rke2", lazy_re.compile(r"\+rke2r(\d+)")),
    ("aks", lazy_re.compile(r"-aks[.-]?(\d+)")),
]


@dataclass(frozen=True, slots=True)
class KubeVersion:
    """A Kubernetes component version such as ``v1.18.4-tke.35`` or ``v1.30.2+k3s1``."""

    major: int
    minor: int
    patch: int
    vendor: str | None = None
    build: int | None = None
    prerelease: bool = False
    raw: str = field(default="", compare=False)

    @classmethod
    def parse(cls, text: str) -> KubeVersion | None:
        """Parse a version from text such as ``Kubernetes v1.18.4-tke.35``; None if absent."""
        m = _KUBE_RE.search(_version_text(text))
        if not m:
            return None
        rest = m.group("rest") or ""
        vendor: str | None = None
        build: int | None = None
        for name, rx in _VENDORS:
            vm = rx.search(rest)
            if vm:
                vendor = name
                build = int(vm.group(1)) if vm.groups() else None
                break
        pre = bool(re.match(r"-(alpha|beta|rc)\b", rest)) and vendor is None
        raw = m.group(0) if m.group(0).startswith("v") else "v" + m.group(0)
        return cls(
            int(m.group("maj")),
            int(m.group("min")),
            int(m.group("patch") or 0),
            vendor,
            build,
            pre,
            raw,
        )

    @property
    def upstream(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    @property
    def line(self) -> tuple[int, int]:
        """The minor release line, e.g. (1, 18)."""
        return (self.major, self.minor)

    def at_least(self, other: KubeVersion) -> bool | None:
        """Is this version at or past ``other``? None when the two cannot be ordered.

        Vendor fixes are only comparable within the same vendor and the same upstream patch
        level or above: ``v1.18.4-tke.35`` >= ``v1.18.4-tke.26``; ``v1.18.4`` vs
        ``v1.18.4-tke.26`` is unknown (an upstream build may lack the vendor's backport).
        """
        if other.vendor is None:
            if self.upstream != other.upstream:
                return self.upstream > other.upstream
            return not (self.prerelease and not other.prerelease)
        if self.vendor != other.vendor:
            return None
        if self.upstream != other.upstream:
            return self.upstream > other.upstream
        return (self.build or 0) >= (other.build or 0)

    def __str__(self) -> str:
        return self.raw or f"v{self.major}.{self.minor}.{self.patch}"


# An iptables binary's banner as its errors and ``--version`` print it: ``iptables v1.8.7
# (nf_tables)``, ``ip6tables-restore v1.6.0:``, ``iptables-nft-restore v1.8.9 (nf_tables):``, also
# right after an escaped newline (``err="...\\niptables v1.8.6 (legacy): ..."``).
_IPTABLES_BANNER = lazy_re.compile(
    r"(?:\b|(?<=\\n))(ip6?tables(?:-legacy|-nft)?(?:-restore|-save)?) v(\d+(?:\.\d+){1,3})"
    r"(?: \((legacy|nf_tables)\))?"
)


@dataclass(frozen=True, slots=True)
class IptablesVersion:
    """``iptables v1.8.7 (nf_tables)``: the numeric version and the variant, if printed."""

    parts: tuple[int, ...]
    variant: str | None  # "legacy" | "nf_tables" | None (1.6 and older print no variant)
    raw: str = field(default="", compare=False)
    program: str | None = field(default=None, compare=False)  # "ip6tables-restore", when a banner named it

    @classmethod
    def parse(cls, text: str) -> IptablesVersion | None:
        m = re.search(r"v(\d+(?:\.\d+){1,3})(?:\s*\((legacy|nf_tables)\))?", _version_text(text))
        if not m:
            return None
        parts = tuple(int(p) for p in m.group(1).split("."))
        return cls(parts, m.group(2), m.group(0))

    @classmethod
    def banners(cls, text: str, limit: int = 8) -> list[IptablesVersion]:
        """Every iptables banner in ``text`` (an error record), in order, with the program that
        printed it: the binary that failed says which variant it used."""
        out: list[IptablesVersion] = []
        for m in _IPTABLES_BANNER.finditer(text[: MAX_VERSION_TEXT * 20]):
            if len(m.group(2)) > 24:
                continue  # not a version: absurd digit runs
            parts = tuple(int(p) for p in m.group(2).split("."))
            out.append(cls(parts, m.group(3), m.group(0), m.group(1)))
            if len(out) >= limit:
                break
        return out

    def at_least(self, *parts: int) -> bool:
        return self.parts >= parts

    @property
    def short_variant(self) -> str | None:
        if self.variant == "nf_tables":
            return "nft"
        return self.variant

    @property
    def effective_variant(self) -> str | None:
        """The variant this binary writes through: the printed one, or legacy for a binary
        older than 1.8 (those print none and have only the legacy variant); None for a 1.8+
        banner that names none (it could be either)."""
        if self.short_variant:
            return self.short_variant
        return "legacy" if not self.at_least(1, 8) else None

    def __str__(self) -> str:
        return self.raw or "v" + ".".join(map(str, self.parts))


# Flavours of Ubuntu kernels (``5.15.0-127-generic``, ``6.8.0-1025-aws``). The main kernel's
# flavours share its ABI numbers; every cloud/board kernel (aws, azure, gcp...) numbers its own.
_UBUNTU_MAIN_FLAVOURS = lazy_re.compile(r"^(generic|lowlatency|virtual|server)(-[\w]+)?$")
_UBUNTU_FLAVOURS = lazy_re.compile(
    r"^(generic|lowlatency|virtual|server|aws|azure|gcp|gke|gkeop|oracle|kvm|ibm|raspi|nvidia|oem|"
    r"realtime|intel|xilinx|bluefield|fips|hwe|lts|iot|starfive|riscv|allwinner|mtk|laptop)(-[\w-]+)?$"
)
# Debian's kernel flavours are architectures (``6.1.0-18-amd64``, ``6.1.0-18-cloud-amd64``).
_DEBIAN_FLAVOURS = lazy_re.compile(
    r"^(?:(?:cloud|rt)-)?(amd64|arm64|armmp(?:-lpae)?|686(?:-pae)?|i386|ppc64el|powerpc64le|s390x|"
    r"marvell|rpi|armel|loong64|mips\w*|\d?kc-malta|octeon|loongson-\d)$"
)
_ARCHES = r"(?:x86_64|aarch64|ppc64le|s390x|i686|armv7hl|noarch)"
_KERNEL_BASE = lazy_re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
# What follows major.minor.patch, one pattern per distribution scheme, most specific first.
_KERNEL_SCHEMES: list[tuple[str, re.Pattern[str]]] = [
    # RHEL and rebuilds: 4.18.0-513.5.1.el8_9.x86_64, 3.10.0-1062.9.1.el7.x86_64, ...el8uek
    (
        "rhel",
        lazy_re.compile(rf"^-(?P<rel>\d[\d.]*?)\.el(?P<ver>\d+)(?:_(?P<minor>\d+))?(?P<flv>uek)?(?:\.{_ARCHES})?$"),
    ),
    # Fedora: 6.11.4-301.fc41.x86_64
    ("fedora", lazy_re.compile(rf"^-(?P<rel>\d[\d.]*?)\.fc(?P<ver>\d+)(?:\.{_ARCHES})?$")),
    # Amazon Linux: 5.10.192-183.736.amzn2.x86_64, 6.1.112-124.190.amzn2023.x86_64
    ("amazon", lazy_re.compile(rf"^-(?P<rel>\d[\d.]*?)\.amzn(?P<ver>\d+)(?:\.{_ARCHES})?$")),
    # Debian packages and backports: 6.1.76-1+deb12u1, 6.1.0-0.deb11.17-amd64
    ("debian", lazy_re.compile(r"^-(?P<rel>[\w.~]+?)\+deb(?P<ver>\d+)(?:u\d+)?(?:-(?P<flv>[A-Za-z][\w-]*))?$")),
    ("debian", lazy_re.compile(r"^-(?P<rel>\d+\.deb(?P<ver>\d+)\.\d+)(?:-(?P<flv>[A-Za-z][\w-]*))?$")),
    # Arch: 6.6.57-1-lts, 6.11.6-arch1-1, 6.10.10-zen1-1-zen
    ("arch", lazy_re.compile(r"^-(?P<rel>(?:arch|zen|hardened|lts|rt)\d+-\d+)(?:-(?P<flv>[A-Za-z][\w-]*))?$")),
    ("arch", lazy_re.compile(r"^-(?P<rel>\d+)-(?P<flv>lts|zen|hardened|rt|rt-lts)$")),
    # SUSE Linux Enterprise: 5.14.21-150500.55.83-default (150500: SLE 15 SP5, a backported base)
    ("suse", lazy_re.compile(r"^-(?P<rel>(?P<ver>1[0-9]0[0-9]00)\.[\d.]+)(?:-(?P<flv>[A-Za-z][\w-]*))?$")),
    # Ubuntu/Debian ABI: 5.15.0-127-generic, 6.8.0-1025-aws, 6.1.0-18-amd64 (told apart below)
    ("abi", lazy_re.compile(r"^-(?P<abi>\d+)-(?P<flv>[A-Za-z][\w.+~-]*)$")),
    # Anything else: a package release and/or a flavour (6.11.4-1-default, 6.6.58_1, 6.6.58-talos)
    ("other", lazy_re.compile(r"^[-_.](?P<rel>\d[\w.]*?)?(?:[-_.]?(?P<flv>[A-Za-z][\w.+~-]*))?$")),
    ("other", lazy_re.compile(r"^\+(?P<flv>[A-Za-z][\w.+~-]*)$")),  # 6.6.51+rpt-rpi-v8: a build tag
]


@dataclass(frozen=True, slots=True)
class KernelVersion:
    """A kernel release such as ``5.15.0-127-generic``, ``6.6.57-1-lts`` or ``6.6.58``.

    Kernels compare by their numeric parts within a distribution: an Ubuntu or Debian ABI
    number (the ``-127`` of ``5.15.0-127-generic``) is not a stable patch level, and a RHEL
    ``4.18.0-513.el8`` is a frozen base with backports. A numeric suffix of another scheme
    (Arch ``-1-lts``, Fedora ``-301.fc41``) is a package release: the base is then the upstream
    stable release the package is built from.
    """

    base: tuple[int, int, int]
    abi: int | None  # Ubuntu/Debian ABI number only; a package release is ``release``
    flavour: str | None
    raw: str = field(default="", compare=False)
    distro: str = "upstream"  # ubuntu | debian | rhel | suse | fedora | amazon | arch | other | upstream
    release: str | None = None  # the distribution's package release (``301.fc41`` -> "301")
    distro_version: str | None = None  # "41" (fc41), "8.9" (el8_9), "2023" (amzn2023), "12" (+deb12u1)

    @classmethod
    def parse(cls, text: str) -> KernelVersion | None:
        t = _version_text(text)
        m = _KERNEL_BASE.search(t)
        if not m:
            return None
        base = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
        rest = re.match(r"[\w.+~-]*", t[m.end() :])  # the characters a release is made of
        tail = rest.group(0).rstrip(".-") if rest else ""  # not a sentence's full stop
        raw = m.group(0) + tail
        for scheme, rx in _KERNEL_SCHEMES:
            sm = rx.match(tail)
            if not sm:
                continue
            parts = sm.groupdict()
            flavour, ver = parts.get("flv"), parts.get("ver")
            if scheme == "abi":
                abi, flv = int(parts["abi"]), parts["flv"]
                if base[2] == 0 and _UBUNTU_FLAVOURS.match(flv):
                    return cls(base, abi, flv, raw, "ubuntu")
                if base[2] == 0 and _DEBIAN_FLAVOURS.match(flv):
                    return cls(base, abi, flv, raw, "debian")
                return cls(base, None, flv, raw, "other", str(abi))  # a package release
            if scheme == "rhel" and parts.get("minor"):
                ver = f"{ver}.{parts['minor']}"
            release = parts.get("rel")
            if scheme == "other" and not release:
                return cls(base, None, flavour, raw, "upstream")  # 6.6.58-talos: a build tag
            return cls(base, None, flavour, raw, scheme, release, ver)
        return cls(base, None, None, raw, "upstream")

    @property
    def ubuntu_line(self) -> str | None:
        """Which Ubuntu kernel numbers this ABI: "generic" for the main kernel and its
        flavours (lowlatency, generic-64k...), else the cloud/board kernel (aws, azure...)."""
        if self.distro != "ubuntu" or not self.flavour:
            return None
        if _UBUNTU_MAIN_FLAVOURS.match(self.flavour):
            return "generic"
        return self.flavour.split("-", 1)[0]

    @property
    def upstream(self) -> tuple[int, int, int] | None:
        """The upstream stable release this kernel is, when its base says so: not for Ubuntu
        or Debian ABI kernels (base x.y.0) nor RHEL's frozen, backported bases."""
        if self.distro in ("ubuntu", "rhel", "suse") or (self.distro == "debian" and self.abi is not None):
            return None
        if self.distro == "debian" and self.release and ".deb" in self.release:
            return None  # a backports ABI (6.1.0-0.deb11.17): base x.y.0
        return self.base

    def __str__(self) -> str:
        return self.raw


def kernel_carries(
    release: tuple[int, int, int],
    mainline: tuple[int, int],
    stable: dict[tuple[int, int], int],
    unknown: frozenset[tuple[int, int]] = frozenset(),
) -> bool | None:
    """Does a kernel of this upstream numbering carry a change merged in ``mainline`` (x.y) and
    backported to the stable lines ``stable`` (line -> first patch level)? None for a line in
    ``unknown`` (whether it took the backport is not known)."""
    if release[:2] >= mainline:
        return True
    if release[:2] in unknown:
        return None
    first = stable.get(release[:2])
    return first is not None and release[2] >= first


@dataclass(frozen=True, slots=True)
class FixRow:
    """One row of a remediation table, for a release line of one vendor (None = upstream).

    ``fixed`` is the first fixed build of that line; ``status`` says when no upgrade within
    the line exists: "unaffected" (this line never had the bug) or "no-fix" (upgrade the
    cluster to a newer line).
    """

    line: tuple[int, int] | None  # None: any line not listed elsewhere
    fixed: str | None = None
    status: str = "fixed"  # "fixed" | "unaffected" | "no-fix"
    vendor: str | None = None
    note: str = ""
    above: bool = False  # the row covers every line strictly above ``line``
    below: bool = False  # the row covers every line strictly below ``line``

    def covers(self, v: KubeVersion) -> bool:
        if (self.vendor or None) != (v.vendor or None) and self.vendor is not None:
            return False
        if self.line is None:
            return True
        if self.above:
            return v.line > self.line
        if self.below:
            return v.line < self.line
        return v.line == self.line


@dataclass(frozen=True, slots=True)
class Remedy:
    """What the version tables say for the version found."""

    affected: bool | None  # None: cannot tell
    fixed_in: list[str]
    advice: str


def remedy(found: KubeVersion | None, rows: list[FixRow], component: str = "kube-proxy") -> Remedy:
    """Pick the advice for ``found`` from a remediation table (vendor rows first)."""
    all_fixed = [r.fixed for r in rows if r.fixed]
    if found is None:
        # a vendor's builds are named as that vendor's: they fix nothing for anyone else's kube-proxy
        by_vendor: dict[str | None, list[str]] = {}
        for r in rows:
            if r.fixed:
                by_vendor.setdefault(r.vendor, []).append(r.fixed)
        known = [f"upstream {', '.join(by_vendor[None])}"] if None in by_vendor else []
        known += [f"{v.upper()} {', '.join(builds)}" for v, builds in by_vendor.items() if v is not None]
        known += [f"upstream: {r.note}" for r in rows if r.vendor is None and not r.fixed and r.note]
        # a table of one vendor's builds only is a bug of that vendor's: its builds are the fixes
        vendor_only = all(r.vendor is not None for r in rows)
        return Remedy(
            None,
            all_fixed if vendor_only else by_vendor.get(None, []),
            f"{component} version unknown (add `{component} --version`); first fixed builds: "
            + ("; ".join(dict.fromkeys(known)) if known else "none known"),
        )
    candidates = [r for r in rows if r.vendor == found.vendor and r.covers(found)]
    if not candidates and found.vendor is not None:
        candidates = [r for r in rows if r.vendor is None and r.covers(found)]
    if not candidates:
        return Remedy(None, all_fixed, f"no fix information for {component} {found}")
    row = candidates[0]
    if row.status == "unaffected":
        return Remedy(False, [], f"{component} {found} is not affected{': ' + row.note if row.note else ''}")
    if row.status == "no-fix":
        newer = [r.fixed for r in rows if r.fixed and r.vendor == row.vendor]
        return Remedy(
            True,
            newer,
            f"no fixed {component} build exists for {found.major}.{found.minor}: upgrade the "
            f"cluster to a newer release line{' (' + row.note + ')' if row.note else ''}",
        )
    assert row.fixed is not None
    target = KubeVersion.parse(row.fixed)
    assert target is not None
    done = found.at_least(target)
    if done is True:
        return Remedy(False, [row.fixed], f"{component} {found} already includes the fix ({row.fixed})")
    if done is None:
        return Remedy(None, [row.fixed], f"upgrade {component} to {row.fixed} or later (found {found})")
    return Remedy(True, [row.fixed], f"upgrade {component} from {found} to {row.fixed} or later")
