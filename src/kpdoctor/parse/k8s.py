"""Kubernetes objects from JSON or YAML: single objects, ``kind: List``, ``*List``, multi-doc YAML.

The cluster's view (Services, EndpointSlices, Nodes, Pods with status, DaemonSets, ConfigMaps)
is what the node's state is judged against. Evidence is untrusted: text is read through
:mod:`kpdoctor.parse.structured` (bounded nesting and numbers), an object the API server would
never have returned (a port of -1, a clusterIP that is no address, a null endpoint address) is
reported with its file and line, and an object given twice is kept once.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kpdoctor import lazy_re
from kpdoctor.parse.diagnostics import Diagnostic
from kpdoctor.parse.structured import StructuredError, load_json, load_yaml_all, strip_bom

_share_values: Callable[[list[Any], bool], int] | None
_load_json: Callable[[str], tuple[Any] | None] | None
_CoreNameLines: Callable[[str], Any] | None
_slice_address_problems: Callable[[object, int | None, Callable[[object, int], bool]], list[tuple[int, int]]] | None
try:  # the native core makes the equal values of read objects one object (rust/src/share.rs)
    from kpdoctor._core import NameLines as _CoreNameLines
    from kpdoctor._core import load_json as _load_json
    from kpdoctor._core import share_values as _share_values
    from kpdoctor._core import slice_address_problems as _slice_address_problems
except ImportError:
    _share_values = _load_json = _CoreNameLines = _slice_address_problems = None

# The alphabet of the API server's generated name suffixes (no vowels, no 0/1/3: apimachinery's
# rand.String), as in a Deployment's Pod name-<ReplicaSet hash>-<5 of them>
GENERATED = "[bcdfghjklmnpqrstvwxz2456789]"
_REPLICA = lazy_re.compile(rf"^(?P<template>[a-z0-9][-a-z0-9.]*-{GENERATED}{{6,10}})-{GENERATED}{{5}}$")


def pod_template(name: str) -> str | None:
    """The ReplicaSet a Deployment's Pod was made from, by its name (``web-7d9c8b6f4-x2kqz`` ->
    ``web-7d9c8b6f4``): Pods of one ReplicaSet run the same containers. None for other names."""
    m = _REPLICA.match(name)
    return m.group("template") if m else None


PROTOCOLS = ("TCP", "UDP", "SCTP")  # what kube-proxy programs
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # an EndpointSlice's Service


@dataclass(frozen=True, slots=True)
class K8sObject:
    kind: str
    api_version: str
    namespace: str | None
    name: str
    body: dict[str, Any]
    artifact: str
    line: int | None  # best-effort line of the object's name in the user's file
    # a YAML fragment without apiVersion/kind read as a partial Pod ("a `lifecycle:` block"):
    # what it leaves out is unknown, not unset
    fragment: str = ""

    @property
    def ref(self) -> str:
        if self.fragment and not self.name:
            return f"{self.fragment} in {self.artifact}"
        ns = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind}/{ns}{self.name}"

    @property
    def where(self) -> str:
        """``file line N``: where the user finds it."""
        return f"{self.artifact} line {self.line}" if self.line else self.artifact


@dataclass(frozen=True, slots=True)
class ObjectDiagnostic(Diagnostic):
    """A diagnostic that names its file: objects of several files are merged, and a line number
    alone would not tell the user where to look."""

    artifact: str = ""

    def __str__(self) -> str:
        if not self.artifact:
            return Diagnostic.__str__(self)
        where = f"{self.artifact} line {self.line}" if self.line else self.artifact
        return f"{where}: {self.message}"


@dataclass(slots=True)
class Objects:
    items: list[K8sObject] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def of(self, kind: str) -> list[K8sObject]:
        return [o for o in self.items if o.kind == kind]


def as_dict(v: object) -> dict[str, Any]:
    """``v`` when it is a mapping, else an empty one (a field of the wrong type reads as absent)."""
    return v if isinstance(v, dict) else {}


def as_list(v: object) -> list[Any]:
    """``v`` when it is a list, else an empty one."""
    return v if isinstance(v, list) else []


def port_value(v: object) -> int | None:
    """A Kubernetes port number (an integer 1-65535), or None: JSON may hold -1, 10**12, "http",
    true or null there, and none of them is a port."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536 else None


