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
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol

try:  # compiled multi-needle search; the pure-Python loop below is the fallback
    import ahocorasick_rs
except ImportError:  # pragma: no cover - exercised by the pure_python tests
    ahocorasick_rs = None  # type: ignore[assignment]

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.parallel import default_workers
from kpdoctor.parse.logwrap import KLOG_HEADER, LOGRUS, is_continuation, unwrap

CHUNK_BYTES = 8 * 1024 * 1024
MAX_RECORD_LINES = 400  # a record longer than this is cut (a runaway stack trace)
MAX_HITS_PER_SIGNATURE = 100_000  # beyond this, hits are counted but not kept
PARALLEL_MIN_BYTES = 64 * 1024 * 1024  # files this large are scanned on every core


@dataclass(frozen=True, slots=True)
class Signature:
    """A log line that means something, declared next to the check that owns it.

    ``pattern`` must contain ``needle`` literally (the scanner only looks at lines holding the
    needle) and use only syntax that Python ``re`` and ``grep -E`` read the same way.
    """

    id: str
    needle: str
    pattern: str
    failure: bool = False  # a sync attempt failed (used to tell ongoing from recovered)

    def compiled(self) -> re.Pattern[str]:
        return _compile(self.pattern)


_COMPILED: dict[str, re.Pattern[str]] = {}


def _compile(pattern: str) -> re.Pattern[str]:
    rx = _COMPILED.get(pattern)
    if rx is None:
        rx = _COMPILED[pattern] = re.compile(pattern)
    return rx


REGISTRY: dict[str, Signature] = {}


def signature(id: str, needle: str, pattern: str, *, failure: bool = False) -> Signature:
    """Declare (and register) a signature; ids are unique across kpdoctor."""
    sig = Signature(id, needle, pattern, failure)
    if needle not in pattern.replace("\\", ""):
        raise ValueError(f"signature {id}: needle {needle!r} not in its pattern")
    old = REGISTRY.get(id)
    if old is not None and old != sig:
        raise ValueError(f"signature {id!r} declared twice with different content")
    REGISTRY[id] = sig
    return sig


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


