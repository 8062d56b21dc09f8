"""Looking never harms the node: a live collection changes no rule, creates no table, chain or
kernel module, and finishes within its bound while another process holds the xtables lock.

Each test runs ``kpdoctor collect`` inside a lab node namespace, as root, like a user would, and
compares what the kernel holds before and after by reading it in ways that cannot create anything
themselves (``/proc/net/ip_tables_names``, ``nft list tables``), plus full rule dumps where the
tables already exist.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from .iptables_capture import load
from .netns import Netns, require_lab
from .test_live_lab import RULES, lock_held

require_lab()

SAVES = ("iptables-legacy-save", "iptables-nft-save", "ip6tables-legacy-save", "ip6tables-nft-save")


def kernel_objects(ns: Netns) -> dict[str, object]:
    """What exists, read without creating anything: table names, nft tables, kernel modules."""
    modules: object = (
        Path("/proc/modules").read_text().split("\n") if Path("/proc/modules").exists() else None
    )
    return {
        "ip_tables_names": sorted(ns.check(["cat", "/proc/net/ip_tables_names"]).split()),
        "ip6_tables_names": sorted(ns.check(["cat", "/proc/net/ip6_tables_names"]).split()),
        "nft tables": sorted(ns.check(["nft", "list", "tables"]).splitlines()),
        # module names only: use counts change with any activity on the machine
        "modules": sorted(line.split(" ", 1)[0] for line in modules if line) if isinstance(modules, list) else None,
        "sys/module": sorted(os.listdir("/sys/module")),
    }


def rules(ns: Netns) -> dict[str, str]:
    """Every backend's and family's rules, without comment lines and counters."""
    out = {}
    for save in SAVES:
        text = ns.check([save])
        out[save] = "\n".join(
            re.sub(r"\[\d+:\d+\]", "[]", line) for line in text.splitlines() if not line.startswith("#")
        )
    out["nft"] = re.sub(r"counter packets \d+ bytes \d+", "counter", ns.check(["nft", "list", "ruleset"]))
    return out


def collect(ns: Netns, out: Path, *extra: str, timeout: float = 30, env: dict[str, str] | None = None) -> float:
    argv = [sys.executable, "-m", "kpdoctor", "collect", "-o", str(out), "--no-cluster", "--interval", "1"]
    argv += ["--timeout", str(timeout), *extra]
    t0 = time.monotonic()
    res = subprocess.run(ns.exec_argv(argv), capture_output=True, text=True, timeout=timeout + 30, env=env)
    assert res.returncode == 0, res.stderr
    return time.monotonic() - t0


def manifest(bundle: Path) -> dict[str, object]:
    with tarfile.open(bundle) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("/manifest.json"))
        fh = tf.extractfile(member)
        assert fh is not None
        return json.loads(fh.read())


def test_collection_on_an_empty_node_creates_no_table(tmp_path: Path) -> None:
    with Netns() as ns:
        before = kernel_objects(ns)
        assert before["ip_tables_names"] == [] and before["nft tables"] == []
        collect(ns, tmp_path / "b.tar.gz")
        assert kernel_objects(ns) == before
    entries = {a["path"]: a for a in manifest(tmp_path / "b.tar.gz")["artifacts"]}  # type: ignore[index, union-attr]
    legacy = entries["node/iptables-legacy-save.txt"]
    assert legacy["bytes"] == 0 and "lists no table" in legacy["command"]  # evidence: no legacy rules


def test_collection_changes_no_rule_and_loads_nothing(tmp_path: Path) -> None:
    with Netns() as ns:
        load(ns, RULES, "legacy")
        load(ns, RULES, "nft")
        ns.check(["ipset", "create", "KUBE-LOOP-BACK", "hash:ip,port,ip"])
        before, objects = rules(ns), kernel_objects(ns)
        collect(ns, tmp_path / "b.tar.gz")
        assert rules(ns) == before
        assert kernel_objects(ns) == objects
    with tarfile.open(tmp_path / "b.tar.gz") as tf:
        names = tf.getnames()
    for path in ("node/iptables-legacy-save.txt", "node/iptables-nft-save.txt", "node/ipset-save.txt"):
        assert any(n.endswith(path) for n in names), path


def test_collection_finishes_while_the_xtables_lock_is_held(tmp_path: Path) -> None:
    lockfile = tmp_path / "xtables.lock"  # the lab's own lock, never /run/xtables.lock
    env = dict(os.environ, XTABLES_LOCKFILE=str(lockfile))
    with Netns() as ns:
        load(ns, RULES, "legacy")
        with lock_held(ns, lockfile):
            # control: a command that takes the lock waits for it
            t0 = time.monotonic()
            res = subprocess.run(
                ns.exec_argv(["iptables-legacy", "-w", "2", "-t", "nat", "-S"]),
                capture_output=True,
                text=True,
                timeout=30,
                env=env,
            )
            blocked = time.monotonic() - t0
            assert res.returncode == 4 and "holding the xtables lock" in res.stderr and blocked >= 1.9
            took = collect(ns, tmp_path / "b.tar.gz", timeout=20, env=env)
    assert took < 20
    entries = {a["path"]: a for a in manifest(tmp_path / "b.tar.gz")["artifacts"]}  # type: ignore[index, union-attr]
    assert entries["node/iptables-legacy-save.txt"]["exit_code"] == 0
    assert entries["node/iptables-legacy-save.txt"]["bytes"] > 1000


# PID 1 of a fresh PID namespace (inside the lab node's network namespace): mounts the machine's
# root at HOSTROOT (private to this mount namespace, gone with it) as a debug Pod has the node's /
# at /host, then runs `kpdoctor collect --host-root HOSTROOT` in the given network namespace.
DEBUG_POD_SRC = r"""
import os, subprocess, sys
hostroot, netns, out = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(hostroot, exist_ok=True)
subprocess.run(["mount", "--rbind", "/", hostroot], check=True, timeout=10)
argv = [sys.executable, "-m", "kpdoctor", "collect", "--host-root", hostroot, "-o", out, "--no-cluster",
        "--interval", "0", "--timeout", "30"]
