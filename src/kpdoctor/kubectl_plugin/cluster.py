"""``kubectl kpdoctor cluster``: what the agents found on every node, in one table grouped by cause.

Read from what the agents already write (docs/agent.md), so it costs two lists and runs nothing on
the nodes: each Node's condition (``KubeProxyProblem``: ``True`` names the top cause, ``False``
healthy, ``Unknown`` inconclusive, absent: no agent there) and the agents' Events on Nodes (a
``Warning`` per finding, reason the cause in CamelCase, message ``CODE summary``; a ``Normal``
``<Reason>Resolved`` when it is gone). A finding whose last Event is the Warning is current.
A condition not written for longer than :data:`STALE_SECONDS` is flagged stale: its agent stopped.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kpdoctor.agent.node_status import COMPONENT, DEFAULT_CONDITION, HEALTHY_REASON, camel

STALE_SECONDS = 30 * 60  # the agent writes its condition at least every 10 minutes
SCHEMA = "kpdoctor.cluster/v1"
# groups that are not a cause, in the order they are shown after the causes
HEALTHY, INCONCLUSIVE, NO_AGENT = "(healthy)", "(inconclusive)", "(no agent)"
NAMES_SHOWN = 5
PAGE, MAX_PAGES = 500, 2000  # a list in pages of 500; one that has not ended after 1,000,000 objects never will
PAGE_SECONDS = 60.0  # one page, whole


@dataclass
class Finding:
    cause: str  # the slug when the reason is a known cause's, else the reason
    reason: str
    code: str
    summary: str
    count: int
    last_seen: str


@dataclass
class NodeState:
    name: str
    condition: dict[str, Any] | None
    findings: list[Finding] = field(default_factory=list)
    stale: bool = False

    @property
    def groups(self) -> list[str]:
        """The groups this node is listed in: each current cause, else what its condition says."""
        causes = list(dict.fromkeys(f.cause for f in self.findings))
        status = (self.condition or {}).get("status")
        if status == "True":
            top = _cause_of(str(self.condition.get("reason") or "")) if self.condition else ""
            if top and top not in causes:
                causes.insert(0, top)
        if causes:
            return causes
        if self.condition is None:
            return [NO_AGENT]
        return [HEALTHY] if status == "False" else [INCONCLUSIVE]


def _causes_by_reason() -> dict[str, str]:
    from kpdoctor.knowledge import CHECKS

    return {camel(spec.cause): spec.cause for spec in CHECKS.values()}


_REASONS: dict[str, str] | None = None


def _cause_of(reason: str) -> str:
    """``IptablesBackendMismatch`` -> ``iptables-backend-mismatch`` (the public cause slug)."""
    global _REASONS
    if _REASONS is None:
        _REASONS = _causes_by_reason()
    return _REASONS.get(reason, reason)


def _stamp(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _event_time(ev: dict[str, Any]) -> str:
    return str(ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp") or "")


def current_findings(events: list[dict[str, Any]]) -> list[Finding]:
    """The findings whose last Event is the Warning (not followed by its ``...Resolved``)."""
    last: dict[str, dict[str, Any]] = {}
    for ev in sorted(events, key=_event_time):
        reason = str(ev.get("reason") or "")
        key = reason.removesuffix("Resolved") if ev.get("type") == "Normal" else reason
        if key and key != HEALTHY_REASON:
            last[key] = ev
    out = []
    for reason, ev in last.items():
        if ev.get("type") != "Warning":
            continue
        code, _, summary = str(ev.get("message") or "").partition(" ")
        out.append(Finding(_cause_of(reason), reason, code, summary, int(ev.get("count") or 1), _event_time(ev)))
    return out


def _listed(lister: Any, **selector: Any) -> list[dict[str, Any]]:
    """Every item of a list, in pages, each page whole within :data:`PAGE_SECONDS` (the shared
    reader: collect/kubeapi.py)."""
    from kpdoctor.collect.kubeapi import fetch, pages

    def page(token: str | None) -> dict[str, Any]:
        args: dict[str, Any] = {"limit": PAGE, **selector, **({"_continue": token} if token else {})}
        got = json.loads(fetch(lister, seconds=PAGE_SECONDS, **args))
        return got if isinstance(got, dict) else {}

    return [it for p in pages(page, MAX_PAGES) for it in p.get("items") or [] if isinstance(it, dict)]


def gather(api: Any, condition_type: str = DEFAULT_CONDITION, now: dt.datetime | None = None) -> list[NodeState]:
    """Every Node, its condition and its current findings (two lists: Nodes, the agents' Events)."""
    from kubernetes import client as k8s

    from kpdoctor.collect.kubeapi import bounded_connections

    core: Any = k8s.CoreV1Api(bounded_connections(api))
    nodes = _listed(core.list_node)
    selector = f"involvedObject.kind=Node,source={COMPONENT}"
    events = _listed(core.list_event_for_all_namespaces, field_selector=selector)
    per_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ev in events:
        per_node[str((ev.get("involvedObject") or {}).get("name") or "")].append(ev)
    now = now or dt.datetime.now(dt.UTC)
    out = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        cond = next(
            (c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == condition_type), None
        )
        beat = _stamp((cond or {}).get("lastHeartbeatTime"))
        stale = beat is not None and (now - beat).total_seconds() > STALE_SECONDS
        # Findings only under a True condition: False or Unknown is newer than any Event (the
        # agent's rate limit may have held a ...Resolved back).
        findings = current_findings(per_node.get(name, [])) if (cond or {}).get("status") == "True" else []
        out.append(NodeState(name, cond, findings, stale))
    return out


def grouped(states: list[NodeState]) -> list[tuple[str, list[NodeState]]]:
    """Groups by cause, the most widespread first, then inconclusive, no agent, healthy."""
    groups: dict[str, list[NodeState]] = defaultdict(list)
    for st in states:
        for g in st.groups:
            groups[g].append(st)
    tail = [HEALTHY, NO_AGENT, INCONCLUSIVE]
    causes = sorted((g for g in groups if g not in tail), key=lambda g: (-len(groups[g]), g))
    order = causes + [g for g in reversed(tail) if g in groups]
    return [(g, groups[g]) for g in order]


def problems(states: list[NodeState]) -> bool:
    return any(g not in (HEALTHY, NO_AGENT, INCONCLUSIVE) for st in states for g in st.groups)


def _condition_text(st: NodeState) -> str:
    if st.condition is None:
        return "-"
    text = str(st.condition.get("status") or "?")
    return text + " (stale)" if st.stale else text


def age(stamp: str, now: dt.datetime | None = None) -> str:
    """How long ago, as kubectl prints ages (``45s``, ``12m``, ``5h``, ``3d``); ``""`` if unknown."""
    when = _stamp(stamp)
    if when is None:
        return ""
    secs = max(0, int(((now or dt.datetime.now(dt.UTC)) - when).total_seconds()))
    if secs < 120:
        return f"{secs}s"
    if secs < 3 * 3600:
        return f"{secs // 60}m"
    if secs < 48 * 3600:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def _finding_for(st: NodeState, group: str) -> tuple[str, str, str]:
    """(code, since, summary) of the node's finding in this group."""
    f = next((f for f in st.findings if f.cause == group), None)
    cond = st.condition or {}
    since = str(cond.get("lastTransitionTime") or "")
    if f is not None:
        return f.code, f.last_seen or since, f.summary
    code, _, summary = str(cond.get("message") or "").partition(" ")
    return code, since, summary


def table(states: list[NodeState], width: int = 160) -> str:
    """kubectl's table style: upper-case headers, columns three spaces apart."""
    rows: list[list[str]] = [["CAUSE", "NODES", "NODE", "CONDITION", "AGE", "CODE", "SUMMARY"]]
    for group, members in grouped(states):
        count = str(len(members))
        if group in (HEALTHY, NO_AGENT, INCONCLUSIVE):
            names = ", ".join(m.name for m in members[:NAMES_SHOWN])
            if len(members) > NAMES_SHOWN:
                names += f" (+{len(members) - NAMES_SHOWN} more)"
            conds = sorted({_condition_text(m) for m in members})
            rows.append([group, count, names, ",".join(conds), "", "", ""])
            continue
        for i, m in enumerate(members):
            code, since, summary = _finding_for(m, group)
            rows.append(
                [
                    group if i == 0 else "",
                    count if i == 0 else "",
                    m.name,
                    _condition_text(m),
                    age(since),
                    code,
                    summary,
                ]
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for r in rows:
        line = "   ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "   " + r[-1]
        line = line.rstrip()
        lines.append(line if len(line) <= width else line[: width - 3] + "...")
    return "\n".join(lines) + "\n"


def to_json(states: list[NodeState], condition_type: str) -> str:
    doc = {
        "schema": SCHEMA,
        "conditionType": condition_type,
        "groups": [{"group": g, "nodes": [m.name for m in members]} for g, members in grouped(states)],
        "nodes": [
            {
                "name": st.name,
                "condition": st.condition,
                "stale": st.stale,
                "findings": [f.__dict__ for f in st.findings],
            }
            for st in states
        ],
    }
    return json.dumps(doc, indent=1) + "\n"