@dataclass
class ScanResult:
    hits: dict[str, list[Hit]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # lines read per artifact
    bytes_read: int = 0

    def merge(self, hits: list[Hit], counts: dict[str, int]) -> None:
        """Add a worker's hits (already capped there) and its full counts."""
        for h in hits:
            lst = self.hits.setdefault(h.sig, [])
            if len(lst) < MAX_HITS_PER_SIGNATURE:
                lst.append(h)
        for k, v in counts.items():
            self.counts[k] = self.counts.get(k, 0) + v

    def add(self, hit: Hit) -> None:
        self.counts[hit.sig] = self.counts.get(hit.sig, 0) + 1
        lst = self.hits.setdefault(hit.sig, [])
        if len(lst) < MAX_HITS_PER_SIGNATURE:
            lst.append(hit)


def _klog_time(header: str) -> tuple[str | None, str | None]:
    m = KLOG_HEADER.match(header)
    if m:
        return m.group("level"), f"{m.group('mm')}-{m.group('dd')}T{m.group('time')}"
    m2 = LOGRUS.search(header)
    if m2:
        lvl = m2.group("level")[:1].upper()
        return ("E" if lvl == "E" else "W" if lvl == "W" else "F" if lvl in "FP" else "I"), m2.group("ts")
    return None, None


class _Chunk:
    """A block of whole records, with line-number bookkeeping."""

    __slots__ = ("_cache_line", "_cache_off", "base_line", "base_off", "data", "end")

    def __init__(self, data: bytes, end: int, base_line: int, base_off: int) -> None:
        self.data = data
        self.end = end
        self.base_line = base_line
        self.base_off = base_off
        self._cache_off = 0
        self._cache_line = base_line

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


def _record_start(chunk: _Chunk, start: int) -> int:
    """Offset of the header line of the record holding the line at ``start``."""
    data = chunk.data
    pos = start
    for _ in range(MAX_RECORD_LINES):
        text, _end = chunk.line_at(pos)
        if not is_continuation(unwrap(text).inner) or pos == 0:
            return pos
        pos = data.rfind(b"\n", 0, pos - 1) + 1
    return start


MAX_RECORD_CHARS = 4000


def _record_text(chunk: _Chunk, start: int) -> str:
    """The record starting at ``start``: its header and continuation lines, unwrapped."""
    lines = []
    pos = start
    size = 0
    for i in range(MAX_RECORD_LINES):
        if pos >= chunk.end:
            break
        text, end = chunk.line_at(pos)
        inner = unwrap(text).inner
        if i > 0 and not is_continuation(inner):
            break
        lines.append(inner)
        size += len(inner)
        if size > MAX_RECORD_CHARS:
            break
        pos = end + 1
    return "\n".join(lines)[:MAX_RECORD_CHARS]


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
    def lines(self, data: bytes, end: int) -> dict[int, list[bytes]]:
        """Start offset of every line of ``data[:end]`` holding a needle -> its needles (each once)."""
        ...


class FindLoopFinder:
    """Pure Python: one ``bytes.find`` pass per needle (a few GB/s each)."""

    def __init__(self, needles: list[bytes]) -> None:
        self.needles = needles

    def lines(self, data: bytes, end: int) -> dict[int, list[bytes]]:
        found: dict[int, list[bytes]] = {}
        find = data.find
        for needle in self.needles:
            i = find(needle, 0, end)
            while i != -1:
                ls = data.rfind(b"\n", 0, i) + 1
                found.setdefault(ls, []).append(needle)
                nl = find(b"\n", i, end)
                if nl == -1:
                    break
                i = find(needle, nl, end)
        return found


class AhoCorasickFinder:
    """Every needle in one pass (ahocorasick_rs, a compiled Aho-Corasick automaton)."""

    def __init__(self, needles: list[bytes]) -> None:
        assert ahocorasick_rs is not None
        self.needles = needles
        self.ac = ahocorasick_rs.BytesAhoCorasick(needles)

    def lines(self, data: bytes, end: int) -> dict[int, list[bytes]]:
        found: dict[int, list[bytes]] = {}
        rfind = data.rfind
        for pi, start, stop in self.ac.find_matches_as_indexes(data, overlapping=True):
            if stop > end:
                continue  # in the carried-over tail: found again in the next chunk
            ls = rfind(b"\n", 0, start) + 1
            lst = found.setdefault(ls, [])
            needle = self.needles[pi]
            if needle not in lst:
                lst.append(needle)
        return found


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
) -> tuple[list[Hit], dict[str, int], int, int]:
    """Worker: scan bytes [start, end) of a file; line numbers relative to the range (first = 1)."""
    scanner = Scanner(sigs, workers=1, pure_python=pure_python)
    res = ScanResult()
    art = Artifact(name, Kind.KUBE_PROXY_LOG, path=path, attrs={"previous": "true"} if previous else {})
    lines = 1
    for data, cut, base_off in scanner._blocks(art, start, end):
        chunk = _Chunk(data, cut, lines, base_off)
        res.bytes_read += cut
        for hit in scanner._scan_chunk(idx, art, chunk, previous):
            res.add(hit)
        lines = chunk.lineno(cut)
    hits = [h for lst in res.hits.values() for h in lst]
    return hits, res.counts, lines - 1, res.bytes_read


