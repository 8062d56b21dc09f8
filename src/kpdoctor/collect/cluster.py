"""Cluster objects from the Kubernetes API: what kube-proxy on this node was told to program.

Reads, never writes: Services, EndpointSlices (or v1 Endpoints on old clusters), this node's Node
object and Pods, the DaemonSets that may touch the host's iptables, kube-proxy's ConfigMap, the
controllers of this node's Pods, and (asked for) the kube-proxy Pod's log. Never Secrets, never a
ServiceAccount token, and the kubeconfig is only read (``persist_config=False``).

Every call goes through the official client with raw responses (the API's own JSON, camelCase),
pages of :data:`PAGE_SIZE`, and no retries by urllib3 (a call is retried once only on a dropped
kept-alive connection, or after the Retry-After of a 429). Each call has an overall deadline
from the shared :class:`Budget` (:func:`fetch`): a socket timeout bounds each read, not the
answer, and an API server that accepts and never answers, or sends a byte a second, would
otherwise hold the run for ever; an answer larger than a page can be is not read. What the
objects carry that no check reads (``managedFields``, kubectl's last-applied copy, most of a
Service's or an EndpointSlice's metadata) is dropped as they arrive (:func:`trim`), so that a
bundle and the agent hold the same objects. Failures are per artifact (:class:`NotCollected` with the API's own
message), except when the API cannot be used at all (no config, unreachable, 401 or no answer on
the first call): then :attr:`ClusterCollection.error` says so in one line and nothing is waited for.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from kpdoctor.collect.kubeapi import (
    ENDPOINTS_V1,
    MAX_RESPONSE_BYTES,
    ConfigError,
    ListNeverEnds,
    Obj,
    TooLarge,
    Unanswered,
    api_reason,
    bounded_connections,
    fetch,
    load_config,
    pages,
    raw_get,
    served_endpoints,
    transport_reason,
    trim,
)
from kpdoctor.collect.record import Budget, Collected, NotCollected, Progress, utc_now

PAGE_SIZE = 500
MAX_PAGES = 400
MAX_RESTARTS = 3  # a list restarted from the beginning after 410 Gone (expired continue token)
READ_TIMEOUT = 30.0
LOG_READ_TIMEOUT = 60.0
LOG_LIMIT_BYTES = 32 * 1024 * 1024
MAX_RETRY_AFTER = 2.0  # seconds waited once on 429 Too Many Requests
MAX_OWNER_DEPTH = 3  # Pod -> ReplicaSet -> Deployment; Pod -> Job -> CronJob


@dataclass
class ClusterCollection:
    """What the API gave: artifacts at their bundle paths, and what it could not give and why."""

    artifacts: list[Collected] = field(default_factory=list)
    skipped: list[NotCollected] = field(default_factory=list)
    node: str | None = None  # the Node object's name this node resolved to, if found
    error: str | None = None  # the API could not be used at all (no config, unreachable, 401): one line


# -- errors --------------------------------------------------------------------------------------------


class _Fatal(Exception):
    """The API cannot be used at all: stop, and say so in ``error``."""


class _CallFailed(Exception):
    """One call failed; ``reason`` is what the report says about the artifact."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status



# -- the API, one call at a time --------------------------------------------------------------------------


