"""A loopback Kubernetes API server that replays recorded responses, for tests of the real client.

A *recording* is a JSON file in ``tests/data/kubeapi/``: an ordered list of exchanges ::

    {"request": {"method": "GET", "path": "/api/v1/services", "query": {"limit": "500"}},
     "response": {"status": 200, "body": {"kind": "ServiceList", ...}}}

A request is answered by the first *remaining* exchange whose method, path and query (every value
compared exactly, ``continue`` included) match; that exchange is then used up, unless it says
``"repeat": true``. A response body that is a JSON object is served as ``application/json``, a
string as ``text/plain`` (pod logs); ``"delay": seconds`` holds the answer back (a hanging server).
A request that matches nothing is answered like the API server answers an unknown path (404 with a
``Status`` body) and is kept in :attr:`ReplayServer.unexpected`, so a test can say which requests
the recording expected and that nothing else was asked for.

:func:`cluster_exchanges` builds (repeatable) exchanges that serve a whole static cluster from its
objects, with real chunked lists (``limit``/``continue``), for tests that do not care about the
order of requests (the network-namespace lab).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

RECORDINGS = Path(__file__).resolve().parent / "data" / "kubeapi"

Exchange = dict[str, Any]
Obj = dict[str, Any]


def load_recording(name: str) -> list[Exchange]:
    """The exchanges of ``tests/data/kubeapi/<name>.json``."""
    data = json.loads((RECORDINGS / f"{name}.json").read_text(encoding="utf-8"))
    assert isinstance(data, list), name
    return data


# -- Status bodies, as the API server writes them (k8s.io/apimachinery/pkg/api/errors) -------------


def status(code: int, reason: str, message: str, details: Obj | None = None, continue_token: str = "") -> Obj:
    """A ``metav1.Status`` failure body."""
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {"continue": continue_token} if continue_token else {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def not_found_path() -> Obj:
    """What the API server says for a path it does not serve (an API group/version it lacks)."""
    return status(404, "NotFound", "the server could not find the requested resource", {})


def not_found(resource: str, name: str, group: str = "") -> Obj:
    """``apierrors.NewNotFound``: ``nodes "x" not found``."""
    qualified = f"{resource}.{group}" if group else resource
    details: Obj = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return status(404, "NotFound", f'{qualified} "{name}" not found', details)


def forbidden(user: str, verb: str, resource: str, group: str = "", namespace: str = "", name: str = "") -> Obj:
    """``apierrors.NewForbidden`` with the authorizer's reason (endpoints/filters/authorization.go)."""
    qualified = f"{resource}.{group}" if group else resource
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    why = f'User "{user}" cannot {verb} resource "{resource}" in API group "{group}" {where}'
    subject = f'{qualified} "{name}" is forbidden' if name else f"{qualified} is forbidden"
    details: Obj = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = resource
    return status(403, "Forbidden", f"{subject}: {why}", details)


EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


def expired(continue_token: str) -> Obj:
    """The 410 of an expired continue token (etcd3 store ``compactedContinue``), with the new token."""
    return status(410, "Expired", EXPIRED_MESSAGE, continue_token=continue_token)


def unauthorized() -> Obj:
    return status(401, "Unauthorized", "Unauthorized")


# -- the server --------------------------------------------------------------------------------------


