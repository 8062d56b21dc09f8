"""A node, its Pods and an outside client, as network namespaces joined by veth pairs.

The node namespace routes between the client's link and one point-to-point veth per Pod (as
routed CNIs such as Calico do), forwards IPv4, and holds the kube-proxy rules under test, loaded
with real ``iptables-restore``. Every address is one the lab assigns to its own namespaces; no
namespace has a link to anything outside the lab, so nothing can leave it. Everything is deleted
when the ``with`` block ends, also when it raised.

    with Lab(node_ip="192.168.0.2", client_ip="192.168.0.100", pods=["10.180.0.1"]) as lab:
        load(lab.node, rules, "legacy")
        with lab.servers(port=80):
            print(lab.connect("172.30.0.41", 80, count=10))
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from types import TracebackType

from .netns import Netns

GATEWAY = "169.254.1.1"  # the node side of every Pod link (as Calico does)
PREFIX_LEN = 24  # of the client's link

# Each Pod answers every connection with its own address and closes: a client reads which
# backend it reached. Prints "ready" once listening.
SERVER_SRC = r"""
import socket, sys
ip, port = sys.argv[1], int(sys.argv[2])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((ip, port))
s.listen(256)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    try:
        c.sendall(ip.encode())
    finally:
        c.close()
"""

# The client: COUNT connections, each from a new source port (a new conntrack entry, so each is
# balanced anew); one JSON line per connection: the backend that answered, "refused" or "timeout".
CLIENT_SRC = r"""
import json, socket, sys
host, port, count, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
for _ in range(count):
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.connect((host, port))
        out = s.recv(64).decode() or "closed"
    except ConnectionRefusedError:
        out = "refused"
    except (socket.timeout, TimeoutError):
        out = "timeout"
    except OSError as e:
        out = f"error:{e.errno}"
    finally:
        s.close()
    print(json.dumps(out), flush=True)
"""


class Lab:
    """Namespaces ``node``, ``client`` and one per Pod address, wired and routed."""

    def __init__(self, node_ip: str, client_ip: str, pods: list[str]) -> None:
        self.node_ip, self.client_ip, self.pod_ips = node_ip, client_ip, list(pods)
        self.node = Netns("kpd-")
        self.client = Netns("kpd-")
        self.pods = {ip: Netns("kpd-") for ip in pods}
        self._entered: list[Netns] = []

    def __enter__(self) -> Lab:
        try:
            for ns in (self.node, self.client, *self.pods.values()):
                ns.__enter__()
                self._entered.append(ns)
            self._wire()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        errors = []
        for ns in reversed(self._entered):
            try:
                ns.__exit__(et, ev, tb)
            except RuntimeError as e:
                errors.append(str(e))
        self._entered.clear()
        if errors and et is None:
            raise RuntimeError("; ".join(errors))

    def _wire(self) -> None:
        n, c = self.node, self.client
        for ns in self._entered:
            ns.check(["ip", "link", "set", "lo", "up"])
        n.check(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
        # The default route below leaves by the link traffic arrives on: no ICMP redirects (they
        # would also use up the ICMP rate limit a REJECT's port-unreachable needs).
        n.check(["sysctl", "-q", "-w", "net.ipv4.conf.all.send_redirects=0"])
        n.check(["sysctl", "-q", "-w", "net.ipv4.conf.default.send_redirects=0"])
        # client <-> node
        n.check(["ip", "link", "add", "to-client", "type", "veth", "peer", "name", "eth0", "netns", c.name])
        n.check(["ip", "addr", "add", f"{self.node_ip}/{PREFIX_LEN}", "dev", "to-client"])
        n.check(["ip", "link", "set", "to-client", "up"])
        c.check(["ip", "addr", "add", f"{self.client_ip}/{PREFIX_LEN}", "dev", "eth0"])
        c.check(["ip", "link", "set", "eth0", "up"])
        c.check(["ip", "route", "add", "default", "via", self.node_ip])
        # The node's default route points at the client (which forwards nothing), as a real
        # node's points at its router: traffic for addresses nobody owns is routed and reaches
        # the FORWARD chain instead of being refused by routing. It stays inside the lab.
        n.check(["ip", "route", "add", "default", "via", self.client_ip])
        # node <-> each pod: a /32 on the Pod, a host route on the node
        for i, (ip, pod) in enumerate(self.pods.items()):
            veth = f"pod{i}"
            n.check(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", pod.name])
            n.check(["ip", "addr", "add", f"{GATEWAY}/32", "dev", veth])
            n.check(["ip", "link", "set", veth, "up"])
            n.check(["ip", "route", "add", f"{ip}/32", "dev", veth])
            pod.check(["ip", "addr", "add", f"{ip}/32", "dev", "eth0"])
            pod.check(["ip", "link", "set", "eth0", "up"])
            pod.check(["ip", "route", "add", GATEWAY, "dev", "eth0", "scope", "link"])
            pod.check(["ip", "route", "add", "default", "via", GATEWAY, "dev", "eth0"])

    @contextlib.contextmanager
    def servers(self, port: int) -> Iterator[None]:
        """A TCP server on ``port`` in every Pod, stopped when the block ends."""
        procs: list[subprocess.Popen[str]] = []
        try:
            for ip, pod in self.pods.items():
                p = subprocess.Popen(
                    pod.exec_argv([sys.executable, "-c", SERVER_SRC, ip, str(port)]),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                procs.append(p)
                assert p.stdout is not None
                line = p.stdout.readline()
                if line.strip() != "ready":
                    raise RuntimeError(
                        f"server in {pod.name} did not start: {line!r} {p.stderr.read() if p.stderr else ''}"
                    )
            yield
        finally:
            for p in procs:
                p.kill()
                p.wait(timeout=10)

    def connect(self, host: str, port: int, count: int = 1, timeout: float = 2.0) -> list[str]:
        """What ``count`` new TCP connections from the client to ``host:port`` reached."""
        out = self.client.check(
            [sys.executable, "-c", CLIENT_SRC, host, str(port), str(count), str(timeout)],
            timeout=30 + count * timeout,
        )
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def node_addresses(self) -> str:
        """``ip -j addr`` of the node (what kpdoctor reads as node/ip-addr.json)."""
        return self.node.check(["ip", "-j", "addr"])
