"""Log line wrappers: what container runtimes, journald and kubectl put before klog's header.

A kube-proxy line reaches users in many wrappings:

* bare klog: ``E1008 21:01:55.367127  145725 proxier.go:1285] ...``
* CRI container log file: ``2019-10-23T20:56:35.955254605Z stderr F E1023 ...``
* docker json-file, already unwrapped by ``docker logs``
* journald / syslog, any locale: ``Oct 08 21:01:55 node3 kube-proxy[145725]: E1008 ...``,
  ``okt 08 21:01:55 ...``, ``10月 08 21:01:55 ...``, ``2024-10-08T21:01:55+0200 node3 k3s[1]: ...``
* ``kubectl logs --timestamps``: ``2023-11-13T16:15:07.928773015Z I1113 ...``
* ``kubectl logs --prefix``: ``[pod/kube-proxy-x7k2p/kube-proxy] I1113 ...``

``unwrap`` strips any combination and returns the wrapper's timestamp (when it has a full date),
which is better than klog's year-less one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# klog header: level, MMDD, time, thread/pid, file:line]
KLOG_HEADER = re.compile(
    r"(?P<level>[IWEF])(?P<mm>\d\d)(?P<dd>\d\d) (?P<time>\d\d:\d\d:\d\d(?:\.\d+)?)\s+"
    r"(?P<pid>\d+) (?P<src>[^\s:\]]+(?::\d+)?)\] ?"
)
KLOG_HEADER_ANYWHERE = re.compile(r"(?:^|\s|\]|:\s)[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w.\-/]+:\d+\]", re.M)

_PREFIX = re.compile(r"\[pod/[^/\]\s]+/[^\]\s]+\] |[\w.-]+ +\| ")  # kubectl --prefix; docker compose
_CRI = re.compile(r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) (?:stdout|stderr) [FP] ")
_ISO_TS = re.compile(r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?) ")
# syslog/journald short format, month in any locale (1-5 non-space chars, maybe with a dot).
_SYSLOG = re.compile(
    r"(?P<mon>[^\s\d][^\s]{0,5}|\d{1,2}月) +(?P<day>\d{1,2}) (?P<time>\d\d:\d\d:\d\d)(?:\.\d+)? "
    r"(?P<host>\S+) (?P<ident>[\w.@/\-]+)(?:\[(?P<pid>\d+)\])?: "
)
_ISO_SYSLOG = re.compile(
    r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?) (?P<host>\S+) "
    r"(?P<ident>[\w.@/\-]+)(?:\[(?P<pid>\d+)\])?: "
)
# k3s/rke2 logrus lines: time="2024-10-08T21:01:55Z" level=error msg="..."
LOGRUS = re.compile(r'time="(?P<ts>[^"]+)" level=(?P<level>\w+) msg=')


@dataclass(frozen=True, slots=True)
class Unwrapped:
    inner: str  # the text after every wrapper
    timestamp: str | None  # full-date timestamp from a wrapper, ISO 8601
    ident: str | None  # syslog identifier (kube-proxy, k3s, rke2, ...)


def unwrap(line: str) -> Unwrapped:
    """Strip the wrappers in front of a log line (in any order they can nest)."""
    ts: str | None = None
    ident: str | None = None
    rest = line
    for _ in range(4):
        m = _PREFIX.match(rest)
        if m:
            rest = rest[m.end() :]
            continue
        m = _CRI.match(rest)
        if m:
            ts = ts or m.group("ts")
            rest = rest[m.end() :]
            continue
        m = _ISO_SYSLOG.match(rest)
        if m and not KLOG_HEADER.match(rest, m.end(1) + 1):
            ts = ts or m.group("ts")
            ident = m.group("ident")
            rest = rest[m.end() :]
            continue
        m = _ISO_TS.match(rest)
        if m:
            ts = ts or m.group("ts")
            rest = rest[m.end() :]
            continue
        m = _SYSLOG.match(rest)
        if m and not KLOG_HEADER.match(rest):
            ident = m.group("ident")
            rest = rest[m.end() :]
            continue
        break
    return Unwrapped(rest, ts, ident)


def is_continuation(inner: str) -> bool:
    """A line that continues the previous record (multi-line ``err=<`` blocks, stack frames)."""
    return inner.startswith((" ", "\t", ">")) or inner == ""
