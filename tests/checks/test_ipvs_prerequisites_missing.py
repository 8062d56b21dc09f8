"""KP113 ipvs-prerequisites-missing: the fallback to iptables mode, and the kernel's ENOENT for a
virtual server without its scheduler module."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
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


def _modprobe(module: str, kernel: str, tmp_path: Path) -> str:
    """What modprobe (kmod) itself prints for a module the kernel's module tree does not hold:
    its dry run against an empty tree for that kernel release."""
    root = tmp_path / "root"
    (root / "lib" / "modules" / kernel).mkdir(parents=True, exist_ok=True)
    got = subprocess.run(
        ["modprobe", "-n", "-d", str(root), "-S", kernel, module], capture_output=True, text=True, timeout=10
    )
    assert got.returncode == 1 and "not found in directory" in got.stderr, got.stderr
    return f"# modprobe -- {module}\n" + got.stderr


@pytest.mark.skipif(shutil.which("modprobe") is None, reason="kmod's modprobe (scripts/test installs it)")
def test_modprobe_refusing_a_module_ipvs_mode_requires(diagnose: Diag, tmp_path: Path) -> None:
    """A kernel without an IPVS module kube-proxy loads is shown (critical); on Linux 4.19+,
    nf_conntrack_ipv4 is missing by design (merged into nf_conntrack) and only a kube-proxy
    older than 1.13 (or an unfixed 1.11/1.12 patch release) needs it: suspected until its
    version says, shown for 1.10, nothing for 1.13+."""
    f = one(diagnose({"modprobe.txt": _modprobe("ip_vs_sh", "5.10.0-28-amd64", tmp_path)}), "KP113")
    assert f.severity == Severity.CRITICAL and f.confidence == Confidence.HIGH and not f.suspected
    assert "no ip_vs_sh module" in f.summary and f.evidence[0].line == 2
    merged = _modprobe("nf_conntrack_ipv4", "4.19.0-coreos", tmp_path)
    g = one(diagnose({"modprobe.txt": merged}), "KP113")
    assert g.suspected and g.confidence == Confidence.LOW and "kube-proxy --version" in g.decided_by
    old = "Kubernetes v1.10.11\n"
    h = one(diagnose({"modprobe.txt": merged, "version.txt": old}), "KP113")
    assert not h.suspected and h.severity == Severity.CRITICAL and h.versions_found["kube-proxy"] == "v1.10.11"
    none_of(diagnose({"modprobe.txt": merged, "version.txt": "Kubernetes v1.13.0\n"}), "KP113")
    # before 4.19 the module exists: a kernel without it lacks IPVS's conntrack part
    k = one(diagnose({"modprobe.txt": _modprobe("nf_conntrack_ipv4", "4.18.16-300.fc29.x86_64", tmp_path)}), "KP113")
    assert not k.suspected and k.confidence == Confidence.HIGH
    # a module IPVS does not need is another check's (KP120's kernel features)
    none_of(diagnose({"modprobe.txt": _modprobe("xt_statistic", "5.10.0-28-amd64", tmp_path)}), "KP113")
