"""What sits at a path the collector reads is not always a file: a damaged or hostile node root.

After a runtime change kube-proxy's Pod log is a link to a removed container's log; a user (or a
bug) can leave a FIFO, a device, a socket or a link out of the node's root where the collector
reads. Each is one artifact listed as not collected, with why; the run still ends in time with a
bundle, and nothing outside the node's root is read (docs/security.md, "Files on the node").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from fuzz_hostile import LOG_DIR, bundle_bytes, fake_root, plant

REPO = Path(__file__).resolve().parents[1]
KINDS = {  # what is planted -> what the reason says
    "fifo": "is a FIFO: not read",
    "dangling-link": "which does not exist",
    "link-loop": "loop of links",
    "char-device": "is a character device: not read",
    "socket": "is a socket: not read",
    "directory": "is a directory: not read",
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return fake_root(tmp_path / "root")


# -- the whole collector, as a user runs it ------------------------------------------------------


def _collect(root: Path, tmp: Path, *extra: str, timeout: float = 10) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp / "b.tar.gz"
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=os.environ.get("PYTHONPATH") or str(REPO / "src"))
    argv = [sys.executable, "-m", "kpdoctor", "collect", "--host-root", str(root), "--no-cluster",
            "--timeout", str(timeout), "--interval", "1", "-o", str(out), *extra]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout + 30, check=False)
    return proc, out


def _not_collected(bundle: Path) -> dict[str, str]:
    with tarfile.open(bundle) as tf:
        member = next(m for m in tf if m.name.endswith("/manifest.json"))
        fh = tf.extractfile(member)
        assert fh is not None
        manifest = json.load(fh)
    return {e["path"]: e["reason"] for e in manifest["not_collected"]}


@pytest.mark.parametrize(
    ("kind", "inside", "artifact"),
    [
        ("dangling-link", f"{LOG_DIR}/0.log", "kube-proxy/log.txt"),
        ("fifo", f"{LOG_DIR}/0.log", "kube-proxy/log.txt"),
        ("char-device", "proc/modules", "node/modules.txt"),
        ("socket", "proc/locks", "node/locks.txt"),
        ("fifo", "proc/sys/kernel/hostname", "node/hostname"),
        ("directory", "proc/locks", "node/locks.txt"),
    ],
)
def test_collect_lists_the_path_and_writes_the_bundle(
    root: Path, tmp_path: Path, kind: str, inside: str, artifact: str
) -> None:
    plant(root / inside, kind, tmp_path / "outside")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    t0 = time.monotonic()
    proc, bundle = _collect(root, tmp)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - t0 < 25 and bundle.exists()
    assert KINDS[kind] in _not_collected(bundle)[artifact]
    assert not [p for p in tmp.iterdir() if p.name.startswith("kpdoctor")]


@pytest.mark.parametrize("absolute", [True, False])
def test_collect_never_copies_a_file_from_outside_the_node_root(root: Path, tmp_path: Path, absolute: bool) -> None:
    canary = tmp_path / "outside.txt"
    canary.write_text("the collector's own file, not the node's\n")
    plant(root / LOG_DIR / "0.log", "outside-link" if absolute else "relative-outside-link", canary)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc, bundle = _collect(root, tmp)
    assert proc.returncode == 0, proc.stderr
    assert b"not the node's" not in bundle_bytes(bundle)
    assert "kube-proxy/log.txt" in _not_collected(bundle)


@pytest.mark.parametrize("flag", ["--token={}", "--password {}", "--kubeconfig=/x --api-key={}"])
def test_the_manifest_quotes_no_secret_of_an_untrusted_process(root: Path, tmp_path: Path, flag: str) -> None:
    """A user's process calling itself kube-proxy is listed as not trusted, with its command line:
    that line is scrubbed like every artifact (a secret in its flags does not reach the bundle)."""
    secret = "Zq8vT2mK9pLw4RxY7nB3cD6f"
    proc = root / "proc/4242"
    proc.mkdir(parents=True)
    argv = ["/home/user/kube-proxy", "--v=2", *flag.format(secret).split()]
    (proc / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (proc / "status").write_text("Name:\tkube-proxy\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc_run, bundle = _collect(root, tmp)
    assert proc_run.returncode == 0, proc_run.stderr
    with tarfile.open(bundle) as tf:
        fh = tf.extractfile(next(m for m in tf if m.name.endswith("/manifest.json")))
        assert fh is not None
        reasons = " ".join(e["reason"] for e in json.load(fh)["not_collected"] if e["path"] == "kube-proxy/")
    assert "not trusted as kube-proxy" in reasons and "<redacted>" in reasons
    assert secret.encode() not in bundle_bytes(bundle)
