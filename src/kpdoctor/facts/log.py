"""What kube-proxy's log says across checks: sync outcomes, version, mode, flags.

Signatures that many checks share are declared here; each failure mode's own signatures live in
its check module.

The scan keeps a bounded sample of each signature's hits (see ``logscan.Sample``), not every
hit, so that a log that has been failing for days costs what a quiet one does: ``hits()`` is that
sample, ``count()`` the exact number, and the sync timeline (last success, successes between
two hits) is counted during the scan.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.knowledge import REGISTRY, message_form, messages, readers, signature
from kpdoctor.messages import matcher
from kpdoctor.messages.match import Match
from kpdoctor.model import Cite
from kpdoctor.parse.logscan import Hit, ScanResult
from kpdoctor.versions import IptablesVersion

# Kept apart per variant (logscan.Signature.variant): the IP family and the iptables-restore
# binary a restore error names, so "all from ip6tables?" and "which backend failed?" are exact.
RESTORE_VARIANT = r"ip6tables|-restore v[0-9.]+ *(?:\((?:legacy|nf_tables)\))?"

# The sync timeline and the running mode, read from kube-proxy's own messages (every release's
# wording is an entry of the messages catalogue; src/kpdoctor/messages/kube-proxy.yaml).
SYNC_COMPLETE = messages(
    "sync-complete",
    "kube-proxy/proxier-sync-complete",  # "syncProxyRules took %v", "SyncProxyRules complete"
    "kube-proxy/ipvs-sync-complete",
    "kube-proxy/userspace-userspace-syncproxyrules-took",
    "kube-proxy/userspace-userspace-syncproxyrules-complete",
    "kube-proxy/winkernel-syncing-proxy-rules-complete",
    success=True,
    keyed=False,  # the sync's duration
)
# "Sync failed; retrying in 30s", "Sync failed" retryingTime="30s" (not the error value of the
# same name 1.34 returns with it: one line, one failure)
SYNC_FAILED = messages("sync-failed", "kube-proxy/proxier-sync-failed-retrying", failure=True, keyed=False)
RESTORE_FAILED = messages(
    "restore-failed",
    "kube-proxy/iptables-restore-failed",
    "kube-proxy/iptables-cleanup-restore-failed",
    failure=True,
    variant=RESTORE_VARIANT,  # kept apart by restore binary and IP family, not by payload
    keyed=False,
)
VERSION_GLOG = signature("version-glog", "Version: v", r"Version: v([0-9]+\.[0-9]+\.[0-9]+[^ \"]*)", generic=True)
VERSION_STRUCTURED = signature("version-structured", '"Version info" version=', r'"Version info" version="(v[^"]+)"')
FLAG = signature("flag", "FLAG: --", r'FLAG: --([a-z0-9-]+)="(.*)"', generic=True)
K3S_RUNNING = signature("k3s-running-kube-proxy", "Running kube-proxy", r"Running kube-proxy (--.*)")
# The mode each start-up message names.
_STARTED_IN = {
    "kube-proxy/server-using-iptables-proxier": "iptables",
    "kube-proxy/server-using-iptables-proxy": "iptables",
    "kube-proxy/server-using-ipvs-proxier": "ipvs",
    "kube-proxy/server-using-nftables-proxier": "nftables",
    "kube-proxy/server-using-userspace-proxier": "userspace",
    "kube-proxy/server-using-kernelspace-proxier": "kernelspace",
}
PROXY_MODE = messages("proxy-mode", *_STARTED_IN)
# The proxier of each mode says what it syncs: the mode, when the start-up line is not in the
# evidence ("Syncing iptables rules", "Syncing ipvs proxier rules", "Syncing nftables rules").
_SYNCS_IN = {
    "kube-proxy/iptables-syncing-rules": "iptables",
    "kube-proxy/ipvs-syncing-rules-old": "ipvs",
    "kube-proxy/ipvs-syncing-rules": "ipvs",
    "kube-proxy/nftables-syncing-rules": "nftables",
}
SYNC_MODE = messages("sync-mode", *_SYNCS_IN)


def mode_of(hit: Hit) -> str | None:
    """The proxy mode a PROXY_MODE or SYNC_MODE hit names."""
    form = message_form(hit.sig)
    return None if form is None else _STARTED_IN.get(form.message.key) or _SYNCS_IN.get(form.message.key)


def restore_binary(hit: Hit) -> IptablesVersion | None:
    """The iptables-restore kube-proxy ran, from its error text (``iptables-restore v1.8.4 (legacy)``).

    ``backend`` is None for iptables before 1.8, which printed none (and had only legacy).
    """
    i = hit.record.find("-restore v")
    return IptablesVersion.parse(hit.record[i:]) if i >= 0 else None


def captures(hit: Hit) -> dict[str, str]:
    """What a catalogue message's placeholders held in a hit of it, by name (``{}`` for a
    check's own signature, whose groups are positional)."""
    form = message_form(hit.sig)
    if form is None:
        return {}
    return {n: v for n, v in zip(form.compiled.names, hit.groups, strict=False) if v is not None}


