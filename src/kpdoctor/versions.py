"""Version parsing and comparison for kube-proxy (upstream and vendor builds), iptables, kernels.

A generic semver library ranks ``v1.18.4-tke.35`` *below* ``v1.18.4`` (as a pre-release), which
is wrong for vendor builds. The rule here (DESIGN.md): compare the upstream major.minor.patch
first, then, only within the same vendor, the vendor build number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# A version is a few dozen characters; the patterns below are slow on long runs of digits and
# int() refuses more than 4,300 of them: hostile text is cut and absurd numbers are not versions.
MAX_VERSION_TEXT = 300
_HUGE_NUMBER = re.compile(r"\d{10,}")


def _version_text(text: str) -> str:
    """``text`` as the version patterns may read it: cut, and with 10-digit numbers blanked."""
    return _HUGE_NUMBER.sub("?", text.strip()[:MAX_VERSION_TEXT])


_KUBE_RE = re.compile(
    r"v?(?P<maj>\d+)\.(?P<min>\d+)(?:\.(?P<patch>\d+))?"
    r"(?P<rest>(?:[-+][0-9A-Za-z][0-9A-Za-z.\-+]*)?)"
)
# Vendor suffixes, most specific first. Each captures the vendor build number.
_VENDORS: list[tuple[str, re.Pattern[str]]] = [
    ("tke", re.compile(r"-tke\.(\d+)")),
    ("eks", re.compile(r"-eks(?:build)?[.-](\d+)")),
    ("eks", re.compile(r"-eks-[0-9a-f]+")),
    ("gke", re.compile(r"-gke\.(\d+)")),
    ("k3s", re.compile(r"\+k3s(\d+)")),
    ("rke2", re.compile(r"\+rke2r(\d+)")),
    ("aks", re.compile(r"-aks[.-]?(\d+)")),
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


@dataclass(frozen=True, slots=True)
class IptablesVersion:
    """``iptables v1.8.7 (nf_tables)``: the numeric version and the backend, if printed."""

    parts: tuple[int, ...]
    backend: str | None  # "legacy" | "nf_tables" | None (1.6 and older print no backend)
    raw: str = field(default="", compare=False)

    @classmethod
    def parse(cls, text: str) -> IptablesVersion | None:
        m = re.search(r"v(\d+(?:\.\d+){1,3})(?:\s*\((legacy|nf_tables)\))?", _version_text(text))
        if not m:
            return None
        parts = tuple(int(p) for p in m.group(1).split("."))
        return cls(parts, m.group(2), m.group(0))

    def at_least(self, *parts: int) -> bool:
        return self.parts >= parts

    @property
    def short_backend(self) -> str | None:
        if self.backend == "nf_tables":
            return "nft"
        return self.backend

    def __str__(self) -> str:
        return self.raw or "v" + ".".join(map(str, self.parts))


_KERNEL_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:-(\d+))?(?:[-.]([A-Za-z][\w.+~-]*))?")


@dataclass(frozen=True, slots=True)
class KernelVersion:
    """A kernel release such as ``5.15.0-127-generic`` or ``6.6.58``.

    Kernels compare by their numeric parts within a distribution flavour: an Ubuntu ABI number
    (the ``-127``) is not comparable with an upstream stable patch level.
    """

    base: tuple[int, int, int]
    abi: int | None
    flavour: str | None
    raw: str = field(default="", compare=False)

    @classmethod
    def parse(cls, text: str) -> KernelVersion | None:
        m = _KERNEL_RE.search(_version_text(text))
        if not m:
            return None
        base = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
        abi = int(m.group(4)) if m.group(4) else None
        return cls(base, abi, m.group(5), m.group(0))

    @property
    def distro(self) -> str:
        """A coarse family: 'ubuntu' when an ABI number is present, else 'upstream'."""
        return "ubuntu" if self.abi is not None else "upstream"

    def __str__(self) -> str:
        return self.raw


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
        return Remedy(
            None,
            all_fixed,
            f"{component} version unknown (add `{component} --version`); first fixed builds: "
            + (", ".join(all_fixed) if all_fixed else "none known"),
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
