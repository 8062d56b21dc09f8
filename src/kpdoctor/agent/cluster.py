"""The cluster as the agent sees it: Services, EndpointSlices, its Node and its Pods, kept current
by list-and-watch (as kube-proxy itself does), never re-listed every cycle.

Each resource has a thread: it lists (in pages), then watches from the list's resourceVersion;
a watch that ends is resumed from the last version seen, a 410 (the version is too old) lists
again, and an error backs off and retries. What was read stays available through an outage,
marked stale: the node side is still diagnosed, and the report says what could not be read.
The objects are handed to each cycle as the bundle's ``cluster/*.json`` artifacts, with each
object's version, so the verification can tell which Services changed (dataplane/reuse.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from kpdoctor.collect.record import Collected, NotCollected, utc_now
from kpdoctor.parse.diagnostics import Diagnostic
from kpdoctor.parse.k8s import K8sObject, ObjectDiagnostic, Objects, read_object

log = logging.getLogger("kpdoctor.agent")

Obj = dict[str, Any]

PAGE = 500
WATCH_SECONDS = 300  # the server ends a watch after this; it is resumed at once
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 60.0
CONNECT_TIMEOUT = 10.0


@dataclass
class Resource:
    """One watched resource: its bundle path, the client call that lists it, its item kind."""

    path: str  # cluster/services.json
    kind: str  # Service
    api_version: str  # v1, discovery.k8s.io/v1
    lister: Callable[..., Any]
    selector: dict[str, str] = field(default_factory=dict)  # field_selector=...


@dataclass
class _Parsed:
    """One object as the last snapshot gave it: parsed again only when a watch event replaced it."""

    body: Obj  # the watched object it was read from (a change replaces the dict)
    line: int
    text: str  # its JSON line in the artifact
    obj: K8sObject
    problems: list[str]


@dataclass
class ResourceState:
    objects: dict[str, Obj] = field(default_factory=dict)  # namespace/name -> object
    parsed: dict[str, _Parsed] = field(default_factory=dict)  # the snapshot's, kept by the cycle thread
    resource_version: str = ""
    synced: bool = False  # listed at least once
    error: str = ""  # why it is not current ("" while the watch runs)
    error_since: float | None = None
    relists: int = 0


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _reason(e: BaseException) -> str:
    if isinstance(e, ApiException):
        try:
            body = json.loads(e.body or b"{}")
            msg = body.get("message") if isinstance(body, dict) else None
        except ValueError:
            msg = None
        return f"{e.status} {e.reason or ''}: {msg or ''}".strip(": ")
    return " ".join(f"{type(e).__name__}: {e}".split())[:300]


class ClusterCache:
    """List-and-watch of the resources a node's verification needs (see the module docstring)."""

    def __init__(self, api_client: Any, node: str, *, watch_seconds: int = WATCH_SECONDS) -> None:
        from kubernetes import client as k8s

        core, discovery = k8s.CoreV1Api(api_client), k8s.DiscoveryV1Api(api_client)
        self.node = node
        self.watch_seconds = watch_seconds
        self.resources = [
            Resource("cluster/services.json", "Service", "v1", core.list_service_for_all_namespaces),
            Resource(
                "cluster/endpointslices.json",
                "EndpointSlice",
                "discovery.k8s.io/v1",
                discovery.list_endpoint_slice_for_all_namespaces,
            ),
            Resource("cluster/nodes.json", "Node", "v1", core.list_node, {"field_selector": f"metadata.name={node}"}),
            Resource(
                "cluster/pods.json",
                "Pod",
                "v1",
                core.list_pod_for_all_namespaces,
                {"field_selector": f"spec.nodeName={node}"},
            ),
        ]
        self.state = {r.path: ResourceState() for r in self.resources}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.generation = 0  # bumped by every change applied

    # -- life --------------------------------------------------------------------------------
    def start(self) -> None:
        for r in self.resources:
            t = threading.Thread(target=self._run, args=(r,), name=f"watch {r.kind}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        with self._changed:
            self._changed.notify_all()

    def wait_synced(self, timeout: float) -> bool:
        """Until every resource was listed once (or failed to be), at most ``timeout`` seconds."""
        end = time.monotonic() + timeout
        with self._changed:
            while not all(s.synced or s.error for s in self.state.values()):
                left = end - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._changed.wait(left)
        return True

    # -- what a cycle reads ------------------------------------------------------------------
    def node_object(self) -> Obj | None:
        with self._lock:
            objs = list(self.state["cluster/nodes.json"].objects.values())
        return objs[0] if objs else None

    def snapshot(self) -> tuple[list[Collected], list[NotCollected]]:
        """Each resource as its bundle artifact (a ``List``, one object per line), or why it is
        absent; a resource known but no longer current is given with a note saying since when it
        is stale. The artifact comes parsed: only the objects a watch event replaced since the
        last snapshot are parsed again, the others keep their parse (and their identity, which
        lets the verification carry their results over: dataplane/reuse.py)."""
        got: list[Collected] = []
        absent: list[NotCollected] = []
        now = utc_now()
        for r in self.resources:
            with self._lock:
                st = self.state[r.path]
                items = list(st.objects.items())
                synced, error, since = st.synced, st.error, st.error_since
            if not synced:
                absent.append(NotCollected(r.path, error or "not listed yet"))
                continue
            lines = ['{"kind":"List","apiVersion":"v1","items":[']
            objs: list[K8sObject] = []
            diags: list[Diagnostic] = []
            last = len(items) - 1
            for i, (key, body) in enumerate(items):
                line = i + 2
                p = st.parsed.get(key)
                if p is None or p.body is not body:
                    full = {"kind": r.kind, "apiVersion": r.api_version, **body}
                    obj, problems = read_object(full, r.path, line)
                    p = st.parsed[key] = _Parsed(body, line, json.dumps(full, separators=(",", ":")), obj, problems)
                elif p.line != line:
                    p.obj, p.line = dataclasses.replace(p.obj, line=line), line
                lines.append(p.text if i == last else p.text + ",")
                objs.append(p.obj)
                ref = f"{p.obj.namespace}/{p.obj.name}" if p.obj.namespace else p.obj.name
                diags.extend(ObjectDiagnostic(line, f"{p.obj.kind} {ref}: {x}", r.path) for x in p.problems)
            if len(st.parsed) > len(items):
                keep = {k for k, _ in items}
                for k in [k for k in st.parsed if k not in keep]:
                    del st.parsed[k]
            lines.append("]}")
            note = ""
            if error:
                age = f" for {time.monotonic() - since:.0f}s" if since is not None else ""
                note = f"as last seen: not current{age} ({error})"
            data = "\n".join(lines).encode()
            source = f"watch {r.kind} (list + watch)"
            got.append(Collected(r.path, data, source, 0, "", now, 0, note, parsed=Objects(objs, diags)))
        return got, absent

    def errors(self) -> dict[str, str]:
        with self._lock:
            return {p: s.error for p, s in self.state.items() if s.error}

    # -- the watch loop ----------------------------------------------------------------------
    def _run(self, r: Resource) -> None:
        backoff = BACKOFF_FIRST
        st = self.state[r.path]
        while not self._stop.is_set():
            try:
                if not st.resource_version:
                    self._list(r, st)
                self._watch(r, st)
                backoff = BACKOFF_FIRST
            except _Gone:
                with self._lock:
                    st.resource_version = ""
                    st.relists += 1
            except Exception as e:  # the apiserver away, forbidden, a broken stream: retry later
                why = _reason(e)
                with self._changed:
                    if not st.error:
                        st.error_since = time.monotonic()
                    st.error = why
                    self._changed.notify_all()
                log.warning("watching %s: %s (retrying in %.0fs)", r.kind, why, backoff)
                if self._stop.wait(backoff):
                    return
                backoff = min(BACKOFF_MAX, backoff * 2)

    def _list(self, r: Resource, st: ResourceState) -> None:
        objects: dict[str, Obj] = {}
        token: str | None = None
        rv = ""
        while True:
            kwargs: dict[str, Any] = {"limit": PAGE, **r.selector}
            if token:
                kwargs["_continue"] = token
            resp = _ok(r.lister(_preload_content=False, _request_timeout=(CONNECT_TIMEOUT, 60.0), **kwargs))
            body = json.loads(resp.data)
            for item in body.get("items") or []:
                if isinstance(item, dict):
                    objects[_key(item)] = item
            meta = body.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or rv)
            token = meta.get("continue") or None
            if not token:
                break
        with self._changed:
            st.objects, st.resource_version, st.synced = objects, rv, True
            st.error, st.error_since = "", None
            self.generation += 1
            self._changed.notify_all()

    def _watch(self, r: Resource, st: ResourceState) -> None:
        resp = _ok(
            r.lister(
                watch=True,
                resource_version=st.resource_version,
                timeout_seconds=self.watch_seconds,
                allow_watch_bookmarks=True,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, self.watch_seconds + 30.0),
                **r.selector,
            )
        )
        try:
            with self._changed:
                if st.error:
                    st.error, st.error_since = "", None
                    self._changed.notify_all()
            for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                if self._stop.is_set():
                    return
                if not line or line.isspace():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone()
                    raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                with self._changed:
                    if kind in ("ADDED", "MODIFIED"):
                        obj.pop("kind", None)
                        obj.pop("apiVersion", None)
                        st.objects[_key(obj)] = obj
                    elif kind == "DELETED":
                        st.objects.pop(_key(obj), None)
                    if rv:
                        st.resource_version = rv
                    if kind != "BOOKMARK":
                        self.generation += 1
                    self._changed.notify_all()
        finally:
            resp.close()
            release = getattr(resp, "release_conn", None)
            if release is not None:
                release()


class _Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


def _ok(resp: Any) -> Any:
    """The raw response, or the API's error: :class:`_Gone` for a 410, else :class:`ApiException` (a raw
    call raises none)."""
    status = getattr(resp, "status", 200)
    if isinstance(status, int) and not 200 <= status <= 299:
        body = resp.data
        resp.close()
        if status == 410:
            raise _Gone()
        e = ApiException(status=status, reason=getattr(resp, "reason", ""))
        e.body = body
        raise e
    return resp
