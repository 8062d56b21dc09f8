"""The checks stage: every check whose evidence is there runs once, on the run's facts and the
dataplane's verification; the others are reported as skipped, with why.

The checks themselves and their metadata are declared in :mod:`kpdoctor.knowledge`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kpdoctor import deadline
from kpdoctor.knowledge import CHECKS
from kpdoctor.model import Confidence, Finding, InternalError, Skipped

if TYPE_CHECKING:
    from kpdoctor.dataplane.session import Verified
    from kpdoctor.facts import Facts


def confidence_reason(f: Finding) -> str:
    """What the finding's confidence rests on, from the kinds of evidence it cites: the log's
    lines, the versions found, the node's state and the cluster's objects (a check that weighs
    them otherwise says so itself)."""
    logged = bool(f.occurrences) or any(c.writer for c in f.evidence)
    other = sorted({c.artifact for c in f.evidence if not c.writer and c.artifact})
    parts = []
    if logged:
        parts.append(f"{f.occurrences} matching log line(s)" if f.occurrences else "the log lines cited")
    if f.versions_found:
        parts.append("the versions found")
    if len(other) == 1:
        parts.append(other[0].rsplit("/", 1)[-1])
    elif other:
        parts.append(f"{len(other)} {'other ' if parts else ''}inputs")  # "other" than the log or versions named
    if not parts:
        return "the finding's own reasoning (see the summary)"
    said = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return ("only " if f.confidence == Confidence.LOW and len(parts) == 1 else "") + said


def run_all(
    facts: Facts, verified: Verified, only: tuple[str, ...] | None = None
) -> tuple[list[Finding], list[Skipped], int, list[InternalError]]:
    """Run every check whose evidence is present; report the others as skipped.

    A check that fails is a bug, reported with its code (``errors``: exit code 4) while the other
    checks still run: one odd artifact must not cost the user the whole diagnosis. When the run's
    --timeout is reached, the check it interrupted and the ones after it are skipped, saying so.
    ``verified``: the dataplane stage's verification, handed to the checks that read it.
    ``only``: run just the checks whose codes start with one of these prefixes.
    """
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    errors: list[InternalError] = []
    ran = 0
    # the checks that read the others' findings come last (KP140: what none of them explains)
    for spec in sorted(CHECKS.values(), key=lambda c: (c.reads_findings, c.code)):
        if only is not None and not spec.code.startswith(only):
            continue
        if deadline.expired():
            skipped.append(Skipped(spec.code, spec.cause, "not run: the run's --timeout was reached"))
            continue
        deadline.stage(f"check {spec.code}")
        try:
            # can_run parses what the check needs (evidence that parses to nothing skips it): a
            # parser's failure there is this check's, contained like one in the check itself
            if not spec.can_run(facts):
                skipped.append(spec.skipped(facts))
                if spec.partial is None:
                    continue
                produced = list(spec.partial(facts))
            elif spec.abstains is not None and (why := spec.abstains(verified)):
                skipped.append(Skipped(spec.code, spec.cause, why))
                continue
            else:
                if spec.reads_findings:
                    produced = list(spec.func(facts, tuple(findings)))
                elif spec.reads_verification:
                    produced = list(spec.func(facts, verified))
                else:
                    produced = list(spec.func(facts))
                ran += 1
        except deadline.TimedOut:
            skipped.append(Skipped(spec.code, spec.cause, "not finished: the run's --timeout was reached"))
            continue
        except Exception as exc:  # contained and reported, see docstring
            errors.append(InternalError.of(f"check {spec.code}", exc))
            continue
        for f in produced:
            f.code = f.code or spec.code
            f.confidence_reason = f.confidence_reason or confidence_reason(f)
            findings.append(f)
    return findings, skipped, ran, errors
