"""The report's vocabulary: findings, evidence citations, skipped checks.

These types are the public shape of ``kpdoctor.report/v1`` (see docs/report-schema.md); fields
may be added, never removed or renamed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "kpdoctor.report/v1"


class Severity(enum.IntEnum):
    """How bad it is. ``critical``: Service traffic is or will be lost."""

    INFO = 1
    WARNING = 2
    CRITICAL = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r} (use info, warning or critical)") from None


class Confidence(enum.IntEnum):
    """How sure kpdoctor is that the cause is real, given the evidence it saw."""

    LOW = 1
    MEDIUM = 2
    HIGH = 3

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Cite:
    """One line of evidence: which artifact, which line of the user's original file, the text."""

    artifact: str
    line: int | None
    text: str
    # Which component wrote the line (kube-proxy, kubelet, flannel, ...), decided from the line
    # itself (syslog ident, klog source file, log format, aggregator prefix); None: not known.
    writer: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"artifact": self.artifact, "line": self.line, "text": self.text}
        if self.writer:
            out["writer"] = self.writer
        return out

    @property
    def whose(self) -> str:
        """The writer as the reports say it ("flannel's log line"), or "" when not known."""
        return f"{self.writer}'s log line" if self.writer else ""

    @property
    def where(self) -> str:
        """``artifact:line (flannel's log line)``: the place every report names for it."""
        place = f"{self.artifact}:{self.line}" if self.line else self.artifact
        return f"{place} ({self.whose})" if self.writer else place


@dataclass(slots=True)
class Finding:
    """A cause kpdoctor found, with its proof and its fix."""

    code: str
    cause: str
    severity: Severity
    confidence: Confidence
    title: str
    summary: str
    evidence: list[Cite] = field(default_factory=list)
    fix: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    occurrences: int | None = None
    first_seen: str | None = None
    last_seen: str | None = None
    ongoing: bool | None = None
    versions_found: dict[str, str] = field(default_factory=dict)
    fixed_in: list[str] = field(default_factory=list)
    subject: dict[str, str | None] = field(default_factory=dict)
    explains: list[str] = field(default_factory=list)
    # Causes this finding is a consequence of (by cause slug): used by ranking to fold it.
    explained_by: list[str] = field(default_factory=list)
    # Findings folded under this one (kept so renderers can show them nested).
    folded: list[Finding] = field(default_factory=list)
    # The cause (slug) whose evidence this finding reads otherwise, when nothing given tells the
    # two apart: a second candidate for the same lines, ranked on its own and never a parent.
    alternative_to: str | None = None
    # Named from what fits it, not proven: a lead (with what decides it in the summary); it takes a
    # consequence in only when no proven cause explains that.
    suspected: bool = False
    # For a suspected cause: the commands whose output confirms it or rules it out (the check's
    # own missing proof, said as what to run).
    decided_by: list[str] = field(default_factory=list)
    # Why the confidence is what it is: which kinds of evidence agree (a lone log line; the
    # signature and a matching version; and the node's state). Set by the check, or derived.
    confidence_reason: str = ""

    def explained_by_any(self, by_cause: dict[str, list[Finding]]) -> bool:
        """True when another present finding explains this one (so it cannot be a parent); an
        alternative reading explains nothing."""
        return any(
            c in by_cause and any(p is not self and not p.alternative_to and not p.suspected for p in by_cause[c])
            for c in self.explained_by
        )

    def with_folded(self) -> Iterator[Finding]:
        """This finding and every finding folded under it, at any depth."""
        todo = [self]
        while todo:
            f = todo.pop()
            yield f
            todo += f.folded

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code,
            "cause": self.cause,
            "severity": self.severity.label,
            "confidence": self.confidence.label,
            "confidence_reason": self.confidence_reason,
            "title": self.title,
            "summary": self.summary,
            "subject": self.subject or {"service": None, "workload": None},
            "occurrences": self.occurrences,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "ongoing": self.ongoing,
            "versions": {"found": dict(self.versions_found), "fixed_in": list(self.fixed_in)},
            "explains": list(self.explains),
            "evidence": [c.to_json() for c in self.evidence],
            "fix": list(self.fix),
            "references": list(self.references),
        }
        if self.alternative_to:
            out["alternative_to"] = self.alternative_to
        if self.suspected:
            out["suspected"] = True
        if self.decided_by:
            out["decided_by"] = list(self.decided_by)
        if self.folded:
            out["folded"] = [f.to_json() for f in self.folded]
        return out


