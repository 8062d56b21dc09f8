"""Streaming scan of kube-proxy logs for known signatures.

Logs can be gigabytes of ``--v=4`` noise with a handful of lines that matter. Each signature
names a literal *needle* that every line it matches contains; the scanner finds needles with
``bytes.find`` (C speed, memory flat: fixed-size chunks), and only lines holding a needle are
decoded, unwrapped and matched with the signature's regex. Patterns are written in the subset of
syntax shared by Python ``re`` and POSIX ERE, so ``grep -E`` can run the very same patterns
(``bench/``).

A *record* is one log entry: a klog header line plus its continuation lines (the multi-line
``err=<`` blocks of structured logging, panic stack frames). A hit on a continuation line is
reported with its record's header, so it carries the entry's level and timestamp.

What a scan keeps does not grow with the log, however many of its lines are failures (a
kube-proxy failing for days logs one every few lines): every hit is counted, the sync timeline
(which sync-complete lines were successful syncs) is kept as counters, and only a bounded
sample of hits is built and kept per signature (``Sample``). The lines holding a needle are
handled a needle at a time, their searches run through ``map``, so a hit costs a regex search,
not a record's worth of Python.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import BinaryIO, Protocol, cast

from kpdoctor import lazy_re

try:  # compiled multi-needle search; the pure-Python loop below is the fallback
    import ahocorasick_rs
except ImportError:  # pragma: no cover - exercised by the pure_python tests
    ahocorasick_rs = None  # type: ignore[assignment]

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.knowledge import Signature
from kpdoctor.parallel import default_workers, run_parts, workers_for
from kpdoctor.parse.logwrap import FELIX, KLOG_HEADER, LOGRUS, is_continuation, unwrap, writer_of

CHUNK_BYTES = 8 * 1024 * 1024
MAX_RECORD_LINES = 400  # a record longer than this is cut (a runaway stack trace)
MAX_RECORD_CHARS = 4000
MAX_LINE_CHARS = 4000  # a hit's line and header are kept up to this length
PARALLEL_MIN_BYTES = 64 * 1024 * 1024  # files this large are scanned on every core
# What is kept of a signature's hits (every hit is counted): the first and last few, and the
# first and last of each variant. Memory is flat in the size of the log and in its error density.
SAMPLE_FIRST = 5
SAMPLE_LAST = 5
MAX_VARIANTS = 256  # per signature; hits of further variants are counted, not kept apart
MAX_VARIANTS_TOTAL = 4096  # per scan


@dataclass(frozen=True, slots=True)
class Hit:
    """One matched line, with its record's context."""

    sig: str
    artifact: str
    line: int  # line number of the matched line in the user's original file
    text: str  # the matched line, unwrapped
    header_line: int  # line number of the record's first line
    header: str  # the record's first line, unwrapped
    level: str | None  # I/W/E/F for klog records
    timestamp: str | None
    order: tuple[int, int]  # (artifact order, byte offset): chronological across artifacts
    groups: tuple[str | None, ...]
    previous: bool = False  # found in the log of a previous (crashed) container
    record: str = ""  # the whole record (header and continuation lines), unwrapped, capped
    successes_before: int = 0  # successful syncs on lines before this one (all artifacts, scan order)
    success: bool = False  # this line is itself a successful sync
    # What the record's wrapper names as its writer (syslog identifier, container); the
    # component is decided from it and the line only when the hit is cited (``writer``).
    source: str | None = None

    @property
    def writer(self) -> str | None:
        """Which component wrote the line (kube-proxy, kubelet, flannel...), None when unknown."""
        return writer_of(self.source, self.header, self.text)


# A variant key: (artifact order, after the artifact's first sync?, groups, variant matches).
VariantKey = tuple[int, bool, tuple[bytes | None, ...], tuple[bytes, ...]]


@dataclass(slots=True)
class Sample:
    """What is kept of one signature's hits: the exact count, the first ``SAMPLE_FIRST`` and
    last ``SAMPLE_LAST`` hits, and the first and last hit of each variant.

    A variant is a distinct (artifact, start-up or running, regex groups, ``Signature.variant``
    matches). So the first and last hit, the first or last hit with a given group value or in a
    given artifact, the last hit before an artifact's first sync, and whether any or all hits
    have some group value, are the same in the sample as in the whole log (up to
    ``MAX_VARIANTS``): the questions the checks ask.
    """

    count: int = 0
    first: list[Hit] = field(default_factory=list)
    last: deque[Hit] = field(default_factory=lambda: deque(maxlen=SAMPLE_LAST))
    variants: dict[VariantKey, list[Hit]] = field(default_factory=dict)  # key -> [first, last]
    untracked: int = 0  # > 0: MAX_VARIANTS was reached; hits of later variants counted, not kept apart

    def hits(self) -> list[Hit]:
        """The kept hits, each once, in log order."""
        seen: dict[tuple[int, int], Hit] = {}
        for h in itertools.chain(self.first, self.last, *self.variants.values()):
            seen.setdefault(h.order, h)
        return [seen[k] for k in sorted(seen)]

    def extend(self, later: Sample, room: int) -> int:
        """Append the sample of the hits that come after this one's; returns the variants added
        (at most ``room``)."""
        self.count += later.count
        self.untracked += later.untracked
        if len(self.first) < SAMPLE_FIRST:
            self.first.extend(later.first[: SAMPLE_FIRST - len(self.first)])
        self.last.extend(later.last)
        added = 0
        for key, (first, last) in later.variants.items():
            mine = self.variants.get(key)
            if mine is not None:
                mine[1] = last
            elif added < room and len(self.variants) < MAX_VARIANTS:
                self.variants[key] = [first, last]
                added += 1
            else:
                self.untracked += 1
        return added

    def mapped(self, fix: Callable[[Hit], Hit], synced: bool) -> Sample:
        """The same sample with every hit passed through ``fix``; with ``synced``, hits that were
        before their range's first sync are re-keyed as after the artifact's first sync."""
        memo: dict[tuple[int, int], Hit] = {}

        def f(h: Hit) -> Hit:
            out = memo.get(h.order)
            if out is None:
                out = memo[h.order] = fix(h)
            return out

        variants: dict[VariantKey, list[Hit]] = {}
        for (idx, after, groups, var), (first, last) in self.variants.items():
            key = (idx, after or synced, groups, var)
            mine = variants.get(key)
            if mine is None:
                variants[key] = [f(first), f(last)]
            elif first.order < mine[0].order:
                variants[key] = [f(first), mine[1]]
            else:
                mine[1] = f(last)
        tail = deque(map(f, self.last), maxlen=SAMPLE_LAST)
        return Sample(self.count, [f(h) for h in self.first], tail, variants, self.untracked)


