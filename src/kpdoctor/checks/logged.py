"""KP130: a failure kube-proxy, its node tools or the kernel printed, named from the messages
catalogue (``src/kpdoctor/messages``) when no check of its own read the line.

The catalogue holds every message those programs can print, each with its class: a root cause
(with its slug), a symptom (with the causes it points to; a wrapper's payload decides first), or
routine. So a line no check was written for still says what it means: this check turns each such
reading into a finding, as sure as the message is (a cause the message proves; causes it only
points to, suspected; a failure the catalogue names no cause for, reported as unexplained).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kpdoctor.bundle.artifacts import HOW_TO_GIVE, Kind
from kpdoctor.checks.common import start
from kpdoctor.facts import Facts
from kpdoctor.facts.log import LoggedMessage, cite_line, logged_messages
from kpdoctor.knowledge import CHECKS, check, owners, tells_kube_proxy
from kpdoctor.messages.match import Match
from kpdoctor.messages.schema import Message
from kpdoctor.model import Confidence, Finding, Severity

UNATTRIBUTED = "logged-failure"
MAX_MESSAGES_SHOWN = 3
MAX_MESSAGES_CITED = 6  # one line of each message read, at most this many


@dataclass(frozen=True, slots=True)
class Reading:
    """What a logged message says: the cause it names (``proven``: the message itself is that
    failure) or points to, the other causes it may mean, and the messages read."""

    cause: str
    proven: bool
    alternatives: tuple[str, ...]
    wrapper: bool = False  # what a wrapper says by itself (the class of failure it reports)


def reading(match: Match) -> Reading | None:
    """The cause a line's messages name, the innermost known one first (a wrapper's payload
    decides, and a payload's own payload before it): a cause it proves, else the causes it and
    the messages around it point to. None when the outermost or the innermost message read is
    routine (``benign``): a clean-up of another mode's leftovers that failed, whatever nft said,
    or a tool's banner around "0 flow entries have been deleted.", is no failure."""
    chain = _chain(match)
    if chain[0].kind == "benign" or chain[-1].kind == "benign":
        return None  # a routine message (a clean-up of another mode) whatever it wraps
    suggests: list[str] = []
    for m in reversed(chain):
        if m.kind == "cause" and m.cause and not suggests:
            return Reading(m.cause, True, ())
        if m.kind != "benign":
            suggests += [c for c in [m.cause, *m.suggests] if c and c not in suggests]
    if suggests:
        return Reading(suggests[0], False, tuple(suggests[1:]))
    return Reading(UNATTRIBUTED, False, ())


def wrapper_reading(match: Match) -> Reading | None:
    """What a kube-proxy wrapper says by itself, whatever its payload: "nftables sync failed"
    proves that a sync failed (its first suggestion, the class of failure it reports) while the
    payload's message only points to why. None for a message that wraps nothing, is routine, or
    is a tool's banner."""
    if match.message.kind == "benign":
        return None
    at: Match | None = match
    while at is not None and at.payload is not None:  # "Error running ProxyServer" says nothing of its own:
        outer = at.message  # the wrapper inside it may ("kube-proxy configuration is incorrect: %v")
        if outer.component != "kube-proxy":
            return None  # a tool's banner ("iptables v1.8.9 (legacy): ...") reports no failure of its own
        if outer.payload and outer.kind != "benign" and outer.suggests:
            return Reading(outer.suggests[0], True, (), wrapper=True)
        at = at.payload
    return None


def _chain(match: Match) -> list[Message]:
    """A reading's messages, outermost first (a wrapper, its payload, the payload's)."""
    chain: list[Message] = []
    at: Match | None = match
    while at is not None:
        chain.append(at.message)
        at = at.payload
    return chain


def _tells(match: Match) -> bool:
    """Does any message of a reading (a wrapper, its payload...) tell kube-proxy's world?"""
    return any(tells_kube_proxy(m) for m in _chain(match))


def _read_by_own_check(cause: str) -> bool:
    """Does a check of ``cause`` read the catalogue's messages for it itself?"""
    return any(spec.cause == cause and spec.reads_messages for spec in CHECKS.values())


