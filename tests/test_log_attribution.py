"""Which component wrote a log line is decided from the line itself (syslog identifier, klog
source file, log format, aggregator prefix, a message only one component prints), never from a
file name; findings say whose line they cite. Every line here is real posted output."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.knowledge import REGISTRY
from kpdoctor.model import Cite, Finding, Report
from kpdoctor.parse.logscan import Scanner
from kpdoctor.parse.logwrap import unwrap, writer_of
from kpdoctor.report import render_json, render_markdown, render_text

Diag = Callable[..., Report]

# calico-2179 (projectcalico/calico#2179): a `POD CONTAINER` aggregator prefix on a felix line.
CANAL = (
    "canal-5wsjh calico-node 2018-09-07 08:02:59.942 [ERROR][15833] table.go 778: Failed to program iptables, "
    'loading diags before panic. error=exit status 4 ipVersion=0x4 table="mangle"'
)
# kube-router-506 (cloudnativelabs/kube-router#506): kube-router's own source file.
KUBE_ROUTER = (
    "E0801 10:27:45.538722       1 network_policy_controller.go:182] Error syncing network policy for the update "
    "to network policy: <NAMESPACE_NAME>/<POLICY_NAME> Error: Aborting sync. Failed to sync network policy chains: "
    "Failed to run iptables command: running [/sbin/iptables -t filter -N KUBE-NWPLCY-YYN4V3F74PSONPOB --wait]: "
    "exit status 4: iptables: Resource temporarily unavailable."
)
# kubespray-3192: flannel's iptables.go (a file name kube-proxy has too): its message tells.
FLANNEL = (
    "E0828 11:59:09.894083       7 iptables.go:97] Failed to ensure iptables rules: Error checking rule existence: "
    "failed to check rule existence: running [/sbin/iptables -t nat -C POSTROUTING -s 10.233.64.0/18 ! -d "
    "224.0.0.0/4 -j MASQUERADE --wait]: exit status 4: iptables: Resource temporarily unavailable."
)
# vpc-cni-2840: a kubelet event, pasted from `kubectl describe pod`.
EVENT = (
    'Warning  FailedMount  MountVolume.SetUp failed for volume "xtables-lock" : hostPath type check failed: '
    "/run/xtables.lock is not a file"
)
# kubelet's sandbox event (pkg/kubelet/events), its CNI plugin's failure as the reason
SANDBOX = (
    "Warning  FailedCreatePodSandBox  3m  kubelet  Failed to create pod sandbox: rpc error: code = Unknown desc = "
    "failed to setup network for sandbox: could not set up pod iptables rules: Another app is currently holding "
    "the xtables lock. Stopped waiting after 5s."
)
# minikube-1158: localkube (all-in-one: kube-proxy runs inside it) in journald.
LOCALKUBE_PROXY = (
    "Jul 05 19:14:02 minikube localkube[3498]: I0705 19:14:02.157562    3498 healthcheck.go:223] Not saving "
    'endpoints for unknown healthcheck "kube-system/kubernetes-dashboard"'
)
LOCALKUBE_OTHER = (
    "Jul 05 19:14:03 minikube localkube[3498]: I0705 19:14:03.083730    3498 wrap.go:75] GET "
    "/api/v1/namespaces/kube-system/endpoints/kube-controller-manager: (988.922µs) 200"
)
# k8s-58956: kube-proxy's pkg/util/iptables (iptables.go: kubelet and CNIs have one too).
AMBIGUOUS = "I0129 19:40:03.709536   21148 iptables.go:381] running iptables-restore [-w5 -T nat --noflush --counters]"
# antrea-agent's AntreaProxy (pkg/agent/proxy/proxier.go, a name kube-proxy's file has), posted in
# antrea-io/antrea#4677: its message is antrea's alone
ANTREA_PROXIER = (
    "E0303 05:55:12.914125       1 proxier.go:564] Error when installing Service flows: unsupported bundle error "
    "with type 17 and code 13"
)
# kube-proxy's own proxier.go line (kubernetes#82361's form) stays kube-proxy's
KP_PROXIER = (
    'E1012 13:47:04.628717       1 proxier.go:1447] "Failed to execute iptables-restore" err="exit status 2 '
    '(iptables-restore v1.8.7 (nf_tables): unknown option \\"--xor-mark\\"\\n")"'
)
# Weave Net's own header (common/logging.go) and Cilium's logrus fields (subsys=), lines posted in
# weaveworks/weave and cilium/cilium threads (messages/weave.yaml, cilium.yaml name them)
WEAVE_LINE = "INFO: 2022/07/18 16:20:17.224715 Bridge type is bridged_fastdp"
CILIUM_LINE = (
    'level=warning msg="BPF system config check: NOT OK." error="CONFIG_BPF kernel parameter is required" '
    "subsys=linux-datapath"
)
# k8s-71305: kube-proxy's line through an aggregator prefix.
KP_AGGREGATED = (
    "kube-proxy-22hmk kube-proxy E1120 07:08:50.135017       1 proxier.go:647] Failed to ensure that nat chain "
    'KUBE-SERVICES exists: error creating chain "KUBE-SERVICES": exit status 3: iptables v1.6.0: can\'t initialize '
    "iptables table `nat': Table does not exist (do you need to insmod?)"
)


def who(line: str) -> str | None:
    u = unwrap(line)
    return writer_of(u.source, u.inner, u.inner)


@pytest.mark.parametrize(
    ("line", "writer"),
    [
        (CANAL, "calico-node"),
        (KUBE_ROUTER, "kube-router"),
        (FLANNEL, "flannel"),
        (EVENT, "kubelet"),
        (SANDBOX, "kubelet"),
        (LOCALKUBE_PROXY, "kube-proxy"),  # the source file resolves the all-in-one binary
        (LOCALKUBE_OTHER, "localkube"),
        (KP_AGGREGATED, "kube-proxy"),
        (AMBIGUOUS, None),  # unknown stays unknown, never "kube-proxy" by default
        (ANTREA_PROXIER, "antrea"),  # kube-proxy's file name, antrea's message
        (KP_PROXIER, "kube-proxy"),
        (WEAVE_LINE, "weave"),
        (CILIUM_LINE, "cilium"),
    ],
)
def test_writer_is_read_from_the_line(line: str, writer: str | None) -> None:
    assert who(line) == writer


def test_a_kubelet_event_about_kube_proxy_is_kubelets() -> None:
    # The word "kube-proxy" in a line says nothing about who wrote it.
    line = 'Warning  FailedMount  pod/kube-proxy-x7k2p  MountVolume.SetUp failed for volume "kube-proxy"'
    assert who(line) == "kubelet"


def test_aggregator_prefix_is_taken_off_and_level_and_time_kept(tmp_path: Path) -> None:
    u = unwrap(CANAL)
    assert u.container == "calico-node" and u.inner.startswith("2018-09-07 08:02:59.942 [ERROR]")
    u2 = unwrap(KP_AGGREGATED)
    assert u2.inner.startswith("E1120 07:08:50.135017") and u2.container == "kube-proxy"
    # two words of prose before a line are not a prefix
    assert unwrap("see this E1120 happened").inner == "see this E1120 happened"
    p = tmp_path / "calico.log"
    p.write_text(CANAL + "\n")
    import kpdoctor.checks  # noqa: F401  (registers the signatures)

    res = Scanner(REGISTRY.values(), workers=1).scan([Artifact("calico.log", Kind.KUBE_PROXY_LOG, path=str(p))])
    (hit,) = res.hits["felix-iptables-exit-4"]
    assert hit.level == "E" and hit.timestamp == "2018-09-07 08:02:59.942"
    assert hit.source == "calico-node" and hit.writer == "calico-node"


def test_cite_json_has_writer_only_when_known() -> None:
    assert Cite("a.log", 1, "x").to_json() == {"artifact": "a.log", "line": 1, "text": "x"}
    assert Cite("a.log", 1, "x", "flannel").to_json() == {"artifact": "a.log", "line": 1, "text": "x", "writer": "flannel"}


def _first(report: Report) -> Finding:
    vis = report.visible()
    assert vis, "no findings"
    return vis[0]


def test_findings_say_whose_line_they_cite(diagnose: Diag) -> None:
    r = diagnose({"flannel.log": FLANNEL + "\n"})
    f = _first(r)
    assert [c.writer for c in f.evidence if c.line] == ["flannel"]
    assert "flannel's log line" in " ".join(render_text(r, color=False).split())  # wrapped at the width
    assert "flannel's log line" in render_markdown(r)
    ev = json.loads(render_json(r))["findings"][0]["evidence"][0]
    assert ev["writer"] == "flannel" and ev["text"].startswith("E0828")


def test_a_kube_proxy_line_says_so_and_an_unknown_one_says_nothing(diagnose: Diag) -> None:
    # k8s-58956: the proxier.go line is kube-proxy's; the bare iptables-restore output in the
    # user's own transcript has no writer.
    log = (
        AMBIGUOUS + "\n"
        "E0129 19:40:03.712093   21148 proxier.go:792] Failed to execute iptables-restore for nat: exit status 1 "
        "(iptables-restore: invalid option -- '5'\niptables-restore: line 7 failed\n)\n"
    )
    r = diagnose({"messages.log": log, "transcript.txt": "iptables-restore -w5\niptables-restore: invalid option -- '5'\n"})
    f = _first(r)
    writers = {c.artifact.rsplit("/", 1)[-1]: c.writer for c in f.evidence if c.line}
    assert writers == {"messages.log": "kube-proxy", "transcript.txt": None}
