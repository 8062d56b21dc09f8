"""Two nodes on a VXLAN overlay, a Service's traffic masqueraded twice, captured with real tools.

Namespaces: node A and node B joined by a veth pair (the underlay, 192.168.50.0/24), each with a
VXLAN device as flannel creates it (``flannel.1``, VNI 1, UDP 8472, outer UDP checksums on,
transmit checksum offload on) and a route to the other's Pod subnet through it; a "Pod" address on
B answers on 8080. Node A holds kube-proxy-shaped nat rules for a ClusterIP whose endpoint is on
B, loaded with real ``iptables-legacy-restore``: a host process's connection to it is marked
(0x4000) and masqueraded. In kube-proxy 1.16.0-1.18.5's form (MASQUERADE --random-fully of
marked packets, the mark kept) the outer VXLAN packet is masqueraded again and leaves with a wrong
UDP checksum: B's tcpdump -vv says ``[bad udp cksum ...!]`` and B drops it. kpdoctor, given A's
rules, A's ``ethtool -k flannel.1`` and B's capture, proves the cause; given the rules and the
offload alone, suspects it; the fixed form (``-j MARK --xor-mark 0x4000`` first) gives nothing.
Every address is the lab's own; nothing leaves the namespaces.
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
for _tool in ("tcpdump", "ethtool"):
    if shutil.which(_tool) is None:
        pytest.skip(f"{_tool} is not installed (scripts/test installs it as root)", allow_module_level=True)

CLUSTER_IP, POD, PORT = "10.96.0.10", "10.244.1.5", 8080
UNDERLAY = {"a": "192.168.50.1", "b": "192.168.50.2"}
FLANNEL = {"a": ("10.244.0.0", "02:00:00:00:00:01"), "b": ("10.244.1.0", "02:00:00:00:00:02")}
BEFORE_FIX = (
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" '
    "-m mark --mark 0x4000/0x4000 -j MASQUERADE --random-fully\n"
)
AFTER_FIX = (
    "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n"
    "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000\n"
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully\n'
)
RULES = f"""*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-WEB - [0:0]
:KUBE-SEP-WEB - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-SERVICES -d {CLUSTER_IP}/32 -p tcp -m comment --comment "default/web cluster IP" -m tcp --dport 80 -j KUBE-SVC-WEB
-A KUBE-SVC-WEB ! -s 10.244.0.0/16 -d {CLUSTER_IP}/32 -p tcp -m comment --comment "default/web cluster IP" -m tcp --dport 80 -j KUBE-MARK-MASQ
-A KUBE-SVC-WEB -m comment --comment "default/web" -j KUBE-SEP-WEB
-A KUBE-SEP-WEB -p tcp -m comment --comment "default/web" -m tcp -j DNAT --to-destination {POD}:{PORT}
%sCOMMIT
"""
SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16); print("ready", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"ok"); c.close()
"""
CLIENT = r"""
import socket, sys, time
t = time.monotonic()
try:
    s = socket.create_connection((sys.argv[1], 80), timeout=6); s.recv(8); print("ok", round(time.monotonic() - t, 2))
except OSError as e:
    print(type(e).__name__)
"""


def _node(ns: Netns, me: str, peer: str) -> None:
    """A node's overlay: flannel.1 (outer checksums and checksum offload on), a route to the
    peer's Pod subnet through it, and the peer's VTEP entries (what flanneld writes)."""
    addr, mac = FLANNEL[me]
    peer_addr, peer_mac = FLANNEL[peer]
    ns.check(["ip", "link", "set", "lo", "up"])
    ns.check(["ip", "link", "add", "flannel.1", "address", mac, "type", "vxlan", "id", "1", "dstport", "8472",
              "local", UNDERLAY[me], "dev", f"v{me}", "nolearning", "udpcsum"])  # fmt: skip
    ns.check(["ethtool", "-K", "flannel.1", "tx-checksum-ip-generic", "on"])
    ns.check(["ip", "addr", "add", f"{addr}/32", "dev", "flannel.1"])
    ns.check(["ip", "link", "set", "flannel.1", "up"])
    subnet = peer_addr.rsplit(".", 1)[0] + ".0/24"
    ns.check(["ip", "route", "add", subnet, "via", peer_addr, "dev", "flannel.1", "onlink"])
    ns.check(["ip", "neigh", "add", peer_addr, "lladdr", peer_mac, "dev", "flannel.1", "nud", "permanent"])
    ns.check(["bridge", "fdb", "add", peer_mac, "dev", "flannel.1", "dst", UNDERLAY[peer], "self", "permanent"])
    for key in ("all", "default", "flannel/1", f"v{me}"):
        ns.check(["sysctl", "-q", "-w", f"net.ipv4.conf.{key}.rp_filter=0"])


