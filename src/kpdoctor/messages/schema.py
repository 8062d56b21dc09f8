"""What kube-proxy, its node tools and the kernel can print, as data: one YAML file per component
in this folder, read from those programs' own source (``SOURCES-*.md`` say how).

The schema, checked when the files are loaded (a file that breaks it is refused with the entry and
the field named, never half read)::

    component: iptables                 # who prints these (kube-proxy, iptables, kernel ...)
    client: false                       # optional: a client (curl, a DNS lookup, CoreDNS reaching its
                                        # upstream): its lines say where a path failed, never why
    sources: ["how the source was read: package or repository, version, files"]
    entries:
      - id: couldnt-load-target         # unique within the component, kebab-case
        template: "Couldn't load target `{target}':{reason}"
        printed_by: [iptables-restore]  # optional: the programs, when not the component itself
        files: [libxtables/xtables.c]   # where the source prints it
        versions: "1.4.21-1.8.10"       # the releases that print it as written ("all": unchanged)
        level: E                        # optional (kube-proxy): I, W, E or F
        structured: {msg: "...", keys: [err]}   # optional: the structured-logging form (klog 2)
        payload: iptables               # optional: a wrapper's payload is one of this component's
        class: symptom                  # cause | symptom | benign
        cause: null                     # the cause slug (docs/checks.md) when class is cause
        suggests: [iptables-backend-mismatch]   # optional: causes a symptom usually points to
        outside: cluster-config         # optional: the failure it reports lies outside kube-proxy and
                                        # the node (an API server's RBAC refusal): it decides a line
                                        # another program's wrapper holds it in
        meaning: "One sentence: what it says about the node."
        example: "a real line"          # optional, with example_from: where it was seen
        example_from: "posted: kubernetes/kubernetes#82361"

A template is the printed text with what varies in braces: ``{target}``, ``{port}``... (``{{`` and
``}}`` are literal braces); a Go format verb (``%v``, ``%s``, ``%d``, ``%q``) stands for the same.
:mod:`kpdoctor.messages.templates` reads them; :mod:`kpdoctor.messages.match` makes one matcher of them all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from kpdoctor import lazy_re
from kpdoctor.messages.templates import TemplateError, compile_template

# The YAML files as plain data, with their digest (``python -m kpdoctor.messages --write-data``):
# reading 600 kB of YAML takes 0.13 s even with libyaml, a start-up cost every run paid, where
# the same data as JSON takes 5 ms. Read only while its digest is the files' (an edited file is
# read from its YAML, so the data never goes stale).
DATA_FILE = "messages.json"
CLASSES = ("cause", "symptom", "benign")
LEVELS = ("I", "W", "E", "F")
_ID = lazy_re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_SLUG = _ID
_REQUIRED = ("id", "template", "class", "meaning")
_OPTIONAL = (
    "printed_by",
    "files",
    "versions",
    "level",
    "structured",
    "payload",
    "cause",
    "suggests",
    "example",
    "example_from",
    "outside",
    "v",
)
# where a failure a message reports can lie outside kube-proxy and the node (tests/realworld's vocabulary)
OUTSIDE = (
    "cni", "dns", "network-policy", "application", "cloud-network", "benign", "other-component", "cluster-config",
)  # fmt: skip
_TOP = ("component", "sources", "entries", "client")


class CatalogueError(ValueError):
    """A messages file that breaks the schema: ``str()`` names the file, the entry and the field."""


@dataclass(frozen=True, slots=True)
class Structured:
    """klog 2's form of a message: ``"msg" key="value" ...``."""

    msg: str
    keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Message:
    """One message a component can print (see the module docstring for the fields)."""

    component: str
    id: str
    template: str
    kind: str  # cause | symptom | benign (the file's "class")
    meaning: str
    cause: str | None = None
    suggests: tuple[str, ...] = ()
    printed_by: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    versions: str = ""
    level: str | None = None
    structured: Structured | None = None
    payload: str | None = None
    example: str | None = None
    example_from: str | None = None
    client: bool = False  # its component is a client: where a path failed, never why (``client:``)
    outside: str | None = None  # the failure lies outside kube-proxy and the node (``outside:``)

    @property
    def key(self) -> str:
        """``component/id``: unique across the catalogue."""
        return f"{self.component}/{self.id}"


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    sources: tuple[str, ...]
    messages: tuple[Message, ...]
    file: str


