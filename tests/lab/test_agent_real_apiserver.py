"""The agent's cluster reader against a real kube-apiserver v1.20, which serves EndpointSlices as
discovery.k8s.io/v1beta1 only: it reads them in that version (it asked for v1 alone before, got
404 for ever, and verified every Service against no endpoints: false critical findings on a
healthy node), and says which version it read."""

from __future__ import annotations

import json

from kubernetes import client, config

from kpdoctor.agent.cluster import ClusterCache
from kpdoctor.parse.k8s import Objects

from .control_plane import ControlPlane, endpointslice, endpointslices


def _api(cp: ControlPlane) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cp.kubeconfig))


def _objects(cp: ControlPlane) -> None:
    api = _api(cp)
    core = client.CoreV1Api(api)
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="node-a")))
    core.create_namespaced_service(
        "default",
        client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(
                selector={"app": "web"}, ports=[client.V1ServicePort(name="http", port=80, target_port=8080)]
            ),
        ),
    )
    ready = [{"addresses": ["10.180.0.1"], "conditions": {"ready": True}}]
    body = endpointslice("web-abc12", "web", ready, [{"name": "http", "port": 8080, "protocol": "TCP"}])
    endpointslices(api).create(body=body, namespace="default")


def test_the_agent_reads_v1beta1_endpointslices_from_a_1_20_apiserver(control_plane: ControlPlane) -> None:
    _objects(control_plane)
    cache = ClusterCache(_api(control_plane), "node-a", watch_seconds=5)
    cache.start()
    try:
        assert cache.wait_synced(60)
        got, absent = cache.snapshot()
        assert cache.errors() == {}
    finally:
        cache.stop()
    assert absent == []
    by_path = {c.path: c for c in got}
    slices = by_path["cluster/endpointslices.json"]
    doc = json.loads(slices.data)
    # the apiserver's own slice for Service kubernetes, and the test's
    assert sorted((o["apiVersion"], o["metadata"]["name"]) for o in doc["items"]) == [
        ("discovery.k8s.io/v1beta1", "kubernetes"),
        ("discovery.k8s.io/v1beta1", "web-abc12"),
    ]
    assert isinstance(slices.parsed, Objects)
    [obj] = [o for o in slices.parsed.of("EndpointSlice") if o.name == "web-abc12"]
    assert obj.namespace == "default"
    assert [o["metadata"]["name"] for o in json.loads(by_path["cluster/services.json"].data)["items"]] == [
        "kubernetes",
        "web",
    ]
