"""KP115: run-time panics matched to the table of known bugs by message, frames and mode; the
1.18 IPVS-probe panic stays KP106's; another program's panic is not kube-proxy's."""

from __future__ import annotations

from collections.abc import Callable

from conftest import one

from kpdoctor.model import Confidence, Report

Diagnose = Callable[..., Report]

METAPROXIER = (
    'E0418 16:30:33.337036       1 runtime.go:78] Observed a panic: "invalid memory address or nil pointer '
    'dereference" (runtime error: invalid memory address or nil pointer dereference)\n'
    "goroutine 161 [running]:\n"
    "k8s.io/kubernetes/vendor/k8s.io/apimachinery/pkg/util/runtime.logPanic(0x16d00a0, 0x2886660)\n"
    "        /workspace/src/k8s.io/kubernetes/vendor/k8s.io/apimachinery/pkg/util/runtime/runtime.go:74 +0xa3\n"
    "panic(0x16d00a0, 0x2886660)\n"
    "        /usr/local/go/src/runtime/panic.go:679 +0x1b2\n"
    "k8s.io/kubernetes/pkg/proxy/metaproxier.(*metaProxier).OnServiceAdd(0xc000424ba0, 0xc000203b00)\n"
    "        /workspace/src/k8s.io/kubernetes/pkg/proxy/metaproxier/meta_proxier.go:65 +0x2b\n"
)
TICKER = (
    "I1116 12:50:34.001621       1 server_others.go:164] Using ipvs Proxier.\n"
    "I1116 12:50:34.062455       1 config.go:202] Starting service config controller\n"
    "panic: non-positive interval for NewTicker\n"
    "\n"
    "goroutine 1 [running]:\n"
    "time.NewTicker(0x0, 0x8)\n"
    "k8s.io/kubernetes/pkg/proxy/ipvs.(*Proxier).SyncLoop(0xc420a68f20)\n"
)


def test_dual_stack_metaproxier_panic(diagnose: Diagnose) -> None:
    f = one(diagnose({"kube-proxy.log": METAPROXIER}), "KP115")
    assert "86773" in f.summary and "v1.19.0" in f.fixed_in and f.confidence == Confidence.HIGH


def test_zero_ipvs_sync_period(diagnose: Diagnose) -> None:
    f = one(diagnose({"kube-proxy.log": TICKER}), "KP115")
    assert "syncPeriod" in " ".join(f.fix)


def test_unknown_panic_with_kube_proxy_frames_is_low_confidence(diagnose: Diagnose) -> None:
    log = (
        "panic: runtime error: index out of range [3] with length 3\n"
        "\n"
        "goroutine 212 [running]:\n"
        "k8s.io/kubernetes/pkg/proxy/iptables.(*Proxier).syncProxyRules(0xc000160000)\n"
    )
    f = one(diagnose({"kube-proxy.log": log}), "KP115")
    assert f.confidence == Confidence.LOW and "syncProxyRules" in f.summary


def test_another_programs_panic_is_not_kube_proxys(diagnose: Diagnose) -> None:
    log = (
        "Dec 05 08:05:15 abc k3s[10542]: panic: F1205 08:05:15.257193   10542 network_policy_controller.go:413] "
        "failed to list rules in filter table INPUT chain\n"
    )
    assert not [f for f in diagnose({"k3s.log": log}).findings if f.code == "KP115"]


def test_frames_under_kubernetes_old_import_path_are_read(diagnose: Diagnose) -> None:
    """Before 1.1 Kubernetes was imported as github.com/GoogleCloudPlatform/kubernetes: a panic's
    frames under that path are kube-proxy's too (Go's stack format: the function, then its file)."""
    log = (
        "panic: runtime error: invalid memory address or nil pointer dereference\n"
        "[signal 0xb code=0x1 addr=0x0 pc=0x4b4e17]\n"
        "\n"
        "goroutine 9 [running]:\n"
        "github.com/GoogleCloudPlatform/kubernetes/pkg/proxy.(*Proxier).OnUpdate(0x0, 0xc21010a200, 0x6, 0x8)\n"
        "        /go/src/github.com/GoogleCloudPlatform/kubernetes/pkg/proxy/proxier.go:445 +0x28d\n"
    )
    r = diagnose({"kube-proxy.log": log})
    assert r.findings[0].cause == "kube-proxy-panic"
    assert "pkg/proxy.(*Proxier).OnUpdate" in r.findings[0].summary
