"""A loopback Kubernetes API server that replays recorded responses, for tests of the real client.

A *recording* is a JSON file in ``tests/data/kubeapi/``: an ordered list of exchanges ::

    {"request": {"method": "GET", "path": "/api/v1/services", "query": {"limit": "500"}},
     "response": {"status": 200, "body": {"kind": "ServiceList", ...}}}

A request is answered by the first *remaining* exchange whose method, path and query (every value
compared exactly, ``continue`` included) match; that exchange is then used up, unless it says
``"repeat": true``. A response body that is a JSON object is served as ``application/json``, a
string as ``text/plain`` (pod logs); ``"delay": seconds`` holds the answer back (a hanging server),
``"trickle": seconds`` sends its body one byte every that many seconds (a server no read timeout
catches: each byte comes in time).
A request that matches nothing is answered like the API server answers an unknown path (404 with a
``Status`` body) and is kept in :attr:`ReplayServer.unexpected`, so a test can say which requests
the recording expected and that nothing else was asked for.

:func:`cluster_exchanges` builds (repeatable) exchanges that serve a whole static cluster from its
objects, with real chunked lists (``limit``/``continue``), for tests that do not care about the
order of requests (the network-namespace lab).

:class:`LiveCluster` is a mutable cluster served like kube-apiserver serves one, for tests of code
that watches and writes (``ReplayServer(exchanges, cluster=live)``; exchanges still answer first):

* one global resourceVersion, bumped and stamped on every change, and a change log;
* lists (namespaced or not, ``labelSelector``, ``fieldSelector``, chunked by ``limit``/``continue``
  with etcd-shaped tokens and consistent pages) and gets of one object;
* watches (``?watch=true``): a chunked ``200`` with one ``{"type", "object"}`` JSON event a line,
  replayed from the log after ``resourceVersion`` (or ADDED for every object without one), then live;
  ``ERROR`` 410 Expired from before :meth:`LiveCluster.compact`; ``BOOKMARK`` at ``timeoutSeconds``
  with ``allowWatchBookmarks``; an object moving out of a selector is DELETED, into it ADDED;
* writes: ``POST .../namespaces/NS/events`` (``generateName``, 409 AlreadyExists),
  ``PATCH .../namespaces/NS/events/NAME`` and ``PATCH /api/v1/nodes/NAME/status`` (strategic merge
  with merge keys, so conditions merge by ``type``; JSON merge patch; JSON Patch, 422 if it does not
  apply; 409 on a stale ``metadata.resourceVersion``; a no-op patch writes nothing); any other write
  to a served resource is 405. Every write lands in :attr:`ReplayServer.writes`;
* Pods, for a client that runs one (``kubectl kpdoctor node``): ``POST .../namespaces/NS/pods``
  (``name`` or ``generateName``, 409 AlreadyExists, 422 without containers), ``DELETE
  .../pods/NAME`` (gone at once, as with ``gracePeriodSeconds=0``) and ``GET .../pods/NAME/log``
  (``follow=true`` streams it); a created Pod follows :attr:`LiveCluster.pod_script` (a
  :class:`PodScript`: its phases and its container's log over time; none: it stays Pending);
* failures: :meth:`LiveCluster.deny` (403 by default, any Status) and :attr:`LiveCluster.down`.

:class:`StalledServer` is an API server that accepts connections and then stalls: it never
answers, or answers a byte a second (its headers too, if asked). :class:`BulkServer` serves a
large generated cluster (:func:`bulk_objects`: Services and EndpointSlices shaped as
kube-apiserver returns them, ``managedFields`` included) from pages rendered once, fast enough
to list 100,000 Services in seconds (bench/agent_memory.py, the memory tests).
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import copy
import json
import random
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
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


# -- more Status bodies, for the live cluster ---------------------------------------------------------


def already_exists(resource: str, name: str, group: str = "") -> Obj:
    """``apierrors.NewAlreadyExists``: ``events "x" already exists`` (409)."""
    qualified = f"{resource}.{group}" if group else resource
    details: Obj = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return status(409, "AlreadyExists", f'{qualified} "{name}" already exists', details)


def conflict(resource: str, name: str, group: str = "") -> Obj:
    """``apierrors.NewConflict`` of an update whose ``metadata.resourceVersion`` is not the stored one (409)."""
    qualified = f"{resource}.{group}" if group else resource
    details: Obj = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    msg = (f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; please apply your '
           "changes to the latest version and try again")
    return status(409, "Conflict", msg, details)


def invalid(kind: str, name: str, field: str, cause_reason: str, detail: str) -> Obj:
    """``apierrors.NewInvalid`` with one field error: ``Event "x" is invalid: field: detail`` (422)."""
    cause = {"reason": cause_reason, "message": detail, "field": field}
    return status(422, "Invalid", f'{kind} "{name}" is invalid: {field}: {detail}',
                  {"name": name, "kind": kind, "causes": [cause]})


def patch_failed() -> Obj:
    """A JSON Patch that does not apply (a failing ``test``, a missing path): the apiserver answers
    ``NewGenericServerResponse(422, ...)``, which drops the json-patch error text."""
    return status(422, "Invalid", "the server rejected our request due to an error in our request", {})


def bad_request(message: str) -> Obj:
    return status(400, "BadRequest", message)


def method_not_allowed() -> Obj:
    return status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})


def unsupported_media_type(content_type: str, accepted: Sequence[str]) -> Obj:
    msg = (f"the body of the request was in an unknown format - accepted media types include: {', '.join(accepted)}"
           if content_type else "the body of the request was in an unknown format")
    return status(415, "UnsupportedMediaType", msg)


def service_unavailable() -> Obj:
    """What an apiserver that cannot serve (etcd gone, shutting down) or its load balancer answers."""
    return status(503, "ServiceUnavailable", "the server is currently unable to handle the request", {})


def internal_error(message: str) -> Obj:
    return status(500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]})


def resource_expired(message: str) -> Obj:
    """``apierrors.NewResourceExpired`` (410 Gone, reason ``Expired``), e.g. a watch from a compacted version."""
    return status(410, "Expired", message)


def too_large_resource_version(wanted: int, current: int) -> Obj:
    """``storage.NewTooLargeResourceVersionError``: a resourceVersion the watch cache did not reach within 3 s."""
    details = {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
               "retryAfterSeconds": 1}
    return status(504, "Timeout", f"Timeout: Too large resource version: {wanted}, current: {current}", details)


# -- the server --------------------------------------------------------------------------------------


class ReplayServer:
    """Serve ``exchanges`` on ``http://127.0.0.1:<port>`` from a background thread (a context manager).

    With ``cluster`` (a :class:`LiveCluster`), a request that no exchange matches is answered by the
    live cluster (lists, gets, watches, the few writes it implements); ``cluster.down`` and
    ``cluster.deny(...)`` apply to every request, exchanges included. Every write (POST, PUT, PATCH,
    DELETE), whoever answered it, lands in :attr:`writes`.
    """

    def __init__(self, exchanges: Iterable[Exchange] = (), cluster: LiveCluster | None = None) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.cluster = cluster
        self.remaining: list[Exchange] = [dict(e) for e in exchanges]
        self.served: list[Exchange] = []  # exchanges used, in order (a repeat one once per use)
        self.requests: list[dict[str, Any]] = []  # every request: method, path, query, authorization
        self.unexpected: list[dict[str, Any]] = []
        # every write: method, path, query, content_type, body (parsed JSON; the text if not JSON), status
        self.writes: list[dict[str, Any]] = []
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
        if self.cluster is not None:
            self.cluster.wake()  # open watches end their streams now
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

    def _record(self, method: str, path: str, query: dict[str, str], authorization: str) -> None:
        with self._lock:
            self.requests.append({"method": method, "path": path, "query": query, "authorization": authorization})

    def _match(self, method: str, path: str, query: dict[str, str]) -> Exchange | None:
        with self._lock:
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
            return None

    def _scripted_discovery(self) -> tuple[int, Any]:
        """``GET /apis/discovery.k8s.io`` as the scripted server would answer it (a real one
        always does): the versions its exchanges serve EndpointSlices in (a scripted 404 for a
        version's list: not served), or 404 when it serves none (a server older than the group)."""
        with self._lock:
            scripted = [*self.remaining, *self.served]
        versions = []
        for v in ("v1", "v1beta1"):
            lists = [e for e in scripted if e["request"]["path"] == f"/apis/discovery.k8s.io/{v}/endpointslices"]
            if lists and any(int(e["response"]["status"]) != 404 for e in lists):
                versions.append(v)
        return (200, discovery_group(versions)) if versions else (404, not_found_path())

    def _unexpected(self, method: str, path: str, query: dict[str, str]) -> None:
        with self._lock:
            self.unexpected.append({"method": method, "path": path, "query": query})

    def _answer(self, method: str, path: str, query: dict[str, str], authorization: str) -> Exchange | None:
        self._record(method, path, query, authorization)
        ex = self._match(method, path, query)
        if ex is None:
            self._unexpected(method, path, query)
        return ex

    def _record_write(self, method: str, path: str, query: dict[str, str], content_type: str | None, raw: bytes,
                      code: int) -> None:
        if method not in ("POST", "PUT", "PATCH", "DELETE"):
            return
        text = raw.decode("utf-8", errors="replace")
        try:
            body: Any = json.loads(text) if text else None
        except ValueError:
            body = text
        with self._lock:
            self.writes.append({"method": method, "path": path, "query": query, "content_type": content_type,
                                "body": body, "status": code})

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body leave at once: no delayed-ACK stalls
            wbufsize = -1  # buffered; flushed after each request

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, code: int, body: Obj | str, headers: Mapping[str, str] | None = None) -> None:
                if isinstance(body, str):
                    data = body.encode("utf-8")
                    ctype = "text/plain"
                else:
                    data = json.dumps(body).encode("utf-8")
                    ctype = "application/json"
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _trickle(self, code: int, body: Obj | str, every: float) -> None:
                """The answer's status and headers at once, then its body a byte every ``every`` seconds."""
                data = (body if isinstance(body, str) else json.dumps(body)).encode("utf-8")
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json" if not isinstance(body, str) else "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.flush()
                    for i in range(len(data)):
                        if server._stopping.wait(every):
                            break
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass
                self.close_connection = True

            def _stream(self, watch: LiveWatch) -> None:
                """A watch: ``200`` with a chunked body, one JSON event a line, each flushed as it happens."""
                events = watch.events(server._stopping)
                threading.Thread(target=self._notice_hangup, args=(watch,), daemon=True,
                                 name="kubeapi-replay-watch-hangup").start()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Cache-Control", "no-cache, private")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.flush()
                    for event in events:
                        data = json.dumps(event, separators=(",", ":")).encode("utf-8") + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    if watch.cut:  # an outage: the connection drops, no terminating chunk
                        self.close_connection = True
                        return
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                finally:
                    events.close()

            def _stream_log(self, log: LogStream) -> None:
                """A followed container log: ``200`` text, chunked, each line flushed as the container writes it."""
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.flush()
                    for text in log.chunks(server._stopping):
                        data = text.encode("utf-8")
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def _notice_hangup(self, watch: LiveWatch) -> None:
                """End the watch when the client closes the connection (it sends nothing while it watches)."""
                try:
                    data = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    data = b""
                if not data:
                    watch.client_gone()

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
                method, path = self.command, parts.path
                ctype = self.headers.get("Content-Type")
                server._record(method, path, query, self.headers.get("Authorization", ""))
                cluster = server.cluster
                reply: Reply | None = cluster.intercept(method, path, query) if cluster is not None else None
                if reply is None:
                    ex = server._match(method, path, query)
                    if ex is not None:
                        response = ex["response"]
                        server._record_write(method, path, query, ctype, raw, int(response["status"]))
                        delay = float(response.get("delay", 0))
                        if delay and server._stopping.wait(delay):
                            return
                        if response.get("trickle"):
                            self._trickle(int(response["status"]), response.get("body", ""), float(response["trickle"]))
                            return
                        self._send(int(response["status"]), response.get("body", ""), response.get("headers"))
                        return
                    if cluster is not None:
                        reply = cluster.respond(method, path, query, ctype, raw)
                    if reply is None and method == "GET" and path.rstrip("/") == "/apis/discovery.k8s.io":
                        reply = server._scripted_discovery()
                    if reply is None:
                        server._unexpected(method, path, query)
                        reply = (404, not_found_path())
                if isinstance(reply, LiveWatch):
                    self._stream(reply)
                elif isinstance(reply, LogStream):
                    self._stream_log(reply)
                elif reply == "close":  # an apiserver that is gone: no answer at all
                    server._record_write(method, path, query, ctype, raw, 0)
                    self.close_connection = True
                else:
                    code, body = reply
                    server._record_write(method, path, query, ctype, raw, code)
                    self._send(code, body)

            do_GET = _handle
            do_POST = _handle
            do_PUT = _handle
            do_PATCH = _handle
            do_DELETE = _handle

        return Handler


