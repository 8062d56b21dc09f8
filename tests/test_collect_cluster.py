"""collect_cluster against the real Kubernetes client, talking to a loopback server replaying API answers.

Nothing in the client is patched: each test writes a real kubeconfig pointing at the replay server
(``tests/kubeapi_replay.py``) and replays a recording of ``tests/data/kubeapi/`` (written by its
``generate.py``); a test then checks what was collected and that the recording was consumed as
expected (no request it did not foresee, none it foresaw left unasked).
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubeapi_replay import ReplayServer, cluster_exchanges, discovery_group, get_exchange, load_recording

from kpdoctor.collect.cluster import ClusterCollection, collect_cluster
from kpdoctor.collect.record import Budget, Collected

TOKEN = "PLANTED-TOKEN-3b7e1c9a0d5f42e8"
SECRET_VALUE = "PLANTED-SECRET-9f1c2d3e4b5a"  # tests/data/kubeapi/generate.py
NODE = "worker-1.lab.internal"
NODE_IP = "10.0.1.17"


def write_kubeconfig(path: Path, server: str, token: str = TOKEN, context: str = "lab") -> Path:
    """A kubeconfig with one cluster at ``server`` and a user authenticating with a bearer ``token``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lab", "cluster": {"server": server}}],
        "users": [{"name": "kpdoctor", "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": "lab", "user": "kpdoctor"}}],
        "current-context": context,
        "preferences": {},
    }
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    return path


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client honours $HTTP(S)_PROXY like kubectl; the loopback server must be reached directly."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


class Run:
    def __init__(self, result: ClusterCollection, server: ReplayServer, steps: list[str], elapsed: float) -> None:
        self.result = result
        self.server = server
        self.steps = steps
        self.elapsed = elapsed

    def artifact(self, path: str) -> Collected:
        found = [a for a in self.result.artifacts if a.path == path]
        assert len(found) == 1, (path, [a.path for a in self.result.artifacts])
        return found[0]

    def items(self, path: str) -> list[dict[str, Any]]:
        doc = json.loads(self.artifact(path).data)
        assert doc["apiVersion"] == "v1" and doc["kind"] == "List"
        items: list[dict[str, Any]] = doc["items"]
        return items

    def names(self, path: str) -> list[str]:
        return [f"{i['metadata'].get('namespace', '')}/{i['metadata']['name']}".lstrip("/") for i in self.items(path)]

    def skipped(self) -> dict[str, str]:
        return {s.path: s.reason for s in self.result.skipped}

    def assert_consumed(self) -> None:
        assert self.server.unexpected == [], self.server.unexpected
        assert self.server.unconsumed() == [], self.server.unconsumed()


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Any]:
    servers: list[ReplayServer] = []

    def _run(recording: str | list[dict[str, Any]], *, node_hint: str | None = NODE,
             node_addresses: list[str] | None = None, logs: bool = False, budget: float = 60.0) -> Run:
        exchanges = load_recording(recording) if isinstance(recording, str) else recording
        server = ReplayServer(exchanges).__enter__()
        servers.append(server)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
        steps: list[str] = []
        t0 = time.monotonic()
        result = collect_cluster(node_hint=node_hint, node_addresses=node_addresses or [],
                                 kubeconfig=str(kubeconfig), context=None, budget=Budget(budget),
                                 progress=steps.append, kube_proxy_logs=logs)
        return Run(result, server, steps, time.monotonic() - t0)

    yield _run
    for s in servers:
        s.__exit__(None, None, None)


ALL_SERVICES = ["default/db", "default/kubernetes", "default/web", "kube-system/kube-dns", "monitoring/node-exporter",
                "shop/cart", "shop/frontend"]


