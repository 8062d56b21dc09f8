"""KP317 ipvs-strict-arp-disabled and KP318 ipvs-idle-timeout: IPVS mode's two node-wide settings.

Real formats: `ipvsadm -ln --timeout` (ipvsadm.c list_timeout(), posted in kubernetes#84041),
KubeProxyConfiguration's `ipvs:` block, sysctl's `name = value`, a LoadBalancer Service as the
API prints it.
"""

from __future__ import annotations

from pathlib import Path

from checks.helpers import run
from conftest import none_of, one, write

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.facts import Facts
from kpdoctor.model import Confidence, Severity

CONFIG = """apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: "ipvs"
ipvs:
  strictARP: {strict}
  tcpTimeout: {timeout}
"""
NOT_STRICT = "net.ipv4.conf.all.arp_ignore = 0\nnet.ipv4.conf.all.arp_announce = 0\n"
STRICT = "net.ipv4.conf.all.arp_ignore = 1\nnet.ipv4.conf.all.arp_announce = 2\n"
LB_SERVICE = """apiVersion: v1
kind: Service
metadata:
  name: ingress-nginx-controller
  namespace: ingress-nginx
spec:
  type: LoadBalancer
  clusterIP: 10.96.10.10
  ports:
  - port: 80
    protocol: TCP
    targetPort: 80
status:
  loadBalancer:
    ingress:
    - ip: 192.168.1.240
"""
TIMEOUTS = "root@my-master01:~# ipvsadm -ln --timeout\nTimeout (tcp tcpfin udp): 900 120 300\n"


def test_ipvs_timeouts_are_read_from_ipvsadm(tmp_path: Path) -> None:
    facts = Facts(load([write(tmp_path, "t.txt", TIMEOUTS)]))
    assert [a.kind for a in facts.evidence.artifacts] == [Kind.IPVSADM]
    got = facts.ipvs_timeouts
    assert got is not None and (got[0].tcp, got[0].tcpfin, got[0].udp, got[0].line) == (900, 120, 300, 2)
    # alone, without the prompt: still ipvsadm's, not a `-Sn` listing
    alone = Facts(load([write(tmp_path, "t2.txt", "Timeout (tcp tcpfin udp): 900 120 300\n")]))
    assert alone.ipvs_timeouts is not None and alone.of(Kind.IPVSADM)[0].attrs.get("format") != "save"


def test_arp_not_strict_with_a_load_balancer_ip_is_a_warning(tmp_path: Path) -> None:
    paths = [
        write(tmp_path, "kube-proxy.yaml", CONFIG.format(strict="false", timeout="0s")),
        write(tmp_path, "sysctl.txt", NOT_STRICT),
        write(tmp_path, "svc.yaml", LB_SERVICE),
    ]
    f = one(run(paths), "KP317")
    assert f.cause == "ipvs-strict-arp-disabled" and f.severity == Severity.WARNING and not f.suspected
    assert f.confidence == Confidence.MEDIUM and "192.168.1.240" in f.summary and "arp_ignore = 0" in f.summary
    assert {e.text for e in f.evidence} >= {"net.ipv4.conf.all.arp_ignore = 0"}
    assert any("strictARP: true" in x for x in f.fix)


def test_strict_arp_off_in_the_configuration_is_suspected_until_the_sysctls_say(tmp_path: Path) -> None:
    paths = [write(tmp_path, "kube-proxy.yaml", CONFIG.format(strict="false", timeout="0s"))]
    paths.append(write(tmp_path, "svc.yaml", LB_SERVICE))
    f = one(run(paths), "KP317")
    assert f.suspected and f.confidence == Confidence.LOW and "set to false" in f.summary
    assert f.decided_by == ["sysctl net.ipv4.conf.all.arp_ignore net.ipv4.conf.all.arp_announce"]
    # the node's settings shown strict (something else set them): nothing
    none_of(run([*paths, write(tmp_path, "sysctl.txt", STRICT)]), "KP317")
    # strictARP on: nothing
    on = write(tmp_path, "on.yaml", CONFIG.format(strict="true", timeout="0s"))
    none_of(run([on, paths[1]]), "KP317")


def test_arp_not_strict_without_an_announced_address_is_a_lead_and_other_modes_nothing(tmp_path: Path) -> None:
    ipvs = write(tmp_path, "kube-proxy.yaml", CONFIG.format(strict="false", timeout="0s"))
    f = one(run([ipvs, write(tmp_path, "sysctl.txt", NOT_STRICT)]), "KP317")
    assert f.severity == Severity.INFO and f.suspected
    iptables = write(
        tmp_path, "iptables.yaml", CONFIG.format(strict="false", timeout="0s").replace('"ipvs"', '"iptables"')
    )
    none_of(
        run([iptables, write(tmp_path, "sysctl.txt", NOT_STRICT), write(tmp_path, "svc.yaml", LB_SERVICE)]), "KP317"
    )


def test_ipvs_timeout_shorter_than_keepalive_is_named_with_the_numbers(tmp_path: Path) -> None:
    sysctl = write(tmp_path, "sysctl.txt", "net.ipv4.tcp_keepalive_time = 7200\nnet.ipv4.tcp_keepalive_intvl = 75\n")
    f = one(run([write(tmp_path, "ipvsadm.txt", TIMEOUTS), sysctl]), "KP318")
    assert f.cause == "ipvs-idle-timeout" and f.severity == Severity.INFO and f.suspected
    assert "after 900 s without a packet (ipvsadm says)" in f.summary
    assert "after 7200 s (net.ipv4.tcp_keepalive_time)" in f.summary
    assert [e.text for e in f.evidence] == [
        "Timeout (tcp tcpfin udp): 900 120 300",
        "net.ipv4.tcp_keepalive_time = 7200",
    ]


def test_resets_reported_by_clients_make_it_a_warning_and_a_long_timeout_rules_it_out(tmp_path: Path) -> None:
    config = write(tmp_path, "kube-proxy.yaml", CONFIG.format(strict="true", timeout="15m0s"))
    client = write(
        tmp_path, "app.log", "Error: read tcp 10.244.1.7:51944->10.96.45.12:5432: read: connection reset by peer\n"
    )
    f = one(run([config, client]), "KP318")
    assert f.severity == Severity.WARNING and "after 900 s without a packet (kube-proxy's ipvs.tcpTimeout)" in f.summary
    long = write(tmp_path, "long.yaml", CONFIG.format(strict="true", timeout="2h30m0s"))
    none_of(run([long, client]), "KP318")
    # IPVS mode with nothing about timeouts or resets: every IPVS node has the defaults
    none_of(run([write(tmp_path, "plain.yaml", CONFIG.format(strict="true", timeout="0s"))]), "KP318")


def test_an_arp_announcer_in_the_evidence_makes_it_certain(tmp_path: Path) -> None:
    """kube-vip's DaemonSet (ARP mode announces the addresses it is given) stands for the
    addresses when no Service shows one."""
    kube_vip = """apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-vip-ds
  namespace: kube-system
spec:
  template:
    spec:
      containers:
      - name: kube-vip
        image: ghcr.io/kube-vip/kube-vip:v0.8.0
        args: ["manager"]
"""
    paths = [
        write(tmp_path, "kube-proxy.yaml", CONFIG.format(strict="false", timeout="0s")),
        write(tmp_path, "sysctl.txt", NOT_STRICT),
        write(tmp_path, "ds.yaml", kube_vip),
    ]
    f = one(run(paths), "KP317")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.HIGH and not f.suspected
    assert "the addresses MetalLB or kube-vip announce" in f.summary
    assert any("kube-vip-ds" in e.text for e in f.evidence)
