"""``kubectl get pods [-A] [-o wide]`` tables, with or without their header line.

Users paste the table rather than the objects, often grep'd (``| grep kube-proxy``), so the
header is gone. A row is still readable: NAME, READY (``1/1``), STATUS, RESTARTS (``0`` or, since
kubectl 1.22, ``3 (5m ago)``), AGE, and with ``-o wide`` IP and NODE; with ``-A`` a NAMESPACE
column comes first, and ``kubectl get all`` writes names as ``pod/NAME``. READY is the anchor:
what stands before it is the name (and the namespace), what follows it is in a fixed order.

What kpdoctor reads from it: which kube-proxy Pods run on which node. Nothing here raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ROW = re.compile(
    r"^\s*(?:(?P<ns>[a-z0-9][a-z0-9-]*)\s+)?(?:pods?/)?(?P<name>[a-z0-9][a-z0-9.-]*)\s+"
    r"(?P<ready>\d+/\d+)\s+(?P<status>[\w:/<>-]+)\s+"
    r"(?P<restarts>\d+(?:\s+\([^)\n]*\))?)\s+(?P<age>(?:\d+[smhdy])+|<unknown>|<invalid>)"
    r"(?:\s+(?P<ip>[\d.:a-fA-F]+|<none>|<pending>)\s+(?P<node>\S+)(?:\s+\S+(?:\s+\S+)?)?)?\s*$"
)
_HEADER = re.compile(r"^\s*(?:NAMESPACE\s+)?NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE\b")
_KUBE_PROXY = re.compile(r"^kube-proxy(?:-|$)")


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
            wide_header = " NODE " in f" {line} "
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
