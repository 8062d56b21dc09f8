"""The live cluster of tests/kubeapi_replay.py, driven by the real Kubernetes client.

Nothing in the client is patched: each test points a ``kubernetes.client.ApiClient`` at a loopback
``ReplayServer(cluster=LiveCluster(...))`` and checks that lists, writes and watches behave as the
client expects them to from kube-apiserver (status codes, Status bodies, content types, event streams).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3
from kubeapi_replay import (
    GENERATE_NAME_CHARS,
    LiveCluster,
    ReplayServer,
    get_exchange,
    status,
)
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

NODE = "worker-1"
T0 = "2026-05-01T10:00:00Z"
T1 = "2026-05-01T10:05:00Z"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client honours $HTTP(S)_PROXY; the loopback server must be reached directly."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


# -- objects, as a GET returns them --------------------------------------------------------------------


def service(name: str, namespace: str = "default", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10",
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]},
    }


def condition(ctype: str, state: str, reason: str) -> dict[str, Any]:
    return {"type": ctype, "status": state, "reason": reason, "message": f"{ctype} is {state}",
            "lastHeartbeatTime": T0, "lastTransitionTime": T0}


def node(name: str = NODE) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"podCIDR": "10.244.1.0/24"},
        "status": {
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
                condition("Ready", "True", "KubeletReady"),
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.1.17"}],
        },
    }


def pod(name: str, node_name: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name.split("-")[0]}},
        "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]},
        "status": {"phase": "Running"},
    }


def endpoint_slice(name: str, service_name: str, ready: bool = True, namespace: str = "default") -> dict[str, Any]:
    return {
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kubernetes.io/service-name": service_name}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.1.5"], "conditions": {"ready": ready}, "nodeName": NODE}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def cluster() -> LiveCluster:
    return LiveCluster([
        node(), node("worker-2"),
        service("kubernetes"), service("web", labels={"app": "web"}), service("api", labels={"app": "api"}),
        service("kube-dns", "kube-system", {"app": "dns"}), service("metrics", "kube-system"),
        pod("web-1", NODE), pod("web-2", "worker-2"), pod("dns-1", NODE, "kube-system"),
        endpoint_slice("web-abcde", "web"),
    ])


@pytest.fixture
def live() -> LiveCluster:
    return cluster()


@pytest.fixture
def server(live: LiveCluster) -> Iterator[ReplayServer]:
    with ReplayServer(cluster=live) as srv:
        yield srv


@pytest.fixture
def api(server: ReplayServer) -> Iterator[client.ApiClient]:
    with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        yield api_client


def body_of(e: ApiException) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(e.body)
    return data


def in_thread(fn: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


# -- lists and gets -------------------------------------------------------------------------------------


def test_list_is_chunked_with_consistent_pages(live: LiveCluster, server: ReplayServer, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    first = v1.list_service_for_all_namespaces(limit=2)
    rv = first.metadata.resource_version
    assert rv == str(live.resource_version)
    assert [f"{s.metadata.namespace}/{s.metadata.name}" for s in first.items] == ["default/api", "default/kubernetes"]
    assert first.metadata.remaining_item_count == 3 and first.metadata._continue

    # a change between pages does not show on the next ones: they are read at the first page's version
    live.delete("Service", "kube-system", "metrics")
    live.apply(service("zz-new", "kube-system"))
    names, token = [], first.metadata._continue
    while token:
        page = v1.list_service_for_all_namespaces(limit=2, _continue=token)
        assert page.metadata.resource_version == rv
        names += [f"{s.metadata.namespace}/{s.metadata.name}" for s in page.items]
        token = page.metadata._continue
    assert names == ["default/web", "kube-system/kube-dns", "kube-system/metrics"]

    fresh = v1.list_service_for_all_namespaces()
    assert fresh.metadata.resource_version == str(live.resource_version) != rv
    assert "kube-system/zz-new" in [f"{s.metadata.namespace}/{s.metadata.name}" for s in fresh.items]
    assert fresh.metadata._continue is None

    assert [s.metadata.name for s in v1.list_namespaced_service("default", label_selector="app=web").items] == ["web"]
    assert [s.metadata.name for s in v1.list_namespaced_service("default", label_selector="app in (web,api)").items] == [
        "api", "web"]
    on_node = v1.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}")
    assert [p.metadata.name for p in on_node.items] == ["web-1", "dns-1"]  # by namespace, then name
    by_name = v1.list_node(field_selector="metadata.name=worker-2")
    assert [n.metadata.name for n in by_name.items] == ["worker-2"]
    slices = client.DiscoveryV1Api(api).list_endpoint_slice_for_all_namespaces(
        label_selector="kubernetes.io/service-name=web")
    assert [s.metadata.name for s in slices.items] == ["web-abcde"]

    with pytest.raises(ApiException) as bad:
        v1.list_pod_for_all_namespaces(field_selector="spec.nodeNmae=x")
    assert bad.value.status == 400 and "field label not supported: spec.nodeNmae" in body_of(bad.value)["message"]

    assert v1.read_node(NODE).status.conditions[-1].type == "Ready"
    assert v1.read_namespaced_pod("dns-1", "kube-system").spec.node_name == NODE
    with pytest.raises(ApiException) as missing:
        v1.read_node("worker-9")
    assert missing.value.status == 404
    assert body_of(missing.value) == status(404, "NotFound", 'nodes "worker-9" not found',
                                            {"name": "worker-9", "kind": "nodes"})
    assert server.unexpected == [] and server.writes == []


def test_exchanges_answer_first_and_unknown_paths_are_404(live: LiveCluster) -> None:
    recorded = node()
    recorded["metadata"]["labels"]["recorded"] = "yes"
    with ReplayServer([get_exchange(f"/api/v1/nodes/{NODE}", recorded)], cluster=live) as srv, \
            client.ApiClient(client.Configuration(host=srv.url)) as api:
        v1 = client.CoreV1Api(api)
        assert v1.read_node(NODE).metadata.labels["recorded"] == "yes"  # the exchange
        assert "recorded" not in v1.read_node(NODE).metadata.labels  # used up: the live cluster
        with pytest.raises(ApiException) as unknown:
            client.CustomObjectsApi(api).list_cluster_custom_object("example.com", "v1", "widgets")
        assert unknown.value.status == 404
        assert srv.unconsumed() == []
        assert srv.unexpected == [{"method": "GET", "path": "/apis/example.com/v1/widgets", "query": {}}]


# -- writes -------------------------------------------------------------------------------------------------


def test_event_created_with_generate_name_then_patched(live: LiveCluster, server: ReplayServer,
                                                        api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    prefix = f"{NODE}.kpdoctor."
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=prefix),
        involved_object=client.V1ObjectReference(kind="Node", name=NODE, api_version="v1"),
        reason="KubeProxySyncFailing", message="iptables-restore failed", type="Warning", count=1,
        first_timestamp=T0, last_timestamp=T0, source=client.V1EventSource(component="kpdoctor", host=NODE),
    )
    created = v1.create_namespaced_event("default", event)
    name = created.metadata.name
    assert name.startswith(prefix) and len(name) == len(prefix) + 5
    assert set(name[len(prefix):]) <= set(GENERATE_NAME_CHARS)
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert created.metadata.resource_version == str(live.resource_version)
    post = server.writes[0]
    # the client sends a create without a Content-Type (the apiserver then reads JSON)
    assert (post["method"], post["path"], post["content_type"], post["status"]) == (
        "POST", "/api/v1/namespaces/default/events", None, 201)
    assert post["body"]["metadata"] == {"generateName": prefix}
    assert post["body"]["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NODE}
    # the model parses the timestamp; it goes out as isoformat(), "+00:00" rather than "Z"
    assert post["body"]["firstTimestamp"] == "2026-05-01T10:00:00+00:00"

    patched = v1.patch_namespaced_event(name, "default", {"count": 2, "lastTimestamp": T1, "message": "again"})
    assert (patched.count, patched.message, patched.reason) == (2, "again", "KubeProxySyncFailing")
    assert patched.last_timestamp.isoformat().startswith("2026-05-01T10:05:00")
    patch = server.writes[1]
    assert (patch["method"], patch["path"], patch["content_type"], patch["status"]) == (
        "PATCH", f"/api/v1/namespaces/default/events/{name}", "application/strategic-merge-patch+json", 200)
    assert patch["body"] == {"count": 2, "lastTimestamp": T1, "message": "again"}
    stored = live.get("Event", "default", name)
    assert stored is not None and stored["count"] == 2 and stored["source"] == {"component": "kpdoctor", "host": NODE}
    assert int(stored["metadata"]["resourceVersion"]) == live.resource_version

    merged = v1.patch_namespaced_event(name, "default", {"count": 3}, _content_type="application/merge-patch+json")
    assert merged.count == 3 and server.writes[2]["content_type"] == "application/merge-patch+json"

    with pytest.raises(ApiException) as exists:
        v1.create_namespaced_event("default", client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=name), involved_object=client.V1ObjectReference(kind="Node", name=NODE)))
    assert exists.value.status == 409
    assert body_of(exists.value) == status(409, "AlreadyExists", f'events "{name}" already exists',
                                           {"name": name, "kind": "events"})
    with pytest.raises(ApiException) as wrong_ns:  # a cluster-scoped object's events belong to "default"
        v1.create_namespaced_event("kube-system", event)
    assert wrong_ns.value.status == 422 and body_of(wrong_ns.value)["reason"] == "Invalid"
    assert body_of(wrong_ns.value)["details"]["causes"][0]["field"] == "involvedObject.namespace"
    event.metadata.namespace = "default"
    with pytest.raises(ApiException) as mismatch:  # the body's namespace must be the path's
        v1.create_namespaced_event("kube-system", event)
    assert mismatch.value.status == 400 and body_of(mismatch.value)["reason"] == "BadRequest"
    with pytest.raises(ApiException) as gone:
        v1.patch_namespaced_event("no-such-event", "default", {"count": 2})
    assert gone.value.status == 404
    assert [w["status"] for w in server.writes] == [201, 200, 200, 409, 422, 400, 404]


def test_patch_node_status_merges_conditions_by_type(live: LiveCluster, server: ReplayServer,
                                                     api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    before = live.get("Node", None, NODE)
    assert before is not None
    mine = {"type": "KubeProxyHealthy", "status": "True", "reason": "SyncOK", "message": "rules in sync",
            "lastHeartbeatTime": T0, "lastTransitionTime": T0}
    added = v1.patch_node_status(NODE, {"status": {"conditions": [mine]}})
    assert [c.type for c in added.status.conditions] == ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready",
                                                         "KubeProxyHealthy"]
    write = server.writes[-1]
    assert (write["method"], write["path"], write["content_type"], write["status"]) == (
        "PATCH", f"/api/v1/nodes/{NODE}/status", "application/strategic-merge-patch+json", 200)
    assert write["body"] == {"status": {"conditions": [mine]}}
    after = live.get("Node", None, NODE)
    assert after is not None
    assert after["status"]["conditions"][:4] == before["status"]["conditions"]  # the others untouched
    assert after["status"]["conditions"][4] == mine
    assert after["spec"] == before["spec"] and after["metadata"]["uid"] == before["metadata"]["uid"]

    # a model as the body: the client drops its unset fields; the fields not sent stay as they were
    update = client.V1Node(status=client.V1NodeStatus(conditions=[client.V1NodeCondition(
        type="KubeProxyHealthy", status="False", reason="SyncFailing", message="iptables-restore failed")]))
    rv = live.resource_version
    updated = v1.patch_node_status(NODE, update)
    assert server.writes[-1]["body"] == {"status": {"conditions": [{
        "message": "iptables-restore failed", "reason": "SyncFailing", "status": "False", "type": "KubeProxyHealthy"}]}}
    assert server.writes[-1]["content_type"] == "application/strategic-merge-patch+json"
    assert len(updated.status.conditions) == 5
    stored = live.get("Node", None, NODE)
    assert stored is not None
    assert stored["status"]["conditions"][4] == {**mine, "status": "False", "reason": "SyncFailing",
                                                 "message": "iptables-restore failed"}
    assert stored["status"]["conditions"][:4] == before["status"]["conditions"]
    assert live.resource_version == rv + 1 == int(stored["metadata"]["resourceVersion"])

    # the same patch again changes nothing: the apiserver writes nothing (no new resourceVersion)
    v1.patch_node_status(NODE, update)
    assert live.resource_version == rv + 1
    # the status subresource keeps the spec; deleting one condition with the $patch directive
    v1.patch_node_status(NODE, {"spec": {"unschedulable": True},
                                "status": {"conditions": [{"type": "KubeProxyHealthy", "$patch": "delete"}]}})
    stored = live.get("Node", None, NODE)
    assert stored is not None and stored["spec"] == before["spec"]
    assert stored["status"]["conditions"] == before["status"]["conditions"]

    with pytest.raises(ApiException) as missing:
        v1.patch_node_status("worker-9", {"status": {"conditions": [mine]}})
    assert missing.value.status == 404 and body_of(missing.value)["message"] == 'nodes "worker-9" not found'


def test_patch_node_status_json_patch_and_merge_patch(live: LiveCluster, server: ReplayServer,
                                                      api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    mine = {"type": "KubeProxyHealthy", "status": "True", "reason": "SyncOK", "message": "ok"}
    # a list body keeps the client's default Content-Type: JSON Patch
    v1.patch_node_status(NODE, [{"op": "add", "path": "/status/conditions/-", "value": mine}])
    assert server.writes[-1]["content_type"] == "application/json-patch+json"
    assert server.writes[-1]["body"] == [{"op": "add", "path": "/status/conditions/-", "value": mine}]
    node_now = v1.patch_node_status(NODE, [
        {"op": "test", "path": "/status/conditions/4/type", "value": "KubeProxyHealthy"},
        {"op": "replace", "path": "/status/conditions/4/status", "value": "False"},
    ])
    assert [(c.type, c.status) for c in node_now.status.conditions][3:] == [("Ready", "True"),
                                                                            ("KubeProxyHealthy", "False")]

    rv = live.resource_version
    with pytest.raises(ApiException) as failed:  # a failing test op: 422, the json-patch error text dropped
        v1.patch_node_status(NODE, [
            {"op": "test", "path": "/status/conditions/3/type", "value": "KubeProxyHealthy"},
            {"op": "remove", "path": "/status/conditions/3"},
        ])
    assert failed.value.status == 422
    assert body_of(failed.value) == status(422, "Invalid",
                                           "the server rejected our request due to an error in our request", {})
    with pytest.raises(ApiException) as stale:  # an optimistic-concurrency miss: 409 Conflict
        v1.patch_node_status(NODE, {"metadata": {"resourceVersion": "1"}, "status": {"conditions": [mine]}})
    assert stale.value.status == 409 and body_of(stale.value)["reason"] == "Conflict"
    assert live.resource_version == rv

    # a JSON merge patch replaces the whole list: the other conditions are gone (why SMP is the one to use)
    v1.patch_node_status(NODE, {"status": {"conditions": [mine]}}, _content_type="application/merge-patch+json")
    stored = live.get("Node", None, NODE)
    assert stored is not None and stored["status"]["conditions"] == [mine]
    assert [w["status"] for w in server.writes] == [200, 200, 422, 409, 200]


def test_denied_writes_and_other_writes(live: LiveCluster, server: ReplayServer, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    live.deny("PATCH", "/api/v1/nodes/")  # RBAC without nodes/status patch
    with pytest.raises(ApiException) as denied:
        v1.patch_node_status(NODE, {"status": {"conditions": [{"type": "X", "status": "True"}]}})
    assert denied.value.status == 403
    assert body_of(denied.value)["message"] == (
        f'nodes "{NODE}" is forbidden: User "system:serviceaccount:kube-system:kpdoctor" cannot patch resource '
        '"nodes/status" in API group "" at the cluster scope')
    assert server.writes[-1]["status"] == 403 and server.writes[-1]["body"]["status"]["conditions"][0]["type"] == "X"
    assert [len(n["status"]["conditions"]) for n in live.objects("Node")] == [4, 4]  # unchanged
    event = client.CoreV1Event(metadata=client.V1ObjectMeta(generate_name="e."),
                               involved_object=client.V1ObjectReference(kind="Node", name=NODE))
    assert v1.create_namespaced_event("default", event).metadata.name.startswith("e.")  # other writes still pass
    live.allow()

    live.deny("POST", "/api/v1/namespaces/default/events", status(500, "InternalError", "etcdserver: leader changed"),
              times=1)
    with pytest.raises(ApiException) as once:
        v1.create_namespaced_event("default", event)
    assert once.value.status == 500
    v1.create_namespaced_event("default", event)  # the next one goes through

    with pytest.raises(ApiException) as not_allowed:  # writes the live cluster does not implement: 405
        v1.delete_namespaced_service("web", "default")
    assert not_allowed.value.status == 405 and body_of(not_allowed.value)["reason"] == "MethodNotAllowed"
    with pytest.raises(ApiException):
        v1.patch_node(NODE, {"metadata": {"labels": {"a": "b"}}})
    assert [(w["method"], w["status"]) for w in server.writes] == [
        ("PATCH", 403), ("POST", 201), ("POST", 500), ("POST", 201), ("DELETE", 405), ("PATCH", 405)]
    assert len(live.objects("Event")) == 2


def test_outage(live: LiveCluster, server: ReplayServer, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    live.down = True
    with pytest.raises(ApiException) as unavailable:
        v1.list_node()
    assert unavailable.value.status == 503 and body_of(unavailable.value)["reason"] == "ServiceUnavailable"
    with pytest.raises(ApiException) as write:
        v1.patch_node_status(NODE, {"status": {}})
    assert write.value.status == 503 and server.writes[-1]["status"] == 503
    live.down_mode = "close"  # no answer at all: urllib3 retries, then gives up
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        v1.list_node()
    live.down = False
    assert len(v1.list_node().items) == 2


# -- watches --------------------------------------------------------------------------------------------------


def test_watch_services_sees_live_changes_in_order(live: LiveCluster, server: ReplayServer,
                                                   api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    rv = v1.list_service_for_all_namespaces().metadata.resource_version

    def change() -> None:
        assert live.wait_for_watchers(1)
        live.apply(service("new", labels={"app": "new"}))
        live.apply(service("new", labels={"app": "new", "tier": "front"}))
        live.delete("Service", "default", "new")

    mutator = in_thread(change)
    w = watch.Watch()
    seen = []
    for event in w.stream(v1.list_service_for_all_namespaces, resource_version=rv, timeout_seconds=2):
        obj = event["object"]
        assert isinstance(obj, client.V1Service)
        seen.append((event["type"], obj.metadata.name, int(obj.metadata.resource_version), obj.metadata.labels))
        if len(seen) == 3:
            w.stop()
    mutator.join(2)
    assert [(t, n, labels) for t, n, _, labels in seen] == [
        ("ADDED", "new", {"app": "new"}), ("MODIFIED", "new", {"app": "new", "tier": "front"}),
        ("DELETED", "new", {"app": "new", "tier": "front"})]
    rvs = [r for _, _, r, _ in seen]
    assert rvs == sorted(rvs) and rvs[-1] == live.resource_version and rvs[0] > int(rv)
    assert w.resource_version == str(live.resource_version)
    assert live.wait_for_watchers(0, 2)  # the client hung up: the server ended that watch

    # a watch from that version replays the same history from the change log
    again = []
    for event in watch.Watch().stream(v1.list_namespaced_service, "default", resource_version=rv,
                                      timeout_seconds=1, label_selector="app=new"):
        again.append(event["type"])
        if len(again) == 3:
            break
    assert again == ["ADDED", "MODIFIED", "DELETED"]


def test_watch_without_version_and_selector_transitions(live: LiveCluster, server: ReplayServer,
                                                        api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)

    def change() -> None:
        assert live.wait_for_watchers(1)
        svc = live.get("Service", "default", "api")
        assert svc is not None
        svc["metadata"]["labels"]["app"] = "web"  # into the selection
        live.apply(svc)
        live.apply(service("web", labels={"app": "gone"}))  # out of it

    mutator = in_thread(change)
    w = watch.Watch()
    seen = []
    for event in w.stream(v1.list_namespaced_service, "default", label_selector="app=web", timeout_seconds=2):
        seen.append((event["type"], event["object"].metadata.name, event["object"].metadata.labels))
        if len(seen) == 3:
            w.stop()
    mutator.join(2)
    assert seen == [("ADDED", "web", {"app": "web"}),  # the current state first
                    ("ADDED", "api", {"app": "web"}),
                    ("DELETED", "web", {"app": "web"})]  # its last state that matched


def test_watch_endpointslices(live: LiveCluster, server: ReplayServer, api: client.ApiClient) -> None:
    discovery = client.DiscoveryV1Api(api)
    rv = discovery.list_endpoint_slice_for_all_namespaces().metadata.resource_version

    def change() -> None:
        assert live.wait_for_watchers(1)
        live.apply(endpoint_slice("api-xyz12", "api"))
        live.apply(endpoint_slice("web-abcde", "web", ready=False))
        live.delete("EndpointSlice", "default", "api-xyz12")

    mutator = in_thread(change)
    w = watch.Watch()
    seen = []
    for event in w.stream(discovery.list_endpoint_slice_for_all_namespaces, resource_version=rv, timeout_seconds=2):
        obj = event["object"]
        assert isinstance(obj, client.V1EndpointSlice)
        seen.append((event["type"], obj.metadata.name, obj.endpoints[0].conditions.ready))
        if len(seen) == 3:
            w.stop()
    mutator.join(2)
    assert seen == [("ADDED", "api-xyz12", True), ("MODIFIED", "web-abcde", False), ("DELETED", "api-xyz12", True)]
    assert server.paths()[-1].startswith("GET /apis/discovery.k8s.io/v1/endpointslices?")


def test_watch_from_a_compacted_version_is_410(live: LiveCluster, server: ReplayServer,
                                                api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    old = live.resource_version
    live.apply(service("new"))
    current = live.compact()
    expected = f"Expired: too old resource version: {old} ({current})"

    # with timeout_seconds the Watch does not retry: the ERROR event becomes an ApiException 410
    n = len(server.requests)
    with pytest.raises(ApiException) as gone:
        list(watch.Watch().stream(v1.list_service_for_all_namespaces, resource_version=str(old), timeout_seconds=2))
    assert (gone.value.status, gone.value.reason, gone.value.body) == (410, expected, None)
    assert len(server.requests) == n + 1
    # without it the Watch retries once from the same version, then raises
    with pytest.raises(ApiException) as again:
        list(watch.Watch().stream(v1.list_service_for_all_namespaces, resource_version=str(old)))
    assert again.value.status == 410
    assert server.paths()[-2:] == [f"GET /api/v1/services?resourceVersion={old}&watch=true"] * 2

    # on the wire: a 200 stream with one ERROR event, then the end
    raw = v1.list_service_for_all_namespaces(watch=True, resource_version=str(old), _preload_content=False)
    assert raw.status == 200 and raw.headers["Content-Type"] == "application/json"
    assert [json.loads(line) for line in raw.data.decode().splitlines()] == [{"type": "ERROR", "object": status(
        410, "Expired", f"too old resource version: {old} ({current})")}]

    # from the compacted version itself the watch works
    live.apply(service("newer"))
    w = watch.Watch()
    for event in w.stream(v1.list_service_for_all_namespaces, resource_version=str(current), timeout_seconds=2):
        assert (event["type"], event["object"].metadata.name) == ("ADDED", "newer")
        w.stop()


def test_watch_times_out_with_a_bookmark(live: LiveCluster, server: ReplayServer, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    rv = str(live.resource_version)
    w = watch.Watch()
    started = time.monotonic()
    events = list(w.stream(v1.list_node, resource_version=rv, timeout_seconds=1, allow_watch_bookmarks=True))
    assert 0.9 < time.monotonic() - started < 2
    assert [(e["type"], e["raw_object"]) for e in events] == [
        ("BOOKMARK", {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": rv}})]
    assert w.resource_version == rv
    assert server.paths()[-1] == (f"GET /api/v1/nodes?allowWatchBookmarks=true&resourceVersion={rv}"
                                  "&timeoutSeconds=1&watch=true")


def test_watch_from_the_future_times_out(server: ReplayServer, api: client.ApiClient) -> None:
    live = server.cluster
    assert live is not None
    live.too_large_wait = 0.1
    ahead = live.resource_version + 5
    with pytest.raises(ApiException) as too_large:
        list(watch.Watch().stream(client.CoreV1Api(api).list_node, resource_version=str(ahead), timeout_seconds=2))
    assert too_large.value.status == 504
    assert too_large.value.reason == f"Timeout: Timeout: Too large resource version: {ahead}, current: {ahead - 5}"


def test_outage_cuts_open_watches(live: LiveCluster, server: ReplayServer, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    seen: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            for event in watch.Watch().stream(v1.list_node, timeout_seconds=30):
                seen.append(event["type"])
        except Exception as e:
            errors.append(e)

    t = in_thread(run)
    assert live.wait_for_watchers(1)
    live.down = True
    t.join(2)
    assert not t.is_alive()
    assert seen == ["ADDED", "ADDED"]
    assert len(errors) == 1 and isinstance(errors[0], urllib3.exceptions.ProtocolError)  # the stream broke off


def test_server_stops_promptly_with_a_watch_open(live: LiveCluster) -> None:
    seen: list[str] = []
    srv = ReplayServer(cluster=live).__enter__()
    api = client.ApiClient(client.Configuration(host=srv.url))

    def run() -> None:
        for event in watch.Watch().stream(client.CoreV1Api(api).list_node, timeout_seconds=60):
            seen.append(event["type"])

    t = in_thread(run)
    assert live.wait_for_watchers(1)
    started = time.monotonic()
    srv.__exit__(None, None, None)
    assert time.monotonic() - started < 1
    t.join(2)
    assert not t.is_alive() and seen == ["ADDED", "ADDED"]  # the stream ended cleanly
    assert live.watchers == 0
    api.close()