_KEY_VALUE = lazy_re.compile(r'(?:^|[ \t])([A-Za-z][\w.-]*)=(?:"((?:[^"\\]|\\.)*)"|([^ \t"]+))')


def structured_value(hit: Hit, key: str) -> str | None:
    """The value klog 2 printed for ``key`` (``address="10.0.0.1"``) on the hit's line."""
    for m in _KEY_VALUE.finditer(hit.text):
        if m.group(1) == key:
            return m.group(2) if m.group(2) is not None else m.group(3)
    return None


def matched(hit: Hit) -> str:
    """The part of the hit's line its signature matched (the whole line when it cannot tell)."""
    form = message_form(hit.sig)
    sig = REGISTRY.get(hit.sig)
    rx = form.compiled.regex() if form is not None else sig.compiled() if sig is not None else None
    m = rx.search(hit.text) if rx is not None else None
    return m.group(0) if m is not None else hit.text.strip()


def cite(hit: Hit, with_header: bool = True) -> list[Cite]:
    """Evidence lines for a hit: the record's header (level, time) and the matched line, each
    saying which component wrote it when the line tells (``Hit.writer``)."""
    writer = hit.writer
    out = []
    if with_header and hit.header_line != hit.line:
        out.append(Cite(hit.artifact, hit.header_line, hit.header, writer))
    out.append(Cite(hit.artifact, hit.line, hit.text, writer))
    return out


def cite_line(hit: Hit) -> Cite:
    """The matched line alone, with its writer."""
    return Cite(hit.artifact, hit.line, hit.text, hit.writer)


def is_other_writer(hit: Hit) -> bool:
    """Did a component other than kube-proxy write this line (as far as the line tells)?"""
    w = hit.writer
    return w is not None and w != "kube-proxy"


# go-iptables (flannel, kube-router, CNI plugins, the VPC CNI...) reports a failed command as
# "running [/sbin/iptables -t nat -C ... --wait]: exit status 4: ...". kube-proxy never does.
_GO_IPTABLES_RUN = lazy_re.compile(r"running \[(?P<argv>[^\]]*\bip6?tables(?:-legacy|-nft)?\b[^\]]*)\]: exit status")


_WAIT_FLAG = lazy_re.compile(r"-w[0-9]*")


def iptables_call(hit: Hit) -> tuple[str, bool] | None:
    """The iptables command a go-iptables caller ran (from the hit's record), and whether it
    asked to wait for the xtables lock (``--wait``/``-w``); None when the record names none."""
    m = _GO_IPTABLES_RUN.search(hit.text) or _GO_IPTABLES_RUN.search(hit.record)
    if m is None:
        return None
    argv = m.group("argv").split()
    waits = any(a == "--wait" or a.startswith("--wait=") or _WAIT_FLAG.fullmatch(a) for a in argv)
    return m.group("argv"), waits


@dataclass(frozen=True, slots=True)
class Occurrence:
    """Repeated log signatures reported as one finding."""

    count: int
    first: Hit
    last: Hit
    ongoing: bool | None


class LogFacts:
    """Queries over one run's log scan.

    ``hits()`` returns the kept sample (first and last hits, and the first and last of each
    variant: see ``logscan.Sample``); use ``count()`` or ``occurrence()`` for how many there
    were, never ``len(hits())``.
    """

    def __init__(self, scan: ScanResult, failure_sigs: set[str] | None = None) -> None:
        # failure_sigs: which signatures are failures is now read from Signature.failure while
        # scanning (the timeline is counted there); the argument is kept for callers.
        self.scan = scan
        self.read_messages: tuple[LoggedMessage, ...] | None = None  # logged_messages(), once per run

    def hits(self, *sig_ids: str) -> list[Hit]:
        out: list[Hit] = []
        for s in sig_ids:
            sample = self.scan.samples.get(s)
            if sample is not None:
                out.extend(sample.hits())
        out.sort(key=lambda h: h.order)
        return out

    def count(self, *sig_ids: str) -> int:
        return sum(self.scan.counts.get(s, 0) for s in sig_ids)

    @property
    def last_success(self) -> tuple[int, int] | None:
        return self.scan.timeline.last_success

    @property
    def has_sync_markers(self) -> bool:
        return self.scan.timeline.any_sync

    def ongoing(self, hits: Iterable[Hit]) -> bool | None:
        """Is the failure still happening: is its last occurrence after the last good sync?"""
        hs = list(hits)
        if not hs:
            return None
        last = max(h.order for h in hs)
        if self.last_success is not None:
            return last > self.last_success
        return True if self.has_sync_markers else None

    def successes_between(self, first: Hit, last: Hit) -> bool:
        """Did any sync succeed between two hits (the other IP family's, in dual-stack)?"""
        return last.successes_before - first.successes_before - first.success > 0

    def successes_after_count(self, hit: Hit) -> int:
        return self.scan.timeline.successes - hit.successes_before - hit.success

    def occurrence(self, hits: list[Hit]) -> Occurrence | None:
        """First, last, ongoing, and how many: every hit of the signatures ``hits`` come from
        (a list the caller filtered counts what the whole signature counts, as before)."""
        if not hits:
            return None
        hs = sorted(hits, key=lambda h: h.order)
        total = self.count(*{h.sig for h in hs})
        return Occurrence(max(len(hs), total), hs[0], hs[-1], self.ongoing(hs))


