"""KP101, KP106 and KP114 reason from what real reports show (issue 15, part 3).

Every log line below is output someone posted in a public thread (the corpus case or upstream
issue is named next to it); only the combinations of several inputs are ours, each to exercise one
rule: the failing binary's banner, the node's backend from its version or its OS/kernel, the
stack frames of a panic, the program that hit the MARK regression, the kernel's own numbering.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import none_of, one

from kpdoctor.checks.sync import kernel_mark as km
from kpdoctor.checks.sync import panics
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.facts import iptables_variant as bm
from kpdoctor.model import Confidence, Report, Severity
from kpdoctor.versions import IptablesVersion, KernelVersion

Diag = Callable[..., Report]






# -- KP101: the backend of any failing binary, the node's from its version or OS -------------------

# k8s-71305 (kubernetes#71305): kube-proxy's image has iptables 1.6.0, the node 1.8.1 nf_tables.
TABLE_INIT_71305 = (
    "kube-proxy-22hmk kube-proxy E1120 07:08:50.135017       1 proxier.go:647] Failed to ensure that nat chain "
    'KUBE-SERVICES exists: error creating chain "KUBE-SERVICES": exit status 3: iptables v1.6.0: can\'t initialize '
    "iptables table `nat': Table does not exist (do you need to insmod?)\n"
    "kube-proxy-22hmk kube-proxy Perhaps iptables or your kernel needs to be upgraded.\n"
)
# kubeedge#4123: a legacy 1.8.6 in a container on CentOS 8 (kernel 4.18.0-348.7.1.el8_5.x86_64).
TABLE_INIT_4123 = (
    'E0817 09:54:12.179068       1 iptables.go:121] "Failed to ensure chain exists" err="error creating chain '
    "\\\"TUNNEL-PORT\\\": exit status 3: modprobe: can't change directory to '/lib/modules': No such file or "
    "directory\\niptables v1.8.6 (legacy): can't initialize iptables table `nat': Table does not exist (do you need "
    'to insmod?)\\nPerhaps iptables or your kernel needs to be upgraded.\\n" table=nat chain=TUNNEL-PORT\n'
)
# k8s-133694: only ip6tables, on a kernel without ip6table_nat.
TABLE_INIT_V6_133694 = (
    "ip6tables v1.8.11 (legacy): can't initialize ip6tables table `nat': Table does not exist (do you need to "
    "insmod?)\nPerhaps ip6tables or your kernel needs to be upgraded.\n"
)


def test_legacy_binary_without_tables_on_an_nft_node(diagnose: Diag) -> None:
    f = one(diagnose({"kp.log": TABLE_INIT_71305, "ipt.txt": "iptables v1.8.1 (nf_tables)\n"}), "KP101")
    assert f.confidence == Confidence.HIGH and f.severity == Severity.CRITICAL
    assert "iptables v1.6.0 (legacy only)" in f.summary and "table nat" in f.summary
    assert f.versions_found["iptables (node)"] == "v1.8.1 (nf_tables)"
    # Nothing about the node: a mismatch or a kernel without the table, said so, low.
    g = one(diagnose({"kp.log": TABLE_INIT_71305}), "KP101")
    assert g.confidence == Confidence.LOW and "Either" in g.summary and "iptable_nat" in g.summary
    # A node whose own iptables is 1.6 (legacy only, k8s-71305's other node): not this cause.
    none_of(diagnose({"kp.log": TABLE_INIT_71305, "ipt.txt": "iptables v1.6.1\n"}), "KP101")


def test_node_backend_inferred_from_a_rhel8_kernel(diagnose: Diag) -> None:
    r = diagnose({"kp.log": TABLE_INIT_4123, "uname.txt": "4.18.0-348.7.1.el8_5.x86_64\n"})
    f = one(r, "KP101")
    assert f.confidence == Confidence.MEDIUM, "inferred, not measured"
    assert "inferred from the kernel release" in f.summary and "RHEL 8" in f.summary
    assert "`iptables --version` to confirm" in f.summary
    assert f.versions_found["iptables backend (node, inferred)"] == "nf_tables (kernel release)"
    assert any(c.artifact.endswith("uname.txt") for c in f.evidence)


def test_ipv6_only_missing_table_is_not_a_backend_mismatch(diagnose: Diag) -> None:
    none_of(diagnose({"ip6tables.txt": TABLE_INIT_V6_133694}), "KP101")


# k8s-92250 (kubernetes#92250): hyperkube 1.16.11's nf_tables iptables on CentOS 7.
BUSY_92250 = (
    "E0618 09:42:42.811741       7 proxier.go:1418] Failed to execute iptables-restore: exit status 4 "
    "(iptables-restore v1.8.2 (nf_tables): \n"
    "line 86: CHAIN_USER_DEL failed (Device or resource busy): chain KUBE-SEP-ARQWXEG2ZEM2P3WE\n"
    ")\n"
)


def test_nft_restore_cannot_delete_busy_chains_on_a_legacy_only_host(diagnose: Diag) -> None:
    bare = one(diagnose({"kp.log": BUSY_92250}), "KP101")
    assert bare.confidence == Confidence.LOW and bare.severity == Severity.CRITICAL
    assert "iptables-restore v1.8.2 (nf_tables)" in bare.summary and "RHEL/CentOS 7" in bare.summary
    assert "KP100" in bare.explains  # the generic restore failure folds under it
    # The kernel: CentOS 7.7, legacy only.
    f = one(diagnose({"kp.log": BUSY_92250, "uname.txt": "3.10.0-1062.9.1.el7.x86_64\n"}), "KP101")
    assert f.confidence == Confidence.MEDIUM and "RHEL/CentOS 7 kernel" in f.summary
    # On a node whose iptables is nf_tables, busy chains are something else.
    none_of(diagnose({"kp.log": BUSY_92250, "ipt.txt": "iptables v1.8.7 (nf_tables)\n"}), "KP101")


# kind-1740: a failing restore for another reason (no xt_recent), with its binary's banner.
RECENT_1740 = (
    "E0720 14:29:10.934607       1 proxier.go:1507] Failed to execute iptables-restore: exit status 2 "
    "(iptables-restore v1.8.3 (legacy): Couldn't load match `recent':No such file or directory\n"
    "\n"
    "Error occurred at line: 96\n"
    "Try `iptables-restore -h' or 'iptables-restore --help' for more information.\n"
)


def test_backend_of_any_failed_restore(diagnose: Diag) -> None:
    none_of(diagnose({"kp.log": RECENT_1740}), "KP101")  # a banner alone proves nothing
    # rancher-42103's host: nf_tables. kube-proxy's failing restores run legacy.
    f = one(diagnose({"kp.log": RECENT_1740, "ipt.txt": "iptables v1.8.7 (nf_tables)\n"}), "KP101")
    assert f.confidence == Confidence.HIGH and f.severity == Severity.CRITICAL
    assert "iptables-restore v1.8.3 (legacy)" in f.summary and "nf_tables" in f.summary


def test_pre_18_is_legacy_on_the_host_side(tmp_path: Path) -> None:
    # k8s-71305's first node (iptables v1.6.1) and hyperkube 1.16.11's image (kubernetes#92275),
    # in a bundle so that each is scoped by its path.
    (tmp_path / "node").mkdir()
    (tmp_path / "kube-proxy").mkdir()
    (tmp_path / "node/iptables-version.txt").write_text("iptables v1.6.1\n")
    (tmp_path / "kube-proxy/iptables-version.txt").write_text("iptables v1.8.2 (nf_tables)\n")
    paths = [{"path": "node/iptables-version.txt"}, {"path": "kube-proxy/iptables-version.txt"}]
    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": paths}))
    report, _ = diagnose_paths([tmp_path], min_severity=Severity.INFO)
    f = one(report, "KP101")
    assert f.severity == Severity.WARNING and "uses legacy" in f.summary and "nf_tables" in f.summary


def test_another_container_on_another_backend(diagnose: Diag) -> None:
    transcript = (
        "azureuser@mbuil-vm1:~$ sudo iptables --version\n"
        "iptables v1.8.7 (nf_tables)\n"
        "azureuser@mbuil-vm1:~$ docker exec 4a962af559a7 iptables --version\n"
        "iptables v1.8.7 (legacy)\n"
    )  # rancher-42103
    f = one(diagnose({"transcript.txt": transcript}), "KP101")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.MEDIUM
    assert "docker exec 4a962af559a7" in f.summary and "v1.8.7 (legacy)" in f.summary


# k8s-80462: a 1.8 legacy restore cannot load KUBE-MARK-DROP; nothing is said about the node.
MARK_DROP_80462 = (
    "E0723 07:41:15.295733     243 proxier.go:1234] Failed to execute iptables-restore: exit status 2 "
    "(iptables-restore v1.8.2 (legacy): Couldn't load target `KUBE-MARK-DROP':No such file or directory\n"
)


def test_missing_chain_without_the_nodes_backend_is_either_or(diagnose: Diag) -> None:
    f = one(diagnose({"kp.log": MARK_DROP_80462}), "KP101")
    assert f.confidence == Confidence.MEDIUM and "Either" in f.summary
    assert "exists only in" not in f.summary  # no claim about the node's backend
    assert "kubelet-chains-missing" in f.explained_by
    # The node's own iptables is legacy too: the chain was never created, not a mismatch.
    none_of(diagnose({"kp.log": MARK_DROP_80462, "ipt.txt": "iptables v1.8.2 (legacy)\n"}), "KP101")


def test_ipv6_only_missing_chain_points_to_kubelet(diagnose: Diag) -> None:
    # k8s-67398, both files verbatim: IPv6-only cluster, kubelet made KUBE-MARK-DROP in IPv4 only.
    log = (
        "E0814 18:20:56.733818     227 proxier.go:1306] Failed to execute iptables-restore: exit status 2 "
        "(ip6tables-restore v1.6.2: Couldn't load target `KUBE-MARK-DROP':No such file or directory\n"
    )
    rules = (
        "# ip6tables -t nat -S | grep KUBE-MARK-DROP\n(nothing)\n# iptables -t nat -S | grep KUBE-MARK-DROP\n"
        "-N KUBE-MARK-DROP\n-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000\n"
    )
    f = one(diagnose({"kube-proxy.log": log, "iptables-S.txt": rules}), "KP101")
    assert f.confidence == Confidence.LOW and "only for IPv6" in f.summary
    assert "more likely kubelet did not create KUBE-MARK-DROP in ip6tables" in f.summary
    assert "kubelet-chains-missing" in f.explained_by


def test_a_chain_kube_proxy_declares_itself_is_another_writers_failure(diagnose: Diag) -> None:
    # cilium-30666: the runtime's hostport code, kube-proxy replaced by Cilium.
    event = (
        "  Warning  FailedCreatePodSandBox  8s (x4 over 48s)  kubelet  (combined from similar events): Failed to "
        "create pod sandbox: rpc error: code = Unknown desc = failed to add hostport mapping for sandbox "
        "k8s_echo-same-node-c74f867d5-9777z_cilium-test_8a6abf6c-dadb-4107-b1da-01fbcf921038_0(6609ff9b9559da5bc5b42be"
        "1ebcc4aba4d037ac8816076b019017eb7f344a69c): failed to execute iptables-restore: exit status 2 "
        "(iptables-restore v1.8.9 (nf_tables): Chain 'KUBE-MARK-MASQ' does not exist\n"
    )
    f = one(diagnose({"pod-events.txt": event}), "KP101")
    assert f.confidence == Confidence.LOW and f.severity == Severity.WARNING
    assert "not kube-proxy's sync" in f.summary and "nothing creates KUBE-MARK-MASQ" in f.summary
    assert f.fixed_in == [] and "kube-proxy runs on this node" in f.fix[0]  # not kube-proxy's upgrade path


@pytest.mark.parametrize(
    ("text", "backend"),
    [
        ("CentOS Linux 7 (Core) centos 7", "legacy"),
        ("Red Hat Enterprise Linux 8.9 (Ootpa) rhel 8.9", "nft"),
        ("Ubuntu 18.04.6 LTS ubuntu 18.04", "legacy"),
        ("Debian GNU/Linux 9 (stretch) debian 9", "legacy"),
        ("Debian GNU/Linux 10 (buster) debian 10", "nft"),
        ("Amazon Linux 2", "legacy"),
        ("Amazon Linux 2023", "nft"),
        ("Fedora 23 (Twenty Three) fedora 23", "legacy"),  # kubernetes#18196's os-release: iptables 1.4
        ("Fedora Linux 40 (Server Edition) fedora 40", "nft"),
        ("Bottlerocket OS 1.26.2 (aws-k8s-1.24)", None),
    ],
)
def test_os_release_backend(text: str, backend: str | None) -> None:
    got = bm.os_variant(text)
    assert (got[0] if got else None) == backend


# -- KP106: classified by the panic's frames -------------------------------------------------------

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


# -- KP114: any writer; the kernel by its distribution's numbering ---------------------------------

# tailscale#13863 (marek22k, on 6.6.58-1-lts): another agent's ip6tables call, quoted by it.
TAILSCALE_13863 = """\
# Health check:
#     - Tailscale can't reach the configured DNS servers. Internet connectivity may be affected.
#     - adding [-i tailscale0 -j MARK --set-mark 0x40000/0xff0000] in v6/filter/ts-forward: running [/usr/bin/ip6tables -t filter -A ts-forward -i tailscale0 -j MARK --set-mark 0x40000/0xff0000 --wait]: exit status 2: Warning: Extension MARK revision 0 not supported, missing kernel module?
ip6tables v1.8.10 (nf_tables): MARK: bad value for option "--set-mark", or out of range (0-4294967295).

