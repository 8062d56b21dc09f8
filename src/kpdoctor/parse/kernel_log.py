"""Kernel log lines, with the timestamp and host prefixes taken off.

Why: the kernel says what it dropped (``nf_conntrack: table full, dropping packet``, the same with a doubled
``nf_conntrack:`` prefix, ``neighbour: arp_cache: neighbor table overflow!``...) and checks match on the message.

Formats: ``dmesg`` (``[12345.678901] msg``), ``dmesg -T`` (``[Sat Nov 21 20:00:00 2026] msg``), ``dmesg -x``
(``kern  :warn  : [...] msg``), ``dmesg -r`` (``<4>[...] msg``), ``dmesg --time-format iso``, ``dmesg -t``
(no prefix), ``journalctl -k`` and syslog files (``Nov 21 20:00:00 host kernel: msg``, optionally followed by
a ``[seconds]`` stamp), ``journalctl -o short-precise`` / ``short-iso`` / ``short-iso-precise`` /
``short-monotonic``. Journal lines from other programs (``host systemd[1]: ...``), journal markers
(``-- Boot ... --``), lines with control characters and one-word fragments (binary garbage) are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kpdoctor import lazy_re


@dataclass(frozen=True, slots=True)
class KernelLine:
    line: int
    text: str  # stripped original line
    message: str  # without timestamp / host / "kernel:" prefixes
    seconds: float | None  # monotonic seconds from "[12345.678901]"
    timestamp: str | None  # wall-clock prefix as printed


_RAW_PRIO = lazy_re.compile(r"^<\d{1,3}>")
_FACILITY = lazy_re.compile(  # dmesg -x "kern  :warn  : "
    r"^(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:"
    r"(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:\s?"
)
_BRACKET = lazy_re.compile(r"^\[([^\]]*)\]\s?")
_MONO = lazy_re.compile(r"^\s*(\d+\.\d+)\s*$")
# "Nov 21 20:00:00[.123456]" (syslog, journalctl short/short-precise; "Jul  8" padded, or "Jul 8" as a web page
# collapses it), "Sat 2026-11-21 20:00:00 UTC" (short-full)
_SYSLOG_TS = lazy_re.compile(
    r"^([A-Z][a-z]{2} [ \d]?\d \d\d:\d\d:\d\d(?:\.\d+)?"
    r"|[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? [A-Z]{2,5})\s+"
)
_ISO_TS = lazy_re.compile(r"^(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s+")
# "host kernel: msg" / "host systemd[1]: msg" after a journal/syslog timestamp.
_IDENT = lazy_re.compile(r"^([A-Za-z0-9][\w.\-]*)\s+([A-Za-z_][\w.\-@/]*)(?:\[\d+\])?:\s?(.*)$")
_MARKER = lazy_re.compile(r"^-- .* --$")
_WORDY = lazy_re.compile(r"[A-Za-z]{2}")
_CONTROL = lazy_re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffd]")


def _bracket(s: str) -> tuple[float | None, str | None, str] | None:
    """A leading ``[...]`` that is a time: ``[ 12.5]``, ``[  +0.008]`` (delta), ``[<  38.2>]``, ``[Sat Nov ...]``."""
    m = _BRACKET.match(s)
    if not m:
        return None
    inner = m.group(1).strip()
    rest = s[m.end() :]
    mono = _MONO.match(inner)
    if mono:
        return float(mono.group(1)), None, rest
    if re.fullmatch(r"<\s*\d+\.\d+\s*>|\+\s*\d+\.\d+", inner):
        return None, None, rest  # dmesg --time-format delta/reltime: not a time since boot
    if re.search(r"\d\d:\d\d", inner):
        return None, inner, rest
    return None


@dataclass(frozen=True, slots=True)
class _Prefix:
    seconds: float | None
    timestamp: str | None
    rest: str
    syslog: bool  # "Nov 21 20:00:00": always followed by "host ident:"


def _prefix(s: str) -> _Prefix:
    """The time prefix of a line, after dmesg -r / -x decorations (``rest`` is the whole line without one)."""
    s = _FACILITY.sub("", _RAW_PRIO.sub("", s), count=1)
    b = _bracket(s)
    if b is not None:
        return _Prefix(b[0], b[1], b[2], False)
    m = _SYSLOG_TS.match(s)
    if m:
        return _Prefix(None, m.group(1), s[m.end() :], True)
    m = _ISO_TS.match(s)
    if m:
        return _Prefix(None, m.group(1), s[m.end() :], False)
    return _Prefix(None, None, s, False)


def parse_kernel_log(text: str, first_line: int = 1) -> list[KernelLine]:
    """Every kernel message line, with its prefixes parsed off."""
    rows: list[tuple[int, str, _Prefix]] = []
    hosts: set[str] = set()  # hosts seen as "host kernel:": their other programs' lines are not the kernel's
    for i, raw in enumerate(text.splitlines()):
        s = raw.strip()
        if not s or _MARKER.match(s) or _CONTROL.search(s):
            continue
        p = _prefix(s)
        m = _IDENT.match(p.rest)
        if m and m.group(2) == "kernel":
            hosts.add(m.group(1))
        rows.append((first_line + i, s, p))
    out: list[KernelLine] = []
    for line, s, p in rows:
        msg, seconds = p.rest, p.seconds
        m = _IDENT.match(msg) if (p.timestamp or p.seconds is not None) else None
        if m and m.group(2) == "kernel":
            msg = m.group(3)
        elif m and (p.syslog or m.group(1) in hosts):
            continue  # another program's journal/syslog line
        if seconds is None:  # syslog files: "kernel: [12345.678901] msg"
            b = _bracket(msg)
            if b is not None and b[0] is not None:
                seconds, msg = b[0], b[2]
        msg = msg.strip()
        if _WORDY.search(msg) and " " in msg:  # a message has words; lone fragments of binary junk do not
            out.append(KernelLine(line, s, msg, seconds, p.timestamp))
    return out
