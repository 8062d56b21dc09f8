"""KP106 kube-proxy-startup-panic: the 1.18 IPVS module-probe panic, classified by the panic's frames;
other nil-pointer panics (dual-stack handler, server setup, run time) are not it."""

from __future__ import annotations

import pytest
from checks.helpers import Diag
from conftest import all_findings, none_of, one

from kpdoctor.checks.sync import panics
from kpdoctor.model import Confidence, Severity


def test_startup_panic_in_previous_container(diagnose: Diag) -> None:
    prev = (
        "I0401 08:00:00.000000       1 server.go:548] Version: v1.18.4-tke.20\n"
        "I0401 08:00:00.100000       1 server_others.go:259] Using ipvs Proxier.\n"
        "panic: runtime error: invalid memory address or nil pointer dereference\n"
        "[signal SIGSEGV: segmentation violation code=0x1 addr=0x50 pc=0x1514fb8]\n\n"
        "goroutine 1 [running]:\n"
        "k8s.io/kubernetes/pkg/proxy/ipvs.(*Proxier).syncProxyRules(0xc0001e2000)\n"
    )
    cur = (
        "I0401 08:00:05.000000       1 server_others.go:259] Using ipvs Proxier.\n"
        "I0401 08:00:06.000000       1 proxier.go:1000] syncProxyRules took 20ms\n"
    )
    r = diagnose(
        {
            "prev/$ kubectl logs -p": "",
            "session.txt": "$ kubectl -n kube-system logs -p kube-proxy-abc\n"
            + prev
            + "$ kubectl -n kube-system logs kube-proxy-abc\n"
            + cur,
        }
    )
    f = next(f for f in all_findings(r) if f.cause == "kube-proxy-startup-panic")
    assert f.ongoing is False and f.severity == Severity.WARNING
    assert "v1.18.4-tke.26" in f.fixed_in


# k3s#2001: the 1.18 IPVS bug as k3s logs it (addr=0x50, crashes once, then runs).
IPVS_PROBE_2001 = """\
I0710 00:12:02.523887    2500 shared_informer.go:230] Caches are synced for endpoints config
panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x50 pc=0x2bafa28]

goroutine 11600 [running]:
github.com/rancher/k3s/vendor/k8s.io/kubernetes/pkg/proxy/ipvs.(*Proxier).syncService(0xc00e8845a0, 0xc006809f20, 0x18, 0xc002b25590, 0xc0079f7701, 0x3, 0xc007c38d7b)
\t/go/src/github.com/rancher/k3s/vendor/k8s.io/kubernetes/pkg/proxy/ipvs/proxier.go:1903 +0x48
github.com/rancher/k3s/vendor/k8s.io/kubernetes/pkg/proxy/ipvs.(*Proxier).syncProxyRules(0xc00e8845a0)
\t/go/src/github.com/rancher/k3s/vendor/k8s.io/kubernetes/pkg/proxy/ipvs/proxier.go:1186 +0xcdd
"""
# k8s-86773: dual-stack service handler, 1.18's crash-handler form, then 1.17's Go form.
META_118 = """\
I0418 16:30:33.332872       1 shared_informer.go:223] Waiting for caches to sync for service config
E0418 16:30:33.337036       1 runtime.go:78] Observed a panic: "invalid memory address or nil pointer dereference" (runtime error: invalid memory address or nil pointer dereference)
goroutine 161 [running]:
k8s.io/kubernetes/vendor/k8s.io/apimachinery/pkg/util/runtime.logPanic(0x16d00a0, 0x2886660)
        /workspace/anago-v1.18.1-beta.0.38+49aac775931dd1/src/k8s.io/kubernetes/_output/dockerized/go/src/k8s.io/kubernetes/vendor/k8s.io/apimachinery/pkg/util/runtime/runtime.go:74 +0xa3
k8s.io/kubernetes/vendor/k8s.io/apimachinery/pkg/util/runtime.HandleCrash(0x0, 0x0, 0x0)
        /workspace/anago-v1.18.1-beta.0.38+49aac775931dd1/src/k8s.io/kubernetes/_output/dockerized/go/src/k8s.io/kubernetes/vendor/k8s.io/apimachinery/pkg/util/runtime/runtime.go:48 +0x82
panic(0x16d00a0, 0x2886660)
        /usr/local/go/src/runtime/panic.go:679 +0x1b2
k8s.io/kubernetes/pkg/proxy/metaproxier.(*metaProxier).OnServiceAdd(0xc000424ba0, 0xc000203b00)
        /workspace/anago-v1.18.1-beta.0.38+49aac775931dd1/src/k8s.io/kubernetes/_output/dockerized/go/src/k8s.io/kubernetes/pkg/proxy/metaproxier/meta_proxier.go:65 +0x2b
"""
META_117 = """\
panic: runtime error: invalid memory address or nil pointer dereference [recovered]
\tpanic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x14be59b]

goroutine 29 [running]:
k8s.io/kubernetes/vendor/k8s.io/apimachinery/pkg/util/runtime.HandleCrash(0x0, 0x0, 0x0)
\t/workspace/anago-v1.17.0-rc.2.10+70132b0f130acc/src/k8s.io/kubernetes/_output/dockerized/go/src/k8s.io/kubernetes/vendor/k8s.io/apimachinery/pkg/util/runtime/runtime.go:55 +0x105
panic(0x1682120, 0x27f9a40)
\t/usr/local/go/src/runtime/panic.go:679 +0x1b2
k8s.io/kubernetes/pkg/proxy/ipvs.(*metaProxier).OnServiceAdd(0xc0003ba330, 0xc0001c3200)
\t/workspace/anago-v1.17.0-rc.2.10+70132b0f130acc/src/k8s.io/kubernetes/_output/dockerized/go/src/k8s.io/kubernetes/pkg/proxy/ipvs/meta_proxier.go:65 +0x2b
"""
# kubernetes#109052: a run-time panic in the IPVS proxier after syncs succeeded.
RUNTIME_109052 = """\
I0326 13:45:33.879885       1 proxier.go:1026] "syncProxyRules complete" elapsed="33.302265ms"
panic: runtime error: invalid memory address or nil pointer dereference
[signal SIGSEGV: segmentation violation code=0x1 addr=0x18 pc=0x18999b5]

goroutine 79 [running]:
k8s.io/kubernetes/pkg/proxy/ipvs.(*Proxier).syncProxyRules(0xc000159e00)
\t/workspace/src/k8s.io/kubernetes/_output/dockerized/go/src/k8s.io/kubernetes/pkg/proxy/ipvs/proxier.go:1263 +0x6195
"""


