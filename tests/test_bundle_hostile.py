"""Hostile bundle archives are refused safely: nothing lands outside the extraction folder, no
link, device or FIFO is created, size and entry-count bombs stop early, and what is usable in the
archive is still diagnosed."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from kpdoctor.bundle.archive import MAX_MEMBER_BYTES, MAX_MEMBERS, extract
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
    report, ev = diagnose_paths([cut])
    assert any("truncated or corrupt" in p.message for p in ev.problems)
    assert report.visible()[0].cause == "iptables-backend-mismatch"