def test_pages_with_continue_tokens_give_every_service_once(run: Any) -> None:
    r = run("by-name", logs=True)
    assert r.result.error is None
    r.assert_consumed()
    assert r.names("cluster/services.json") == ALL_SERVICES
    services = r.artifact("cluster/services.json")
    assert services.source == "GET /api/v1/services?limit=500 (3 pages)"
    assert services.note == "" and services.exit_code == 0 and services.started_at.endswith("Z")
    assert all(i["kind"] == "Service" and i["apiVersion"] == "v1" for i in r.items("cluster/services.json"))
    # the API's own JSON: camelCase, nothing the client's models would have renamed or dropped
    web = next(i for i in r.items("cluster/services.json") if i["metadata"]["name"] == "web")
    assert web["spec"]["clusterIP"] == "10.96.41.7" and web["spec"]["internalTrafficPolicy"] == "Cluster"
    assert services.data.decode().startswith('{\n  "apiVersion": "v1",\n  "kind": "List",\n  "items": [')
    # the continue tokens went back exactly as the server gave them
    service_requests = [q for q in r.server.requests if q["path"] == "/api/v1/services"]
    assert [q["query"].get("continue", "") != "" for q in service_requests] == [False, True, True]
    assert all(q["query"]["limit"] == "500" for q in service_requests)

    slices = r.items("cluster/endpointslices.json")
    assert len(slices) == 7 and {s["apiVersion"] for s in slices} == {"discovery.k8s.io/v1"}
    assert next(s for s in slices if s["metadata"]["name"] == "cart-tk4d8")["endpoints"] is None
    assert r.artifact("cluster/endpointslices.json").source == \
        "GET /apis/discovery.k8s.io/v1/endpointslices?limit=500 (2 pages)"
    assert r.steps[:3] == ["cluster: node", "cluster: services", "cluster: endpointslices"]
    assert "cluster: pods" in r.steps and "cluster: daemonsets" in r.steps


def test_everything_else_a_node_needs(run: Any) -> None:
    r = run("by-name", logs=True)
    r.assert_consumed()
    assert r.result.node == NODE
    assert r.names("cluster/nodes.json") == [NODE]
    assert r.artifact("cluster/nodes.json").source == f"GET /api/v1/nodes/{NODE}"

    pods = r.items("cluster/pods.json")
    assert len(pods) == 7 and all(p["kind"] == "Pod" and p["spec"]["nodeName"] == NODE for p in pods)
    kp = next(p for p in pods if p["metadata"]["name"] == "kube-proxy-x7k2p")
    assert kp["status"]["containerStatuses"][0]["restartCount"] == 2  # with status
    assert r.artifact("cluster/pods.json").source == \
        f"GET /api/v1/pods?fieldSelector=spec.nodeName={NODE}&limit=500 (1 page)"

    # kube-proxy, hostNetwork (calico, node-exporter), NET_ADMIN (netshoot); not fluent-bit
    assert r.names("cluster/daemonsets.json") == ["debug/netshoot", "kube-system/calico-node", "kube-system/kube-proxy",
                                                  "monitoring/node-exporter"]
    assert "kept 4 of 5" in r.artifact("cluster/daemonsets.json").source

    cms = r.items("cluster/configmaps.json")
    assert [c["metadata"]["name"] for c in cms] == ["kube-proxy"] and "config.conf" in cms[0]["data"]

    # ReplicaSet -> Deployment, Job -> CronJob, the DaemonSets; the StatefulSet is gone (404); a static
    # Pod's Node owner is not a controller
    workloads = r.items("cluster/workloads.json")
    assert sorted(f"{w['kind']} {w['metadata']['name']}" for w in workloads) == [
        "CronJob backup", "DaemonSet calico-node", "DaemonSet kube-proxy", "Deployment web", "Job backup-28211400",
        "ReplicaSet web-5d8f7c9b6"]
    assert r.artifact("cluster/workloads.json").note == "not found (404): StatefulSet default/db"
    rs_gets = [q for q in r.server.requests if q["path"].endswith("/replicasets/web-5d8f7c9b6")]
    assert len(rs_gets) == 1  # two Pods, one owner, one GET
    assert not any("/nodes/" in q["path"] and q["path"] != f"/api/v1/nodes/{NODE}" for q in r.server.requests)


