"""A kube-proxy in another network namespace is another node's (kind runs several nodes on one
host, each with its kube-proxy in its own namespace; the host's process list shows them all).
The live collection lists each process with its network namespace (``ps -o ...,netns,args``), and
KP109 counts only the kube-proxies of the namespace the list was taken in: two real kube-proxy
1.20 processes, one in the node's namespace and one in another, are no "multiple kube-proxy";
two in the node's namespace are."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from .control_plane import Binaries, host_install, stop
from .netns import Netns, require_lab

require_lab()

@contextmanager
def kube_proxy(ns: Netns, binary: Path, kubeconfig: Path, name: str) -> Iterator[subprocess.Popen[bytes]]:
    """The real kube-proxy in ``ns``, failing to reach an API server that is not there."""
    argv = [str(binary), f"--kubeconfig={kubeconfig}", f"--hostname-override={name}", "--proxy-mode=iptables",
            "--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0"]  # fmt: skip
    proc = subprocess.Popen(ns.exec_argv(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        yield proc
    finally:
        stop(proc)


def collect(ns: Netns, out: Path) -> dict[str, bytes]:
    argv = [sys.executable, "-m", "kpdoctor", "collect", "--no-cluster", "--interval", "0", "--timeout", "40"]
    res = ns.run([*argv, "-o", str(out)], timeout=90)
    assert res.returncode == 0, res.stderr
    with tarfile.open(out) as tf:
        return {m.name.split("/", 1)[1]: fh.read() for m in tf.getmembers() if (fh := tf.extractfile(m))}


def kp109(bundle: Path) -> list[dict[str, object]]:
    res = subprocess.run([sys.executable, "-m", "kpdoctor", "diagnose", str(bundle), "--format", "json"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode in (0, 1), res.stderr
    return [f for f in json.loads(res.stdout)["findings"] if f["code"] == "KP109"]


def test_a_kube_proxy_in_another_namespace_is_not_a_second_one(lab_binaries: Binaries, workdir: Path) -> None:
    binary, kubeconfig = host_install(lab_binaries, workdir)
    with ExitStack() as stack:
        node, other = stack.enter_context(Netns()), stack.enter_context(Netns())
        for ns in (node, other):
            ns.check(["ip", "link", "set", "lo", "up"])
        stack.enter_context(kube_proxy(node, binary, kubeconfig, "node-a"))
        stack.enter_context(kube_proxy(other, binary, kubeconfig, "kind-worker"))
        files = collect(node, workdir / "one.tar.gz")
        listing = files["node/processes.txt"].decode()
        assert listing.split("\n", 1)[0].split()[-2:] == ["NETNS", "COMMAND"], listing[:300]
        assert listing.count(str(binary)) == 2  # both are listed ...
        assert kp109(workdir / "one.tar.gz") == []  # ... and the other namespace's is not this node's
        stack.enter_context(kube_proxy(node, binary, kubeconfig, "node-a"))  # a second one here
        collect(node, workdir / "two.tar.gz")
        [f] = kp109(workdir / "two.tar.gz")
        assert "2 kube-proxy processes run" in str(f["summary"]), f