def port_problem(v: object, what: str = "port") -> str | None:
    """Why ``v`` is not a port number, or None when it is one."""
    if port_value(v) is not None:
        return None
    if v is None:
        return f"has no {what} number"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{what} {shown(v)} is out of range (1-65535)"
    return f"{what} {shown(v)} is not a number"


def protocol_problem(v: object) -> str | None:
    """Why ``v`` is not a protocol kube-proxy programs, or None (absent means TCP)."""
    if v is None or (isinstance(v, str) and v in PROTOCOLS):
        return None
    return f"protocol {shown(v)} is not one kube-proxy programs ({', '.join(PROTOCOLS)})"


def is_ip(v: object, version: int | None = None) -> bool:
    """Is ``v`` a single IP address (of ``version``, when given)? (``inet_pton``: a cluster's
    50,000 endpoint addresses are checked in milliseconds, where ``ipaddress`` takes a second.)"""
    if not isinstance(v, str) or not v or len(v) > 45:
        return False
    six = ":" in v
    try:
        socket.inet_pton(socket.AF_INET6 if six else socket.AF_INET, v)
    except (OSError, ValueError):
        return False
    return version is None or version == (6 if six else 4)


def list_item_kind(kind: object) -> str | None:
    """The kind of the items of a ``kind: FooList`` (kubectl leaves it out of each item)."""
    return kind[:-4] if isinstance(kind, str) and kind.endswith("List") and kind != "List" else None


@dataclass(slots=True)
class _Skipped:
    """What the flattening left out, for the diagnostic that says why a file gave nothing."""

    null_items: int = 0
    no_kind: int = 0
    not_objects: int = 0


_CONTAINER_KEYS = frozenset(
    {"image", "command", "args", "lifecycle", "ports", "readinessProbe", "livenessProbe", "env"}
)
_POD_SPEC_KEYS = frozenset({"containers", "initContainers", "terminationGracePeriodSeconds", "volumes", "hostNetwork"})


def _container_like(v: object) -> bool:
    return isinstance(v, dict) and bool(_CONTAINER_KEYS & v.keys()) and "kind" not in v


def fragment_of(doc: object) -> tuple[dict[str, Any], str] | None:
    """A YAML fragment without apiVersion/kind that is part of a Pod spec, as a partial Pod (and
    what it was): a ``containers:`` list, a list of containers, one container, a ``lifecycle:`` or
    ``preStop:`` block, a Pod ``spec:`` or a ``template:``. Keys it leaves out stay out: unknown,
    never read as unset (see facts.workloads.is_fragment). None for anything else."""
    if isinstance(doc, list):
        if doc and all(_container_like(c) for c in doc):
            return {"kind": "Pod", "metadata": {}, "spec": {"containers": doc}}, "a list of containers"
        return None
    if not isinstance(doc, dict) or doc.get("kind") or doc.get("apiVersion"):
        return None
    meta = as_dict(doc.get("metadata"))
    spec = doc.get("spec")
    template = doc.get("template")
    if isinstance(spec, dict) and isinstance(spec.get("template"), dict):
        template = spec["template"]
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        tmeta = as_dict(template.get("metadata"))
        return _partial_pod(template["spec"], tmeta), "a Pod template"
    if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
        return _partial_pod(spec, meta), "a Pod `spec:`"
    if isinstance(doc.get("containers"), list) and all(_container_like(c) for c in doc["containers"]):
        pod_spec = {k: v for k, v in doc.items() if k in _POD_SPEC_KEYS}
        return _partial_pod(pod_spec, meta), "a `containers:` list"
    if isinstance(doc.get("lifecycle"), dict) and set(doc["lifecycle"]) & {"preStop", "postStart"}:
        container = {k: v for k, v in doc.items() if k in _CONTAINER_KEYS or k == "name"}
        return _partial_pod({"containers": [container]}, {}), "a `lifecycle:` block"
    if isinstance(doc.get("preStop"), dict):
        return _partial_pod({"containers": [{"lifecycle": {"preStop": doc["preStop"]}}]}, {}), "a `preStop:` block"
    if _container_like(doc) and ("name" in doc or "image" in doc):
        return _partial_pod({"containers": [doc]}, {}), "a container"
    return None


