"""kube-proxy run as a plain process on the host, and its log found by the live collection.

The real kube-proxy v1.20.2 the lab builds (``lab_binaries``) runs as binary installs run it
(``nohup kube-proxy ... > /var/log/kube-proxy.log 2>&1``, or with klog's ``--logtostderr=false
--log-file=...``): a root-owned copy named ``kube-proxy``, mode 0755, in a network namespace of its
own, its kubeconfig naming an API server on the namespace's loopback where nothing listens. It logs
its flags, its start-up and its failures to reach the API: real kube-proxy lines. Then kpdoctor's
collection (``collect_kube_proxy`` on the node's root, as ``kpdoctor collect`` runs it on a node)
must put those lines in ``kube-proxy/log.txt`` and say where they came from.

Inside the namespace, a PID namespace with its own /proc (``unshare --pid --fork --mount-proc
--kill-child``) holds both kube-proxy and the collection: the collection sees this kube-proxy and
no other (another lab test may run one on this machine), and kube-proxy dies with that namespace
whatever happens. Traffic: kube-proxy's connection attempts to its namespace's loopback only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .control_plane import Binaries, host_install
from .netns import Netns, require_lab

require_lab()

FAILED = "Failed to retrieve node info"  # what v1.20 logs while the API does not answer
WARNED = "server.go:226] WARNING: all flags other than --config"  # an info-era line klog's file has, stderr not

# Run in the namespaces: start kube-proxy with its standard streams on STREAMS, wait until FILE
# holds its failure to reach the API, collect as the live path does, print what was collected.
IN_NAMESPACE = r"""
import json, subprocess, sys, time
from kpdoctor.collect.kube_proxy import collect_kube_proxy
from kpdoctor.collect.record import Budget, quiet
from kpdoctor.collect.runner import Host, Runner

streams, watched, *argv = sys.argv[1:]
with open(streams, "ab") as out:
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)

def logged():
    try:
        with open(watched, "rb") as fh:
            return b"Failed to retrieve node info" in fh.read()
    except FileNotFoundError:
        return False

try:
    deadline = time.monotonic() + 60
    while not logged():
        if proc.poll() is not None:
            sys.exit(f"kube-proxy exited with {proc.returncode} before logging its failure to reach the API")
        if time.monotonic() > deadline:
            sys.exit("kube-proxy logged no failure to reach the API in 60 s")
        time.sleep(0.1)
    host = Host.detect(None)
    kp = collect_kube_proxy(Runner(host, Budget(60)), quiet, in_node_netns=not host.enter_netns)
    print(json.dumps({
        "pid": proc.pid,
        "logs_found": kp.logs_found,
        "artifacts": {a.path: {"source": a.source, "note": a.note, "data": a.data.decode("utf-8", "replace")}
                      for a in kp.artifacts},
        "skipped": {s.path: s.reason for s in kp.skipped},
    }))
finally:
    proc.kill()
    proc.wait()
"""


def running_from(binary: Path) -> list[int]:
    """The processes whose program is ``binary``."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.readlink(d / "exe").removesuffix(" (deleted)") == str(binary):
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


def run_kube_proxy(lab_binaries: Binaries, workdir: Path, streams: Path, watched: Path, *flags: str) -> dict[str, Any]:
    binary, kubeconfig = host_install(lab_binaries, workdir)
    argv = [str(binary), f"--kubeconfig={kubeconfig}", "--hostname-override=lab-node", "--proxy-mode=iptables",
            "--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0", "--v=2", *flags]  # fmt: skip
    inner = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c", IN_NAMESPACE]
    try:
        with Netns() as ns:
            ns.check(["ip", "link", "set", "lo", "up"])
            res = ns.run([*inner, str(streams), str(watched), *argv], timeout=150)
    finally:
        left = running_from(binary)
    assert not left, f"kube-proxy still runs: {left}"
    assert res.returncode == 0, res.stderr[-3000:]
    got: dict[str, Any] = json.loads(res.stdout)
    return got


def test_a_log_its_streams_are_redirected_to(lab_binaries: Binaries, workdir: Path) -> None:
    """``kube-proxy ... > kube-proxy.log 2>&1``: fd 1 and 2 are that file."""
    log = workdir / "kube-proxy.log"
    got = run_kube_proxy(lab_binaries, workdir, log, log)
    pid, found = got["pid"], got["artifacts"]
    assert "kube-proxy/log.txt" in found, got["skipped"]
    art = found["kube-proxy/log.txt"]
    assert art["source"] == (
        f"read {log} in /proc/{pid}/root: the file kube-proxy (pid {pid}) writes its standard error to (fd 2)"
    )
    text = art["data"]
    assert 'FLAG: --hostname-override="lab-node"' in text and FAILED in text and WARNED in text
    assert log.read_text().startswith(text)  # the file itself, as it was when read (it only grows)
    assert got["logs_found"] is True
    assert "kube-proxy/log-stdout.txt" not in found and "kube-proxy/log.txt" not in got["skipped"]
    assert "--hostname-override=lab-node" in found["kube-proxy/cmdline.txt"]["data"]


def test_klogs_log_file(lab_binaries: Binaries, workdir: Path) -> None:
    """``--logtostderr=false --log-file=...``: klog writes every line there and only errors to
    stderr (here a file too), so the log is klog's file."""
    streams, klog = workdir / "kube-proxy.out", workdir / "klog" / "kube-proxy.log"
    klog.parent.mkdir()
    got = run_kube_proxy(lab_binaries, workdir, streams, klog, "--logtostderr=false", f"--log-file={klog}")
    pid, found = got["pid"], got["artifacts"]
    assert "kube-proxy/log.txt" in found, got["skipped"]
    art = found["kube-proxy/log.txt"]
    assert art["source"] == (
        f"read {klog} in /proc/{pid}/root: its log file by --log-file={klog} (klog, --logtostderr=false)"
    )
    text = art["data"]
    assert FAILED in text and WARNED in text
    assert klog.read_text().startswith(text)
    assert FAILED in streams.read_text() and WARNED not in streams.read_text()  # stderr: errors only
    assert got["logs_found"] is True


def test_a_kube_proxy_in_another_network_namespace_is_not_this_nodes() -> None:
    """A process in another network namespace (a nested cluster's node, as kind runs them) programs
    that namespace's rules: it is not this node's kube-proxy, whatever it is called."""
    from kpdoctor.collect.kube_proxy import other_netns
    from kpdoctor.collect.runner import Host

    with Netns() as ns:
        inside = subprocess.Popen(ns.exec_argv(["sleep", "60"]), stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while os.readlink(f"/proc/{inside.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
                assert time.monotonic() < deadline, "the process never entered the namespace"
                time.sleep(0.02)
            assert other_netns(Host("/", False), inside.pid) == os.readlink(f"/proc/{inside.pid}/ns/net")
            assert other_netns(Host("/", False), os.getpid()) is None
        finally:
            inside.kill()
            inside.wait(timeout=10)
