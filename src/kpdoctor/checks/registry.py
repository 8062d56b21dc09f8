"""The check registry: each check is a function plus its metadata and its documentation.

A check's docstring is its knowledge-base entry (``kpdoctor explain``), written with the sections
``Symptom:``, ``Cause:``, ``How it is detected:``, ``Fix:`` and ``References:``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kpdoctor import deadline
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.model import Confidence, Finding, InternalError, Severity, Skipped

if False:  # pragma: no cover - typing only
    from kpdoctor.facts import Facts

CheckFunc = Callable[["Facts"], Iterable[Finding]]
SECTIONS = ("Symptom", "Cause", "How it is detected", "Fix", "References")


@dataclass(frozen=True, slots=True)
class VersionRow:
    """One row of a cause's version table: who is affected, what fixes it, and where that is said.
    ``fixed`` is "" when no fixed release is known (the row says so, never guesses)."""

    component: str  # "kube-proxy", "kernel", "iptables", "nft", "k3s" ...
    affected: str
    fixed: str
    reference: str


@dataclass(frozen=True, slots=True)
class CheckSpec:
    code: str
    cause: str
    title: str
    severity: Severity  # the severity when the failure is confirmed and ongoing
    needs: tuple[Kind, ...]  # any one of these artifacts lets the check run
    func: CheckFunc
    needs_all: tuple[Kind, ...] = ()  # ... provided all of these are present too
    # What the check can still say without its evidence (from whatever is there: notes naming
    # what would decide, never a verdict); the check is reported as skipped all the same.
    partial: CheckFunc | None = None
    # Why the check must not judge this evidence although it is present (the verification it
    # reads was not evaluated: the node runs a proxy mode kpdoctor does not read), or None.
    abstains: Callable[[Facts], str | None] | None = None
    # The causes this root cause explains when both are found: their findings are folded under
    # this one (declared here, on the root cause, and read by ranking through ``explained_by``).
    explains: tuple[str, ...] = ()
    # The releases the cause affects and the ones that fix it (``kpdoctor explain`` prints them).
    versions: tuple[VersionRow, ...] = ()
    # The packet-loss counters a finding rests on: growing between two snapshots confirms it.
    # A node agent reads them every cycle and reports the finding only while one of them spikes.
    counters: tuple[str, ...] = ()

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.func.__doc__ or "")

    def sections(self) -> dict[str, str]:
        """The docstring split into its knowledge-base sections."""
        doc = self.doc
        out: dict[str, str] = {}
        pattern = re.compile(r"^(" + "|".join(SECTIONS) + r"):\s*", re.M)
        parts = pattern.split(doc)
        out["Summary"] = parts[0].strip()
        for i in range(1, len(parts) - 1, 2):
            out[parts[i]] = inspect.cleandoc(parts[i + 1])
        return out

    def reference_urls(self) -> list[str]:
        """The URLs of the docstring's References section (the finding's references)."""
        return re.findall(r"https?://[^\s;,)]+", self.sections().get("References", ""))

    def skipped(self, facts: Facts | None = None) -> Skipped:
        """Why it cannot run, said and as data: the evidence it reads, or (when that is there) what
        must come with it."""
        given = facts is not None and any(facts.has(k) for k in self.needs)
        if given and facts is not None:
            lacking = tuple(k.value for k in self.needs_all if not facts.has(k))
            present = next(k.value for k in self.needs if facts.has(k))
            reason = f"no {' and no '.join(lacking)} (needed together with the {present} given)"
            return Skipped(self.code, self.cause, reason, lacking, given=True)
        names = tuple(k.value for k in self.needs)
        also = tuple(k.value for k in self.needs_all)
        reason = f"no {names[0]}" if len(names) == 1 else "none of: " + ", ".join(names)
        if also:
            reason += " (needs " + " and ".join(also) + " too)"
        return Skipped(self.code, self.cause, reason, names, also=also)

    def can_run(self, facts: Facts) -> bool:
        return any(facts.has(k) for k in self.needs) and all(facts.has(k) for k in self.needs_all)


CHECKS: dict[str, CheckSpec] = {}


def check(
    code: str,
    *,
    cause: str,
    title: str,
    severity: Severity,
    needs: Iterable[Kind],
    needs_all: Iterable[Kind] = (),
    partial: CheckFunc | None = None,
    abstains: Callable[[Facts], str | None] | None = None,
    explains: Iterable[str] = (),
    versions: Iterable[VersionRow] = (),
    counters: Iterable[str] = (),
) -> Callable[[CheckFunc], CheckFunc]:
    """Register a check. Codes and causes are public, stable identifiers."""

    def deco(func: CheckFunc) -> CheckFunc:
        if code in CHECKS:
            raise ValueError(f"check code {code} registered twice")
        missing = [s for s in SECTIONS if f"{s}:" not in (func.__doc__ or "")]
        if missing:
            raise ValueError(f"check {code} docstring lacks sections: {', '.join(missing)}")
        CHECKS[code] = CheckSpec(
            code,
            cause,
            title,
            severity,
            tuple(needs),
            func,
            tuple(needs_all),
            partial,
            abstains,
            tuple(explains),
            tuple(versions),
            tuple(counters),
        )
        return func

    return deco


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
        parts.append(f"{len(other)} other inputs")
    if not parts:
        return "the finding's own reasoning (see the summary)"
    said = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return ("only " if f.confidence == Confidence.LOW and len(parts) == 1 else "") + said


def explained_by(cause: str) -> list[str]:
    """The root causes whose checks declare that they explain ``cause`` (the causality graph)."""
    out: list[str] = []
    for spec in sorted(CHECKS.values(), key=lambda c: c.code):
        if cause in spec.explains and spec.cause not in out:
            out.append(spec.cause)
    return out


def find(key: str) -> list[CheckSpec]:
    """Checks matching a code (``KP101``) or a cause slug."""
    key = key.strip()
    if key.upper() in CHECKS:
        return [CHECKS[key.upper()]]
    return [c for c in CHECKS.values() if c.cause == key.lower()]


def run_all(
    facts: Facts, only: tuple[str, ...] | None = None
) -> tuple[list[Finding], list[Skipped], int, list[InternalError]]:
    """Run every check whose evidence is present; report the others as skipped.

    A check that fails is a bug, reported with its code (``errors``: exit code 4) while the other
    checks still run: one odd artifact must not cost the user the whole diagnosis. When the run's
    --timeout is reached, the check it interrupted and the ones after it are skipped, saying so.
    ``only``: run just the checks whose codes start with one of these prefixes.
    """
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    errors: list[InternalError] = []
    ran = 0
    for spec in sorted(CHECKS.values(), key=lambda c: c.code):
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
            elif spec.abstains is not None and (why := spec.abstains(facts)):
                skipped.append(Skipped(spec.code, spec.cause, why))
                continue
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
