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

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from kpdoctor.bundle.artifacts import Artifact
from kpdoctor.parse.logwrap import KLOG_HEADER, LOGRUS, is_continuation, unwrap

CHUNK_BYTES = 8 * 1024 * 1024
MAX_RECORD_LINES = 400  # a record longer than this is cut (a runaway stack trace)
MAX_HITS_PER_SIGNATURE = 100_000  # beyond this, hits are counted but not kept


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


@dataclass
class ScanResult:
    hits: dict[str, list[Hit]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # lines read per artifact
    bytes_read: int = 0

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

    __slots__ = ("_cache_line", "_cache_off", "base_line", "base_off", "data")

    def __init__(self, data: bytes, base_line: int, base_off: int) -> None:
        self.data = data
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
        end = self.data.find(b"\n", start)
        if end == -1:
            end = len(self.data)
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


class Scanner:
    """Scans artifacts for a set of signatures; one instance per run."""

    def __init__(self, signatures: Iterable[Signature]) -> None:
        self.by_needle: dict[bytes, list[Signature]] = {}
        for sig in signatures:
            if sig.needle not in sig.pattern.replace("\\", ""):
                raise ValueError(f"signature {sig.id}: needle {sig.needle!r} not in its pattern")
            self.by_needle.setdefault(sig.needle.encode(), []).append(sig)

    def scan(self, artifacts: list[Artifact]) -> ScanResult:
        result = ScanResult()
        for idx, art in enumerate(artifacts):
            for hit in self._scan_artifact(idx, art, result):
                result.add(hit)
        return result

    def _blocks(self, art: Artifact) -> Iterator[tuple[bytes, int]]:
        if art.path is None:
            yield art.text.encode("utf-8", errors="replace"), 0
            return
        with open(art.path, "rb") as fh:
            carry = b""
            off = 0
            while True:
                block = fh.read(CHUNK_BYTES)
                if not block:
                    if carry:
                        yield carry, off
                    return
                data = carry + block if carry else block
                cut = _safe_cut(data)
                if cut == 0:
                    carry = data
                    continue
                yield data[:cut], off
                off += cut
                carry = data[cut:]

    def _scan_artifact(self, idx: int, art: Artifact, result: ScanResult) -> Iterator[Hit]:
        line = art.first_line
        previous = art.previous
        for data, base_off in self._blocks(art):
            chunk = _Chunk(data, line, base_off)
            result.bytes_read += len(data)
            yield from self._scan_chunk(idx, art, chunk, previous)
            line += data.count(b"\n")
        result.lines[art.name] = result.lines.get(art.name, 0) + line - art.first_line

    def _scan_chunk(self, idx: int, art: Artifact, chunk: _Chunk, previous: bool) -> Iterator[Hit]:
        data = chunk.data
        found: dict[int, list[bytes]] = {}
        for needle in self.by_needle:
            find = data.find
            i = find(needle)
            while i != -1:
                ls = data.rfind(b"\n", 0, i) + 1
                found.setdefault(ls, []).append(needle)
                nl = find(b"\n", i)
                if nl == -1:
                    break
                i = find(needle, nl)
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
            for needle in found[ls]:
                for sig in self.by_needle[needle]:
                    m = sig.compiled().search(inner)
                    if m is None:
                        continue
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
                    )