Try `ip6tables -h' or 'ip6tables --help' for more information.
"""


def test_mark_errors_from_another_program_name_it(diagnose: Diag) -> None:
    f = one(diagnose({"status.txt": TAILSCALE_13863, "uname.txt": "6.6.58-1-lts\n"}), "KP114")
    assert f.summary.startswith("ip6tables v1.8.10 (nf_tables) (`/usr/bin/ip6tables -t filter -A ts-forward")
    assert "iptables-restore rejects kube-proxy's MARK rules" not in f.summary
    assert "another program's, not kube-proxy's sync" in f.summary
    # An Arch package release (-1-lts) is not an Ubuntu ABI: upstream 6.6.58, a broken release.
    assert f.confidence == Confidence.HIGH and "known to carry the regression" in f.summary
    assert f.fixed_in == ["6.6.59"]


def test_kube_proxys_own_restore_is_named_so(diagnose: Diag) -> None:
    # k3s-11175, its kernel release from the issue (Fedora 40's build of upstream 6.11.4).
    log = """\
Okt 26 01:54:40 ... k3s[20378]: E1026 01:54:40.885702   20378 proxier.go:1511] "Failed to execute iptables-restore" err=<
Okt 26 01:54:40 ... k3s[20378]:         exit status 2: Ignoring deprecated --wait-interval option.
Okt 26 01:54:40 ... k3s[20378]:         Warning: Extension MARK revision 0 not supported, missing kernel module?
Okt 26 01:54:40 ... k3s[20378]:         ip6tables-restore v1.8.9 (legacy): unknown option "--xor-mark"
Okt 26 01:54:40 ... k3s[20378]:         Error occurred at line: 31
Okt 26 01:54:40 ... k3s[20378]:         Try `ip6tables-restore -h' or 'ip6tables-restore --help' for more information.
Okt 26 01:54:40 ... k3s[20378]:  >
"""
    uname = "6.11.4-201.fc40.x86_64\n"
    f = one(diagnose({"k3s.log": log, "uname.txt": uname}), "KP114")
    assert f.summary.startswith("kube-proxy's ip6tables-restore v1.8.9 (legacy) rejects the MARK target")
    assert "another program" not in f.summary
    assert f.confidence == Confidence.HIGH and f.fixed_in == ["6.11.6"]


