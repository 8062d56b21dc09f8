"""Live collection trusts only a real kube-proxy (docs/security.md).

The attack (robustness defects D1, D2): any local user starts ``exec -a kube-proxy ./anything
--config=/a/root-only/file``; a collector running as root must neither execute ``./anything`` nor
copy the file into a bundle meant for support. A legitimate kube-proxy (root, from a root-owned
binary, in its own mount namespace and root like a container) must still be found, with its
version, flags and config collected.

The processes here are small static programs this module compiles: on ``--version`` they print a
kube-proxy version and leave a mark saying which uid ran them; otherwise they wait. Every process
is killed and every file removed when a test ends; the processes and the collection run in a lab
network namespace (kube-proxy shares the node's: one in another namespace is another node's).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import UPSTREAM

from .netns import Netns, require_lab

require_lab()

NOBODY = 65534
FAKE_SRC = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            FILE *f = fopen(MARK, "a");
            if (f) { fprintf(f, "ran as uid=%d euid=%d\n", (int)getuid(), (int)geteuid()); fclose(f); }
            fprintf(stderr, "uid=%d\n", (int)geteuid());
            puts("Kubernetes v1.28.4");
            return 0;
        }
    }
    for (;;) pause();
}
"""
CONFIG = (UPSTREAM / "iptables" / "TestOverallIPTablesRules.kube-proxy.yaml").read_text()
KUBECONFIG = "apiVersion: v1\nkind: Config\nusers:\n- name: kube-proxy\n  user:\n    token: lab-token-0123456789\n"