# -- a static cluster as exchanges --------------------------------------------------------------------


def continue_token(resource_version: int, start_key: str) -> str:
    """A continue token shaped like the etcd3 store's: base64url of ``{"v","rv","start"}``."""
    return _encode_continue(resource_version, start_key + "\x00")


def _encode_continue(resource_version: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": resource_version, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, str] | None:
    """``(rv, start key)`` of a continue token, ``None`` if it is not one."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("v") != "meta.k8s.io/v1":
        return None
    rv, start = data.get("rv"), data.get("start")
    if not isinstance(rv, int) or not isinstance(start, str) or rv == 0:
        return None
    return rv, start


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
    "Event": ("/api/v1", "events"),  # core v1 events (not events.k8s.io)
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


# -- a live cluster ---------------------------------------------------------------------------------

Key = tuple[str, str]  # (namespace, name); namespace "" for a cluster-scoped object
Reply = tuple[int, Obj] | str  # (status, body), or "close": drop the connection without an answer

CLUSTER_SCOPED = frozenset({"Node"})
_KINDS = {(prefix, resource): kind for kind, (prefix, resource) in RESOURCES.items()}
GENERATE_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # utilrand.String: lowercase alnum without vowels, 0, 1, 3
GENERATE_NAME_LENGTH = 5
# field selectors the apiserver accepts besides metadata.name and metadata.namespace (AddFieldLabelConversionFunc)
FIELD_LABELS: dict[str, frozenset[str]] = {
    "Pod": frozenset({"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                      "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"}),
    "Node": frozenset({"spec.unschedulable"}),
    "Service": frozenset({"spec.clusterIP", "spec.type"}),
    "Event": frozenset({"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                        "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                        "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"}),
}
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json")


def api_version(kind: str) -> str:
    prefix = RESOURCES[kind][0]
    return "v1" if prefix == "/api/v1" else prefix.removeprefix("/apis/")


def _group(kind: str) -> str:
    prefix = RESOURCES[kind][0]
    return "" if prefix == "/api/v1" else prefix.split("/")[2]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Change:
    """One write, as the change log (and a watch) sees it. ``obj`` is the object after the write (for
    ``DELETED``: its last state, stamped with the deletion's resourceVersion); ``prev`` the one before."""

    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    kind: str
    obj: Obj
    prev: Obj | None


@dataclass(frozen=True)
class _Target:
    """What a request path names: ``/api/v1/namespaces/NS/pods/NAME/status``."""

    kind: str
    namespace: str | None  # None: every namespace (or a cluster-scoped kind)
    name: str | None
    subresource: str | None

    @property
    def resource(self) -> str:
        return RESOURCES[self.kind][1]

    @property
    def group(self) -> str:
        return _group(self.kind)


def discovery_group(versions: Sequence[str]) -> Obj:
    """The APIGroup document of ``GET /apis/discovery.k8s.io``, as a real server gives it."""
    listed = [{"groupVersion": f"discovery.k8s.io/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": "discovery.k8s.io", "versions": listed,
            "preferredVersion": listed[0]}  # fmt: skip


def _parse_path(path: str) -> _Target | None:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        prefix, rest = "/api/v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        prefix, rest = "/" + "/".join(parts[:3]), parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not 1 <= len(rest) <= 3:
        return None
    kind = _KINDS.get((prefix, rest[0]))
    if kind is None or (namespace is not None and kind in CLUSTER_SCOPED):
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and sub != "status":
        return None
    if name is not None and namespace is None and kind not in CLUSTER_SCOPED:
        return None
    return _Target(kind, namespace, name, sub)


class _SelectorError(ValueError):
    pass


def _split_selector(text: str) -> list[str]:
    """The requirements of a selector: split at commas outside ``(...)``."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [p.strip() for p in out if p.strip()]


_LABEL_REQUIREMENT = re.compile(
    r"^(?P<key>[A-Za-z0-9][A-Za-z0-9_./-]*)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9_.-]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<values>[^()]*)\))?$"
)


def _label_selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    """``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)`` (ANDed)."""
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    for req in _split_selector(text):
        if req.startswith("!"):
            key = req[1:].strip()
            tests.append(lambda labels, k=key: k not in labels)
            continue
        m = _LABEL_REQUIREMENT.match(req)
        if m is None:
            raise _SelectorError(f"unable to parse requirement: found '{req}', expected: identifier")
        key, op, value, setop = m["key"], m["op"], m["value"], m["setop"]
        if op in ("=", "=="):
            tests.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif op == "!=":
            tests.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif setop:
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            if setop == "in":
                tests.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                tests.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        else:
            tests.append(lambda labels, k=key: k in labels)
    return lambda labels: all(t(labels) for t in tests)


def _field_value(obj: Obj, field: str) -> str:
    if field == "source":
        value: Any = (obj.get("source") or {}).get("component")
    elif field == "reportingComponent":
        value = obj.get("reportingComponent")
    else:
        value = obj
        for part in field.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "false" if field in ("spec.hostNetwork", "spec.unschedulable") else ""
    return str(value)


def _field_selector(kind: str, text: str, label_text: str) -> Callable[[Obj], bool]:
    """``f=v``, ``f==v``, ``f!=v`` (ANDed) over the fields the apiserver supports for ``kind``."""
    tests: list[Callable[[Obj], bool]] = []
    supported = {"metadata.name", "metadata.namespace"} | FIELD_LABELS.get(kind, frozenset())
    for req in _split_selector(text):
        m = re.match(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$", req)
        if m is None:
            raise _SelectorError(f"invalid selector: '{text}'; can't understand '{req}'")
        field, op, value = m.groups()
        if field not in supported:
            gvr = f"{_group(kind)}/{api_version(kind).split('/')[-1]}, Resource={RESOURCES[kind][1]}"
            raise _SelectorError(f'Unable to find "{gvr}" that match label selector "{label_text}", field selector '
                                 f'"{text}": field label not supported: {field}')
        if op == "!=":
            tests.append(lambda o, f=field, v=value: _field_value(o, f) != v)
        else:
            tests.append(lambda o, f=field, v=value: _field_value(o, f) == v)
    return lambda o: all(t(o) for t in tests)


def _filter(t: _Target, query: Mapping[str, str]) -> Callable[[Obj], bool]:
    """What a list or watch of ``t`` selects (namespace, labelSelector, fieldSelector); raises _SelectorError."""
    labels_text, fields_text = query.get("labelSelector", ""), query.get("fieldSelector", "")
    by_label = _label_selector(labels_text)
    by_field = _field_selector(t.kind, fields_text, labels_text)

    def selects(obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        if t.namespace is not None and meta.get("namespace") != t.namespace:
            return False
        return by_label(meta.get("labels") or {}) and by_field(obj)

    return selects


# -- patches: strategic merge, JSON merge (RFC 7386), JSON Patch (RFC 6902) ------------------------------


def _merge_key(kind: str, path: tuple[str, ...]) -> str | None:
    """The ``patchMergeKey`` of a list field of the built-in types (the ones a node agent may touch)."""
    last = path[-1]
    parent = path[-2] if len(path) > 1 else ""
    if last == "conditions":  # NodeStatus, PodStatus, DaemonSetStatus, ...
        return "type"
    if path == ("status", "addresses") and kind == "Node":
        return "type"
    if last in ("podIPs", "hostIPs"):
        return "ip"
    if path == ("metadata", "ownerReferences"):
        return "uid"
    if last in ("containers", "initContainers", "ephemeralContainers", "volumes", "imagePullSecrets"):
        return "name"
    if parent in ("containers", "initContainers", "ephemeralContainers"):
        return {"ports": "containerPort", "env": "name", "volumeMounts": "mountPath",
                "volumeDevices": "devicePath"}.get(last)
    if kind == "Service" and path == ("spec", "ports"):
        return "port"
    return None


_PRIMITIVE_MERGE = {("metadata", "finalizers"), ("spec", "podCIDRs")}


def _strategic_merge(kind: str, original: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """A strategic merge patch: maps merge (``null`` deletes a key), lists with a merge key merge by it
    (``"$patch": "delete"`` on an element removes it), other lists are replaced. ``$setElementOrder``
    is ignored: merged elements keep their place, new ones are appended (what the apiserver does)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            out[field] = [x for x in out.get(field) or [] if x not in value]
            continue
        sub = (*path, key)
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                out.pop(key, None)
            else:
                out[key] = _strategic_merge(kind, out.get(key), value, sub)
        elif isinstance(value, list):
            out[key] = _merge_list(kind, out.get(key), value, sub)
        else:
            out[key] = copy.deepcopy(value)
    if "$retainKeys" in patch:
        keep = set(patch["$retainKeys"])
        out = {k: v for k, v in out.items() if k in keep}
    return out


def _merge_list(kind: str, original: Any, patch: list[Any], path: tuple[str, ...]) -> list[Any]:
    if path in _PRIMITIVE_MERGE:
        merged = list(original or [])
        return merged + [x for x in patch if x not in merged]
    key = _merge_key(kind, path)
    if key is None or not isinstance(original, list):
        return [x for x in copy.deepcopy(patch) if not (isinstance(x, dict) and "$patch" in x)]
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [copy.deepcopy(x) for x in patch if not (isinstance(x, dict) and "$patch" in x)]
    out = copy.deepcopy(original)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            out.append(copy.deepcopy(item))
            continue
        at = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            out = [x for x in out if not (isinstance(x, dict) and x.get(key) == item[key])]
        elif at is None:
            out.append(_strategic_merge(kind, {}, item, path))
        else:
            out[at] = _strategic_merge(kind, out[at], item, path)
    return out


def _merge_patch(original: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, ``null`` deletes, anything else (lists included) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


class JSONPatchError(Exception):
    """A JSON Patch that does not apply (the text is evanphx/json-patch's, for messages; the apiserver drops it)."""


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise JSONPatchError(f"JSON pointer must be empty or start with a \"/\": {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]] if path else []


def _index(container: list[Any], token: str, path: str, op: str, *, end_ok: bool) -> int:
    if token == "-" and end_ok:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise JSONPatchError(f"error in {op} for path: '{path}': Unable to access invalid index: {token}")
    i = int(token)
    if i > len(container) or (i == len(container) and not end_ok):
        raise JSONPatchError(f"error in {op} for path: '{path}': Unable to access invalid index: {i}: "
                             "invalid index referenced")
    return i


def _walk(doc: Any, tokens: list[str], path: str, op: str) -> Any:
    """The container of the last token of ``path``."""
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise JSONPatchError(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    if not isinstance(node, dict | list):
        raise JSONPatchError(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    return node


def _get(doc: Any, path: str, op: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    node = _walk(doc, tokens, path, op)
    last = tokens[-1]
    if isinstance(node, dict):
        if last not in node:
            raise JSONPatchError(f"{op} operation does not apply: doc is missing key: {path}: missing value")
        return node[last]
    return node[_index(node, last, path, op, end_ok=False)]


def _add(doc: Any, path: str, value: Any, op: str = "add") -> Any:
    tokens = _pointer(path)
    if not tokens:
        return copy.deepcopy(value)
    node = _walk(doc, tokens, path, op)
    if isinstance(node, dict):
        node[tokens[-1]] = copy.deepcopy(value)
    else:
        node.insert(_index(node, tokens[-1], path, op, end_ok=True), copy.deepcopy(value))
    return doc


def _remove(doc: Any, path: str, op: str = "remove") -> Any:
    tokens = _pointer(path)
    node = _walk(doc, tokens, path, op) if tokens else None
    if node is None:
        raise JSONPatchError(f"error in {op} for path: '{path}': cannot remove the whole document")
    last = tokens[-1]
    if isinstance(node, dict):
        if last not in node:
            raise JSONPatchError(f"error in {op} for path: '{path}': Unable to remove nonexistent key: {last}: "
                                 "missing value")
        del node[last]
    else:
        del node[_index(node, last, path, op, end_ok=False)]
    return doc


def _json_equal(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def apply_json_patch(doc: Any, ops: list[Any]) -> Any:
    """RFC 6902 (add, remove, replace, move, copy, test) on a copy of ``doc``; raises JSONPatchError."""
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict):
            raise JSONPatchError("invalid operation")
        kind, path = op.get("op"), op.get("path")
        if kind in ("add", "replace", "test") and "value" not in op:
            raise JSONPatchError(f"{kind} operation has no value: missing value")
        if kind == "add":
            doc = _add(doc, path, op["value"])
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path, "replace")
            doc = _add(_remove(doc, path, "replace"), path, op["value"], "replace") if _pointer(path) else op["value"]
        elif kind in ("move", "copy"):
            value = copy.deepcopy(_get(doc, op.get("from"), kind))
            if kind == "move":
                doc = _remove(doc, op.get("from"), kind)
            doc = _add(doc, path, value, kind)
        elif kind == "test":
            try:
                current = _get(doc, path, "test")
            except JSONPatchError as e:
                raise JSONPatchError(f"test operation does not apply: is missing path: {path}: missing value") from e
            if not _json_equal(current, op["value"]):
                raise JSONPatchError(f"testing value {path} failed: test failed")
        else:
            raise JSONPatchError(f"Unexpected kind: {kind}")
    return doc


# -- the live cluster ----------------------------------------------------------------------------------


@dataclass
class _Denial:
    method: str
    path_prefix: str
    body: Obj | None
    times: int | None


class LiveWatch:
    """One open watch (what :meth:`LiveCluster.respond` answers a ``?watch=true`` with); the server
    writes :meth:`events` to the client as they come. ``cut`` tells the stream ended by an outage."""

    def __init__(self, cluster: LiveCluster, target: _Target, selects: Callable[[Obj], bool], rv: int | None,
                 timeout: float | None, bookmarks: bool) -> None:
        self.cluster = cluster
        self.target = target
        self.selects = selects
        self.rv = rv
        self.timeout = timeout
        self.bookmarks = bookmarks
        self.cut = False
        self.gone = False  # the client hung up

    def client_gone(self) -> None:
        self.gone = True
        self.cluster.wake()

    def events(self, stopping: threading.Event) -> Iterator[Obj]:
        return self.cluster._watch(self, stopping)


class LiveCluster:
    """A mutable cluster a :class:`ReplayServer` serves like kube-apiserver does (lists, gets, watches,
    event and node-status writes), with one global resourceVersion and a change log.

    Tests change it with :meth:`apply` and :meth:`delete` (from any thread; open watches see the change
    at once), break it with :meth:`deny`, :attr:`down` and :meth:`compact`, and read it back with
    :meth:`get` and :meth:`objects`. Objects are given as a GET returns them (with ``kind``).
    """

    def __init__(self, objects: Iterable[Obj] = (), *, resource_version: int = 1000, seed: int = 0,
                 user: str = "system:serviceaccount:kube-system:kpdoctor", too_large_wait: float = 3.0) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._store: dict[str, dict[Key, Obj]] = {}  # kind -> key -> object (never mutated once stored)
        self._log: list[Change] = []
        self._log_rvs: list[int] = []
        self._rv = resource_version
        self._compacted = 0  # watches from before this version get 410 Expired
        self._random = random.Random(seed)
        self._denials: list[_Denial] = []
        self._down = False
        self._watchers = 0
        self.down_mode = "503"  # or "close": drop every connection without an answer
        self.user = user
        self.too_large_wait = too_large_wait  # the watch cache's wait for a resourceVersion it has not seen
        self._pod_clocks: dict[Key, tuple[str, float, PodScript]] = {}  # scripted Pods: uid, created, script
        for obj in objects:
            self.apply(obj)

    # -- test-side API

    @property
    def resource_version(self) -> int:
        """The current (last written) resourceVersion."""
        with self._cond:
            return self._rv

    @property
    def down(self) -> bool:
        return self._down

    @down.setter
    def down(self, value: bool) -> None:
        """An outage: every request gets 503 (or no answer with ``down_mode = "close"``); open watches drop."""
        with self._cond:
            self._down = bool(value)
            self._cond.notify_all()

    @property
    def watchers(self) -> int:
        """How many watch streams are open."""
        with self._cond:
            return self._watchers

    def wait_for_watchers(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Wait until exactly ``count`` watch streams are open (a test's cue to start changing things, or
        to see that a client's hang-up ended its watch); False if that did not happen within ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: self._watchers == count, timeout)

    def wake(self) -> None:
        """Wake every open watch (the server does it when it stops)."""
        with self._cond:
            self._cond.notify_all()

    def apply(self, obj: Obj) -> Obj:
        """Create or replace ``obj``; returns the stored copy (uid, creationTimestamp, resourceVersion set)."""
        kind = obj["kind"]
        if kind not in RESOURCES:
            raise ValueError(f"unknown kind {kind!r}")
        new = copy.deepcopy(obj)
        new.setdefault("apiVersion", api_version(kind))
        meta = new.setdefault("metadata", {})
        if kind in CLUSTER_SCOPED:
            meta.pop("namespace", None)
        else:
            meta["namespace"] = meta.get("namespace") or "default"
        key = (meta.get("namespace", ""), meta["name"])
        with self._cond:
            prev = self._store.get(kind, {}).get(key)
            if prev is not None:
                meta.setdefault("uid", prev["metadata"]["uid"])
                meta.setdefault("creationTimestamp", prev["metadata"]["creationTimestamp"])
            else:
                meta.setdefault("uid", str(uuid.UUID(int=self._random.getrandbits(128), version=4)))
                meta.setdefault("creationTimestamp", _now())
            self._commit(kind, key, new)
            return copy.deepcopy(new)

    def delete(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        """Delete an object; returns its last state (``None`` if there was none)."""
        key = ("" if kind in CLUSTER_SCOPED else namespace or "default", name)
        with self._cond:
            if key not in self._store.get(kind, {}):
                return None
            return copy.deepcopy(self._commit(kind, key, None))

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        key = ("" if kind in CLUSTER_SCOPED else namespace or "default", name)
        with self._cond:
            obj = self._store.get(kind, {}).get(key)
            return copy.deepcopy(obj) if obj is not None else None

    def objects(self, kind: str) -> list[Obj]:
        """Every object of ``kind``, by namespace and name."""
        with self._cond:
            return [copy.deepcopy(o) for _, o in sorted(self._store.get(kind, {}).items())]

    def changes(self, since: int = 0) -> list[Change]:
        """The change log after resourceVersion ``since``."""
        with self._cond:
            return copy.deepcopy(self._log[bisect.bisect_right(self._log_rvs, since):])

    def compact(self) -> int:
        """Compact like etcd: a watch (or a continued list) from any older resourceVersion gets 410."""
        with self._cond:
            self._compacted = self._rv
            return self._rv

    def deny(self, method: str, path_prefix: str, status_body: Obj | None = None, times: int | None = None) -> None:
        """Answer requests of ``method`` (``"*"``: any) whose path starts with ``path_prefix`` with
        ``status_body`` (default: the authorizer's 403 for :attr:`user`), the next ``times`` ones
        (``None``: until :meth:`allow`)."""
        with self._cond:
            self._denials.append(_Denial(method.upper(), path_prefix, status_body, times))

    def allow(self) -> None:
        """Forget every :meth:`deny`."""
        with self._cond:
            self._denials.clear()

    # -- the store

    def _commit(self, kind: str, key: Key, new: Obj | None) -> Obj:
        """Store ``new`` (``None``: delete) at the next resourceVersion, log it, wake the watches."""
        bucket = self._store.setdefault(kind, {})
        prev = bucket.get(key)
        self._rv += 1
        if new is None:
            assert prev is not None
            obj = copy.deepcopy(prev)
            obj["metadata"]["resourceVersion"] = str(self._rv)
            del bucket[key]
            change = Change(self._rv, "DELETED", kind, obj, prev)
        else:
            obj = new
            obj["metadata"]["resourceVersion"] = str(self._rv)
            bucket[key] = obj
            change = Change(self._rv, "MODIFIED" if prev is not None else "ADDED", kind, obj, prev)
        self._log.append(change)
        self._log_rvs.append(self._rv)
        self._cond.notify_all()
        return obj

    def _state_at(self, kind: str, rv: int) -> dict[Key, Obj]:
        """The objects of ``kind`` as they were at resourceVersion ``rv`` (undoing the later changes)."""
        state = dict(self._store.get(kind, {}))
        for change in reversed(self._log[bisect.bisect_right(self._log_rvs, rv):]):
            if change.kind != kind:
                continue
            meta = change.obj["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            if change.prev is None:
                state.pop(key, None)
            else:
                state[key] = change.prev
        return state

    # -- requests

    def intercept(self, method: str, path: str, query: Mapping[str, str]) -> Reply | None:
        """The answer of an outage or a denial, before anything else looks at the request."""
        with self._cond:
            if self._down:
                return "close" if self.down_mode == "close" else (503, service_unavailable())
            for d in self._denials:
                if d.method in ("*", method) and path.startswith(d.path_prefix):
                    if d.times is not None:
                        d.times -= 1
                        if d.times <= 0:
                            self._denials.remove(d)
                    body = d.body if d.body is not None else self._forbidden(method, path, query)
                    return int(body.get("code", 403)), body
        return None

    # the versions of discovery.k8s.io the server says it serves (1.21-1.24 served both)
    discovery_versions: tuple[str, ...] = ("v1", "v1beta1")

    def _discovery_group(self) -> Obj:
        return discovery_group(self.discovery_versions)

    def _forbidden(self, method: str, path: str, query: Mapping[str, str]) -> Obj:
        t = _parse_path(path)
        if t is None:
            return forbidden(self.user, method.lower(), path)
        watching = query.get("watch") in ("true", "1")
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete" if t.name else
                "deletecollection"}.get(method, "get" if t.name else "watch" if watching else "list")
        body = forbidden(self.user, verb, t.resource, t.group, t.namespace or "", t.name or "")
        if t.subresource:
            body["message"] = body["message"].replace(f'resource "{t.resource}"', f'resource "{t.resource}/'
                                                      f'{t.subresource}"')
        return body

    def respond(self, method: str, path: str, query: Mapping[str, str], content_type: str | None,
                raw: bytes) -> Reply | LiveWatch | LogStream | None:
        """The apiserver's answer to a request (``None``: a path it does not serve)."""
        log_path = _POD_LOG_PATH.match(path)
        if log_path is not None and method == "GET":
            return self._pod_log(log_path["ns"], log_path["name"], query)
        if path.rstrip("/") == "/apis/discovery.k8s.io" and method == "GET":
            return 200, self._discovery_group()
        t = _parse_path(path)
        if t is None:
            return None
        if method == "GET":
            if t.name is not None:
                return self._get(t)
            if query.get("watch") in ("true", "1"):
                return self._open_watch(t, query)
            return self._list(t, query)
        dry_run = query.get("dryRun") == "All"
        if method == "POST" and t.kind == "Event" and t.namespace is not None and t.name is None:
            return self._create_event(t, content_type, raw, dry_run)
        if method == "PATCH" and t.name is not None and (
            (t.kind == "Event" and t.subresource is None) or (t.kind == "Node" and t.subresource == "status")
        ):
            return self._patch(t, content_type, raw, dry_run)
        if t.kind == "Pod" and t.namespace is not None and t.subresource is None:
            if method == "POST" and t.name is None:
                return self._create_pod(t, content_type, raw, dry_run)
            if method == "DELETE" and t.name is not None:
                return self._delete_pod(t, dry_run)
        return 405, method_not_allowed()

    def _get(self, t: _Target) -> Reply:
        assert t.name is not None
        with self._cond:
            obj = self._store.get(t.kind, {}).get((t.namespace or "", t.name))
            if obj is None:
                return 404, not_found(t.resource, t.name, t.group)
            return 200, copy.deepcopy(obj)

    def _wait_until(self, rv: int, stopping: threading.Event | None = None) -> bool:
        """Wait (a while) for the store to reach ``rv``, as the watch cache does; under the lock."""
        def over() -> bool:
            return self._rv >= rv or self._down or (stopping is not None and stopping.is_set())

        return self._cond.wait_for(over, self.too_large_wait) and self._rv >= rv

    def _list(self, t: _Target, query: Mapping[str, str]) -> Reply:
        try:
            selects = _filter(t, query)
        except _SelectorError as e:
            return 400, bad_request(str(e))
        try:
            limit = int(query.get("limit") or 0)
            rv_asked = int(query.get("resourceVersion") or 0)
        except ValueError as e:
            return 400, bad_request(str(e))
        token = query.get("continue") or ""
        namespaced = t.namespace is not None
        with self._cond:
            start = ""
            if token:
                decoded = _decode_continue(token)
                if decoded is None:
                    return 400, bad_request(f"continue key is not valid: {token}")
                rv, start = decoded
                if rv == -1:
                    rv = self._rv
                elif rv < self._compacted:
                    return 410, expired(_encode_continue(-1, start))
                state = self._state_at(t.kind, rv)
            elif rv_asked and query.get("resourceVersionMatch") == "Exact":
                if rv_asked < self._compacted:
                    return 410, resource_expired("The resourceVersion for the provided list is too old.")
                if rv_asked > self._rv:
                    return 504, too_large_resource_version(rv_asked, self._rv)
                rv, state = rv_asked, self._state_at(t.kind, rv_asked)
            else:
                if rv_asked > self._rv and not self._wait_until(rv_asked):
                    return 504, too_large_resource_version(rv_asked, self._rv)
                rv, state = self._rv, self._store.get(t.kind, {})

            def storage_key(key: Key) -> str:
                return key[1] if namespaced or not key[0] else f"{key[0]}/{key[1]}"

            items = sorted((storage_key(k), o) for k, o in state.items() if selects(o))
            items = [(k, o) for k, o in items if k >= start]
            page = items[:limit] if limit else items
            meta: Obj = {"resourceVersion": str(rv)}
            if len(page) < len(items):
                meta["continue"] = continue_token(rv, page[-1][0])
                if not query.get("labelSelector") and not query.get("fieldSelector"):
                    meta["remainingItemCount"] = len(items) - len(page)
            body = {
                "kind": f"{t.kind}List",
                "apiVersion": api_version(t.kind),
                "metadata": meta,
                "items": [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for _, o in page],
            }
            return 200, copy.deepcopy(body)

    def _open_watch(self, t: _Target, query: Mapping[str, str]) -> Reply | LiveWatch:
        try:
            selects = _filter(t, query)
        except _SelectorError as e:
            return 400, bad_request(str(e))
        try:
            rv = int(query["resourceVersion"]) if query.get("resourceVersion") else None
            timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        except ValueError as e:
            return 400, bad_request(str(e))
        return LiveWatch(self, t, selects, rv or None, timeout, query.get("allowWatchBookmarks") in ("true", "1"))

    def _event(self, change: Change, selects: Callable[[Obj], bool]) -> Obj | None:
        """The watch event a change makes for a watcher (cacheWatcher.convertToWatchEvent): an object
        moving into the selection is ADDED, out of it DELETED (its previous state, at the change's version)."""
        now = change.type != "DELETED" and selects(change.obj)
        before = change.prev is not None and selects(change.prev)
        if now and not before:
            return {"type": "ADDED", "object": copy.deepcopy(change.obj)}
        if now and before:
            return {"type": "MODIFIED", "object": copy.deepcopy(change.obj)}
        if before:
            obj = copy.deepcopy(change.obj if change.type == "DELETED" else change.prev)
            obj["metadata"]["resourceVersion"] = str(change.rv)
            return {"type": "DELETED", "object": obj}
        return None

    def _pending(self, watch: LiveWatch, after: int) -> list[Obj]:
        out = []
        for change in self._log[bisect.bisect_right(self._log_rvs, after):]:
            if change.kind == watch.target.kind:
                event = self._event(change, watch.selects)
                if event is not None:
                    out.append(event)
        return out

    def _watch(self, watch: LiveWatch, stopping: threading.Event) -> Iterator[Obj]:
        deadline = time.monotonic() + watch.timeout if watch.timeout else None
        with self._cond:
            self._watchers += 1
            self._cond.notify_all()
        try:
            with self._cond:
                if watch.rv is not None and watch.rv < self._compacted:
                    msg = f"too old resource version: {watch.rv} ({self._compacted})"
                    pending, done = [{"type": "ERROR", "object": resource_expired(msg)}], True
                elif watch.rv is not None and watch.rv > self._rv and not self._wait_until(watch.rv, stopping):
                    error = too_large_resource_version(watch.rv, self._rv)
                    pending, done = [{"type": "ERROR", "object": error}], True
                elif watch.rv is None:  # the current state as ADDED events, then what happens
                    current = sorted(self._store.get(watch.target.kind, {}).items())
                    pending = [{"type": "ADDED", "object": copy.deepcopy(o)} for _, o in current if watch.selects(o)]
                    done = False
                else:
                    pending, done = self._pending(watch, watch.rv), False
                cursor = self._rv
            while True:
                yield from pending
                if done:
                    return
                with self._cond:
                    while True:
                        if stopping.is_set() or watch.gone:
                            return
                        if self._down:
                            watch.cut = True
                            return
                        if self._rv > cursor:
                            pending, cursor = self._pending(watch, cursor), self._rv
                            break
                        left = deadline - time.monotonic() if deadline is not None else None
                        if left is not None and left <= 0:  # timeoutSeconds: end the stream cleanly
                            pending, done = [], True
                            if watch.bookmarks:
                                kind = watch.target.kind
                                mark = {"kind": kind, "apiVersion": api_version(kind),
                                        "metadata": {"resourceVersion": str(cursor)}}
                                pending = [{"type": "BOOKMARK", "object": mark}]
                            break
                        self._cond.wait(left)
        finally:
            with self._cond:
                self._watchers -= 1
                self._cond.notify_all()

    # -- writes

    def _decode_body(self, content_type: str | None, raw: bytes, accepted: Sequence[str]) -> tuple[Any, Reply | None]:
        media = (content_type or "").split(";")[0].strip().lower()
        if media and media not in accepted:
            return None, (415, unsupported_media_type(media, accepted))
        try:
            return json.loads(raw.decode("utf-8") or "null"), None
        except ValueError as e:
            return None, (400, bad_request(f"error decoding body: {e}"))

    def _new_object(self, t: _Target, content_type: str | None, raw: bytes, kind: str,
                    a_kind: str) -> tuple[Obj, Reply | None]:
        """The body of a create as the apiserver takes it in (kind, namespace, no uid), or the
        error it answers instead."""
        body, error = self._decode_body(content_type, raw, ("application/json",))
        if error is not None:
            return {}, error
        if not isinstance(body, dict) or body.get("kind", kind) != kind:
            return {}, (400, bad_request(f"the body of the request is not {a_kind}"))
        ns = t.namespace or ""
        obj = copy.deepcopy(body)
        obj["kind"], obj["apiVersion"] = kind, "v1"
        meta = obj.setdefault("metadata", {})
        if meta.get("namespace") not in (None, "", ns):
            return {}, (400, bad_request("the namespace of the provided object does not match the namespace sent "
                                         "on the request"))
        meta["namespace"] = ns
        for field in ("uid", "creationTimestamp"):
            meta.pop(field, None)
        if meta.get("resourceVersion"):
            return {}, (500, internal_error("resourceVersion should not be set on objects to be created"))
        return obj, None

    def _name_new(self, bucket: dict[Any, Obj], ns: str, meta: Obj, kind: str, resource: str) -> Reply | None:
        """Name a new object (generateName as the apiserver does it) and stamp it; under the lock."""
        if not meta.get("name"):
            prefix = meta.get("generateName") or ""
            if not prefix:
                return 422, invalid(kind, "", "metadata.name", "FieldValueRequired",
                                    "Required value: name or generateName is required")
            for _ in range(8):  # the apiserver retries a generated name that is taken
                meta["name"] = prefix + "".join(self._random.choice(GENERATE_NAME_CHARS)
                                                for _ in range(GENERATE_NAME_LENGTH))
                if (ns, meta["name"]) not in bucket:
                    break
        if (ns, meta["name"]) in bucket:
            return 409, already_exists(resource, meta["name"])
        meta["uid"] = str(uuid.UUID(int=self._random.getrandbits(128), version=4))
        meta["creationTimestamp"] = _now()
        return None

    def _create_event(self, t: _Target, content_type: str | None, raw: bytes, dry_run: bool) -> Reply:
        obj, error = self._new_object(t, content_type, raw, "Event", "an Event")
        if error is not None:
            return error
        ns, meta = t.namespace or "", obj["metadata"]
        involved_ns = (obj.get("involvedObject") or {}).get("namespace") or ""
        if not obj.get("eventTime") and (ns != involved_ns if involved_ns else ns not in ("", "default")):
            return 422, invalid("Event", meta.get("name") or meta.get("generateName") or "",
                                "involvedObject.namespace", "FieldValueInvalid",
                                f'Invalid value: "{involved_ns}": does not match event.namespace')
        with self._cond:
            bucket = self._store.setdefault("Event", {})
            named = self._name_new(bucket, ns, meta, "Event", "events")
            if named is not None:
                return named
            if dry_run:
                return 201, obj
            return 201, copy.deepcopy(self._commit("Event", (ns, meta["name"]), obj))

    def _patch(self, t: _Target, content_type: str | None, raw: bytes, dry_run: bool) -> Reply:
        assert t.name is not None
        media = (content_type or "").split(";")[0].strip().lower()
        if media not in PATCH_TYPES:
            return 415, unsupported_media_type(media, (*PATCH_TYPES, "application/apply-patch+yaml"))
        try:
            patch = json.loads(raw.decode("utf-8"))
        except ValueError as e:
            return 400, bad_request(f"error decoding patch: {e}")
        if media == "application/json-patch+json" and not isinstance(patch, list):
            return 400, bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        if media != "application/json-patch+json" and not isinstance(patch, dict):
            return 400, bad_request("json: cannot unmarshal array into Go value of type map[string]interface {}")
        key = (t.namespace or "", t.name)
        with self._cond:
            current = self._store.get(t.kind, {}).get(key)
            if current is None:
                return 404, not_found(t.resource, t.name, t.group)
            if media == "application/json-patch+json":
                try:
                    new = apply_json_patch(current, patch)
                except JSONPatchError:
                    return 422, patch_failed()
            elif media == "application/merge-patch+json":
                new = _merge_patch(copy.deepcopy(current), patch)
            else:
                new = _strategic_merge(t.kind, current, patch)
            if not isinstance(new, dict):
                return 400, bad_request("the patched object is not an object")
            meta = new.get("metadata") if isinstance(new.get("metadata"), dict) else {}
            if meta.get("name", t.name) != t.name:
                return 400, bad_request(f"the name of the object ({meta.get('name')}) does not match the name on "
                                        f"the URL ({t.name})")
            sent_rv = meta.get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                return 409, conflict(t.resource, t.name, t.group)
            new["kind"], new["apiVersion"] = current["kind"], current["apiVersion"]
            new["metadata"] = meta = dict(meta)
            for field in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion"):
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
            if t.subresource == "status":  # the status strategy keeps the spec
                if "spec" in current:
                    new["spec"] = copy.deepcopy(current["spec"])
                else:
                    new.pop("spec", None)
            if new == current or dry_run:  # a no-op update is not written: same resourceVersion, no event
                return 200, copy.deepcopy(new)
            return 200, copy.deepcopy(self._commit(t.kind, key, new))


    # -- Pods (kubectl kpdoctor node): create, scripted phases and log, delete

    pod_script: PodScript | None = None  # what every Pod created from now on does (None: stays Pending)

    def _create_pod(self, t: _Target, content_type: str | None, raw: bytes, dry_run: bool) -> Reply:
        obj, error = self._new_object(t, content_type, raw, "Pod", "a Pod")
        if error is not None:
            return error
        ns, meta = t.namespace or "", obj["metadata"]
        containers = (obj.get("spec") or {}).get("containers") or []
        if not containers:
            return 422, invalid("Pod", meta.get("name") or meta.get("generateName") or "", "spec.containers",
                                "FieldValueRequired", "Required value")
        for i, c in enumerate(containers):
            if not c.get("image"):
                return 422, invalid("Pod", meta.get("name") or "", f"spec.containers[{i}].image",
                                    "FieldValueRequired", "Required value")
        script = self.pod_script
        with self._cond:
            bucket = self._store.setdefault("Pod", {})
            named = self._name_new(bucket, ns, meta, "Pod", "pods")
            if named is not None:
                return named
            waiting = script.waiting_reason if script is not None else "ContainerCreating"
            obj["status"] = _pod_status(obj, "Pending", waiting, 0)
            if dry_run:
                return 201, obj
            stored = copy.deepcopy(self._commit("Pod", (ns, meta["name"]), obj))
            if script is not None:
                self._pod_clocks[(ns, meta["name"])] = (meta["uid"], time.monotonic(), script)
                threading.Thread(target=self._play_pod, args=((ns, meta["name"]), meta["uid"]), daemon=True,
                                 name=f"kubeapi-replay-pod-{meta['name']}").start()
            return 201, stored

    def _play_pod(self, key: Key, uid: str) -> None:
        """Move a created Pod through its script's phases, each at its time, until it is deleted."""
        with self._cond:
            _, born, script = self._pod_clocks[key]
        for at, phase in script.phases:
            with self._cond:
                while True:
                    current = self._store.get("Pod", {}).get(key)
                    if current is None or current["metadata"]["uid"] != uid:
                        return
                    left = born + at - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                new = copy.deepcopy(current)
                new["status"] = _pod_status(new, phase, script.waiting_reason, script.exit_code)
                self._commit("Pod", key, new)

    def _delete_pod(self, t: _Target, dry_run: bool) -> Reply:
        assert t.name is not None
        key = (t.namespace or "", t.name)
        with self._cond:
            current = self._store.get("Pod", {}).get(key)
            if current is None:
                return 404, not_found("pods", t.name)
            if dry_run:
                return 200, copy.deepcopy(current)
            return 200, copy.deepcopy(self._commit("Pod", key, None))

    def _pod_log(self, ns: str, name: str, query: Mapping[str, str]) -> Reply | LogStream:
        """``GET .../pods/NAME/log``: as the kubelet answers, through the apiserver."""
        key = (ns, name)
        with self._cond:
            pod = self._store.get("Pod", {}).get(key)
            if pod is None:
                return 404, not_found("pods", name)
            names = [c["name"] for c in pod["spec"]["containers"]]
            container = query.get("container") or (names[0] if len(names) == 1 else "")
            if not container:
                return 400, bad_request(f"a container name must be specified for pod {name}, choose one of: "
                                        f"{names}")
            if container not in names:
                return 400, bad_request(f"container {container} is not valid for pod {name}")
            phase = (pod.get("status") or {}).get("phase")
            clock = self._pod_clocks.get(key)
            if phase == "Pending" or clock is None or clock[0] != pod["metadata"]["uid"]:
                reason = clock[2].waiting_reason if clock is not None else "ContainerCreating"
                return 400, bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
            uid, born, script = clock
        stream = LogStream(self, key, uid, born, script)
        if query.get("follow") in ("true", "1"):
            return stream
        return 200, "".join(stream.written())  # type: ignore[return-value]  # a text body: _send serves str as text/plain


# -- Pods that run (kubectl kpdoctor node) ----------------------------------------------------------------


@dataclass(frozen=True)
class PodScript:
    """What a Pod created on a :class:`LiveCluster` does, timed from its creation: it is ``Pending``
    (its container waiting, ``waiting_reason``), then takes each ``(seconds, phase)`` of ``phases``
    in turn; its container writes each ``(seconds, text)`` of ``log`` once it runs, and ends with
    ``exit_code`` (in ``Succeeded``/``Failed``)."""

    phases: Sequence[tuple[float, str]] = ((0.2, "Running"), (1.0, "Succeeded"))
    log: Sequence[tuple[float, str]] = ()
    exit_code: int = 0
    waiting_reason: str = "ContainerCreating"


_POD_LOG_PATH = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def _pod_status(pod: Obj, phase: str, waiting_reason: str, exit_code: int) -> Obj:
    """A Pod's status in ``phase``, its containers in the matching state (as the kubelet reports them)."""
    now = _now()
    prev = pod.get("status") or {}
    started = next((s["state"].get("running", {}).get("startedAt") for s in prev.get("containerStatuses") or []
                    if "running" in s.get("state", {})), None) or now
    statuses = []
    for c in pod["spec"]["containers"]:
        state: Obj
        if phase == "Pending":
            state = {"waiting": {"reason": waiting_reason}}
        elif phase == "Running":
            state = {"running": {"startedAt": now}}
        else:
            reason = "Completed" if exit_code == 0 else "Error"
            state = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": now}}
        statuses.append({"name": c["name"], "image": c["image"], "imageID": "", "ready": phase == "Running",
                         "restartCount": 0, "started": phase == "Running", "state": state})
    ready = "True" if phase == "Running" else "False"
    status: Obj = {
        "phase": phase,
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                       {"type": "Ready", "status": ready, "lastTransitionTime": now}],
        "containerStatuses": statuses,
        "qosClass": "BestEffort",
        "startTime": prev.get("startTime") or now,
    }
    if phase != "Pending":
        status["hostIP"] = status["podIP"] = "10.0.0.1"
    return status


class LogStream:
    """A Pod's container log as the kubelet serves it: what the script wrote by now, and (followed)
    each later line when its time comes, until the container ended or the Pod is gone."""

    def __init__(self, cluster: LiveCluster, key: Key, uid: str, born: float, script: PodScript) -> None:
        self.cluster = cluster
        self.key = key
        self.uid = uid
        self.born = born
        self.script = script

    def written(self) -> list[str]:
        elapsed = time.monotonic() - self.born
        return [text for at, text in self.script.log if at <= elapsed]

    def chunks(self, stopping: threading.Event) -> Iterator[str]:
        sent = 0
        lines = sorted(self.script.log, key=lambda x: x[0])
        cond = self.cluster._cond
        while not stopping.is_set():
            with cond:
                pod = self.cluster._store.get("Pod", {}).get(self.key)
                gone = pod is None or pod["metadata"]["uid"] != self.uid
                ended = gone or (pod or {}).get("status", {}).get("phase") in TERMINAL_PHASES
                elapsed = time.monotonic() - self.born
                due = [text for at, text in lines[sent:] if at <= elapsed]
                if not due and (gone or (ended and sent == len(lines))):
                    return
                if not due:
                    nxt = lines[sent][0] - elapsed if sent < len(lines) else None
                    cond.wait(min(nxt, 0.5) if nxt is not None else 0.5)
                    continue
            sent += len(due)
            yield from due


def load_live_cluster(path: Path) -> LiveCluster:
    """A :class:`LiveCluster` from a JSON file: a list of objects, or ``{"items": [...]}``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return LiveCluster(data["items"] if isinstance(data, dict) else data)


# -- stalled API servers ------------------------------------------------------------------------------


class StalledServer:
    """An API server on ``http://127.0.0.1:<port>`` that accepts every connection and then stalls
    (a context manager). ``mode="silent"``: reads the request and never answers. ``mode="trickle"``:
    answers ``200`` with a JSON body of ``size`` bytes sent one byte every ``every`` seconds;
    ``headers=True`` trickles the status line and headers as well. What such a server does to a
    client whose only bound is a socket timeout (each byte comes before it): it never ends.
    :attr:`requests` holds each request line, :attr:`connections` counts the connections."""

    def __init__(self, mode: str = "silent", *, every: float = 1.0, headers: bool = False,
                 size: int = 10_000_000) -> None:
        assert mode in ("silent", "trickle"), mode
        self.mode, self.every, self.headers, self.size = mode, every, headers, size
        self.requests: list[str] = []
        self.connections = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._thread = threading.Thread(target=self._accept, name="stalled-api", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> StalledServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone does not)
        self._listener.close()
        with self._lock:
            for s in self._socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._socks.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True, name="stalled-api-conn").start()

    def _serve(self, sock: socket.socket) -> None:
        head = b""
        try:
            sock.settimeout(1.0)
            while b"\r\n\r\n" not in head and not self._stop.is_set():
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    return
                head += data
            with self._lock:
                self.requests.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
            if self.mode == "silent":
                self._stop.wait()
                return
            status = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {self.size}\r\n\r\n").encode()
            body = (b'{"kind":"List","apiVersion":"v1","metadata":{},"items":[' + b" " * self.size)[: self.size]
            data = (status if self.headers else b"") + body
            if not self.headers:
                sock.sendall(status)
            for i in range(len(data)):
                if self._stop.wait(self.every):
                    return
                sock.sendall(data[i : i + 1])
        except OSError:
            return


# -- a large cluster, fast ----------------------------------------------------------------------------


def _uid(kind: str, i: int) -> str:
    return str(uuid.UUID(int=(hash(kind) & 0xFFFF) << 64 | i))


def bulk_service(i: int, *, namespaces: int = 50) -> Obj:
    """Service ``i`` as kube-apiserver returns it (kubectl-applied: the last-applied annotation and
    ``managedFields`` of client-side apply)."""
    ns, name = f"ns{i % namespaces}", f"svc-{i:06d}"
    ip = f"10.{96 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}"
    spec: Obj = {
        "clusterIP": ip, "clusterIPs": [ip], "internalTrafficPolicy": "Cluster", "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
        "selector": {"app": name}, "sessionAffinity": "None", "type": "ClusterIP",
    }
    applied = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"annotations": {}, "labels": {"app": name}, "name": name, "namespace": ns},
               "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}], "selector": {"app": name}}}
    fields = {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}},
                             "f:labels": {".": {}, "f:app": {}}},
              "f:spec": {"f:internalTrafficPolicy": {}, "f:ports": {".": {}, 'k:{"port":80,"protocol":"TCP"}': {
                  ".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
                  "f:selector": {}, "f:sessionAffinity": {}, "f:type": {}}}
    return {
        "kind": "Service", "apiVersion": "v1",
        "metadata": {
            "name": name, "namespace": ns, "uid": _uid("Service", i), "resourceVersion": str(100000 + i),
            "creationTimestamp": "2026-01-05T10:00:00Z", "labels": {"app": name},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied) + "\n"},
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-01-05T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields}],
        },
        "spec": spec,
        "status": {"loadBalancer": {}},
    }


def bulk_slice(i: int, *, endpoints: int = 2, namespaces: int = 50) -> Obj:
    """The EndpointSlice of :func:`bulk_service` ``i``, as the EndpointSlice controller writes it."""
    ns, svc = f"ns{i % namespaces}", f"svc-{i:06d}"
    eps = []
    for j in range(endpoints):
        k = i * 8 + j
        eps.append({
            "addresses": [f"10.{128 + ((k >> 16) & 63)}.{(k >> 8) & 255}.{k & 255}"],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "nodeName": f"node-{k % 100}", "zone": f"zone-{k % 3}",
            "targetRef": {"kind": "Pod", "name": f"{svc}-pod-{j}", "namespace": ns, "uid": _uid("Pod", k)},
        })
    fields = {"f:addressType": {}, "f:endpoints": {}, "f:metadata": {
        "f:annotations": {".": {}, "f:endpoints.kubernetes.io/last-change-trigger-time": {}},
        "f:generateName": {}, "f:labels": {".": {}, "f:endpointslice.kubernetes.io/managed-by": {},
                                           "f:kubernetes.io/service-name": {}},
        "f:ownerReferences": {".": {}, f'k:{{"uid":"{_uid("Service", i)}"}}': {}}}, "f:ports": {}}
    return {
        "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
        "metadata": {
            "name": f"{svc}-x{i % 99991:05d}", "generateName": f"{svc}-", "namespace": ns,
            "uid": _uid("EndpointSlice", i), "resourceVersion": str(300000 + i), "generation": 1,
            "creationTimestamp": "2026-01-05T10:00:01Z",
            "labels": {"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                       "kubernetes.io/service-name": svc},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-05T10:00:01Z"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": svc, "uid": _uid("Service", i),
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                               "apiVersion": "discovery.k8s.io/v1", "time": "2026-01-05T10:00:01Z",
                               "fieldsType": "FieldsV1", "fieldsV1": fields}],
        },
        "addressType": "IPv4",
        "endpoints": eps,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


BULK_NODE = "bulk-node"


def bulk_objects(services: int, *, endpoints: int = 2) -> dict[str, list[Obj]]:
    """A generated cluster by API path: ``services`` Services, one EndpointSlice each, and the Node
    :data:`BULK_NODE` (no Pods)."""
    node = {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": BULK_NODE, "uid": _uid("Node", 0), "resourceVersion": "7"},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.2"}]}}
    return {
        "/api/v1/services": [bulk_service(i) for i in range(services)],
        "/apis/discovery.k8s.io/v1/endpointslices": [bulk_slice(i, endpoints=endpoints) for i in range(services)],
        "/api/v1/nodes": [node],
        "/api/v1/pods": [],
    }


class BulkServer:
    """Serve a static cluster's lists fast (a context manager): ``objects`` by list path (as
    :func:`bulk_objects` gives them), in pages of the ``limit`` asked for (all at once without
    one), each page rendered once; ``fieldSelector=metadata.name=N`` and ``spec.nodeName=N``
    select; a watch (``watch=true``) is an open stream with no events, ended at its
    ``timeoutSeconds`` (``watch="overrun"``: never ended, a blank line every 0.2 s, which no read
    timeout catches; ``watch="silent"``: never answered). Every request lands in :attr:`requests`
    (path and query)."""

    def __init__(self, objects: Mapping[str, Sequence[Obj]], *, resource_version: int = 900000,
                 watch: str = "idle") -> None:
        assert watch in ("idle", "overrun", "silent"), watch
        self.watch = watch
        self.objects = {p: [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in objs]
                        for p, objs in objects.items()}
        self.rv = str(resource_version)
        self.requests: list[dict[str, Any]] = []
        self._pages: dict[tuple[str, str, int, int], bytes] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="kubeapi-bulk", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> BulkServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _select(self, path: str, selector: str) -> list[Obj]:
        items = self.objects.get(path, [])
        field, _, value = selector.partition("=")
        if field == "metadata.name":
            return [o for o in items if o["metadata"].get("name") == value]
        if field == "spec.nodeName":
            return [o for o in items if (o.get("spec") or {}).get("nodeName") == value]
        return items

    def page(self, path: str, selector: str, start: int, limit: int) -> bytes:
        key = (path, selector, start, limit)
        with self._lock:
            got = self._pages.get(key)
        if got is not None:
            return got
        items = self._select(path, selector)
        end = min(len(items), start + limit) if limit else len(items)
        meta: Obj = {"resourceVersion": self.rv}
        if end < len(items):
            meta["continue"] = base64.urlsafe_b64encode(json.dumps({"start": end}).encode()).decode()
            meta["remainingItemCount"] = len(items) - end
        body = json.dumps({"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items[start:end]},
                          separators=(",", ":")).encode()
        with self._lock:
            self._pages[key] = body
        return body

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
                with server._lock:
                    server.requests.append({"path": parts.path, "query": query})
                try:
                    if query.get("watch") in ("true", "1"):
                        self._watch(float(query.get("timeoutSeconds") or 60))
                        return
                    if parts.path.rstrip("/") == "/apis/discovery.k8s.io":
                        served = [p.split("/")[3] for p in server.objects if p.startswith("/apis/discovery.k8s.io/")]
                        if served:
                            self._send(200, json.dumps(discovery_group(sorted(set(served)))).encode())
                            return
                    if parts.path not in server.objects:
                        self._send(404, json.dumps(not_found_path()).encode())
                        return
                    token = query.get("continue") or ""
                    start = int(json.loads(base64.urlsafe_b64decode(token))["start"]) if token else 0
                    body = server.page(parts.path, query.get("fieldSelector", ""), start, int(query.get("limit") or 0))
                    self._send(200, body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _watch(self, seconds: float) -> None:
                if server.watch == "silent":
                    server._stopping.wait()
                    self.close_connection = True
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.wfile.flush()
                if server.watch == "overrun":
                    while not server._stopping.wait(0.2):
                        self.wfile.write(b"1\r\n\n\r\n")
                        self.wfile.flush()
                    self.close_connection = True
                    return
                server._stopping.wait(seconds)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        return Handler


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.kubeapi_replay EXCHANGES.json PORTFILE [--live CLUSTER.json]``: serve until
    killed, from whatever network namespace this process runs in (the lab starts it inside its node
    namespace), writing the chosen port to PORTFILE once listening. With ``--live``, requests no
    exchange matches are answered by a :class:`LiveCluster` holding the objects of CLUSTER.json."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m tests.kubeapi_replay")
    p.add_argument("exchanges", type=Path)
    p.add_argument("portfile", type=Path)
    p.add_argument("--live", type=Path, default=None, help="a JSON list of objects served as a live cluster")
    a = p.parse_args(argv)
    cluster = load_live_cluster(a.live) if a.live is not None else None
    with ReplayServer(json.loads(a.exchanges.read_text(encoding="utf-8")), cluster=cluster) as server:
        tmp = a.portfile.with_suffix(".tmp")
        tmp.write_text(str(server.port))
        tmp.replace(a.portfile)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
