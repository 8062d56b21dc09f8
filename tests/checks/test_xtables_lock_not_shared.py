"""KP102 xtables-lock-not-shared: an iptables writer that does not mount the host's xtables lock."""

from __future__ import annotations

import yaml
from checks.helpers import GLOG_START, Diag
from conftest import causes

from kpdoctor.checks.sync.xtables_lock import _mounts_lock
from kpdoctor.facts.workloads import is_fragment
from kpdoctor.model import Severity
from kpdoctor.parse.k8s import K8sObject


def test_xtables_lock_not_shared_names_the_daemonset(diagnose: Diag) -> None:
    log = (
        GLOG_START
        + (
            "E1008 21:02:00.000000  145725 proxier.go:1285] Failed to execute iptables-restore: "
            "exit status 1 (iptables-restore: line 118 failed\n)\n"
        )
        * 4
    )
    ds = """{"apiVersion": "v1", "kind": "List", "items": [
      {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "kube-router", "namespace": "kube-system"},
       "spec": {"template": {"spec": {"hostNetwork": true, "containers": [{"name": "kube-router",
         "image": "cloudnativelabs/kube-router:v0.2.5", "securityContext": {"privileged": true}}]}}}},
      {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
       "spec": {"template": {"spec": {"hostNetwork": true,
         "volumes": [{"name": "xtables-lock", "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"}}],
         "containers": [{"name": "kube-proxy", "image": "k8s/kube-proxy:v1.18.4-tke.30",
           "volumeMounts": [{"name": "xtables-lock", "mountPath": "/run/xtables.lock"}]}]}}}}]}"""
    r = diagnose({"kp.log": log, "ds.json": ds, "v.txt": "iptables v1.8.4 (legacy)\n"})
    f = r.visible()[0]
    assert f.cause == "xtables-lock-not-shared" and f.confidence.label == "high"
    assert "DaemonSet/kube-system/kube-router" in f.summary and "kube-proxy" not in f.summary.split(":")[-1]


def test_lock_not_shared_is_not_a_problem_with_nft(diagnose: Diag) -> None:
    ds = """{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "calico-node", "namespace": "kube-system"},
       "spec": {"template": {"spec": {"hostNetwork": true, "containers": [{"name": "calico-node", "image": "calico/node:v3.26"}]}}}}"""
    r = diagnose({"ds.json": ds, "v.txt": "iptables v1.8.7 (nf_tables)\n"}, min_severity=Severity.WARNING)
    assert "xtables-lock-not-shared" not in causes(r)


FRAGMENT = """\
      - command:
        - /bin/sh
        - -c
        - /usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf --hostname-override=$HOSTNAME
        env:
        - name: HOSTNAME
          valueFrom:
            fieldRef:
"""  # kubeadm#857, comment by thibault-ketterer (2023-09-26): a containers list, nothing else


def test_a_spec_fragment_without_volumes_is_unknown_not_unshared() -> None:
    containers = yaml.safe_load(FRAGMENT)
    frag = K8sObject("Pod", "", None, "", {"spec": {"containers": containers}}, "ds.yaml", 1)
    assert is_fragment(frag) and _mounts_lock(frag) is None
    whole = K8sObject(
        "DaemonSet",
        "apps/v1",
        "kube-system",
        "kube-proxy",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "kube-proxy"},
            "spec": {"template": {"spec": {"containers": containers}}},
        },
        "ds.yaml",
        1,
    )
    assert not is_fragment(whole) and _mounts_lock(whole) is False
