"""The pipeline: evidence -> facts -> verification -> checks -> ranking -> report.

Each stage runs once per run and in this order; a stage's bug is an internal error of that
stage (exit 4) and the stages after it still run on what is known. The memo tables a run fills
are emptied when it ends (:mod:`kpdoctor.memo`), so the pipeline can run again and again in one
process (the node agent, a library user: :func:`kpdoctor.run`). The one-shot tricks of the
command line (the cyclic collector off, objects kept until exit) are the CLI's, not the run's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kpdoctor import deadline, memo
from kpdoctor.about import __version__
from kpdoctor.bundle.artifacts import CONTEXT_KINDS, Kind
from kpdoctor.bundle.loader import Evidence, load
from kpdoctor.checks.stage import run_all
from kpdoctor.coverage import coverage_of
from kpdoctor.dataplane.results import service_matches
from kpdoctor.dataplane.reuse import Reuse
from kpdoctor.dataplane.session import DataplaneInputs, Verified, failing_traces, verify
from kpdoctor.facts import Facts
from kpdoctor.model import InputProblem, InputRead, InternalError, Report, Severity, group_problems
from kpdoctor.parse.k8s import K8sObject
from kpdoctor.rank import rank
from kpdoctor.report.view import verdict

VERIFY_CODES = ("KP2",)


@dataclass(frozen=True, slots=True)
class Run:
    """One run's report, with the facts it was worked out from and the dataplane's inputs (the
    agent reads the node's counters and mode from the facts; ``kpdoctor verify`` and the tests
    look at them too)."""

    report: Report
    facts: Facts
    dataplane: DataplaneInputs


def diagnose_evidence(
    evidence: Evidence,
    *,
    node: str | None = None,
    min_severity: Severity = Severity.WARNING,
    command: str = "diagnose",
    service: str | None = None,
    reuse: Reuse | None = None,
    trace_failing: int = 0,
) -> Report:
    """One run on loaded evidence: its report (see :func:`pipeline`)."""
    return pipeline(
        evidence,
        node=node,
        min_severity=min_severity,
        command=command,
        service=service,
        reuse=reuse,
        trace_failing=trace_failing,
    ).report


def pipeline(
    evidence: Evidence,
    *,
    node: str | None = None,
    min_severity: Severity = Severity.WARNING,
    command: str = "diagnose",
    service: str | None = None,
    reuse: Reuse | None = None,
    trace_failing: int = 0,
    free: bool = True,
    choose_service: Callable[[list[K8sObject]], str | None] | None = None,
) -> Run:
    """One run on loaded evidence, every stage in order. ``reuse``: the previous run's
    verification results to carry over where nothing changed (the node agent's cycles;
    dataplane/reuse.py). ``trace_failing``: trace that many mismatched Service ports step by step
    (``Report.traces``: the HTML report draws them). ``free``: empty the run's memo tables when
    it ends (a caller about to exit, the command line, need not). ``choose_service``: which
    Service the run narrows to, from the evidence's Services (instead of ``service``: `kpdoctor
    verify --service` as users write it), before anything else is worked out; what it raises
    is the caller's."""
    try:
        facts = Facts(evidence, node=node, reuse=reuse)
        if choose_service is not None:
            service = choose_service(facts.objects.of("Service"))
        inputs = facts.dataplane_inputs()
        verified, stage_errors = verify_stage(inputs)
        only = VERIFY_CODES if command == "verify" else None
        findings, skipped, ran, check_errors = run_all(facts, verified, only=only)
        errors = evidence.errors + stage_errors + check_errors
        problems = list(evidence.problems)
        # After --timeout, only what was already worked out: nothing may start a parse now.
        partial = deadline.expired()

        def ready(name: str) -> bool:
            return not partial or name in vars(facts)

        ident, ver, covered = None, verified.verification, None
        deadline.stage("assembling the report")
        try:
            if ready("objects"):
                problems += [InputProblem("Kubernetes objects", str(d)) for d in facts.objects.diagnostics]
            if ready("rulesets"):
                for rs in facts.rulesets:
                    problems += [InputProblem(rs.artifact, str(d)) for d in rs.diagnostics[:3]]
            problems += [InputProblem(name, str(d)) for name, d in facts.diagnostics]
            for kind, why in facts.parsed_nothing(asked_only=partial).items():
                names = sorted({a.name for a in evidence.of(kind)})
                message = f"recognised as {kind.value}, but {why}: checks that need it are skipped"
                problems.append(InputProblem(", ".join(names), message))
            ident = facts.node if ready("node") else None
            if ver is not None and service:
                ver = ver.only(service)
                findings = [f for f in findings if service_matches(f.subject.get("service"), service)]
            findings = rank(findings)
            whole = frozenset(a.kind for a in evidence.artifacts if not a.attrs.get("fragment"))
            covered = coverage_of(findings, skipped, only, collected=evidence.collected_at is not None, whole=whole)
        except Exception as exc:  # a bug: the report is still written, with what is known
            errors.append(InternalError.of("assembling the report", exc))
        traces: dict[tuple[str, str], list[Any]] = {}
        if trace_failing and ver is not None and ver.count("mismatch") and not partial:
            deadline.stage("tracing the failing Services")
            try:
                traces = failing_traces(inputs, ver, trace_failing)
            except deadline.TimedOut:
                traces = {}
            except Exception as exc:  # the traces are an addition: the report stands without them
                errors.append(InternalError.of("tracing the failing Services", exc))
        report = Report(
            tool_version=__version__,
            node=ident.name if ident else None,
            node_rule=ident.describe() if ident else None,
            node_inferred=ident is not None and ident.inferred,
            collected_at=evidence.collected_at,
            artifacts=sorted({a.name for a in evidence.artifacts}),
            findings=findings,
            skipped=skipped,
            checks_run=ran,
            problems=group_problems(problems),
            min_severity=min_severity,
            verification=ver,
            command=command,
            errors=errors,
            timed_out=deadline.message(),
            inputs=inputs_read(evidence),
            damaged=sorted(set(evidence.damaged)),
            context_only=context_only(evidence),
            traces=traces,
            files=files_here(evidence),
            coverage=covered,
        )
        return Run(report, facts, inputs)
    finally:
        if free:
            memo.clear()


def files_here(evidence: Evidence) -> dict[str, str]:
    """Each artifact read whole from a file here, by name: that file, as an absolute path (the
    report may be rendered from another folder than the one the paths were given in)."""
    return {a.name: os.path.abspath(f) for a in evidence.artifacts if (f := a.path or a.origin) and a.first_line == 1}


def verify_stage(inputs: DataplaneInputs) -> tuple[Verified, list[InternalError]]:
    """The data-plane verification, as its own stage before the checks that read it: run once,
    and a bug in it is the verification's internal error (its checks then abstain, saying so),
    not an escape from whichever check asked first."""
    if deadline.expired():
        return Verified(), []
    deadline.stage("verification")
    try:
        return Verified(verify(inputs)), []
    except deadline.TimedOut:
        return Verified(failed="not finished: the run's --timeout was reached"), []
    except Exception as exc:  # contained: the rest of the report is still produced
        failed = "not evaluated: the verification failed (an internal error, reported)"
        return Verified(failed=failed), [InternalError.of("verification", exc)]


# What of an artifact's attributes tells the user how it was read (the rest is bookkeeping).
_SHOWN = ("scope", "backend", "family", "command", "paste", "part", "fragment", "previous", "snapshot", "stderr")


def inputs_read(evidence: Evidence) -> list[InputRead]:
    """Each input as it was read, in the order given: file (and line range of a transcript's
    part) -> kind, scope, backend, family, the command that printed it, wrapping taken off."""
    out = []
    for a in evidence.artifacts:
        last = None
        if a.path is None:
            last = a.first_line + max(0, a.text.count("\n") - (1 if a.text.endswith("\n") else 0))
        details = {k: a.attrs[k] for k in _SHOWN if a.attrs.get(k)}
        kind = a.kind.value
        if "family" in details:
            details["family"] = "IPv6" if details["family"] == "6" else "IPv4"
        if details.get("fragment") == "true" and a.kind == Kind.KUBE_PROXY_LOG:
            kind = "log lines"
            details["fragment"] = (
                "not a whole kube-proxy log: another program's, or lines without kube-proxy's header; "
                "read for the known messages they hold"
            )
        elif details.get("fragment") == "true" and a.kind == Kind.IPTABLES_LIST:
            details["fragment"] = (
                "rows or chain lines without the column header (grep'd): proves what is in it, not what is not"
            )
        elif details.get("fragment") == "true" and a.kind == Kind.MODULES:
            details["fragment"] = "filtered: what is listed is loaded, the rest unknown"
        elif details.get("fragment") == "true" and a.kind in (Kind.IPTABLES_SAVE, Kind.IPTABLES_RULES_S):
            details["fragment"] = "rules without their table lines: proves what is in it, not what is not"
        elif details.get("fragment") == "true":
            details["fragment"] = "a part of the listing (filtered or cut): proves what is in it, not what is not"
        out.append(InputRead(a.name, a.first_line, last, kind, details))
    return out


def diagnose_paths(
    paths: Iterable[str | Path],
    *,
    node: str | None = None,
    min_severity: Severity = Severity.WARNING,
    command: str = "diagnose",
    service: str | None = None,
) -> tuple[Report, Evidence]:
    evidence = load(paths)
    try:
        report = diagnose_evidence(evidence, node=node, min_severity=min_severity, command=command, service=service)
        return report, evidence
    finally:
        evidence.close()


def exit_code(report: Report) -> int:
    """0 clean, 1 findings at/above the threshold, 2 nothing usable, 3 inconclusive, 4 a bug met
    (the report is still written: DESIGN.md); the view's verdict (report/view.py), which the
    renderers show in words."""
    return verdict(report).code


def context_only(evidence: Evidence) -> bool:
    """Only versions and identity were given: checks may run on them, but nothing of the node's
    state was there to find a fault in (no findings is not "healthy")."""
    return bool(evidence.artifacts) and all(a.kind in CONTEXT_KINDS for a in evidence.artifacts)