@dataclass(slots=True)
class Timeline:
    """Which sync-complete lines were successful syncs, counted in scan order.

    A sync-complete line is a successful sync when no failure came since the previous
    sync-complete line (or since the start). Kept as counters, not as a list of events, so its
    size does not depend on the log. A range of a file scanned on its own starts as if no
    failure came before it; ``then`` stitches it after what came before.
    """

    successes: int = 0
    last_success: tuple[int, int] | None = None
    any_sync: bool = False
    failed_since: bool = False  # a failure since the last sync-complete line (or the start)
    any_failure: bool = False
    first_sync: tuple[int, int] | None = None
    first_sync_clean: bool = False  # no failure before (or on) first_sync in this range

    def then(self, nxt: Timeline) -> tuple[int, tuple[int, int] | None]:
        """Append a range scanned on its own. Returns what to add to its hits' successes_before,
        and the order of its first sync-complete line when that line turns out not to be a
        success after all (a failure came before it, in an earlier range): hits after it count
        one success fewer."""
        base = self.successes
        flipped = nxt.first_sync if self.failed_since and nxt.first_sync is not None and nxt.first_sync_clean else None
        self.successes += nxt.successes - (flipped is not None)
        if nxt.last_success is not None and nxt.last_success != flipped:
            self.last_success = nxt.last_success
        if self.first_sync is None:
            self.first_sync, self.first_sync_clean = nxt.first_sync, nxt.first_sync_clean and not self.any_failure
        self.failed_since = nxt.failed_since if nxt.first_sync is not None else (self.failed_since or nxt.any_failure)
        self.any_sync = self.any_sync or nxt.any_sync
        self.any_failure = self.any_failure or nxt.any_failure
        return base, flipped


@dataclass
class ScanResult:
    samples: dict[str, Sample] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # every hit, per signature
    lines: dict[str, int] = field(default_factory=dict)  # lines read per artifact
    bytes_read: int = 0
    timeline: Timeline = field(default_factory=Timeline)
    synced: set[int] = field(default_factory=set)  # artifacts in which a sync-complete line was seen
    variants: int = 0  # variants kept, all signatures

    @property
    def hits(self) -> dict[str, list[Hit]]:
        """The kept hits per signature (a bounded sample; ``counts`` has every hit)."""
        return {sid: s.hits() for sid, s in self.samples.items() if s.count}

    def add_sample(self, sid: str, later: Sample) -> None:
        mine = self.samples.get(sid)
        if mine is None:
            mine = self.samples[sid] = Sample()
        self.variants += mine.extend(later, MAX_VARIANTS_TOTAL - self.variants)
        self.counts[sid] = mine.count

    def absorb(self, part: ScanResult, idx: int, line_shift: int) -> None:
        """Append the result of a range of artifact ``idx`` scanned on its own (its line numbers
        relative to the range, its timeline as if nothing came before)."""
        synced = idx in self.synced  # an earlier range saw the artifact's first sync
        base, flipped = self.timeline.then(part.timeline)

        def fix(h: Hit) -> Hit:
            lose = flipped is not None and h.order > flipped
            return dataclasses.replace(
                h,
                line=h.line + line_shift,
                header_line=h.header_line + line_shift,
                successes_before=h.successes_before + base - lose,
                success=h.success and h.order != flipped,
            )

        for sid, sample in part.samples.items():
            self.add_sample(sid, sample.mapped(fix, synced))
        self.synced |= part.synced
        self.bytes_read += part.bytes_read


def _klog_time(header: str) -> tuple[str | None, str | None]:
    m = KLOG_HEADER.match(header)
    if m:
        return m.group("level"), f"{m.group('mm')}-{m.group('dd')}T{m.group('time')}"
    m2 = LOGRUS.search(header) or FELIX.match(header)
    if m2:
        lvl = m2.group("level")[:1].upper()
        return ("E" if lvl == "E" else "W" if lvl == "W" else "F" if lvl in "FP" else "I"), m2.group("ts")
    return None, None


