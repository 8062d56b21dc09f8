"""What kpdoctor knows: its checks and the log signatures they read, each declared once.

The ground floor of the package (docs/architecture.md): every stage reads these registries, none
has to import the checks to do so. They are filled as the check modules are imported, which the
entry points do (the command line, :func:`kpdoctor.run`, the agent, the kubectl plugin:
``import kpdoctor.checks``); :func:`catalogue` says so when that did not happen, rather than
letting a run type its inputs and scan its logs with no signature at all.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.messages.templates import regex_of
from kpdoctor.model import Finding, Severity, Skipped

SECTIONS = ("Symptom", "Cause", "How it is detected", "Fix", "References")

# A check reads the run's facts (kpdoctor.facts.Facts) and, when it says so, the dataplane's
# verification (kpdoctor.dataplane.session.Verified), and yields its findings. Both types live in
# layers above this one: every check function is typed with them, the registry takes any.
CheckFunc = Callable[..., Iterable[Finding]]


class Given(Protocol):
    """What the registry asks of the facts: which kinds of evidence hold something usable."""

    def has(self, kind: Kind) -> bool: ...


# -- log signatures -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Signature:
    """A log line that means something, declared next to the check that owns it.

    ``pattern`` must contain ``needle`` literally (the scanner only looks at lines holding the
    needle) and use only syntax that Python ``re`` and ``grep -E`` read the same way.

    ``failure``: a sync attempt failed; ``success``: a sync completed (a successful sync when no
    failure came since the previous one). Together they tell ongoing from recovered.

    ``variant``: a regular expression (Python syntax, no capturing group) searched in the hit's
    record, line by line. Hits whose records hold different matches (say ``ip6tables``, or the
    ``iptables-restore v1.8.4 (legacy)`` that failed) are different variants, and the first and
    last hit of every variant is kept, so a question such as "do all of them come from
    ip6tables-restore?" is answered exactly from the kept sample. Best with literal starts
    (``ip6tables|-restore v...``): only the lines holding one are then searched.

    ``generic``: other programs print the same line (``FLAG: --``, ``Version: v``), so it means
    something in a kube-proxy log but does not make a text one.
    """

    id: str
    needle: str
    pattern: str
    failure: bool = False
    success: bool = False
    variant: str = ""
    generic: bool = False

    def compiled(self) -> re.Pattern[str]:
        return regex_of(self.pattern)


# Every signature declared, by id (the check modules declare theirs as they are imported).
REGISTRY: dict[str, Signature] = {}


def signature(
    id: str,
    needle: str,
    pattern: str,
    *,
    failure: bool = False,
    success: bool = False,
    variant: str = "",
    generic: bool = False,
) -> Signature:
    """Declare (and register) a signature; ids are unique across kpdoctor."""
    sig = Signature(id, needle, pattern, failure, success, variant, generic)
    if needle not in pattern.replace("\\", ""):
        raise ValueError(f"signature {id}: needle {needle!r} not in its pattern")
    if variant and re.compile(variant).groups:
        raise ValueError(f"signature {id}: a variant has no capturing groups (use (?:...))")
    old = REGISTRY.get(id)
    if old is not None and old != sig:
        raise ValueError(f"signature {id!r} declared twice with different content")
    REGISTRY[id] = sig
    return sig


def catalogue() -> tuple[Signature, ...]:
    """Every signature kpdoctor knows: what a run scans logs for and how the sniffer tells a text
    from kube-proxy's world. Declared by the check modules, which the entry points import."""
    if not REGISTRY:
        raise RuntimeError("no log signature is declared: import kpdoctor.checks first (the entry points do)")
    return tuple(REGISTRY.values())


# -- checks -------------------------------------------------------------------------
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
    # reads was not evaluated: the node runs a proxy mode kpdoctor does not read), or None; called
    # with the verification (``Verified``).
    abstains: Callable[[Any], str | None] | None = None
    # The causes this root cause explains when both are found: their findings are folded under
    # this one (declared here, on the root cause, and read by ranking through ``explained_by``).
    explains: tuple[str, ...] = ()
    # The releases the cause affects and the ones that fix it (``kpdoctor explain`` prints them).
    versions: tuple[VersionRow, ...] = ()
    # The packet-loss counters a finding rests on: growing between two snapshots confirms it.
    # A node agent reads them every cycle and reports the finding only while one of them spikes.
    counters: tuple[str, ...] = ()
    # The check reads the dataplane's verification: it is called with it (``func(facts,
    # verified)``, a ``kpdoctor.dataplane.session.Verified``), as ``abstains`` always is.
    reads_verification: bool = False

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

    def skipped(self, facts: Given | None = None) -> Skipped:
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

    def can_run(self, facts: Given) -> bool:
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
    abstains: Callable[[Any], str | None] | None = None,
    explains: Iterable[str] = (),
    versions: Iterable[VersionRow] = (),
    counters: Iterable[str] = (),
    reads_verification: bool = False,
) -> Callable[[CheckFunc], CheckFunc]:
    """Register a check. Codes and causes are public, stable identifiers."""

    def deco(func: CheckFunc) -> CheckFunc:
        if code in CHECKS:
            raise ValueError(f"check code {code} registered twice")
        reads = reads_verification or abstains is not None
        if len(inspect.signature(func).parameters) != (2 if reads else 1):
            raise ValueError(f"check {code}: takes (facts, verified) exactly when it reads the verification")
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
            reads,
        )
        return func

    return deco


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