class ReplayServer:
    """Serve ``exchanges`` on ``http://127.0.0.1:<port>`` from a background thread (a context manager)."""

    def __init__(self, exchanges: Iterable[Exchange]) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.remaining: list[Exchange] = [dict(e) for e in exchanges]
        self.served: list[Exchange] = []  # exchanges used, in order (a repeat one once per use)
        self.requests: list[dict[str, Any]] = []  # every request: method, path, query, authorization
        self.unexpected: list[dict[str, Any]] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="kubeapi-replay", daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def unconsumed(self) -> list[dict[str, Any]]:
        """The requests of exchanges that were expected once and never asked for."""
        return [e["request"] for e in self.remaining if not e.get("repeat")]

    def paths(self) -> list[str]:
        """Every request as ``METHOD path?query`` (for messages)."""
        out = []
        for r in self.requests:
            q = "&".join(f"{k}={v}" for k, v in sorted(r["query"].items()))
            out.append(f"{r['method']} {r['path']}" + (f"?{q}" if q else ""))
        return out

    def _answer(self, method: str, path: str, query: dict[str, str], authorization: str) -> Exchange | None:
        with self._lock:
            self.requests.append({"method": method, "path": path, "query": query, "authorization": authorization})
            for i, ex in enumerate(self.remaining):
                req = ex["request"]
                if (
                    req.get("method", "GET") == method
                    and req["path"] == path
                    and {k: str(v) for k, v in (req.get("query") or {}).items()} == query
                ):
                    if not ex.get("repeat"):
                        del self.remaining[i]
                    self.served.append(ex)
                    return ex
            self.unexpected.append({"method": method, "path": path, "query": query})
            return None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body leave at once: no delayed-ACK stalls
            wbufsize = -1  # buffered; flushed after each request

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
                ex = server._answer(self.command, parts.path, query, self.headers.get("Authorization", ""))
                response = ex["response"] if ex is not None else {"status": 404, "body": not_found_path()}
                delay = float(response.get("delay", 0))
                if delay and server._stopping.wait(delay):
                    return
                body = response.get("body", "")
                if isinstance(body, str):
                    data = body.encode("utf-8")
                    ctype = "text/plain"
                else:
                    data = json.dumps(body).encode("utf-8")
                    ctype = "application/json"
                try:
                    self.send_response(int(response["status"]))
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (response.get("headers") or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = _handle
            do_POST = _handle
            do_PUT = _handle
            do_PATCH = _handle
            do_DELETE = _handle

        return Handler


# -- a static cluster as exchanges --------------------------------------------------------------------


def continue_token(resource_version: int, start_key: str) -> str:
    """A continue token shaped like the etcd3 store's: base64url of ``{"v","rv","start"}``."""
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": resource_version, "start": start_key + "\x00"}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def list_exchanges(
    path: str,
    list_kind: str,
    api_version: str,
    objects: Sequence[Obj],
    *,
    limit: int = 500,
    page_size: int | None = None,
    query: Mapping[str, str] | None = None,
    resource_version: int = 4711,
    repeat: bool = False,
) -> list[Exchange]:
    """The pages of one chunked list: what ``GET path?limit=..[&continue=..]`` returns, page by page.

    Items are sorted by their storage key and lose ``kind``/``apiVersion`` (as list items do). The
    server answers ``page_size`` items a page (default ``limit``; a server may return fewer than the
    limit asked for, clients follow ``continue``). ``remainingItemCount`` is given only for lists
    without a selector, as the API server does.
    """
    items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in sorted(objects, key=_key)]
    size = max(1, min(limit, page_size or limit))
    selected = bool(query and ("fieldSelector" in query or "labelSelector" in query))
    out: list[Exchange] = []
    token = ""
    start = 0
    while True:
        page = items[start : start + size]
        nxt = start + len(page)
        meta: Obj = {"resourceVersion": str(resource_version)}
        new_token = continue_token(resource_version, _key(items[nxt - 1])) if nxt < len(items) else ""
        if new_token:
            meta["continue"] = new_token
            if not selected:
                meta["remainingItemCount"] = len(items) - nxt
        q = {**(query or {}), "limit": str(limit)}
        if token:
            q["continue"] = token
        body = {"kind": list_kind, "apiVersion": api_version, "metadata": meta, "items": page}
        ex: Exchange = {"request": {"method": "GET", "path": path, "query": q}, "response": {"status": 200, "body": body}}
        if repeat:
            ex["repeat"] = True
        out.append(ex)
        if not new_token:
            return out
        token, start = new_token, nxt


def get_exchange(path: str, obj: Obj | str, *, status_code: int = 200, query: Mapping[str, str] | None = None,
                 repeat: bool = False) -> Exchange:
    ex: Exchange = {
        "request": {"method": "GET", "path": path, "query": dict(query or {})},
        "response": {"status": status_code, "body": obj},
    }
    if repeat:
        ex["repeat"] = True
    return ex