if netns != "-":
    argv = ["ip", "netns", "exec", netns] + argv
res = subprocess.run(argv, capture_output=True, text=True, timeout=90)
sys.stderr.write(res.stderr)
sys.exit(res.returncode)
"""


@pytest.mark.parametrize("pod_netns", [False, True], ids=["hostNetwork", "own-netns"])
def test_collection_from_a_debug_pod_with_the_host_root(tmp_path: Path, pod_netns: bool) -> None:
    """--host-root: the node's binaries run chrooted there, and a Pod outside the node's network
    namespace enters it (nsenter) for the rules; the bundle holds the node's rules either way."""
    out = tmp_path / "b.tar.gz"
    with Netns() as node, Netns() as pod:
        load(node, RULES, "legacy")
        argv = ["unshare", "--pid", "--fork", "--mount-proc", "--propagation", "private"]
        argv += [sys.executable, "-c", DEBUG_POD_SRC, str(tmp_path / "host"), pod.name if pod_netns else "-", str(out)]
        res = node.run(argv, timeout=120)
        assert res.returncode == 0, res.stderr
    doc = manifest(out)
    assert doc["host_root"] == str(tmp_path / "host") and doc["entered_node_netns"] is pod_netns
    entries = {a["path"]: a for a in doc["artifacts"]}  # type: ignore[index, union-attr]
    legacy = entries["node/iptables-legacy-save.txt"]
    assert legacy["exit_code"] == 0 and legacy["bytes"] > 1000
    with tarfile.open(out) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("node/iptables-legacy-save.txt"))
        fh = tf.extractfile(member)
        assert fh is not None and b"-A KUBE-SERVICES" in fh.read()
    assert not (tmp_path / "host" / "etc").exists(), "the host root mount did not outlive its namespace"
