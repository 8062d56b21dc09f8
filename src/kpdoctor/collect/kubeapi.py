"""The Kubernetes API, read one way by every part of kpdoctor that reads it: ``collect`` and
``--live`` (collect/cluster.py), the node agent's list-and-watch (agent/cluster.py) and its writes
(agent/node_status.py), and the kubectl plugin.

What is here is what they must all do alike:

- **a client** from a kubeconfig (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``) or the
  Pod's service account, never the client's global default, never writing the file back;
- **bounded exchanges** (:func:`fetch`): an overall deadline per answer (a socket timeout bounds
  each read, not the answer: an API server that accepts and never answers, or trickles a byte a
  second, would hold the caller for ever), an answer larger than a page can be is not read, and
  an error's body is read only as far as its ``Status``;
- **lists in pages** (:func:`pages`): ``limit`` and ``continue`` until the list ends, a list that
  does not end (a repeated ``continue`` token, too many pages) given up;
- **the EndpointSlice version the server serves** (:func:`served_endpoints`): discovery.k8s.io/v1
  (1.21+), else v1beta1 (1.17-1.24), else core Endpoints, the order kube-proxy itself falls back
  in for the releases it supports;
- **reasons in one line** (:func:`api_reason`), and an RBAC denial said as what is missing: who may
  not do what on which resource, and the rule that grants it;
- **objects trimmed** of what no check reads (:func:`trim`), so that a bundle and the agent hold
  the same objects.
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from kpdoctor import deadline, lazy_re

CONNECT_TIMEOUT = 5.0
# One answer read at most: a page of 500 objects is a few MB (an object is at most 1.5 MB in etcd).
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
ERROR_BODY_BYTES = 64 * 1024  # of a non-2xx answer, the Status is all that is wanted
CHUNK_BYTES = 256 * 1024

Obj = dict[str, Any]

# The client's loaders are untyped; these are the signatures used here.
_load_kube_config: Callable[..., None] = k8s_config.load_kube_config
_load_incluster_config: Callable[..., None] = k8s_config.load_incluster_config


class ConfigError(Exception):
    """No usable kubeconfig or service account; the message is one line, without the file's content."""


# -- errors --------------------------------------------------------------------------------------------


