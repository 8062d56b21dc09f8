"""`-o FILE` in a folder other users can write: a planted link is replaced, never written through.

kpdoctor runs as root; `/tmp` is everyone's. The attack: a local user plants
`/tmp/report.json -> /etc/some-root-file` and waits for root's `kpdoctor diagnose -o
/tmp/report.json`. Reports and bundles are created under a fresh name and renamed into place
(kpdoctor/outfile.py); only root's or the user's own link to a stream (/dev/stdout) is written
through (docs/security.md, "Writing reports and bundles").
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from fuzz_hostile import fake_root

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "src/kpdoctor/demo/bundles/xtables-lock-contention"
NOBODY = 65534


def kpdoctor(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH") or str(REPO / "src"), NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "kpdoctor", *args], capture_output=True, env=env, cwd=cwd,
                          timeout=timeout, check=False)  # fmt: skip


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A folder like /tmp: everyone may write, the sticky bit set."""
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o1777)
    return d


def plant_link(at: Path, target: Path | str, owner: int = NOBODY) -> None:
    at.symlink_to(target)
    os.lchown(at, owner, owner)


@pytest.mark.parametrize("fmt", ["json", "text", "markdown", "sarif", "html"])
@pytest.mark.parametrize("victim_exists", [True, False])
@pytest.mark.parametrize("relative", [False, True])
def test_a_report_never_goes_through_a_planted_link(
    tmp_path: Path, shared: Path, fmt: str, victim_exists: bool, relative: bool
) -> None:
    victim = tmp_path / "etc" / "cron.d-job"
    victim.parent.mkdir()
    if victim_exists:
        victim.write_text("root's own file\n")
    out = shared / "report.out"
    plant_link(out, os.path.relpath(victim, shared) if relative else victim)
    res = kpdoctor("diagnose", "-f", fmt, "-o", str(out), str(DEMO))
    assert res.returncode in (0, 1), res.stderr
    assert (victim.read_text() == "root's own file\n") if victim_exists else not victim.exists()
    st = os.lstat(out)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_size > 100
    if fmt == "json":
        assert json.loads(out.read_bytes())["schema"] == "kpdoctor.report/v1"
    assert sorted(p.name for p in shared.iterdir()) == ["report.out"]  # no partial file left


@pytest.mark.parametrize("owner", [0, NOBODY])
def test_a_stream_is_written_only_when_its_link_is_roots_or_ours(tmp_path: Path, shared: Path, owner: int) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = shared / "report.json"
    plant_link(out, fifo, owner)
    if owner == NOBODY:  # another user's link to a FIFO: replaced (writing through it would block)
        res = kpdoctor("diagnose", "-f", "json", "-o", str(out), str(DEMO), timeout=60)
        assert res.returncode in (0, 1) and stat.S_ISREG(os.lstat(out).st_mode)
        return
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    res = kpdoctor("diagnose", "-f", "json", "-o", str(out), str(DEMO), timeout=60)
    got, _ = reader.communicate(timeout=30)
    assert res.returncode in (0, 1) and json.loads(got)["schema"] == "kpdoctor.report/v1"
    assert os.path.islink(out)


def link_identity(path: str) -> tuple[int, int, int, int, str]:
    """What a write through the link would change: its inode, mode, change time and target (not its
    access time, which anything that follows the link may update)."""
    st = os.lstat(path)
    return st.st_dev, st.st_ino, st.st_mode, st.st_ctime_ns, os.readlink(path)


@pytest.mark.parametrize("dest", ["/dev/stdout", "/dev/null", "/proc/self/fd/1"])
@pytest.mark.parametrize("stdout_is", ["pipe", "file"])
def test_device_names_are_written_as_streams(tmp_path: Path, dest: str, stdout_is: str) -> None:
    """`-o /dev/stdout > out.json`: the report lands in out.json, and /dev keeps its links."""
    before = link_identity("/dev/stdout")
    out = tmp_path / "out.json"
    with open(out, "wb") as fh:
        env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH") or str(REPO / "src"))
        res = subprocess.run([sys.executable, "-m", "kpdoctor", "diagnose", "-f", "json", "-o", dest, str(DEMO)],
                             stdout=fh if stdout_is == "file" else subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             timeout=120, check=False)  # fmt: skip
    assert res.returncode in (0, 1), res.stderr
    assert link_identity("/dev/stdout") == before and os.path.islink("/dev/stdout")
    got = out.read_bytes() if stdout_is == "file" else res.stdout
    if dest != "/dev/null":
        assert json.loads(got)["schema"] == "kpdoctor.report/v1"
    else:
        assert not got.strip()


def test_our_own_link_is_followed(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "report.json").symlink_to("reports/r.json")
    res = kpdoctor("diagnose", "-f", "json", "-o", str(tmp_path / "report.json"), str(DEMO))
    assert res.returncode in (0, 1), res.stderr
    assert os.path.islink(tmp_path / "report.json")
    assert json.loads((tmp_path / "reports/r.json").read_bytes())["schema"] == "kpdoctor.report/v1"


@pytest.mark.parametrize("form", ["tar.gz", "folder"])
def test_a_bundle_never_goes_through_a_planted_link(tmp_path: Path, shared: Path, form: str) -> None:
    root = fake_root(tmp_path / "root")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("keep\n")
    target = victim / "keep" if form == "tar.gz" else victim
    out = shared / ("b.tar.gz" if form == "tar.gz" else "bundle")
    if form == "folder":
        (victim / "keep").unlink()  # an empty folder, as -o DIR accepts
    plant_link(out, target)
    res = kpdoctor("collect", "--host-root", str(root), "--no-cluster", "--timeout", "10", "--interval", "1",
                   "-o", str(out))  # fmt: skip
    if form == "tar.gz":
        assert res.returncode == 0, res.stderr
        assert (victim / "keep").read_text() == "keep\n"
        st = os.lstat(out)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    else:  # a folder given through another user's link is refused, nothing written into its target
        assert res.returncode == 2 and b"cannot write" in res.stderr
        assert list(victim.iterdir()) == []
    assert not [p for p in shared.iterdir() if p.name.endswith(".partial")]


def test_a_new_folder_bundle_is_private(tmp_path: Path) -> None:
    root = fake_root(tmp_path / "root")
    out = tmp_path / "bundle"
    res = kpdoctor("collect", "--host-root", str(root), "--no-cluster", "--timeout", "10", "--interval", "1",
                   "-o", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) in (0o600, 0o700) for p in out.rglob("*"))
    assert (out / "manifest.json").is_file()
