"""kube-proxy's own health: ``/healthz`` JSON (port 10256), ``/metrics`` text and ``/proxyMode``
(port 10249)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from kpdoctor import lazy_re
from kpdoctor.parse.structured import load_json


@dataclass(frozen=True, slots=True)
class Healthz:
    last_updated: datetime
    current_time: datetime
    line: int  # line of lastUpdated in the file
    text: str

    @property
    def age(self) -> float:
        """Seconds since the last successful sync, as kube-proxy saw it."""
        return (self.current_time - self.last_updated).total_seconds()


_GO_TIME = lazy_re.compile(r"^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:\.(\d+))?\s*(Z|[+-]\d\d:?\d\d)?")


def _time(v: object) -> datetime | None:
    """RFC 3339, or Go's ``time.Time.String()`` (what kube-proxy's healthz prints with %q):
    ``2024-05-01 10:00:00.123456789 +0000 UTC m=+3600.1``."""
    if not isinstance(v, str):
        return None
    m = _GO_TIME.match(v.strip())
    if not m:
        return None
    frac = (m.group(3) or "0")[:6].ljust(6, "0")
    tz = m.group(4) or "+00:00"
    if tz == "Z":
        tz = "+00:00"
    elif ":" not in tz:
        tz = tz[:3] + ":" + tz[3:]
    try:
        return datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}.{frac}{tz}")
    except ValueError:
        return None


def parse_healthz(text: str) -> Healthz | None:
    try:
        doc = load_json(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    last, now = _time(doc.get("lastUpdated")), _time(doc.get("currentTime"))
    if last is None or now is None:
        return None
    line = next((i for i, ln in enumerate(text.splitlines(), 1) if "lastUpdated" in ln), 1)
    return Healthz(last, now, line, text.strip().replace("\n", " ")[:300])


_SAMPLE = lazy_re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)(?:\s+\d+)?\s*$")


@dataclass(slots=True)
class Metrics:
    """Prometheus text exposition: per metric name, the sum over its series, and its first line."""

    values: dict[str, float] = field(default_factory=dict)
    lines: dict[str, tuple[int, str]] = field(default_factory=dict)

    def get(self, name: str) -> float | None:
        return self.values.get(name)


def parse_metrics(text: str, first_line: int = 1) -> Metrics:
    m = Metrics()
    for i, raw in enumerate(text.splitlines()):
        if not raw or raw.startswith("#"):
            continue
        s = _SAMPLE.match(raw)
        if not s:
            continue
        try:
            v = float(s.group(3))
        except ValueError:
            continue
        name = s.group(1)
        m.values[name] = m.values.get(name, 0.0) + v
        m.lines.setdefault(name, (first_line + i, raw.strip()))
    return m


# what /proxyMode answers (cmd/kube-proxy/app/server.go's serveMetrics: fmt.Fprintf(w, "%s",
# proxyMode), no newline): the mode the proxier was built for, after 1.20-1.25's fallback from ipvs
# to iptables (server_others.go getProxyMode). The longest first: "nftables" is not "iptables".
PROXY_MODES = ("kernelspace", "userspace", "iptables", "nftables", "ipvs")
# one word alone on its line, as curl prints it; a shell prompt glued after it (no newline: `[root@n
# ~]#`, `root@n:~#`) or zsh's `%` for a missing newline is not part of it
_PROXY_MODE = lazy_re.compile(
    r"^\s*(" + "|".join(PROXY_MODES) + r")(?=\s*%?\s*$|\[[\w.-]+@|[\w.-]+@[\w.-]+)", re.I
)


def parse_proxy_mode(text: str, first_line: int = 1) -> tuple[str, int, str] | None:
    """The mode ``/proxyMode`` printed, with its line's number and text; None when the first
    non-empty line is not a mode's name."""
    for i, line in enumerate(text.splitlines()[:5]):
        if not line.strip():
            continue
        m = _PROXY_MODE.match(line)
        return (m.group(1).lower(), first_line + i, line.strip()[:200]) if m else None
    return None
