"""Who answers ARP for a Service address: real arping on a segment of namespaces.

Namespaces: a segment (a Linux bridge) with a client and two nodes on it. Each node binds the
same Service address on a down ``kube-ipvs0`` interface, as kube-proxy's IPVS mode binds every
Service address it proxies. With ``arp_ignore=0`` (the kernel's default, kube-proxy's without
``strictARP``) both nodes answer the client's ``arping`` for that address; with ``arp_ignore=1``
and ``arp_announce=2`` (what ``strictARP`` sets) neither does. kpdoctor, given only the arping
output, names IPVS without strict ARP as the suspected cause and asks for ``/proxyMode``; with
kube-proxy's own answer (``ipvs``) beside it, the cause is found; a strict segment's output gives
nothing. Every address is the lab's own; nothing leaves the namespaces.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from .kpdoctor_run import diagnose_json
from .netns import Netns, require_lab

require_lab()
if shutil.which("arping") is None:
    pytest.skip("arping is not installed (scripts/test installs iputils-arping as root)", allow_module_level=True)

CLIENT = "10.251.0.11"
NODES = ("10.251.0.21", "10.251.0.22")
SERVICE = "10.251.0.40"


@contextmanager
def _segment(strict: bool) -> Iterator[tuple[Netns, list[Netns]]]:
    """A client and two nodes bridged on one /24; each node binds SERVICE on a down kube-ipvs0."""
    with ExitStack() as stack:
        seg = stack.enter_context(Netns())
        client = stack.enter_context(Netns())
        nodes = [stack.enter_context(Netns()) for _ in NODES]
        seg.check(["ip", "link", "add", "br0", "type", "bridge"])
        seg.check(["ip", "link", "set", "br0", "up"])
        for i, (ns, ip) in enumerate([(client, CLIENT), *zip(nodes, NODES, strict=True)]):
            seg.check(["ip", "link", "add", f"port{i}", "type", "veth", "peer", "name", "eth0", "netns", ns.name])
            seg.check(["ip", "link", "set", f"port{i}", "master", "br0"])
            seg.check(["ip", "link", "set", f"port{i}", "up"])
            ns.check(["ip", "link", "set", "lo", "up"])
            ns.check(["ip", "addr", "add", f"{ip}/24", "dev", "eth0"])
            ns.check(["ip", "link", "set", "eth0", "up"])
        for node in nodes:
            # a bridge stands in for the dummy device kube-proxy creates (not in every kernel)
            node.check(["ip", "link", "add", "kube-ipvs0", "type", "bridge"])
            node.check(["ip", "addr", "add", f"{SERVICE}/32", "dev", "kube-ipvs0"])
            if strict:
                node.check(["sysctl", "-q", "-w", "net.ipv4.conf.all.arp_ignore=1"])
                node.check(["sysctl", "-q", "-w", "net.ipv4.conf.all.arp_announce=2"])
        yield client, nodes


def _stage(strict: bool, arping: tuple[str, ...] = ("arping",)) -> tuple[str, str]:
    """(the client's arping output, the first node's arp sysctls) on a segment staged so."""
    with _segment(strict) as (client, nodes):
        out = client.run([*arping, "-c", "3", "-w", "4", "-I", "eth0", SERVICE], timeout=20).stdout
        sysctl = nodes[0].check(["sysctl", "net.ipv4.conf.all.arp_ignore", "net.ipv4.conf.all.arp_announce"])
    return out, sysctl


def _kp317(tmp_path: Path, files: dict[str, str]) -> list[dict[str, Any]]:
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths.append(tmp_path / name)
    return [f for f in diagnose_json(*paths)["findings"] if f["code"] == "KP317"]


@pytest.fixture(scope="module", params=[("arping",), ("busybox", "arping")], ids=["iputils", "busybox"])
def loose(request: pytest.FixtureRequest) -> tuple[str, str]:
    """iputils' arping (Debian's, RHEL's) and busybox's (a node's toolbox or a debug Pod) print alike."""
    argv: tuple[str, ...] = request.param
    return _stage(strict=False, arping=argv)


def test_two_nodes_answering_for_a_service_address_is_the_suspected_cause(loose: tuple[str, str], tmp_path: Path) -> None:
    arping, _ = loose
    assert arping.count(f"Unicast reply from {SERVICE} [") >= 2, arping
    (f,) = _kp317(tmp_path, {"arping.txt": arping})
    assert f["cause"] == "ipvs-strict-arp-disabled" and f.get("suspected") and f["confidence"] == "low", f
    assert any("/proxyMode" in cmd for cmd in f["decided_by"]), f["decided_by"]
    assert f"hosts answer ARP for {SERVICE}" in f["summary"], f["summary"]
    assert len({c["text"].split("[")[1][:17].lower() for c in f["evidence"]}) == 2  # each MAC's reply cited


def test_kube_proxy_s_own_word_that_it_runs_ipvs_makes_it_the_cause(loose: tuple[str, str], tmp_path: Path) -> None:
    arping, sysctl = loose
    (f,) = _kp317(tmp_path, {"arping.txt": arping, "proxyMode.txt": "ipvs"})
    assert not f.get("suspected") and f["confidence"] == "medium", f
    assert "IPVS mode" in f["summary"]
    # the node's own loose settings beside it show why: confirmed at high confidence
    (f,) = _kp317(tmp_path, {"arping.txt": arping, "proxyMode.txt": "ipvs", "sysctl.txt": sysctl})
    assert not f.get("suspected") and f["confidence"] == "high", f
    assert any("arp_ignore = 0" in c["text"] for c in f["evidence"]), f["evidence"]


def test_iptables_mode_answers_are_not_blamed_on_ipvs(loose: tuple[str, str], tmp_path: Path) -> None:
    arping, _ = loose
    assert _kp317(tmp_path, {"arping.txt": arping, "proxyMode.txt": "iptables"}) == []


def test_a_strict_segment_gives_nothing(tmp_path: Path) -> None:
    arping, sysctl = _stage(strict=True)
    assert "reply from" not in arping and "Received 0 response" in arping, arping
    assert _kp317(tmp_path, {"arping.txt": arping}) == []
    assert _kp317(tmp_path, {"arping.txt": arping, "proxyMode.txt": "ipvs", "sysctl.txt": sysctl}) == []