def test_the_ipvs_probe_bug_is_known_by_its_frames(diagnose: Diag) -> None:
    f = one(diagnose({"kp.log": IPVS_PROBE_2001}), "KP106")
    assert f.confidence == Confidence.HIGH and "pkg/proxy/ipvs.(*Proxier).syncService" in f.summary
    assert any("proxier.go" not in c.text and "syncService" in c.text for c in f.evidence)
    assert "v1.18.4-tke.26" in f.fixed_in


@pytest.mark.parametrize("log", [META_118, META_117], ids=["crash-handler-1.18", "go-panic-1.17"])
def test_a_dual_stack_handler_panic_is_not_the_ipvs_probe(diagnose: Diag, log: str) -> None:
    f = one(diagnose({"kp.log": log}), "KP106")
    assert f.confidence == Confidence.LOW and "metaProxier).OnServiceAdd" in f.summary
    assert "not the 1.18 IPVS module-probe bug" in f.summary and "1.18.0-era" not in f.summary
    assert f.fixed_in == [] and not any("IPVS modules" in x for x in f.fix)
    assert f.explained_by[0] == "kube-proxy-panic"


def test_a_server_setup_panic_is_not_the_ipvs_probe(diagnose: Diag) -> None:
    # k8s-48177: --cleanup-iptables=true on hyperkube 1.7.0-rc.1.
    log = (
        "W0628 06:19:08.165958       1 server.go:188] WARNING: all flags other than --config, --write-config-to, "
        "and --cleanup-iptables are deprecated. Please begin using a config file ASAP.\n"
        "panic: runtime error: invalid memory address or nil pointer dereference\n"
        "[signal SIGSEGV: segmentation violation code=0x1 addr=0x20 pc=0x3747724]\n\n"
        "goroutine 1 [running]:\n"
        "k8s.io/kubernetes/cmd/kube-proxy/app.(*ProxyServer).Run(0xc42069c240, 0xc420884d01, 0xc4203e7700)\n"
        "\t/go/src/k8s.io/kubernetes/_output/dockerized/go/src/k8s.io/kubernetes/cmd/kube-proxy/app/server.go:630 +0x74\n"
    )
    f = one(diagnose({"kp.log": log}), "KP106")
    assert "cmd/kube-proxy/app.(*ProxyServer).Run" in f.summary and f.confidence == Confidence.LOW


def test_a_panic_without_frames_is_attributed_only_in_ipvs_mode(diagnose: Diag) -> None:
    # kubernetes#89729's start-up lines, the seed's panic lines (no goroutine stack pasted).
    start = (
        "I0401 11:10:20.858228       1 server_others.go:259] Using ipvs Proxier.\n"
        "I0401 11:10:20.859307       1 server.go:583] Version: v1.18.0\n"
    )
    panic = (
        "panic: runtime error: invalid memory address or nil pointer dereference\n"
        "[signal SIGSEGV: segmentation violation code=0x1 addr=0x50 pc=0x1514fb8]\n"
    )
    f = one(diagnose({"kp.log": start + panic}), "KP106")
    assert f.confidence == Confidence.MEDIUM and "no stack frames to confirm" in f.summary
    assert "1.18.0-era builds have this bug" in f.summary
    g = one(diagnose({"kp.log": start.replace("ipvs", "iptables") + panic}), "KP106")
    assert g.confidence == Confidence.LOW and "1.18.0-era" not in g.summary and g.fixed_in == []


def test_a_run_time_ipvs_panic_is_not_a_start_up_panic(diagnose: Diag) -> None:
    none_of(diagnose({"kp.log": RUNTIME_109052}), "KP106")


@pytest.mark.parametrize(
    "line",
    [
        "panic: runtime error: invalid memory address or nil pointer dereference",
        'E0418 16:30:33.337036       1 runtime.go:78] Observed a panic: "invalid memory address or nil pointer '
        'dereference" (runtime error: invalid memory address or nil pointer dereference)',
        'E0123 12:33:29.270214       1 panic.go:262] "Observed a panic" panic="runtime error: invalid memory address '
        'or nil pointer dereference" panicGoValue="\\"invalid memory address or nil pointer dereference\\"" '
        "stacktrace=<",
    ],
)
def test_every_nil_pointer_panic_form(line: str) -> None:
    assert panics.NIL_POINTER.compiled().search(line)
