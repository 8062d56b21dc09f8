"""Ranking: the most likely root cause first; symptoms of a reported cause folded under it."""

from __future__ import annotations

from kpdoctor.knowledge import UNEXPLAINED, explained_by
from kpdoctor.model import Finding, Severity

_ONGOING = {True: 2, None: 1, False: 0}


def score(f: Finding) -> tuple[int, int, int, int, int]:
    return (int(f.severity), _ONGOING[f.ongoing], int(f.confidence), len(f.explains), f.occurrences or 0)


def rank(findings: list[Finding]) -> list[Finding]:
    """Fold each finding under a finding of a cause that explains it, then sort.

    A parent takes the worst severity of what it explains: a warning-level misconfiguration
    that drops traffic through its consequence is the critical root cause. An alternative reading
    of the same evidence (``alternative_to``) is ranked on its own and folds nothing: nothing given
    says it is the cause, so it cannot take another finding's place. A suspected cause
    (``suspected``) takes a consequence in only when no proven cause explains it: it is then the
    lead, and says it is suspected. What nothing explains folds under the first proven root
    cause (see :func:`_fold_unexplained`).
    """
    by_cause: dict[str, list[Finding]] = {}
    for f in findings:
        by_cause.setdefault(f.cause, []).append(f)
        # the graph the root causes declare (CheckSpec.explains), after the finding's own reasons
        f.explained_by.extend(c for c in explained_by(f.cause) if c not in f.explained_by and c != f.cause)
    top: list[Finding] = []
    for f in findings:
        candidates = [
            p
            for cause in f.explained_by
            for p in by_cause.get(cause, [])
            if p is not f and not p.alternative_to and not p.explained_by_any(by_cause)
            # two suspected causes that name each other are alternatives, neither the other's
            # parent (folded under each other, both would be gone)
            and not (p.suspected and f.suspected and f.cause in p.explained_by)
        ]
        # a proven cause first; a suspected one only when none is found (it is then the lead)
        parent = next((p for p in candidates if not p.suspected), None) or next(iter(candidates), None)
        if parent is None:
            top.append(f)
            continue
        twin = next((g for g in parent.folded if g.cause == f.cause), None)
        if twin is not None:  # a second reading of a consequence already folded: under that one
            twin.folded.append(f)
            continue
        parent.folded.append(f)
        if f.code not in parent.explains:
            parent.explains.append(f.code)
        if f.severity > parent.severity and f.cause != parent.cause:
            # (the same cause read twice: the parent's own check weighed it, recovery included)
            parent.severity = f.severity
        if f.ongoing and not parent.ongoing:
            parent.ongoing = True if parent.ongoing is None else parent.ongoing
    top.sort(key=score, reverse=True)
    return _fold_unexplained(top)


def _fold_unexplained(top: list[Finding]) -> list[Finding]:
    """What nothing explains goes under the first proven root cause at warning or above, when
    there is one: the run has an answer, and these lines are what is left to read beside it."""
    root = next(
        (f for f in top if f.cause not in UNEXPLAINED and not f.suspected and f.severity >= Severity.WARNING), None
    )
    if root is None:
        return top
    rest = []
    for f in top:
        if f.cause in UNEXPLAINED and f.severity <= root.severity:
            root.folded.append(f)
        else:
            rest.append(f)
    return rest
