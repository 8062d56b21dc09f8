"""KP312: UDP conntrack entries that keep a Service's clients on no backend or a dead one."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass, field

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.checks.common import start, suspect
from kpdoctor.dataplane.addresses import endpoint_text
from kpdoctor.dataplane.addresses import one_spelling as _ip
from kpdoctor.dataplane.results import Result
from kpdoctor.dataplane.session import Verified
from kpdoctor.facts import Facts
from kpdoctor.facts.cluster import EndpointView, ServiceView
from kpdoctor.facts.node import interval, parse_time
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.conntrack import ConntrackEntry

MAX_SHOWN = 3
DNS_PORT = 53
# net.netfilter.nf_conntrack_udp_timeout's default: how long an unanswered UDP entry lives after
# the client's last packet (each packet sets it again)
UDP_TIMEOUT = 30

Seen = tuple[Artifact, ConntrackEntry]
FlowKey = tuple[str, str, int | None, int | None, str, int | None]


def _translated(e: ConntrackEntry) -> bool:
    return _ip(e.reply_src) != _ip(e.dst)


def _answered(e: ConntrackEntry) -> bool:
    return "UNREPLIED" not in e.flags


def _dns(port: int | None) -> str:
    return " (DNS)" if port == DNS_PORT else ""


@dataclass(frozen=True, slots=True)
class _Target:
    """The Service a flow's destination belongs to, and its endpoints now."""

    service: str
    backends: frozenset[str] | None  # its endpoints' addresses; None: the endpoints are not given
    named: bool  # the Services given name the address (else inferred from the EndpointSlices)
    how: str  # how the flow is known to be this Service's (for the confidence reason)
    endpoints_how: str = ""  # where its endpoints come from
    listed: bool = True  # its own EndpointSlices (or Endpoints) are given, not only other Services'


@dataclass(slots=True)
class _Flow:
    """One tracked flow (its original tuple and where it was translated to), in every listing it is in."""

    seen: list[Seen] = field(default_factory=list)

    @property
    def last(self) -> ConntrackEntry:
        return self.seen[-1][1]

    def cites(self) -> list[Cite]:
        return [Cite(a.name, e.line, e.text.strip()) for a, e in self.seen]