class _Chunk:
    """A block of whole records, with line-number bookkeeping."""

    __slots__ = ("_cache_line", "_cache_off", "base_line", "base_off", "data", "end", "heads")

    def __init__(self, data: bytes, end: int, base_line: int, base_off: int) -> None:
        self.data = data
        self.end = end
        self.base_line = base_line
        self.base_off = base_off
        self._cache_off = 0
        self._cache_line = base_line
        # a line looked up by _record_start -> (its record's header line or None: none within
        # MAX_RECORD_LINES above it, how many lines above it that header is)
        self.heads: dict[int, tuple[int | None, int]] = {}

    def lineno(self, off: int) -> int:
        if off >= self._cache_off:
            n = self._cache_line + self.data.count(b"\n", self._cache_off, off)
        else:
            n = self._cache_line - self.data.count(b"\n", off, self._cache_off)
        self._cache_off, self._cache_line = off, n
        return n

    def line_at(self, start: int) -> tuple[str, int]:
        end = self.data.find(b"\n", start, self.end)
        if end == -1:
            end = self.end
        return self.data[start:end].decode("utf-8", errors="replace").rstrip("\r"), end

    def inner_at(self, start: int) -> tuple[str, int]:
        """The line at ``start`` without its wrappers, and where it ends."""
        text, end = self.line_at(start)
        return (text if _bare(self.data, start, start + len(text)) else unwrap(text).inner), end

    def unwrapped_at(self, start: int) -> tuple[str, str | None, str | None]:
        """The line at ``start`` without its wrappers, the wrapper's timestamp, and what the
        wrapper names as its writer (a syslog identifier or a container)."""
        text, _ = self.line_at(start)
        if _bare(self.data, start, start + len(text)):
            return text, None, None
        un = unwrap(text)
        return un.inner, un.timestamp, un.source

    def is_continuation(self, start: int) -> bool:
        kind = _bare(self.data, start, self._line_end(start))
        if kind:
            return kind == CONTINUATION
        text, _ = self.line_at(start)
        return is_continuation(unwrap(text).inner)

    def _line_end(self, start: int) -> int:
        end = self.data.find(b"\n", start, self.end)
        if end == -1:
            end = self.end
        while end > start and self.data[end - 1] == 13:  # "\r"
            end -= 1
        return end


HEADER, CONTINUATION = 1, 2
_KLOG_LEVELS = frozenset(b"IWEF")
# The start of a klog header, "I1113 16:": unwrap() strips nothing from such a line (a syslog
# month would need a day, then a space, where the hour's colon is).
_KLOG_START = lazy_re.compile(rb"[IWEF][0-9]{4} [0-9][0-9]:[^\n]")


def _bare(data: bytes, start: int, end: int) -> int:
    """What a line's first bytes tell without unwrapping it (``end`` excludes a trailing CR):
    HEADER (a bare klog header, ``I1113 ...``), CONTINUATION (starts with a tab or space, or is
    empty), or 0 (a wrapper may come first: ``unwrap`` must tell). No wrapper that ``unwrap``
    strips can start either way, so for these lines the text is its own inner text."""
    if start >= end:
        return CONTINUATION
    b = data[start]
    if b == 9 or b == 32:
        return CONTINUATION
    if end - start > 9 and b in _KLOG_LEVELS and _KLOG_START.match(data, start):
        return HEADER
    return 0


def _klog_header_at(data: bytes, pos: int) -> bool:
    """Does a bare klog header (``I1113 16:...``) start at ``pos``: a record's first line for sure."""
    return _KLOG_START.match(data, pos) is not None


def _record_start(chunk: _Chunk, start: int) -> int:
    """Offset of the header line of the record holding the line at ``start`` (``start`` itself
    when no header is within ``MAX_RECORD_LINES`` lines above it).

    The walk back stops at a line an earlier call already resolved (``chunk.heads``): hits are
    looked up in file order, so each line is walked over about once per signature, not once per
    hit below it in the same record (which unwrapped 400 lines per hit: a 20,000-line
    journald-wrapped log took 30 s).
    """
    data, heads = chunk.data, chunk.heads
    pos = start
    found: int | None = None
    lines = MAX_RECORD_LINES
    for dist in range(MAX_RECORD_LINES):
        known = heads.get(pos)
        if known is not None:
            found, lines = known[0], dist + known[1]
            break
        b = data[pos] if pos < chunk.end else 10
        continued = b == 9 or b == 32 or b == 10  # tab, space, empty line: a continuation for sure
        if pos == 0 or (not continued and (_klog_header_at(data, pos) or not chunk.is_continuation(pos))):
            found, lines = pos, dist
            break
        pos = data.rfind(b"\n", 0, pos - 1) + 1
    if found is None or lines >= MAX_RECORD_LINES:
        heads[start] = (None, MAX_RECORD_LINES)
        return start
    heads[start] = (found, lines)
    return found


# The next line that does not start as a continuation of a bare log does (tab, space, ">", empty).
_NEXT_UNINDENTED = lazy_re.compile(rb"\n[^ \t>\r\n]")


def _record_end(chunk: _Chunk, start: int) -> int:
    """Where the record starting at ``start`` ends (about as far as ``_record_text`` reads: the
    span a variant is searched in when it has no literal start)."""
    data, end = chunk.data, chunk.end
    nl = data.find(b"\n", start, end)
    if nl == -1:
        return end
    # Fast path, a bare log: the record ends where the next klog header starts, and every line
    # before it starts with a tab or space.
    m = _NEXT_UNINDENTED.search(data, nl, min(end, start + MAX_RECORD_CHARS))
    if m is not None and _klog_header_at(data, m.start() + 1):
        nxt = m.start() + 1
        if data.find(b"\n>", nl, nxt) == -1 and data.find(b"\n\r", nl, nxt) == -1:
            return nxt
    pos = start
    size = 0
    for i in range(MAX_RECORD_LINES):
        if pos >= end or (i > 0 and not chunk.is_continuation(pos)):
            break
        stop = data.find(b"\n", pos, end)
        if stop == -1:
            stop = end
        size += stop - pos
        pos = stop + 1
        if size > MAX_RECORD_CHARS:
            break
    return min(pos, end)