class Scanner:
    """Scans artifacts for a set of signatures; one instance per run."""

    def __init__(self, signatures: Iterable[Signature], workers: int | None = None, pure_python: bool = False) -> None:
        self.signatures = tuple(signatures)
        self.by_needle: dict[bytes, list[Signature]] = {}
        for sig in self.signatures:
            if sig.needle not in sig.pattern.replace("\\", ""):
                raise ValueError(f"signature {sig.id}: needle {sig.needle!r} not in its pattern")
            self.by_needle.setdefault(sig.needle.encode(), []).append(sig)
        self.pure_python = pure_python or ahocorasick_rs is None
        self.finder: NeedleFinder = (
            AhoCorasickFinder(list(self.by_needle))
            if ahocorasick_rs is not None and not pure_python
            else FindLoopFinder(list(self.by_needle))
        )
        self.workers = workers if workers is not None else default_workers()

    def scan(self, artifacts: list[Artifact]) -> ScanResult:
        result = ScanResult()
        for idx, art in enumerate(artifacts):
            if art.path is not None and self.workers > 1 and os.path.getsize(art.path) >= PARALLEL_MIN_BYTES:
                import concurrent.futures.process  # here: a process pool costs start-up time to import

                try:
                    self._scan_parallel(idx, art, result)
                    continue
                except (OSError, RuntimeError, concurrent.futures.process.BrokenProcessPool):
                    pass  # no processes available here: fall back to one core
            for hit in self._scan_artifact(idx, art, result):
                result.add(hit)
        return result

    def _scan_parallel(self, idx: int, art: Artifact, result: ScanResult) -> None:
        """Scan a large file on every core: record-aligned byte ranges, line numbers stitched."""
        assert art.path is not None
        size = os.path.getsize(art.path)
        n = self.workers * 2
        with open(art.path, "rb") as fh:
            bounds = sorted({_align(fh, size * i // n) for i in range(n)} | {size})
        import concurrent.futures
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx) as pool:
            futures = [
                pool.submit(_scan_range, self.signatures, idx, art.name, art.path, art.previous, a, b, self.pure_python)
                for a, b in itertools.pairwise(bounds)
                if b > a
            ]
            outcomes = [f.result() for f in futures]
        line_base = art.first_line - 1
        for hits, counts, lines, nbytes in outcomes:
            shift = [
                dataclasses.replace(h, line=h.line + line_base, header_line=h.header_line + line_base) for h in hits
            ]
            result.merge(shift, counts)
            line_base += lines
            result.bytes_read += nbytes
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
                    carry = data
                    continue
                yield data, cut, off
                off += cut
                carry = data[cut:]

    def _scan_artifact(self, idx: int, art: Artifact, result: ScanResult) -> Iterator[Hit]:
        line = art.first_line
        previous = art.previous
        for data, end, base_off in self._blocks(art):
            chunk = _Chunk(data, end, line, base_off)
            result.bytes_read += end
            yield from self._scan_chunk(idx, art, chunk, previous)
            line = chunk.lineno(end)
        result.lines[art.name] = result.lines.get(art.name, 0) + line - art.first_line

    def _scan_chunk(self, idx: int, art: Artifact, chunk: _Chunk, previous: bool) -> Iterator[Hit]:
        found = self.finder.lines(chunk.data, chunk.end)
        for ls in sorted(found):
            text, _ = chunk.line_at(ls)
            un = unwrap(text)
            inner = un.inner
            if is_continuation(inner):
                hs = _record_start(chunk, ls)
                htext, _ = chunk.line_at(hs)
                hun = unwrap(htext)
                header, hts, header_off = hun.inner, hun.timestamp or un.timestamp, hs
            else:
                header, hts, header_off = inner, un.timestamp, ls
            level, kts = _klog_time(header)
            lineno = chunk.lineno(ls)
            hline = lineno if header_off == ls else chunk.lineno(header_off)
            record: str | None = None
            for needle in found[ls]:
                for sig in self.by_needle[needle]:
                    m = sig.compiled().search(inner)
                    if m is None:
                        continue
                    if record is None:
                        record = _record_text(chunk, header_off)
                    yield Hit(
                        sig.id,
                        art.name,
                        lineno,
                        inner.strip(),
                        hline,
                        header.strip(),
                        level,
                        hts or kts,
                        (idx, chunk.base_off + ls),
                        m.groups(),
                        previous,
                        record,
                    )
