"""KP305 mtu-mismatch: tunnel, Pod and uplink MTUs that disagree."""

from __future__ import annotations

import json
from pathlib import Path

from checks.helpers import _link, codes, run
from conftest import one, write

from kpdoctor.model import Severity


def test_vxlan_tunnel_as_large_as_the_uplink(tmp_path: Path) -> None:
    links = [
        _link(1, "lo", 65536, None, flags=["LOOPBACK", "UP"], operstate="UNKNOWN"),
        _link(2, "eth0", 1500, None),
        _link(3, "flannel.1", 1500, "vxlan"),
        _link(4, "cni0", 1500, "bridge"),
        _link(5, "veth1234", 1500, "veth", master="cni0", link_netnsid=0),
    ]
    f = one(run([write(tmp_path, "links.json", json.dumps(links))]), "KP305")
    assert f.severity == Severity.WARNING
    assert "tunnel flannel.1 (vxlan) has MTU 1500, but eth0 (1500) carries at most 1450" in f.summary
    assert "Pod interface(s) have an MTU above the 1500" not in f.summary
    assert any("1450" in x for x in f.fix)


def test_consistent_overlay_mtus_are_quiet(tmp_path: Path) -> None:
    links = [
        _link(2, "eth0", 1500, None),
        _link(3, "flannel.1", 1450, "vxlan"),
        _link(5, "veth1234", 1450, "veth", master="cni0", link_netnsid=0),
    ]
    assert "KP305" not in codes(run([write(tmp_path, "links.json", json.dumps(links))]))


def test_pod_interfaces_above_the_uplink_on_a_routed_cni(tmp_path: Path) -> None:
    text = (
        "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\n"
        "    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n"
        "2: ens5: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT group default qlen 1000\n"
        "    link/ether 02:aa:bb:cc:dd:ee brd ff:ff:ff:ff:ff:ff\n"
        "7: cali1a2b3c4d5e6@if3: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9001 qdisc noqueue state UP mode DEFAULT "
        "group default\n"
        "    link/ether ee:ee:ee:ee:ee:ee brd ff:ff:ff:ff:ff:ff link-netnsid 0\n"
    )
    f = one(run([write(tmp_path, "iplink.txt", text)]), "KP305")
    assert "1 Pod interface(s) have an MTU above the 1500 of the uplink ens5: cali1a2b3c4d5e6 (9001)" in f.summary
    assert f.evidence[0].line == 5
