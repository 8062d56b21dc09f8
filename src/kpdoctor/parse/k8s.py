"""Kubernetes objects from JSON or YAML: single objects, ``kind: List``, ``*List``, multi-doc YAML.

The cluster's view (Services, EndpointSlices, Nodes, Pods with status, DaemonSets, ConfigMaps)
is what the node's state is judged against.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from kpdoctor.parse.diagnostics import Diagnostic


@dataclass(frozen=True, slots=True)
class K8sObject:
    kind: str
    api_version: str
    namespace: str | None
    name: str
    body: dict[str, Any]
    artifact: str
    line: int | None  # best-effort line of the object's name in the user's file

    @property
    def ref(self) -> str:
        ns = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind}/{ns}{self.name}"


@dataclass(slots=True)
class Objects:
    items: list[K8sObject] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def of(self, kind: str) -> list[K8sObject]:
        return [o for o in self.items if o.kind == kind]


def _flatten(doc: Any, out: list[dict[str, Any]]) -> None:
    if isinstance(doc, list):
        for d in doc:
            _flatten(d, out)
        return
    if not isinstance(doc, dict):
        return
    items = doc.get("items")
    kind = doc.get("kind")
    if isinstance(items, list) and (kind is None or (isinstance(kind, str) and kind.endswith("List"))):
        item_kind = kind[:-4] if isinstance(kind, str) and kind.endswith("List") and kind != "List" else None
        for it in items:
            if isinstance(it, dict) and item_kind and "kind" not in it:
                it = {**it, "kind": item_kind}
            _flatten(it, out)
        return
    if isinstance(kind, str):
        out.append(doc)


def _line_of(text: str, name: str, start_hint: int) -> int | None:
    for rx in (rf'"name"\s*:\s*"{re.escape(name)}"', rf"^\s*name:\s*['\"]?{re.escape(name)}['\"]?\s*$"):
        m = re.compile(rx, re.M).search(text, start_hint)
        if m:
            return text.count("\n", 0, m.start()) + 1
    return None


def parse_objects(text: str, artifact: str, first_line: int = 1) -> Objects:
    """Parse every Kubernetes object in a JSON or YAML text; never raises."""
    out = Objects()
    docs: list[Any] = []
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            docs = [json.loads(text)]
        except ValueError as exc:
            # kubectl cluster-info dump concatenates JSON documents: read them one by one.
            docs = _json_stream(text, out, artifact, exc)
    else:
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + first_line if mark is not None else None
            out.diagnostics.append(Diagnostic(line, f"invalid YAML: {getattr(exc, 'problem', exc)}"))
    flat: list[dict[str, Any]] = []
    for d in docs:
        _flatten(d, flat)
    pos = 0
    for d in flat:
        meta: dict[str, Any] = d["metadata"] if isinstance(d.get("metadata"), dict) else {}
        name = str(meta.get("name") or "")
        ns = meta.get("namespace")
        line = _line_of(text, name, pos) if name else None
        if line is not None:
            pos = len("\n".join(text.splitlines()[:line]))
        out.items.append(
            K8sObject(
                str(d.get("kind")),
                str(d.get("apiVersion") or ""),
                str(ns) if ns else None,
                name,
                d,
                artifact,
                None if line is None else line + first_line - 1,
            )
        )
    return out


def _json_stream(text: str, out: Objects, artifact: str, first_error: ValueError) -> list[Any]:
    dec = json.JSONDecoder()
    docs: list[Any] = []
    i = 0
    n = len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        try:
            obj, end = dec.raw_decode(text, i)
        except ValueError as exc:
            line = text.count("\n", 0, i) + 1
            out.diagnostics.append(Diagnostic(line, f"invalid or truncated JSON: {exc.args[0] if exc.args else exc}"))
            break
        docs.append(obj)
        i = end
    if not docs:
        out.diagnostics.append(Diagnostic(None, f"invalid JSON: {first_error}"))
    return docs
