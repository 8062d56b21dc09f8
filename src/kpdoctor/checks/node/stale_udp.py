"""KP312: UDP conntrack entries that keep a Service's clients on no backend or a dead one."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.checks.common import start
from kpdoctor.checks.registry import check
from kpdoctor.facts import Facts
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.conntrack import ConntrackEntry

MAX_SHOWN = 3


def _service_backends(facts: Facts) -> dict[str, set[str] | None]:
    """Each Service ClusterIP -> the addresses of its endpoints (None: its endpoints are not given)."""
    eps = facts.cluster.endpoints_of()
    out: dict[str, set[str] | None] = {}
    for svc in facts.cluster.services:
        mine = eps.get(svc.key)
        for ip in svc.cluster_ips:
            out[ip] = None if mine is None else {a for e in mine for a in e.addresses}
    return out


def _translated(e: ConntrackEntry) -> bool:
    return e.reply_src != e.dst


def _unanswered(facts: Facts, entries: list[tuple[Artifact, ConntrackEntry]]) -> Finding:
    a, e = entries[0]
    f = start(facts, "KP312", [], confidence=Confidence.LOW, severity=Severity.WARNING)
    f.confidence_reason = "the conntrack entries alone; the Service's endpoints were not given"
    dns = " (DNS)" if e.dport == 53 else ""
    f.summary = (
        f"{len(entries)} UDP flow(s) to {e.dst}:{e.dport}{dns} were translated to {e.reply_src}, which never "
        "answered ([UNREPLIED]): a live backend answers, so the entry most likely holds the client on a backend "
        "that is gone, and stays while the client keeps sending from the same port. The Service's EndpointSlices "
        f"tell: is {e.reply_src} still one of its endpoints?"
    )
    for a, e in entries[:MAX_SHOWN]:
        f.evidence.append(Cite(a.name, e.line, e.text.strip()))
    f.fix = [
        f"If {e.reply_src} is no longer an endpoint, delete the entries (`conntrack -D -p udp --orig-dst "
        f"{e.dst}`), then find why kube-proxy did not (its log, its version: k/k#125467's event-based clean-up)."
    ]
    return f


@check(
    "KP312",
    cause="stale-udp-conntrack",
    title="UDP conntrack entries hold a Service's clients on no backend or a dead one",
    severity=Severity.WARNING,
    needs=[Kind.CONNTRACK_ENTRIES],
)
def stale_udp_conntrack(facts: Facts) -> Iterator[Finding]:
    """A UDP flow to a Service address keeps a conntrack entry that points nowhere useful.

    Symptom: DNS (or another UDP Service) keeps timing out for some clients after its Pods
        were replaced or the Service got endpoints again, while other clients work;
        `conntrack -L -p udp` shows `dst=10.96.0.10 ... dport=53 [UNREPLIED] src=10.96.0.10`
        (never translated) or a reply source that is no longer an endpoint.
    Cause: conntrack keeps a UDP flow's translation while packets keep coming (30 s refreshed
        by each one); kube-proxy must delete the entries when endpoints change. A flow that
        began while the Service had no endpoints was never DNATed, and an entry whose
        clean-up failed (no conntrack binary, a missed event) keeps the dead backend.
    How it is detected: UDP entries whose original destination is a Service address (from the
        Services given, or proved virtual by another entry that was translated) and whose
        reply comes from that same address (never DNATed), or from an address that is not one
        of the Service's endpoints (when the EndpointSlices are given); without them, a
        translated UDP flow that was never answered ([UNREPLIED]) is reported at low confidence.
    Fix: delete the entries (`conntrack -D -p udp --orig-dst SERVICE_IP`), then find why
        kube-proxy did not: its log (conntrack binary missing, netlink errors) and version
        (k/k#48370 fixed the empty-to-non-empty case in 1.7; k/k#125467 event-based clean-up).
    References: https://github.com/kubernetes/kubernetes/issues/48370;
        https://github.com/kubernetes/kubernetes/issues/125467
    """
    entries = [(a, e) for a, e in facts.node_state.conntrack_entries if e.proto == "udp"]
    if not entries:
        return
    services = _service_backends(facts)
    # a destination another flow was DNATed from is virtual for that port (a host port forward is
    # virtual only for its own port)
    virtual = {(e.dst, e.dport) for _a, e in entries if _translated(e)}
    never = [(a, e) for a, e in entries if not _translated(e) and (e.dst in services or (e.dst, e.dport) in virtual)]
    dead = [
        (a, e)
        for a, e in entries
        if _translated(e) and (eps := services.get(e.dst)) is not None and e.reply_src not in eps
    ]
    # with no EndpointSlices to compare, a translated flow its backend never answered: that
    # backend is gone or unreachable (a live one answers), which only the endpoints can confirm
    unanswered = [
        (a, e) for a, e in entries if _translated(e) and "UNREPLIED" in e.flags and services.get(e.dst) is None
    ]
    if not never and not dead:
        if unanswered:
            yield _unanswered(facts, unanswered)
        return
    f = start(facts, "KP312", [], confidence=Confidence.MEDIUM)
    parts = []
    if never:
        a, e = never[0]
        parts.append(
            f"{len(never)} UDP flow(s) to Service address {e.dst}:{e.dport} were never translated to a backend "
            f"(the reply comes from {e.reply_src} itself): they began while the Service had no endpoints and "
            "stay so while the client keeps sending"
        )
        if e.dst in services:
            f.confidence = Confidence.HIGH
    if dead:
        a, e = dead[0]
        parts.append(
            f"{len(dead)} UDP flow(s) to {e.dst}:{e.dport} still go to {e.reply_src}, which is not one of the "
            "Service's endpoints"
        )
        f.confidence = Confidence.HIGH
    f.summary = "; ".join(parts) + "."
    f.confidence_reason = (
        "the Services given name the address"
        if f.confidence == Confidence.HIGH
        else "another flow to the same address and port was translated (the address is virtual)"
    )
    for a, e in (never + dead)[:MAX_SHOWN]:
        f.evidence.append(Cite(a.name, e.line, e.text.strip()))
    if any(e.dport == 53 for _a, e in never + dead):
        f.severity = Severity.CRITICAL
        f.summary += " These are DNS flows: those clients cannot resolve names."
    f.fix = [
        "Delete them: `conntrack -D -p udp --orig-dst SERVICE_IP` (the client's next packet is translated anew).",
        "Then find why kube-proxy did not: its log (conntrack binary missing, netlink errors) and its version.",
    ]
    yield f
