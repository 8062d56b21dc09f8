"""KP109 multiple-kube-proxy: two kube-proxy processes on one node; a dual-stack health-check port
in use is not one."""

from __future__ import annotations

from checks.helpers import Diag

from kpdoctor.model import Severity


def test_multiple_kube_proxy_processes(diagnose: Diag) -> None:
    ps = (
        "UID          PID    PPID  C STIME TTY          TIME CMD\n"
        "root         900       1  2 Oct08 ?        00:20:00 /usr/bin/kube-proxy --kubeconfig=/etc/kubernetes/kube-proxy.conf\n"
        "root        3000    2990  0 Oct08 ?        00:00:01 /usr/bin/containerd-shim-runc-v2 -namespace k8s.io -id abc\n"
        "root        3010    3000  1 Oct08 ?        00:05:00 /usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf\n"
    )
    log = "E1120 13:53:53.641275       1 healthcheck.go:317] Failed to start node healthz on 0.0.0.0:10256: listen tcp 0.0.0.0:10256: bind: address already in use\n"
    r = diagnose({"ps.txt": ps, "kp.log": log})
    f = r.visible()[0]
    assert f.cause == "multiple-kube-proxy" and "PID 900" in f.summary


def test_dual_stack_healthcheck_port_is_not_multiple_kube_proxy(diagnose: Diag) -> None:
    log = (
        'E0905 12:00:00.000000       1 service_health.go:145] "Failed to start healthcheck" '
        'err="listen tcp 0.0.0.0:30256: bind: address already in use" node="node1" service="default/lb" port=30256\n'
        'I0905 12:00:01.000000       1 proxier.go:820] "SyncProxyRules complete" elapsed="10ms"\n'
    )
    assert diagnose({"kp.log": log}, min_severity=Severity.WARNING).visible() == []