class _Services:
    """Which Service a flow's destination is: by the Services given (ClusterIPs, external and
    load-balancer addresses with their ports, NodePorts), else inferred from the EndpointSlices."""

    def __init__(self, facts: Facts, flows: list[_Flow]) -> None:
        cluster = facts.cluster
        eps = cluster.endpoints_of()
        # a listing of endpoints was given: a Service it has nothing for has none (as verification reads it)
        self.listed = bool(cluster.slices or cluster.endpoints)
        self.sliced = {s.service for s in cluster.slices if s.service}
        self.by_ip: dict[str, _Target] = {}
        self.by_ip_port: dict[tuple[str, int], _Target] = {}
        self.by_node_port: dict[int, _Target] = {}
        node = {str(a) for a in facts.node_view.local()} if cluster.services else set()
        self.node_addresses = node
        for svc in cluster.services:
            t = self._named(svc, eps)
            for ip in svc.cluster_ips:
                self.by_ip.setdefault(_ip(ip), t)
            udp = [p for p in svc.ports if p.protocol.upper() == "UDP"]
            for ip in (*svc.external_ips, *svc.lb_ingress_ips):
                for p in udp:
                    if p.port is not None:
                        self.by_ip_port.setdefault((_ip(ip), p.port), t)
            for p in udp:
                if p.node_port is not None:
                    self.by_node_port.setdefault(p.node_port, t)
        # without the Services: each endpoint's Service, and the UDP ports each Service's endpoints take
        self.owners: dict[str, set[str]] = {}
        self.udp_ports: dict[int, set[str]] = {}
        self.backends: dict[str, frozenset[str]] = {}
        if not cluster.services_exported and self.listed:
            for key, views in eps.items():
                self.backends[key] = frozenset(_ip(a) for v in views for a in v.addresses)
                for a in self.backends[key]:
                    self.owners.setdefault(a, set()).add(key)
            for sv in [*cluster.slices, *cluster.endpoints]:
                if sv.service is not None:
                    for proto, port in sv.ports:
                        if proto == "UDP":
                            self.udp_ports.setdefault(port, set()).add(sv.service)
        self._siblings: dict[tuple[str, int | None], set[tuple[str, str]]] = {}
        for f in flows:
            e = f.last
            if _translated(e):
                for owner in self.owners.get(_ip(e.reply_src), ()):
                    self._siblings.setdefault((_ip(e.dst), e.dport), set()).add((owner, _ip(e.reply_src)))

    def _named(self, svc: ServiceView, eps: dict[str, list[EndpointView]]) -> _Target:
        mine = eps.get(svc.key)
        how = "the Services given name the address"
        if mine is not None:
            addrs = frozenset(_ip(a) for v in mine for a in v.addresses)
            return _Target(svc.key, addrs, True, how, self._source(svc.key))
        if self.listed:
            return _Target(svc.key, frozenset(), True, how, "the EndpointSlices given list none for it", False)
        return _Target(svc.key, None, True, how)

    def _source(self, key: str) -> str:
        return "its EndpointSlices" if key in self.sliced else "its v1 Endpoints"

    def of(self, e: ConntrackEntry) -> _Target | None:
        """The Service of this flow's destination, or None when nothing given tells."""
        dst = _ip(e.dst)
        t = self.by_ip.get(dst)
        if t is None and e.dport is not None:
            t = self.by_ip_port.get((dst, e.dport))
            # a NodePort on one of the node's addresses; when they are not known, only a flow that was
            # translated (a UDP flow to that port elsewhere is no Service's)
            local = dst in self.node_addresses if self.node_addresses else _translated(e)
            if t is None and local:
                t = self.by_node_port.get(e.dport)
        if t is not None or not self.backends or not _translated(e):
            return t
        return self._inferred(e)

    def _inferred(self, e: ConntrackEntry) -> _Target | None:
        """No Services given: the Service whose endpoint another flow to the same address and port
        goes to, else the only one whose endpoints take the UDP port the flow was translated to."""
        dst = _ip(e.dst)
        siblings = self._siblings.get((dst, e.dport), set())
        owners = {o for o, _ in siblings}
        if len(owners) == 1:
            (svc,) = owners
            addr = sorted(a for o, a in siblings if o == svc)[0]
            how = (
                f"the Services were not given; another flow to {dst}:{e.dport} goes to {addr}, an endpoint of {svc} "
                "in the EndpointSlices given"
            )
            return _Target(svc, self.backends[svc], False, how, self._source(svc))
        if owners:
            return None  # flows to one address go to endpoints of several Services: not one Service's address
        by_port = self.udp_ports.get(e.reply_sport, set()) if e.reply_sport is not None else set()
        if len(by_port) == 1:
            (svc,) = by_port
            how = (
                f"the Services were not given; {svc} is the only Service in the EndpointSlices given whose "
                f"endpoints take UDP port {e.reply_sport}, the port the flow was translated to"
            )
            return _Target(svc, self.backends.get(svc, frozenset()), False, how, self._source(svc))
        return None


def _flows(facts: Facts) -> list[_Flow]:
    """Every UDP flow once, with each listing it is in: listings in time order (a bundle's T0
    before T1, else as given: the command line, a transcript's order)."""
    order = {id(a): i for i, a in enumerate(facts.of(Kind.CONNTRACK_ENTRIES))}
    entries = sorted(
        ((a, e) for a, e in facts.node_state.conntrack_entries if e.proto == "udp"),
        key=lambda ae: (ae[0].snapshot or "", order.get(id(ae[0]), 0), ae[1].line),
    )
    out: dict[FlowKey, _Flow] = {}
    for a, e in entries:
        key = (_ip(e.src), _ip(e.dst), e.sport, e.dport, _ip(e.reply_src), e.reply_sport)
        out.setdefault(key, _Flow()).seen.append((a, e))
    return list(out.values())


def _udp_timeout(facts: Facts) -> int:
    s = facts.node_state.setting("net.netfilter.nf_conntrack_udp_timeout")
    n = s.int() if s is not None else None
    return n if n is not None and n > 0 else UDP_TIMEOUT