# kind -> (API path prefix, resource, list kind); the path prefix gives the group/version
RESOURCES: dict[str, tuple[str, str]] = {
    "Node": ("/api/v1", "nodes"),
    "Service": ("/api/v1", "services"),
    "Endpoints": ("/api/v1", "endpoints"),
    "Pod": ("/api/v1", "pods"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1", "endpointslices"),
    "DaemonSet": ("/apis/apps/v1", "daemonsets"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "ReplicaSet": ("/apis/apps/v1", "replicasets"),
    "StatefulSet": ("/apis/apps/v1", "statefulsets"),
    "Job": ("/apis/batch/v1", "jobs"),
    "CronJob": ("/apis/batch/v1", "cronjobs"),
}


def object_path(obj: Obj) -> str:
    """``/api/v1/namespaces/NS/pods/NAME`` (or the cluster-scoped path) of an object with its kind."""
    prefix, resource = RESOURCES[obj["kind"]]
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{prefix}/namespaces/{ns}/{resource}/{meta['name']}" if ns else f"{prefix}/{resource}/{meta['name']}"


def cluster_exchanges(
    *,
    services: Sequence[Obj] = (),
    endpointslices: Sequence[Obj] | None = (),
    endpoints: Sequence[Obj] | None = None,
    nodes: Sequence[Obj] = (),
    pods: Sequence[Obj] = (),
    daemonsets: Sequence[Obj] = (),
    configmaps: Sequence[Obj] = (),
    workloads: Sequence[Obj] = (),
    logs: Mapping[tuple[str, str, str, bool], str] | None = None,
    limit: int = 500,
    page_size: int | None = None,
    resource_version: int = 4711,
) -> list[Exchange]:
    """Repeatable exchanges serving a static cluster to kpdoctor's collector, in any order.

    Objects are given as a GET returns them (with ``kind`` and ``apiVersion``). Served: the lists of
    Services, EndpointSlices (``None``: discovery.k8s.io/v1 is not served), Endpoints (``None``: not
    served), Nodes, DaemonSets and Pods (all, and per node with ``fieldSelector=spec.nodeName=N``),
    chunked by ``limit``/``page_size`` with real continue tokens; a GET of every object given
    (Nodes, Pods, ConfigMaps, workloads: ReplicaSets, Deployments, StatefulSets, Jobs, CronJobs,
    DaemonSets); and pod logs: ``logs[(namespace, pod, container, previous)] = text`` answers
    ``GET .../pods/POD/log?container=C&limitBytes=33554432[&previous=true]&timestamps=false``. A
    previous log that is not given is answered 400, as the kubelet does when the container never
    restarted. Anything else gets the 404 of an unknown path (and lands in ``server.unexpected``).
    """
    rv = resource_version
    kw: dict[str, Any] = {"limit": limit, "page_size": page_size, "resource_version": rv, "repeat": True}
    out: list[Exchange] = []
    out += list_exchanges("/api/v1/services", "ServiceList", "v1", services, **kw)
    if endpointslices is not None:
        out += list_exchanges("/apis/discovery.k8s.io/v1/endpointslices", "EndpointSliceList",
                              "discovery.k8s.io/v1", endpointslices, **kw)
    if endpoints is not None:
        out += list_exchanges("/api/v1/endpoints", "EndpointsList", "v1", endpoints, **kw)
    out += list_exchanges("/api/v1/nodes", "NodeList", "v1", nodes, **kw)
    out += list_exchanges("/apis/apps/v1/daemonsets", "DaemonSetList", "apps/v1", daemonsets, **kw)
    out += list_exchanges("/api/v1/pods", "PodList", "v1", pods, **kw)
    for node in nodes:
        name = node["metadata"]["name"]
        on_node = [p for p in pods if (p.get("spec") or {}).get("nodeName") == name]
        out += list_exchanges("/api/v1/pods", "PodList", "v1", on_node, query={"fieldSelector": f"spec.nodeName={name}"},
                              **kw)
    for obj in [*nodes, *pods, *configmaps, *workloads, *daemonsets]:
        out.append(get_exchange(object_path(obj), obj, repeat=True))
    for (ns, pod, container, previous), text in (logs or {}).items():
        q = {"container": container, "limitBytes": str(32 * 1024 * 1024), "timestamps": "false"}
        if previous:
            q["previous"] = "true"
        out.append(get_exchange(f"/api/v1/namespaces/{ns}/pods/{pod}/log", text, query=q, repeat=True))
    for p in pods:
        meta = p["metadata"]
        for c in (p.get("spec") or {}).get("containers") or []:
            if (meta.get("namespace"), meta["name"], c["name"], True) in (logs or {}):
                continue
            q = {"container": c["name"], "limitBytes": str(32 * 1024 * 1024), "previous": "true", "timestamps": "false"}
            msg = f'previous terminated container "{c["name"]}" in pod "{meta["name"]}" not found'
            out.append(get_exchange(f"/api/v1/namespaces/{meta.get('namespace')}/pods/{meta['name']}/log",
                                    status(400, "BadRequest", msg), status_code=400, query=q, repeat=True))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.kubeapi_replay EXCHANGES.json PORTFILE``: serve until killed, from whatever
    network namespace this process runs in (the lab starts it inside its node namespace), writing
    the chosen port to PORTFILE once listening."""
    import argparse
    import time

    p = argparse.ArgumentParser(prog="python -m tests.kubeapi_replay")
    p.add_argument("exchanges", type=Path)
    p.add_argument("portfile", type=Path)
    a = p.parse_args(argv)
    with ReplayServer(json.loads(a.exchanges.read_text(encoding="utf-8"))) as server:
        tmp = a.portfile.with_suffix(".tmp")
        tmp.write_text(str(server.port))
        tmp.replace(a.portfile)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