def test_kube_proxy_logs_current_and_previous(run: Any) -> None:
    r = run("by-name", logs=True)
    r.assert_consumed()
    log = r.artifact("kube-proxy/log.txt")
    assert log.data.startswith(b'I0412 09:14:31.204512       1 server_others.go:72] "Using iptables proxy"\n')
    assert log.source == ("GET /api/v1/namespaces/kube-system/pods/kube-proxy-x7k2p/log"
                          "?container=kube-proxy&limitBytes=33554432&timestamps=false")
    previous = r.artifact("kube-proxy/log-previous.txt")
    assert b"Couldn't load target `KUBE-MARK-DROP'" in previous.data
    assert "previous=true" in previous.source
    assert "cluster: kube-proxy log" in r.steps


def test_no_previous_log_is_said_not_failed(run: Any) -> None:
    """restartCount > 0 but the kubelet has no previous container: its 400 becomes the reason."""
    exchanges = load_recording("by-name")
    prev = next(e for e in exchanges if e["request"]["query"].get("previous") == "true")
    prev["response"] = {"status": 400, "body": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'previous terminated container "kube-proxy" in pod "kube-proxy-x7k2p" not found',
        "reason": "BadRequest", "code": 400}}
    r = run(exchanges, logs=True)
    r.assert_consumed()
    assert r.artifact("kube-proxy/log.txt").data
    reason = r.skipped()["kube-proxy/log-previous.txt"]
    assert 'previous terminated container "kube-proxy" in pod "kube-proxy-x7k2p" not found' in reason
    assert reason.startswith("HTTP 400 BadRequest: ")


def test_expired_continue_token_restarts_the_list(run: Any) -> None:
    r = run("expired-continue")
    r.assert_consumed()
    assert r.names("cluster/services.json") == ALL_SERVICES  # every object once, none twice
    services = r.artifact("cluster/services.json")
    assert services.source == ("GET /api/v1/services?limit=500 "
                               "(3 pages, restarted 1x after 410 Gone (expired continue token))")
    assert services.note == ""
    queries = [q["query"] for q in r.server.requests if q["path"] == "/api/v1/services"]
    assert [("continue" in q) for q in queries] == [False, True, False, True, True]
    # the restart did not use the (inconsistent) token the 410 offered
    gone_token = json.loads(json.dumps(load_recording("expired-continue")[2]["response"]["body"]))
    assert all(q.get("continue") != gone_token["metadata"]["continue"] for q in queries)


def test_a_list_that_keeps_expiring_is_partial_with_a_note(run: Any) -> None:
    exchanges = load_recording("expired-continue")
    first, gone = exchanges[1], exchanges[2]
    others = [e for e in exchanges if e["request"]["path"] != "/api/v1/services"]
    r = run([*others, *[first, gone] * 4])
    r.assert_consumed()
    services = r.artifact("cluster/services.json")
    assert services.note.startswith("partial: the list expired (410 Gone) 4 times")
    assert r.names("cluster/services.json") == ALL_SERVICES[:3]  # page 1 of the last try, once