class _Api:
    """Calls with deadlines from the budget; knows whether the server ever answered."""

    def __init__(self, api_client: Any, host: str, budget: Budget) -> None:
        self.client = bounded_connections(api_client)
        self.host = host
        self.budget = budget
        self.core = k8s.CoreV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.batch = k8s.BatchV1Api(api_client)
        self.discovery = k8s.DiscoveryV1Api(api_client)
        self.answered = False  # the server answered some call (so it is reachable and we are authenticated)
        self.lost: str | None = None  # the server stopped being usable: the reason, for every later call

    def call(self, fn: Callable[..., Any], *args: Any, read_timeout: float = READ_TIMEOUT,
             max_bytes: int = MAX_RESPONSE_BYTES, truncate: bool = False, **kwargs: Any) -> bytes:
        """``fn(*args, **kwargs)``'s body, within ``read_timeout`` seconds (or what the budget has left)."""
        if self.lost:
            raise _CallFailed(self.lost)
        for attempt in (1, 2):
            if self.budget.spent:
                raise _CallFailed("time budget spent")
            seconds = self.budget.timeout(read_timeout)
            try:
                data = fetch(fn, *args, seconds=seconds, max_bytes=max_bytes, truncate=truncate, **kwargs)
                self.answered = True
                return data
            except Unanswered as e:
                reason = f"timed out waiting for the API server's answer ({e})"
                if not self.answered:
                    self._unusable(reason)
                raise _CallFailed(reason) from None
            except TooLarge as e:
                self.answered = True
                raise _CallFailed(str(e)) from None
            except ApiException as e:
                if not e.status:  # TLS failure, wrapped by the client
                    self._unusable(transport_reason(e))
                reason = api_reason(e)
                if e.status == 401:
                    self._unusable(reason)
                self.answered = True
                if e.status == 429 and attempt == 1:  # API Priority and Fairness: wait as told, once
                    self._pause(e)
                    continue
                raise _CallFailed(reason, e.status) from None
            except urllib3.exceptions.ProtocolError as e:
                # A kept-alive connection the server had closed: ask once more on a new one.
                if attempt == 1 and self.answered:
                    continue
                self._unusable(transport_reason(e))
            except urllib3.exceptions.ReadTimeoutError as e:
                if not self.answered:
                    self._unusable(transport_reason(e))
                raise _CallFailed(f"{transport_reason(e)} (after {seconds:.0f}s)") from None
            except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as e:
                self._unusable(transport_reason(e))
        raise AssertionError("unreachable")  # pragma: no cover

    def _pause(self, e: ApiException) -> None:
        try:
            wait = float((e.headers or {}).get("Retry-After") or 1)
        except ValueError:
            wait = 1.0
        time.sleep(max(0.0, min(wait, MAX_RETRY_AFTER, self.budget.left() - 0.1)))

    def _unusable(self, reason: str) -> NoReturn:
        """The server cannot be used: fatal before it ever answered, else every later call fails fast."""
        if not self.answered:
            raise _Fatal(f"Kubernetes API {self.host}: {reason}")
        self.lost = f"API server stopped answering: {reason}"
        raise _CallFailed(self.lost)

    def get_path(self, path: str, query: list[tuple[str, str]], *, read_timeout: float = READ_TIMEOUT) -> Obj:
        """GET a path the generated client has no method for (discovery.k8s.io/v1beta1)."""

        def raw(*, _preload_content: bool, _request_timeout: tuple[float, float]) -> Any:
            return raw_get(self.client, path, query, _request_timeout)

        return self._parse(self.call(raw, read_timeout=read_timeout))

    def json(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """``fn(*args, **kwargs)``'s JSON object, trimmed (:func:`trim`)."""
        return trim(self._parse(self.call(fn, *args, **kwargs)))

    @staticmethod
    def _parse(data: bytes) -> Obj:
        try:
            body = json.loads(data)
        except ValueError as e:
            raise _CallFailed(f"the API server's answer is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise _CallFailed("the API server's answer is not a JSON object")
        return body


# -- lists, pages and artifacts ------------------------------------------------------------------------


@dataclass
class _Listed:
    items: list[Obj]
    source: str
    note: str = ""
    started_at: str = ""
    duration_ms: int = 0


def _source(path: str, params: dict[str, str]) -> str:
    q = urlencode(params, quote_via=quote, safe="=/")
    return f"GET {path}" + (f"?{q}" if q else "")


def _list(
    fetch: Callable[[str | None], Obj],
    path: str,
    params: dict[str, str],
    kind: str,
    api_version: str,
) -> _Listed:
    """Every page of a chunked list (``fetch(continue_token)``, kubeapi.pages), restarted after 410
    Gone; a list that fails or does not end after some pages is kept as far as it was read."""
    started_at, t0 = utc_now(), time.monotonic()
    restarts = 0
    while True:
        items: list[Obj] = []
        read = 0
        note = ""
        try:
            for body in pages(fetch, MAX_PAGES):
                read += 1
                items.extend(_with_type(trim(it, kind), kind, api_version) for it in body.get("items") or []
                             if isinstance(it, dict))  # fmt: skip
        except ListNeverEnds as e:
            note = f"truncated after {len(items)} objects ({read} pages of {PAGE_SIZE}): {e}"
        except _CallFailed as e:
            if e.status == 410 and read:
                if restarts < MAX_RESTARTS:
                    restarts += 1
                    continue
                note = (f"partial: the list expired (410 Gone) {restarts + 1} times; "
                        f"{len(items)} objects read before the last expiry")  # fmt: skip
            elif not items:
                raise
            else:
                note = f"partial: {len(items)} objects, then page {read + 1} failed: {e.reason}"
        break
    detail = f"{read} page{'s' if read != 1 else ''}"
    if restarts:
        detail += f", restarted {restarts}x after 410 Gone (expired continue token)"
    return _Listed(items, f"{_source(path, {**params, 'limit': str(PAGE_SIZE)})} ({detail})", note, started_at,
                   int((time.monotonic() - t0) * 1000))


def _with_type(item: Obj, kind: str, api_version: str) -> Obj:
    """A list item with its ``kind`` and ``apiVersion`` (list items lack them), first."""
    return {"kind": item.get("kind") or kind, "apiVersion": item.get("apiVersion") or api_version,
            **{k: v for k, v in item.items() if k not in ("kind", "apiVersion")}}


def _list_body(items: Iterable[Obj]) -> bytes:
    return (json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)}, indent=2) + "\n").encode()


