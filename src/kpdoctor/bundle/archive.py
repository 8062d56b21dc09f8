"""Safe extraction of bundle tarballs.

A bundle may come from anyone, and may have been damaged on its way. So:

- entries with ``../`` or absolute paths, links, device files, sparse and binary entries, and
  entries that cannot be written (a name too long, a file where a folder is needed) are refused
  one by one, each with a one-line reason, and extraction goes on;
- so are entries nested more than :data:`MAX_DEPTH` folders deep (one line for each folder whose
  contents are too deep, not one per entry in it): a real bundle is five levels deep, and a
  member thousands of levels deep would cost a folder walk (here, and in every later reader of
  the folder) one frame per level. Folders are created one level at a time, without recursion,
  and a path longer than the system allows (``ENAMETOOLONG``) is a refused entry too;
- damage is never read silently: the decompressed stream is always read to its very end, so the
  gzip/bzip2/xz checksums are checked, and an early stop of ``tarfile`` (it takes a bad header
  after the first entry for the end of the archive) is found by looking at what follows. Damage
  is reported as such (``Extracted.damaged``), naming what was lost; what was read before it is
  kept;
- decompression bombs and millions of tiny entries stop early: a total, a compression-ratio
  limit and an entry count bound the time spent and the bytes written to ``$TMPDIR``.

Nothing but :class:`ArchiveError` (the archive cannot be used at all) leaves :func:`extract`, and
no message holds the extraction path (it is an internal temporary folder).
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import lzma
import os
import stat
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, cast

from kpdoctor.bundle.sniff import looks_binary

# Uncompressed, whole archive: every byte of the decompressed stream counts (headers, skipped
# entries, padding), since each one costs time, and every extracted byte goes to $TMPDIR, which
# is RAM on a node or debug Pod with /tmp on tmpfs. The largest real bundle is a 10,000-Service
# node: rule dumps of about 100 MB each (iptables v4 + v6, or IPVS/nft; the other backend's
# dumps are near empty), a conntrack list capped at 256 MiB by the collector, two 32 MiB log
# tails and some tens of MB of cluster objects: about 500-600 MB. 1 GiB leaves room for a
# hand-made bundle with a larger log, and is a quarter of what was allowed before (4 GiB).
MAX_TOTAL_BYTES = 1024**3
MAX_MEMBER_BYTES = MAX_TOTAL_BYTES  # one entry may use the whole budget (a full log, by hand)
MAX_MEMBERS = 20_000
# Folders an entry may be nested in (a folder entry counts itself). A bundle's deepest file is
# bundle/node/counters/T0/x (4 folders), a cluster-info dump's 3; Python's folder walkers (os.walk,
# shutil.rmtree, pathlib's mkdir(parents=True)) recurse once per level and fail near 1,000.
MAX_DEPTH = 64
# Measured (bench/README.md): a 10,000-Service iptables-save compresses 8:1 (gzip) to 13:1 (xz),
# cluster objects 28:1 (gzip) to 58:1 (bzip2), kube-proxy logs 9:1 to 20:1. Zeros deflate at
# 1,029:1 (xz and bzip2 far more). Only a bomb expands more than 100:1 over 100 MB of output;
# below 100 MB the total limit is enough.
MAX_RATIO = 100
RATIO_AFTER_BYTES = 100 * 1024**2

_CHUNK = 1 << 20  # member data is read and written in pieces of this size
_MAX_READ = 16 * 1024**2  # one read by tarfile: only a header (GNU long name, pax) reads in one go
_TAIL = 64 * 1024  # bytes kept for the short backward seeks tarfile makes
_HEAD = 64 * 1024  # what is_archive reads, at most, to decide
_BLOCK = tarfile.BLOCKSIZE
_TEXT_BOMS = (b"\xff\xfe", b"\xfe\xff")  # UTF-16/32 text has NUL bytes but is not binary
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)


class ArchiveError(Exception):
    """The archive cannot be used at all (one line, without the path: the caller adds it)."""


@dataclass(frozen=True)
class Limits:
    """What one archive may cost; tests and benchmarks scale these down."""

    total: int = MAX_TOTAL_BYTES  # decompressed stream bytes read, at most
    member: int = MAX_MEMBER_BYTES  # one entry's declared size
    members: int = MAX_MEMBERS
    ratio: int = MAX_RATIO  # decompressed : compressed, checked once ``ratio_after`` is passed
    ratio_after: int = RATIO_AFTER_BYTES


@dataclass
class Extracted:
    """What came out of an archive.

    ``refused``: entries not extracted by policy, or the point where a limit stopped reading
    (``"..."``), each with its one-line reason. ``damaged``: one-line messages saying the archive
    is damaged and what that cost (entries missing, or content that failed its checksum); the
    entries extracted before the damage are in ``root`` and usable.
    """

    root: Path
    refused: list[tuple[str, str]] = field(default_factory=list)  # (member name, reason)
    damaged: list[str] = field(default_factory=list)
    entries: int = 0  # tar entries read (extracted or refused)
    written: int = 0  # bytes written under root
    too_deep: set[PurePosixPath] = field(default_factory=set)  # folders refused for their depth


class _Damaged(Exception):
    """The compressed stream or the tar structure is damaged; ``why`` is short and one line."""

    def __init__(self, why: str, checksum: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.checksum = checksum  # a checksum/length mismatch: the content read may be corrupt


class _Stop(Exception):
    """A limit was reached: the rest of the archive is not read."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _size(n: int) -> str:
    if n >= 1024**3 and n % 1024**3 == 0:
        return f"{n // 1024**3} GiB"
    if n >= 1024**2:
        return f"{n / 1024**2:.0f} MiB"
    if n >= 1024:
        return f"{n / 1024:.0f} KiB"
    return f"{n} bytes"


