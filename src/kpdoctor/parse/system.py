"""One-screen node facts: uname, os-release, hostname, version banners, processes, locks, modules."""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from kpdoctor import lazy_re, memo
from kpdoctor.parse import ip_brief
from kpdoctor.parse.links import IFCONFIG_HEAD
from kpdoctor.parse.numbers import to_int
from kpdoctor.parse.shellwords import shell_split
from kpdoctor.parse.structured import load_json
from kpdoctor.versions import IptablesVersion, KernelVersion, KubeVersion

_V = TypeVar("_V")

# A version banner is one short line near the top. The version parsers search with patterns that
# take quadratic time on a long run of digits, so they only ever see this much.
_BANNER_CHARS = 4096
_VERSION_CHARS = 512


def _version(parse: Callable[[str], _V | None], text: str) -> _V | None:
    try:
        return parse(text)
    except ValueError:  # more digits than int() reads
        return None


def parse_uname(text: str) -> KernelVersion | None:
    """``uname -a`` or ``uname -r``."""
    head = text[:_BANNER_CHARS].strip()
    line = head.splitlines()[0] if head else ""
    m = re.match(r"Linux \S+ (\S+)", line)
    return _version(KernelVersion.parse, (m.group(1) if m else line)[:_VERSION_CHARS])


# `lsb_release -a` says the same as /etc/os-release, in its own words.
_LSB_KEYS = {
    "Distributor ID": "ID",
    "Description": "PRETTY_NAME",
    "Release": "VERSION_ID",
    "Codename": "VERSION_CODENAME",
}


# `hostnamectl` ("Operating System: Ubuntu 20.04.3 LTS", "Kernel: Linux 5.4.0-91-generic") and
# neofetch ("OS: Arch Linux x86_64", "Kernel: 5.12.3-zen1-1-zen"): the OS and the running kernel
SYSINFO_OS = lazy_re.compile(r"^[ \t]*(?:Operating System|OS):\s*(\S.*)$", re.M)
SYSINFO_KERNEL = lazy_re.compile(r"^[ \t]*Kernel:\s*(?:Linux\s+)?(\d\S*)\s*$", re.M)


def sysinfo_kernel(text: str) -> tuple[KernelVersion, int] | None:
    """The kernel release of a `hostnamectl`/neofetch summary, and its line index."""
    m = SYSINFO_KERNEL.search(text[:_BANNER_CHARS])
    if m is None:
        return None
    v = _version(KernelVersion.parse, m.group(1)[:_VERSION_CHARS])
    return (v, text.count("\n", 0, m.start())) if v is not None else None