def status_body(e: ApiException) -> Obj:
    """The ``Status`` the API server sent with an error, or ``{}``."""
    try:
        body = json.loads(e.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _api_reason_of(e: ApiException, body: Obj) -> str:
    """``forbidden: <the API's message>`` and the like, from a non-2xx answer."""
    message = str(body.get("message") or "").strip()
    if not message and isinstance(e.body, str):
        message = e.body.strip()[:300]
    message = " ".join(message.split()) or str(e.reason or "")
    if e.status == 403:
        missing = missing_permission(message)
        return f"forbidden: {message}" + (f" ({missing})" if missing else "")
    if e.status == 401:
        return f"unauthorized (401): {message}"
    if e.status == 404:
        return f"not found: {message}"
    return f"HTTP {e.status} {body.get('reason') or e.reason or ''}: {message}".replace(" :", ":")


def transport_reason(e: BaseException) -> str:
    """One line for a connection error or timeout (never the request's headers)."""
    if isinstance(e, urllib3.exceptions.MaxRetryError) and e.reason is not None:
        e = e.reason
    if isinstance(e, urllib3.exceptions.ReadTimeoutError):
        return "timed out waiting for the API server's answer"
    if isinstance(e, urllib3.exceptions.NewConnectionError):
        text = str(e)
        cause = text.split(": ", 1)[1] if ": " in text else text
        return f"cannot connect: {cause}"
    if isinstance(e, urllib3.exceptions.ConnectTimeoutError):
        return "timed out connecting to the API server"
    if isinstance(e, ApiException):  # the client's wrapper for TLS errors (status 0)
        return "TLS: " + " ".join(str(e.reason or "").split())
    return " ".join(f"{type(e).__name__}: {e}".split())


# The API server's own wording of an RBAC denial (k8s.io/apiserver's forbidden message): since
# 1.14 `services is forbidden: User "system:serviceaccount:ns:sa" cannot list resource "services"
# in API group "" at the cluster scope` (or `in the namespace "kube-system"`); before it, `User
# "..." cannot list services at the cluster scope` (the core group implied, or `services.apps`);
# `: <reason>` after it when an authorizer gave one.
_FORBIDDEN = lazy_re.compile(
    r'User "(?P<user>[^"]+)" cannot (?P<verb>[\w-]+) (?:resource "(?P<resource>[^"]+)"|(?P<bare>[\w./-]+))'
    r'(?: in API group "(?P<group>[^"]*)")?'
    r'(?: in the namespace "(?P<namespace>[^"]+)"| at the cluster scope)?'
)


def missing_permission(message: str) -> str | None:
    """What an RBAC denial's message says is missing, as the rule that would grant it; None when
    the message is not one."""
    m = _FORBIDDEN.search(message)
    if m is None:
        return None
    resource, group_name = m["resource"], m["group"] or ""
    if resource is None:  # the older wording: resource.group, the group left out for the core one
        resource, _, group_name = m["bare"].partition(".")
    group = json.dumps(group_name)
    if m["namespace"]:
        where = f"a Role in namespace {m['namespace']} (and a RoleBinding)"
    else:
        where = "a ClusterRole (and a ClusterRoleBinding)"
    return (f"RBAC: {m['user']} needs {where} with the rule apiGroups: [{group}], resources: [{resource}], "
            f"verbs: [{m['verb']}]")  # fmt: skip


def reason(e: BaseException) -> str:
    """One line for any failure of an exchange: the API's answer (:func:`api_reason`), a deadline
    or size bound passed, else the exception's type and text."""
    if isinstance(e, ApiException):
        return api_reason(e)
    if isinstance(e, (Unanswered, TooLarge)):
        return str(e)
    return " ".join(f"{type(e).__name__}: {e}".split())[:300]


def api_reason(e: ApiException) -> str:
    """One line for a non-2xx answer: ``forbidden: <what RBAC denies and how to grant it>``,
    ``not found: ...``, ``HTTP 500 InternalError: ...`` (the API's own message)."""
    return _api_reason_of(e, status_body(e))


# -- one exchange, bounded ------------------------------------------------------------------------------


class Unanswered(Exception):
    """No complete answer within the call's overall deadline (a hung or trickling API server)."""


class TooLarge(Exception):
    """The answer is larger than the caller reads."""


def bounded_connections(api_client: Any) -> Any:
    """Make ``api_client``'s calls answer to :func:`kpdoctor.deadline.bounded` (each new socket,
    and each kept-alive one when it waits for an answer, is handed to
    :func:`~kpdoctor.deadline.guard`), and read at most :data:`ERROR_BODY_BYTES` of a non-2xx
    answer (the client would read it whole, however large); returns it. Idempotent."""
    if getattr(api_client, "_kpdoctor_bounded", False):
        return api_client
    pm = api_client.rest_client.pool_manager
    pm.pool_classes_by_scheme = {k: _bounded_pool(v) for k, v in pm.pool_classes_by_scheme.items()}
    call_api = api_client.call_api

    def capped(*args: Any, **kwargs: Any) -> Any:
        resp = call_api(*args, **kwargs)
        if not 200 <= int(resp.status) <= 299 and resp.data is None:
            resp.data = _read_capped(resp.response, ERROR_BODY_BYTES)  # what the client's read() returns
        return resp

    api_client.call_api = capped
    api_client._kpdoctor_bounded = True
    return api_client


_BOUNDED: dict[type, type] = {}


def _bounded_pool(pool_cls: type) -> type:
    if getattr(pool_cls, "_kpdoctor_bounded", False):
        return pool_cls
    if pool_cls in _BOUNDED:
        return _BOUNDED[pool_cls]
    conn_cls: Any = pool_cls.ConnectionCls  # type: ignore[attr-defined]

    def _new_conn(self: Any) -> Any:
        sock = conn_cls._new_conn(self)
        deadline.guard(sock)
        return sock

    def getresponse(self: Any) -> Any:
        if self.sock is not None:
            deadline.guard(self.sock)
        return conn_cls.getresponse(self)

    conn = type(f"Bounded{conn_cls.__name__}", (conn_cls,), {"_new_conn": _new_conn, "getresponse": getresponse})
    pool = type(f"Bounded{pool_cls.__name__}", (pool_cls,), {"ConnectionCls": conn, "_kpdoctor_bounded": True})
    _BOUNDED[pool_cls] = pool
    return pool


def _read_capped(resp: Any, limit: int) -> bytes:
    """The first ``limit`` bytes of a raw answer; the connection is dropped if more was sent."""
    chunks: list[bytes] = []
    size = 0
    complete = False
    try:
        while size < limit:
            chunk = resp.read(min(CHUNK_BYTES, limit - size))
            if not chunk:
                complete = True
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        if not complete:
            resp.close()
        resp.release_conn()
    return b"".join(chunks)


def fetch(fn: Callable[..., Any], *args: Any, seconds: float, max_bytes: int = MAX_RESPONSE_BYTES,
          truncate: bool = False, **kwargs: Any) -> bytes:
    """The body of ``fn(*args, **kwargs)`` (a client method of a :func:`bounded_connections`
    client, called for its raw answer), read whole within ``seconds`` from now, connecting
    included. Raises :class:`Unanswered` past the deadline, :class:`TooLarge` for a body above
    ``max_bytes`` (``truncate``: its first ``max_bytes`` are returned instead),
    ``ApiException`` with the API's Status for a non-2xx answer, and urllib3's and the socket's
    own errors for a connection that fails."""
    timeout = (max(0.05, min(CONNECT_TIMEOUT, seconds)), max(0.05, seconds))
    with deadline.bounded(seconds) as bound:
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
            return read_body(resp, bound, max_bytes, truncate=truncate)
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError, ApiException):
            if bound.expired:
                raise Unanswered(f"no complete answer within {round(seconds, 1):g}s") from None
            raise