def _shown(name: str, limit: int = 512) -> str:
    """A member name fit for a one-line message: control characters escaped, length capped."""
    if name.isprintable() and len(name) <= limit:
        return name
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return _shown(text[0], 120) if text else type(exc).__name__


def _why(exc: BaseException, kind: str) -> _Damaged:
    """Name a decompression error in a few words (no Python internals, no paths)."""
    text = str(exc)
    if isinstance(exc, EOFError):
        return _Damaged("cut short")
    if "CRC" in text or "check failed" in text:
        return _Damaged(f"{kind} checksum does not match", checksum=True)
    if "Incorrect length" in text:
        return _Damaged(f"{kind} length check does not match", checksum=True)
    if isinstance(exc, gzip.BadGzipFile) and "Not a gzipped file" in text:
        return _Damaged("data that is not gzip follows the compressed stream")
    if isinstance(exc, (zlib.error, lzma.LZMAError, gzip.BadGzipFile)) or "Invalid data stream" in text:
        return _Damaged(f"corrupt {kind} data")
    if isinstance(exc, OSError):
        return _Damaged(f"read error: {exc.strerror or type(exc).__name__}")
    return _Damaged(f"corrupt {kind} data ({_one_line(exc)})")


# Every error a decompressor raises on bad input (gzip.BadGzipFile and bz2's are OSErrors).
_DECOMPRESSION_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)
_OPENERS: dict[str, Callable[[IO[bytes]], IO[bytes]]] = {
    "gzip": lambda raw: cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb")),
    "bzip2": lambda raw: cast(IO[bytes], bz2.BZ2File(raw, "rb")),
    "xz": lambda raw: cast(IO[bytes], lzma.LZMAFile(raw, "rb")),  # noqa: SIM115 (closed by _Source.close)
}


class _Source:
    """The decompressed tar stream as tarfile reads it: forward only, every byte counted.

    Decompression errors become :class:`_Damaged`, limits :class:`_Stop`; neither is an
    ``OSError``, so an ``OSError`` in :func:`extract` is always about writing. Data past a limit
    is never returned, so it is never written.
    """

    def __init__(self, raw: IO[bytes], kind: str, limits: Limits) -> None:
        self._raw = raw
        self.kind = kind
        self._limits = limits
        self._z = _OPENERS[kind](raw) if kind in _OPENERS else raw
        self.pos = 0  # position in the decompressed stream
        self._end = 0  # the position up to which the stream has been read
        self.produced = 0  # bytes actually read (a skip in a plain tar is a seek, not a read)
        self._tail = b""  # the stream's last bytes before ``_end``

    def tell(self) -> int:
        return self.pos

    def close(self) -> None:
        if self._z is not self._raw:
            with contextlib.suppress(*_DECOMPRESSION_ERRORS):
                self._z.close()

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = _MAX_READ
        if n > _MAX_READ:
            raise _Stop(f"an entry header claims {_size(n)}: the rest ignored")
        out = b""
        if self.pos < self._end:  # again, after a backward seek
            start = len(self._tail) - (self._end - self.pos)
            out = self._tail[start : start + n]
            self.pos += len(out)
            n -= len(out)
        if n > 0:
            out += self._fresh(n)
        return out

    def _fresh(self, n: int) -> bytes:
        lim = self._limits
        n = min(n, lim.total - self.produced + 1)  # one byte past the limit shows it is passed
        try:
            data = self._z.read(n)
        except _DECOMPRESSION_ERRORS as exc:
            raise _why(exc, self.kind) from None
        self.produced += len(data)
        self.pos = self._end = self._end + len(data)
        self._tail = data[-_TAIL:] if len(data) >= _TAIL else (self._tail + data)[-_TAIL:]
        if self.produced > lim.total:
            raise _Stop(f"archive expands past {_size(lim.total)}: the rest ignored")
        if self.kind != "tar" and self.produced > lim.ratio_after:
            consumed = max(1, self._raw.tell())
            if self.produced > lim.ratio * consumed:
                raise _Stop(
                    f"archive expands more than {lim.ratio}:1 ({_size(self.produced)} from {_size(consumed)}: "
                    "a decompression bomb?): the rest ignored"
                )
        return data

    def seek(self, target: int, whence: int = 0) -> int:
        if whence == 1:
            target += self.pos
        elif whence != 0:
            raise _Damaged("the tar structure needs a seek from the end")
        if target < self.pos:
            if self._end - target > len(self._tail):
                raise _Damaged("the tar structure points backwards")
            self.pos = target
            return self.pos
        self.pos = min(target, self._end)  # forward within what was already read
        if target > self.pos and self.kind == "tar":
            self._raw.seek(target)  # a plain tar skips an entry without reading it
            self.pos = self._end = target
            self._tail = b""
        while self.pos < target:
            if not self._fresh(min(_CHUNK, target - self.pos)):
                break  # past the end: the next read says so
        return self.pos