@dataclass(frozen=True, slots=True)
class Catalogue:
    """Every component's messages, as loaded."""

    components: tuple[Component, ...] = field(default_factory=tuple)

    def __iter__(self) -> Iterator[Message]:
        for c in self.components:
            yield from c.messages

    def __len__(self) -> int:
        return sum(len(c.messages) for c in self.components)

    def of(self, component: str) -> tuple[Message, ...]:
        return next((c.messages for c in self.components if c.name == component), ())

    def get(self, key: str) -> Message | None:
        component, _, mid = key.partition("/")
        return next((m for m in self.of(component) if m.id == mid), None)


def _strings(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise CatalogueError(f"{where}: a string or a list of strings, not {value!r}")


def _text(value: object, where: str, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise CatalogueError(f"{where}: a non-empty string, not {value!r}")
    return value


def _entry(component: str, raw: object, where: str, client: bool = False) -> Message:
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: an entry is a mapping, not {type(raw).__name__}")
    eid = raw.get("id")
    where = f"{where} ({eid})" if isinstance(eid, str) else where
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise CatalogueError(f"{where}: unknown field(s) {', '.join(map(str, unknown))}")
    missing = [k for k in _REQUIRED if raw.get(k) in (None, "")]
    if missing:
        raise CatalogueError(f"{where}: missing {', '.join(missing)}")
    if not isinstance(eid, str) or not _ID.match(eid):
        raise CatalogueError(f"{where}: id {eid!r} is not kebab-case")
    kind = raw["class"]
    if kind not in CLASSES:
        raise CatalogueError(f"{where}: class {kind!r} is not one of {', '.join(CLASSES)}")
    cause = _text(raw.get("cause"), f"{where}: cause")
    if kind == "cause" and not cause:
        raise CatalogueError(f"{where}: a message of class cause names its cause")
    suggests = _strings(raw.get("suggests"), f"{where}: suggests")
    for slug in ([cause] if cause else []) + list(suggests):
        if not _SLUG.match(slug):
            raise CatalogueError(f"{where}: {slug!r} is not a cause slug")
    outside = _text(raw.get("outside"), f"{where}: outside")
    if outside is not None and (outside not in OUTSIDE or kind == "cause"):
        raise CatalogueError(f"{where}: outside {outside!r} is one of {', '.join(OUTSIDE)}, on a symptom or benign")
    level = raw.get("level")
    if level is not None and level not in LEVELS:
        raise CatalogueError(f"{where}: level {level!r} is not one of {', '.join(LEVELS)}")
    structured = None
    if raw.get("structured") is not None:
        s = raw["structured"]
        if not isinstance(s, dict) or not isinstance(s.get("msg"), str) or set(s) - {"msg", "keys"}:
            raise CatalogueError(f"{where}: structured is {{msg: text, keys: [names]}}")
        structured = Structured(s["msg"], _strings(s.get("keys"), f"{where}: structured.keys"))
    template = _text(raw["template"], f"{where}: template", required=True)
    assert template is not None
    try:
        compile_template(template)
    except TemplateError as exc:
        raise CatalogueError(f"{where}: template: {exc}") from None
    versions = raw.get("versions")
    return Message(
        component=component,
        id=eid,
        template=template,
        kind=kind,
        meaning=_text(raw["meaning"], f"{where}: meaning", required=True) or "",
        cause=cause,
        suggests=suggests,
        printed_by=_strings(raw.get("printed_by"), f"{where}: printed_by"),
        files=_strings(raw.get("files"), f"{where}: files"),
        versions=str(versions) if versions is not None else "",
        level=level,
        structured=structured,
        payload=_text(raw.get("payload"), f"{where}: payload"),
        example=_text(raw.get("example"), f"{where}: example"),
        example_from=_text(raw.get("example_from"), f"{where}: example_from"),
        client=client,
        outside=outside,
    )


def read_yaml(text: str, name: str) -> Any:
    """A messages file's data (a safe loader: plain data only)."""
    import yaml  # here: the shipped files are read from their data file

    try:
        # libyaml's safe loader when PyYAML has it (six times faster on these files), else the pure one
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise CatalogueError(f"{name}: not YAML: {exc}") from None


def component_of(doc: Any, name: str) -> Component:
    """One messages file's data, validated (:class:`CatalogueError` names what is wrong)."""
    if not isinstance(doc, dict):
        raise CatalogueError(f"{name}: a mapping with {', '.join(_TOP)}")
    unknown = sorted(set(doc) - set(_TOP))
    if unknown:
        raise CatalogueError(f"{name}: unknown field(s) {', '.join(map(str, unknown))}")
    component = _text(doc.get("component"), f"{name}: component", required=True) or ""
    client = doc.get("client", False)
    if not isinstance(client, bool):
        raise CatalogueError(f"{name}: client is true or false")
    entries = doc.get("entries")
    if not isinstance(entries, list) or not entries:
        raise CatalogueError(f"{name}: entries is a non-empty list")
    messages = tuple(_entry(component, e, f"{name}: entry {i + 1}", client) for i, e in enumerate(entries))
    seen: set[str] = set()
    for m in messages:
        if m.id in seen:
            raise CatalogueError(f"{name}: id {m.id} twice")
        seen.add(m.id)
    return Component(component, _strings(doc.get("sources"), f"{name}: sources"), messages, name)


def shipped_files() -> list[tuple[str, str]]:
    """The catalogue's YAML files shipped with kpdoctor: (name, text), by name."""
    folder = resources.files(__package__ or "kpdoctor.messages")
    return sorted((p.name, p.read_text(encoding="utf-8")) for p in folder.iterdir() if p.name.endswith(".yaml"))


def digest(files: Iterable[tuple[str, str]]) -> str:
    """What the data file is made from: every file's name and text."""
    h = hashlib.sha256()
    for name, text in files:
        h.update(json.dumps([name, text]).encode())
    return h.hexdigest()


def data_of(files: list[tuple[str, str]]) -> str:
    """The data file's text for these YAML files."""
    docs = [[name, read_yaml(text, name)] for name, text in files]
    return json.dumps({"digest": digest(files), "files": docs}, separators=(",", ":"), sort_keys=True) + "\n"


def _shipped_data(files: list[tuple[str, str]]) -> list[tuple[str, Any]] | None:
    """The shipped files' data from the data file, or None when it is not theirs (absent, or
    made from other texts)."""
    try:
        data = json.loads((resources.files(__package__ or "kpdoctor.messages") / DATA_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("digest") != digest(files):
        return None
    return [(str(name), doc) for name, doc in data.get("files", [])]


def load(files: Iterable[tuple[str, str]] | None = None) -> Catalogue:
    """The catalogue: every ``*.yaml`` of this folder (or ``files``: (name, text) pairs)."""
    docs: list[tuple[str, Any]] | None = None
    if files is None:
        files = shipped_files()
        docs = _shipped_data(files)
    if docs is None:
        docs = [(name, read_yaml(text, name)) for name, text in files]
    components = [component_of(doc, name) for name, doc in docs]
    names = [c.name for c in components]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CatalogueError(f"component(s) in two files: {', '.join(twice)}")
    return Catalogue(tuple(components))