def _persists(flow: _Flow, udp_timeout: int) -> str | None:
    """How the evidence proves that this unanswered entry outlived one UDP timeout (the client
    kept sending and the entry kept its packets untranslated), or None."""
    for _a, e in flow.seen:
        if e.age is not None and e.age > udp_timeout:
            return (
                f"it is {e.age} s old (delta-time) while an unanswered UDP entry ends {udp_timeout} s after "
                "the client's last packet"
            )
    for i, (a1, e1) in enumerate(flow.seen):
        for a2, e2 in flow.seen[i + 1 :]:
            if a2 is a1:
                continue
            secs = interval(parse_time(a1.attrs.get("time")), parse_time(a2.attrs.get("time")))
            left = e1.timeout if e1.timeout is not None else udp_timeout
            if secs is not None and secs > left:
                return (
                    f"the same entry is in two listings {secs:.0f} s apart ({a1.name}, {a2.name}), longer than "
                    f"the {left} s it had left in the first"
                )
            if secs is not None and secs <= 0:
                continue  # taken at once, or the second first: a timeout that went up proves nothing
            if e1.timeout is not None and e2.timeout is not None and e2.timeout > e1.timeout:
                return (
                    f"the same entry is in two listings ({a1.name}, {a2.name}) and its timeout went up from "
                    f"{e1.timeout} s to {e2.timeout} s: the client's packets refreshed it and were not translated"
                )
    return None


def _twice(flow: _Flow) -> bool:
    return len({id(a) for a, _ in flow.seen}) > 1


def _udp_results(verified: Verified) -> dict[str, list[Result]] | None:
    """The verification's UDP results by destination (``10.96.0.10:53``), or None: no rules and
    Services given to verify, or the mode's rules could not be evaluated."""
    ver = verified.verification
    if ver is None or not ver.evaluated:
        return None
    out: dict[str, list[Result]] = {}
    for r in ver.of_protocol("UDP"):
        out.setdefault(r.destination, []).append(r)
    return out


def _translation_now(results: dict[str, list[Result]] | None, e: ConntrackEntry) -> tuple[bool | None, Cite | None]:
    """Whether the rules given translate a new UDP flow to the entry's destination now (True,
    with the DNAT rule; False, with the rule that refused it, if any), or None: not known."""
    if results is None or e.dport is None:
        return None, None
    try:
        dest = endpoint_text(ipaddress.ip_address(e.dst), e.dport)
    except ValueError:
        return None, None
    rows = results.get(dest, [])
    for r in rows:
        for en in r.actual:
            if en.endpoint:
                return True, en.rule
    decided = all(r.actual and all(en.verdict in ("ACCEPT", "DROP", "REJECT") for en in r.actual) for r in rows)
    if rows and decided:
        return False, next((en.rule for r in rows for en in r.actual if en.rule is not None), None)
    return None, None


@dataclass(slots=True)
class _Part:
    """One kind of entry found, graded by what it proves."""

    severity: Severity
    confidence: Confidence
    text: str
    reason: str
    cites: list[Cite]
    fix: str


def dns_severity(port: int | None) -> Severity:
    """A Service's clients held to no backend: DNS failing takes every name lookup with it."""
    return Severity.CRITICAL if port == DNS_PORT else Severity.WARNING


def _shown(flows: list[_Flow]) -> list[Cite]:
    out: list[Cite] = []
    for f in flows[:MAX_SHOWN]:
        out.extend(f.cites()[-2:] if _twice(f) else f.cites()[-1:])
    return out