def _open_regular(path: Path) -> IO[bytes]:
    """Open ``path`` for reading if it is a regular file: a FIFO or device is never read from.

    O_NONBLOCK makes opening a FIFO return at once (instead of waiting for a writer); it changes
    nothing for a regular file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ArchiveError("not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _is_tar_header(block: bytes) -> bool:
    if len(block) < _BLOCK:
        return False
    try:
        tarfile.TarInfo.frombuf(block[:_BLOCK], "utf-8", "surrogateescape")
    except (tarfile.HeaderError, ValueError, UnicodeError, OverflowError):
        return False
    return True


def _compression(head: bytes) -> str | None:
    return next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)


def _decompress_head(head: bytes, kind: str) -> bytes:
    """The first tar block of a compressed ``head``, decompressing no more than that."""
    d: zlib._Decompress | bz2.BZ2Decompressor | lzma.LZMADecompressor
    if kind == "gzip":
        d = zlib.decompressobj(wbits=31)
    elif kind == "bzip2":
        d = bz2.BZ2Decompressor()
    else:
        d = lzma.LZMADecompressor()
    try:
        return d.decompress(head, _BLOCK)
    except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError):
        return b""


def is_archive(path: Path) -> bool:
    """Whether ``path`` is a tar archive (maybe compressed), from its name or its first bytes.

    Only a regular file is ever opened (a FIFO would block, ``/dev/zero`` never ends), and at most
    64 KiB of it is read: a compressed file is an archive if the first 512 bytes it decompresses
    to are a valid tar header, so a gzipped log is not one.
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
    except (OSError, ValueError):
        return False
    if path.name.lower().endswith((".tar.gz", ".tgz", ".tar", ".tar.xz", ".txz", ".tar.bz2", ".tbz2")):
        return True
    try:
        with _open_regular(path) as fh:
            head = fh.read(_HEAD)
    except (OSError, ArchiveError):
        return False
    kind = _compression(head)
    return _is_tar_header(_decompress_head(head, kind) if kind else head)


def _safe_name(name: str) -> PurePosixPath | None:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts:
        return None
    parts = [x for x in p.parts if x not in (".", "")]
    if not parts:
        return None
    return PurePosixPath(*parts)


def _not_tar(head: bytes) -> str:
    """The one-line reason ``head`` does not start an archive kpdoctor reads."""
    if not head:
        return "empty file, not a tar archive"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd-compressed: not supported (recompress it with gzip)"
    if head.startswith(b"PK\x03\x04"):
        return "a zip file, not a tar archive"
    return "not a tar archive (not gzip, bzip2, xz or tar data)"


TOO_DEEP = f"nested more than {MAX_DEPTH} folders deep (nothing below it is read)"  # also the folder walk's


def _mkdirs(path: Path) -> None:
    """``path.mkdir(parents=True, exist_ok=True)`` one level at a time (pathlib recurses once per
    missing level); raises ``OSError`` as ``os.mkdir`` does (``ENAMETOOLONG``, ``ENOTDIR``...)."""
    missing: list[Path] = []
    here = path
    while not here.is_dir():
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    for p in reversed(missing):
        try:
            os.mkdir(p)
        except FileExistsError:
            if not p.is_dir():
                raise