def raw_get(client: Any, path: str, query: list[tuple[str, str]], request_timeout: Any) -> Any:
    """``GET path`` through an ``ApiClient``, for its raw answer: a path the generated client has
    no method for (an older API version, group discovery); a non-2xx answer raises
    ``ApiException`` with the server's Status."""
    method, url, headers, body, post = client.param_serialize(
        method="GET",
        resource_path=path,
        query_params=query,
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    resp = client.call_api(method, url, header_params=headers, body=body, post_params=post,
                           _request_timeout=request_timeout)  # fmt: skip
    if not 200 <= resp.status <= 299:
        resp.read()
        raise ApiException.from_response(http_resp=resp, body=None, data=None)
    return resp.response


def read_body(resp: Any, bound: deadline.Bound, limit: int, *, truncate: bool = False) -> bytes:
    """A raw response's body in chunks, at most ``limit`` bytes; the connection goes back to the
    pool only when the body was read whole."""
    declared = str((getattr(resp, "headers", None) or {}).get("Content-Length") or "")
    complete = False
    chunks: list[bytes] = []
    size = 0
    try:
        if not truncate and declared.isdigit() and int(declared) > limit:
            raise TooLarge(f"the API server's answer is {int(declared) >> 20} MiB, more than the "
                           f"{limit >> 20} MiB read: not read")
        while not bound.expired:
            chunk = resp.read(CHUNK_BYTES)
            if not chunk:
                complete = True
                break
            size += len(chunk)
            if size > limit:
                if truncate:
                    chunks.append(chunk[: len(chunk) - (size - limit)])
                    break
                raise TooLarge(f"the API server's answer is more than the {limit >> 20} MiB read: not read")
            chunks.append(chunk)
        if bound.expired:
            raise urllib3.exceptions.ReadTimeoutError(None, "", "overall deadline")  # type: ignore[arg-type]
        return b"".join(chunks)
    finally:
        if not complete:
            resp.close()
        release = getattr(resp, "release_conn", None)
        if release is not None:
            release()


def trim(obj: Obj, kind: str | None = None) -> Obj:
    """``obj`` (of ``kind``, else its own) without what the API adds that no check reads; changed
    in place. Every kind loses ``metadata.managedFields`` (often half of an object), ``selfLink``
    and kubectl's last-applied copy of the object (an annotation). The kinds a cluster holds by
    the hundred thousand keep, of their metadata, only what the checks read (name, namespace,
    resourceVersion, labels, annotations: not uid, creationTimestamp, generation, ownerReferences),
    and an EndpointSlice's endpoints lose their ``targetRef`` (which Pod: no check reads it).
    Nodes, Pods and workloads keep the rest of their metadata (uid, ownerReferences and
    creationTimestamp are read: facts/workloads.py, the agent's Events)."""
    kind = kind or str(obj.get("kind") or "")
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        if kind in _BULK_KINDS:
            for k in [k for k in meta if k not in _BULK_META]:
                del meta[k]
        else:
            meta.pop("managedFields", None)
            meta.pop("selfLink", None)
        notes = meta.get("annotations")
        if isinstance(notes, dict):
            notes.pop(LAST_APPLIED, None)
    if kind == "EndpointSlice" and isinstance(obj.get("endpoints"), list):
        for ep in obj["endpoints"]:
            if isinstance(ep, dict):
                ep.pop("targetRef", None)
    return obj


_BULK_KINDS = frozenset({"Service", "EndpointSlice", "Endpoints"})
_BULK_META = frozenset({"name", "namespace", "resourceVersion", "labels", "annotations"})
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"



def load_config(kubeconfig: str | None, context: str | None) -> Any:
    """A fresh client ``Configuration`` (never the global default), from a kubeconfig or in-cluster."""
    cfg = k8s.Configuration()
    if kubeconfig:
        if not Path(kubeconfig).expanduser().is_file():
            raise ConfigError(f"kubeconfig {kubeconfig} not found")
        source = kubeconfig
    else:
        env = os.environ.get("KUBECONFIG", "")
        paths = [p for p in env.split(os.pathsep) if p]
        default = Path("~/.kube/config").expanduser()
        if any(Path(p).expanduser().is_file() for p in paths):
            source = env
        elif not paths and default.is_file():
            source = str(default)
        else:
            looked = f"$KUBECONFIG={env}" if paths else "~/.kube/config"
            try:
                _load_incluster_config(client_configuration=cfg)
            except k8s_config.ConfigException:
                raise ConfigError(f"no kubeconfig ({looked} not found) and not in a Pod"
                             ) from None
            return cfg
    try:
        _load_kube_config(config_file=source, context=context, client_configuration=cfg,
                                    persist_config=False)
    except Exception as e:  # ConfigException, YAML errors, exec plugins failing: all one line for the report
        msg = _config_error(e)
        raise ConfigError(f"kubeconfig {source}: {msg}") from None
    return cfg


def api_client(kubeconfig: str | None, context: str | None) -> Any:
    """A client of the cluster's API (kubeconfig, or the Pod's service account), for a caller that
    keeps it (the node agent); raises ``ValueError`` with one line saying why there is none."""
    try:
        cfg = load_config(kubeconfig, context)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    return k8s.ApiClient(cfg)


def _config_error(e: Exception) -> str:
    """One line about a kubeconfig that would not load, without quoting the file (it holds credentials)."""
    if isinstance(e, yaml.MarkedYAMLError):
        where = f" at line {e.problem_mark.line + 1}, column {e.problem_mark.column + 1}" if e.problem_mark else ""
        return f"not valid YAML ({e.problem or e.context or type(e).__name__}{where})"
    if isinstance(e, yaml.YAMLError):
        return f"not valid YAML ({type(e).__name__})"
    return " ".join(str(e).split())[:300]



# -- what the server serves, and lists in pages ----------------------------------------------------------


@dataclass(frozen=True)
class EndpointsSource:
    """Where a node's endpoints are read from on this server."""

    bundle_path: str  # cluster/endpointslices.json or cluster/endpoints.json
    kind: str  # EndpointSlice or Endpoints
    api_version: str  # discovery.k8s.io/v1, discovery.k8s.io/v1beta1 or v1
    path: str  # the list's path, all namespaces

    @property
    def slices(self) -> bool:
        return self.kind == "EndpointSlice"


SLICES_V1 = EndpointsSource("cluster/endpointslices.json", "EndpointSlice", "discovery.k8s.io/v1",
                            "/apis/discovery.k8s.io/v1/endpointslices")  # fmt: skip
SLICES_V1BETA1 = EndpointsSource("cluster/endpointslices.json", "EndpointSlice", "discovery.k8s.io/v1beta1",
                                 "/apis/discovery.k8s.io/v1beta1/endpointslices")  # fmt: skip
ENDPOINTS_V1 = EndpointsSource("cluster/endpoints.json", "Endpoints", "v1", "/api/v1/endpoints")


def served_endpoints(group: Obj | None) -> EndpointsSource:
    """The source of endpoints a server serves, from its discovery document of the group
    discovery.k8s.io (``GET /apis/discovery.k8s.io``; None when that answered 404): v1, else
    v1beta1, else core Endpoints, as kube-proxy falls back."""
    versions = (group or {}).get("versions") or []
    served = {v.get("version") for v in versions if isinstance(v, dict)}
    if "v1" in served:
        return SLICES_V1
    if "v1beta1" in served:
        return SLICES_V1BETA1
    return ENDPOINTS_V1


class ListNeverEnds(Exception):
    """A list whose pages do not end: too many of them, or a ``continue`` token given twice."""


def pages(page: Callable[[str | None], Obj], max_pages: int) -> Iterator[Obj]:
    """The pages of a chunked list: ``page(continue_token)`` (None first) until a page has no
    ``continue``. Raises :class:`ListNeverEnds` past ``max_pages`` or at a token given twice;
    what ``page`` raises (an expired token's 410 among it) is the caller's."""
    token: str | None = None
    seen: set[str] = set()
    for _ in range(max_pages):
        body = page(token)
        yield body
        meta = body.get("metadata") if isinstance(body, dict) else None
        token = str((meta or {}).get("continue") or "") or None
        if token is None:
            return
        if token in seen:
            raise ListNeverEnds("the API server gave the same continue token twice: the list would not end")
        seen.add(token)
    raise ListNeverEnds(f"the list did not end after {max_pages} pages")