_FRAGMENT_HINT = lazy_re.compile(
    r"^[ \t]*(?:-[ \t]+)?(?:containers|lifecycle|preStop|spec|template|name|image|command):", re.M
)


def fragment_in(text: str) -> str | None:
    """What part of a Pod spec a YAML text without apiVersion/kind is (``a `lifecycle:` block``),
    or None when it is none (or not YAML)."""
    if len(text) > 1024**2 or not _FRAGMENT_HINT.search(text[:65536]):
        return None
    if re.search(r"^(?:apiVersion|kind):", text, re.M):
        return None
    try:
        docs = load_yaml_all(text)
    except StructuredError:
        return None
    for d in docs:
        frag = fragment_of(d)
        if frag is not None:
            return frag[1]
    return None


def _partial_pod(spec: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    labels = meta.get("labels")
    metadata = {"labels": labels} if isinstance(labels, dict) else {}
    return {"kind": "Pod", "metadata": metadata, "spec": spec}


WATCH_EVENTS = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")


def _flatten(doc: Any, out: list[dict[str, Any]], skipped: _Skipped, fragments: dict[int, str] | None = None) -> None:
    if isinstance(doc, list):
        frag = fragment_of(doc) if fragments is not None else None
        if frag is not None and fragments is not None:
            fragments[id(frag[0])] = frag[1]
            out.append(frag[0])
            return
        for d in doc:
            _flatten(d, out, skipped)
        return
    if not isinstance(doc, dict):
        if doc is not None:
            skipped.not_objects += 1
        return
    if doc.get("type") in WATCH_EVENTS and isinstance(doc.get("object"), dict) and "kind" not in doc:
        _flatten(doc["object"], out, skipped)  # a watch event: the object as it was then
        return
    items = doc.get("items")
    kind = doc.get("kind")
    if "items" in doc and items is None and (kind is None or (isinstance(kind, str) and kind.endswith("List"))):
        skipped.null_items += 1
        return
    if isinstance(items, list) and (kind is None or (isinstance(kind, str) and kind.endswith("List"))):
        item_kind = list_item_kind(kind)
        for it in items:
            if isinstance(it, dict) and item_kind and "kind" not in it:
                it = {**it, "kind": item_kind}
            _flatten(it, out, skipped)
        return
    if isinstance(kind, str) and kind:
        out.append(doc)
        return
    frag = fragment_of(doc) if fragments is not None else None
    if frag is not None and fragments is not None:
        fragments[id(frag[0])] = frag[1]
        out.append(frag[0])
    else:
        skipped.no_kind += 1


_NAME_JSON = lazy_re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_NAME_YAML = lazy_re.compile(r"^[ \t]*name:\s*['\"]?([^'\"\n]*?)['\"]?\s*$", re.M)


class _NameLines:
    """Line numbers of ``name`` fields, found in one pass, handed out in document order (so a
    list of 20,000 objects is located in linear time)."""

    def __init__(self, text: str, json_like: bool) -> None:
        self.text = text
        self.where: dict[str, list[int]] = {}
        for m in (_NAME_JSON if json_like else _NAME_YAML).finditer(text):
            self.where.setdefault(m.group(1), []).append(m.start())
        self.pos = 0
        self.line = 1
        self.line_pos = 0

    def next(self, name: str) -> int | None:
        offsets = self.where.get(name)
        if not offsets:
            return None
        i = bisect.bisect_left(offsets, self.pos)
        if i == len(offsets):
            return None
        off = offsets[i]
        self.line += self.text.count("\n", self.line_pos, off)
        self.line_pos = off
        self.pos = off + 1
        return self.line


# The structure checks walk, and the type each part must have. A part of another type (a `spec`
# that is a string, `containers` that is a mapping) is read as absent, with a diagnostic, so no
# check meets a string where it walks a mapping. A list's shape applies to each of its items.
_Shape = dict[str, "type | _Shape | list[_Shape]"]
_META: _Shape = {"labels": dict, "annotations": dict, "ownerReferences": [{}]}
_CONTAINER: _Shape = {"command": list, "args": list, "env": [{}], "ports": [{}], "lifecycle": dict}
_POD_SPEC: _Shape = {"containers": [_CONTAINER], "initContainers": [_CONTAINER], "volumes": [{}]}
_SHAPE: _Shape = {
    "metadata": _META,
    "spec": {
        **_POD_SPEC,
        "selector": dict,  # (a Service's ports are checked one by one: _service_problems)
        "template": {"metadata": _META, "spec": _POD_SPEC},
    },
    "status": {"addresses": [{}], "conditions": [{}], "containerStatuses": [{}], "nodeInfo": dict},
    "data": dict,
}


def _well_formed(body: dict[str, Any], shape: _Shape, where: str, problems: list[str]) -> dict[str, Any]:
    """``body`` without the parts that do not have the type ``shape`` gives them (see _SHAPE):
    ``body`` itself when every part has, else a copy (a read value may be shared by several
    objects, and is never changed in place)."""
    out = body
    for key, want in shape.items():
        value: Any = body.get(key)
        if value is None:
            continue
        kind: type = dict if isinstance(want, dict) else list if isinstance(want, list) else want
        fixed: Any = value
        if not isinstance(value, kind):
            problems.append(f"{where}{key} is {type(value).__name__}, not {kind.__name__}: read as absent")
            fixed = None
        elif isinstance(want, dict) and isinstance(value, dict):
            fixed = _well_formed(value, want, f"{where}{key}.", problems)
        elif isinstance(want, list) and isinstance(value, list):
            kept = [v for v in value if isinstance(v, dict)]
            if len(kept) != len(value):
                problems.append(f"{where}{key} has {len(value) - len(kept)} item(s) that are not objects: skipped")
            items = [_well_formed(item, want[0], f"{where}{key}[].", problems) for item in kept]
            if len(items) != len(value) or any(a is not b for a, b in zip(items, value, strict=True)):
                fixed = items
        if fixed is not value:
            if out is body:
                out = dict(body)
            if fixed is None:
                del out[key]
            else:
                out[key] = fixed
    return out


def parse_objects(
    text: str, artifact: str, first_line: int = 1, kind: str | None = None, name: str | None = None
) -> Objects:
    """Parse every Kubernetes object in a JSON or YAML text; never raises.

    ``kind``: what the command that printed the text asked for (`kubectl get endpointslices X -o
    yaml`), given to a top-level object whose `kind` was cut off the paste (kubectl prints keys in
    alphabetical order: an excerpt often ends before `kind:`); ``name``: the one object it named
    (`X`), given to the text's only object when its `metadata:` was cut off too.

    Each object kpdoctor judges the node by (Service, EndpointSlice, Endpoints, Node) is checked
    for what the API server would have refused, one diagnostic per problem; an identical copy of
    an object is kept once, a conflicting one is reported (see :func:`unique`)."""
    out = Objects()
    text = strip_bom(text)
    docs: list[Any] = []
    stripped = text.lstrip()
    json_like = stripped.startswith(("{", "["))

    def diag(line: int | None, message: str) -> None:
        out.diagnostics.append(ObjectDiagnostic(line, message, artifact))

    shared = False
    if json_like:
        try:
            got = _load_json(text) if _load_json is not None else None
            shared = got is not None
            docs = [got[0] if got is not None else load_json(text)]
        except StructuredError as exc:
            if "Extra data" in str(exc):
                # kubectl cluster-info dump concatenates JSON documents: read them one by one.
                docs = _json_stream(text, diag, first_line)
            else:
                diag(None if exc.line is None else exc.line + first_line - 1, str(exc))
    else:
        try:
            docs = load_yaml_all(text)
        except StructuredError as exc:
            diag(None if exc.line is None else exc.line + first_line - 1, str(exc))
    flat: list[dict[str, Any]] = []
    skipped = _Skipped()
    fragments: dict[int, str] = {}  # id(body) -> what the fragment was (top-level documents only)
    for d in docs:
        if kind and isinstance(d, dict) and "kind" not in d and "apiVersion" in d:
            d = {**d, "kind": kind}
        if name and len(docs) == 1 and isinstance(d, dict) and d.get("kind") == kind and "apiVersion" in d:
            meta = d.get("metadata")
            if meta is None or (isinstance(meta, dict) and "name" not in meta):
                d = {**d, "metadata": {**(meta or {}), "name": name}}
        _flatten(d, flat, skipped, fragments)
    # (the core finds a JSON text's name fields as _NameLines does, in a tenth of its time)
    lines = _CoreNameLines(text) if json_like and _CoreNameLines is not None else _NameLines(text, json_like)
    items: list[K8sObject] = []
    for i, d in enumerate(flat, 1):
        meta = as_dict(d.get("metadata"))
        raw_name, raw_ns = meta.get("name"), meta.get("namespace")
        name = raw_name if isinstance(raw_name, str) else ""
        line = lines.next(name) if name else None
        obj = K8sObject(
            str(d.get("kind")),
            str(d.get("apiVersion") or ""),
            raw_ns if isinstance(raw_ns, str) and raw_ns else None,
            name,
            d,
            artifact,
            None if line is None else line + first_line - 1,
            fragments.get(id(d), ""),
        )
        if obj.fragment and obj.line is None:  # cited at its first line
            obj = dataclasses.replace(obj, line=first_line + text[: len(text) - len(text.lstrip())].count("\n"))
        if not name and not obj.fragment:  # kept (its addresses are still someone's), but never verified as a Service
            unused = ": not verified" if obj.kind == "Service" else ""
            diag(None, f"{obj.kind} without metadata.name (object {i} of the file){unused}")
        shape_problems: list[str] = []
        if (fixed := _well_formed(d, _SHAPE, "", shape_problems)) is not d:
            obj = dataclasses.replace(obj, body=fixed)
        for problem in shape_problems[:5]:
            diag(obj.line, f"{obj.kind} {_ref(obj)}: {problem}")
        items.append(obj)
    if skipped.null_items or skipped.no_kind or skipped.not_objects:
        why = [
            *(["`items` is null"] if skipped.null_items else []),
            *([f"{skipped.no_kind} item(s) without `kind`"] if skipped.no_kind else []),
            *([f"{skipped.not_objects} item(s) that are not objects"] if skipped.not_objects else []),
        ]
        held = "no usable Kubernetes object" if not flat else f"{len(flat)} usable Kubernetes object(s)"
        diag(None, f"the file held {held}: {', '.join(why)}")
    out.items = unique(items, out.diagnostics)
    for obj in out.items:
        for problem in object_problems(obj):
            diag(obj.line, f"{obj.kind} {_ref(obj)}: {problem}")
    if not shared:
        share([o.body for o in out.items], aliased=not json_like)
    return out


def load_shared(data: bytes) -> tuple[Any, bool]:
    """``json.loads(data)`` (its errors too), and whether its equal values are one object
    already: read by the native core, which makes no copy of a value it has read before."""
    if _load_json is not None:
        text = data.decode(json.detect_encoding(data), "surrogatepass")
        got = _load_json(text)
        if got is not None:
            return got[0], True
        return json.loads(text), False
    return json.loads(data), False


def share(bodies: list[Any], aliased: bool = False) -> None:
    """Make the equal values of read objects one object, when the native core loads: a large
    cluster's EndpointSlices repeat the same conditions, ports, node names and API versions
    hundreds of thousands of times, each a new object as parsed (a third of their memory). The
    objects are read-only from here on: a shared value is in several of them. ``aliased``: one
    container may be in several places (YAML's anchors), walked once."""
    if _share_values is not None and bodies:
        _share_values(bodies, aliased)


def read_object(d: dict[str, Any], artifact: str, line: int | None) -> tuple[K8sObject, list[str]]:
    """One object (as a GET or a watch gives it, with ``kind``) as :func:`parse_objects` reads it,
    and what the API server would have refused in it: for a source that keeps its objects parsed
    from one run to the next (the node agent's watches), and parses only the ones that changed."""
    meta = as_dict(d.get("metadata"))
    raw_name, raw_ns = meta.get("name"), meta.get("namespace")
    obj = K8sObject(
        str(d.get("kind")),
        str(d.get("apiVersion") or ""),
        raw_ns if isinstance(raw_ns, str) and raw_ns else None,
        raw_name if isinstance(raw_name, str) else "",
        d,
        artifact,
        line,
    )
    problems: list[str] = []
    if (fixed := _well_formed(d, _SHAPE, "", problems)) is not d:
        obj = dataclasses.replace(obj, body=fixed)
    return obj, problems[:5] + object_problems(obj)


def merge(parts: Iterable[Objects]) -> Objects:
    """The objects of several files as one set: each object once (see :func:`unique`)."""
    out = Objects()
    items: list[K8sObject] = []
    for p in parts:
        items.extend(p.items)
        out.diagnostics.extend(p.diagnostics)
    out.items = unique(items, out.diagnostics)
    return out


def _ref(obj: K8sObject) -> str:
    return f"{obj.namespace}/{obj.name}" if obj.namespace else obj.name


def _resource_version(obj: K8sObject) -> int | None:
    rv = as_dict(obj.body.get("metadata")).get("resourceVersion")
    return int(rv) if isinstance(rv, str) and rv.isascii() and rv.isdigit() and len(rv) < 30 else None


# What makes two copies of an object tell a different story, per kind (other kinds: any copy).
_STORIES: dict[str, Callable[[dict[str, Any]], object]] = {
    "Service": lambda b: as_dict(b.get("spec")),
    "EndpointSlice": lambda b: (b.get("addressType"), b.get("endpoints"), b.get("ports")),
    "Endpoints": lambda b: b.get("subsets"),
    "Node": lambda b: (
        as_dict(b.get("status")).get("addresses"),
        as_dict(b.get("spec")).get("podCIDRs"),
        as_dict(b.get("spec")).get("podCIDR"),
    ),
}


def _difference(kind: str, a: dict[str, Any], b: dict[str, Any]) -> str | None:
    story = _STORIES.get(kind)
    if story is None or story(a) == story(b):
        return None
    if kind == "Service":
        sa, sb = as_dict(a.get("spec")), as_dict(b.get("spec"))
        ia = sa.get("clusterIPs") or sa.get("clusterIP")
        ib = sb.get("clusterIPs") or sb.get("clusterIP")
        if ia != ib:
            return f"clusterIP {shown(ia)} vs {shown(ib)}"
        return "spec"
    return {"EndpointSlice": "endpoints", "Endpoints": "subsets", "Node": "addresses"}[kind]


def shown(v: object) -> str:
    """A value from the evidence as the user would find it in the file (quoted), bounded."""
    if isinstance(v, list):
        return shown(v[0]) if len(v) == 1 else f"a list of {len(v)}"
    if isinstance(v, dict):
        return "an object"
    try:
        text = json.dumps(v)
    except ValueError:  # an integer of thousands of digits, from YAML
        text = "a number too large to show"
    return text if len(text) <= 60 else text[:57] + "..."


def unique(items: list[K8sObject], diagnostics: list[Diagnostic]) -> list[K8sObject]:
    """Each object once, in first-seen order. The same object twice (a bundle's file and a
    ``kubectl get`` of the same cluster, or a List that repeats an item) is one object: verifying
    it twice would count it twice, and two Nodes of one name would hide the node's addresses. Two
    copies that differ keep the newer (higher resourceVersion, else the first given); when they
    differ in what kpdoctor verifies (a Service's clusterIP or ports, a slice's endpoints, a
    Node's addresses) the user is told, and the other copy is not verified as a Service of its own."""
    seen: dict[tuple[str, str | None, str], int] = {}
    keep: list[K8sObject] = []
    for o in items:
        key = (o.kind, o.namespace, o.name)
        i = seen.get(key) if o.name else -1  # nameless objects: each its own
        if i == -1:
            keep.append(o)
            continue
        if i is None:
            seen[key] = len(keep)
            keep.append(o)
            continue
        prev = keep[i]
        if prev.body == o.body:
            continue
        rv_prev, rv_new = _resource_version(prev), _resource_version(o)
        newer = o if rv_prev is not None and rv_new is not None and rv_new > rv_prev else prev
        keep[i] = newer
        what = _difference(o.kind, prev.body, o.body)
        if what is not None:
            why = "newer resourceVersion" if newer is o else "first given"
            diagnostics.append(
                ObjectDiagnostic(
                    o.line,
                    f"{o.kind} {_ref(o)} is in the evidence twice with different {what} "
                    f"({prev.where}; {o.where}): using the one at {newer.where} ({why})",
                    o.artifact,
                )
            )
    return keep


def object_problems(obj: K8sObject) -> list[str]:
    """What in this object the API server would have refused (so no kube-proxy ever saw it), for
    the kinds verification reads; each problem once, in words a user can act on."""
    check = _CHECKS.get(obj.kind)
    return check(obj.body) if check is not None else []


def _service_problems(body: dict[str, Any]) -> list[str]:
    spec = body.get("spec")
    if not isinstance(spec, dict):  # absent, or dropped as not a mapping (_well_formed)
        return ["has no spec: not verified"]
    if spec.get("type") == "ExternalName":
        return []
    out: list[str] = []
    ips = cluster_ips(spec)
    if spec.get("clusterIPs") is not None and not isinstance(spec.get("clusterIPs"), list):
        out.append(f"clusterIPs {shown(spec.get('clusterIPs'))} is not a list")
    if not ips:
        out.append("has no clusterIP (a manifest rather than the object the API returns?): not verified")
    for ip in ips:
        if ip != "None" and not is_ip(ip):
            out.append(f"clusterIP {shown(ip)} is not an IP address: not verified")
    ports = spec.get("ports")
    if "None" not in ips and not as_list(ports):
        out.append("has no ports: nothing to verify")
    for n, port in enumerate(as_list(ports), 1):
        if not isinstance(port, dict):
            out.append(f"port entry {n} is {shown(port)}, not a port: not verified")
            continue
        label = f"port {shown(port.get('name'))}" if port.get("name") else f"port entry {n}"
        for p in (port_problem(port.get("port")), protocol_problem(port.get("protocol"))):
            if p:
                out.append(f"{label}: {p}: not verified")
        if port.get("nodePort") not in (None, 0) and port_value(port.get("nodePort")) is None:
            out.append(f"{label}: {port_problem(port.get('nodePort'), 'nodePort')}: its NodePort is not verified")
    for ip in as_list(spec.get("externalIPs")):
        if not is_ip(ip):
            out.append(f"externalIP {shown(ip)} is not an IP address: not verified")
    return out


def cluster_ips(spec: dict[str, Any]) -> list[object]:
    """``clusterIPs`` (or the older ``clusterIP``) as given: empty values left out, "None" kept
    (headless)."""
    ips = spec.get("clusterIPs")
    if not isinstance(ips, list) or not ips:
        ips = [spec.get("clusterIP")]
    return [ip for ip in ips if ip not in (None, "")]


def _slice_problems(body: dict[str, Any]) -> list[str]:
    out: list[str] = []
    family = {"IPv4": 4, "IPv6": 6}.get(str(body.get("addressType")))
    if not as_list(body.get("ports")) and as_list(body.get("endpoints")):
        # (a slice without endpoints has none either: the controller's placeholder for a
        # Service with no Pods)
        out.append("has no ports: kube-proxy takes none of its endpoints")
    for n, port in enumerate(as_list(body.get("ports")), 1):
        if not isinstance(port, dict):
            out.append(f"port entry {n} is {shown(port)}, not a port")
            continue
        number = port.get("port")  # null: "all ports" (a slice of a Service without ports)
        for p in (port_problem(number) if number is not None else None, protocol_problem(port.get("protocol"))):
            if p:
                out.append(f"port entry {n}: {p}")
    bad: list[str] = []
    endpoints = as_list(body.get("endpoints"))
    # the bulk of a cluster's objects: read in the core
    for n, k in (_slice_address_problems or _address_problems)(endpoints, family, is_ip):
        addrs = _addresses(endpoints[n])
        bad.append(shown(addrs if k < 0 else as_list(addrs)[k]))
    if bad:
        listed = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        out.append(f"endpoint address(es) {listed}: not {body.get('addressType')} addresses: not verified")
    return out


def _addresses(ep: object) -> object:
    """An endpoint's addresses as written (an endpoint that is no object stands for them)."""
    return ep.get("addresses") if isinstance(ep, dict) else ep


def _address_problems(
    endpoints: list[Any], family: int | None, ip_test: Callable[[object, int], bool]
) -> list[tuple[int, int]]:
    """``_core.slice_address_problems`` without the core: ``(n, -1)`` for endpoint ``n`` whose
    addresses are no list or an empty one, ``(n, k)`` for its address ``k`` not of ``family``."""
    out: list[tuple[int, int]] = []
    for n, ep in enumerate(endpoints):
        addrs = _addresses(ep)
        if not isinstance(addrs, list) or not addrs:
            out.append((n, -1))
        elif family is not None:
            out.extend((n, k) for k, a in enumerate(addrs) if not ip_test(a, family))
    return out


def _endpoints_problems(body: dict[str, Any]) -> list[str]:
    out: list[str] = []
    bad: list[str] = []
    for subset in as_list(body.get("subsets")):
        if not isinstance(subset, dict):
            bad.append(shown(subset))
            continue
        for key in ("addresses", "notReadyAddresses"):
            for a in as_list(subset.get(key)):
                if not is_ip(as_dict(a).get("ip")):
                    bad.append(shown(a))
        for port in as_list(subset.get("ports")):
            p = port_problem(as_dict(port).get("port"))
            if p:
                out.append(f"subset port {p}")
    if bad:
        out.append(f"address(es) {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}: not IP addresses: not verified")
    return out


def _node_problems(body: dict[str, Any]) -> list[str]:
    addrs = as_dict(body.get("status")).get("addresses")
    bad = [
        shown(a)
        for a in as_list(addrs)
        if not isinstance(a, dict) or (a.get("type") in ("InternalIP", "ExternalIP") and not is_ip(a.get("address")))
    ]
    return [f"address(es) {', '.join(bad[:3])}: not readable: left out"] if bad else []


_CHECKS = {
    "Service": _service_problems,
    "EndpointSlice": _slice_problems,
    "Endpoints": _endpoints_problems,
    "Node": _node_problems,
}


_SPACE_RUN = lazy_re.compile(r"\s*")


def _json_stream(text: str, diag: Any, first_line: int) -> list[Any]:
    """Concatenated JSON documents (``kubectl cluster-info dump``), one by one, bounded like
    :func:`~kpdoctor.parse.structured.load_json`: a document nested too deeply or holding a
    number of 4,300 digits ends the stream with a one-line reason. The line number is counted
    only for that reason (counting it for every document was quadratic in the stream's length)."""
    dec = json.JSONDecoder()
    docs: list[Any] = []
    i = 0
    n = len(text)
    while i < n:
        i = _SPACE_RUN.match(text, i).end()  # type: ignore[union-attr]  # matches the empty string too
        if i >= n:
            break
        try:
            obj, end = dec.raw_decode(text, i)
        except RecursionError:
            diag(text.count("\n", 0, i) + first_line, "JSON nested too deeply to read (about 1,000 levels or more)")
            break
        except ValueError as exc:
            line = text.count("\n", 0, i) + first_line
            if "Exceeds the limit" in str(exc):
                diag(line, "JSON holds a number of more than 4,300 digits")
            else:
                diag(line, f"invalid or truncated JSON: {exc.args[0] if exc.args else exc}")
            break
        docs.append(obj)
        i = end
    return docs
