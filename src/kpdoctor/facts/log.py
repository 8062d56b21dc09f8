"""What kube-proxy's log says across checks: sync outcomes, version, mode, flags.

Signatures that many checks share are declared here; each failure mode's own signatures live in
its check module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kpdoctor.model import Cite
from kpdoctor.parse.logscan import Hit, ScanResult, signature
from kpdoctor.versions import IptablesVersion

SYNC_COMPLETE = signature("sync-complete", "yncProxyRules", r"[Ss]yncProxyRules (complete|took)")
SYNC_FAILED = signature("sync-failed", "Sync failed", r"Sync failed", failure=True)
RESTORE_FAILED = signature("restore-failed", "-restore", r"Failed to execute iptables-restore", failure=True)
VERSION_GLOG = signature("version-glog", "Version: v", r"Version: v([0-9]+\.[0-9]+\.[0-9]+[^ \"]*)")
VERSION_STRUCTURED = signature("version-structured", '"Version info" version=', r'"Version info" version="(v[^"]+)"')
FLAG = signature("flag", "FLAG: --", r'FLAG: --([a-z0-9-]+)="(.*)"')
K3S_RUNNING = signature("k3s-running-kube-proxy", "Running kube-proxy", r"Running kube-proxy (--.*)")
PROXY_MODE = signature("proxy-mode", "Using ", r"Using (iptables|ipvs|nftables|userspace|kernelspace) [Pp]rox(y|ier)")


def restore_binary(hit: Hit) -> IptablesVersion | None:
    """The iptables-restore kube-proxy ran, from its error text (``iptables-restore v1.8.4 (legacy)``).

    ``backend`` is None for iptables before 1.8, which printed none (and had only legacy).
    """
    i = hit.record.find("-restore v")
    return IptablesVersion.parse(hit.record[i:]) if i >= 0 else None


def cite(hit: Hit, with_header: bool = True) -> list[Cite]:
    """Evidence lines for a hit: the record's header (level, time) and the matched line."""
    out = []
    if with_header and hit.header_line != hit.line:
        out.append(Cite(hit.artifact, hit.header_line, hit.header))
    out.append(Cite(hit.artifact, hit.line, hit.text))
    return out


@dataclass(frozen=True, slots=True)
class Occurrence:
    """Repeated log signatures reported as one finding."""

    count: int
    first: Hit
    last: Hit
    ongoing: bool | None


class LogFacts:
    """Queries over one run's log scan."""

    def __init__(self, scan: ScanResult, failure_sigs: set[str]) -> None:
        self.scan = scan
        self._failure_sigs = failure_sigs
        self._last_success: tuple[int, int] | None = None
        self._successes: list[tuple[int, int]] = []
        self._any_sync = False
        self._compute_syncs()

    def hits(self, *sig_ids: str) -> list[Hit]:
        out: list[Hit] = []
        for s in sig_ids:
            out.extend(self.scan.hits.get(s, []))
        out.sort(key=lambda h: h.order)
        return out

    def count(self, *sig_ids: str) -> int:
        return sum(self.scan.counts.get(s, 0) for s in sig_ids)

    def _compute_syncs(self) -> None:
        events: list[tuple[tuple[int, int], bool]] = []
        for h in self.hits(SYNC_COMPLETE.id):
            events.append((h.order, True))
        for sid in self._failure_sigs:
            for h in self.scan.hits.get(sid, []):
                events.append((h.order, False))
        events.sort()
        failed_since = False
        for order, is_end in events:
            if is_end:
                self._any_sync = True
                if not failed_since:
                    self._last_success = order
                    self._successes.append(order)
                failed_since = False
            else:
                failed_since = True

    @property
    def last_success(self) -> tuple[int, int] | None:
        return self._last_success

    @property
    def has_sync_markers(self) -> bool:
        return self._any_sync

    def ongoing(self, hits: Iterable[Hit]) -> bool | None:
        """Is the failure still happening: is its last occurrence after the last good sync?"""
        hs = list(hits)
        if not hs:
            return None
        last = max(h.order for h in hs)
        if self._last_success is not None:
            return last > self._last_success
        return True if self._any_sync else None

    def successes_between(self, first: Hit, last: Hit) -> bool:
        """Did any sync succeed between two failures (the other IP family's, in dual-stack)?"""
        return any(first.order < o < last.order for o in self._successes)

    def successes_after_count(self, hit: Hit) -> int:
        return sum(1 for o in self._successes if o > hit.order)

    def occurrence(self, hits: list[Hit]) -> Occurrence | None:
        if not hits:
            return None
        hs = sorted(hits, key=lambda h: h.order)
        return Occurrence(len(hs), hs[0], hs[-1], self.ongoing(hs))
