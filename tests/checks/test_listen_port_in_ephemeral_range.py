"""KP302 listen-port-in-ephemeral-range: listeners and bind failures inside the ephemeral port range."""

from __future__ import annotations

import json
from pathlib import Path

from checks.helpers import Diag, case, codes, of, run
from conftest import one, write

from kpdoctor.model import Confidence, Severity

SS_9100 = """\
State  Recv-Q Send-Q Local Address:Port Peer Address:PortProcess
LISTEN 0      4096               *:9100            *:*    users:(("node_exporter",pid=1234,fd=3))
LISTEN 0      4096       127.0.0.1:10248      0.0.0.0:*    users:(("kubelet",pid=900,fd=20))
"""


def test_seed_listener_inside_a_widened_ephemeral_range(tmp_path: Path) -> None:
    s = write(
        tmp_path, "sysctl.txt", "net.ipv4.ip_local_port_range = 1024\t65535\nnet.ipv4.ip_local_reserved_ports = \n"
    )
    ss = write(tmp_path, "ss.txt", SS_9100)
    f = one(run([s, ss]), "KP302")
    assert f.severity == Severity.WARNING
    assert "tcp 9100 listened on by node_exporter (pid 1234)" in f.summary
    assert "10248" not in f.summary  # loopback-only listener on a port kubelet binds
    assert any("ip_local_reserved_ports=9100" in x for x in f.fix)


def test_reserved_or_default_range_is_quiet_for_9100(tmp_path: Path) -> None:
    ss = write(tmp_path, "ss.txt", SS_9100)
    reserved = write(
        tmp_path,
        "a.txt",
        "net.ipv4.ip_local_port_range = 1024 65535\nnet.ipv4.ip_local_reserved_ports = 9100,30000-32767\n",
    )
    assert "KP302" not in codes(run([reserved, ss]))
    default = write(
        tmp_path, "b.txt", "net.ipv4.ip_local_port_range = 32768 60999\nnet.ipv4.ip_local_reserved_ports =\n"
    )
    assert "KP302" not in codes(run([default, ss]))


def test_nodeport_in_range_with_kube_proxy_bind_error_is_critical(tmp_path: Path) -> None:
    s = write(tmp_path, "sysctl.txt", "net.ipv4.ip_local_port_range = 10000 65000\n")
    svc = write(
        tmp_path,
        "svc.json",
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "shop"},
                "spec": {
                    "type": "NodePort",
                    "clusterIP": "10.96.0.10",
                    "selector": {"app": "web"},
                    "ports": [{"port": 80, "nodePort": 31234}],
                },
            }
        ),
    )
    log = write(
        tmp_path,
        "kube-proxy.log",
        'E1121 10:00:00.000000       1 proxier.go:1640] "can\'t open port, skipping it" '
        'err="listen tcp4 :31234: bind: address already in use" port="\\"nodePort for shop/web\\" (:31234/tcp4)"\n',
    )
    f = one(run([s, svc, log]), "KP302")
    assert f.severity == Severity.CRITICAL
    assert "NodePort 31234 of Service Service/shop/web" in f.summary
    assert any("30000-32767" in x for x in f.fix)


def test_kube_proxy_nodeport_bind_failure_with_the_kernel_default_range(diagnose: Diag) -> None:
    """k8s#40920: kube-proxy could not open NodePort 34104; no sysctl given."""
    (f,) = of(diagnose(case("k8s-40920", "kube-proxy.log", "kubectl-version.txt")), "KP302")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.MEDIUM
    assert "ip_local_port_range 32768-60999 (the kernel default: no ip_local_port_range was given" in f.summary
    assert "NodePort 34104 of ccp/memcached:11211 failed to bind" in f.summary
    assert f.evidence[0].artifact.endswith("kube-proxy.log") and f.evidence[0].line == 1
    assert "ip_local_reserved_ports=34104,30000-32767" in f.fix[0]


def test_a_daemon_bind_failure_inside_a_widened_range_is_critical(diagnose: Diag) -> None:
    """rancher#12510: the ingress controller's 10254 inside ip_local_port_range 1024-65535."""
    r = diagnose(case("rancher-12510", "ingress-controller.log", "ip_local_port_range.txt", "lsof.txt"))
    (f,) = of(r, "KP302")
    assert f.severity == Severity.CRITICAL and f.confidence == Confidence.HIGH
    assert "1024-65535 (widened below the kernel default 32768)" in f.summary
    assert "tcp port 10254 failed to bind" in f.summary
    assert any(c.artifact.endswith("ip_local_port_range.txt") for c in f.evidence)
    assert any(c.artifact.endswith("ingress-controller.log") for c in f.evidence)
