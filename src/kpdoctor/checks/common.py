"""Helpers that several checks use to build findings from log hits and versions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.facts import Facts, Versioned
from kpdoctor.facts.log import cite
from kpdoctor.knowledge import CHECKS, VersionRow
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.logscan import Hit
from kpdoctor.versions import FixRow, Remedy, remedy

MAX_EVIDENCE_HITS = 3
# Services (and Nodes) as kubectl printed them, standing in for the objects: partial objects
# (parse/kubectl_table, parse/kubectl_describe), a Service's endpoints judged only when shown whole
PRINTED_SERVICES = (Kind.KUBECTL_TABLE, Kind.KUBECTL_DESCRIBE)

# What rules that are not kept in sync look like on the data-plane side: the symptoms a cause that
# stops kube-proxy's syncs explains (each root cause says so with ``explains=``).
SYNC_SYMPTOMS = (
    "service-rules-missing",
    "stale-service-rules",
    "endpoints-out-of-sync",
    "ipvs-virtual-server-empty",
    "local-endpoints-not-recognised",
)
# ... and with the sync-failure finding itself, for causes that make kube-proxy's syncs fail.
RESTORE_SYMPTOMS = ("rule-sync-stale", *SYNC_SYMPTOMS)


def start(
    facts: Facts,
    code: str,
    hits: list[Hit],
    *,
    confidence: Confidence,
    summary: str = "",
    severity: Severity | None = None,
) -> Finding:
    """A new finding of check ``code`` (its cause, title, default severity and references).

    With log hits, repeated signatures become one finding: counted, with the first and last
    lines as evidence, first/last timestamps, and whether the failure is still ongoing.
    """
    spec = CHECKS[code]
    f = Finding(
        code=code,
        cause=spec.cause,
        severity=severity if severity is not None else spec.severity,
        confidence=confidence,
        title=spec.title,
        summary=summary,
        references=spec.reference_urls(),
    )
    if not hits:
        return f
    hs = sorted(hits, key=lambda h: h.order)
    occ = facts.log.occurrence(hs)
    shown = hs[:1] + hs[-1:] if len(hs) > 1 else hs
    for h in shown[:MAX_EVIDENCE_HITS]:
        for c in cite(h):
            if c not in f.evidence:
                f.evidence.append(c)
    if occ is not None:
        f.occurrences = occ.count  # hs is a sample: the count is the scan's
        f.first_seen, f.last_seen, f.ongoing = occ.first.timestamp, occ.last.timestamp, occ.ongoing
    return f


def suspect(f: Finding, why: str, decided_by: Iterable[str], confidence: Confidence = Confidence.LOW) -> Finding:
    """``f`` as a suspected cause: the evidence fits it (``why``, said as its confidence's reason)
    but the condition that proves it was not given; ``decided_by``: the commands whose output
    confirms it or rules it out. A check says this itself, from its own conditions: what it
    found is the suspicion, what it lacked is the proof."""
    f.suspected = True
    f.confidence = min(f.confidence, confidence)
    f.confidence_reason = why
    f.decided_by = list(decided_by)
    return f


def version_rows(rows: list[FixRow], reference: str, component: str = "kube-proxy") -> tuple[VersionRow, ...]:
    """A remediation table (the rows a finding's advice is picked from) as the cause's version
    table for `kpdoctor explain`: the same data, said once."""
    out = []
    for r in rows:
        who = f"{component} ({r.vendor})" if r.vendor else component
        if r.line is None:
            line = "other release lines"
        else:
            line = f"{r.line[0]}.{r.line[1]}"
            line = f"after {line}" if r.above else f"before {line}" if r.below else line
        if r.status == "unaffected":
            fixed = "not affected" + (f" ({r.note})" if r.note else "")
        elif r.status == "no-fix":
            fixed = "no fix in this line: upgrade to a newer one" + (f" ({r.note})" if r.note else "")
        else:
            fixed = str(r.fixed or "")
        out.append(VersionRow(who, line, fixed, reference))
    return tuple(out)


def note_version(f: Finding, found: Versioned[Any] | None, component: str) -> None:
    """Record a version the finding rests on: in its versions, with the line that shows it."""
    if found is None:
        return
    f.versions_found[component] = str(found.value)
    if found.cite not in f.evidence:
        f.evidence.append(found.cite)


def kube_proxy_remedy(facts: Facts, rows: list[FixRow]) -> tuple[Remedy, dict[str, str], Cite | None]:
    """The version advice for kube-proxy, the versions found, and where the version was read."""
    kpv = facts.kube_proxy_version
    rem = remedy(kpv.value if kpv else None, rows)
    found = {"kube-proxy": str(kpv.value)} if kpv else {}
    return rem, found, (kpv.cite if kpv else None)


def apply_remedy(f: Finding, rem: Remedy, found: dict[str, str], where: Cite | None) -> Finding:
    f.versions_found.update(found)
    f.fixed_in = list(dict.fromkeys(f.fixed_in + rem.fixed_in))
    f.fix.insert(0, rem.advice[0].upper() + rem.advice[1:] + ".")
    if where is not None and where not in f.evidence:
        f.evidence.append(where)
    return f


def quiet_if_recovered(f: Finding, *, single_is_benign: bool = True) -> Finding:
    """A failure seen once and followed by successful syncs is worth knowing, not alarming."""
    if f.ongoing is False and (not single_is_benign or (f.occurrences or 0) <= 1):
        f.severity = Severity.INFO
        f.summary += " It happened once and later syncs succeeded."
    elif f.ongoing is False and f.severity == Severity.CRITICAL:
        f.severity = Severity.WARNING
        f.summary += " Later syncs succeeded (recovered)."
    return f