def _write_reason(exc: OSError) -> str:
    if exc.errno == errno.ENAMETOOLONG:
        return "name too long to extract"
    if exc.errno in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        return "conflicts with an earlier entry (a file and a folder of the same name)"
    return f"cannot be extracted ({exc.strerror or type(exc).__name__})"


def extract(archive: Path, dest: Path, limits: Limits | None = None) -> Extracted:
    """Extract ``archive`` into ``dest`` (an empty directory), refusing anything unsafe.

    Raises only :class:`ArchiveError`, when nothing can be used (not a tar archive, not a
    regular file, unreadable, damaged before its first entry). Everything else is in the result:
    refusals, damage, and the entries extracted before either.
    """
    lim = limits or Limits()
    try:
        raw = _open_regular(archive)
    except PermissionError:
        raise ArchiveError("permission denied") from None
    except OSError as exc:
        raise ArchiveError(f"cannot read: {exc.strerror or type(exc).__name__}") from None
    with raw:
        try:
            head = raw.read(_BLOCK)
            raw.seek(0)
        except OSError as exc:
            raise ArchiveError(f"cannot read: {exc.strerror or type(exc).__name__}") from None
        kind = _compression(head) or ("tar" if _is_tar_header(head) else None)
        if kind is None:
            raise ArchiveError(_not_tar(head))
        src = _Source(raw, kind, lim)
        try:
            return _extract(src, dest, lim)
        finally:
            src.close()


def _extract(src: _Source, dest: Path, lim: Limits) -> Extracted:
    out = Extracted(dest)
    try:
        # Not tarfile.open: it would probe every compression itself and read past our limits.
        tf = tarfile.TarFile(fileobj=cast(IO[bytes], src), mode="r")
    except _Damaged as d:
        raise ArchiveError(f"archive damaged before its first entry ({d.why})") from None
    except _Stop as s:
        raise ArchiveError(s.reason) from None
    except Exception:  # tarfile parsing a stranger's bytes: any error means "not a tar header"
        raise ArchiveError(_first_header_bad(src)) from None
    root = os.path.realpath(dest) + os.sep
    while True:
        try:
            # tarfile.next() parses headers from a stranger: whatever it raises means the header
            # is unreadable (ReadError, but also ValueError/UnicodeError on odd pax records).
            member = tf.next()
        except _Stop as s:
            out.refused.append(("...", s.reason))
            return out
        except _Damaged as d:
            out.damaged.append(f"archive damaged after {out.entries} entries ({d.why}): the rest is missing")
            return out
        except Exception as exc:
            out.damaged.append(f"archive damaged after {out.entries} entries ({_one_line(exc)}): the rest is missing")
            return out
        if member is None:
            break
        out.entries += 1
        if out.entries > lim.members:
            out.entries -= 1
            out.refused.append(("...", f"more than {lim.members} entries: the rest ignored"))
            return out
        try:
            _member(tf, member, dest, root, src, lim, out)
        except _Stop as s:  # named after the entry it stopped in (removed: it is incomplete)
            out.refused.append((_shown(member.name), s.reason))
            return out
        except _Damaged as d:
            out.damaged.append(_member_damaged(member, d.why, out.entries))
            return out
        except tarfile.TarError as exc:  # "unexpected end of data": a plain tar cut short
            out.damaged.append(_member_damaged(member, _one_line(exc), out.entries))
            return out
    _check_rest(src, tf.offset, out)
    return out


def _first_header_bad(src: _Source) -> str:
    """Why the first tar header is unreadable: damage, if the compressed stream fails its checks
    further on (decompressors hand out data before checking it), else not a tar archive."""
    if src.kind == "tar":
        return "archive damaged before its first entry (a bad entry header)"
    try:
        while src.read(_CHUNK):
            pass
    except _Damaged as d:
        return f"archive damaged before its first entry ({d.why})"
    except _Stop:
        pass
    return f"{src.kind} data, but not a tar archive inside"


def _member_damaged(member: tarfile.TarInfo, why: str, entries: int) -> str:
    return (f"member {_shown(member.name)} is damaged ({why}): it and the rest of the archive are missing "
            f"({entries - 1} entries read before it)")