def build(dest: Path, mark: Path) -> Path:
    """Compile the fake program to ``dest`` (static: it runs in an empty root too)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("a C compiler is needed (scripts/test installs gcc)")
    src = dest.parent / (dest.name + ".c")
    src.write_text(FAKE_SRC)
    res = subprocess.run(
        [cc, "-static", "-O1", f'-DMARK="{mark}"', "-o", str(dest), str(src)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    src.unlink()
    dest.chmod(0o755)
    return dest


def _enter(netns: str, user: int | None) -> Callable[[], None]:
    """In the child: join the lab namespace (as a host-network kube-proxy shares the node's), then
    become ``user`` (after: joining needs root)."""

    def enter() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), "setns")
        os.close(fd)
        if user is not None:
            os.setgroups([])
            os.setgid(user)
            os.setuid(user)

    return enter


@contextmanager
def running(argv: list[str], executable: str, ns: Netns, user: int | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` (its argv[0] as given: ``exec -a``) from ``executable``, in the lab namespace ``ns``."""
    proc = subprocess.Popen(
        argv,
        executable=executable,
        preexec_fn=_enter(ns.name, user),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def collect(ns: Netns, out: Path) -> dict[str, bytes]:
    """``kpdoctor collect`` as root in the lab namespace: the bundle's files by path."""
    argv = [sys.executable, "-m", "kpdoctor", "collect", "--no-cluster", "--interval", "0", "--timeout", "40"]
    res = ns.run([*argv, "-o", str(out)], timeout=90)
    assert res.returncode == 0, res.stderr
    files: dict[str, bytes] = {}
    with tarfile.open(out) as tf:
        for m in tf.getmembers():
            fh = tf.extractfile(m)
            if fh is not None:
                files[m.name.split("/", 1)[1]] = fh.read()
    return files


def not_collected(files: dict[str, bytes]) -> list[str]:
    doc = json.loads(files["manifest.json"])
    return [f"{e['path']}: {e['reason']}" for e in doc["not_collected"]]


@pytest.mark.parametrize(
    "case",
    ["user's process and binary", "root process, user's binary", "root process, other binary"],
)
def test_a_process_calling_itself_kube_proxy_is_neither_run_nor_read(workdir: Path, tmp_path: Path, case: str) -> None:
    marks = workdir / "marks"
    marks.mkdir(mode=0o777)
    marks.chmod(0o777)
    mark = marks / "ran.txt"
    name = "evil" if case == "root process, other binary" else "kube-proxy"
    binary = build(workdir / name, mark)
    user = None if case.startswith("root process") else NOBODY
    if case != "root process, other binary":
        os.chown(binary, NOBODY, NOBODY)
    secret = workdir / "secret.txt"
    secret.write_text(f"root-only marker {os.getpid()}\n")
    secret.chmod(0o600)
    argv = ["kube-proxy", f"--config={secret}", "--hostname-override=n1"]
    with Netns() as ns, running(argv, str(binary), ns, user=user) as proc:
        files = collect(ns, tmp_path / "b.tar.gz")
    assert not mark.exists(), f"the fake binary was run: {mark.read_text()}"
    assert "kube-proxy/version.txt" not in files and "kube-proxy/config.yaml" not in files
    assert not any(b"root-only marker" in data for data in files.values())
    why = [r for r in not_collected(files) if f"process {proc.pid} " in r]
    assert why and "is not trusted as kube-proxy" in why[0] and "nothing of it was run or read" in why[0], why


@contextmanager
def container(ns: Netns, root: Path, config_path: str) -> Iterator[subprocess.Popen[bytes]]:
    """A root kube-proxy in its own mount namespace whose root is ``root``, as a runtime starts
    one: ``unshare --mount`` then ``chroot``; --kill-child takes it down with the unshare."""
    argv = ["unshare", "--mount", "--fork", "--kill-child", "chroot", str(root), "/usr/local/bin/kube-proxy"]
    argv += [f"--config={config_path}", "--hostname-override=test-node", "--v=2"]
    with running(argv, shutil.which("unshare") or "unshare", ns) as proc:
        yield proc


def image(workdir: Path, mark: Path) -> Path:
    root = workdir / "rootfs"
    (root / "usr/local/bin").mkdir(parents=True)
    (root / "var/lib/kube-proxy").mkdir(parents=True)
    build(root / "usr/local/bin/kube-proxy", mark)
    (root / "var/lib/kube-proxy/config.conf").write_text(CONFIG)
    (root / "var/lib/kube-proxy/kubeconfig.conf").write_text(KUBECONFIG)
    return root


def test_a_containerised_root_kube_proxy_is_found_and_collected(workdir: Path, tmp_path: Path) -> None:
    mark = workdir / "rootfs/ran.txt"  # as the program sees it: inside its root
    root = image(workdir, Path("/ran.txt"))
    mark.touch()
    mark.chmod(0o666)
    with Netns() as ns, container(ns, root, "/var/lib/kube-proxy/config.conf"):
        files = collect(ns, tmp_path / "b.tar.gz")
    assert files["kube-proxy/version.txt"].strip() == b"Kubernetes v1.28.4"
    # run for its version, but as nobody: never with the root it runs as
    assert mark.read_text() == f"ran as uid={NOBODY} euid={NOBODY}\n"
    assert files["kube-proxy/config.yaml"].decode() == CONFIG
    cmdline = files["kube-proxy/cmdline.txt"].decode()
    assert "--config=/var/lib/kube-proxy/config.conf" in cmdline and "--hostname-override=test-node" in cmdline
    entries = {e["path"]: e for e in json.loads(files["manifest.json"])["artifacts"]}
    assert "as nobody" in entries["kube-proxy/version.txt"]["command"]
    assert entries["kube-proxy/version.txt"]["stderr"].strip() == f"uid={NOBODY}"


def test_a_config_flag_naming_a_kubeconfig_is_not_stored(workdir: Path, tmp_path: Path) -> None:
    root = image(workdir, Path("/ran.txt"))
    with Netns() as ns, container(ns, root, "/var/lib/kube-proxy/kubeconfig.conf"):
        files = collect(ns, tmp_path / "b.tar.gz")
    assert "kube-proxy/config.yaml" not in files
    assert not any(b"lab-token-0123456789" in data for data in files.values())
    why = [r for r in not_collected(files) if r.startswith("kube-proxy/config.yaml")]
    assert why and "is not a KubeProxyConfiguration (kind 'Config'): not stored" in why[0], why
    assert files["kube-proxy/version.txt"].strip() == b"Kubernetes v1.28.4"