def _never_parts(
    facts: Facts,
    verified: Verified,
    never: list[tuple[_Flow, _Target | None]], virtual: dict[tuple[str, int | None], _Flow]
) -> list[_Part]:
    """Flows never translated ([UNREPLIED], the reply would come from the Service address itself):
    stuck when the evidence shows the entry outlive a UDP timeout, or nothing translates the
    address now; else a leftover that ends when the client pauses."""
    udp_timeout = _udp_timeout(facts)
    results = _udp_results(verified) if never else None
    groups: dict[str, list[tuple[_Flow, _Target | None, str, Cite | None]]] = {}
    for flow, target in never:
        proof = _persists(flow, udp_timeout)
        now, rule = _translation_now(results, flow.last)
        grade = "stuck" if proof else {True: "leftover", False: "untranslated", None: "unknown"}[now]
        groups.setdefault(grade, []).append((flow, target, proof or "", rule))
    parts = []
    for grade, rows in groups.items():
        flow, target, proof, rule = rows[0]
        e = flow.last
        named = target is not None
        names = [target.service] if target is not None else []
        names += ["DNS"] if e.dport == DNS_PORT else []
        where = f"Service address {e.dst}:{e.dport}" + (f" ({', '.join(names)})" if names else "")
        what = (
            f"{len(rows)} UDP flow(s) to {where} were never translated to a backend (the reply would come from "
            f"{e.reply_src} itself, [UNREPLIED]): they began while nothing translated it (no rules or no "
            "endpoints then)"
        )
        how = "the Services given name the address"
        cites = _shown([r[0] for r in rows])
        sibling = virtual.get((_ip(e.dst), e.dport))
        if not named and sibling is not None:
            other = sibling.last
            how = (
                f"another flow to the same address and port was translated (to {other.reply_src}): the address "
                "is virtual"
            )
            cites += sibling.cites()[-1:]
            if (_ip(other.src), other.sport) == (_ip(e.src), e.sport):
                what += (
                    f"; the same client port ({e.src}:{e.sport}) was translated to {other.reply_src} in another "
                    "entry: the client keeps sending from one port"
                )
        fix = f"Delete them: `conntrack -D -p udp --orig-dst {e.dst}` (the client's next packet is translated anew)."
        if grade == "stuck":
            parts.append(
                _Part(
                    dns_severity(e.dport),
                    Confidence.HIGH if named else Confidence.MEDIUM,
                    f"{what}, and the entry stays: {proof}. Every packet the client sends from that port refreshes "
                    "the entry and reaches no backend",
                    f"{proof.split(':')[0]}; {how}",
                    cites,
                    fix,
                )
            )
        elif grade == "untranslated":
            said = f" ({rule.artifact}:{rule.line})" if rule is not None and rule.line else ""
            if rule is not None:
                cites.append(rule)
            parts.append(
                _Part(
                    dns_severity(e.dport),
                    Confidence.HIGH if named else Confidence.MEDIUM,
                    f"{what}; the rules given do not translate {e.dst}:{e.dport} now either{said}: new flows get no "
                    "backend, so the rules (or the Service's endpoints) are at fault as much as the entries",
                    f"the rules given do not translate the address; {how}",
                    cites,
                    fix + " Then find why the rules do not translate it (the verification's findings).",
                )
            )
        else:
            if grade == "leftover":
                said = f" ({rule.artifact}:{rule.line})" if rule is not None and rule.line else ""
                if rule is not None:
                    cites.append(rule)
                state = f"The rules given translate it now{said}, so each entry is a leftover"
                reason = f"the rules given translate the address now, and no listing shows the entry stay; {how}"
            else:
                state = (
                    "Whether anything translates it now is not known (no rules given: `iptables-save` or "
                    "`nft list ruleset` tells); each entry may be a leftover"
                )
                reason = f"no listing shows the entry stay, and no rules tell whether it is translated now; {how}"
            left = f"{e.timeout} s left" if e.timeout is not None else f"up to {udp_timeout} s"
            parts.append(
                _Part(
                    Severity.WARNING,
                    Confidence.MEDIUM,
                    f"{what}. {state} that lasts only while its client keeps sending from the same port (each packet "
                    f"sets its timeout again; {left}). A second `conntrack -L -p udp --orig-dst {e.dst}` taken "
                    f"{udp_timeout}+ s later that still shows the same tuple would prove it stuck",
                    reason,
                    cites,
                    fix,
                )
            )
    return parts