def test_kubelets_mark_call_on_bottlerocket(diagnose: Diag) -> None:
    # bottlerocket-core-kit#266: kubelet's ip6tables on Bottlerocket's 5.15.168 (bottlerocket#4295).
    journal = (
        "Nov 15 02:19:43 ip-192-168-93-220.us-west-2.compute.internal kubelet[1387]:         ip6tables v1.8.10 "
        "(legacy): MARK target: kernel too old for --or-mark\n"
        "Nov 15 02:19:43 ip-192-168-93-220.us-west-2.compute.internal kubelet[1387]:         Try `ip6tables -h' or "
        "'ip6tables --help' for more information.\n"
    )
    f = one(diagnose({"journal.txt": journal, "uname.txt": "5.15.168\n"}), "KP114")
    assert f.summary.startswith("ip6tables v1.8.10 (legacy) rejects the MARK target")
    assert f.confidence == Confidence.HIGH


def test_a_backported_kernel_is_not_called_off_the_list(diagnose: Diag) -> None:
    # tailscale#20900: RHEL 10.2's kernel, the IPv4 path.
    status = (
        "#     - adding [-i tailscale0 -j MARK --set-mark 0x40000/0xff0000] in v4/filter/ts-forward: running "
        "[/usr/sbin/iptables -t filter -A ts-forward -i tailscale0 -j MARK --set-mark 0x40000/0xff0000 --wait]: "
        "exit status 2: Warning: Extension MARK revision 0 not supported, missing kernel module?\n"
        'iptables v1.8.11 (nf_tables): MARK: bad value for option "--set-mark", or out of range (0-4294967295).\n'
    )
    f = one(diagnose({"status.txt": status, "uname.txt": "6.12.0-211.47.1.el10_2.x86_64\n"}), "KP114")
    assert "backported base" in f.summary and "not on the list" not in f.summary
    assert f.confidence == Confidence.MEDIUM and "Only the IPv6 path" not in f.summary


