"""Where facts come from: versions, configuration precedence, Pod status, combined logs."""

from __future__ import annotations

import json
from collections.abc import Callable

from conftest import MISMATCH, all_findings

from kpdoctor.model import Report

Diag = Callable[..., Report]


def test_kube_proxy_version_never_comes_from_node_info(diagnose: Diag) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"nodeInfo": {"kubeletVersion": "v1.18.4-tke.40", "kubeProxyVersion": "v1.18.4-tke.40"}},
    }
    r = diagnose({"kp.log": MISMATCH, "node.json": json.dumps(node)})
    f = r.visible()[0]
    assert "kube-proxy" not in f.versions_found and "version unknown" in f.fix[0]


def test_kube_proxy_version_from_image_tag(diagnose: Diag) -> None:
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "kube-proxy", "image": "ccr.ccs.tencentyun.com/library/kube-proxy:v1.18.4-tke.30"}
                    ]
                }
            }
        },
    }
    f = diagnose({"kp.log": MISMATCH, "ds.json": json.dumps(ds)}).visible()[0]
    assert f.versions_found["kube-proxy"] == "v1.18.4-tke.30" and f.fixed_in == ["v1.18.4-tke.35"]


def test_config_from_configmap_wins_over_daemonset_flags(diagnose: Diag) -> None:
    conf = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nipvs:\n  minSyncPeriod: 1s\n  syncPeriod: 5s\n"
    items = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
            "data": {"config.conf": conf},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "kube-proxy",
                                "image": "k8s.gcr.io/kube-proxy:v1.20.4",
                                "command": [
                                    "/usr/local/bin/kube-proxy",
                                    "--config=/var/lib/kube-proxy/config.conf",
                                    "--ipvs-sync-period=30s",
                                ],
                            }
                        ]
                    }
                }
            },
        },
    ]
    r = diagnose({"objs.json": json.dumps({"apiVersion": "v1", "kind": "List", "items": items})})
    causes = {f.cause: f for f in all_findings(r)}
    assert "5s" in causes["sync-too-frequent"].summary and "(config)" in causes["sync-too-frequent"].summary
    assert "config file" in causes["sync-too-frequent"].fix[0]
    assert "--ipvs-sync-period=30s" in causes["config-overrides-flags"].summary


def test_restart_count_and_last_state_are_cited(diagnose: Diag) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-proxy-x7k2p", "namespace": "kube-system", "labels": {"k8s-app": "kube-proxy"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "kube-proxy", "image": "k8s/kube-proxy:v1.14.3-tke.20"}]},
        "status": {
            "containerStatuses": [
                {
                    "name": "kube-proxy",
                    "restartCount": 37,
                    "lastState": {
                        "terminated": {"exitCode": 2, "reason": "Error", "finishedAt": "2019-06-18T02:00:00Z"}
                    },
                }
            ]
        },
    }
    line = 'E0618 02:00:00.000000       1 runtime.go:69] Observed a panic: "slice bounds out of range" (runtime error: slice bounds out of range)\n'
    r = diagnose({"prev.log": line * 3, "pod.json": json.dumps(pod)}, node="n1")
    f = r.visible()[0]
    assert f.cause == "iptables-save-parse-panic" and "restarted 37 time(s)" in f.summary
    assert any("restartCount=37" in c.text and "last exit 2" in c.text for c in f.evidence)
    assert f.fixed_in == ["v1.14.3-tke.27"]


def test_k3s_combined_journal(diagnose: Diag) -> None:
    log = (
        'Nov 13 16:15:07 node3 k3s[1234]: I1113 16:15:07.100000    1234 kubelet.go:2100] "SyncLoop (PLEG): event for pod"\n'
        'Nov 13 16:15:07 node3 k3s[1234]: time="2024-11-13T16:15:07Z" level=info msg="Running kube-proxy --cluster-cidr=10.42.0.0/16 --conntrack-max-per-core=0 --hostname-override=node3 --proxy-mode=iptables"\n'
        'Nov 13 16:15:07 node3 k3s[1234]: E1113 16:15:07.931291    1234 proxier.go:1481] "Failed to execute iptables-restore" err=<\n'
        'Nov 13 16:15:07 node3 k3s[1234]:         exit status 2: ip6tables-restore v1.8.8 (nf_tables): unknown option "--xor-mark"\n'
        "Nov 13 16:15:07 node3 k3s[1234]:         Error occurred at line: 11\n"
        "Nov 13 16:15:07 node3 k3s[1234]:  >\n"
        'Nov 13 16:15:07 node3 k3s[1234]: I1113 16:15:07.931308    1234 proxier.go:858] "Sync failed" retryingTime="30s"\n'
        'Nov 13 16:15:08 node3 containerd[900]: time="2024-11-13T16:15:08Z" level=info msg="StartContainer"\n'
    )
    r = diagnose({"journal.txt": log, "uname": "6.8.0-57-generic\n"})
    f = r.visible()[0]
    assert f.cause == "kernel-mark-target-regression" and f.confidence.label == "high"
    assert f.evidence[0].line == 3 and f.evidence[1].line == 4
