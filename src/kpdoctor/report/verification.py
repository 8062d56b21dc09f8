"""The verification section: one row per Service port, shared by the text and Markdown renderers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kpdoctor.dataplane.expected import ENDPOINTS_UNKNOWN, TRAFFIC_CLASSES

TABLE_LIMIT = 50  # Services listed in full when there are at most this many (else only problems)


@dataclass(slots=True)
class Row:
    service: str
    status: str  # worst of its traffic classes: mismatch > uncertain > ok
    classes: str  # "pod ok, node ok, nodeport MISMATCH"
    details: list[str]


def summary(ver: Any) -> str:
    text, verdict = summary_parts(ver)
    return f"{text}: {verdict}" if verdict else text


def summary_parts(ver: Any) -> tuple[str, str]:
    """(what was checked, the verification's verdict: "clean", "MISMATCH", "inconclusive (...)";
    "" when not evaluated)."""
    if not ver.evaluated:
        text = f"not evaluated ({ver.services_checked} Service(s) in the evidence): {ver.reason}"
        if ver.stale:
            text += f"; {len(ver.stale)} destination(s) still forwarded by rules a mode switch left behind"
        return text, ""
    ok, bad, unc = ver.count("ok"), ver.count("mismatch"), ver.count("uncertain")
    verdict = "clean" if ver.clean else ("MISMATCH" if bad or ver.stale else "inconclusive")
    text = (
        f"{ver.services_checked} Service(s) checked, {len(ver.rows)} Service port x traffic class: "
        f"{ok} ok, {bad} mismatch, {unc} uncertain"
    )
    if ver.stale:
        text += f"; {len(ver.stale)} stale destination(s) no Service owns"
    if ver.unverified:  # not clean either: said, with where each is
        names = ", ".join(f"{svc} ({why})" for svc, why in ver.unverified[:3])
        text += f"; {len(ver.unverified)} Service(s) with nothing to verify: {names}"
        text += " ..." if len(ver.unverified) > 3 else ""
    if verdict == "inconclusive" and unc:
        verdict += f" ({unc} uncertain: their notes say why)"
    return text, verdict


def rows(ver: Any, show_all: bool) -> tuple[list[Row], int]:
    """Rows to print, and how many ok rows were left out (on a large node only the problems are
    listed, so only their rows are built)."""
    order = {"mismatch": 0, "uncertain": 1, "ok": 2}
    grouped: dict[str, list[tuple[int, str]]] = {}
    for i, (_, label, st) in enumerate(ver.statuses()):
        grouped.setdefault(label, []).append((i, st))
    everything = show_all or len(grouped) <= TABLE_LIMIT
    out: list[Row] = []
    hidden = 0
    for label, at in grouped.items():
        status = min((st for _, st in at), key=lambda s: order[s])
        if status == "ok" and not everything:
            hidden += 1
            continue
        rs = [ver.row(i) for i, _ in at]
        classes = ", ".join(
            f"{TRAFFIC_CLASSES[r.traffic][0]} {'ok' if r.status == 'ok' else r.status.upper()}" for r in rs
        )
        details = []
        for r in rs:
            if r.status == "ok":
                continue
            got = ", ".join(
                f"{e.endpoint or ('not translated' if e.verdict == 'ACCEPT' else e.verdict)} {e.probability:.0%}"
                + (f" (line {e.rule.line})" if e.rule and e.rule.line else "")
                for e in r.actual
            )
            want = " | ".join("refused" if a.refused else ", ".join(sorted(a.backends)) for a in r.expected)
            want = want or ("rules of its own (its endpoints are not shown)" if ENDPOINTS_UNKNOWN in r.note else "?")
            line = f"{TRAFFIC_CLASSES[r.traffic][0]} {r.destination}: expected {want}; got {got or 'nothing'}"
            if r.note:
                line += f" ({r.note})"
            details.append(line)
        out.append(Row(label, status, classes, details))
    out.sort(key=lambda x: (order[x.status], x.service))
    return out, hidden
