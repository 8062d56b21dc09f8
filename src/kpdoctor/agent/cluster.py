"""The cluster as the agent sees it: Services, EndpointSlices, its Node and its Pods, kept current
by list-and-watch (as kube-proxy itself does), never re-listed every cycle.

Each resource has a thread: it lists (in pages), then watches from the list's resourceVersion;
a watch that ends is resumed from the last version seen, a 410 (the version is too old) lists
again, and an error backs off and retries. What was read stays available through an outage,
marked stale: the node side is still diagnosed, and the report says what could not be read.
The objects are handed to each cycle as the bundle's ``cluster/*.json`` artifacts, with each
object's version, so the verification can tell which Services changed (dataplane/reuse.py).

Nothing the API server does can hold a thread or take the node's memory: each page must arrive
whole within :data:`LIST_SECONDS` (an overall deadline, not a read timeout: see
kpdoctor.deadline), a watch connection is cut :data:`WATCH_MARGIN` seconds after its
``timeoutSeconds`` whatever the server keeps sending (and resumed), a page or a watch event
larger than an object can be is refused, and a list that does not end is given up. An object
is kept as its compact JSON, trimmed of what no check reads (collect.kubeapi.trim): 100,000
Services cost their JSON, not Python's dicts, until a cycle parses them (bench/agent_memory.py);
the cycle keeps what it parsed, so only a changed object is parsed again.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from kpdoctor import deadline
from kpdoctor.collect.kubeapi import (
    CONNECT_TIMEOUT,
    SLICES_V1,
    EndpointsSource,
    Unanswered,
    bounded_connections,
    fetch,
    pages,
    raw_get,
    reason,
    served_endpoints,
    trim,
)
from kpdoctor.collect.record import Collected, NotCollected, utc_now
from kpdoctor.parse.diagnostics import Diagnostic
from kpdoctor.parse.k8s import (
    SERVICE_NAME_LABEL,
    K8sObject,
    ObjectDiagnostic,
    Objects,
    load_shared,
    read_object,
    share,
)

log = logging.getLogger("kpdoctor.agent")

Obj = dict[str, Any]

PAGE = 500
WATCH_SECONDS = 300  # the server ends a watch after this; it is resumed at once
WATCH_MARGIN = 30.0  # a watch connection still open this long after that is cut (and resumed)
LIST_SECONDS = 60.0  # one page of a list, whole
MAX_PAGES = 2000  # 1,000,000 objects: a list that has not ended by then never will
MAX_EVENT_BYTES = 16 * 1024 * 1024  # one watch event (an object is at most 1.5 MB in etcd)
PARSE_BATCH = 2000  # objects read in one go (parse.k8s.load_shared: their equal values shared)
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 60.0
CHANGES_KEPT = 3600.0  # seconds a Service's last change is remembered (the agent asks about the last few)


@dataclass
class Resource:
    """One watched resource: its bundle path, the client call that lists it, its item kind."""

    path: str  # cluster/services.json
    kind: str  # Service
    api_version: str  # v1, discovery.k8s.io/v1
    lister: Callable[..., Any]
    selector: dict[str, str] = field(default_factory=dict)  # field_selector=...
    # asks the API server which version to read before the first list (EndpointSlices: v1, else
    # v1beta1, else core Endpoints, as kube-proxy itself falls back), then is done
    resolve: Callable[[Resource], None] | None = None


@dataclass
class _Parsed:
    """One object as the last snapshot gave it: parsed again only when a watch event replaced it."""

    raw: bytes  # the kept JSON it was parsed from (a change replaces it)
    line: int
    obj: K8sObject
    problems: list[str]


@dataclass
class ResourceState:
    objects: dict[str, bytes] = field(default_factory=dict)  # namespace/name -> the object's compact JSON
    parsed: dict[str, _Parsed] = field(default_factory=dict)  # the snapshot's, kept by the cycle thread
    resource_version: str = ""
    synced: bool = False  # listed at least once
    error: str = ""  # why it is not current ("" while the watch runs)
    error_since: float | None = None
    relists: int = 0
    pages: int = 0  # pages read by the last list
    listing_since: float | None = None  # the first list began then (monotonic)


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def compact(obj: Obj, kind: str, api_version: str) -> bytes:
    """What is kept of an object: its line of the artifact (kind and apiVersion first, as a GET
    gives it), trimmed."""
    body = {k: v for k, v in trim(obj, kind).items() if k not in ("kind", "apiVersion")}
    return json.dumps({"kind": kind, "apiVersion": api_version, **body}, separators=(",", ":")).encode()


class ClusterCache:
    """List-and-watch of the resources a node's verification needs (see the module docstring)."""

    def __init__(self, api_client: Any, node: str, *, watch_seconds: int = WATCH_SECONDS) -> None:
        from kubernetes import client as k8s

        bounded_connections(api_client)
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
                resolve=self._served_slices,
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
        self.api_client = api_client
        self._core = core
        self.state = {r.path: ResourceState() for r in self.resources}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.generation = 0  # bumped by every change applied
        # namespace/name of a Service -> when a change to it or to its endpoints arrived (monotonic)
        self._changed_at: dict[str, float] = {}

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
            raws = list(self.state["cluster/nodes.json"].objects.values())
        node = json.loads(raws[0]) if raws else None
        return node if isinstance(node, dict) else None

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
                began = st.listing_since
                why = "not listed yet"
                if began is not None:
                    why += f": the API server has not answered its list in {time.monotonic() - began:.0f}s"
                absent.append(NotCollected(r.path, error or why))
                continue
            self._parse(r, st, items)
            objs: list[K8sObject] = []
            diags: list[Diagnostic] = []
            for i, (key, _raw) in enumerate(items):
                line = i + 2
                p = st.parsed[key]
                if p.line != line:
                    p.obj, p.line = dataclasses.replace(p.obj, line=line), line
                objs.append(p.obj)
                ref = f"{p.obj.namespace}/{p.obj.name}" if p.obj.namespace else p.obj.name
                diags.extend(ObjectDiagnostic(line, f"{p.obj.kind} {ref}: {x}", r.path) for x in p.problems)
            if len(st.parsed) > len(items):
                keep = {k for k, _ in items}
                for k in [k for k in st.parsed if k not in keep]:
                    del st.parsed[k]
            head = b'{"kind":"List","apiVersion":"v1","items":['
            data = head + (b"\n" + b",\n".join(raw for _, raw in items) if items else b"") + b"\n]}"
            note = ""
            if error:
                age = f" for {time.monotonic() - since:.0f}s" if since is not None else ""
                note = f"as last seen: not current{age} ({error})"
            source = f"watch {r.kind} (list + watch)"
            got.append(Collected(r.path, data, source, 0, "", now, 0, note, parsed=Objects(objs, diags)))
        return got, absent

    @staticmethod
    def _parse(r: Resource, st: ResourceState, items: list[tuple[str, bytes]]) -> None:
        """Parse the objects that are new or changed since the last snapshot, a batch at a time
        (the equal values of a batch one object: parse.k8s.load_shared)."""
        stale = []
        for i, (key, raw) in enumerate(items):
            p = st.parsed.get(key)
            if p is None or p.raw is not raw:
                stale.append((i + 2, key, raw))
        for at in range(0, len(stale), PARSE_BATCH):
            batch = stale[at : at + PARSE_BATCH]
            bodies, shared = load_shared(b"[" + b",".join(raw for _, _, raw in batch) + b"]")
            objs = []
            for (line, key, raw), body in zip(batch, bodies, strict=True):
                obj, problems = read_object(body, r.path, line)
                st.parsed[key] = _Parsed(raw, line, obj, problems)
                objs.append(obj.body)
            if not shared:
                share(objs)  # read (and trimmed of malformed parts) above: read-only from here on

    def errors(self) -> dict[str, str]:
        with self._lock:
            return {p: s.error for p, s in self.state.items() if s.error}

    def changed_at(self, service: str | None) -> float | None:
        """When (monotonic) the last change to Service ``namespace/name``, or to its EndpointSlices
        (its Endpoints), arrived: by a watch event, or found by a list that replaced the one
        before it (``None``: to any Service). None: none since the first list (or for more than
        :data:`CHANGES_KEPT`)."""
        with self._lock:
            if service is None:
                return max(self._changed_at.values(), default=None)
            return self._changed_at.get(service)

    def _note_change(self, r: Resource, obj: Obj, at: float) -> None:
        """Note a change to ``obj`` (a Service, EndpointSlice or Endpoints) for its Service;
        called with the lock held."""
        meta = obj.get("metadata") or {}
        if not isinstance(meta, dict):
            return
        if r.kind == "EndpointSlice":
            labels = meta.get("labels") or {}
            name = labels.get(SERVICE_NAME_LABEL) if isinstance(labels, dict) else None
        elif r.kind in ("Service", "Endpoints"):
            name = meta.get("name")
        else:
            return
        if not name:
            return
        self._changed_at[f"{meta.get('namespace') or ''}/{name}"] = at
        if len(self._changed_at) > 1024:
            old = at - CHANGES_KEPT
            for k in [k for k, t in self._changed_at.items() if t < old]:
                del self._changed_at[k]

    # -- the watch loop ----------------------------------------------------------------------
    def _run(self, r: Resource) -> None:
        backoff = BACKOFF_FIRST
        st = self.state[r.path]
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                if r.resolve is not None:
                    r.resolve(r)
                    r.resolve = None
                if not st.resource_version:
                    self._list(r, st)
                self._watch(r, st)
                backoff = BACKOFF_FIRST
            except _Gone:
                with self._lock:
                    st.resource_version = ""
                    st.relists += 1
                if time.monotonic() - began > BACKOFF_MAX:
                    backoff = BACKOFF_FIRST
                elif st.relists > 1:  # 410 again and again at once: not in a tight loop
                    if self._stop.wait(backoff):
                        return
                    backoff = min(BACKOFF_MAX, backoff * 2)
            except Exception as e:  # the apiserver away, forbidden, a broken stream: retry later
                why = reason(e)
                with self._changed:
                    if not st.error:
                        st.error_since = time.monotonic()
                    st.error = why
                    self._changed.notify_all()
                log.warning("watching %s: %s (retrying in %.0fs)", r.kind, why, backoff)
                if self._stop.wait(backoff):
                    return
                backoff = min(BACKOFF_MAX, backoff * 2)

    def _served_slices(self, r: Resource) -> None:
        """The endpoints' source the API server serves (collect.kubeapi.served_endpoints:
        EndpointSlices v1, else v1beta1, else core Endpoints, as kube-proxy reads them); decided
        once, before the first list. An unanswered discovery is retried as any failed list is
        (the resource stays "not listed yet", never read as empty)."""
        try:
            group = json.loads(fetch(self._path_lister("/apis/discovery.k8s.io"), seconds=LIST_SECONDS))
        except ApiException as e:
            if e.status != 404:
                raise
            group = None
        source: EndpointsSource = served_endpoints(group if isinstance(group, dict) else None)
        if source is SLICES_V1:
            return
        if source.bundle_path != r.path:
            with self._lock:
                self.state[source.bundle_path] = self.state.pop(r.path)
        r.path, r.kind, r.api_version = source.bundle_path, source.kind, source.api_version
        r.lister = self._path_lister(source.path) if source.slices else self._core.list_endpoints_for_all_namespaces
        log.info("cluster: the API server serves %s: reading %s", r.api_version, r.kind)

    def _path_lister(self, path: str) -> Callable[..., Any]:
        """A lister for a path the generated client has no method for (an older API version):
        the same arguments as the client's own (``limit``, ``_continue``, ``watch``...), the raw
        answer back, a non-2xx answer an ``ApiException`` with the server's Status."""
        names = {
            "limit": "limit",
            "_continue": "continue",
            "watch": "watch",
            "resource_version": "resourceVersion",
            "timeout_seconds": "timeoutSeconds",
            "allow_watch_bookmarks": "allowWatchBookmarks",
            "field_selector": "fieldSelector",
        }

        def lister(*, _preload_content: bool = False, _request_timeout: Any = None, **kwargs: Any) -> Any:
            query = [
                (names[k], str(v).lower() if isinstance(v, bool) else str(v))
                for k, v in kwargs.items()
                if v not in (None, "")
            ]
            return raw_get(self.api_client, path, query, _request_timeout)

        return lister

    def _list(self, r: Resource, st: ResourceState) -> None:
        if st.listing_since is None:
            st.listing_since = time.monotonic()
        objects: dict[str, bytes] = {}
        rv = ""
        read = 0

        def page(token: str | None) -> Obj:
            kwargs: dict[str, Any] = {"limit": PAGE, **r.selector}
            if token:
                kwargs["_continue"] = token
            body = json.loads(_read(r.lister, LIST_SECONDS, **kwargs))
            if not isinstance(body, dict):
                raise ValueError("the API server's answer is not a JSON object")
            return body

        for body in pages(page, MAX_PAGES):
            read += 1
            for item in body.pop("items", None) or []:
                if isinstance(item, dict):
                    objects[_key(item)] = compact(item, r.kind, r.api_version)
            rv = str((body.get("metadata") or {}).get("resourceVersion") or rv)
        with self._changed:
            if st.synced:  # a list again (after 410 Gone or an outage): what it changed is a change
                now = time.monotonic()
                gone_or_new = objects.keys() ^ st.objects.keys()
                differ = {k for k in objects.keys() & st.objects.keys() if objects[k] != st.objects[k]}
                for key in gone_or_new | differ:
                    self._note_change(r, json.loads(objects.get(key) or st.objects[key]), now)
            st.objects, st.resource_version, st.synced, st.pages = objects, rv, True, read
            st.error, st.error_since = "", None
            self.generation += 1
            self._changed.notify_all()

    def _watch(self, r: Resource, st: ResourceState) -> None:
        """One watch connection, from the last version seen, until the server ends it (or it
        outlives its ``timeoutSeconds`` by :data:`WATCH_MARGIN`: cut, and resumed by the caller)."""
        seconds = self.watch_seconds + WATCH_MARGIN
        with deadline.bounded(seconds) as bound:
            try:
                resp = r.lister(
                    watch=True,
                    resource_version=st.resource_version,
                    timeout_seconds=self.watch_seconds,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                    _request_timeout=(min(CONNECT_TIMEOUT, seconds), seconds),
                    **r.selector,
                )
            except ApiException as e:
                if e.status == 410:
                    raise _Gone() from None
                if bound.expired:
                    raise Unanswered(f"no answer to the watch within {round(seconds, 1):g}s") from None
                raise
            except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError):
                if bound.expired:  # not even its headers: the API server is not answering (stale)
                    raise Unanswered(f"no answer to the watch within {round(seconds, 1):g}s") from None
                raise
            try:
                with self._changed:
                    if st.error:
                        st.error, st.error_since = "", None
                        self._changed.notify_all()
                for line in _lines(resp, MAX_EVENT_BYTES):
                    if self._stop.is_set():
                        return
                    self._event(st, r, line)
            except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError):
                if bound.expired:  # it streamed past its timeoutSeconds: resumed from the last version seen
                    log.info("watching %s: the stream outlived its %ds, cut and resumed", r.kind, self.watch_seconds)
                    return
                raise
            finally:
                resp.close()
                release = getattr(resp, "release_conn", None)
                if release is not None:
                    release()

    def _event(self, st: ResourceState, r: Resource, line: bytes) -> None:
        if not line or line.isspace():
            return
        event = json.loads(line)
        if not isinstance(event, dict):
            raise ValueError("a watch event that is not a JSON object")
        kind, obj = event.get("type"), event.get("object")
        obj = obj if isinstance(obj, dict) else {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        raw = compact(obj, r.kind, r.api_version) if kind in ("ADDED", "MODIFIED") else b""
        with self._changed:
            if kind in ("ADDED", "MODIFIED"):
                st.objects[_key(obj)] = raw
            elif kind == "DELETED":
                st.objects.pop(_key(obj), None)
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._note_change(r, obj, time.monotonic())
            if rv:
                st.resource_version = rv
            if kind != "BOOKMARK":
                self.generation += 1
            self._changed.notify_all()


class _Gone(Exception):
    """The watch's resourceVersion is too old, or a list's continue token expired (410): list again."""


def _read(lister: Callable[..., Any], seconds: float, **kwargs: Any) -> bytes:
    """One page, whole within ``seconds`` (collect.kubeapi.fetch); a 410 is :class:`_Gone`."""
    try:
        return fetch(lister, seconds=seconds, **kwargs)
    except ApiException as e:
        if e.status == 410:
            raise _Gone() from None
        raise


def _lines(resp: Any, limit: int) -> Iterator[bytes]:
    """The lines of a streamed answer as they arrive (each chunk as the server flushes it); a line
    longer than ``limit`` bytes ends the stream with an error."""
    pending: list[bytes] = []
    size = 0
    for segment in resp.stream(64 * 1024, decode_content=False):
        parts = segment.split(b"\n")
        for part in parts[:-1]:
            pending.append(part)
            yield b"".join(pending)
            pending, size = [], 0
        if parts[-1]:
            pending.append(parts[-1])
            size += len(parts[-1])
            if size > limit:
                raise ValueError(f"a watch event of more than {limit >> 20} MiB")
    if pending:
        yield b"".join(pending)