def _dead_parts(dead: list[tuple[_Flow, _Target]]) -> list[_Part]:
    """Translated flows whose backend is not one of the Service's endpoints now."""
    groups: dict[bool, list[tuple[_Flow, _Target]]] = {}
    for flow, target in dead:
        groups.setdefault(_answered(flow.last), []).append((flow, target))
    parts = []
    for answered, rows in groups.items():
        flow, target = rows[0]
        e = flow.last
        eps = target.endpoints_how
        what = (
            f"{len(rows)} UDP flow(s) to {e.dst}:{e.dport}{_dns(e.dport)} still go to {e.reply_src}, which is not "
            f"one of {target.service}'s endpoints now ({eps})"
        )
        if answered:
            sev = dns_severity(e.dport)
            conf = Confidence.HIGH if target.named and target.listed else Confidence.MEDIUM
            text = (
                f"{what}. {e.reply_src} answered ({'[ASSURED]' if 'ASSURED' in e.flags else 'a reply was seen'}): "
                "the flow was live with that backend, and conntrack keeps it there while the client keeps sending, "
                "so those packets go to an address that is no longer the Service's"
            )
            reason = f"the entry shows a reply from a backend that is not an endpoint now; {target.how}"
        else:
            sev, conf = Severity.WARNING, Confidence.MEDIUM
            text = (
                f"{what}, and never answered ([UNREPLIED]): the flow was translated to a backend that is gone, "
                "and stays so while the client keeps sending from the same port"
            )
            reason = f"an unanswered entry to a backend that is not an endpoint now; {target.how}"
        parts.append(
            _Part(
                sev,
                conf,
                text,
                reason,
                _shown([r[0] for r in rows]),
                f"Delete them: `conntrack -D -p udp --orig-dst {e.dst} --dst-nat {e.reply_src}` (the client's next "
                "packet is translated to a current endpoint).",
            )
        )
    return parts


def _unanswered(facts: Facts, flows: list[_Flow]) -> Finding:
    e = flows[0].last
    f = start(facts, "KP312", [], confidence=Confidence.LOW, severity=Severity.WARNING)
    f.confidence_reason = "the conntrack entries alone; the Service's endpoints were not given"
    f.summary = (
        f"{len(flows)} UDP flow(s) to {e.dst}:{e.dport}{_dns(e.dport)} were translated to {e.reply_src}, which never "
        "answered ([UNREPLIED]): a live backend answers, so the entry most likely holds the client on a backend "
        "that is gone, and stays while the client keeps sending from the same port. The Service's EndpointSlices "
        f"tell: is {e.reply_src} still one of its endpoints?"
    )
    f.evidence = _shown(flows)
    f.fix = [
        f"If {e.reply_src} is no longer an endpoint, delete the entries (`conntrack -D -p udp --orig-dst "
        f"{e.dst}`), then find why kube-proxy did not (its log, its version: k/k#125467's event-based clean-up)."
    ]
    return f


def _untold(facts: Facts, flows: list[_Flow]) -> Finding:
    """UDP flows nothing translated and nothing answered, with no Service given: a stuck entry
    if the destination is a Service's address (the Services decide), a dead server's otherwise."""
    e = flows[0].last
    f = start(facts, "KP312", [], confidence=Confidence.LOW, severity=Severity.INFO)
    f.summary = (
        f"{len(flows)} UDP flow(s) to {e.dst}:{e.dport}{_dns(e.dport)} were never translated and never answered "
        "([UNREPLIED], the reply expected from the destination itself). If that address is a Service's (its "
        "ClusterIP, an external or load-balancer address, a NodePort), the entry began while the Service had no "
        "endpoint and holds every packet of the flow away from the endpoints it has now, for as long as the client "
        "keeps sending; if it is not, the server there does not answer."
    )
    f.evidence = _shown(flows)
    f.fix = [
        f"If {e.dst} is a Service's address, delete the entries (`conntrack -D -p udp --orig-dst {e.dst}`) and find "
        "why kube-proxy did not: its log (conntrack binary missing, netlink errors) and its version (k/k#125467's "
        "event-based clean-up)."
    ]
    return suspect(
        f,
        "a UDP flow nothing translated and nothing answered; the Services were not given to say whether its "
        "destination is one",
        [f"`kubectl get svc -A -o wide | grep -w {e.dst}` (and the Service's EndpointSlices)"],
    )


