"""KP308 ip-forward-disabled."""

from __future__ import annotations

from pathlib import Path

from checks.helpers import IPVS_CONFIG, run
from conftest import one, write

from kpdoctor.model import Severity


def test_forwarding_off(tmp_path: Path) -> None:
    s = write(tmp_path, "s.txt", "net.ipv4.ip_forward = 0\nnet.ipv6.conf.all.forwarding = 0\n")
    assert one(run([s]), "KP308").severity == Severity.WARNING  # nothing says this is a Kubernetes node
    f = one(run([s, write(tmp_path, "config.yaml", IPVS_CONFIG)]), "KP308")
    assert f.severity == Severity.CRITICAL
    assert f.summary.startswith("net.ipv4.ip_forward = 0")  # IPv6 only matters with IPv6 Services
    assert f.fix[0].startswith("sysctl -w net.ipv4.ip_forward=1")