def parse_os_release(text: str) -> dict[str, str]:
    """/etc/os-release (``KEY=value``), ``lsb_release -a`` (``Description:\tUbuntu 22.04.1 LTS``),
    or the OS line of `hostnamectl`/neofetch."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Z_][A-Z0-9_]*)=(.*)$", line.strip())
        if m:
            out[m.group(1)] = m.group(2).strip().strip("'\"")
            continue
        m = re.match(r"^(Distributor ID|Description|Release|Codename):\s*(.*)$", line.strip())
        if m:
            out[_LSB_KEYS[m.group(1)]] = m.group(2).strip()
            continue
        m = SYSINFO_OS.match(line)
        if m and "PRETTY_NAME" not in out:
            out["PRETTY_NAME"] = m.group(1).strip()
            words = m.group(1).split()
            out.setdefault("ID", words[0].lower())
            if (ver := next((m for w in words[1:] if (m := re.match(r"\d+(?:\.\d+)?", w))), None)) is not None:
                out.setdefault("VERSION_ID", ver.group(0))  # "20.04" of "20.04.3 LTS", as os-release says
    if out.get("ID"):
        out["ID"] = out["ID"].lower()  # lsb_release says "Ubuntu", os-release "ubuntu"
    return out


def parse_iptables_version(text: str) -> IptablesVersion | None:
    return _version(IptablesVersion.parse, text[:_BANNER_CHARS])  # its pattern starts at a "v": linear


# kube-proxy's image named with its release tag, as a Pod or DaemonSet spec holds it and as
# `kubectl get ds kube-proxy -o jsonpath='{..image}'`, `kubectl describe` ("Image:") or a grep of
# the YAML ("image: ...") print it: registry/kube-proxy[-ARCH]:vX.Y.Z[suffix][@sha256:digest]
KUBE_PROXY_IMAGE = (
    r"(?:[\w.-]+(?::\d+)?/)*kube-proxy(?:-(?:amd64|arm64|arm|ppc64le|s390x))?"
    r":(?P<tag>v?\d+\.\d+\.\d+[\w.+-]*)(?:@sha256:[0-9a-f]{64})?"
)
# a short text of image references, one of them kube-proxy's (the jsonpath's output: every
# container's image, space-separated), or one `image:` / `Image:` line
KUBE_PROXY_IMAGE_TEXT = lazy_re.compile(
    r"^\s*(?:-\s+)?(?:[\"']?image[\"']?\s*:\s*)?(?:[\w.:/@-]+\s+)*[\"']?" + KUBE_PROXY_IMAGE
    + r"[\"']?(?:\s+[\w.:/@-]+)*\s*$",
    re.I,
)  # fmt: skip
_KUBE_PROXY_TAG = lazy_re.compile(KUBE_PROXY_IMAGE)


def parse_kube_proxy_version(text: str) -> KubeVersion | None:
    """``kube-proxy --version`` ("Kubernetes v1.20.2"), or the tag of kube-proxy's image."""
    head = text[:_BANNER_CHARS]
    m = re.search(r"Kubernetes\s+(v\S+)", head)
    if m is None and (t := _KUBE_PROXY_TAG.search(head)) is not None:
        return _version(KubeVersion.parse, t.group("tag")[:_VERSION_CHARS])
    return _version(KubeVersion.parse, (m.group(1) if m else head.strip())[:_VERSION_CHARS])


# busybox `ps` prints "{comm} " before the command line when the process's name differs from its
# argv[0]'s (libbb/procps.c read_cmdline): a script run through its #! line shows as
# `{entrypoint.sh} /bin/sh /entrypoint.sh`, a thread renamed by prctl as `{worker} node app.js`.
_BUSYBOX_COMM = lazy_re.compile(r"^\{[^{}]*\}\s+(?=\S)")


@memo.cached(maxsize=4096)
def _split_command(command: str) -> tuple[str, ...]:
    """A command line as the shell would split it (checks ask for it more than once per process),
    without busybox's ``{comm}``: the words are the process's argv."""
    command = _BUSYBOX_COMM.sub("", command.lstrip(), count=1)
    try:
        return tuple(shell_split(command))
    except ValueError:
        return tuple(command.split())


@dataclass(frozen=True, slots=True)
class Process:
    pid: int
    ppid: int | None
    user: str
    command: str  # full command line as printed
    line: int
    netns: str = ""  # its network namespace (``ps -o netns``: an inode number), when the listing has it

    @property
    def argv(self) -> list[str]:
        return list(_split_command(self.command))

    @property
    def program(self) -> str:
        argv = self.argv
        return argv[0].rsplit("/", 1)[-1] if argv else ""


# Column names `ps` prints (procps, busybox); a header of only these, ending in the command
# column, is a process table whatever columns `-o` chose.
_PS_COLUMN_NAMES = """PID PPID UID USER RUSER GROUP C %CPU %MEM VSZ RSS SZ TTY TT STAT S F START STIME TIME
ELAPSED NI PRI PSR LWP NLWP WCHAN ADDR NETNS"""
PS_COLUMNS = frozenset(_PS_COLUMN_NAMES.split())
PS_COMMAND = frozenset(("CMD", "COMMAND", "ARGS"))


def ps_header(line: str) -> list[str] | None:
    """The columns of a `ps` header line (`ps -ef`, `ps aux`, `ps -o ...`, busybox `ps`)."""
    cols = line.split()
    if len(cols) < 2 or cols[-1] not in PS_COMMAND or "PID" not in cols:
        return None
    return cols if all(c in PS_COLUMNS for c in cols[:-1]) else None


