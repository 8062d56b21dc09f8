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


# What programs print when the sysctl's file is missing (br_netfilter not loaded), as posted:
# flannel's klog line, procps' sysctl, kubeadm's preflight.
MISSING_FILE = [
    "E0316 18:45:18.787279       1 main.go:268] Failed to check br_netfilter: stat "
    "/proc/sys/net/bridge/bridge-nf-call-iptables: no such file or directory",
    "sysctl: cannot stat /proc/sys/net/bridge/bridge-nf-call-iptables: No such file or directory",
    "\t[ERROR FileContent--proc-sys-net-bridge-bridge-nf-call-iptables]: "
    "/proc/sys/net/bridge/bridge-nf-call-iptables does not exist",
]


def test_a_program_that_found_the_bridge_sysctl_missing_says_br_netfilter_is_not_loaded(tmp_path: Path) -> None:
    for n, line in enumerate(MISSING_FILE):
        log = write(tmp_path, f"out-{n}.txt", line + "\n")
        f = one(run([log]), "KP309")
        assert f.suspected and f.severity == Severity.INFO and "ip -d link" in f.decided_by
        links = [
            _link(2, "eth0", 1500, None),
            _link(4, "cni0", 1450, "bridge"),
            _link(5, "veth1234", 1450, "veth", master="cni0", link_netnsid=0),
        ]
        lk = write(tmp_path, f"links-{n}.json", json.dumps(links))
        f = one(run([log, lk]), "KP309")
        assert not f.suspected and f.severity == Severity.WARNING and "attached to bridge cni0" in f.summary
