"""Helpers that several checks use to build findings from log hits and versions."""

from __future__ import annotations

from kpdoctor.facts import Facts
from kpdoctor.facts.log import cite
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.logscan import Hit
from kpdoctor.versions import FixRow, Remedy, remedy

MAX_EVIDENCE_HITS = 3


def log_finding(
    facts: Facts,
    hits: list[Hit],
    *,
    cause: str,
    severity: Severity,
    confidence: Confidence,
    title: str,
    summary: str,
    fix: list[str],
    references: list[str],
) -> Finding:
    """A finding for a repeated log signature: one finding, counted, with first/last lines."""
    hs = sorted(hits, key=lambda h: h.order)
    occ = facts.log.occurrence(hs)
    evidence: list[Cite] = []
    shown = hs[:1] + hs[-1:] if len(hs) > 1 else hs
    for h in shown[:MAX_EVIDENCE_HITS]:
        for c in cite(h):
            if c not in evidence:
                evidence.append(c)
    total = max(len(hs), max((facts.log.scan.counts.get(h.sig, 0) for h in hs), default=0))
    return Finding(
        code="",
        cause=cause,
        severity=severity,
        confidence=confidence,
        title=title,
        summary=summary,
        evidence=evidence,
        fix=fix,
        references=references,
        occurrences=total if hs else None,
        first_seen=occ.first.timestamp if occ else None,
        last_seen=occ.last.timestamp if occ else None,
        ongoing=occ.ongoing if occ else None,
    )


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
