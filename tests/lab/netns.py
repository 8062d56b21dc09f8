"""Network namespaces for tests that stage a broken node on real iptables.

Every namespace is created with a unique name, every command runs with a fixed argv and a
timeout, and the namespace is deleted on exit even when the test fails. Nothing here sends
traffic anywhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from types import TracebackType

PREFIX = "kpd-"
REQUIRED = ("ip", "iptables-legacy", "iptables-nft", "iptables-legacy-save", "iptables-nft-save")


def lab_available() -> str | None:
    """None when namespaces and both iptables backends are usable, else why not."""
    if os.geteuid() != 0:
        return "needs root for ip netns"
    missing = [b for b in REQUIRED if shutil.which(b) is None]
    if missing:
        return f"missing binaries: {', '.join(missing)} (run scripts/test as root to install them)"
    return None


def run(argv: list[str], input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False)


class Netns:
    """``with Netns() as ns: ns.run([...])``"""

    def __init__(self, prefix: str = PREFIX) -> None:
        self.name = f"{prefix}{uuid.uuid4().hex[:10]}"

    def __enter__(self) -> Netns:
        res = run(["ip", "netns", "add", self.name], timeout=10)
        if res.returncode != 0:
            raise RuntimeError(f"ip netns add {self.name}: {res.stderr.strip()}")
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        run(["ip", "netns", "delete", self.name], timeout=10)

    def run(self, argv: list[str], input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return run(["ip", "netns", "exec", self.name, *argv], input=input, timeout=timeout)

    def check(self, argv: list[str], input: str | None = None, timeout: float = 30) -> str:
        res = self.run(argv, input=input, timeout=timeout)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} in {self.name}: exit {res.returncode}: {res.stderr.strip()}")
        return res.stdout


def cleanup_stale(prefix: str = PREFIX) -> list[str]:
    """Delete namespaces a crashed run left behind."""
    res = run(["ip", "netns", "list"], timeout=10)
    gone = []
    for line in res.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix):
            run(["ip", "netns", "delete", name], timeout=10)
            gone.append(name)
    return gone