# Rows of a listing whose header a grep or a paste left out, told by what only that listing's
# rows hold: procps' `ps -ef` (UID PID PPID C STIME TTY TIME CMD) and `ps aux` (USER PID %CPU
# %MEM VSZ RSS TTY STAT START TIME COMMAND), busybox's with its TIME column (PID USER TIME
# COMMAND: Alpine's); busybox's PID USER COMMAND rows could be anything's, and are not read alone
HEADERLESS_ROWS = (
    (
        r"\S+\s+\d+\s+\d+\s+\d+\s+\S+\s+\S+\s+\d+:\d\d(?::\d\d)?\s+\S",
        ("UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"),
    ),
    (
        r"\S+\s+\d+\s+\d+\.\d\s+\d+\.\d\s+\d+\s+\d+\s+\S+\s+\S+\s+\S+\s+\d+:\d\d\s+\S",
        ("USER", "PID", "%CPU", "%MEM", "VSZ", "RSS", "TTY", "STAT", "START", "TIME", "COMMAND"),
    ),
    (r"\d{1,7}\s+\S{1,32}\s+\d{1,6}:\d\d\s+\S", ("PID", "USER", "TIME", "COMMAND")),
)
_HEADERLESS = [(lazy_re.compile(rf"^\s*{rx}"), list(cols)) for rx, cols in HEADERLESS_ROWS]


def headerless_processes(lines: list[str]) -> bool:
    """Are these lines (the first of a text) rows of a `ps` listing without its header: most of
    the non-empty ones rows only such a listing prints (:data:`HEADERLESS_ROWS`)?"""
    content = [ln for ln in lines[:50] if ln.strip()]
    rows = sum(1 for ln in content if any(rx.match(ln) for rx, _ in _HEADERLESS))
    return rows > 0 and rows >= 0.8 * len(content)


def parse_processes(text: str, first_line: int = 1) -> list[Process]:
    """Process tables: ``ps -ef``/``-efww``, ``ps aux``, ``ps -o`` custom columns and busybox
    ``ps``, read by their header (the command is the rest of the line after the other columns),
    or, rows without one, by the columns only their listing's rows hold (:data:`HEADERLESS_ROWS`)."""
    procs: list[Process] = []
    cols: list[str] | None = None
    for i, raw in enumerate(text.splitlines()):
        header = ps_header(raw)
        if header is not None:
            cols = header
            continue
        row_cols = cols or next((c for rx, c in _HEADERLESS if rx.match(raw)), None)
        if row_cols is None:
            continue
        parts = raw.split(None, len(row_cols) - 1)
        if len(parts) != len(row_cols):
            continue
        row = dict(zip(row_cols, parts, strict=True))
        pid = to_int(row["PID"])
        if pid is None:
            continue
        user = row.get("USER") or row.get("UID") or row.get("RUSER") or ""
        netns = row.get("NETNS", "").strip("-")  # "-": a kernel thread's, or not allowed to look
        procs.append(Process(pid, to_int(row.get("PPID")), user, parts[-1], first_line + i, netns))
    return procs


def read_processes(text: str, first_line: int = 1, attrs: dict[str, str] | None = None) -> list[Process]:
    """The processes of a listing: a process table, or (``attrs`` format "cmdline") one
    process's ``/proc/N/cmdline`` as a command printed it (:func:`parse_cmdline`)."""
    if attrs and attrs.get("format") == "cmdline":
        pid = to_int(attrs.get("pid", ""))
        return parse_cmdline(text, pid, first_line) if pid is not None else []
    return parse_processes(text, first_line)


