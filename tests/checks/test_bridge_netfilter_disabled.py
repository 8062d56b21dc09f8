"""KP309 bridge-netfilter-disabled: bridged Pods without br_netfilter."""

from __future__ import annotations

import json
from pathlib import Path

from checks.helpers import _link, codes, run
from conftest import one, write

from kpdoctor.model import Severity


def test_bridged_pods_without_br_netfilter(tmp_path: Path) -> None:
    links = [
        _link(2, "eth0", 1500, None),
        _link(4, "cni0", 1450, "bridge"),
        _link(5, "veth1234", 1450, "veth", master="cni0", link_netnsid=0),
    ]
    lk = write(tmp_path, "links.json", json.dumps(links))
    off = write(tmp_path, "s.txt", "net.bridge.bridge-nf-call-iptables = 0\nnet.ipv4.ip_forward = 1\n")
    f = one(run([lk, off]), "KP309")
    assert f.severity == Severity.CRITICAL
    assert "attached to bridge cni0" in f.summary
    on = write(tmp_path, "s2.txt", "net.bridge.bridge-nf-call-iptables = 1\nnet.ipv4.ip_forward = 1\n")
    assert "KP309" not in codes(run([lk, on]))