def _record_text(chunk: _Chunk, start: int) -> str:
    """The record starting at ``start``: its header and continuation lines, unwrapped."""
    lines = []
    pos = start
    size = 0
    for i in range(MAX_RECORD_LINES):
        if pos >= chunk.end:
            break
        inner, end = chunk.inner_at(pos)
        if i > 0 and not is_continuation(inner):
            break
        lines.append(inner)
        size += len(inner)
        if size > MAX_RECORD_CHARS:
            break
        pos = end + 1
    return "\n".join(lines)[:MAX_RECORD_CHARS]


def _strip_cr(data: bytes, start: int, end: int) -> int:
    while end > start and data[end - 1] == 13:  # "\r"
        end -= 1
    return end


def _groups(m: re.Match[bytes] | re.Match[str]) -> tuple[bytes | None, ...]:
    """A match's groups as bytes (a line searched as text gives str)."""
    gs = m.groups()
    if isinstance(m.string, bytes):
        return cast("tuple[bytes | None, ...]", gs)
    return tuple(g.encode() if isinstance(g, str) else None for g in gs)


def _cap(text: str) -> str:
    return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS] + " [...]"


_META = set("\\.^$*+?{}[]|()")


def literal_prefixes(pattern: str) -> tuple[str, ...] | None:
    """Literal text every match of ``pattern`` starts with, one per top-level alternative
    (``ip6tables|-restore v[0-9.]+`` -> ``ip6tables``, ``-restore v``), or None when some
    alternative starts with no literal. A record holding none of them is not searched at all:
    the regex, with no single literal to look for first, scans at a few ns a byte."""
    branches: list[str] = []
    depth, start, i = 0, 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a class: up to its unescaped "]" (a "]" first in it is literal)
            i += 2 if pattern[i + 1 : i + 2] == "^" else 1
            i += 1  # the first character, "]" included
            while i < len(pattern) and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
            i += 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            branches.append(pattern[start:i])
            start = i + 1
        i += 1
    branches.append(pattern[start:])
    out = []
    for b in branches:
        n = 0
        while n < len(b) and b[n] not in _META:
            n += 1
        if n < len(b) and b[n] in "*?{":
            n -= 1  # a quantifier applies to the last literal character
        if n <= 0:
            return None
        out.append(b[:n])
    return tuple(out)


def _variants(
    idx: int,
    pos: list[int],
    ks: _Keys | None,
    synced_before: bool,
    first_sync: int,
    kept: Sample | None,
    sample: Sample,
) -> dict[VariantKey, tuple[int, int]]:
    """The first and last line of each variant among one signature's hits in a chunk (``pos``:
    their lines, ``ks``: their groups and variant matches, None when the signature has neither).
    Hits up to the artifact's first sync-complete line are start-up, the rest running. New
    variants beyond MAX_VARIANTS are left out and their hits counted in ``sample.untracked``."""
    if synced_before:
        cut = 0
    elif first_sync < 0:
        cut = len(pos)
    else:
        cut = bisect.bisect_right(pos, first_sync)
    out: dict[VariantKey, tuple[int, int]] = {}
    if ks is None:
        if cut > 0:
            out[(idx, False, (), ())] = (pos[0], pos[cut - 1])
        if cut < len(pos):
            out[(idx, True, (), ())] = (pos[cut], pos[-1])
    else:
        # dict(zip()) runs in C: the last line per key, and (zipped backwards) the first
        for after, ks_part, pos_part in ((False, ks[:cut], pos[:cut]), (True, ks[cut:], pos[cut:])):
            if not pos_part:
                continue
            last = dict(zip(ks_part, pos_part, strict=True))
            first = dict(zip(reversed(ks_part), reversed(pos_part), strict=True))
            for (g, v), ls in last.items():
                out[(idx, after, g, v)] = (first[(g, v)], ls)
    known = kept.variants if kept is not None else {}
    room = max(MAX_VARIANTS - len(known), 0)
    new = [k for k in out if k not in known]
    if len(new) > room:
        new.sort(key=lambda k: out[k][0])
        dropped = set(new[room:])
        if ks is None:
            sample.untracked += sum(cut if not k[1] else len(pos) - cut for k in dropped)
        else:
            sample.untracked += sum(1 for i, (g, v) in enumerate(ks) if (idx, i >= cut, g, v) in dropped)
        for k in dropped:
            del out[k]
    return out


def _safe_cut(data: bytes) -> int:
    """Where to end a chunk: before the last (possibly incomplete) record."""
    cut = data.rfind(b"\n") + 1
    if cut <= 0:
        return 0
    pos = cut
    for _ in range(MAX_RECORD_LINES):
        prev = data.rfind(b"\n", 0, pos - 1) + 1
        line = data[prev : pos - 1].decode("utf-8", errors="replace")
        if not is_continuation(unwrap(line).inner):
            return prev if prev > 0 else cut
        if prev == 0:
            return cut
        pos = prev
    return cut


class NeedleFinder(Protocol):
    needles: list[bytes]

    def lines(self, data: bytes, end: int) -> list[list[int]]:
        """Per needle (as indexed in ``needles``), the start offset of every line of
        ``data[:end]`` holding it, in order, each line once."""
        ...