def _member(tf: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, root: str, src: _Source,
            lim: Limits, out: Extracted) -> None:
    """Extract one entry, or refuse it with a reason; only damage and limits raise."""
    name = _shown(member.name)
    if "\0" in member.name:  # a pax path may hold one; no file system takes it
        out.refused.append((name, "name holds a NUL byte"))
        return
    rel = _safe_name(member.name)
    if rel is None:
        out.refused.append((name, "path leaves the bundle (absolute or '..')"))
        return
    if member.issym() or member.islnk():
        out.refused.append((name, "link entries are not extracted"))
        return
    depth = len(rel.parts) - (0 if member.isdir() else 1)  # folders the entry is in (is, for a folder)
    if depth > MAX_DEPTH:
        top = PurePosixPath(*rel.parts[:MAX_DEPTH + 1])  # the first folder too deep
        if top not in out.too_deep:  # one line for it, however many entries it holds
            out.too_deep.add(top)
            out.refused.append((_shown(str(top)), TOO_DEEP))
        return
    if member.isdir():
        try:
            _mkdirs(dest / rel)
        except OSError as exc:
            out.refused.append((name, _write_reason(exc)))
        return
    if member.issparse():
        out.refused.append((name, "sparse entries are not extracted"))  # its holes cost no input
        return
    if not member.isfile():
        out.refused.append((name, "not a regular file"))
        return
    if member.size < 0:  # base-256 or pax sizes can be negative; tarfile then seeks backwards
        raise _Damaged("its header gives a negative size")
    if member.size > lim.member:
        out.refused.append((name, f"larger than {lim.member // 1024**2} MiB"))
        return
    if src.produced + member.size > lim.total:
        raise _Stop(f"archive expands past {_size(lim.total)}: the rest ignored")
    target = dest / rel
    try:
        _mkdirs(target.parent)
    except OSError as exc:
        out.refused.append((name, _write_reason(exc)))
        return
    if not os.path.realpath(target).startswith(root):
        out.refused.append((name, "path leaves the bundle"))
        return
    data = tf.extractfile(member)
    if data is None:
        out.refused.append((name, "unreadable entry"))
        return
    with data:
        first = data.read(min(member.size, _CHUNK))
        if looks_binary(first) and not first.startswith(_TEXT_BOMS):
            out.refused.append((name, "binary data, not text evidence: skipped"))
            return  # the rest of it is skipped by tarfile, counted against the limits, unwritten
        created = False
        try:
            with open(target, "wb") as fh:
                created = True
                chunk, remaining = first, member.size
                while chunk:
                    fh.write(chunk)
                    out.written += len(chunk)
                    remaining -= len(chunk)
                    chunk = data.read(min(_CHUNK, remaining)) if remaining > 0 else b""
        except OSError as exc:  # writing: reading raises _Damaged or tarfile errors, not OSError
            if created:
                target.unlink(missing_ok=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _Stop("no space left to extract the archive: the rest ignored") from None
            out.refused.append((name, _write_reason(exc)))
        except BaseException:
            target.unlink(missing_ok=True)  # a half-read entry is not evidence
            raise


def _check_rest(src: _Source, offset: int, out: Extracted) -> None:
    """Read the stream from where tarfile stopped to its end, and say what that shows.

    tarfile ends at the first all-zero block (the end-of-archive marker), but also, silently, at
    a bad header after the first entry. Only zeros may follow a real end. Reading to the end
    also makes the decompressor check its checksums (gzip's CRC and length are at the very end).
    """
    seen = 0
    data_at: int | None = None  # offset of the first non-zero byte from ``offset``
    failed: _Damaged | None = None
    try:
        src.seek(offset)
        while chunk := src.read(_CHUNK):
            if data_at is None:
                rest = chunk.lstrip(b"\0")
                if rest:
                    data_at = seen + len(chunk) - len(rest)
            seen += len(chunk)
    except _Stop as s:
        out.refused.append(("...", s.reason))
        return
    except _Damaged as d:
        failed = d
    n = out.entries
    if data_at is not None and data_at < _BLOCK:
        what = "cut short" if seen < _BLOCK else "a bad entry header"
        out.damaged.append(f"archive damaged after {n} entries ({what}): the rest ({_size(seen)}) is missing")
    elif data_at is not None:
        out.damaged.append(f"archive has data after its end-of-archive marker, not read ({n} entries read)")
    elif seen == 0 and n and failed is None:
        out.damaged.append(f"archive ends after {n} entries without its end-of-archive marker: it may be cut short")
    if failed is not None and failed.checksum:
        out.damaged.append(f"archive fails its integrity check ({failed.why}): some of its {n} entries may be corrupt")
    elif failed is not None:
        out.damaged.append(f"archive damaged after its {n} entries ({failed.why}): they could not be verified")


