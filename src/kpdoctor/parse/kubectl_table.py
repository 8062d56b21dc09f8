"""``kubectl get`` tables: Pods (with or without their header line), Services, Nodes and Endpoints.

Users paste the table rather than the objects, often grep'd (``| grep kube-proxy``), so the
header is gone. A row is still readable: NAME, READY (``1/1``), STATUS, RESTARTS (``0`` or, since
kubectl 1.22, ``3 (5m ago)``), AGE, and with ``-o wide`` IP and NODE; with ``-A`` a NAMESPACE
column comes first, and ``kubectl get all`` writes names as ``pod/NAME``. READY is the anchor:
what stands before it is the name (and the namespace), what follows it is in a fixed order.

What kpdoctor reads from it: which kube-proxy Pods run on which node. Nothing here raises.

The other tables are read as kubectl prints them (its printers, pkg/printers/internalversion: the
column titles upper-cased, cells padded by a tab writer to at least three spaces; empty values
as ``<none>``, ``<unknown>`` or ``<pending>``):

- Services: NAME, TYPE, CLUSTER-IP, EXTERNAL-IP, PORT(S), AGE (wide: SELECTOR). EXTERNAL-IP is
  ``spec.externalIPs`` joined with commas for ClusterIP and NodePort Services (``<none>``; before
  1.9 ``<nodes>`` for NodePort), for LoadBalancer ones the ingress IPs (or host names) then the
  externalIPs (``<pending>`` when none; without ``-o wide`` clipped to 16 characters with
  ``...``), for ExternalName the name. PORT(S) is ``port/PROTO`` or ``port:nodePort/PROTO``,
  comma-joined (the oldest kubectl left ``/TCP`` out).
- Nodes: NAME, STATUS (``Ready``, ``NotReady``, ``Unknown``, ``,SchedulingDisabled`` added),
  ROLES, AGE, VERSION (the kubelet's); wide: INTERNAL-IP, EXTERNAL-IP, OS-IMAGE, KERNEL-VERSION,
  CONTAINER-RUNTIME (the OS image has spaces in it).
- Endpoints: NAME, ENDPOINTS (up to three ``ip:port``, then `` + N more...``; ``<none>``), AGE.

A Service or Node row is read into a partial object (:func:`table_objects`): what the table does
not show is unknown, not unset, so such objects are kept apart from the objects a user exported
whole. An Endpoints row is read for the ready ``ip:port`` pairs it shows (:func:`shown_endpoints`):
kubectl's ``formatEndpoints`` (every release) lists the ready addresses of every subset with each
of its ports, at most three, then `` + N more...`` (``<none>``: no subsets; headless Services
without ports: bare addresses; IPv6 in brackets since ``net.JoinHostPort``). Only a row without
"more" lists them all, and even then neither the port names nor the not-ready addresses: it is
never an Endpoints object verification could take. An EndpointSlice row (NAME, ADDRESSTYPE,
PORTS, ENDPOINTS, AGE: ``formatDiscoveryPorts`` and ``formatDiscoveryEndpoints``) shows up to
three port numbers and three addresses of every endpoint, ready or not (``<unset>``: none), each
list cut the same way; its Service is its name without the controller's generated suffix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kpdoctor import lazy_re
from kpdoctor.dataplane.addresses import host_port
from kpdoctor.parse.k8s import GENERATED, K8sObject, Objects
from kpdoctor.parse.numbers import to_int

_ROW = lazy_re.compile(
    r"^\s*(?:(?P<ns>[a-z0-9][a-z0-9-]*)\s+)?(?:pods?/)?(?P<name>[a-z0-9][a-z0-9.-]*)\s+"
    r"(?P<ready>\d+/\d+)\s+(?P<status>[\w:/<>-]+)\s+"
    r"(?P<restarts>\d+(?:\s+\([^)\n]*\))?)\s+(?P<age>(?:\d+[smhdy])+|<unknown>|<invalid>)"
    r"(?:\s+(?P<ip>[\d.:a-fA-F]+|<none>|<pending>)\s+(?P<node>\S+)(?:\s+\S+(?:\s+\S+)?)?)?\s*$"
)
_HEADER = lazy_re.compile(r"^\s*(?:NAMESPACE\s+)?NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE\b")
_KUBE_PROXY = lazy_re.compile(r"^kube-proxy(?:-|$)")


@dataclass(frozen=True, slots=True)
class PodRow:
    """One row of the table."""

    namespace: str | None
    name: str
    ready: str
    status: str
    restarts: str
    node: str | None  # None: the table has no NODE column (no -o wide)
    line: int  # 0-based line in the text
    text: str

    @property
    def is_kube_proxy(self) -> bool:
        return bool(_KUBE_PROXY.match(self.name))

    @property
    def all_ready(self) -> bool:
        have, want = self.ready.split("/", 1)
        return have == want and want != "0"


def pod_rows(text: str) -> list[PodRow]:
    """The rows of every ``kubectl get pods`` table in ``text`` (each Pod once)."""
    rows: list[PodRow] = []
    seen: set[tuple[str | None, str]] = set()
    wide_header = False
    for i, line in enumerate(text.splitlines()):
        if _HEADER.match(line):
            wide_header = "NODE" in line.split()  # (a paste may have turned its padding into tabs)
            continue
        m = _ROW.match(line)
        if m is None:
            continue
        key = (m.group("ns"), m.group("name"))
        if key in seen:
            continue
        seen.add(key)
        node = m.group("node")
        if node in ("<none>", None) and not wide_header:
            node = None
        rows.append(
            PodRow(
                m.group("ns"),
                m.group("name"),
                m.group("ready"),
                m.group("status"),
                " ".join(m.group("restarts").split()),
                node if node != "<none>" else None,
                i,
                line.strip(),
            )
        )
    return rows


def is_pod_table(lines: list[str]) -> bool:
    """Mostly ``kubectl get pods`` rows (a header, the command, a ``--`` may be there too)."""
    content = [ln for ln in lines if ln.strip()]
    if not content:
        return False
    rows = sum(1 for ln in content if _ROW.match(ln))
    headers = sum(1 for ln in content if _HEADER.match(ln))
    return rows >= 1 and rows + headers >= 0.6 * len(content)


def has_kube_proxy(text: str) -> bool:
    """Does any row name a kube-proxy Pod (what makes the table evidence kpdoctor reads)?"""
    return any(r.is_kube_proxy for r in pod_rows(text))


# -- Services, Nodes, Endpoints ----------------------------------------------------------------

# The columns that say which resource a header is for (a subset of its titles).
_RESOURCES: tuple[tuple[str, frozenset[str]], ...] = (
    ("Service", frozenset({"NAME", "CLUSTER-IP", "PORT(S)"})),
    ("EndpointSlice", frozenset({"NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS"})),
    ("Endpoints", frozenset({"NAME", "ENDPOINTS"})),
    ("Node", frozenset({"NAME", "STATUS", "VERSION"})),
    ("Node", frozenset({"NAME", "STATUS", "ROLES"})),
    ("Pod", frozenset({"NAME", "READY", "STATUS"})),
)
_NOT_OF: dict[str, frozenset[str]] = {
    "Endpoints": frozenset({"ADDRESSTYPE", "PORTS"}),  # an EndpointSlice table
    "Node": frozenset({"READY"}),
}
# A header: upper-case titles (``PORT(S)``, ``NOMINATED NODE``) that begin with NAME or NAMESPACE.
_TABLE_HEADER = lazy_re.compile(r"^\s*(?:NAMESPACE\s+)?NAME(?:\s{2,}|\t)[A-Z][A-Z0-9()/ \t-]*$")
_CELL_SEP = lazy_re.compile(r"\s{2,}|\t")
# kubectl's words for no value, in its tables and descriptions
NONE = ("<none>", "<unknown>", "<pending>", "<nodes>", "<unset>", "")
_SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
_PORT = lazy_re.compile(r"^(\d{1,5})(?::(\d{1,5}))?(?:/([A-Za-z]+))?$")
_AGE = r"(?:\d+[smhdy])+|<unknown>|<invalid>"
_IP = r"[\d.]+|[0-9a-fA-F:]*:[0-9a-fA-F:.]*"
# A Service row without its header (`kubectl get svc -A | grep web`): TYPE is the anchor.
_SERVICE_ROW = lazy_re.compile(
    rf"^\s*(?:(?P<ns>[a-z0-9][a-z0-9-]*)\s+)?(?:services?/)?(?P<name>[a-z0-9][a-z0-9.-]*)\s+"
    rf"(?P<type>{'|'.join(_SERVICE_TYPES)})\s+(?P<cip>None|<none>|{_IP})\s+(?P<ext>\S+)\s+"
    rf"(?P<ports>\S+)\s+(?P<age>{_AGE})(?:\s+(?P<sel>\S+))?\s*$"
)
# An Endpoints row without its header (`kubectl get ep -A | grep web`): the ip:port list is the anchor.
_EP = r"(?:[\d.]+|\[[0-9a-fA-F:.]+\]|[0-9a-fA-F:]*:[0-9a-fA-F:.]*)(?::\d+)?"
_ENDPOINTS_CELL = rf"<none>|{_EP}(?:,{_EP})*(?: \+ \d+ more\.\.\.)?"
_ENDPOINTS_ROW = lazy_re.compile(
    rf"^\s*(?:(?P<ns>[a-z0-9][a-z0-9-]*)\s+)?(?:(?:endpoints|ep)/)?(?P<name>[a-z0-9][a-z0-9.-]*)\s+"
    rf"(?P<eps>{_ENDPOINTS_CELL})\s+(?P<age>{_AGE})\s*$"
)
# kubectl's "+ N more..." after the values it shows (tables and descriptions, every release)
MORE = lazy_re.compile(r"[ \t]*\+[ \t]*(\d+)[ \t]+more\.*[ \t]*$")
# A Node row without its header: STATUS and the kubelet's VERSION are the anchors; with -o wide the
# OS image (spaces in it) stands between the addresses and the kernel and runtime.
_NODE_ROW = lazy_re.compile(
    rf"^\s*(?:nodes?/)?(?P<name>[a-z0-9][a-z0-9.-]*)\s+"
    r"(?P<status>(?:Ready|NotReady|Unknown)(?:,SchedulingDisabled)?)\s+(?P<roles>\S+)\s+"
    rf"(?P<age>{_AGE})\s+(?P<version>v\d+\.\d+\.\d+\S*)"
    rf"(?:\s+(?P<iip>{_IP}|<none>)\s+(?P<eip>{_IP}|<none>)\s+(?P<os>\S.*?\S|\S)\s+"
    r"(?P<kernel>\d+\.\d+\S*|<unknown>)\s+(?P<runtime>[a-z-]+://\S+|<unknown>))?\s*$"
)


@dataclass(frozen=True, slots=True)
class TableRow:
    """One row of a Service, Node or Endpoints table: its cells by column title."""

    kind: str  # Service, Node, Endpoints
    namespace: str | None
    name: str
    cells: dict[str, str]
    line: int  # 0-based line in the text
    text: str


@dataclass(slots=True)
class _Header:
    kind: str | None
    titles: list[str]
    starts: list[int] = field(default_factory=list)


def _header(line: str) -> _Header | None:
    if not _TABLE_HEADER.match(line):
        return None
    titles = _CELL_SEP.split(line.strip())
    starts, at = [], 0
    for t in titles:
        at = line.index(t, at)
        starts.append(at)
        at += len(t)
    have = set(titles)
    kind = next(
        (k for k, need in _RESOURCES if need <= have and not (_NOT_OF.get(k, frozenset()) & have)), None
    )
    return _Header(kind, titles, starts)


def _cells(line: str, h: _Header) -> list[str] | None:
    """The row's cells under ``h``'s titles: split at runs of two or more spaces (kubectl pads
    to three; a value holds at most single spaces), else at the header's column starts (a
    ``kubectl get -w`` row padded for its own width is split the first way)."""
    cells = _CELL_SEP.split(line.strip())
    if len(cells) == len(h.titles):
        return cells
    if " " not in "".join(h.titles) and len(line.split()) == len(h.titles):
        return line.split()  # a paste that squeezed the padding to one space
    if len(line) < h.starts[-1] or any(s > 0 and not line[s - 1].isspace() for s in h.starts[1:]):
        return None
    bounds = [*h.starts[1:], len(line)]
    out = [line[a:b].strip() for a, b in zip(h.starts, bounds, strict=True)]
    return out if all(out) else None


def _split_name(kind: str, value: str, namespace: str | None) -> tuple[str | None, str]:
    """``kubectl get all`` writes ``service/web``; -A puts the namespace in its own column."""
    prefix, _, rest = value.partition("/")
    if rest and prefix.lower().rstrip("s") in (kind.lower(), "svc", "ep", "no"):
        value = rest
    return namespace, value


def table_rows(text: str) -> list[TableRow]:
    """Every Service, Node and Endpoints row in ``text``: under their header, or (Services and
    Nodes) recognised without it. A name seen twice keeps its last row (``kubectl get -w`` prints
    a row again when the object changes)."""
    rows: dict[tuple[str, str | None, str], TableRow] = {}
    for row in _each_row(text):
        rows.pop((row.kind, row.namespace, row.name), None)
        rows[(row.kind, row.namespace, row.name)] = row
    return list(rows.values())


def _each_row(text: str) -> Iterator[TableRow]:
    h: _Header | None = None
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            h = None  # `kubectl get all` (or `get svc,nodes`) separates its tables by a blank line
            continue
        head = _header(line)
        if head is not None:
            h = head
            continue
        row = _row(line, i, h)
        if row is not None:
            yield row


def _row(line: str, i: int, h: _Header | None) -> TableRow | None:
    if h is not None and h.kind in ("Service", "Node", "Endpoints", "EndpointSlice"):
        cells = _cells(line, h)
        if cells is not None:
            d = dict(zip(h.titles, cells, strict=True))
            ns, name = _split_name(h.kind, d.get("NAME", ""), d.get("NAMESPACE"))
            if name:
                return TableRow(h.kind, ns, name, d, i, line.strip())
    if (m := _SERVICE_ROW.match(line)) is not None:
        d = {"NAME": m["name"], "TYPE": m["type"], "CLUSTER-IP": m["cip"], "EXTERNAL-IP": m["ext"],
             "PORT(S)": m["ports"], "AGE": m["age"]}  # fmt: skip
        return TableRow("Service", m["ns"], m["name"], d, i, line.strip())
    if (m := _ENDPOINTS_ROW.match(line)) is not None and any(c.isdigit() for c in m["eps"]):
        return TableRow("Endpoints", m["ns"], m["name"], {"NAME": m["name"], "ENDPOINTS": m["eps"]}, i, line.strip())
    if (m := _NODE_ROW.match(line)) is not None:
        d = {"NAME": m["name"], "STATUS": m["status"], "ROLES": m["roles"], "AGE": m["age"], "VERSION": m["version"]}
        if m["iip"]:
            d.update({"INTERNAL-IP": m["iip"], "EXTERNAL-IP": m["eip"], "OS-IMAGE": m["os"],
                      "KERNEL-VERSION": m["kernel"], "CONTAINER-RUNTIME": m["runtime"]})  # fmt: skip
        return TableRow("Node", None, m["name"], d, i, line.strip())
    return None


def is_object_table(lines: list[str]) -> bool:
    """Mostly Service, Node or Endpoints rows and their headers (the command, a ``--``, a Pod
    table of ``kubectl get all`` may be there too)."""
    content = [ln for ln in lines if ln.strip() and ln.strip() != "--"]
    if not content:
        return False
    rows = list(_each_row("\n".join(content)))  # every row line, a -w row printed again too
    if not rows:
        return False
    headers = sum(1 for ln in content if _header(ln) is not None)
    pods = sum(1 for ln in content if _ROW.match(ln))
    return len(rows) + headers + pods >= 0.6 * len(content)


def listed(value: str | None) -> list[str]:
    """A comma-joined value kubectl printed (a table's cell, a description's field), without its
    words for none and a clipped last value."""
    if value is None or value in NONE:
        return []
    return [v for v in (v.strip() for v in value.split(",")) if v and not v.endswith("...")]


def _service_body(cells: dict[str, str]) -> dict[str, Any]:
    kind = cells.get("TYPE", "")
    spec: dict[str, Any] = {}
    if kind in _SERVICE_TYPES:
        spec["type"] = kind
    cip = cells.get("CLUSTER-IP", "")
    if cip and cip not in NONE:
        spec["clusterIP"] = cip
    ports = []
    for p in listed(cells.get("PORT(S)", "")):
        m = _PORT.match(p)
        if m is not None:
            port: dict[str, Any] = {"port": int(m[1]), "protocol": (m[3] or "TCP").upper()}
            if m[2]:
                port["nodePort"] = int(m[2])
            ports.append(port)
    spec["ports"] = ports
    body: dict[str, Any] = {"spec": spec}
    external = listed(cells.get("EXTERNAL-IP", ""))
    if kind == "ExternalName":
        spec["externalName"] = cells.get("EXTERNAL-IP", "")
    elif kind == "LoadBalancer":  # ingress first, then externalIPs: which is which is not shown
        body["status"] = {"loadBalancer": {"ingress": [{"ip": v} for v in external]}}
    elif external:
        spec["externalIPs"] = external
    return body


def _node_body(cells: dict[str, str]) -> dict[str, Any]:
    status: dict[str, Any] = {}
    addresses = [
        {"type": t, "address": cells[col]}
        for col, t in (("INTERNAL-IP", "InternalIP"), ("EXTERNAL-IP", "ExternalIP"))
        if cells.get(col, "") not in NONE
    ]
    if addresses:
        status["addresses"] = addresses
    info = {
        key: cells[col]
        for col, key in (
            ("VERSION", "kubeletVersion"),
            ("OS-IMAGE", "osImage"),
            ("KERNEL-VERSION", "kernelVersion"),
            ("CONTAINER-RUNTIME", "containerRuntimeVersion"),
        )
        if cells.get(col, "") not in NONE
    }
    if info:
        status["nodeInfo"] = info
    ready, _, rest = cells.get("STATUS", "").partition(",")
    if ready in ("Ready", "NotReady", "Unknown"):
        said = {"Ready": "True", "NotReady": "False"}.get(ready, "Unknown")
        status["conditions"] = [{"type": "Ready", "status": said}]
    body: dict[str, Any] = {"status": status}
    if "SchedulingDisabled" in rest:
        body["spec"] = {"unschedulable": True}
    return body


TABLE_ROW = "a `kubectl get` table row"


def table_objects(text: str, artifact: str, first_line: int = 1) -> Objects:
    """The Services and Nodes of ``text``'s tables, as partial objects (``fragment`` says so),
    each cited at its row."""
    out = Objects()
    for r in table_rows(text):
        if r.kind == "Service":
            body = _service_body(r.cells)
        elif r.kind == "Node":
            body = _node_body(r.cells)
        else:
            continue
        meta: dict[str, Any] = {"name": r.name}
        if r.namespace:
            meta["namespace"] = r.namespace
        body = {"apiVersion": "v1", "kind": r.kind, "metadata": meta, **body}
        out.items.append(K8sObject(r.kind, "v1", r.namespace, r.name, body, artifact, first_line + r.line, TABLE_ROW))
    return out



@dataclass(frozen=True, slots=True)
class ShownEndpoints:
    """An Endpoints row (the ready ``ip:port`` pairs it shows), or an EndpointSlice row (every
    endpoint's, ready or not), and how many more it left out."""

    namespace: str | None  # None: the table did not say (no -A, no NAMESPACE column)
    name: str  # the Service's
    backends: tuple[str, ...]  # as kube-proxy's DNAT names them: ``10.0.0.1:80``, ``[fd00::1]:80``
    more: int  # left out (" + N more..."): the list is whole only when 0
    line: int  # 0-based line in the text
    text: str
    ready_only: bool = True  # False: an EndpointSlice row, whose addresses include not-ready ones

    @property
    def whole(self) -> bool:
        """Does the row list every ready ip:port of the Service (and at least one)?"""
        return self.more == 0 and bool(self.backends)


def _backend(pair: str) -> str | None:
    """``ip:port`` as kube-proxy's DNAT names it (older kubectl printed IPv6 without brackets);
    None for a bare address (a headless Service without ports: kube-proxy programs none)."""
    if pair.startswith("["):
        return pair if "]:" in pair else None
    host, sep, port = pair.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    return host_port(host, port)


# the EndpointSlice controller names a Service's slices "<service>-<5 generated characters>"
_SLICE_NAME = lazy_re.compile(rf"^(?P<service>[a-z0-9][-a-z0-9.]*)-{GENERATED}{{5}}$")


def _cut(cell: str) -> tuple[list[str], int]:
    """A cell's values and how many " + N more..." left out."""
    more = (to_int(m.group(1)) or 1) if (m := MORE.search(cell)) is not None else 0
    shown = cell[: m.start()] if m is not None else cell
    return ([] if shown in NONE else [v.strip() for v in shown.split(",")]), more


def _slice_row(r: TableRow) -> ShownEndpoints | None:
    """An EndpointSlice row: every address with every port (kube-proxy's DNAT targets)."""
    named = _SLICE_NAME.match(r.name)
    ports, more_ports = _cut(r.cells.get("PORTS", "").strip())
    addresses, more = _cut(r.cells.get("ENDPOINTS", "").strip())
    if named is None or not all(p.isdigit() for p in ports):
        return None  # not the controller's name, or a port given by name only ("*": every port)
    backends = tuple(host_port(a, p) for p in ports for a in addresses)
    return ShownEndpoints(r.namespace, named["service"], backends, more + more_ports, r.line, r.text, False)


def shown_endpoints(text: str) -> list[ShownEndpoints]:
    """Every ``kubectl get endpoints`` and ``kubectl get endpointslices`` row of ``text``, with
    the backends it shows."""
    out = []
    for r in table_rows(text):
        if r.kind == "EndpointSlice":
            if (row := _slice_row(r)) is not None:
                out.append(row)
            continue
        if r.kind != "Endpoints":
            continue
        pairs, more = _cut(r.cells.get("ENDPOINTS", "").strip())
        backends = [b for p in pairs if (b := _backend(p)) is not None]
        if len(backends) != len(pairs):
            continue  # bare addresses (no ports) or a cell not read whole
        out.append(ShownEndpoints(r.namespace, r.name, tuple(backends), more, r.line, r.text))
    return out
