"""Network namespaces for tests that stage a broken node on real iptables.

A :class:`Netns` is a throw-away network namespace (``ip netns add kpd-<random>``). Commands run in
it through ``ip netns exec NAME ARGV...`` with a fixed argv (never a shell string), always with a
timeout, never raising on a non-zero exit (``check=False``) and always as text. The namespace is
deleted when the ``with`` block ends, even when the block raised.

Nothing here sends traffic anywhere: a new namespace has only its own loopback interface, which is
left down, and the helpers only load and list netfilter rules in it.

Typical use::

    reason = lab_available()
    if reason:
        pytest.skip(reason)
    with Netns() as ns:
        ns.check(["iptables-legacy-restore", "--noflush"], input=payload)
        print(ns.check(["iptables-legacy-save"]))

If a run was killed before its ``with`` blocks ended, :func:`cleanup_stale` removes what it left.
"""

from __future__ import annotations

import functools
import os
import pty
import re
import secrets
import select
import shutil
import subprocess
import termios
import time
from collections.abc import Callable
from types import TracebackType

PREFIX = "kpd-"
"""Every namespace this module creates is named ``PREFIX + <pid>-<8 hex digits>`` unless told otherwise.

The creator's pid in the name lets :func:`cleanup_stale` tell a leftover (its creator is gone) from a
namespace another test run is using right now."""

REQUIRED = (
    "ip",
    "iptables-legacy",
    "iptables-nft",
    "iptables-legacy-restore",
    "iptables-nft-restore",
    "iptables-legacy-save",
    "iptables-nft-save",
    "sysctl",
)
"""Binaries :func:`lab_available` requires on ``PATH``."""


