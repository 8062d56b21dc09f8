"""The pipeline: evidence -> facts -> checks -> ranked findings -> report."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator
from pathlib import Path

from kpdoctor import __version__
from kpdoctor.bundle.loader import Evidence, load
from kpdoctor.checks import run_all
from kpdoctor.dataplane.verify import service_matches
from kpdoctor.facts import Facts
from kpdoctor.model import InputProblem, Report, Severity
from kpdoctor.rank import rank

VERIFY_CODES = ("KP2",)


@contextlib.contextmanager
def allocation_heavy() -> Iterator[None]:
    """Pause the cyclic garbage collector: parsing and compiling a quarter of a million rules
    allocates millions of objects that live until the end, and without this Python re-scans them
    over and over (half the run time at 10,000 Services). Nothing here builds reference cycles
    that need collecting meanwhile."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()  # the checks `kpdoctor verify` runs: those reading the verification


def diagnose_evidence(
    evidence: Evidence,
    *,
    node: str | None = None,
    min_severity: Severity = Severity.WARNING,
    command: str = "diagnose",
    service: str | None = None,
    keep: list[object] | None = None,
) -> Report:
    """``keep``: gets the facts worked out (a caller about to exit need not free them)."""
    facts = Facts(evidence, node=node)
    if keep is not None:
        keep.append(facts)
    only = VERIFY_CODES if command == "verify" else None
    with allocation_heavy():
        findings, skipped, ran, errors = run_all(facts, only=only)
    problems = list(evidence.problems)
    problems += [InputProblem("kpdoctor", e) for e in errors]
    for d in facts.objects.diagnostics:
        problems.append(InputProblem("Kubernetes objects", str(d)))
    for rs in facts.rulesets:
        for d in rs.diagnostics[:3]:
            problems.append(InputProblem(rs.artifact, str(d)))
    ident = facts.node
    ver = facts.verification
    if ver is not None and service:
        ver = ver.only(service)
        findings = [f for f in findings if service_matches(f.subject.get("service"), service)]
    return Report(
        tool_version=__version__,
        node=ident.name if ident else None,
        collected_at=evidence.collected_at,
        artifacts=sorted({a.name for a in evidence.artifacts}),
        findings=rank(findings),
        skipped=skipped,
        checks_run=ran,
        problems=problems,
        min_severity=min_severity,
        verification=ver,
        command=command,
    )


def diagnose_paths(
    paths: Iterable[str | Path],
    *,
    node: str | None = None,
    min_severity: Severity = Severity.WARNING,
    command: str = "diagnose",
    service: str | None = None,
    keep: list[object] | None = None,
) -> tuple[Report, Evidence]:
    evidence = load(paths)
    try:
        report = diagnose_evidence(
            evidence, node=node, min_severity=min_severity, command=command, service=service, keep=keep
        )
        return report, evidence
    finally:
        evidence.close()


def exit_code(report: Report, evidence: Evidence) -> int:
    """0 clean, 1 findings at/above the threshold, 2 nothing usable, 3 inconclusive (DESIGN.md).

    For ``verify``: 1 on a mismatch (or stale rules), 3 when every result is uncertain."""
    if not evidence.artifacts:
        return 2
    if report.command == "verify":
        ver = report.verification
        if ver is None:
            return 2
        if ver.count("mismatch") or ver.stale:
            return 1
        if not ver.results or ver.count("uncertain") == len(ver.results):
            return 3
        return 0
    if report.visible():
        return 1
    if report.checks_run == 0:
        return 3
    return 0