def messages_naming(facts: Facts, cause: str, wrappers: bool = False) -> list[LoggedMessage]:
    """The logged messages whose reading is ``cause`` (for a check that reads its own), or with
    ``wrappers`` whose wrapper proves it whatever its payload says; never a client's (where the
    path failed is a lead for KP130, not a check's evidence)."""
    out = []
    for lm in logged_messages(facts.log):
        if lm.match.message.client:
            continue
        r = reading(lm.match)
        w = wrapper_reading(lm.match) if wrappers else None
        if (r is not None and r.cause == cause) or (w is not None and w.cause == cause):
            out.append(lm)
    return out


def start_logged(
    facts: Facts,
    code: str,
    logged: Sequence[LoggedMessage],
    *,
    confidence: Confidence,
    severity: Severity | None = None,
) -> Finding:
    """A finding of check ``code`` on catalogue messages read in the log: their kept lines cited
    (the first and last, and one of each message besides: a message named is a message cited),
    every line read that way counted."""
    f = start(facts, code, [h for lm in logged for h in lm.hits], confidence=confidence, severity=severity)
    f.occurrences = sum(lm.count for lm in logged)
    for lm in logged[:MAX_MESSAGES_CITED]:
        c = cite_line(lm.hits[0]) if lm.hits else None
        if c is not None and c not in f.evidence:
            f.evidence.append(c)
    return f


def is_error(lm: LoggedMessage) -> bool:
    """Was it printed as an error (klog E/F, logrus error; a node tool's or the kernel's message,
    which carry no level, counts as one)?"""
    levels = {h.level for h in lm.hits if h.level} or ({lm.match.message.level} if lm.match.message.level else set())
    return not levels or bool(levels & {"E", "F"})


def innermost(match: Match) -> Message:
    """The message that says most: the payload of the payload... of a wrapper."""
    while match.payload is not None:
        match = match.payload
    return match.message


def _said(m: Message) -> str:
    return f"`{m.template}` ({m.component}: {m.meaning.rstrip('.')})"


@check(
    "KP130",
    cause=UNATTRIBUTED,
    title="A logged failure, named from the messages catalogue",
    severity=Severity.WARNING,
    needs=[Kind.KUBE_PROXY_LOG, Kind.KERNEL_LOG, Kind.LOOKUP_TIMING],
)
def logged_failure(facts: Facts) -> Iterator[Finding]:
    """A line kube-proxy, a node tool or the kernel printed means a failure that no other check read.

    Symptom: kube-proxy's log (or a pasted fragment of it, or of an iptables, ipset, ipvsadm,
        nft or conntrack error) holds error lines, and no finding explains them.
    Cause: whatever the message says: the messages catalogue names, for every message these
        programs can print, the root cause it proves or the causes it points to (a wrapper such
        as `Failed to execute iptables-restore` is read by the message of its payload).
    How it is detected: every line of kube-proxy's and the kernel's logs is matched against the
        catalogue's templates (`docs/messages.md`); a record that a dedicated check of a cause it
        may mean has read is left to that check. A
        message that proves a cause gives that cause at medium confidence; one that only points
        to causes gives the first as suspected, naming the others (at info when only info or
        warning lines point to it, or when the cause's own check could read this evidence and
        did not find it); a failure the catalogue knows no cause for is reported as
        unexplained (`logged-failure`), at info. A wrapper proves its own class of failure
        besides ("nftables sync failed": the sync failed, rule-sync-stale), whatever its payload
        points to. A dedicated check's finding of the same cause takes these lines in (they are
        folded under it).
    Fix: see the named cause (`kpdoctor explain CAUSE`); for an unexplained failure, the message
        and its meaning are the lead: send the log lines around it and the node's rule dumps.
    References: https://github.com/kubernetes/kubernetes/tree/master/pkg/proxy
    """
    by_cause: dict[str, list[tuple[LoggedMessage, Reading]]] = {}
    for lm in logged_messages(facts.log):
        if not _tells(lm.match):
            continue  # any Go program's error (a listen that failed), not inside a message of kube-proxy's world
        r = reading(lm.match)
        if r is None or owners(lm.read_by) & {r.cause, *r.alternatives}:
            continue  # routine, or a dedicated check of a cause it may mean read the same lines
        readings = [r]
        said = wrapper_reading(lm.match)
        if said is not None and said.cause != r.cause:
            readings.append(said)
        for x in readings:
            # a client's line is never a check's own evidence (messages_naming): KP130 names it
            if lm.match.message.client or not _read_by_own_check(x.cause):
                by_cause.setdefault(x.cause, []).append((lm, x))
    for cause, items in by_cause.items():
        yield _finding(facts, cause, items)


