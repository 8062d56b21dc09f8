"""A bridged node whose Pods reach a Service on the same node, captured with real tcpdump.

Namespaces: a node with a Linux bridge (as flannel's cni0 or the bridge plugin) and two Pods on
it, a client and a backend, in one /24; a Service address DNATed to the backend by iptables in
the node. With ``net.bridge.bridge-nf-call-iptables=0`` in the node's namespace, the backend's
reply is switched straight to the client on the bridge, never translated back: the client gets
a SYN-ACK from the backend's own address and resets it. ``tcpdump -i any -nn`` in the node sees
all of it. kpdoctor, given only that capture, names br_netfilter as the suspected cause and what
decides it; given the sysctl too, it is proven. With the setting at 1 the same capture (the
client connects) gives nothing. Every address is the lab's own; nothing leaves the namespaces.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .kpdoctor_run import diagnose_json
from .netns import Netns, require_lab, serve_and_capture

require_lab()
if shutil.which("tcpdump") is None:
    pytest.skip("tcpdump is not installed (scripts/test installs it as root)", allow_module_level=True)

SERVICE = "10.32.0.102"
CLIENT, BACKEND, GATEWAY = "10.200.2.63", "10.200.2.65", "10.200.2.1"
RULES = f"""*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d {SERVICE}/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination {BACKEND}:80
COMMIT
"""
SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 80)); s.listen(16); print("ready", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"ok"); c.close()
"""
CLIENT_SRC = r"""
import socket, sys
s = socket.socket(); s.settimeout(1.5)
try:
    s.connect((sys.argv[1], 80)); print(s.recv(8).decode() or "closed")
except OSError as e:
    print(type(e).__name__)
"""


def _bridged(node: Netns, pods: dict[str, Netns]) -> None:
    node.check(["ip", "link", "set", "lo", "up"])
    node.check(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
    node.check(["ip", "link", "add", "cni0", "type", "bridge"])
    node.check(["ip", "addr", "add", f"{GATEWAY}/24", "dev", "cni0"])
    node.check(["ip", "link", "set", "cni0", "up"])
    for i, (ip, pod) in enumerate(pods.items()):
        pod.check(["ip", "link", "set", "lo", "up"])
        node.check(["ip", "link", "add", f"veth{i}", "type", "veth", "peer", "name", "eth0", "netns", pod.name])
        node.check(["ip", "link", "set", f"veth{i}", "master", "cni0"])
        node.check(["ip", "link", "set", f"veth{i}", "up"])
        pod.check(["ip", "addr", "add", f"{ip}/24", "dev", "eth0"])
        pod.check(["ip", "link", "set", "eth0", "up"])
        pod.check(["ip", "route", "add", "default", "via", GATEWAY])
    node.check(["iptables-legacy-restore"], input=RULES)


def _stage(bridge_nf: int) -> Iterator[tuple[str, str, str]]:
    """(what the client got, tcpdump's output, the sysctl's output) on a node staged so."""
    with Netns("kpd-") as node, Netns("kpd-") as client, Netns("kpd-") as backend:
        _bridged(node, {CLIENT: client, BACKEND: backend})
        node.check(["sysctl", "-q", "-w", f"net.bridge.bridge-nf-call-iptables={bridge_nf}"])
        got, out = serve_and_capture(
            backend.exec_argv([sys.executable, "-c", SERVER, BACKEND]),
            node.exec_argv(["tcpdump", "-i", "any", "-nn", "-l", "-U", "tcp", "port", "80"]),
            lambda: client.check([sys.executable, "-c", CLIENT_SRC, SERVICE], timeout=20).strip(),
        )
        sysctl = node.check(["sysctl", "net.bridge.bridge-nf-call-iptables"])
        yield got, out, sysctl


def _findings(tmp_path: Path, files: dict[str, str]) -> list[dict[str, Any]]:
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths.append(tmp_path / name)
    report = diagnose_json(*paths)
    return [f for f in report["findings"] if f["code"] == "KP309"]


def test_a_reply_that_skips_the_bridge_s_netfilter_is_named_from_the_capture(tmp_path: Path) -> None:
    got, capture, sysctl = next(_stage(0))
    assert got != "ok", (got, capture)  # the client never connects: its stack resets the reply
    assert f"{BACKEND}.80 > {CLIENT}." in capture and "Flags [R]" in capture, capture
    (kp309,) = _findings(tmp_path, {"tcpdump.txt": capture})
    assert kp309["cause"] == "bridge-netfilter-disabled" and kp309["severity"] == "warning"
    assert f"{SERVICE}:80 was answered from {BACKEND}:80" in kp309["summary"]
    assert kp309.get("suspected") and "sysctl net.bridge.bridge-nf-call-iptables" in kp309["decided_by"]
    # with the node's setting beside the capture, it is proven
    (proven,) = _findings(tmp_path, {"tcpdump.txt": capture, "sysctl.txt": sysctl})
    assert proven["severity"] == "critical" and not proven.get("suspected"), proven


def test_a_bridge_that_passes_netfilter_gives_no_finding(tmp_path: Path) -> None:
    got, capture, sysctl = next(_stage(1))
    assert got == "ok", (got, capture)
    assert f"{SERVICE}.80 > {CLIENT}." in capture, capture  # the translated reply
    assert _findings(tmp_path, {"tcpdump.txt": capture}) == []
    assert _findings(tmp_path, {"tcpdump.txt": capture, "sysctl.txt": sysctl}) == []
