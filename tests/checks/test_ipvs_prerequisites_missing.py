"""KP113 ipvs-prerequisites-missing: the fallback to iptables mode, and the kernel's ENOENT for a
virtual server without its scheduler module."""

from __future__ import annotations

from checks.helpers import Diag
from conftest import none_of, one

from kpdoctor.model import Confidence, Severity


def test_ipvs_prerequisites_missing_fallback(diagnose: Diag) -> None:
    log = (
        'I1113 10:00:00.000000       1 flags.go:59] FLAG: --proxy-mode="ipvs"\n'
        "E1113 10:00:00.100000       1 server_others.go:107] can't determine whether to use ipvs proxy, error: error getting ipset version, error: executable file not found in $PATH\n"
        "I1113 10:00:00.200000       1 server_others.go:206] Using iptables Proxier.\n"
    )
    f = diagnose({"kp.log": log}).visible()[0]
    assert f.cause == "ipvs-prerequisites-missing" and "ipset" in f.summary and "iptables mode" in f.summary


# k8s-92033 (kubernetes#92033, Gentoo without the ip_vs_* modules), as posted (no klog header).
ENOENT_92033 = (
    'proxier.go:1907] Adding new service "default/kubernetes:https" 10.96.0.1:443/TCP\n'
    'proxier.go:1909] Failed to add IPVS service "default/kubernetes:https": no such file or directory\n'
    "proxier.go:1195] Failed to sync service: 10.96.0.1:443/TCP, err: no such file or directory\n"
    'proxier.go:1909] Failed to add IPVS service "kube-system/kube-dns:dns": no such file or directory\n'
)


def test_ipvs_add_service_enoent_is_a_missing_scheduler_module(diagnose: Diag) -> None:
    f = one(diagnose({"kube-proxy.log": ENOENT_92033}), "KP113")
    assert f.severity == Severity.CRITICAL and f.confidence == Confidence.HIGH
    assert "ip_vs_rr" in f.summary and "ENOENT" in f.summary
    assert f.evidence[0].line == 2 and "Failed to add IPVS service" in f.evidence[0].text
    # The scheduler in the config file is the module named.
    cfg = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nipvs:\n  scheduler: sh\n"
    g = one(diagnose({"kube-proxy.log": ENOENT_92033, "config.yaml": cfg}), "KP113")
    assert "ip_vs_sh" in g.summary


def test_other_ipvs_errors_are_not_a_missing_module(diagnose: Diag) -> None:
    # k8s-71071: a real server that could not be found, not ENOENT from the kernel.
    log = (
        "E1129 21:09:11.422553       1 proxier.go:1485] Failed to get IPVS service, error: Expected only one "
        "service obtained=0\n"
    )
    none_of(diagnose({"kube-proxy.log": log}), "KP113")