# What kubectl and docker print around an exec'd command's output (kubectl's exec.go): not the
# command's output
_EXEC_NOTICE = lazy_re.compile(
    r"^(?:kubectl exec \[POD\] \[COMMAND\] is DEPRECATED|Defaulted container \S+ out of:|"
    r"Unable to use a TTY - input is not a terminal|Defaulting container name to )"
)
# A shell's path with the next word run into it: /proc/N/cmdline separates the words with NULs,
# which a terminal shows as nothing ("/bin/bash./entrypoint.sh", "/bin/sh-cexec app")
_GLUED_SHELL = lazy_re.compile(r"^(?P<shell>(?:/[\w.+-]+)*/(?:ba|da|z|k|mk)?sh|(?:ba|da|z|k|mk)?sh)(?P<rest>[./-].*)$")


def parse_cmdline(text: str, pid: int, first_line: int = 1) -> list[Process]:
    """One process's ``/proc/<pid>/cmdline`` as ``cat`` printed it: its words separated by NULs,
    or run together where the NULs were lost on the way to the terminal (a shell's path and
    its script are then told apart), or by spaces (``tr '\\0' ' '``)."""
    lines = [(i, ln) for i, ln in enumerate(text.splitlines()) if ln.strip() and not _EXEC_NOTICE.match(ln.strip())]
    if len(lines) != 1:
        return []
    i, raw = lines[0]
    line = raw.strip()
    glued = _GLUED_SHELL.match(line) if "\x00" not in line else None
    if "\x00" in line:
        argv = [w for w in line.split("\x00") if w]
    elif glued is not None and glued.group("rest").startswith("-c"):
        argv = [glued.group("shell"), "-c", glued.group("rest")[2:]]  # the script, spaces and all
    elif glued is not None:
        argv = [glued.group("shell"), *glued.group("rest").split()]
    else:
        argv = line.split()
    if not argv:
        return []
    return [Process(pid, None, "", shlex.join(argv), first_line + i)]


@dataclass(frozen=True, slots=True)
class FileLock:
    kind: str  # POSIX | FLOCK | OFDLCK | LEASE
    mode: str  # ADVISORY | MANDATORY
    access: str  # READ | WRITE
    pid: int
    device: str  # maj:min
    inode: int
    line: int
    text: str
    blocked: bool = False


_LOCK = lazy_re.compile(
    r"^(\d+):\s+(->\s+)?(POSIX|FLOCK|OFDLCK|LEASE|DELEG)\s+(\S+)\s+(READ|WRITE)\s+(-?\d+)\s+"
    r"([0-9a-f]+:[0-9a-f]+):(\d+)\s"
)


def parse_locks(text: str, first_line: int = 1) -> list[FileLock]:
    """``/proc/locks``; blocked waiters (``->``) are kept and marked."""
    out: list[FileLock] = []
    for i, raw in enumerate(text.splitlines()):
        m = _LOCK.match(raw.strip() + " ")
        pid, inode = (to_int(m.group(6)), to_int(m.group(8))) if m else (None, None)
        if m and pid is not None and inode is not None:
            out.append(
                FileLock(
                    m.group(3),
                    m.group(4),
                    m.group(5),
                    pid,
                    m.group(7),
                    inode,
                    first_line + i,
                    raw.strip(),
                    blocked=bool(m.group(2)),
                )
            )
    return out


# lsmod's rows (kmod's lsmod.c: "%-19s %8lu  %d" and the users comma-separated, one space between
# when a column is wider): a module, its size in bytes, its use count and who uses it; and its
# header. A grep keeps rows without the header: what is listed is loaded, the rest unknown.
LSMOD_ROW = lazy_re.compile(r"^[a-z][a-z0-9_]{1,55}\s+\d{4,9}\s+\d{1,5}(?:\s+(?:-|[\w-]+(?:,[\w-]+)*,?))?\s*$")
LSMOD_HEADER = lazy_re.compile(r"^Module\s+Size\s+Used by\s*$")


@dataclass(slots=True)
class Modules:
    names: set[str] = field(default_factory=set)
    # lsmod's rows under its header, or /proc/modules' own rows: the listing may be whole; lsmod's
    # rows without the header are a grep's (what is listed is loaded, the rest unknown)
    whole: bool = False