class FindLoopFinder:
    """Pure Python: one ``bytes.find`` pass per needle (a few GB/s each)."""

    def __init__(self, needles: list[bytes]) -> None:
        self.needles = needles

    def lines(self, data: bytes, end: int) -> list[list[int]]:
        out: list[list[int]] = []
        find, rfind = data.find, data.rfind
        for needle in self.needles:
            found: list[int] = []
            i = find(needle, 0, end)
            while i != -1:
                found.append(rfind(b"\n", 0, i) + 1)
                nl = find(b"\n", i, end)
                if nl == -1:
                    break
                i = find(needle, nl, end)
            out.append(found)
        return out


class AhoCorasickFinder:
    """Every needle in one pass (ahocorasick_rs, a compiled Aho-Corasick automaton)."""

    def __init__(self, needles: list[bytes]) -> None:
        assert ahocorasick_rs is not None
        self.needles = needles
        self.ac = ahocorasick_rs.BytesAhoCorasick(needles)

    def lines(self, data: bytes, end: int) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.needles]
        rfind = data.rfind
        for pi, start, stop in self.ac.find_matches_as_indexes(data, overlapping=True):
            if stop <= end:  # beyond: in the carried-over tail, found again in the next chunk
                out[pi].append(rfind(b"\n", 0, start) + 1)
        # a needle found twice on a line gives the line twice (matches come in order)
        return [list(dict.fromkeys(found)) if len(found) > 1 else found for found in out]


def _align(fh: BinaryIO, pos: int) -> int:
    """The start of the first whole record at or after byte ``pos`` (same answer for every caller)."""
    if pos <= 0:
        return 0
    fh.seek(pos)
    window = fh.read(4 * 1024 * 1024)
    nl = window.find(b"\n")
    if nl == -1:
        return pos + len(window)
    cur = nl + 1
    for _ in range(MAX_RECORD_LINES):
        end = window.find(b"\n", cur)
        if end == -1:
            break
        line = window[cur:end].decode("utf-8", errors="replace")
        if not is_continuation(unwrap(line).inner):
            break
        cur = end + 1
    return pos + cur


def _scan_range(
    sigs: tuple[Signature, ...],
    idx: int,
    name: str,
    path: str,
    previous: bool,
    start: int,
    end: int,
    pure_python: bool = False,
) -> tuple[ScanResult, int]:
    """Worker: scan bytes [start, end) of a file on its own (line numbers relative to the range,
    first = 1; the timeline as if no failure came before); returns the result and its lines."""
    scanner = Scanner(sigs, workers=1, pure_python=pure_python)
    res = ScanResult()
    art = Artifact(name, Kind.KUBE_PROXY_LOG, path=path, attrs={"previous": "true"} if previous else {})
    lines = 1
    for data, cut, base_off in scanner._blocks(art, start, end):
        chunk = _Chunk(data, cut, lines, base_off)
        res.bytes_read += cut
        scanner._scan_chunk(idx, art, chunk, res)
        lines = chunk.lineno(cut)
    return res, lines - 1


# Per needle: (signature index, bytes search, str search, failure, success, variant index or -1, has groups)
_Entry = tuple[
    int,
    "Callable[[bytes, int, int], re.Match[bytes] | None] | None",
    Callable[[str], "re.Match[str] | None"],
    bool,
    bool,
    int,
    bool,
]
_Pending = tuple[int, int, bool]  # (line start in the chunk, successful syncs before it, is one)
_Keys = list[tuple[tuple[bytes | None, ...], tuple[bytes, ...]]]  # per hit: (groups, variant matches)
# A line that unwrap() leaves as it is: a bare klog header ("I1113 16:..."), or a continuation
# (tab, space, or empty). No wrapper starts either way.
_BARE_LINE = lazy_re.compile(rb"[IWEF][0-9]{4} [0-9][0-9]:.|[ \t]|$")


@dataclass(frozen=True, slots=True)
class _VariantSpec:
    rx: re.Pattern[bytes]
    prefixes: tuple[bytes, ...] | None  # literal starts of its matches (None: search whole records)
    needles: tuple[int, ...]  # the finder's needle indices of those prefixes