@dataclass(frozen=True, slots=True)
class Skipped:
    """A check that could not run, and what evidence it lacked."""

    code: str
    cause: str
    reason: str
    # The evidence kinds (Kind values) whose absence is the reason: any one of them when none of
    # what the check reads was given (``also``: what it needs besides), else the ones that must
    # come with what was given (``given``). Empty: the reason is not missing evidence.
    lacking: tuple[str, ...] = ()
    given: bool = False
    also: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "cause": self.cause, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class InputRead:
    """How one input (a file, or one command's output in a pasted session) was read: a user
    sees that their kubelet log was not taken for kube-proxy's, or that an output from inside a
    container was not taken for the host's."""

    source: str
    first_line: int
    last_line: int | None  # None: a file streamed from disk (a large log), not counted
    kind: str
    details: dict[str, str] = field(default_factory=dict)  # scope, backend, family, command, paste...

    def where(self) -> str:
        whole = self.details.get("command") is None and self.details.get("part") is None
        if self.last_line is None or (self.first_line == 1 and whole):
            return self.source
        return f"{self.source}:{self.first_line}-{self.last_line}"

    def describe(self) -> str:
        """``file:3-9 -> iptables-save output (backend nft; output of `iptables-save -t nat`)``."""
        notes = [
            f"{k} {v}" for k, v in self.details.items() if k not in ("command", "paste", "part", "fragment", "family")
        ]
        if "family" in self.details:
            notes.insert(0, self.details["family"])
        if "command" in self.details:
            notes.append(f"output of `{self.details['command']}`")
        if "paste" in self.details:
            notes.append(f"{self.details['paste']} taken off")
        if "part" in self.details:
            notes.append(self.details["part"])
        if "fragment" in self.details:
            notes.append(self.details["fragment"])
        return f"{self.where()} -> {self.kind}" + (f" ({'; '.join(notes)})" if notes else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "lines": [self.first_line, self.last_line],
            "kind": self.kind,
            **self.details,
        }


@dataclass(frozen=True, slots=True)
class InputProblem:
    """An input that could not be used (unreadable, unrecognised, unsafe), said in one line;
    ``count`` inputs when many had the same problem (``source`` then names the first)."""

    source: str
    message: str
    count: int = 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "message": self.message}
        if self.count > 1:
            out["count"] = self.count
        return out


MAX_PROBLEM_CHARS = 500  # a problem quoting evidence (a chain name, a kind) quotes this much of it


def _bounded(p: InputProblem) -> InputProblem:
    """A problem said in one readable line, however long the evidence it quotes (a 2 MB chain
    name costs a renderer seconds and helps nobody)."""

    def cut(text: str) -> str:
        return text if len(text) <= MAX_PROBLEM_CHARS else text[: MAX_PROBLEM_CHARS - 5] + " [...]"

    if len(p.message) <= MAX_PROBLEM_CHARS and len(p.source) <= MAX_PROBLEM_CHARS:
        return p
    return InputProblem(cut(p.source), cut(p.message), p.count)


def group_problems(problems: list[InputProblem], keep: int = 3) -> list[InputProblem]:
    """Problems with the same message, once there are more than ``keep`` of them, as one line
    ("many/0.txt and 19,985 more"): 20,000 unreadable files must not bury the report."""
    by_message: dict[str, list[InputProblem]] = {}
    for p in problems:
        p = _bounded(p)
        by_message.setdefault(p.message, []).append(p)
    out: list[InputProblem] = []
    for message, same in by_message.items():
        if len(same) <= keep:
            out.extend(same)
            continue
        total = sum(p.count for p in same)
        out.append(InputProblem(f"{same[0].source} and {total - same[0].count:,} more", message, total))
    return out


@dataclass(frozen=True, slots=True)
class InternalError:
    """A bug met while working (exit code 4): which stage failed, and how; the rest still ran."""

    stage: str  # "check KP200", "reading node3.tar.gz", "report"
    error: str  # "TypeError: '<' not supported between instances of 'str' and 'NoneType'"

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "error": self.error}

    @classmethod
    def of(cls, stage: str, exc: BaseException) -> InternalError:
        return cls(stage, f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True, slots=True)
class FamilyCoverage:
    """How much of one family of causes a run could check."""

    family: str
    codes: str  # the family's check-code prefix ("KP3")
    ran: int
    total: int
    ruled_out: bool  # enough of its checks ran for "nothing found" to mean "not this family"

    def to_json(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "codes": self.codes,
            "checks_run": self.ran,
            "checks": self.total,
            "ruled_out": self.ruled_out,
        }


