"""The lab's real control plane: kube-apiserver v1.20 built from Debian's source, with etcd, in a
network namespace, answers the kubernetes client, and RBAC denies a token it should deny.

The binaries are built on first use into the cache (:mod:`.control_plane`), never skipped for
being missing; the tests skip only without root or network namespaces (and fail in CI then).
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from .control_plane import Binaries, ControlPlane, endpointslice, endpointslices
from .netns import list_netns


def test_kube_proxy_and_apiserver_report_v1_20(lab_binaries: Binaries) -> None:
    for binary in (lab_binaries.kube_proxy, lab_binaries.kube_apiserver):
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, check=True)
        assert out.stdout.strip().startswith("Kubernetes v1.20."), out.stdout
        assert out.stdout.strip() == f"Kubernetes {lab_binaries.version}"


def _api(cp: ControlPlane, kubeconfig: str | None = None) -> client.ApiClient:
    return config.new_client_from_config(config_file=kubeconfig or str(cp.kubeconfig))


def test_objects_round_trip(control_plane: ControlPlane) -> None:
    cp = control_plane
    api = _api(cp)
    core = client.CoreV1Api(api)
    assert client.VersionApi(api).get_code().git_version.startswith("v1.20.")

    # What 1.20 serves for EndpointSlices: discovery.k8s.io/v1beta1 only (v1 came in 1.21).
    status, group = cp.request("GET", "/apis/discovery.k8s.io")
    assert status == 200
    assert [v["version"] for v in group["versions"]] == ["v1beta1"]

    core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name="node-a", labels={"kubernetes.io/hostname": "node-a"}),
            spec=client.V1NodeSpec(pod_cidr="10.180.0.0/24", pod_cidrs=["10.180.0.0/24"]),
        )
    )
    node = core.read_node("node-a")
    assert node.spec.pod_cidr == "10.180.0.0/24"
    assert node.metadata.labels["kubernetes.io/hostname"] == "node-a"

    core.create_namespaced_service(
        "default",
        client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(
                selector={"app": "web"},
                ports=[client.V1ServicePort(name="http", port=80, target_port=8080, protocol="TCP")],
            ),
        ),
    )
    svc = core.read_namespaced_service("web", "default")
    assert ipaddress.ip_address(svc.spec.cluster_ip) in ipaddress.ip_network(cp.service_cidr)
    assert [(p.port, p.target_port) for p in svc.spec.ports] == [(80, 8080)]

    slices = endpointslices(api)
    body = endpointslice(
        "web-abc12",
        "web",
        [
            {
                "addresses": ["10.180.0.1"],
                "conditions": {"ready": True},
                "topology": {"kubernetes.io/hostname": "node-a"},
            },
            {"addresses": ["10.180.0.2"], "conditions": {"ready": False}},
        ],
        [{"name": "http", "port": 8080, "protocol": "TCP"}],
    )
    slices.create(body=body, namespace="default")
    listed = slices.get(namespace="default", label_selector="kubernetes.io/service-name=web").to_dict()
    assert [s["metadata"]["name"] for s in listed["items"]] == ["web-abc12"]
    got = listed["items"][0]
    assert [(e["addresses"], e["conditions"]["ready"]) for e in got["endpoints"]] == [
        (["10.180.0.1"], True),
        (["10.180.0.2"], False),
    ]
    assert got["endpoints"][0]["topology"] == {"kubernetes.io/hostname": "node-a"}
    assert got["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]

    # The apiserver's own Service, on the first address of the range, as a real cluster has it.
    kubernetes_svc = core.read_namespaced_service("kubernetes", "default")
    assert kubernetes_svc.spec.cluster_ip == str(ipaddress.ip_network(cp.service_cidr).network_address + 1)


def test_a_limited_token_is_denied_by_rbac(control_plane: ControlPlane) -> None:
    cp = control_plane
    _token, kubeconfig = cp.service_account_kubeconfig("limited")
    core = client.CoreV1Api(_api(cp, str(kubeconfig)))
    with pytest.raises(ApiException) as denied:
        core.list_node()
    assert denied.value.status == 403
    message = json.loads(denied.value.body)["message"]
    assert 'User "system:serviceaccount:default:limited" cannot list resource "nodes"' in message
    # Granting it a role through the admin changes the answer: RBAC really decides.
    status, out = cp.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "limited-nodes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-proxier"},
            "subjects": [{"kind": "ServiceAccount", "name": "limited", "namespace": "default"}],
        },
    )
    assert status == 201, out
    # the API server authorizes from its informer's copy of the bindings: it sees a new one within
    # moments, not at once (a loaded machine has taken more than the first retry here)
    deadline = time.monotonic() + 30
    while True:
        try:
            assert core.list_node().items is not None
            break
        except ApiException as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with pytest.raises(ApiException) as still_denied:
        core.list_namespaced_secret("default")
    assert still_denied.value.status == 403
    assert cp.request("GET", "/api/v1/nodes", token="not-a-token")[0] == 401


def test_processes_stopped_and_namespace_deleted_when_the_block_raises(lab_binaries: Binaries) -> None:
    with pytest.raises(RuntimeError, match="boom"), ControlPlane(lab_binaries) as cp:
        pids = [p.popen.pid for p in cp._procs]
        name, workdir = cp.netns.name, cp.dir
        assert len(pids) == 2 and name in list_netns()
        raise RuntimeError("boom")
    assert name not in list_netns()
    assert not workdir.exists()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