def _artifact(path: str, items: Iterable[Obj], source: str, started_at: str, duration_ms: int,
              note: str = "") -> Collected:
    return Collected(path=path, data=_list_body(items), source=source, exit_code=0, started_at=started_at,
                     duration_ms=duration_ms, note=note)


# -- what to collect ------------------------------------------------------------------------------------


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _node_matches(node: Obj, hint: str | None, addresses: set[str]) -> int:
    """How well a Node matches this host: 2 by address, 1 by ``hint.`` prefix or Hostname, 0 not."""
    name = str(_meta(node).get("name") or "")
    node_addrs = [a for a in ((node.get("status") or {}).get("addresses") or []) if isinstance(a, dict)]
    if any(str(a.get("address")) in addresses for a in node_addrs):
        return 2
    if hint:
        h = hint.lower()
        if name.lower() == h or name.lower().startswith(h + "."):
            return 1
        if any(a.get("type") == "Hostname" and str(a.get("address", "")).lower() == h for a in node_addrs):
            return 1
    return 0


_CAPS = {"NET_ADMIN", "NET_RAW", "ALL"}


def _may_touch_host_iptables(ds: Obj) -> bool:
    """kube-proxy, or a DaemonSet whose Pods share the host network or may change it."""
    meta = _meta(ds)
    template = ((ds.get("spec") or {}).get("template") or {})
    for labels in (meta.get("labels") or {}, (template.get("metadata") or {}).get("labels") or {}):
        if labels.get("k8s-app") == "kube-proxy" or labels.get("component") == "kube-proxy":
            return True
    if meta.get("name") == "kube-proxy":
        return True
    spec = template.get("spec") or {}
    if spec.get("hostNetwork") is True:
        return True
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        sc = (c or {}).get("securityContext") or {}
        if sc.get("privileged") is True:
            return True
        added = {str(x).upper().removeprefix("CAP_") for x in ((sc.get("capabilities") or {}).get("add") or [])}
        if added & _CAPS:
            return True
    return False