@dataclass(frozen=True, slots=True)
class LoggedMessage:
    """Lines read as one catalogue message (and, for a wrapper, one payload message): the
    reading, the kept hits (first and last of each line read so), and how many lines."""

    match: Match
    hits: tuple[Hit, ...]
    count: int
    # the checks' own signatures that read the same records (their checks speak for them)
    read_by: frozenset[str] = frozenset()


def chain_of(match: Match) -> tuple[str, ...]:
    """The keys of a reading's messages, outermost first (a wrapper, its payload, the payload's)."""
    out = []
    at: Match | None = match
    while at is not None:
        out.append(at.message.key)
        at = at.payload
    return tuple(out)


def logged_messages(log: LogFacts) -> tuple[LoggedMessage, ...]:
    """What the catalogue's messages read in the scan, line by line. A line holding several
    messages is read as the outermost one (a wrapper, with the message of its payload). Read
    once per run: KP130, the checks that read their own messages and KP140 all ask."""
    if log.read_messages is None:
        log.read_messages = tuple(_read_messages(log))
    return log.read_messages


def _read_messages(log: LogFacts) -> list[LoggedMessage]:
    by_line: dict[tuple[str, int], Hit] = {}
    counts: dict[str, int] = {}
    read_by: dict[tuple[str, int], set[str]] = {}  # record (artifact, header line) -> signatures
    for sid, sample in log.scan.samples.items():
        if readers(sid):  # a check's own signature, or a message a check declared it reads
            for h in sample.hits():
                read_by.setdefault((h.artifact, h.header_line), set()).add(sid)
        if message_form(sid) is None:
            continue
        counts[sid] = log.scan.counts.get(sid, 0)
        for h in sample.hits():
            by_line.setdefault((h.artifact, h.line), h)
    if not by_line:
        return []
    reader = matcher()
    groups: dict[tuple[str, ...], list[tuple[Match, Hit]]] = {}
    for hit in by_line.values():
        found = reader.match(hit.text)
        if not found:
            continue
        m = found[0]
        # another program's wrapper around a refusal known to lie outside the node (the API
        # server's RBAC answer to flannel): the refusal says what the line means, not the
        # wrapper's guesses (kube-proxy's own refusals stay its own: they stop its syncs)
        outside = next((x for x in found if x.message.outside), None) if is_other_writer(hit) else None
        m = outside or m
        if m.message.payload and m.payload is None and hit.record != hit.text:
            # the payload on the record's continuation lines (klog 2's err=< blocks)
            again = reader.match(hit.record)
            m = next((x for x in again if x.message.key == m.message.key), m)
        key = chain_of(m)
        groups.setdefault(key, []).append((m, hit))
    out = []
    for readings in groups.values():
        readings.sort(key=lambda mh: mh[1].order)
        hits = tuple(h for _, h in readings)
        sigs = {h.sig for h in hits}
        total = sum(counts.get(s, 0) for s in sigs)
        # the scan counts by message: exact when every line of its signatures is read this way
        count = total if len(groups) == 1 or _only_reading(groups, sigs) else len(hits)
        sigs_there = frozenset(x for h in hits for x in read_by.get((h.artifact, h.header_line), ()))
        out.append(LoggedMessage(readings[0][0], hits, max(count, len(hits)), sigs_there))
    out.sort(key=lambda lm: lm.hits[0].order)
    return out


def _only_reading(groups: dict[tuple[str, ...], list[tuple[Match, Hit]]], sigs: set[str]) -> bool:
    """Are ``sigs``' lines read one way only (so their count is this reading's)?"""
    return sum(1 for readings in groups.values() if any(h.sig in sigs for _, h in readings)) == 1


def chain_read(text: str) -> tuple[str, ...] | None:
    """The chain of catalogue messages a line reads as (outermost first, as
    :func:`logged_messages` groups lines), or None when no message reads it."""
    found = matcher().match(text)
    return chain_of(found[0]) if found else None