def test_forbidden_endpointslices_are_said_and_the_rest_collected(run: Any) -> None:
    r = run("forbidden-endpointslices")
    r.assert_consumed()
    assert r.result.error is None
    reason = r.skipped()["cluster/endpointslices.json"]
    assert reason == ('forbidden: endpointslices.discovery.k8s.io is forbidden: User '
                      '"system:serviceaccount:default:kpdoctor" cannot list resource "endpointslices" in API group '
                      '"discovery.k8s.io" at the cluster scope (RBAC: system:serviceaccount:default:kpdoctor needs a '
                      'ClusterRole (and a ClusterRoleBinding) with the rule apiGroups: ["discovery.k8s.io"], '
                      'resources: [endpointslices], verbs: [list])')
    # an older role that still grants v1 Endpoints: the backends are known anyway
    endpoints = r.items("cluster/endpoints.json")
    assert {e["kind"] for e in endpoints} == {"Endpoints"} and len(endpoints) == 7
    for path in ("cluster/services.json", "cluster/nodes.json", "cluster/pods.json", "cluster/daemonsets.json",
                 "cluster/configmaps.json", "cluster/workloads.json"):
        assert r.artifact(path).data
    assert r.names("cluster/services.json") == ALL_SERVICES


def test_forbidden_services_say_the_apis_message(run: Any) -> None:
    exchanges = [e for e in load_recording("by-name")
                 if e["request"]["path"] != "/api/v1/services" and "/log" not in e["request"]["path"]]
    exchanges.insert(1, {"request": {"method": "GET", "path": "/api/v1/services", "query": {"limit": "500"}},
                         "response": {"status": 403, "body": {
                             "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                             "message": 'services is forbidden: User "system:serviceaccount:default:kpdoctor" cannot '
                                        'list resource "services" in API group "" at the cluster scope',
                             "reason": "Forbidden", "details": {"kind": "services"}, "code": 403}}})
    r = run(exchanges)
    r.assert_consumed()
    assert r.skipped()["cluster/services.json"] == (
        'forbidden: services is forbidden: User "system:serviceaccount:default:kpdoctor" cannot list resource '
        '"services" in API group "" at the cluster scope (RBAC: system:serviceaccount:default:kpdoctor needs a '
        'ClusterRole (and a ClusterRoleBinding) with the rule apiGroups: [""], resources: [services], verbs: [list])')
    assert len(r.items("cluster/endpointslices.json")) == 7


def test_old_cluster_without_endpointslices_gives_endpoints(run: Any) -> None:
    r = run("old-cluster")
    r.assert_consumed()
    assert "cluster/endpointslices.json" not in {a.path for a in r.result.artifacts}
    assert "serves no EndpointSlices" in r.skipped()["cluster/endpointslices.json"]
    endpoints = r.artifact("cluster/endpoints.json")
    assert endpoints.source == "GET /api/v1/endpoints?limit=500 (1 page)"
    web = next(e for e in r.items("cluster/endpoints.json") if e["metadata"]["name"] == "web")
    assert web["apiVersion"] == "v1" and [a["ip"] for a in web["subsets"][0]["addresses"]] == \
        ["10.244.1.12", "10.244.1.13"]
    paths = [q["path"] for q in r.server.requests]
    assert paths.index("/apis/discovery.k8s.io") < paths.index("/api/v1/endpoints")  # asked what it serves first
    assert not [p for p in paths if p.endswith("/endpointslices")]


def test_v1beta1_endpointslices_when_v1_is_not_served(run: Any) -> None:
    exchanges = load_recording("old-cluster")
    slices_v1 = [e for e in load_recording("by-name") if "endpointslices" in e["request"]["path"]]
    beta = []
    for e in slices_v1:
        e = json.loads(json.dumps(e))
        e["request"]["path"] = "/apis/discovery.k8s.io/v1beta1/endpointslices"
        e["response"]["body"]["apiVersion"] = "discovery.k8s.io/v1beta1"
        beta.append(e)
    served = get_exchange("/apis/discovery.k8s.io", discovery_group(["v1beta1"]))
    exchanges = [e for e in exchanges if e["request"]["path"] not in ("/apis/discovery.k8s.io", "/api/v1/endpoints")]
    exchanges += [served, *beta]
    r = run(exchanges)
    r.assert_consumed()
    slices = r.items("cluster/endpointslices.json")
    assert len(slices) == 7 and {s["apiVersion"] for s in slices} == {"discovery.k8s.io/v1beta1"}
    assert "cluster/endpoints.json" not in {a.path for a in r.result.artifacts}