def _is_kube_proxy_pod(pod: Obj) -> bool:
    meta = _meta(pod)
    labels = meta.get("labels") or {}
    if labels.get("k8s-app") == "kube-proxy" or labels.get("component") == "kube-proxy":  # DaemonSet; static Pod
        return True
    if any(o.get("kind") == "DaemonSet" and o.get("name") == "kube-proxy" for o in meta.get("ownerReferences") or []):
        return True
    containers = (pod.get("spec") or {}).get("containers") or []
    return str(meta.get("name", "")).startswith("kube-proxy") and any(c.get("name") == "kube-proxy" for c in containers)


class _Collector:
    def __init__(self, api: _Api, progress: Progress, out: ClusterCollection) -> None:
        self.api = api
        self.progress = progress
        self.out = out
        self.nodes_unreadable = ""  # why the Nodes could not be read (not: read, and none matched)

    # results

    def skip(self, path: str, reason: str) -> None:
        self.out.skipped.append(NotCollected(path, reason))

    def add(self, art: Collected) -> None:
        self.out.artifacts.append(art)

    def collect_list(self, bundle_path: str, fetch: Callable[[str | None], Obj], path: str, params: dict[str, str],
                     kind: str, api_version: str, note: str = "") -> _Listed | None:
        try:
            listed = _list(fetch, path, params, kind, api_version)
        except _CallFailed as e:
            self.skip(bundle_path, e.reason)
            return None
        self.add(_artifact(bundle_path, listed.items, listed.source, listed.started_at, listed.duration_ms,
                           "; ".join(n for n in (note, listed.note) if n)))
        return listed

    # steps

    def resolve_node(self, hint: str | None, addresses: list[str]) -> Obj | None:
        self.progress("cluster: node")
        if not hint and not addresses:
            self.skip("cluster/nodes.json", "no node name or address to look the Node up by")
            return None
        started_at, t0 = utc_now(), time.monotonic()
        failures: list[str] = []
        if hint:
            path = f"/api/v1/nodes/{hint}"
            try:
                node = self.api.json(self.api.core.read_node, hint)
            except _CallFailed as e:
                if e.status != 404:
                    failures.append(e.reason)
            else:
                self.add(_artifact("cluster/nodes.json", [_with_type(node, "Node", "v1")], f"GET {path}",
                                   started_at, int((time.monotonic() - t0) * 1000)))
                return node
        try:
            listed = _list(lambda tok: self.api.json(self.api.core.list_node, limit=PAGE_SIZE, _continue=tok),
                           "/api/v1/nodes", {}, "Node", "v1")
        except _CallFailed as e:
            failures.append(e.reason)
            self.nodes_unreadable = "; ".join(dict.fromkeys(failures))
            self.skip("cluster/nodes.json", self.nodes_unreadable)
            return None
        wanted = set(addresses)
        best = max(listed.items, key=lambda n: _node_matches(n, hint, wanted), default=None)
        if best is None or _node_matches(best, hint, wanted) == 0:
            looked = ", ".join([*([f"name {hint!r} or {hint}.*"] if hint else []), *addresses])
            why = f"no Node matches this host ({looked}) among {len(listed.items)} Nodes"
            if listed.note:
                why += f" ({listed.note})"
            self.skip("cluster/nodes.json", why)
            return None
        self.add(_artifact("cluster/nodes.json", [best], listed.source, listed.started_at,
                           int((time.monotonic() - t0) * 1000)))
        return best

    def services(self) -> None:
        self.progress("cluster: services")
        core = self.api.core
        self.collect_list(
            "cluster/services.json",
            lambda tok: self.api.json(core.list_service_for_all_namespaces, limit=PAGE_SIZE, _continue=tok),
            "/api/v1/services", {}, "Service", "v1")

    def endpoints(self) -> None:
        """EndpointSlices in the version the server serves (kubeapi.served_endpoints), else core
        Endpoints; Endpoints too when the slices are forbidden (roles older than EndpointSlices
        grant Endpoints only)."""
        self.progress("cluster: endpointslices")
        try:
            group: Obj | None = self.api.get_path("/apis/discovery.k8s.io", [])
        except _CallFailed as e:
            if e.status != 404:
                self.skip("cluster/endpointslices.json", f"GET /apis/discovery.k8s.io: {e.reason}")
                return
            group = None
        source = served_endpoints(group)
        if not source.slices:
            self.skip("cluster/endpointslices.json", "the API serves no EndpointSlices (discovery.k8s.io: neither v1 "
                      "nor v1beta1); v1 Endpoints instead")  # fmt: skip
            self.endpoints_v1()
            return

        def page(tok: str | None) -> Obj:
            query = [("limit", str(PAGE_SIZE))] + ([("continue", tok)] if tok else [])
            return self.api.get_path(source.path, query)

        try:
            listed = _list(page, source.path, {}, source.kind, source.api_version)
        except _CallFailed as e:
            self.skip(source.bundle_path, e.reason)
            if e.status == 403:  # old roles grant endpoints, not endpointslices
                self.endpoints_v1()
            return
        self.add(_artifact(source.bundle_path, listed.items, listed.source, listed.started_at, listed.duration_ms,
                           listed.note))  # fmt: skip

    def endpoints_v1(self) -> None:
        self.progress("cluster: endpoints")
        core = self.api.core
        self.collect_list(
            ENDPOINTS_V1.bundle_path,
            lambda tok: self.api.json(core.list_endpoints_for_all_namespaces, limit=PAGE_SIZE, _continue=tok),
            ENDPOINTS_V1.path, {}, ENDPOINTS_V1.kind, ENDPOINTS_V1.api_version)

    def pods(self, node: str, note: str = "") -> list[Obj] | None:
        self.progress("cluster: pods")
        core = self.api.core
        selector = f"spec.nodeName={node}"
        listed = self.collect_list(
            "cluster/pods.json",
            lambda tok: self.api.json(core.list_pod_for_all_namespaces, field_selector=selector, limit=PAGE_SIZE,
                                      _continue=tok),
            "/api/v1/pods", {"fieldSelector": selector}, "Pod", "v1", note)
        return listed.items if listed is not None else None

    def daemonsets(self) -> None:
        self.progress("cluster: daemonsets")
        list_ds = self.api.apps.list_daemon_set_for_all_namespaces
        try:
            listed = _list(lambda tok: self.api.json(list_ds, limit=PAGE_SIZE, _continue=tok),
                           "/apis/apps/v1/daemonsets", {}, "DaemonSet", "apps/v1")
        except _CallFailed as e:
            self.skip("cluster/daemonsets.json", e.reason)
            return
        kept = [ds for ds in listed.items if _may_touch_host_iptables(ds)]
        source = (f"{listed.source}; kept {len(kept)} of {len(listed.items)}: kube-proxy, hostNetwork, "
                  "privileged or NET_ADMIN/NET_RAW")
        self.add(_artifact("cluster/daemonsets.json", kept, source, listed.started_at, listed.duration_ms,
                           listed.note))

    def configmap(self) -> None:
        self.progress("cluster: configmaps")
        started_at, t0 = utc_now(), time.monotonic()
        try:
            cm = self.api.json(self.api.core.read_namespaced_config_map, "kube-proxy", "kube-system")
        except _CallFailed as e:
            reason = "no kube-system/kube-proxy ConfigMap" if e.status == 404 else e.reason
            self.skip("cluster/configmaps.json", reason)
            return
        self.add(_artifact("cluster/configmaps.json", [_with_type(cm, "ConfigMap", "v1")],
                           "GET /api/v1/namespaces/kube-system/configmaps/kube-proxy", started_at,
                           int((time.monotonic() - t0) * 1000)))

    def workloads(self, pods: list[Obj]) -> None:
        self.progress("cluster: workloads")
        started_at, t0 = utc_now(), time.monotonic()
        apps, batch = self.api.apps, self.api.batch
        readers: dict[tuple[str, str], Callable[..., Any]] = {
            ("apps", "ReplicaSet"): apps.read_namespaced_replica_set,
            ("apps", "Deployment"): apps.read_namespaced_deployment,
            ("apps", "StatefulSet"): apps.read_namespaced_stateful_set,
            ("apps", "DaemonSet"): apps.read_namespaced_daemon_set,
            ("batch", "Job"): batch.read_namespaced_job,
            ("batch", "CronJob"): batch.read_namespaced_cron_job,
        }
        seen: set[tuple[str, str, str, str]] = set()
        found: list[Obj] = []
        missing: list[str] = []
        failed: list[str] = []
        calls = 0
        frontier = [(_meta(p).get("namespace") or "", _meta(p).get("ownerReferences") or []) for p in pods]
        for _depth in range(MAX_OWNER_DEPTH):
            nxt: list[tuple[str, list[Any]]] = []
            for ns, refs in frontier:
                for ref in refs:
                    if not isinstance(ref, dict):
                        continue
                    group = str(ref.get("apiVersion") or "").partition("/")[0]
                    kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
                    key = (group, kind, ns, name)
                    if (group, kind) not in readers or not name or key in seen:
                        continue
                    seen.add(key)
                    calls += 1
                    try:
                        obj = self.api.json(readers[(group, kind)], name, ns)
                    except _CallFailed as e:
                        if e.status == 404:
                            missing.append(f"{kind} {ns}/{name}")
                        else:
                            failed.append(f"{kind} {ns}/{name}: {e.reason}")
                        continue
                    found.append(obj)
                    nxt.append((ns, _meta(obj).get("ownerReferences") or []))
            frontier = nxt
        if failed and not found:
            self.skip("cluster/workloads.json", "; ".join(failed[:3]) + (f" (and {len(failed) - 3} more)"
                                                                          if len(failed) > 3 else ""))
            return
        notes = []
        if failed:
            notes.append(f"partial: could not read {len(failed)} controllers: " + "; ".join(failed[:3]))
        if missing:
            notes.append("not found (404): " + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""))
        source = (f"GET the controllers of this node's Pods by ownerReferences ({calls} calls: "
                  + "ReplicaSet, Deployment, StatefulSet, DaemonSet, Job, CronJob)")
        self.add(_artifact("cluster/workloads.json", found, source, started_at, int((time.monotonic() - t0) * 1000),
                           "; ".join(notes)))

    def kube_proxy_logs(self, node: str, pods: list[Obj] | None) -> None:
        self.progress("cluster: kube-proxy log")
        if pods is None:
            for path in ("kube-proxy/log.txt", "kube-proxy/log-previous.txt"):
                self.skip(path, "this node's Pods could not be listed, so its kube-proxy Pod is unknown")
            return
        candidates = [p for p in pods if _is_kube_proxy_pod(p)]
        candidates.sort(key=lambda p: (p.get("status") or {}).get("phase") != "Running")  # a running one first
        kp = candidates[0] if candidates else None
        if kp is None:
            for path in ("kube-proxy/log.txt", "kube-proxy/log-previous.txt"):
                self.skip(path, f"no kube-proxy Pod on node {node} (kube-proxy may run as a host service)")
            return
        meta = _meta(kp)
        name, ns = str(meta.get("name")), str(meta.get("namespace") or "kube-system")
        containers = [str(c.get("name")) for c in (kp.get("spec") or {}).get("containers") or []]
        container = "kube-proxy" if "kube-proxy" in containers else (containers[0] if containers else "")
        statuses = (kp.get("status") or {}).get("containerStatuses") or []
        restarts = next((int(s.get("restartCount") or 0) for s in statuses if s.get("name") == container), 0)
        self._log("kube-proxy/log.txt", name, ns, container, previous=False)
        if restarts > 0:
            self._log("kube-proxy/log-previous.txt", name, ns, container, previous=True)
        else:
            self.skip("kube-proxy/log-previous.txt", f"container {container} of Pod {ns}/{name} has not restarted")

    def _log(self, bundle_path: str, pod: str, ns: str, container: str, *, previous: bool) -> None:
        started_at, t0 = utc_now(), time.monotonic()
        params: dict[str, str] = {"container": container, "limitBytes": str(LOG_LIMIT_BYTES)}
        kwargs: dict[str, Any] = {"container": container, "limit_bytes": LOG_LIMIT_BYTES, "timestamps": False}
        if previous:
            params["previous"] = "true"
            kwargs["previous"] = True
        params["timestamps"] = "false"
        try:
            data = self.api.call(self.api.core.read_namespaced_pod_log, pod, ns, read_timeout=LOG_READ_TIMEOUT,
                                 max_bytes=LOG_LIMIT_BYTES, truncate=True, **kwargs)
        except _CallFailed as e:
            self.skip(bundle_path, e.reason)
            return
        note = ""
        if len(data) >= LOG_LIMIT_BYTES:
            note = f"only the first {LOG_LIMIT_BYTES >> 20} MiB of the log (limitBytes): later lines are missing"
        source = _source(f"/api/v1/namespaces/{ns}/pods/{pod}/log", params)
        self.add(Collected(path=bundle_path, data=data, source=source, exit_code=0, started_at=started_at,
                           duration_ms=int((time.monotonic() - t0) * 1000), note=note))