@dataclass(frozen=True, slots=True)
class Coverage:
    """What a run could rule out (kpdoctor.coverage): a clean bill of health needs all of it."""

    checks_run: int
    checks: int
    families: tuple[FamilyCoverage, ...]
    unexplained: int  # findings of what nothing explains, at any severity (folded ones too)
    suspected: int  # suspected causes, at any severity
    send: tuple[str, ...]  # what to send so that the rest can be checked

    @property
    def complete(self) -> bool:
        """Every family ruled out, nothing unexplained and nothing suspected."""
        return all(f.ruled_out for f in self.families) and not self.unexplained and not self.suspected

    def not_ruled_out(self) -> list[str]:
        return [f.family for f in self.families if not f.ruled_out]

    def why(self) -> str:
        """Why a run that found nothing is not a clean bill of health, in one sentence."""
        parts = []
        if open_ := self.not_ruled_out():
            parts.append(f"{self.checks_run} of {self.checks} checks could run; not ruled out: " + "; ".join(open_))
        if self.unexplained:
            parts.append(f"{self.unexplained} unexplained signal(s) below the threshold")
        if self.suspected:
            parts.append(f"{self.suspected} suspected cause(s) below the threshold")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "complete": self.complete,
            "checks_run": self.checks_run,
            "checks": self.checks,
            "families": [f.to_json() for f in self.families],
            "not_ruled_out": self.not_ruled_out(),
            "unexplained": self.unexplained,
            "suspected": self.suspected,
            "send": list(self.send),
        }


@dataclass(slots=True)
class Report:
    """Everything a renderer needs; renderers add no logic of their own."""

    tool_version: str
    node: str | None
    collected_at: str | None
    artifacts: list[str]
    findings: list[Finding]
    skipped: list[Skipped]
    checks_run: int
    problems: list[InputProblem]
    min_severity: Severity = Severity.WARNING
    # kpdoctor.dataplane.verify.Verification when rules and Services were both given
    verification: Any = None
    command: str = "diagnose"  # diagnose | verify: what the renderers lay out
    show_all: bool = False  # verify: list Services that verified ok too
    errors: list[InternalError] = field(default_factory=list)  # bugs met (exit 4); the rest still ran
    timed_out: str | None = None  # "gave up after 120 s (--timeout) while check KP200": the run is partial
    inputs: list[InputRead] = field(default_factory=list)  # how each input was read
    damaged: list[str] = field(default_factory=list)  # inputs that lost part of themselves (never clean)
    context_only: bool = False  # only versions and identity were given: no findings is not "healthy"
    # How the reader asked for it (report/view.py): a threshold they chose hides what is below it;
    # verbose lists every skipped check
    threshold_explicit: bool = False
    verbose: bool = False
    # failing Service ports traced step by step, by (label, traffic): for a report that draws their
    # paths chain by chain (the HTML page); computed only when asked (diagnose_evidence(trace_failing=))
    traces: dict[tuple[str, str], list[Any]] = field(default_factory=dict)
    # which rule chose the node (facts.NodeIdentity.describe): the report says it
    node_rule: str | None = None
    node_inferred: bool = False  # chosen by the hostname, the addresses or the override: said on the first screen
    # artifact name -> the file here that holds it whole (a folder bundle's kube-proxy/log.txt is
    # ./bundle/kube-proxy/log.txt): where a report that shows context reads the cited lines again
    files: dict[str, str] = field(default_factory=dict)
    # what the run could rule out (kpdoctor.coverage); None when no check stage ran
    coverage: Coverage | None = None

    def visible(self) -> list[Finding]:
        """Ranked findings at or above the requested severity."""
        return [f for f in self.findings if f.severity >= self.min_severity]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "tool": {"name": "kpdoctor", "version": self.tool_version},
            "subject": {
                "node": self.node,
                "node_rule": self.node_rule,
                "collected_at": self.collected_at,
                "artifacts": list(self.artifacts),
            },
            "findings": [f.to_json() for f in self.visible()],
            "skipped": [s.to_json() for s in self.skipped],
            "checks_run": self.checks_run,
            "input_problems": [p.to_json() for p in self.problems],
            "min_severity": self.min_severity.label,
            "internal_errors": [e.to_json() for e in self.errors],
            "inputs": [i.to_json() for i in self.inputs],
            **({"coverage": self.coverage.to_json()} if self.coverage is not None else {}),
            **({"timed_out": self.timed_out} if self.timed_out else {}),
            **({"verification": self.verification.to_json()} if self.verification is not None else {}),
        }