@pytest.mark.parametrize(
    ("release", "broken", "target"),
    [
        ("5.15.0-127-generic", True, "5.15.0-126 (or a later fixed ABI)"),
        ("5.15.0-128-generic", True, "5.15.0-126 (or a later fixed ABI)"),  # tailscale#14410
        ("5.15.0-126-generic", None, "5.15.0-126 (or a later fixed ABI)"),
        ("6.8.0-57-lowlatency", True, "6.8.0-55 (or a later fixed ABI)"),  # the main kernel's ABI
        ("6.8.0-1025-aws", True, None),
        ("6.8.0-1025-gcp", None, None),  # a gcp kernel numbers its own ABIs
        ("6.6.57-1-lts", True, "6.6.59"),
        ("6.6.56-1-lts", None, "6.6.59"),
        ("6.11.4-301.fc41.x86_64", True, "6.11.6"),
        ("6.11.6-arch1-1", None, "6.11.6"),
        ("5.15.168", True, "5.15.167 (or a later 5.15 release with the fix)"),
        ("4.18.0-513.5.1.el8_9.x86_64", None, None),
        ("6.1.0-18-amd64", None, None),
    ],
)
def test_kernel_status(release: str, broken: bool | None, target: str | None) -> None:
    k = KernelVersion.parse(release)
    assert k is not None
    assert km.kernel_status(k) == (broken, target)


def test_banners_name_the_binary() -> None:
    got = IptablesVersion.banners(
        "exit status 2 (iptables-restore v1.8.4 (legacy): x\nip6tables-restore v1.6.0: y\\niptables v1.8.6 (legacy): z"
    )
    assert [(b.program, b.parts, b.effective_variant) for b in got] == [
        ("iptables-restore", (1, 8, 4), "legacy"),
        ("ip6tables-restore", (1, 6, 0), "legacy"),  # older than 1.8: legacy, printed or not
        ("iptables", (1, 8, 6), "legacy"),  # after an escaped newline in a structured err="..."
    ]
    v18 = IptablesVersion.parse("iptables v1.8.4")
    assert v18 is not None and v18.effective_variant is None  # 1.8 without a backend: could be either