def _deciding(facts: Facts, cause: str) -> list[str]:
    """What decides a suspected cause: the commands for the evidence its own checks read that
    was not given (given, it would have been judged there)."""
    kinds = [k for spec in CHECKS.values() if spec.cause == cause for k in (*spec.needs, *spec.needs_all)]
    wanted = dict.fromkeys(k.value for k in kinds if not facts.has(k) and k.value in HOW_TO_GIVE)
    return [HOW_TO_GIVE[k] for k in wanted][:3]


def _finding(facts: Facts, cause: str, items: list[tuple[LoggedMessage, Reading]]) -> Finding:
    proven = any(r.proven for _, r in items)
    unattributed = cause == UNATTRIBUTED
    f = start_logged(
        facts, "KP130", [lm for lm, _ in items], confidence=Confidence.MEDIUM if proven else Confidence.LOW
    )
    f.cause = cause
    # a wrapper's own reading quotes the wrapper; any other, the innermost message read
    shown = list(dict.fromkeys(_said(lm.match.message if r.wrapper else innermost(lm.match)) for lm, r in items))
    more = len(shown) - MAX_MESSAGES_SHOWN
    listed = "; ".join(shown[:MAX_MESSAGES_SHOWN]) + (f"; and {more} more" if more > 0 else "")
    alternatives = sorted({a for _, r in items for a in r.alternatives if a != cause})
    if unattributed:
        f.severity = Severity.INFO
        f.title = "A logged failure kpdoctor cannot attribute to a cause"
        f.summary = f"The log holds failures no check explains: {listed}."
        f.fix = ["Send the log lines around these messages, and the node's rule dumps (`kpdoctor collect`)."]
        return f
    owner = next((spec for spec in sorted(CHECKS.values(), key=lambda s: s.code) if spec.cause == cause), None)
    f.title = owner.title if owner is not None else cause
    f.references = owner.reference_urls() if owner is not None else []
    if owner is not None and owner.severity < f.severity:
        f.severity = owner.severity
    if f.ongoing is False:
        f.severity = Severity.INFO  # syncs succeeded after the last of them
    if proven:
        f.summary = f"The log says so itself: {listed}."
    else:
        f.suspected = True
        judged = [spec.code for spec in CHECKS.values() if spec.cause == cause and spec.can_run(facts)]
        if not any(is_error(lm) for lm, _ in items):
            f.severity = Severity.INFO  # what info and warning lines point to is a lead, not an alarm
        elif all(lm.match.message.client for lm, _ in items):
            f.severity = Severity.INFO  # a client's error says where the path failed, not why
        elif judged:
            # the cause's own check read this evidence and did not find it: a lead, not an alarm
            f.severity = Severity.INFO
        f.summary = f"Suspected from what the log says: {listed}."
        f.decided_by = _deciding(facts, cause)
        if alternatives:
            f.summary += f" The same messages can also mean: {', '.join(alternatives)}."
    # a dedicated check's finding of the same cause (or of another reading) takes these lines in
    # (not under its own consequences: "the sync failed" is what the suspected cause would explain)
    consequences = {e for spec in CHECKS.values() if spec.cause == cause for e in spec.explains}
    f.explained_by = [cause, *(a for a in alternatives if a not in consequences)]
    f.fix = [f"`kpdoctor explain {cause}` says what confirms it and how to fix it."]
    return f