def run(argv: list[str], input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run a fixed argv on the host: text, captured stdout and stderr, a timeout, no check.

    Raises :class:`subprocess.TimeoutExpired` (after killing the child) when it overruns.
    """
    return subprocess.run(
        argv,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_tty(argv: list[str], timeout: float = 30) -> tuple[int, str]:
    """Run a fixed argv with stdout and stderr both on one pseudo-terminal; return (exit code, output).

    This is what a person sees in a terminal: both streams interleaved in the order the program
    wrote them, with stdout line-buffered as stdio does for a tty (through a pipe, stdout would be
    block-buffered and come out after everything written to stderr). The terminal's output
    post-processing is switched off, so the text is byte-for-byte what the program wrote (``\\n``,
    not ``\\r\\n``). Stdin is ``/dev/null``.
    """
    master, slave = pty.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.OPOST  # oflag: no "\n" -> "\r\n"
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    except BaseException:
        os.close(master)
        os.close(slave)
        raise
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                proc.wait()
                raise subprocess.TimeoutExpired(argv, timeout, output=b"".join(chunks))
            ready, _, _ = select.select([master], [], [], left)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the slave side has closed it
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, b"".join(chunks).decode("utf-8", errors="replace")


class Netns:
    """A uniquely named network namespace that exists for the duration of a ``with`` block.

    ``with Netns() as ns: ns.run([...])``. The name is ``prefix``, this process's pid, ``-`` and 8
    random hex digits, so concurrent tests never share one. Leaving the block deletes the namespace whether or not the
    block raised; if the deletion itself fails while nothing else is being raised, that is an error.
    """

    def __init__(self, prefix: str = PREFIX) -> None:
        self.name: str = f"{prefix}{os.getpid()}-{secrets.token_hex(4)}"
        self._created = False

    def __enter__(self) -> Netns:
        res = run(["ip", "netns", "add", self.name], timeout=10)
        if res.returncode != 0:
            raise RuntimeError(f"ip netns add {self.name}: exit {res.returncode}: {res.stderr.strip()}")
        self._created = True
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if not self._created:
            return
        res = run(["ip", "netns", "delete", self.name], timeout=10)
        self._created = res.returncode != 0
        if res.returncode != 0 and et is None:
            raise RuntimeError(f"ip netns delete {self.name}: exit {res.returncode}: {res.stderr.strip()}")

    def exec_argv(self, argv: list[str]) -> list[str]:
        """The host argv that runs ``argv`` inside this namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv: list[str], input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the namespace; never raises on a non-zero exit (see :func:`run`).

        The returned ``args`` is the full ``ip netns exec`` argv.
        """
        return run(self.exec_argv(argv), input=input, timeout=timeout)

    def check(self, argv: list[str], input: str | None = None, timeout: float = 30) -> str:
        """Like :meth:`run` but return stdout, raising :class:`RuntimeError` on a non-zero exit."""
        res = self.run(argv, input=input, timeout=timeout)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} in {self.name}: exit {res.returncode}: {res.stderr.strip()}")
        return res.stdout

    def run_tty(self, argv: list[str], timeout: float = 30) -> tuple[int, str]:
        """Run ``argv`` inside the namespace as a terminal would show it (see :func:`run_tty`)."""
        return run_tty(self.exec_argv(argv), timeout=timeout)


def serve_and_capture(server: list[str], tcpdump: list[str], client: Callable[[], str]) -> tuple[str, str]:
    """Run a server (an argv that prints "ready" once it listens) and tcpdump (an argv, ``-l -U``
    for its lines as they come), then ``client``; return what the client said and what tcpdump
    printed. Both are stopped however the client ends."""
    srv = subprocess.Popen(
        server, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    dump = subprocess.Popen(
        tcpdump, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
        time.sleep(1.0)  # tcpdump opens its socket
        got = client()
        time.sleep(0.5)
    finally:
        dump.terminate()
        capture, _ = dump.communicate(timeout=10)
        srv.kill()
        srv.wait(timeout=10)
    return got, capture


def list_netns(prefix: str = "") -> list[str]:
    """Names of the existing network namespaces that start with ``prefix``."""
    res = run(["ip", "netns", "list"], timeout=10)
    names = [line.split()[0] for line in res.stdout.splitlines() if line.strip()]
    return [n for n in names if n.startswith(prefix)]


def _in_use(name: str, prefix: str) -> bool:
    """True when ``name`` is ``prefix<pid>-<hex>`` and process ``pid`` still runs."""
    m = re.fullmatch(r"(\d+)-[0-9a-f]+", name[len(prefix) :])
    if m is None:
        return False
    try:
        os.kill(int(m.group(1)), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale(prefix: str = PREFIX) -> list[str]:
    """Delete the leftover namespaces whose name starts with ``prefix``; return the names deleted.

    A namespace named by :class:`Netns` carries its creator's pid and is left alone while that
    process runs (it may be a concurrent test run using it right now); any other name with the
    prefix is a leftover. Meant for the start of a test session, to remove what a killed run left.
    """
    gone = []
    for name in list_netns(prefix):
        if not _in_use(name, prefix) and run(["ip", "netns", "delete", name], timeout=10).returncode == 0:
            gone.append(name)
    return gone


@functools.lru_cache(maxsize=1)
def lab_available() -> str | None:
    """None when the lab can run here, else the reason it cannot (for ``pytest.skip``).

    Usable means: running as root, every binary in :data:`REQUIRED` on ``PATH``, and a probe
    namespace in which both ``iptables-legacy -S`` and ``iptables-nft -S`` succeed (this catches a
    kernel without the legacy ``ip_tables`` module or without nf_tables). The answer is cached.
    """
    if os.geteuid() != 0:
        return "the netns lab needs root (ip netns add)"
    missing = [b for b in REQUIRED if shutil.which(b) is None]
    if missing:
        return f"missing binaries: {', '.join(missing)} (scripts/test installs them when run as root)"
    try:
        with Netns() as ns:
            for be in ("legacy", "nft"):
                res = ns.run([f"iptables-{be}", "-t", "filter", "-S"], timeout=10)
                if res.returncode != 0:
                    return f"iptables-{be} does not work in a network namespace: {res.stderr.strip()}"
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        return f"ip netns is not usable: {e}"
    return None


@functools.lru_cache(maxsize=1)
def conntrack_unavailable() -> str | None:
    """None when ``conntrack`` lists and inserts entries in a network namespace here, else why
    not: the tests that make real conntrack entries skip with this reason."""
    reason = lab_available()
    if reason is not None:
        return reason
    if shutil.which("conntrack") is None:
        return "no conntrack binary (conntrack-tools)"
    try:
        with Netns() as ns:
            res = ns.run(["conntrack", "-L"], timeout=10)
            if res.returncode != 0:
                return f"conntrack -L does not work in a network namespace: {res.stderr.strip()}"
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        return f"ip netns is not usable: {e}"
    return None


@functools.lru_cache(maxsize=8)
def nft_unavailable(prefix: str) -> str | None:
    """None when ``nft -j`` can be run in a network namespace here (named ``prefix``...), else why
    not: the tests that load rulesets into a real kernel skip with this reason."""
    if os.geteuid() != 0:
        return "needs root (ip netns add)"
    missing = [b for b in ("ip", "nft") if shutil.which(b) is None]
    if missing:
        return f"missing binaries: {', '.join(missing)}"
    cleanup_stale(prefix)
    try:
        with Netns(prefix=prefix) as ns:
            res = ns.run(["nft", "-j", "list", "ruleset"], timeout=10)
            if res.returncode != 0:
                return f"nft -j does not work in a network namespace: {res.stderr.strip()}"
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        return f"ip netns is not usable: {e}"
    return None


def node_interfaces(ns: Netns, node_ip: str, service_ips: list[str]) -> None:
    """A node's interfaces as IPVS mode leaves them: an uplink ``eth0`` (a veth whose peer stays in
    the namespace) with ``node_ip``/24, a bridge ``cni0`` (10.244.1.1/24) with a Pod's veth on it,
    and ``kube-ipvs0`` holding ``service_ips`` (a bridge, left down, stands in for kube-proxy's
    dummy device: not every kernel has the dummy driver)."""
    for argv in (
        ["ip", "link", "set", "lo", "up"],
        ["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"],
        ["ip", "addr", "add", f"{node_ip}/24", "dev", "eth0"],
        ["ip", "link", "set", "eth0", "up"],
        ["ip", "link", "add", "cni0", "type", "bridge"],
        ["ip", "addr", "add", "10.244.1.1/24", "dev", "cni0"],
        ["ip", "link", "set", "cni0", "up"],
        ["ip", "link", "add", "veth9c1f", "type", "veth", "peer", "name", "vpod"],
        ["ip", "link", "set", "veth9c1f", "master", "cni0", "up"],
        ["ip", "link", "add", "kube-ipvs0", "type", "bridge"],
        *(["ip", "addr", "add", f"{ip}/32", "dev", "kube-ipvs0"] for ip in service_ips),
    ):
        ns.check(argv)


def require_lab() -> None:
    """Skip the calling test module when the lab cannot run here, with the reason; in CI (``$CI``
    set) fail instead, because there the lab must run. Call it at module level."""
    import pytest

    reason = lab_available()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the netns lab must run in CI: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)
