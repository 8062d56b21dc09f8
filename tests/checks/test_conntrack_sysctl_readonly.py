"""KP117: nf_conntrack_max read-only in a container's namespace (kind#2240, minikube#11418,
microk8s#119, k/k#141943), in each era's wording; an absent sysctl is KP116's."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import none_of, one

from kpdoctor.model import Confidence, Report

Diagnose = Callable[..., Report]

GLOG = (
    "I0513 15:57:17.447366       1 conntrack.go:100] Set sysctl 'net/netfilter/nf_conntrack_max' to 524288\n"
    "F0513 15:57:17.447425       1 server.go:495] open /proc/sys/net/netfilter/nf_conntrack_max: permission denied\n"
)
STRUCTURED_136 = (
    'server.go:136] "Error running ProxyServer" err="could not set conntrack parameters from kube-proxy '
    'configuration: open /proc/sys/net/netfilter/nf_conntrack_max: permission denied"\n'
)
HASHSIZE = (
    "Sep 26 17:32:16 machine-518 microk8s.daemon-proxy[8435]: F0926 17:32:16.176899    8435 server.go:361] "
    "write /sys/module/nf_conntrack/parameters/hashsize: operation not supported\n"
)


@pytest.mark.parametrize("log", [GLOG, STRUCTURED_136, HASHSIZE])
def test_refused_write_in_every_era(diagnose: Diagnose, log: str) -> None:
    f = one(diagnose({"kube-proxy.log": log}), "KP117")
    assert "maxPerCore: 0" in " ".join(f.fix)
    none_of(diagnose({"kube-proxy.log": log}), "KP116")


def test_kernel_release_decides_confidence(diagnose: Diagnose) -> None:
    with_new = one(diagnose({"kube-proxy.log": GLOG, "uname.txt": "5.12.3-arch1-1\n"}), "KP117")
    assert with_new.confidence == Confidence.HIGH and "5.12.2" in with_new.summary
    with_old = one(diagnose({"kube-proxy.log": GLOG, "uname.txt": "5.4.0\n"}), "KP117")
    assert with_old.confidence == Confidence.MEDIUM and "predates" in with_old.summary


def test_absent_sysctl_is_not_this(diagnose: Diagnose) -> None:
    log = (
        'E0126 16:58:13.292840      12 server.go:134] "Error running ProxyServer" err="open '
        '/proc/sys/net/netfilter/nf_conntrack_max: no such file or directory"\n'
    )
    report = diagnose({"kube-proxy.log": log})
    none_of(report, "KP117")
    one(report, "KP116")
