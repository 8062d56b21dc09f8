"""What a bundle holds: each collected artifact with its manifest entry, and each absent one with
why. The collectors produce these; the bundle writer and the in-memory loader read them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Collected:
    """One artifact at its bundle path (DESIGN.md layout), with its manifest entry."""

    path: str
    data: bytes = b""
    source: str = ""  # the argv (shlex-joined), "read /proc/locks", "GET /api/v1/services?limit=500"
    exit_code: int | None = 0  # None: it never completed (timed out, binary missing)
    stderr: str = ""
    started_at: str = ""
    duration_ms: int = 0
    note: str = ""  # why it is partial (403 on a page, truncated, time budget), shown in the report
    # the program that printed it, as found on the node (``/usr/sbin/xtables-legacy-multi``), and
    # what it says its version is: an image's older iptables misreads a newer one's rules
    binary: str = ""
    binary_version: str = ""
    # what ``data`` parses to, when the source keeps it parsed (bundle/artifacts.py: Artifact.parsed)
    parsed: object | None = field(default=None, repr=False, compare=False)

    def manifest_entry(self) -> dict[str, object]:
        entry: dict[str, object] = {
            "path": self.path,
            "command": self.source,
            "exit_code": self.exit_code,
            "stderr": self.stderr,
            "collected_at": self.started_at,
            "duration_ms": self.duration_ms,
            "bytes": len(self.data),
        }
        if self.note:
            entry["note"] = self.note
        if self.binary:
            entry["binary"] = self.binary
        if self.binary_version:
            entry["binary_version"] = self.binary_version
        return entry


@dataclass
class NotCollected:
    """An artifact that is absent, and why (``ip_vs is not loaded``, ``forbidden (403)``)."""

    path: str
    reason: str

    def manifest_entry(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}
