"""xtables-lock signals from every writer (KP102) and iptables-restore's rejected wait flag
(KP103), on real posted output (tests/realworld/cases: kube-router-506, kubespray-3192,
vpc-cni-2840, k8s-58956, minikube-2647, calico-2179, k8s-71071)."""

from __future__ import annotations

from collections.abc import Callable

from conftest import all_findings

from kpdoctor.model import Confidence, Finding, Report, Severity

Diag = Callable[..., Report]

KUBE_ROUTER = (
    "E0801 10:27:45.538722       1 network_policy_controller.go:182] Error syncing network policy for the update "
    "to network policy: <NAMESPACE_NAME>/<POLICY_NAME> Error: Aborting sync. Failed to sync network policy chains: "
    "Failed to run iptables command: running [/sbin/iptables -t filter -N KUBE-NWPLCY-YYN4V3F74PSONPOB --wait]: "
    "exit status 4: iptables: Resource temporarily unavailable.\n"
)
FLANNEL = (
    "E0828 11:59:09.894083       7 iptables.go:97] Failed to ensure iptables rules: Error checking rule existence: "
    "failed to check rule existence: running [/sbin/iptables -t nat -C POSTROUTING -s 10.233.64.0/18 ! -d "
    "224.0.0.0/4 -j MASQUERADE --wait]: exit status 4: iptables: Resource temporarily unavailable.\n"
)
EVENT = (
    'Warning  FailedMount  MountVolume.SetUp failed for volume "xtables-lock" : hostPath type check failed: '
    "/run/xtables.lock is not a file\n"
)
W5 = (
    "I0129 19:40:03.709536   21148 iptables.go:381] running iptables-restore [-w5 -T nat --noflush --counters]\n"
    "E0129 19:40:03.712093   21148 proxier.go:792] Failed to execute iptables-restore for nat: exit status 1 "
    "(iptables-restore: invalid option -- '5'\niptables-restore: line 7 failed\n)\n"
)
MINIKUBE_W5 = (
    "E0324 16:54:58.207422    5943 proxier.go:1667] Failed to execute iptables-restore: exit status 1 "
    "(iptables-restore: invalid option -- '5'\nTry `iptables-restore -h' for more information.\n"
)
FELIX = (
    "canal-5wsjh calico-node 2018-09-07 08:02:59.942 [ERROR][15833] table.go 778: Failed to program iptables, "
    'loading diags before panic. error=exit status 4 ipVersion=0x4 table="mangle"\n'
)
LINE_7_FAILED = (  # k8s-71071 (an IPVS deadlock report)
    "E1129 01:01:10.862180       1 proxier.go:430] Failed to execute iptables-restore for nat: exit status 1 "
    "(iptables-restore: line 7 failed\n"
    "E1129 21:09:11.422553       1 proxier.go:1485] Failed to get IPVS service, error: Expected only one service "
    "obtained=0\n"
    "E1129 01:01:11.618125       1 proxier.go:430] Failed to execute iptables-restore for nat: exit status 1 "
    "(iptables-restore: line 7 failed\n"
)
SYNC_OK = 'I1113 16:15:07.931317 1 proxier.go:820] "SyncProxyRules complete" elapsed="22.67239ms"\n'


def first(report: Report) -> Finding:
    vis = report.visible()
    assert vis, "no findings"
    return vis[0]


def codes(report: Report) -> set[str]:
    return {f.code for f in all_findings(report)}


def test_go_iptables_eagain_with_wait_is_an_unshared_lock_naming_the_writer(diagnose: Diag) -> None:
    for text, writer in ((KUBE_ROUTER, "kube-router"), (FLANNEL, "flannel")):
        f = first(diagnose({"agent.log": text}, min_severity=Severity.WARNING))
        assert f.cause == "xtables-lock-not-shared" and f.confidence == Confidence.HIGH
        assert f.summary.startswith(f"{writer} ran iptables with --wait and still got EAGAIN")
        assert "kube-proxy" not in f.summary  # another component's line: kube-proxy is not blamed
        assert [c.writer for c in f.evidence if c.line] == [writer]
        assert f.fix[-1].endswith(f"into every Pod that runs iptables: {writer}.")


def test_hostpath_lock_not_a_file_is_an_unshared_lock(diagnose: Diag) -> None:
    f = first(diagnose({"kube-proxy-events.txt": EVENT}))
    assert f.cause == "xtables-lock-not-shared" and f.severity == Severity.CRITICAL
    assert f.confidence == Confidence.HIGH and f.summary.startswith("kubelet could not mount")
    assert any("touch /run/xtables.lock" in x for x in f.fix)


def test_glued_wait_argument_is_restore_no_wait_not_lock_sharing(diagnose: Diag) -> None:
    for files in ({"messages.log": W5}, {"minikube-logs.txt": MINIKUBE_W5}):
        r = diagnose(files)
        f = first(r)
        assert f.cause == "iptables-restore-no-wait" and f.confidence == Confidence.HIGH
        assert "-w5" in f.summary and f.fixed_in == ["v1.10.0"]
        assert "KP102" not in codes(r)  # its "line 7 failed" is explained by the invalid option
        assert "KP100" in f.explains


def test_felix_exit_4_is_restore_no_wait_of_another_writer(diagnose: Diag) -> None:
    r = diagnose({"calico-node.log": FELIX})
    f = first(r)
    assert f.cause == "iptables-restore-no-wait" and f.confidence == Confidence.MEDIUM
    assert f.summary.startswith("calico-node's iptables-restore failed with exit status 4")
    assert "not a kube-proxy fault" in f.summary and "less likely" in f.summary
    assert not f.versions_found and "iptables 1.6.2" not in f.fixed_in  # no kube-proxy remedy
    assert "KP102" not in codes(r)


def test_line_n_failed_alone_is_not_a_lock_problem(diagnose: Diag) -> None:
    r = diagnose({"kube-proxy.log": LINE_7_FAILED})
    assert "KP102" not in codes(r)
    assert "KP100" in [g.code for g in all_findings(r)]  # the failure is still reported, with its lines
    # the empty netlink reply between them is the IPVS race the thread established (KP110)
    assert first(r).cause == "ipvs-sync-deadlock" and first(r).confidence == Confidence.LOW


def test_line_n_failed_that_comes_and_goes_still_points_at_the_lock(diagnose: Diag) -> None:
    # a sync-complete line right after a failure ends the failed sync; the next one is a success
    r = diagnose({"kube-proxy.log": SYNC_OK + LINE_7_FAILED + SYNC_OK * 2})
    (f,) = [g for g in all_findings(r) if g.code == "KP102"]
    assert f.confidence == Confidence.MEDIUM and "syncs succeeding in between" in f.summary
