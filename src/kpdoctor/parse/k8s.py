"""Kubernetes objects from JSON or YAML: single objects, ``kind: List``, ``*List``, multi-doc YAML.

The cluster's view (Services, EndpointSlices, Nodes, Pods with status, DaemonSets, ConfigMaps)
is what the node's state is judged against.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from typing import Any

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


def list_item_kind(kind: object) -> str | None:
    """The kind of the items of a ``kind: FooList`` (kubectl leaves it out of each item)."""
    return kind[:-4] if isinstance(kind, str) and kind.endswith("List") and kind != "List" else None


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
        item_kind = list_item_kind(kind)
        for it in items:
            if isinstance(it, dict) and item_kind and "kind" not in it:
                it = {**it, "kind": item_kind}
            _flatten(it, out)
        return
    if isinstance(kind, str):
        out.append(doc)


_NAME_JSON = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_NAME_YAML = re.compile(r"^\s*name:\s*['\"]?([^'\"\n]*?)['\"]?\s*$", re.M)


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
        import yaml  # here: only YAML needs it, and it costs start-up time

        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + first_line if mark is not None else None
            out.diagnostics.append(Diagnostic(line, f"invalid YAML: {getattr(exc, 'problem', exc)}"))
    flat: list[dict[str, Any]] = []
    for d in docs:
        _flatten(d, flat)
    lines = _NameLines(text, stripped.startswith(("{", "[")))
    for d in flat:
        meta: dict[str, Any] = d["metadata"] if isinstance(d.get("metadata"), dict) else {}
        name = str(meta.get("name") or "")
        ns = meta.get("namespace")
        line = lines.next(name) if name else None
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