@check(
    "KP312",
    cause="stale-udp-conntrack",
    title="UDP conntrack entries hold a Service's clients on no backend or a dead one",
    severity=Severity.WARNING,
    needs=[Kind.CONNTRACK_ENTRIES],
    reads_verification=True,
)
def stale_udp_conntrack(facts: Facts, verified: Verified) -> Iterator[Finding]:
    """A UDP flow to a Service address keeps a conntrack entry that points nowhere useful.

    Symptom: DNS (or another UDP Service) keeps timing out for some clients after its Pods
        were replaced or the Service got endpoints again, while other clients work;
        `conntrack -L -p udp` shows `dst=10.96.0.10 ... dport=53 [UNREPLIED] src=10.96.0.10`
        (never translated) or a reply source that is no longer an endpoint.
    Cause: conntrack keeps a UDP flow's translation while packets keep coming (30 s refreshed
        by each one); kube-proxy must delete the entries when endpoints change. A flow that
        began while the Service had no endpoints was never DNATed, and an entry whose
        clean-up failed (no conntrack binary, a missed event) keeps the dead backend.
    How it is detected: UDP entries to a Service's address (its ClusterIP, external or
        load-balancer address and port, or NodePort, from the Services given; without them, a
        Service of the EndpointSlices given whose endpoint another flow to the same address and
        port goes to, or the only one whose endpoints take the port the flow was translated to),
        each graded by what it proves. A translated flow whose reply source is not one of the
        Service's endpoints: [ASSURED] (or answered) proves it was live with that backend and
        is being kept, a warning (critical for DNS, port 53), high confidence when the Services
        name the address; [UNREPLIED], a medium warning. A flow never translated (its reply
        would come from the address itself: a Service address by the Services given, or proved
        virtual by another flow that was translated) and [UNREPLIED] proves only that nothing
        translated it when it began; it is stuck (a warning, critical for DNS) when the evidence
        shows it outlive a UDP timeout (its `delta-time` age, or the same entry in two listings
        further apart than the time it had left, or with its timeout gone up) or when the rules
        given translate nothing for the address now; otherwise it is a medium warning, a
        leftover that lasts while its client keeps sending, and a second listing 30+ s later
        would tell. A never-translated flow that was answered is not reported. Without the
        endpoints, a translated flow never answered is reported at low confidence; without the
        Services, a flow never translated and never answered is a suspected stuck entry (info,
        low), the Services deciding.
    Fix: delete the entries (`conntrack -D -p udp --orig-dst SERVICE_IP`), then find why
        kube-proxy did not: its log (conntrack binary missing, netlink errors) and version
        (k/k#48370 fixed the empty-to-non-empty case in 1.7; k/k#125467 event-based clean-up).
    References: https://github.com/kubernetes/kubernetes/issues/48370;
        https://github.com/kubernetes/kubernetes/issues/125467
    """
    flows = _flows(facts)
    if not flows:
        return
    services = _Services(facts, flows)
    # a destination another flow was DNATed from is virtual for that port (a host port forward is
    # virtual only for its own port)
    virtual: dict[tuple[str, int | None], _Flow] = {}
    for flow in flows:
        if _translated(flow.last):
            virtual.setdefault((_ip(flow.last.dst), flow.last.dport), flow)
    never: list[tuple[_Flow, _Target | None]] = []
    dead: list[tuple[_Flow, _Target]] = []
    unanswered: list[_Flow] = []
    untold: list[_Flow] = []  # never translated, never answered, and no Service given to say whose
    for flow in flows:
        e = flow.last
        target = services.of(e)
        if not _translated(e):
            if not _answered(e) and (target is not None or (_ip(e.dst), e.dport) in virtual):
                never.append((flow, target))
            elif not _answered(e) and not facts.cluster.services_exported:
                untold.append(flow)
        elif target is not None and target.backends is not None:
            if _ip(e.reply_src) not in target.backends:
                dead.append((flow, target))
        elif not _answered(e):
            # with no EndpointSlices to compare, a translated flow its backend never answered: that
            # backend is gone or unreachable (a live one answers), which only the endpoints can confirm
            unanswered.append(flow)
    parts = _never_parts(facts, verified, never, virtual) + _dead_parts(dead)
    if not parts:
        if unanswered:
            yield _unanswered(facts, unanswered)
        elif untold:
            yield _untold(facts, untold)
        return
    parts.sort(key=lambda p: (p.severity, p.confidence), reverse=True)
    top = parts[0]
    f = start(facts, "KP312", [], confidence=top.confidence, severity=top.severity)
    f.summary = ". ".join(p.text for p in parts) + "."
    if any(p.severity == Severity.CRITICAL for p in parts):
        f.summary += " The DNS flows' clients cannot resolve names while their entries stay."
    f.confidence_reason = top.reason
    for p in parts:
        f.evidence.extend(c for c in p.cites if c not in f.evidence)
    f.fix = list(dict.fromkeys(p.fix for p in parts))
    f.fix.append(
        "Then find why kube-proxy did not delete them: its log (conntrack binary missing, netlink errors) and "
        "its version."
    )
    yield f