# -- the step ------------------------------------------------------------------------------------------


ARTIFACTS = ("cluster/nodes.json", "cluster/services.json", "cluster/endpointslices.json", "cluster/pods.json",
             "cluster/daemonsets.json", "cluster/configmaps.json", "cluster/workloads.json")
LOG_ARTIFACTS = ("kube-proxy/log.txt", "kube-proxy/log-previous.txt")


def collect_cluster(
    *,
    node_hint: str | None,
    node_addresses: list[str],
    kubeconfig: str | None,
    context: str | None,
    budget: Budget,
    progress: Progress,
    kube_proxy_logs: bool = False,
    into: ClusterCollection | None = None,
) -> ClusterCollection:
    """Read this node's view of the cluster from the API (see the module's docstring). ``into``:
    the collection to fill as it goes (a caller that stops waiting keeps what was read)."""
    out = into if into is not None else ClusterCollection()
    try:
        cfg = load_config(kubeconfig, context)
    except ConfigError as e:
        out.error = f"{e}: cluster objects not collected"
        return out
    cfg.retries = False  # urllib3 must not retry on its own: each call is bounded by one timeout (_Api.call)
    host = str(cfg.host)
    api_client: Any = k8s.ApiClient(cfg)
    api = _Api(api_client, host, budget)
    steps = _Collector(api, progress, out)
    try:
        node = steps.resolve_node(node_hint, node_addresses)
        out.node = str(_meta(node).get("name")) if node is not None else None
        # Nodes unreadable (forbidden, failing), not merely unmatched: select this node's Pods by the
        # name we were given, and say that it is unverified.
        per_node, note = out.node, ""
        if per_node is None and node_hint and steps.nodes_unreadable:
            per_node = node_hint
            note = (f"the Node could not be read ({steps.nodes_unreadable}); Pods selected by "
                    f"spec.nodeName={node_hint}, unverified as this node's name")
        steps.services()
        steps.endpoints()
        pods: list[Obj] | None = None
        if per_node is None:
            why = "this node's Node object was not found (see cluster/nodes.json)"
            steps.skip("cluster/pods.json", why)
            steps.skip("cluster/workloads.json", why)
        else:
            pods = steps.pods(per_node, note)
        steps.daemonsets()
        steps.configmap()
        if per_node is not None:
            if pods is None:
                steps.skip("cluster/workloads.json", "this node's Pods could not be listed")
            else:
                steps.workloads(pods)
        if kube_proxy_logs:
            if per_node is None:
                for path in ("kube-proxy/log.txt", "kube-proxy/log-previous.txt"):
                    steps.skip(path, "this node's Node object was not found, so its kube-proxy Pod is unknown")
            else:
                steps.kube_proxy_logs(per_node, pods)
    except _Fatal as e:
        return ClusterCollection(error=str(e))
    finally:
        api_client.close()
    return out