class Scanner:
    """Scans artifacts for a set of signatures; one instance per run."""

    def __init__(self, signatures: Iterable[Signature], workers: int | None = None, pure_python: bool = False) -> None:
        self.signatures = tuple(signatures)
        self.by_needle: dict[bytes, list[Signature]] = {}
        by_needle: dict[bytes, list[int]] = {}
        variants: dict[str, int] = {}
        for i, sig in enumerate(self.signatures):
            if not sig.needle_in_pattern():
                raise ValueError(f"signature {sig.id}: needle {sig.needle!r} not in its pattern")
            if "\n" in sig.needle:
                raise ValueError(f"signature {sig.id}: a needle is matched within one line")
            needle = sig.needle.encode()
            self.by_needle.setdefault(needle, []).append(sig)
            if sig.variant:
                variants.setdefault(sig.variant, len(variants))
            by_needle.setdefault(needle, []).append(i)
        needles = list(self.by_needle)
        # by needle index: the signatures' searches, compiled when a line first holds the needle
        # (thousands of catalogue messages are declared; a log holds few of them)
        self._sig_of_needle: list[list[int]] = [by_needle[nd] for nd in needles]
        self._entries: list[list[_Entry] | None] = [None] * len(needles)
        self._variant_of: dict[str, int] = variants
        self._sig_needles = len(needles)
        # A variant's literal prefixes are needles too: the finder then gives the lines that can
        # hold a variant match, in the same pass.
        self._variants: list[_VariantSpec] = []
        for pattern in variants:
            prefixes = literal_prefixes(pattern)
            pre = tuple(p.encode() for p in prefixes) if prefixes is not None else None
            ids = []
            for p in pre or ():
                if p not in needles:
                    needles.append(p)
                ids.append(needles.index(p))
            self._variants.append(_VariantSpec(re.compile(pattern.encode()), pre, tuple(ids)))
        self._sig_variant = [variants[sig.variant] if sig.variant else -1 for sig in self.signatures]
        self._failure_sigs = [i for i, sig in enumerate(self.signatures) if sig.failure]
        self._success_sigs = [i for i, sig in enumerate(self.signatures) if sig.success]
        self.pure_python = pure_python or ahocorasick_rs is None
        self.finder: NeedleFinder = (
            AhoCorasickFinder(needles) if ahocorasick_rs is not None and not pure_python else FindLoopFinder(needles)
        )
        self.workers = workers if workers is not None else default_workers()

    def _entries_of(self, nid: int) -> list[_Entry]:
        """The searches of the signatures whose needle is ``nid``, compiled on first use."""
        got = self._entries[nid]
        if got is None:
            got = self._entries[nid] = [self._entry(i) for i in self._sig_of_needle[nid]]
        return got

    def _entry(self, i: int) -> _Entry:
        sig = self.signatures[i]
        rx = sig.compiled()
        # A bare ASCII line is searched as bytes, not decoded and unwrapped: the same answer,
        # for a pattern without "^" (which would not match at a search start past 0).
        rxb = re.compile(sig.pattern.encode()) if "^" not in sig.pattern.replace("[^", "") else None
        vi = self._variant_of[sig.variant] if sig.variant else -1
        bsearch = rxb.search if rxb is not None else None
        return (i, bsearch, rx.search, sig.failure, sig.success, vi, rx.groups > 0 and sig.keyed)

    def scan(self, artifacts: list[Artifact]) -> ScanResult:
        result = ScanResult()
        for idx, art in enumerate(artifacts):
            n = workers_for(os.path.getsize(art.path), PARALLEL_MIN_BYTES, self.workers) if art.path else 1
            if n > 1:
                self._scan_parallel(idx, art, result, n)
                continue
            self._scan_artifact(idx, art, result)
        return result

    def _scan_parallel(self, idx: int, art: Artifact, result: ScanResult, n: int) -> None:
        """Scan a large file on ``n`` cores (parallel.run_parts: this process takes the first
        range): record-aligned byte ranges, line numbers and the sync timeline stitched in order."""
        assert art.path is not None
        size = os.path.getsize(art.path)
        with open(art.path, "rb") as fh:
            bounds = sorted({_align(fh, size * i // n) for i in range(n)} | {size})
        parts: list[Callable[[], tuple[ScanResult, int]]] = [
            functools.partial(
                _scan_range, self.signatures, idx, art.name, art.path, art.previous, a, b, self.pure_python
            )
            for a, b in itertools.pairwise(bounds)
            if b > a
        ]
        outcomes = run_parts(parts)
        line_base = art.first_line - 1
        for part, lines in outcomes:
            result.absorb(part, idx, line_base)
            line_base += lines
        result.lines[art.name] = result.lines.get(art.name, 0) + line_base - (art.first_line - 1)

    def _blocks(self, art: Artifact, start: int = 0, end: int | None = None) -> Iterator[tuple[bytes, int, int]]:
        """(data, end, file offset): ``data[:end]`` holds whole records; the tail is carried over."""
        if art.path is None:
            text = art.text.encode("utf-8", errors="replace")
            yield text, len(text), 0
            return
        with open(art.path, "rb") as fh:
            fh.seek(start)
            remaining = (end - start) if end is not None else None
            carry = b""
            off = start
            while True:
                want = CHUNK_BYTES if remaining is None else min(CHUNK_BYTES, remaining)
                block = fh.read(want) if want > 0 else b""
                if remaining is not None:
                    remaining -= len(block)
                if not block:
                    if carry:
                        yield carry, len(carry), off
                    return
                data = carry + block if carry else block
                cut = _safe_cut(data)
                if cut == 0:
                    if len(data) < CHUNK_BYTES:
                        carry = data
                        continue
                    # No newline in a whole chunk: a line this long is no log record, and carrying
                    # it on grew without bound (a 1 GB line, 1 GB of memory). It is scanned in
                    # chunk-sized pieces instead (a match across a cut may be missed).
                    cut = len(data)
                yield data, cut, off
                off += cut
                carry = data[cut:]

    def _scan_artifact(self, idx: int, art: Artifact, result: ScanResult) -> None:
        line = art.first_line
        for data, end, base_off in self._blocks(art):
            chunk = _Chunk(data, end, line, base_off)
            result.bytes_read += end
            self._scan_chunk(idx, art, chunk, result)
            line = chunk.lineno(end)
        result.lines[art.name] = result.lines.get(art.name, 0) + line - art.first_line

    def _scan_chunk(self, idx: int, art: Artifact, chunk: _Chunk, res: ScanResult) -> None:
        """Count every hit in the chunk and move the sync timeline on; then build the few hits
        the sample keeps. A dense log has a hit every few lines, so the lines are handled a
        needle at a time with ``map``/``compress`` (the loop runs in C): per hit, a regex search
        and a few list items, not a record's worth of text and a ``Hit``."""
        data, end = chunk.data, chunk.end
        per_needle = self.finder.lines(data, end)
        n = len(self.signatures)
        positions: list[list[int]] = [[] for _ in range(n)]  # per signature: the start of each hit's line
        groups_of: dict[int, list[tuple[bytes | None, ...]]] = {}
        heads_of: dict[int, list[int]] = {}  # per signature with a variant: each hit's record start
        ascii_chunk = data.isascii()
        has_cr = b"\r" in data
        find = data.find
        levels = _KLOG_LEVELS
        inner: dict[int, str] = {}  # line start -> unwrapped text, for the lines unwrap() must read

        def unwrapped(ls: int, le: int) -> str:
            text = inner.get(ls)
            if text is None:
                text = inner[ls] = unwrap(data[ls:le].decode("utf-8", errors="replace")).inner
            return text

        def line_ends(starts: list[int]) -> list[int]:
            les = list(map(find, repeat(b"\n"), starts, repeat(end)))
            if les[-1] == -1:
                les[-1] = end
            if has_cr:
                les = [_strip_cr(data, ls, le) for ls, le in zip(starts, les, strict=True)]
            return les

        for nid in range(self._sig_needles):
            starts = per_needle[nid]
            if not starts:
                continue
            les = line_ends(starts)
            # Bare ASCII lines are searched as bytes; the others are decoded and unwrapped.
            mask: list[object] = list(map(_BARE_LINE.match, repeat(data), starts, les))
            if not ascii_chunk:
                mask = [f and data[ls:le].isascii() for f, ls, le in zip(mask, starts, les, strict=True)]
            if all(mask):
                fs, fe, slow = starts, les, []
            else:
                fs, fe = list(compress(starts, mask)), list(compress(les, mask))
                slow = [(ls, le) for ls, le, f in zip(starts, les, mask, strict=True) if not f]
            for si, bsearch, ssearch, _failure, _success, vi, has_groups in self._entries_of(nid):
                if bsearch is not None:
                    ms: list[re.Match[bytes] | None] = list(map(bsearch, repeat(data), fs, fe))
                    pos = list(compress(fs, ms))
                    sl = slow
                else:
                    ms, pos, sl = [], [], list(zip(starts, les, strict=True))
                groups: list[tuple[bytes | None, ...]] | None = None
                if has_groups:
                    groups = cast("list[tuple[bytes | None, ...]]", [m.groups() for m in ms if m is not None])
                if sl:
                    got = [(ls, t) for ls, le in sl if (t := ssearch(unwrapped(ls, le))) is not None]
                    if got:
                        pairs = sorted(
                            list(zip(pos, groups or repeat(()), strict=False)) + [(ls, _groups(t)) for ls, t in got],
                            key=lambda x: x[0],
                        )
                        pos = [ls for ls, _ in pairs]
                        if has_groups:
                            groups = [g for _, g in pairs]
                if not pos:
                    continue
                positions[si] = pos
                if groups is not None:
                    groups_of[si] = groups
                if vi >= 0:  # each hit's record start (a bare header line is one)
                    if not slow:
                        heads_of[si] = [ls if data[ls] in levels else _record_start(chunk, ls) for ls in pos]
                    else:
                        ok = set(fs)
                        heads_of[si] = [
                            ls if ls in ok and data[ls] in levels else _record_start(chunk, ls) for ls in pos
                        ]
        keys = self._keys(chunk, per_needle, positions, groups_of, heads_of, line_ends)
        successes, first_sync, before, synced_before = self._timeline(idx, chunk.base_off, res, positions)
        self._keep(idx, art, chunk, res, positions, keys, successes, before, synced_before, first_sync)

    def _keys(
        self,
        chunk: _Chunk,
        per_needle: list[list[int]],
        positions: list[list[int]],
        groups_of: dict[int, list[tuple[bytes | None, ...]]],
        heads_of: dict[int, list[int]],
        line_ends: Callable[[list[int]], list[int]],
    ) -> list[_Keys]:
        """Per signature with groups or a variant, each hit's (groups, variant matches). A
        record's variant matches are read from the lines holding one of the variant's literal
        prefixes (found with the needles), each line once, and shared by the record's hits."""
        data = chunk.data
        tables: dict[int, dict[int, tuple[bytes, ...]]] = {}
        for si, heads in heads_of.items():
            vi = self._sig_variant[si]
            table = tables.get(vi)
            if table is None:
                table = tables[vi] = {}
                spec = self._variants[vi]
                if spec.prefixes is not None:
                    starts = sorted({ls for nid in spec.needles for ls in per_needle[nid]})
                    if starts:
                        for ls, le in zip(starts, line_ends(starts), strict=True):
                            got = spec.rx.findall(data, ls, le)
                            if got:
                                bare_header = data[ls] in _KLOG_LEVELS and _BARE_LINE.match(data, ls, le)
                                hs = ls if bare_header else _record_start(chunk, ls)
                                table[hs] = tuple(dict.fromkeys(table.get(hs, ()) + tuple(got)))
            if self._variants[vi].prefixes is None:  # no literal prefix: each record searched whole
                rx = self._variants[vi].rx
                for hs in heads:
                    if hs not in table:
                        table[hs] = tuple(dict.fromkeys(rx.findall(data, hs, _record_end(chunk, hs))))
        out: list[_Keys] = [[] for _ in positions]
        for si in range(len(positions)):
            record_starts = heads_of.get(si)
            groups = groups_of.get(si)
            if record_starts is not None:
                table = tables[self._sig_variant[si]]
                found = map(table.get, record_starts, repeat(()))
                out[si] = list(zip(groups if groups is not None else repeat(()), found, strict=False))
            elif groups is not None:
                out[si] = list(zip(groups, repeat(()), strict=False))
            # neither groups nor a variant: the only keys are start-up and running (_variants)
        return out

    def _timeline(
        self, idx: int, base_off: int, res: ScanResult, positions: list[list[int]]
    ) -> tuple[list[int], int, int, bool]:
        """Move the sync timeline over a chunk: a sync-complete line is a successful sync when no
        failure came since the previous one (a failure on the same line counts as before it).
        Returns the chunk's successful sync lines, its first sync-complete line (or -1), the
        successful syncs before the chunk, and whether the artifact had a sync-complete before."""
        tl = res.timeline
        before, synced_before = tl.successes, idx in res.synced
        fails = [positions[si] for si in self._failure_sigs if positions[si]]
        syncs = [positions[si] for si in self._success_sigs if positions[si]]
        failures = sorted(set().union(*fails)) if len(fails) > 1 else (fails[0] if fails else [])
        if not syncs:
            if failures:
                tl.failed_since = tl.any_failure = True
            return [], -1, before, synced_before
        sync_lines = sorted(set().union(*syncs)) if len(syncs) > 1 else syncs[0]
        successes: list[int] = []
        failed, seen = tl.failed_since, 0
        for s in sync_lines:
            upto = bisect.bisect_right(failures, s, seen)
            if upto > seen:
                failed, seen = True, upto
            if not failed:
                successes.append(s)
            failed = False
        first = sync_lines[0]
        if tl.first_sync is None:
            tl.first_sync = (idx, base_off + first)
            tl.first_sync_clean = not (tl.any_failure or (bool(failures) and failures[0] <= first))
        tl.any_sync = True
        res.synced.add(idx)
        tl.failed_since = seen < len(failures)
        tl.any_failure = tl.any_failure or bool(failures)
        if successes:
            tl.successes += len(successes)
            tl.last_success = (idx, base_off + successes[-1])
        return successes, first, before, synced_before

    def _keep(
        self,
        idx: int,
        art: Artifact,
        chunk: _Chunk,
        res: ScanResult,
        positions: list[list[int]],
        keys: list[_Keys],
        successes: list[int],
        before_chunk: int,
        synced_before: bool,
        first_sync: int,
    ) -> None:
        """Build the hits the sample keeps (in line order, so line numbers are counted forward)
        and add the chunk's sample of each signature to the result's."""
        success_set = set(successes)

        def pending(ls: int, si: int) -> _Pending:
            ok = self.signatures[si].success and ls in success_set
            return ls, before_chunk + bisect.bisect_left(successes, ls), ok

        parts: list[tuple[int, Sample, list[_Pending], list[_Pending], dict[VariantKey, tuple[int, int]]]] = []
        for si, pos in enumerate(positions):
            if not pos:
                continue
            kept = res.samples.get(self.signatures[si].id)
            need = max(SAMPLE_FIRST - (len(kept.first) if kept is not None else 0), 0)
            sample = Sample(count=len(pos))
            variants = _variants(idx, pos, keys[si] or None, synced_before, first_sync, kept, sample)
            first = [pending(ls, si) for ls in pos[:need]]
            last = [pending(ls, si) for ls in pos[-SAMPLE_LAST:]]
            parts.append((si, sample, first, last, variants))
        wanted: dict[tuple[int, int], _Pending] = {}
        for si, _, first, last, variants in parts:
            for p in itertools.chain(first, last):
                wanted[(p[0], si)] = p
            known = res.samples[self.signatures[si].id].variants if self.signatures[si].id in res.samples else {}
            for k, (a, b) in variants.items():
                if k not in known:  # the first of a variant the result has is not needed
                    wanted.setdefault((a, si), pending(a, si))
                wanted.setdefault((b, si), pending(b, si))
        built: dict[tuple[int, int], Hit] = {}
        for ls, si in sorted(wanted):  # in line order: line numbers are counted forward
            _, before, ok = wanted[(ls, si)]
            built[(ls, si)] = self._build(idx, art, chunk, self.signatures[si], ls, before, ok)
        for si, sample, first, last, variants in parts:
            sample.first = [built[(p[0], si)] for p in first]
            sample.last.extend(built[(p[0], si)] for p in last)
            sample.variants = {
                k: [built.get((a, si)) or built[(b, si)], built[(b, si)]] for k, (a, b) in variants.items()
            }
            res.add_sample(self.signatures[si].id, sample)

    @staticmethod
    def _build(
        idx: int, art: Artifact, chunk: _Chunk, sig: Signature, ls: int, before: int, success: bool
    ) -> Hit:
        """The full hit for the line at ``ls``: its record's header, level, time and text."""
        inner, ts, source = chunk.unwrapped_at(ls)
        if is_continuation(inner):
            hs = _record_start(chunk, ls)
            header, hts, hsource = chunk.unwrapped_at(hs)
            hts, header_off, source = hts or ts, hs, hsource or source
        else:
            header, hts, header_off = inner, ts, ls
        level, kts = _klog_time(header)
        lineno = chunk.lineno(ls)
        hline = lineno if header_off == ls else chunk.lineno(header_off)
        m = sig.compiled().search(inner)
        return Hit(
            sig.id,
            art.name,
            lineno,
            _cap(inner.strip()),
            hline,
            _cap(header.strip()),
            level,
            hts or kts,
            (idx, chunk.base_off + ls),
            m.groups() if m is not None else (),
            art.previous,
            _record_text(chunk, header_off),
            before,
            success,
            source or art.attrs.get("log_of"),  # the wrapper's name, else whose log the command printed
        )

