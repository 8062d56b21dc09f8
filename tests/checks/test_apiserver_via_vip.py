"""KP129: kube-proxy dialling the apiserver at the `kubernetes` Service address it programs itself
(kubeadm#570, kubernetes-anywhere#232); other components failing there are its consequence."""

from __future__ import annotations

from collections.abc import Callable

from conftest import none_of, one

from kpdoctor.model import Confidence, Report

Diagnose = Callable[..., Report]

# kubeadm#570, as posted
KUBEADM = (
    "I1124 08:04:24.890496       1 server.go:385] Neither kubeconfig file nor master URL was specified. Falling back "
    "to in-cluster config.\n"
    "I1124 08:04:24.893532       1 server_others.go:124] Using iptables Proxier.\n"
    "W1124 08:04:54.893960       1 server.go:580] Failed to retrieve node info: Get "
    "https://10.96.0.1:443/api/v1/nodes/szx1000358392: dial tcp 10.96.0.1:443: i/o timeout\n"
    "W1124 08:04:54.894141       1 proxier.go:468] invalid nodeIP, initializing kube-proxy with 127.0.0.1 as nodeIP\n"
)
NO_FALLBACK_LINE = "\n".join(KUBEADM.splitlines()[1:]) + "\n"
REAL_ADDRESS = NO_FALLBACK_LINE.replace("10.96.0.1", "192.168.56.10")
# calico-kube-controllers on a node whose kube-proxy is broken (kubeadm#1461): a consequence
CALICO = (
    "2019-04-23 13:45:54.296 [ERROR][1] client.go 232: Error getting cluster information config "
    'ClusterInformation="default" error=Get https://10.96.0.1:443/apis/crd.projectcalico.org/v1/'
    "clusterinformations/default: dial tcp 10.96.0.1:443: i/o timeout\n"
)
SERVICE = """apiVersion: v1
kind: Service
metadata:
  name: kubernetes
  namespace: default
spec:
  clusterIP: 172.30.0.1
  ports:
  - port: 443
"""


def test_in_cluster_fallback_and_the_vip_timing_out(diagnose: Diagnose) -> None:
    report = diagnose({"kube-proxy.log": KUBEADM})
    f = one(report, "KP129")
    assert f.confidence == Confidence.HIGH and "10.96.0.1:443" in f.summary
    assert report.visible()[0].code == "KP129"  # the root of KP111's 127.0.0.1 fallback


def test_a_default_service_range_vip_alone_is_medium(diagnose: Diagnose) -> None:
    assert one(diagnose({"kube-proxy.log": NO_FALLBACK_LINE}), "KP129").confidence == Confidence.MEDIUM


def test_the_services_own_vip_from_the_objects(diagnose: Diagnose) -> None:
    log = NO_FALLBACK_LINE.replace("10.96.0.1", "172.30.0.1")
    assert one(diagnose({"kube-proxy.log": log, "svc.yaml": SERVICE}), "KP129").confidence == Confidence.HIGH


def test_the_apiservers_real_address_or_another_component_is_not_this(diagnose: Diagnose) -> None:
    none_of(diagnose({"kube-proxy.log": REAL_ADDRESS}), "KP129")
    none_of(diagnose({"calico.log": CALICO}), "KP129")
