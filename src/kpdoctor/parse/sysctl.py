"""Kernel settings as ``sysctl`` prints them.

Why: somaxconn, the ephemeral port range, reserved ports and conntrack limits explain drops and bind failures.

Formats: ``sysctl -a`` and ``sysctl NAME...`` (``name = value``), ``sysctl.conf``-style ``name=value`` lines,
slash-separated names (``net/ipv4/ip_forward``, ``/proc/sys/...``), and ``grep -H . /proc/sys/...`` lines
(``/proc/sys/net/ipv4/conf/all/rp_filter:1``: the file, a colon, its content). sysctl(8) writes a dot inside a name
part (an interface such as ``flannel.1``) as ``/`` in the dotted form (``net.ipv4.conf.flannel/1.rp_filter``);
slash-form names are converted the same way. ``sysctl:`` error lines (permission denied, cannot stat) are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.parse.numbers import to_int
from kpdoctor.parse.shellwords import shell_split, unwrapped


@dataclass(frozen=True, slots=True)
class Sysctl:
    name: str  # dotted, as sysctl -a prints it
    value: str  # whitespace-normalised ("32768 60999")
    line: int
    text: str


_LINE = lazy_re.compile(r"^([A-Za-z0-9_/][\w.\-/:@+]*)\s*=\s?(.*)$")
# `grep -H . /proc/sys/net/ipv4/conf/*/rp_filter`: the file, a colon, its content
_GREP_H = lazy_re.compile(r"^(/proc/sys/[\w.\-/@+]+):(.*)$")


def dotted(name: str) -> str:
    """A sysctl name in sysctl(8)'s dotted form, whichever form it was written in."""
    return _dotted(name)


def _dotted(name: str) -> str:
    """``net/ipv4/conf/flannel.1/rp_filter`` -> ``net.ipv4.conf.flannel/1.rp_filter`` (sysctl(8)'s rule)."""
    if name.startswith("/proc/sys/"):
        name = name[len("/proc/sys/") :]
    name = name.strip("/")
    dot, slash = name.find("."), name.find("/")
    if slash != -1 and (dot == -1 or slash < dot):
        return name.translate(str.maketrans("./", "/."))
    return name


def parse_sysctl(text: str, first_line: int = 1) -> dict[str, Sysctl]:
    """Settings by dotted name. A name repeated on consecutive lines (a multi-line value in ``sysctl -a``,
    e.g. ``kernel.core_modes``) has its values joined; otherwise a later line wins."""
    out: dict[str, Sysctl] = {}
    prev: str | None = None
    for i, raw in enumerate(text.splitlines()):
        s = raw.strip()
        if not s or s[0] in "#;*" or s.startswith("sysctl:"):
            prev = None
            continue
        m = _GREP_H.match(s) or _LINE.match(s)
        if not m:
            prev = None
            continue
        name = _dotted(m.group(1))
        if "." not in name:
            prev = None
            continue
        value = " ".join(m.group(2).split())
        old = out.get(name)
        if old is not None and prev == name:
            out[name] = Sysctl(name, f"{old.value} {value}".strip(), old.line, old.text)
        else:
            out[name] = Sysctl(name, value, first_line + i, s)
        prev = name
    return out


# How complete a listing of settings is. Only a complete one (``sysctl -a``, or /proc/sys read
# whole) proves a setting absent, and so a module that creates it not active: a key missing from
# ``sysctl net.ipv4.ip_forward ...`` or from a grep of ``sysctl -a`` is unknown, not off.
COMPLETE, FILTERED, KEYS = "complete", "filtered", "keys"
# What ``sysctl -a`` prints in any network namespace of any kernel kpdoctor meets: keys under
# most of these top-level directories, hundreds of them (over a thousand on a node).
_TOP_LEVEL = frozenset({"abi", "debug", "dev", "fs", "kernel", "net", "user", "vm", "crypto", "sunrpc"})
_MIN_TOP_LEVEL, _MIN_KEYS = 4, 200
_ALL_FLAGS = frozenset({"-a", "-A", "-X", "--all"})