def test_node_by_name(run: Any) -> None:
    r = run("by-name", logs=True)
    assert r.result.node == NODE
    assert [q["path"] for q in r.server.requests if q["path"].startswith("/api/v1/nodes")] == [f"/api/v1/nodes/{NODE}"]


def test_node_by_address(run: Any) -> None:
    r = run("by-address", node_hint="host17", node_addresses=["127.0.0.1", "172.17.0.1", NODE_IP])
    r.assert_consumed()
    assert r.result.node == NODE
    assert r.names("cluster/nodes.json") == [NODE]
    node = r.items("cluster/nodes.json")[0]
    assert node["kind"] == "Node" and node["apiVersion"] == "v1"
    assert r.artifact("cluster/nodes.json").source == "GET /api/v1/nodes?limit=500 (2 pages)"
    assert len(r.items("cluster/pods.json")) == 7


def test_node_by_hostname_prefix(run: Any) -> None:
    r = run("by-prefix", node_hint="worker-1", node_addresses=[])
    r.assert_consumed()
    assert r.result.node == NODE


def test_no_matching_node_skips_per_node_lists(run: Any) -> None:
    exchanges = [e for e in load_recording("by-address")
                 if not (e["request"]["path"] == "/api/v1/pods"
                         or ("/namespaces/" in e["request"]["path"] and "configmaps" not in e["request"]["path"]))]
    r = run(exchanges, node_hint="host17", node_addresses=["192.0.2.99"], logs=True)
    r.assert_consumed()
    assert r.result.node is None and r.result.error is None
    skipped = r.skipped()
    assert skipped["cluster/nodes.json"] == "no Node matches this host (name 'host17' or host17.*, 192.0.2.99) among 3 Nodes"
    for path in ("cluster/pods.json", "cluster/workloads.json", "kube-proxy/log.txt", "kube-proxy/log-previous.txt"):
        assert "Node object was not found" in skipped[path]
    assert len(r.items("cluster/services.json")) == 7  # cluster-wide lists are still collected


