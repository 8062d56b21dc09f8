"""Hostile bundle archives are refused safely: nothing lands outside the extraction folder, no
link, device or FIFO is created, size and entry-count bombs stop early, and what is usable in the
archive is still diagnosed."""

from __future__ import annotations

import errno
import gzip
import io
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from fuzzing import gzip_bomb

from kpdoctor.bundle import archive
from kpdoctor.bundle.archive import (
    MAX_MEMBER_BYTES,
    MAX_MEMBERS,
    ArchiveError,
    Extracted,
    Limits,
    extract,
    is_archive,
)
from kpdoctor.diagnose import diagnose_paths

MISMATCH = (
    "E0308 10:00:00.000000       1 proxier.go:1525] Failed to execute iptables-restore: exit status 2 "
    "(iptables-restore v1.8.7 (legacy): Couldn't load target `KUBE-MARK-DROP':No such file or directory\n"
)
MANIFEST = b'{"node": "node3", "artifacts": []}'


def _file(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def _special(tf: tarfile.TarFile, name: str, kind: bytes, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    tf.addfile(info)


def test_every_kind_of_hostile_entry_is_refused(tmp_path: Path) -> None:
    tgz = tmp_path / "evil.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        _file(tf, "b/manifest.json", MANIFEST)
        _file(tf, "b/kube-proxy/log.txt", MISMATCH.encode())
        _file(tf, "/etc/kpd-absolute", b"x")
        _file(tf, "b/../../kpd-escape", b"x")
        _special(tf, "b/node", tarfile.SYMTYPE, "/etc")  # a folder that is a link out ...
        _file(tf, "b/node/kpd-through-link", b"x")  # ... and a file written through it
        _special(tf, "b/hard", tarfile.LNKTYPE, "/etc/passwd")
        _special(tf, "b/dev", tarfile.CHRTYPE)
        _special(tf, "b/blk", tarfile.BLKTYPE)
        _special(tf, "b/fifo", tarfile.FIFOTYPE)
    out = tmp_path / "x"
    out.mkdir()
    got = extract(tgz, out)
    reasons = dict(got.refused)
    assert "path leaves the bundle" in reasons["/etc/kpd-absolute"]
    assert "path leaves the bundle" in reasons["b/../../kpd-escape"]
    assert "link" in reasons["b/node"] and "link" in reasons["b/hard"]
    assert all("not a regular file" in reasons[n] for n in ("b/dev", "b/blk", "b/fifo"))
    assert not Path("/etc/kpd-absolute").exists() and not (tmp_path.parent / "kpd-escape").exists()
    assert not Path("/etc/kpd-through-link").exists()
    created = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    assert all(not (out / p).is_symlink() for p in created)
    assert set(created) <= {"b", "b/manifest.json", "b/kube-proxy", "b/kube-proxy/log.txt", "b/node",
                            "b/node/kpd-through-link"}
    report, ev = diagnose_paths([tgz])
    assert report.visible()[0].cause == "iptables-backend-mismatch"
    assert sum("refused" in p.message for p in ev.problems) >= 7


def test_a_member_claiming_a_huge_size_is_refused_unread(tmp_path: Path) -> None:
    tar = tmp_path / "bomb.tar"
    info = tarfile.TarInfo("b/node/iptables-legacy-save.txt")
    info.size = MAX_MEMBER_BYTES + 1
    with open(tar, "wb") as fh:
        fh.write(info.tobuf())  # the header alone: the data would be 2 GiB
    out = tmp_path / "x"
    out.mkdir()
    got = extract(tar, out)
    assert any("larger than" in r for _, r in got.refused)
    assert not (out / "b/node/iptables-legacy-save.txt").exists()


def test_millions_of_tiny_entries_stop_at_the_limit(tmp_path: Path) -> None:
    tgz = tmp_path / "many.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        for i in range(MAX_MEMBERS + 5):
            _file(tf, f"b/f{i}", b"")
    out = tmp_path / "x"
    out.mkdir()
    got = extract(tgz, out)
    assert any(f"more than {MAX_MEMBERS} entries" in r for _, r in got.refused)
    assert sum(1 for _ in (out / "b").iterdir()) == MAX_MEMBERS


def test_a_truncated_archive_keeps_what_came_before(tmp_path: Path) -> None:
    good = tmp_path / "good.tar.gz"
    with tarfile.open(good, "w:gz") as tf:
        _file(tf, "b/manifest.json", MANIFEST)
        _file(tf, "b/kube-proxy/log.txt", MISMATCH.encode())
        _file(tf, "b/node/big.txt", b"x" * 200_000)
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[:-40])
    out = tmp_path / "x"
    out.mkdir()
    got = extract(cut, out)
    assert got.damaged == ["member b/node/big.txt is damaged (cut short): it and the rest of the archive are missing "
                           "(2 entries read before it)"]
    assert sorted(_files(out)) == ["b/kube-proxy/log.txt", "b/manifest.json"]
    report, ev = diagnose_paths([cut])
    assert any(p.message == got.damaged[0] for p in ev.problems)
    assert report.visible()[0].cause == "iptables-backend-mismatch"


# -- Damage, bombs, unwritable entries and one-line errors (robustness-defects.md D3, D6, D9, D11,
#    D12, D22). Each test fails on the archive reader these defects were found in.

DEMO = Path(__file__).resolve().parents[1] / "src/kpdoctor/demo/bundles"


def _tgz(src: Path, arcname: str = "b") -> bytes:
    """A deterministic tar.gz of a folder (no times, owners): the same bytes on every machine."""

    def plain(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "", ""
        return ti

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tf:
        tf.add(src, arcname=arcname, filter=plain)
    return gzip.compress(raw.getvalue(), mtime=0)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _extract(tmp: Path, data: bytes, name: str = "in.tar.gz", limits: Limits | None = None) -> Extracted:
    src = tmp / name
    src.write_bytes(data)
    out = tmp / ("x-" + name)
    out.mkdir()
    return extract(src, out, limits)


def test_one_bit_flips_are_read_intact_or_reported_damaged(tmp_path: Path) -> None:
    """D3, scaled: of 120 one-bit flips of the kernel-mark-regression tarball, 17 lost KP114 with
    no input problem. Now every flip reads the very same files, or says the archive is damaged."""
    good = _tgz(DEMO / "kernel-mark-regression")
    want = _files(_extract(tmp_path, good, "good.tar.gz").root)
    assert len(want) == 9
    rng = random.Random(3)
    outcomes = []
    for i in range(40):
        flipped = bytearray(good)
        flipped[rng.randrange(len(good))] ^= 1 << rng.randrange(8)
        try:
            got = _extract(tmp_path, bytes(flipped), f"flip{i}.tar.gz")
        except ArchiveError as exc:
            outcomes.append("unusable")
            assert "\n" not in str(exc)
            continue
        if got.damaged:
            outcomes.append("damaged")
            assert all("damaged" in m or "integrity" in m for m in got.damaged)
        else:
            assert _files(got.root) == want and not got.refused, f"flip {i}: silently different"
            outcomes.append("intact")
    assert outcomes.count("damaged") >= 20  # almost every flip: the gzip CRC covers the whole stream


def _tar(*members: tuple[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members:
            _file(tf, name, data)
    return raw.getvalue()


def test_a_bad_header_after_the_first_entry_is_damage_not_the_end(tmp_path: Path) -> None:
    """D3: tarfile takes a bad header after the first entry for the end of the archive. The gzip
    stream here is intact (its CRC is right), only the second tar header is broken."""
    tar = bytearray(_tar(("b/manifest.json", MANIFEST), ("b/kube-proxy/log.txt", MISMATCH.encode()),
                         ("b/node/uname.txt", b"Linux n 5.15.0 #1 SMP x86_64\n")))
    second = 1024  # manifest.json: its header, then one block of data
    tar[second + 10] ^= 0x20  # a letter of the name: the header checksum no longer matches
    got = _extract(tmp_path, gzip.compress(bytes(tar)))
    assert _files(got.root) == {"b/manifest.json": MANIFEST}
    assert got.damaged == [got.damaged[0]] and "after 1 entries" in got.damaged[0]
    assert "the rest" in got.damaged[0] and "missing" in got.damaged[0]


def test_a_checksum_mismatch_is_reported_even_when_every_entry_reads(tmp_path: Path) -> None:
    """D3: a flipped bit in the gzip CRC: every entry reads, but the archive cannot be trusted."""
    good = bytearray(_tgz(DEMO / "kernel-mark-regression"))
    good[-6] ^= 0x01  # in the CRC-32 of the trailer
    got = _extract(tmp_path, bytes(good))
    assert len(_files(got.root)) == 9
    assert any("checksum does not match" in m for m in got.damaged), got.damaged


def _zlib_error_flip(good: bytes) -> bytes:
    """The first one-byte change, after the first entry, that makes inflate itself fail (D6)."""
    for pos in range(len(good) // 3, len(good) - 8):
        bad = bytearray(good)
        bad[pos] ^= 0xFF
        try:
            gzip.decompress(bytes(bad))  # a CRC mismatch is gzip.BadGzipFile, not zlib.error
        except zlib.error:
            return bytes(bad)
        except (OSError, EOFError):
            pass
    raise AssertionError("no flip breaks inflate")


def _hostile_archives(tmp: Path) -> list[Path]:
    made = {
        "zlib.tar.gz": _zlib_error_flip(_tgz(DEMO / "kernel-mark-regression")),
        "cut.tar.gz": _tgz(DEMO / "kernel-mark-regression")[:-700],
        "hello.tar.gz": b"hello\n",
        "log.tar.gz": gzip.compress(MISMATCH.encode() * 100),
    }
    paths = []
    for name, data in made.items():
        (tmp / name).write_bytes(data)
        paths.append(tmp / name)
    return paths


def test_corrupt_deflate_data_is_damage_and_no_temp_dir_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """D6: zlib.error escaped as an internal error, and the extraction folder stayed in $TMPDIR."""
    private = tmp_path / "tmpdir"
    private.mkdir()
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr(tempfile, "tempdir", None)  # the loader's mkdtemp reads TMPDIR again
    inputs = _hostile_archives(tmp_path)
    bad = _extract(tmp_path, inputs[0].read_bytes())
    assert bad.damaged and "corrupt gzip data" in " ".join(bad.damaged)
    _, ev = diagnose_paths(inputs)
    assert {p.source for p in ev.problems} >= {str(p) for p in inputs}
    assert list(private.iterdir()) == []
    done = subprocess.run([sys.executable, "-m", "kpdoctor", "diagnose", *map(str, inputs)],
                          capture_output=True, text=True, env={**os.environ, "TMPDIR": str(private)}, timeout=120)
    assert done.returncode != 4 and "internal error" not in done.stdout + done.stderr
    assert list(private.iterdir()) == []


def test_one_entry_that_cannot_be_written_does_not_discard_the_rest(tmp_path: Path) -> None:
    """D11: a name too long for the file system (first), and a file where a folder is needed, are
    refused one by one; the bundle after them is still extracted and diagnosed."""
    tgz = tmp_path / "longname.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        _file(tf, "b/" + "x" * 300 + "/y.txt", b"x\n")
        _file(tf, "b/node", b"a file, where a folder comes next\n")
        _file(tf, "b/node/uname.txt", b"Linux n 5.15.0 #1 SMP x86_64\n")
        tf.add(DEMO / "config-ignores-hostname", arcname="b")
    out = tmp_path / "x"
    out.mkdir()
    got = extract(tgz, out)
    reasons = dict(got.refused)
    assert reasons["b/" + "x" * 300 + "/y.txt"] == "name too long to extract"
    assert "conflicts with an earlier entry" in reasons["b/node/uname.txt"]
    assert all("\n" not in r and str(out) not in r and "Errno" not in r for r in reasons.values())
    assert not got.damaged
    assert _files(out)["b/manifest.json"] == (DEMO / "config-ignores-hostname/manifest.json").read_bytes()
    report, ev = diagnose_paths([tgz])
    assert report.visible()[0].cause == "config-overrides-flags"
    assert not any(str(tempfile.gettempdir()) + "/kpdoctor-" in p.message for p in ev.problems)


def test_a_full_disk_stops_extraction_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """D11: running out of space is not "one bad entry": nothing after it could be written either."""

    def full(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOSPC, "No space left on device", str(args[0]))

    monkeypatch.setattr(archive, "open", full, raising=False)  # found before the builtin
    got = _extract(tmp_path, _tgz(DEMO / "kernel-mark-regression"))
    assert got.refused == [("b/cluster/nodes.json", "no space left to extract the archive: the rest ignored")]
    assert got.written == 0


@pytest.mark.parametrize(
    ("cut", "message"),
    [
        (5 * 512, "archive ends after 2 entries without its end-of-archive marker: it may be cut short"),
        (5 * 512 + 100, "archive damaged after 2 entries (cut short): the rest (100 bytes) is missing"),
        (3 * 512 + 10, "member b/node/uname.txt is damaged (unexpected end of data): it and the rest of the archive "
                       "are missing (1 entries read before it)"),
    ],
)
def test_a_plain_tar_cut_anywhere_says_what_is_missing(tmp_path: Path, cut: int, message: str) -> None:
    """D3 for an uncompressed tar, which has no checksum over its data: where it ends is checked."""
    tar = _tar(("b/manifest.json", MANIFEST), ("b/node/uname.txt", b"Linux n 5.15.0 #1 SMP x86_64\n" * 30),
               ("b/node/hostname", b"n\n"))  # headers at 0, 1024 and 2560
    got = _extract(tmp_path, tar[:cut], "cut.tar")
    assert got.damaged == [message]
    assert sorted(_files(got.root)) == ["b/manifest.json", "b/node/uname.txt"][: 1 + (cut >= 2560)]


SMALL = Limits(total=256 << 20, member=64 << 20, ratio_after=16 << 20)  # D12's limits, scaled down


@pytest.mark.parametrize(
    ("members", "size", "fill", "refused_as"),
    [
        (3, 128 << 20, b"\0", "larger than 64 MiB"),  # D12's shape: few huge members, refused unread
        (12, 32 << 20, b"\0", "binary data"),  # under the member limit: zeros are not text, not written
        (12, 32 << 20, b"a", None),  # text: written until the ratio limit stops it
    ],
)
def test_a_gzip_bomb_is_refused_in_seconds_writing_at_most_the_limit(
    tmp_path: Path, members: int, size: int, fill: bytes, refused_as: str | None
) -> None:
    """D12: a 6 MB bomb wrote 3.8 GB to $TMPDIR in minutes. A bomb is now refused once it has
    expanded more than 100:1 past ``ratio_after``, and what it writes stays under that."""
    bomb = tmp_path / "bomb.tar.gz"
    gzip_bomb(bomb, members, size, fill, top="b")
    assert bomb.stat().st_size < 2 << 20
    out = tmp_path / "x"
    out.mkdir()
    t0 = time.monotonic()
    got = extract(bomb, out, SMALL)
    assert time.monotonic() - t0 < 10
    reasons = [r for _, r in got.refused]
    assert any("expands more than 100:1" in r for r in reasons), reasons
    if refused_as:
        assert any(refused_as in r for r in reasons)
    assert got.written <= SMALL.ratio_after and (got.written == 0) == (fill == b"\0")
    assert _files(out) == {}  # the one entry cut short by the limit is removed: not evidence


def test_the_limits_let_a_real_bundle_through_and_stop_a_big_one(tmp_path: Path) -> None:
    """Ordinary text compresses far below 100:1: a large bundle passes the ratio limit; the total
    limit stops a plain (uncompressed) tar, which has no ratio, writing no more than the total."""
    rng = random.Random(5)
    words = [f"KUBE-SEP-{rng.getrandbits(64):016X}" for _ in range(5000)]
    text = "\n".join(f"-A {rng.choice(words)} -p tcp -m tcp -j DNAT --to-destination 10.{i % 250}.{i % 7}.1:80"
                     for i in range(120_000)).encode()
    got = _extract(tmp_path, gzip.compress(_tar(("b/node/iptables-legacy-save.txt", text))),
                   limits=Limits(ratio_after=1 << 20))
    assert not got.refused and not got.damaged and got.written == len(text)
    plain = _tar(*((f"b/f{i}.txt", text[:1 << 20]) for i in range(8)))
    got = _extract(tmp_path, plain, "big.tar", Limits(total=3 << 20))
    assert any("expands past 3 MiB" in r for _, r in got.refused)
    assert got.written <= 3 << 20 and len(_files(got.root)) == 2


def test_not_an_archive_is_one_line(tmp_path: Path) -> None:
    """D22: tarfile's error listed every method it tried, on five lines."""
    hello = tmp_path / "x.tar.gz"
    hello.write_bytes(b"hello\n")
    with pytest.raises(ArchiveError) as err:
        extract(hello, tmp_path)
    assert str(err.value) == "not a tar archive (not gzip, bzip2, xz or tar data)"
    (tmp_path / "log.tgz").write_bytes(gzip.compress(MISMATCH.encode()))
    with pytest.raises(ArchiveError, match=r"^gzip data, but not a tar archive inside$"):
        extract(tmp_path / "log.tgz", tmp_path)
    _, ev = diagnose_paths([hello])
    assert [p.message for p in ev.problems] == ["not a tar archive (not gzip, bzip2, xz or tar data)"]


def _within(seconds: float, fn: Callable[[], object]) -> list[object]:
    """``fn()``'s result, or nothing if it did not return in time (it blocked)."""
    box: list[object] = []
    t = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    return box


def test_is_archive_opens_only_regular_files_and_reads_a_bounded_head(tmp_path: Path) -> None:
    """D9: is_archive called tarfile.is_tarfile on any path: it blocked on a FIFO and read
    /dev/zero without end (and took a file of zeros for an empty archive)."""
    fifo = tmp_path / "evil.tar.gz"
    os.mkfifo(fifo)
    assert _within(5, lambda: is_archive(fifo)) == [False]
    assert _within(5, lambda: is_archive(Path("/dev/zero"))) == [False]

    def extract_fifo() -> str:
        with pytest.raises(ArchiveError) as err:
            extract(fifo, tmp_path)
        return str(err.value)

    assert _within(5, extract_fifo) == ["not a regular file"]
    zeros = tmp_path / "zeros"
    with open(zeros, "wb") as fh:
        fh.truncate(1 << 30)  # 1 GiB, sparse: reading it all would take seconds
    t0 = time.monotonic()
    assert is_archive(zeros) is False
    assert time.monotonic() - t0 < 1
    unnamed = tmp_path / "bundle"
    unnamed.write_bytes(_tgz(DEMO / "kernel-mark-regression"))
    assert is_archive(unnamed)
    (tmp_path / "kp.log.gz").write_bytes(gzip.compress(MISMATCH.encode()))
    assert not is_archive(tmp_path / "kp.log.gz")