def listing_of(command: str | None, settings: dict[str, Sysctl]) -> str:
    """How complete a listing is: from the command that printed it when it is known (``sysctl -a``
    with nothing filtering its output is complete; piped into another command, filtered; naming
    keys, keys), otherwise from its content: hundreds of keys under most of the top-level
    directories is ``sysctl -a``; anything less is a filtered or hand-picked listing."""
    if command:
        words = shell_split(command)
        pipe = words.index("|") if "|" in words else len(words)
        head = unwrapped(words[:pipe])
        if head and head[0].rsplit("/", 1)[-1] == "sysctl":
            args = head[1:]
            if any(w in _ALL_FLAGS or (w.startswith("-") and not w.startswith("--") and "a" in w) for w in args):
                return COMPLETE if pipe == len(words) else FILTERED
            return KEYS
        if head and head[0].rsplit("/", 1)[-1] in ("cat", "grep", "find"):
            return KEYS if pipe == len(words) and not any("*" in w for w in head) else FILTERED
    tops = {name.split(".", 1)[0] for name in settings}
    if len(settings) >= _MIN_KEYS and len(tops & _TOP_LEVEL) >= _MIN_TOP_LEVEL:
        return COMPLETE
    return FILTERED if len(settings) > 1 else KEYS


def int_values(value: str) -> list[int]:
    """``"32768 60999"`` -> ``[32768, 60999]``; parts that are not integers are skipped."""
    out: list[int] = []
    for part in re.split(r"[\s,]+", value.strip()):
        n = to_int(part)
        if n is not None:
            out.append(n)
    return out


def port_set(value: str) -> list[tuple[int, int]]:
    """``ip_local_reserved_ports`` syntax: ``"8080,9000-9100"`` -> ``[(8080, 8080), (9000, 9100)]``."""
    out: list[tuple[int, int]] = []
    for part in re.split(r"[\s,]+", value.strip()):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            continue
        lo = to_int(m.group(1))
        hi = to_int(m.group(2)) if m.group(2) else lo
        if lo is not None and hi is not None and lo <= hi:
            out.append((lo, hi))
    return out


_PROC_SYS = "/proc/sys/"


def sysctl_write(argv: list[str]) -> tuple[str, str | None] | None:
    """The setting a shell command line writes, as (dotted name, value or None when the value
    is not on the command line): ``echo 0 > /proc/sys/net/bridge/bridge-nf-call-iptables``,
    ``echo 1 | sudo tee /proc/sys/net/ipv4/ip_forward`` (tee prints the value),
    ``sysctl -w net.ipv4.ip_forward=0`` (which prints ``name = value`` too). A write is evidence
    of the value the node had from then on."""
    if not argv:
        return None
    segments: list[list[str]] = [[]]
    for w in argv:
        if w == "|":
            segments.append([])
        else:
            segments[-1].append(w)
    echoed: str | None = None
    for seg in segments:
        while seg and seg[0] in ("sudo", "command", "env", "time"):
            seg = seg[1:]
        if not seg:
            continue
        prog = seg[0].rsplit("/", 1)[-1]
        if prog == "echo":
            words = [w for w in seg[1:] if w not in ("-n", "-e", "-ne", "-en")]
            value_words: list[str] = []
            target: str | None = None
            for i, w in enumerate(words):
                if w in (">", ">>", "1>"):
                    target = words[i + 1] if i + 1 < len(words) else None
                    break
                if w.startswith((">", "1>")) and _PROC_SYS in w:
                    target = w.lstrip("1>")
                    break
                value_words.append(w)
            echoed = " ".join(value_words) if value_words else None
            if target is not None and target.startswith(_PROC_SYS) and echoed is not None:
                return dotted(target), echoed
        elif prog == "tee":
            files = [w for w in seg[1:] if not w.startswith("-")]
            if len(files) == 1 and files[0].startswith(_PROC_SYS):
                return dotted(files[0]), echoed
        elif prog == "sysctl" and any(w in ("-w", "--write") for w in seg[1:]):
            sets = [w for w in seg[1:] if "=" in w and not w.startswith("-")]
            if len(sets) == 1:
                name, _, value = sets[0].partition("=")
                return dotted(name), value
    return None