# /proc/modules (kernel/module/procfs.c m_show): name size refcount deps state address [taints]
PROC_MODULES_ROW = lazy_re.compile(r"^\w+ \d+ \d+ (?:-|[\w,]+) (?:Live|Loading|Unloading)\b")


def parse_modules(text: str) -> Modules:
    """``/proc/modules`` or ``lsmod`` output: the modules its rows name (other lines a paste
    holds, a prompt, another command's output, name none)."""
    mods = Modules()
    for raw in text.splitlines():
        line = raw.strip()
        if PROC_MODULES_ROW.match(line):
            mods.whole = True
        elif LSMOD_HEADER.match(line):
            mods.whole = True
            continue
        elif not LSMOD_ROW.match(line):
            continue
        mods.names.add(line.split()[0])
    return mods


def parse_hostname(text: str) -> str | None:
    for raw in text.splitlines():
        s = raw.strip()
        if s:
            return s.split()[0]
    return None


def parse_ip_addr(text: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Addresses of ``ip -j addr``, global scope first (the node's own), then host/link ones."""
    try:
        doc = load_json(text)
    except ValueError:
        return []
    ranked: list[tuple[int, ipaddress.IPv4Address | ipaddress.IPv6Address]] = []
    for link in doc if isinstance(doc, list) else []:
        infos = link.get("addr_info") if isinstance(link, dict) else None
        for info in infos if isinstance(infos, list) else []:
            if not isinstance(info, dict):
                continue
            try:
                ip = ipaddress.ip_address(str(info.get("local")))
            except ValueError:
                continue
            ranked.append((0 if info.get("scope") == "global" else 1, ip))
    return [ip for _, ip in sorted(ranked, key=lambda x: x[0])]


_IF_HEADER = lazy_re.compile(r"^\d+:\s+([^:@\s]+)(?:@\S+)?:\s+<")
_IF_INET = lazy_re.compile(r"^\s+inet6?\s+([0-9a-fA-F.:]+)(?:/\d+)?\b")
# ifconfig's address lines (its interface lines: links.IFCONFIG_HEAD): net-tools 2.x (`inet 10.0.0.5
# netmask ...`) and net-tools 1.60 or busybox (`inet addr:10.0.0.5  Bcast:...`, `inet6 addr: fe80::1/64 Scope:Link`)
_IFCONFIG_INET = lazy_re.compile(r"^\s+inet6?\s+(?:addr:\s*)?([0-9a-fA-F.:]+)(?:/\d+)?\s")


@dataclass(frozen=True, slots=True)
class BoundAddress:
    """An address ``ip addr`` shows on an interface, with its line (0 in one-line ``-j`` output)."""

    interface: str
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    line: int  # 0-based within the output; -1 when the output is JSON
    text: str


def bound_addresses(text: str) -> tuple[list[str], list[BoundAddress]]:
    """Every interface (in order) and every address on one, from ``ip addr`` (text or ``-j``)."""
    try:
        doc = load_json(text) if text.lstrip().startswith("[") else None
    except ValueError:
        doc = None
    names: list[str] = []
    out: list[BoundAddress] = []
    if isinstance(doc, list):
        for link in doc:
            if not isinstance(link, dict) or not isinstance(link.get("ifname"), str):
                continue
            names.append(link["ifname"])
            for info in link.get("addr_info") or []:
                try:
                    ip = ipaddress.ip_address(str(info.get("local")))
                except (ValueError, AttributeError):
                    continue
                out.append(BoundAddress(link["ifname"], ip, -1, f"{link['ifname']}: {ip}"))
        return names, out
    current = None
    for i, line in enumerate(text.splitlines()):
        if (row := ip_brief.row(line)) is not None:  # `ip -br addr`: an interface and its addresses on one line
            names.append(row.interface)
            out.extend(BoundAddress(row.interface, ip, i, row.text) for ip in row.addresses)
            current = None
            continue
        m = _IF_HEADER.match(line.strip() if line[:1].isdigit() else line) or IFCONFIG_HEAD.match(line)
        if m:
            current = m.group(1)
            names.append(current)
            continue
        if current is not None and (m := _IF_INET.match(line) or _IFCONFIG_INET.match(line)):
            try:
                out.append(BoundAddress(current, ipaddress.ip_address(m.group(1)), i, line.strip()))
            except ValueError:
                continue
    return names, out


def interface_addresses(text: str, name: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address] | None:
    """The addresses of interface ``name`` in ``ip addr`` output (text or ``-j``); None when the
    output does not show that interface at all (IPVS mode binds every Service address to
    kube-ipvs0: an address missing there is one IPVS never sees)."""
    names, bound = bound_addresses(text)
    if name not in names:
        return None
    return [b.address for b in bound if b.interface == name]


@dataclass(frozen=True, slots=True)
class Package:
    """One installed package as `rpm -q`, `dpkg -s` or `dpkg -l` print it."""

    name: str
    version: str  # upstream version and release as printed ("1.27-7.el7", "1.8.2-4")
    line: int
    text: str

    @property
    def el(self) -> str | None:
        """The RHEL major release an rpm's release tag names (".el7" -> "7")."""
        m = _EL_TAG.search(self.version)
        return m.group(1) if m else None


_EL_TAG = lazy_re.compile(r"\.el(\d+)(?:_\d+)?(?:\.|$)")
# name-version-release.arch (rpm -q): ipvsadm-1.27-7.el7.x86_64
_RPM_NVRA = lazy_re.compile(
    r"^([A-Za-z0-9][\w.+]*(?:-[A-Za-z][\w.+]*)*)-(\d[\w.+~^]*-[\w.+~^]+?)\.(x86_64|aarch64|noarch|i686|ppc64le|s390x)$"
)
# dpkg -l rows: "ii  iptables  1.8.2-4  amd64  administration tools..."
_DPKG_II = lazy_re.compile(r"^[iurph][iUCHFWt]\s+[a-z0-9][\w.+:-]*\s+\d")
_DPKG_ROW = lazy_re.compile(r"^([a-z][a-zA-Z ]?[a-zA-Z]?)\s+([a-z0-9][\w.+:-]*)\s+(\d[\w.+:~-]*)\s+(\S+)(?:\s+.*)?$")


def parse_packages(text: str, first_line: int = 1, package: str | None = None) -> list[Package]:
    """Packages and their versions from `rpm -q[a]`, `dpkg -s` and `dpkg -l` output; ``package``:
    the one the command asked for (`dpkg -s iptables | grep ^Version` prints no Package: line)."""
    out: list[Package] = []
    # dpkg -s: the Package: line, waiting for its Version:
    name: tuple[str, int] | None = (package, first_line) if package else None
    for i, raw in enumerate(text.splitlines()):
        s = raw.strip()
        if not s:
            continue
        if (m := _RPM_NVRA.match(s)) is not None:
            out.append(Package(m.group(1), m.group(2), first_line + i, s))
        elif s.startswith("Package:"):
            name = (s.split(":", 1)[1].strip(), first_line + i)
        elif s.startswith("Version:") and name is not None:
            out.append(Package(name[0], s.split(":", 1)[1].strip(), first_line + i, s))
            name = None
        elif (m := _DPKG_ROW.match(s)) is not None and m.group(1)[0] in "iurph" and len(m.group(1)) <= 3:
            out.append(Package(m.group(2).split(":", 1)[0], m.group(3), first_line + i, s))
    return out


def looks_like_packages(lines: list[str]) -> bool:
    """Is this text mostly `rpm -q` lines, a `dpkg -s` stanza or `dpkg -l` rows?"""
    if not lines:
        return False
    if any(ln.startswith("Package:") for ln in lines[:3]) and any(ln.startswith("Version:") for ln in lines[:40]):
        return True
    if any(ln.startswith("Desired=Unknown/Install") for ln in lines[:3]):
        return True
    rpm = sum(1 for ln in lines if _RPM_NVRA.match(ln.strip()) or _DPKG_II.match(ln))
    return rpm >= 1 and rpm >= 0.6 * len(lines)