def test_unreachable_server_is_an_error_quickly(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    steps: list[str] = []
    t0 = time.monotonic()
    result = collect_cluster(node_hint=NODE, node_addresses=[NODE_IP], kubeconfig=str(kubeconfig), context=None,
                             budget=Budget(60), progress=steps.append, kube_proxy_logs=True)
    assert time.monotonic() - t0 < 3
    assert result.error is not None and result.error.startswith(f"Kubernetes API http://127.0.0.1:{port}: cannot connect")
    assert "Connection refused" in result.error and "\n" not in result.error
    assert result.artifacts == [] and result.skipped == [] and result.node is None
    assert steps == ["cluster: node"]


def test_unauthorized_is_an_error_and_nothing_more_is_asked(run: Any) -> None:
    r = run("unauthorized", logs=True)
    r.assert_consumed()
    assert r.result.error is not None and r.result.error.endswith(": unauthorized (401): Unauthorized")
    assert len(r.server.requests) == 1
    assert r.result.artifacts == [] and r.result.skipped == []


def test_a_hanging_list_is_bounded_by_the_budget(run: Any) -> None:
    r = run("hanging-services", budget=2.0)
    assert r.elapsed < 4
    assert r.result.error is None and r.result.node == NODE
    assert r.skipped()["cluster/services.json"].startswith("timed out waiting for the API server's answer")
    assert r.skipped()["cluster/daemonsets.json"] == "time budget spent"


def test_no_kubeconfig_and_not_in_a_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    result = collect_cluster(node_hint=NODE, node_addresses=[], kubeconfig=None, context=None, budget=Budget(10),
                             progress=lambda _: None)
    assert result.error == "no kubeconfig (~/.kube/config not found) and not in a Pod: cluster objects not collected"
    assert result.artifacts == [] and result.skipped == []


def test_kubeconfig_from_the_environment_and_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with ReplayServer(load_recording("unauthorized")) as server:
        path = write_kubeconfig(tmp_path / "env-kubeconfig", server.url, context="other")
        monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{path}")
        result = collect_cluster(node_hint=NODE, node_addresses=[], kubeconfig=None, context="other",
                                 budget=Budget(10), progress=lambda _: None)
        assert result.error is not None and "401" in result.error
        assert server.requests[0]["authorization"] == f"Bearer {TOKEN}"
        result = collect_cluster(node_hint=NODE, node_addresses=[], kubeconfig=str(path), context="nope",
                                 budget=Budget(10), progress=lambda _: None)
        assert result.error is not None and "nope" in result.error and TOKEN not in result.error
        assert len(server.requests) == 1


def test_no_token_and_no_secret_in_anything_collected(run: Any) -> None:
    r = run("with-secrets", logs=True)
    assert r.server.unexpected == [] and r.server.unconsumed() == []
    # the server saw the kubeconfig's token, so it was used...
    assert {q["authorization"] for q in r.server.requests} == {f"Bearer {TOKEN}"}
    # ...and nobody asked for a Secret or a token, though the server would have served them
    assert not any("secret" in q["path"] or q["path"].endswith("/token") or q["method"] != "GET"
                   for q in r.server.requests)
    assert not any(e["request"]["path"].endswith(("secrets", "token", "kube-proxy-token-x9z8w"))
                   for e in r.server.served)
    assert len(r.result.artifacts) == 9
    needles = [TOKEN, SECRET_VALUE, base64.b64encode(SECRET_VALUE.encode()).decode(), "kube-proxy-token-x9z8w"]
    for a in r.result.artifacts:
        blob = a.data + json.dumps(a.manifest_entry()).encode()
        for needle in needles:
            assert needle.encode() not in blob, (a.path, needle)
    for s in r.result.skipped:
        assert not any(n in s.reason for n in needles)


def test_cluster_exchanges_serve_a_static_cluster(run: Any) -> None:
    """The builder the network-namespace lab uses: every object once, in any request order."""
    by_name = load_recording("by-name")

    def objects(path: str) -> list[dict[str, Any]]:
        out = []
        for e in by_name:
            body = e["response"]["body"]
            if e["request"]["path"] == path and isinstance(body, dict) and "items" in body:
                kind = body["kind"].removesuffix("List")
                out += [{"kind": kind, "apiVersion": body["apiVersion"], **i} for i in body["items"]]
        return out

    gets = [e["response"]["body"] for e in by_name
            if e["response"]["status"] == 200 and "kind" in e["response"]["body"]
            and not e["response"]["body"]["kind"].endswith("List") and "/log" not in e["request"]["path"]]
    nodes = [g for g in gets if g["kind"] == "Node"]
    workloads = [g for g in gets if g["kind"] in ("ReplicaSet", "Deployment", "Job", "CronJob")]
    configmaps = [g for g in gets if g["kind"] == "ConfigMap"]
    exchanges = cluster_exchanges(
        services=objects("/api/v1/services"), endpointslices=objects("/apis/discovery.k8s.io/v1/endpointslices"),
        nodes=nodes, pods=objects("/api/v1/pods"), daemonsets=objects("/apis/apps/v1/daemonsets"),
        configmaps=configmaps, workloads=workloads,
        logs={("kube-system", "kube-proxy-x7k2p", "kube-proxy", False): "current\n",
              ("kube-system", "kube-proxy-x7k2p", "kube-proxy", True): "previous\n"},
        page_size=2)
    r = run(exchanges, logs=True)
    assert r.result.error is None and r.result.node == NODE
    assert r.names("cluster/services.json") == ALL_SERVICES
    assert r.artifact("cluster/services.json").source.endswith("(4 pages)")
    assert len(r.items("cluster/pods.json")) == 7
    assert r.artifact("kube-proxy/log.txt").data == b"current\n"
    assert r.artifact("kube-proxy/log-previous.txt").data == b"previous\n"
    # only the StatefulSet (not given) was asked for and not found
    assert [u["path"] for u in r.server.unexpected] == ["/apis/apps/v1/namespaces/default/statefulsets/db"]
    # a second collection against the same server gets the same answers (exchanges repeat)
    again = run(exchanges, logs=True)
    assert again.names("cluster/services.json") == ALL_SERVICES


def test_forbidden_nodes_select_pods_by_the_given_name_with_a_note(run: Any) -> None:
    denied_get = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": f'nodes "{NODE}" is forbidden: User "system:serviceaccount:default:kpdoctor" cannot get '
                             'resource "nodes" in API group "" at the cluster scope',
                  "reason": "Forbidden", "details": {"name": NODE, "kind": "nodes"}, "code": 403}
    denied_list = {**denied_get, "message": 'nodes is forbidden: User "system:serviceaccount:default:kpdoctor" cannot '
                                            'list resource "nodes" in API group "" at the cluster scope',
                   "details": {"kind": "nodes"}}
    exchanges = load_recording("by-name")
    exchanges[0]["response"] = {"status": 403, "body": denied_get}
    exchanges.insert(1, {"request": {"method": "GET", "path": "/api/v1/nodes", "query": {"limit": "500"}},
                         "response": {"status": 403, "body": denied_list}})
    r = run(exchanges, logs=True)
    r.assert_consumed()
    assert r.result.node is None and r.result.error is None
    grant = ("(RBAC: system:serviceaccount:default:kpdoctor needs a ClusterRole (and a ClusterRoleBinding) with the "
             'rule apiGroups: [""], resources: [nodes], verbs: [{}])')
    assert r.skipped()["cluster/nodes.json"] == (f"forbidden: {denied_get['message']} {grant.format('get')}; "
                                                 f"forbidden: {denied_list['message']} {grant.format('list')}")
    pods = r.artifact("cluster/pods.json")
    assert len(r.items("cluster/pods.json")) == 7
    assert pods.note.startswith("the Node could not be read (forbidden: ") and \
        pods.note.endswith(f"Pods selected by spec.nodeName={NODE}, unverified as this node's name")
    assert r.artifact("kube-proxy/log.txt").data