def _stage(postrouting: str) -> Iterator[dict[str, str]]:
    """What the client got, and the evidence a user would paste, on nodes staged so."""
    with Netns("kpd-") as a, Netns("kpd-") as b:
        a.check(["ip", "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b.name])
        for ns, me in ((a, "a"), (b, "b")):
            ns.check(["ip", "addr", "add", f"{UNDERLAY[me]}/24", "dev", f"v{me}"])
            ns.check(["ip", "link", "set", f"v{me}", "up"])
            ns.check(["ethtool", "-K", f"v{me}", "tx", "off"])  # the underlay finishes checksums itself
        _node(a, "a", "b")
        _node(b, "b", "a")
        a.check(["ip", "route", "add", "default", "via", UNDERLAY["b"], "dev", "va"])
        b.check(["ip", "addr", "add", f"{POD}/32", "dev", "lo"])
        a.check(["iptables-legacy-restore"], input=RULES % postrouting)
        got, capture = serve_and_capture(
            b.exec_argv([sys.executable, "-c", SERVER, POD, str(PORT)]),
            b.exec_argv(["tcpdump", "-i", "vb", "-nn", "-vv", "-l", "-U", "udp", "port", "8472"]),
            lambda: a.check([sys.executable, "-c", CLIENT, CLUSTER_IP], timeout=20).strip(),
        )
        yield {
            "got": got,
            "iptables-save.txt": a.check(["iptables-legacy-save"]),
            "ethtool-k.txt": a.check(["ethtool", "-k", "flannel.1"]),
            "tcpdump.txt": capture,
            "nstat.txt": b.check(["nstat", "-az", "UdpInCsumErrors"]),
        }


def _kp316(tmp_path: Path, staged: dict[str, str], *names: str) -> list[dict[str, Any]]:
    paths = []
    for name in names:
        (tmp_path / name).write_text(staged[name])
        paths.append(tmp_path / name)
    report = diagnose_json(*paths)
    return [f for f in report["findings"] if f["code"] == "KP316"]


def test_a_vxlan_packet_masqueraded_twice_is_dropped_and_named(tmp_path: Path) -> None:
    staged = next(_stage(BEFORE_FIX))
    capture = staged["tcpdump.txt"]
    if "bad udp cksum" not in capture:
        pytest.skip(f"this kernel computes the NATed VXLAN checksum right (client: {staged['got']})")
    (proven,) = _kp316(tmp_path, staged, "tcpdump.txt", "iptables-save.txt", "ethtool-k.txt")
    assert proven["cause"] == "vxlan-checksum-offload-bug" and proven["severity"] == "critical", proven
    assert proven["confidence"] == "high" and not proven.get("suspected"), proven
    assert "without clearing the mark" in proven["summary"], proven
    # the rules and the device's offload alone: suspected, decided by a capture
    (suspected,) = _kp316(tmp_path, staged, "iptables-save.txt", "ethtool-k.txt")
    assert suspected["severity"] == "warning" and suspected.get("suspected"), suspected
    assert any("tcpdump" in d for d in suspected["decided_by"]), suspected
    # the capture alone proves it too (at medium confidence: nothing says why)
    (alone,) = _kp316(tmp_path, staged, "tcpdump.txt")
    assert alone["severity"] == "critical" and alone["confidence"] == "medium", alone


def test_kube_proxy_s_fixed_masquerade_gives_no_finding(tmp_path: Path) -> None:
    staged = next(_stage(AFTER_FIX))
    assert staged["got"].startswith("ok"), staged["got"]
    assert "bad udp cksum" not in staged["tcpdump.txt"], staged["tcpdump.txt"]
    assert _kp316(tmp_path, staged, "tcpdump.txt", "iptables-save.txt", "ethtool-k.txt", "nstat.txt") == []
