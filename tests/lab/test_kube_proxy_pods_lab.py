"""A kube-proxy Pod that crash-loops, as `kubectl get pods`, `kubectl describe pod` and the Pod
object show it.

Users often paste only `kubectl get pods -n kube-system -o wide`: a kube-proxy row in
CrashLoopBackOff says the node's rules are no longer kept in step with the cluster, and that why
is in the log of the run that ended. No check can name the cause from it, so it is an
unexplained signal (KP140) that asks for that log, never a clean report; a cause found in the log
given with it folds it. The Pods are made in the lab's kube-apiserver v1.20 (their status written
through the status subresource, as kubelet does) and printed by Debian's kubectl 1.20.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from kpdoctor.bundle.loader import load
from kpdoctor.facts import Facts

from .control_plane import ControlPlane
from .kpdoctor_run import diagnose_json
from .test_kubectl_tables_lab import _kubectls, _ok, _print

IMAGE = "k8s.gcr.io/kube-proxy:v1.20.2"
# kubelet's status of a container that exits at once and is restarted with a back-off
CRASHING = {
    "name": "kube-proxy",
    "image": IMAGE,
    "imageID": "",
    "ready": False,
    "restartCount": 12,
    "started": False,
    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}},
    "lastState": {
        "terminated": {
            "exitCode": 255,
            "reason": "Error",
            "startedAt": "2026-11-29T10:02:00Z",
            "finishedAt": "2026-11-29T10:02:01Z",
        }
    },
}
# one that restarted twice (a node reboot does that) and runs
RUNNING = {
    "name": "kube-proxy",
    "image": IMAGE,
    "imageID": "",
    "ready": True,
    "restartCount": 2,
    "started": True,
    "state": {"running": {"startedAt": "2026-11-29T09:00:00Z"}},
}
PODS = {"kube-proxy-crash": ("w-1", CRASHING), "kube-proxy-fine": ("cp-1", RUNNING)}
# the log of the run that ended, as the OSM case's kind node printed it (tests/realworld/cases/osm-3708)
LOG = (
    "I0630 22:05:30.818289       1 conntrack.go:100] Set sysctl 'net/netfilter/nf_conntrack_max' to 131072\n"
    "F0630 22:05:30.818310       1 server.go:495] open /proc/sys/net/netfilter/nf_conntrack_max: permission denied\n"
)


def _pods(cp: ControlPlane) -> None:
    # (no controller-manager runs to make the namespace's default ServiceAccount, which admission wants)
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
    status, body = cp.request("POST", "/api/v1/namespaces/kube-system/serviceaccounts", sa)
    assert status in (201, 409), body
    for name, (node, status) in PODS.items():
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"k8s-app": "kube-proxy"}},
            "spec": {
                "nodeName": node,
                "automountServiceAccountToken": False,  # (no token controller either)
                "containers": [{"name": "kube-proxy", "image": IMAGE}],
            },
        }
        _ok(cp.request("POST", "/api/v1/namespaces/kube-system/pods", pod))
        got = _ok(cp.request("GET", f"/api/v1/namespaces/kube-system/pods/{name}"))
        running = status["state"].get("running") is not None
        got["status"] = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if running else "False"}],
            "containerStatuses": [status],
        }
        _ok(cp.request("PUT", f"/api/v1/namespaces/kube-system/pods/{name}/status", got))


def _kp140(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["code"] == "KP140"]


def test_a_crash_looping_kube_proxy_is_reported_and_its_log_asked_for(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    cp = control_plane
    _pods(cp)
    for kubectl in _kubectls(tmp_path):
        table = tmp_path / "pods.txt"
        printed = _print(kubectl, cp, "pods", "-n", "kube-system", "-o", "wide")
        assert "CrashLoopBackOff" in printed, printed
        table.write_text(f"$ kubectl get pods -n kube-system -o wide\n{printed}")
        (found,) = _kp140(diagnose_json(table))
        assert (found["severity"], found["confidence"]) == ("warning", "low"), found
        assert "kube-proxy-crash on w-1 is CrashLoopBackOff (12 restart(s)" in found["summary"], found["summary"]
        assert "kubectl -n kube-system logs -p kube-proxy-crash" in " ".join(found["fix"])
        assert found["evidence"][0]["text"].startswith("kube-proxy-crash"), found["evidence"]

        # the node that runs well: its restarts alone are info, and the report stays clean at its default
        fine = diagnose_json(table, options=("--node", "cp-1"))
        assert [(f["severity"], f["confidence"]) for f in _kp140(fine)] == [("info", "low")], fine["findings"]
        assert "kube-proxy-fine on cp-1 is Running (2 restart(s)" in _kp140(fine)[0]["summary"]

        # the log of the run that ended names the cause: the restarts fold under it
        with_log = tmp_path / "with-log.txt"
        with_log.write_text(
            f"$ kubectl get pods -n kube-system -o wide\n{printed}$ kubectl -n kube-system logs -p kube-proxy-crash\n{LOG}"
        )
        report = diagnose_json(with_log)
        top = report["findings"][0]
        assert top["cause"] == "conntrack-sysctl-readonly", [f["cause"] for f in report["findings"]]
        assert not _kp140(report), "the restart signal is folded under the cause"

    for kubectl in _kubectls(tmp_path):
        described = subprocess.run(
            [kubectl, "--kubeconfig", str(cp.kubeconfig), "-n", "kube-system", "describe", "pod", *PODS],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        paste = tmp_path / "describe.txt"
        paste.write_text(f"$ kubectl -n kube-system describe pod {' '.join(PODS)}\n{described}")
        facts = Facts(load([paste]))
        pods = {p.obj.name: p for p in facts.cluster.pods(facts.cluster.table_only("Pod"))}
        crash = pods["kube-proxy-crash"]
        assert crash.node_name == "w-1" and crash.container_statuses[0].last_terminated.get("exitCode") == 255
        (found,) = _kp140(diagnose_json(paste))
        assert found["severity"] == "warning" and "kube-proxy-crash on w-1 is CrashLoopBackOff" in found["summary"]
        assert "kube-proxy-fine on cp-1 is Running (2 restart(s))" in found["summary"], found["summary"]
        # a description is no Pod object: its volumes are not read, so no check takes it to lack the xtables lock
        assert [f["code"] for f in diagnose_json(paste)["findings"]] == ["KP140"]

    objects = tmp_path / "pods.yaml"
    objects.write_text(_print(_kubectls(tmp_path)[0], cp, "pods", "-n", "kube-system", "-o", "yaml"))
    facts = Facts(load([objects]))
    states = {
        p.obj.name: [(c.state, c.ready, c.restart_count) for c in p.container_statuses] for p in facts.cluster.pods()
    }
    assert states == {"kube-proxy-crash": [("CrashLoopBackOff", False, 12)], "kube-proxy-fine": [("running", True, 2)]}
    # (the lab's Pods mount no xtables lock: KP102 is the root cause there, and folds the signal)
    report = diagnose_json(objects)
    (found,) = [f for top in report["findings"] for f in (top, *top["folded"]) if f["code"] == "KP140"]
    assert found["severity"] == "warning" and "kube-proxy-crash on w-1 is CrashLoopBackOff" in found["summary"], found
