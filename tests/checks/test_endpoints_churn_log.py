"""KP128 from a log: leader election rewriting Endpoints, seen in the apiserver's request lines that
localkube (and k3s) merge with kube-proxy's (minikube#1158)."""

from __future__ import annotations

from collections.abc import Callable

from conftest import none_of, one

from kpdoctor.model import Confidence, Report

Diagnose = Callable[..., Report]

UPDATES = (
    "Jul 05 19:14:02 minikube localkube[3498]: I0705 19:14:02.157508    3498 config.go:95] "
    "Calling handler.OnEndpointsUpdate()\n"
)
WRITE = (
    "Jul 05 19:14:03 minikube localkube[3498]: I0705 19:14:03.087432    3498 wrap.go:75] PUT "
    "/api/v1/namespaces/kube-system/endpoints/kube-controller-manager: (2.64199ms) 200 [[localkube/v1.6.4 "
    "(linux/amd64) kubernetes/$Format/leader-election] 127.0.0.1:32964]\n"
)
READ = WRITE.replace("PUT ", "GET ")


def test_leader_election_writes_with_kube_proxys_updates(diagnose: Diagnose) -> None:
    f = one(diagnose({"localkube.log": UPDATES + READ + WRITE}), "KP128")
    assert f.confidence == Confidence.MEDIUM
    assert "kube-system/kube-controller-manager" in f.summary
    assert {c.line for c in f.evidence} == {3} and "kube-proxy's own log" in f.confidence_reason


def test_reads_of_the_lock_are_not_writes(diagnose: Diagnose) -> None:
    none_of(diagnose({"localkube.log": UPDATES + READ}), "KP128")


def test_kube_proxy_on_endpointslices_is_not_driven_by_them(diagnose: Diagnose) -> None:
    version = "I0705 19:14:01.000000    3498 server.go:484] Version: v1.19.3\n"
    none_of(diagnose({"localkube.log": version + UPDATES + WRITE}), "KP128")