def test_too_many_requests_is_retried_once_after_retry_after(run: Any) -> None:
    busy = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Too many requests, please try again later.", "reason": "TooManyRequests",
            "details": {"causes": [{"message": "client: kpdoctor"}], "retryAfterSeconds": 1}, "code": 429}
    exchanges = load_recording("by-name")
    exchanges.insert(1, {"request": {"method": "GET", "path": "/api/v1/services", "query": {"limit": "500"}},
                         "response": {"status": 429, "body": busy, "headers": {"Retry-After": "1"}}})
    r = run(exchanges, logs=True)
    r.assert_consumed()
    assert r.names("cluster/services.json") == ALL_SERVICES
    assert 1 <= r.elapsed < 5


def test_a_broken_kubeconfig_is_an_error_without_quoting_it(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nusers:\n- name: x\n  user:\n    token: PLANTED-TOKEN-bad: [\n", encoding="utf-8")
    result = collect_cluster(node_hint=NODE, node_addresses=[], kubeconfig=str(path), context=None, budget=Budget(5),
                             progress=lambda _: None)
    assert result.error is not None and result.error.startswith(f"kubeconfig {path}: not valid YAML (")
    assert "PLANTED" not in result.error
    missing = collect_cluster(node_hint=NODE, node_addresses=[], kubeconfig=str(tmp_path / "nope"), context=None,
                              budget=Budget(5), progress=lambda _: None)
    assert missing.error == f"kubeconfig {tmp_path / 'nope'} not found: cluster objects not collected"
