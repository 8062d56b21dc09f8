"""Verification: what the node's rules do with each Service's traffic, against what they should do.

Every :class:`~kpdoctor.dataplane.expected.Case` is evaluated through the rules of its address
family. When kube-proxy's rules exist in both iptables backends, both are live in the kernel: each
is evaluated on its own, and where they disagree the case says so. Rules of the other backend that
hold no Service rules (firewalls, CNI filters) still take part: a packet must pass them too.

Beyond the Services the cluster has, the rules are searched for destinations that still forward
although no Service owns them any more (stale rules, seed 003).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kpdoctor.dataplane.evaluate import Evaluator, Outcome, Packet, Step
from kpdoctor.dataplane.expected import (
    EXTERNAL_CLIENTS,
    Behaviour,
    Case,
    Expectation,
    IPAddress,
    NodeView,
    cases,
    pod_client,
    service_ports,
)
from kpdoctor.dataplane.rules import CompiledTable, compile_tables, host_address
from kpdoctor.model import Cite
from kpdoctor.parallel import Tickets
from kpdoctor.parse.iptables import Ruleset
from kpdoctor.parse.k8s import K8sObject, as_dict, as_list, cluster_ips, port_value, protocol_problem

PROB_TOLERANCE = 1e-3  # kube-proxy prints 10 decimals; equal shares are within this
_SVC_COMMENT = re.compile(r'--comment "?([a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[\w.-]+)?)')


_ROUNDED: dict[float, float] = {}


def rounded(p: float) -> float:
    """A probability to 6 decimals for the report (memoised: a node has few distinct shares)."""
    r = _ROUNDED.get(p)
    if r is None:
        if len(_ROUNDED) > 100_000:
            _ROUNDED.clear()
        r = _ROUNDED[p] = round(p, 6)
    return r


@dataclass(slots=True)
class Entry:
    """One outcome of the evaluated rules: a backend with its probability, or a verdict."""

    backend: str | None
    verdict: str  # ACCEPT | DROP | REJECT | UNCERTAIN
    probability: float
    rule: Cite | None = None  # the DNAT rule, or the rule/policy that refused
    chain: str | None = None  # chain of that rule
    ruleset: str | None = None  # iptables backend that produced it (when rules are split)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": self.backend,
            "verdict": self.verdict,
            "probability": rounded(self.probability),
        }
        if self.rule is not None:
            out["rule"] = {"artifact": self.rule.artifact, "line": self.rule.line}
        if self.ruleset:
            out["iptables_backend"] = self.ruleset
        return out


@dataclass(slots=True)
class Result:
    """One row of ``verification.results``."""

    service: str
    port: str
    protocol: str
    family: int
    traffic: str
    destination: str
    source: str | None
    status: str  # ok | mismatch | uncertain
    expected: list[Expectation]
    actual: list[Entry] = field(default_factory=list)
    rules: list[Cite] = field(default_factory=list)
    note: str = ""
    # for findings: what kind of mismatch, and its details
    kind: str = ""  # no-rules | refused | partly-refused | backends | not-refused | split
    stale_backends: list[str] = field(default_factory=list)
    missing_backends: list[str] = field(default_factory=list)
    uneven: bool = False
    local_policy: bool = False
    local_endpoints: list[str] = field(default_factory=list)
    service_cite: Cite | None = None

    @property
    def label(self) -> str:
        return f"{self.service}:{self.port}" if self.port else self.service

    def refusals(self) -> list[Entry]:
        return [e for e in self.actual if e.verdict in ("DROP", "REJECT")]

    def to_json(self, shared: dict[int, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
        """``shared``: expected-outcome JSON already built, by list identity (the traffic classes of
        one Service port share their expectations); valid for one rendering."""
        exp = shared.get(id(self.expected)) if shared is not None else None
        if exp is None:
            exp = []
            for alt in self.expected[:1]:
                if alt.refused:
                    exp.append({"backend": None, "verdict": "refused", "probability": 1.0})
                else:
                    share = rounded(1 / len(alt.backends))
                    exp.extend({"backend": b, "probability": share} for b in sorted(alt.backends))
            if shared is not None:
                shared[id(self.expected)] = exp
        out: dict[str, Any] = {
            "service": self.service,
            "port": self.port,
            "protocol": self.protocol,
            "family": f"IPv{self.family}",
            "traffic": self.traffic,
            "destination": self.destination,
            "source": self.source,
            "status": self.status,
            "expected": exp,
            "actual": [e.to_json() for e in self.actual],
            "rules": [{"artifact": c.artifact, "line": c.line} for c in self.rules],
            "note": self.note,
        }
        if len(self.expected) > 1:
            out["accepted"] = [{"backends": sorted(a.backends), "why": a.why} for a in self.expected]
        if self.kind:
            out["mismatch"] = self.kind
        if self.stale_backends:
            out["stale_backends"] = self.stale_backends
        if self.missing_backends:
            out["missing_backends"] = self.missing_backends
        return out


@dataclass(slots=True)
class StaleRule:
    """A destination the rules still forward (or refuse) that no Service owns."""

    family: int
    destination: str
    protocol: str
    label: str | None  # the Service named in the rule comments, if any
    backends: list[str]
    rules: list[Cite]
    nodeport: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "destination": self.destination,
            "protocol": self.protocol.upper(),
            "named": self.label,
            "backends": self.backends,
            "rules": [c.to_json() for c in self.rules],
        }


@dataclass(slots=True)
class Verification:
    services_checked: int
    results: list[Result] = field(default_factory=list)
    stale: list[StaleRule] = field(default_factory=list)
    split: dict[int, list[str]] = field(default_factory=dict)  # family -> artifacts of both backends
    not_evaluated: list[str] = field(default_factory=list)
    # Services in the evidence that give nothing to verify although they are not headless (no
    # spec, clusterIP or ports): (NS/NAME, why). Not a verdict, and never clean.
    unverified: list[tuple[str, str]] = field(default_factory=list)
    cases: list[Case] = field(default_factory=list, repr=False, compare=False)  # every case, in order
    # the parts of ``cases`` evaluated here, (start, end) in the order of ``results``
    ranges: list[tuple[int, int]] = field(default_factory=list, repr=False, compare=False)

    def only(self, service: str) -> Verification:
        """The results (and stale rules) of one Service, ``NS/NAME`` or ``NS/NAME:PORT``."""
        out = Verification(self.services_checked, split=self.split, not_evaluated=self.not_evaluated)
        out.results = [r for r in self.results if service_matches(r.label, service)]
        out.stale = [s for s in self.stale if service_matches(s.label, service)]
        out.unverified = [u for u in self.unverified if service_matches(u[0], service)]
        out.services_checked = len({r.service for r in out.results})
        return out

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def clean(self) -> bool:
        ok = bool(self.results) and all(r.status == "ok" for r in self.results)
        return ok and not self.stale and not self.unverified

    def to_json(self) -> dict[str, Any]:
        shared: dict[int, list[dict[str, Any]]] = {}
        return {
            "services_checked": self.services_checked,
            "ok": self.count("ok"),
            "mismatches": self.count("mismatch"),
            "uncertain": self.count("uncertain"),
            "results": [r.to_json(shared) for r in self.results],
            "stale_rules": [s.to_json() for s in self.stale],
            "not_evaluated": list(self.not_evaluated),
            "unverified": [{"service": svc, "reason": why} for svc, why in self.unverified],
        }


def service_matches(label: str | None, wanted: str) -> bool:
    """``ns/name:port`` against a filter ``ns/name`` (every port) or ``ns/name:port``; a filter
    may list several, comma-separated (what :func:`resolve_service` makes of ``ns/name:53`` when
    port 53 is both the "dns" and the "dns-tcp" port)."""
    if not label:
        return False
    if "," in wanted:
        return any(service_matches(label, w) for w in wanted.split(","))
    if ":" in wanted:
        return label == wanted
    return label == wanted or label.startswith(wanted + ":")


class ServiceNotFound(ValueError):
    """A ``--service`` that names no Service (port) in the evidence; ``str()`` is the one line
    the user reads, with the closest names when there are some."""


def _ports_of(svc: K8sObject) -> list[tuple[str, int | None, str]]:
    """(name, number, protocol) of each port a Service declares."""
    out = []
    for p in as_list(as_dict(svc.body.get("spec")).get("ports")):
        if isinstance(p, dict):
            out.append((str(p.get("name") or ""), port_value(p.get("port")), str(p.get("protocol") or "TCP").upper()))
    return out


def resolve_service(services: list[K8sObject], wanted: str) -> tuple[str, str]:
    """A ``--service`` as users write it, as the filter :func:`service_matches` takes, and a
    notice to print (or ""). ``NS/NAME``, ``NS/NAME:PORT`` with the port's name or its number
    (users think ``kubectl port-forward svc/web 80``; ``53`` is both DNS ports, ``53/udp`` one),
    and a bare ``NAME`` when one namespace has it. Raises :class:`ServiceNotFound` saying what
    exists: "did you mean ns1/svc1".

    kube-proxy names a port ``NS/NAME:PORTNAME`` (just ``NS/NAME`` for a single unnamed port),
    and so do results and findings; the filter is made of those labels."""
    import difflib

    text = wanted.strip()
    name_part, _, port_part = text.partition(":")
    refs: dict[str, K8sObject] = {}
    for svc in services:
        refs.setdefault(f"{svc.namespace or 'default'}/{svc.name}", svc)
    if "/" in name_part:
        ref = name_part
        if ref not in refs:
            name = ref.split("/", 1)[1]
            same = sorted(r for r in refs if r.split("/", 1)[1] == name)
            close = same or difflib.get_close_matches(ref, list(refs), n=3, cutoff=0.6)
            raise ServiceNotFound(f"no Service {ref} in the evidence" + _hint(close, refs))
    else:
        same = sorted(r for r in refs if r.split("/", 1)[1] == name_part)
        if len(same) > 1:
            raise ServiceNotFound(
                f"Services named {name_part} are in several namespaces: give NS/NAME ({', '.join(same)})"
            )
        if not same:
            names = {r.split("/", 1)[1]: r for r in refs}
            close = [names[n] for n in difflib.get_close_matches(name_part, list(names), n=3, cutoff=0.6)]
            raise ServiceNotFound(f"no Service named {name_part} in the evidence (give NS/NAME)" + _hint(close, refs))
        ref = same[0]
    if not port_part:
        return ref, (f"--service {wanted} means {ref}" if ref != text else "")
    ports = _ports_of(refs[ref])
    number, _, proto = port_part.partition("/")
    labels = [f"{ref}:{n}" if n else ref for n, _, _ in ports if n == port_part]
    if not labels and number.isascii() and number.isdigit():
        labels = [
            f"{ref}:{n}" if n else ref
            for n, num, pr in ports
            if num == int(number[:6]) and (not proto or pr == proto.upper())
        ]
    if not labels:
        known = ", ".join(f"{n or '(unnamed)'} = {num}/{pr}" for n, num, pr in ports) or "none"
        raise ServiceNotFound(f"{ref} has no port {port_part} (its ports: {known})")
    labels = list(dict.fromkeys(labels))
    return ",".join(labels), (f"--service {wanted} means {', '.join(labels)}" if labels != [text] else "")


def _hint(close: list[str], refs: dict[str, K8sObject]) -> str:
    if close:
        return f"; did you mean {' or '.join(close)}?"
    if not refs:
        return " (no Services in the evidence)"
    some = sorted(refs)
    return f" (Services: {', '.join(some[:8])}{' ...' if len(some) > 8 else ''})"


def has_service_rules(rs: Ruleset) -> bool:
    """Does this backend hold Service forwarding (any DNAT in nat)?"""
    nat = rs.tables.get("nat")
    return nat is not None and any("DNAT" in r.text for r in nat.rules)


@dataclass(slots=True)
class FamilyRules:
    """The rules one address family is evaluated with."""

    family: int
    primary: list[tuple[Ruleset, Evaluator]]  # one, or two when Service rules are in both backends
    missing: str | None = None  # why there is nothing to evaluate


def family_rules(rulesets: list[Ruleset], family: int, local: Iterable[IPAddress], record: bool = True) -> FamilyRules:
    mine = [rs for rs in rulesets if rs.family == family and rs.form in ("save", "S")]
    seen: set[str | None] = set()
    uniq = []
    for rs in mine:  # one per backend (the same dump given twice is one)
        if rs.backend in seen and rs.backend is not None:
            continue
        seen.add(rs.backend)
        uniq.append(rs)
    if not uniq:
        return FamilyRules(family, [], f"no ip{'6' if family == 6 else ''}tables-save output for IPv{family}")
    compiled = {id(rs): compile_tables(rs.tables) for rs in uniq}
    kube = [rs for rs in uniq if has_service_rules(rs)]
    local = list(local)
    if len(kube) >= 2:
        return FamilyRules(family, [(rs, Evaluator(compiled[id(rs)], local, record=record)) for rs in kube])
    primary = kube[0] if kube else uniq[0]
    layers: list[dict[str, CompiledTable]] = [compiled[id(rs)] for rs in uniq if rs is not primary]
    return FamilyRules(family, [(primary, Evaluator(compiled[id(primary)], local, layers=layers, record=record))])


_CITES: dict[tuple[str, int], Cite] = {}


def rule_cite(artifact: str, line: int, text: str) -> Cite:
    """The citation of one rule line, shared (a DNAT rule is cited by every traffic class that
    reaches it; building a frozen Cite each time is a measurable share of a 10,000-Service run)."""
    key = (artifact, line)
    c = _CITES.get(key)
    if c is None:
        if len(_CITES) > 1_000_000:
            _CITES.clear()
        c = _CITES[key] = Cite(artifact, line, text.strip())
    return c


def _cite(rs: Ruleset, step: Step | None) -> Cite | None:
    if step is None:
        return None
    if step.line is None:
        return Cite(rs.artifact, None, f"{step.table} {step.chain} {step.text}")
    return rule_cite(rs.artifact, step.line, step.text)


def _entries(rs: Ruleset, outcomes: list[Outcome], tag: str | None) -> tuple[list[Entry], list[Cite], list[str]]:
    entries: list[Entry] = []
    rules: dict[Cite, None] = {}
    reasons: list[str] = []
    for o in outcomes:
        verdict = o.verdict
        if verdict == "ACCEPT":
            step = o.state.dnat_step if o.state.dnat is not None else None
        else:
            step = o.decided_by
            if verdict == "UNCERTAIN":
                reasons.append(o.reason)
        cite = _cite(rs, step)
        entries.append(Entry(o.backend, verdict, o.probability, cite, step.chain if step else None, tag))
        if cite is not None:
            rules[cite] = None
    return entries, list(rules), reasons


def judge(case: Case, entries: list[Entry]) -> tuple[str, str, Expectation | None]:
    """Status and mismatch kind of one evaluated case, and the alternative it matched."""
    if any(e.verdict == "UNCERTAIN" for e in entries):
        return "uncertain", "", None
    fwd: dict[str, float] = {}
    refused = through = 0.0
    for e in entries:
        if e.verdict == "ACCEPT" and e.backend:
            fwd[e.backend] = fwd.get(e.backend, 0.0) + e.probability
        elif e.verdict in ("DROP", "REJECT"):
            refused += e.probability
        else:
            through += e.probability
    for alt in case.alternatives:
        if alt.refused:
            if refused >= 1 - PROB_TOLERANCE:
                return "ok", "", alt
            continue
        n = len(alt.backends)
        if set(fwd) == set(alt.backends) and all(abs(p - 1 / n) <= PROB_TOLERANCE for p in fwd.values()):
            return "ok", "", alt
    if through >= 1 - PROB_TOLERANCE:
        kind = "no-rules"
    elif refused >= 1 - PROB_TOLERANCE:
        kind = "refused"
    elif refused > PROB_TOLERANCE:
        kind = "partly-refused"
    elif all(a.refused for a in case.alternatives):
        kind = "not-refused"
    else:
        kind = "backends"
    return "mismatch", kind, None


def _result(case: Case, status: str) -> Result:
    """A case's row, before its outcome is filled in."""
    sp = case.sp
    return Result(
        sp.service,
        sp.port_name,
        sp.protocol,
        sp.family,
        case.traffic,
        case.destination,
        case.source,
        status,
        case.alternatives,
        service_cite=sp.cite,
    )


def evaluate_case(case: Case, fam: FamilyRules, node: NodeView) -> Result:
    sp = case.sp
    res = _result(case, "uncertain")
    res.local_policy = sp.etp_local if case.traffic.startswith("external") else sp.itp_local
    notes = list(case.notes)
    if case.unknown or fam.missing or case.src is None or case.dst is None:
        res.note = "; ".join([case.unknown or fam.missing or "no address to test", *notes])
        return res
    pkt = Packet(case.src, case.dst, sp.protocol.lower(), case.dport)
    per_backend: list[tuple[Ruleset, list[Entry], list[Cite], list[str]]] = []
    for rs, ev in fam.primary:
        outcomes = ev.run(pkt, case.hook, postrouting=False)
        if ev.undecided:
            notes.append(
                "could not evaluate, but both ways give the same outcome: " + ", ".join(dict.fromkeys(ev.undecided))
            )
        tag = rs.backend if len(fam.primary) > 1 else None
        entries, rules, reasons = _entries(rs, outcomes, tag)
        per_backend.append((rs, entries, rules, reasons))
    _, entries, rules, reasons = per_backend[0]
    status, kind, alt = judge(case, entries)
    res.actual, res.rules = entries, rules
    if len(per_backend) > 1:
        others = [judge(case, e)[:2] for _, e, _, _ in per_backend[1:]]
        sig0 = _signature(entries)
        if any(_signature(e) != sig0 for _, e, _, _ in per_backend[1:]) or any(o != (status, kind) for o in others):
            res.actual = [x for _, e, _, _ in per_backend for x in e]
            res.rules = [c for _, _, r, _ in per_backend for c in r]
            status, kind = "mismatch", "split"
            notes.insert(
                0,
                "the two iptables backends disagree: "
                + " vs ".join(f"{rs.backend}: {_describe(e)}" for rs, e, _, _ in per_backend),
            )
        else:
            notes.append("Service rules are in both iptables backends (they agree)")
    res.status, res.kind = status, kind
    if status == "uncertain":
        notes.insert(0, "; ".join(dict.fromkeys(reasons)))
    if status == "ok" and alt is not None and len(case.alternatives) > 1:
        notes.append(f"matches: {alt.why}")
    if status == "mismatch" and kind in ("backends", "not-refused", "partly-refused"):
        fwd = {e.backend for e in res.actual if e.backend and e.verdict == "ACCEPT"}
        best = max((a for a in case.alternatives if not a.refused), key=lambda a: len(a.backends & fwd), default=None)
        want = best.backends if best else frozenset()
        res.stale_backends = sorted(fwd - want)
        res.missing_backends = sorted(want - fwd)
        if best and not res.stale_backends and not res.missing_backends:
            n = len(want)
            res.uneven = any(abs(e.probability - 1 / n) > PROB_TOLERANCE for e in res.actual if e.backend)
    if status == "mismatch":
        _explain_untranslated(res, fam, pkt, case.hook, notes)
    if res.local_policy:
        res.local_endpoints = sorted({e.addr for e in sp.endpoints if e.node and e.node == node.name})
    res.note = "; ".join(n for n in notes if n)
    return res


def _explain_untranslated(res: Result, fam: FamilyRules, pkt: Packet, hook: str, notes: list[str]) -> None:
    """Name the rule after which part of the traffic went on un-DNATed while the rest reached
    backends: a KUBE-SEP chain without its DNAT rule, as a node in the middle of a sync (or with
    a rule deleted by hand) has. The verification walk keeps no steps, so this one case is walked
    again with them (rare: only such mismatches pay for it)."""
    for rs, ev in fam.primary:
        tag = rs.backend if len(fam.primary) > 1 else None
        mine = [e for e in res.actual if e.ruleset == tag]
        lost = [e for e in mine if e.verdict == "ACCEPT" and not e.backend]
        if not lost or len(lost) == len(mine):
            continue  # all of it untranslated: "no-rules", which says so itself
        outcomes = ev.recording().run(pkt, hook, postrouting=False)
        walked = [o for o in outcomes if o.verdict == "ACCEPT" and not o.backend]
        cites: list[Cite] = []
        for o in walked:
            step = next((x for x in reversed(o.state.steps) if x.table == "nat" and x.line is not None), None)
            cite = _cite(rs, step)
            if cite is not None:
                cites.append(cite)
        if len(cites) == len(lost):
            for e, c in zip(lost, cites, strict=True):
                e.rule, e.chain = c, None
        for c in dict.fromkeys(cites):
            if c not in res.rules:
                res.rules.append(c)
        share = sum(e.probability for e in lost)
        where = (
            " after line " + ", ".join(str(c.line) for c in dict.fromkeys(cites)) + f" ({cites[0].text[:120]})"
            if cites
            else ""
        )
        notes.insert(
            0,
            f"{share:.0%} of this traffic is not translated to any backend{where}: a chain on its path has no "
            "DNAT rule (a partial sync, or a rule deleted by hand)",
        )


def _signature(entries: list[Entry]) -> list[tuple[str, str, float]]:
    """Comparable outcome of one backend's rules; un-DNATed branches have no backend ("")."""
    return sorted((e.backend or "", e.verdict, round(e.probability, 3)) for e in entries)


def _describe(entries: list[Entry]) -> str:
    parts = []
    for e in entries:
        what = e.backend if e.backend else ("falls through" if e.verdict == "ACCEPT" else e.verdict)
        parts.append(f"{what} ({e.probability:.0%})")
    return ", ".join(parts) or "nothing"


ANY_PORT = "*"  # in owned ips: (ip, ANY_PORT, 0) owns every port of ip


class Owned(NamedTuple):
    """What some Service or Pod owns, so that rules for it are not stale."""

    ips: set[tuple[int, str, int]]  # (address, protocol, port)
    ports: set[tuple[str, int]]  # node ports (protocol, port)
    unreadable: set[str]  # NS/NAME of Services whose evidence is broken: rules naming them are theirs


def owned_destinations(services: Iterable[K8sObject], pods: Iterable[K8sObject]) -> Owned:
    """Addresses (ip, proto, port) and node ports (proto, port) some Service or Pod owns.

    A Service whose ports or addresses cannot be read (-1, "http", no spec) owns every port of
    its addresses and every rule that names it: its rules are not "stale" because the evidence
    about it is broken (that is reported once, as an input problem)."""
    ips: set[tuple[int, str, int]] = set()
    ports: set[tuple[str, int]] = set()
    unreadable: set[str] = set()
    for svc in services:
        spec = as_dict(svc.body.get("spec"))
        ingress = as_list(as_dict(as_dict(svc.body.get("status")).get("loadBalancer")).get("ingress"))
        addrs = [
            *cluster_ips(spec),
            *as_list(spec.get("externalIPs")),
            *(i.get("ip") for i in ingress if isinstance(i, dict)),
        ]
        hosts = [a for a in (host_address(ip) for ip in addrs if isinstance(ip, str)) if a is not None]
        svc_ports = as_list(spec.get("ports"))
        readable = bool(svc_ports)
        for port in svc_ports:
            number = port_value(port.get("port")) if isinstance(port, dict) else None
            if number is None or not isinstance(port, dict) or protocol_problem(port.get("protocol")):
                readable = False
                continue
            proto = str(port.get("protocol") or "TCP").lower()
            for a in hosts:
                ips.add((int(a), proto, number))
            node_port = port_value(port.get("nodePort"))
            if node_port is not None:
                ports.add((proto, node_port))
        cips = cluster_ips(spec)
        bad_ip = not cips or any(not isinstance(ip, str) or (ip != "None" and host_address(ip) is None) for ip in cips)
        if bad_ip or not svc.name or (not readable and "None" not in cips):
            ips.update((int(a), ANY_PORT, 0) for a in hosts)
            unreadable.add(f"{svc.namespace or 'default'}/{svc.name}")
        hc = port_value(spec.get("healthCheckNodePort"))
        if hc is not None:
            ports.add(("tcp", hc))
    for pod in pods:
        for c in as_list(as_dict(pod.body.get("spec")).get("containers")):
            for p in as_list(c.get("ports")) if isinstance(c, dict) else []:
                host_port = port_value(p.get("hostPort")) if isinstance(p, dict) else None
                if host_port is not None:
                    ports.add((str(p.get("protocol") or "TCP").lower(), host_port))
    return Owned(ips, ports, unreadable)


def find_stale(
    fam: FamilyRules,
    owned_ips: set[tuple[int, str, int]],
    owned_ports: set[tuple[str, int]],
    node: NodeView,
    pod_src: IPAddress,
    ext_src: IPAddress,
    unreadable: frozenset[str] | set[str] = frozenset(),
) -> list[StaleRule]:
    """Destinations in the nat rules that still forward although no Service owns them."""
    out: list[StaleRule] = []
    node_ip = node.primary(fam.family)
    for rs, ev in fam.primary:
        nat = rs.tables.get("nat")
        compiled = ev.tables.get("nat")
        if nat is None or compiled is None:
            continue
        seen: set[tuple[int | None, str, int]] = set()
        # only rules that match a destination port can name a Service's address (most of them
        # compiled already, by the walks of the Services' own traffic)
        for cr in compiled.compiled([r for r in nat.rules if "-dport" in r.text]):
            rule = cr.rule
            port, proto = cr.exact_dport, cr.proto
            if port is None or proto is None or cr.proto_neg:
                continue
            dst = cr.exact_dst
            if dst is not None and cr.dst is not None and cr.dst[0] == fam.family:
                if (dst, proto, port) in owned_ips or (dst, proto, port) in seen or (dst, ANY_PORT, 0) in owned_ips:
                    continue
                if node_ip is not None and dst == int(node_ip) and (proto, port) in owned_ports:
                    continue
                seen.add((dst, proto, port))
                addr = ipaddress.ip_address(dst) if fam.family == 4 else ipaddress.IPv6Address(dst)
                pkt = Packet(pod_src, addr, proto, port)
                nodeport = False
            elif cr.dst is None or cr.dst_neg or (cr.dst[0] == 4 and cr.dst[1] >> 24 == 127):
                if (proto, port) in owned_ports or (None, proto, port) in seen or node_ip is None:
                    continue
                seen.add((None, proto, port))
                pkt = Packet(ext_src, node_ip, proto, port)
                nodeport = True
            else:
                continue
            outcomes = ev.run(pkt, "prerouting", postrouting=False)
            backends = sorted({o.backend for o in outcomes if o.backend and o.verdict == "ACCEPT"})
            if not backends:
                continue
            cites = [Cite(rs.artifact, rule.line, rule.text.strip())]
            for o in outcomes:
                for s in o.state.steps:
                    if "DNAT" in s.text and s.line is not None:
                        c = Cite(rs.artifact, s.line, s.text.strip())
                        if c not in cites:
                            cites.append(c)
            m = _SVC_COMMENT.search(rule.text) or next(
                (mm for o in outcomes for s in o.state.steps if (mm := _SVC_COMMENT.search(s.text))), None
            )
            if m and m.group(1).split(":")[0] in unreadable:
                continue  # the rules of a Service whose object is broken (an input problem)
            dest = f"{pkt.dst}:{port}" if fam.family == 4 else f"[{pkt.dst}]:{port}"
            out.append(StaleRule(fam.family, dest, proto, m.group(1) if m else None, backends, cites[:4], nodeport))
    return out


def run_verification(
    rulesets: list[Ruleset],
    services: list[K8sObject],
    slices: list[K8sObject],
    endpoints: list[K8sObject],
    pods: list[K8sObject],
    node: NodeView,
    behaviour: Behaviour,
    extra_local: Iterable[IPAddress] = (),
    endpoints_exported: bool = False,
    part: Part | None = None,
) -> Verification:
    """Evaluate every Service port x traffic class, then look for stale destinations.

    ``part``: the pieces of the cases this process evaluates, when several share the work (see
    :class:`Part`); :func:`merge_shares` puts them together."""
    part = part or Part()
    unverified: list[tuple[str, str]] = []
    sps, count = service_ports(services, slices, endpoints, endpoints_exported, unverified)
    todo = cases(sps, node, behaviour)
    local = [a for addrs in node.addresses.values() for a in addrs] + list(extra_local)
    fams: dict[int, FamilyRules] = {}

    def fam(f: int) -> FamilyRules:
        if f not in fams:
            fams[f] = family_rules(rulesets, f, local, record=False)
        return fams[f]

    ver = Verification(count, unverified=unverified)
    for f in sorted({rs.family for rs in rulesets if rs.form in ("save", "S")} | {c.sp.family for c in todo}):
        fr = fam(f)
        if len(fr.primary) > 1:
            ver.split[f] = [rs.artifact for rs, _ in fr.primary]
    ver.cases = todo
    for start, end in part.ranges(len(todo)):
        ver.results.extend(evaluate_case(c, fam(c.sp.family), node) for c in todo[start:end])
        ver.ranges.append((start, end))
    if part.stale:
        ver.stale = stale_of(fams, owned_destinations(services, pods), node)
    if any(rs.form == "L" for rs in rulesets):
        ver.not_evaluated.append("iptables -L listings are not evaluated (they drop match details): give iptables-save")
    return ver


def stale_of(fams: dict[int, FamilyRules], owned: Owned, node: NodeView) -> list[StaleRule]:
    out: list[StaleRule] = []
    for f, fr in sorted(fams.items()):
        if fr.primary:
            ext = ipaddress.ip_address(EXTERNAL_CLIENTS[f][0])
            out.extend(find_stale(fr, owned.ips, owned.ports, node, pod_client(node, f), ext, owned.unreadable))
    return out


class Part:
    """The cases one process evaluates: all of them, or, when several processes share a large
    node, pieces taken from ``tickets`` one at a time until none is left (each process computes
    the same cases, so piece k is the same range in all of them). ``stale``: this process also
    looks for stale rules."""

    def __init__(self, tickets: Tickets | None = None, stale: bool = True) -> None:
        self.tickets = tickets
        self.stale = stale

    def ranges(self, total: int) -> Iterator[tuple[int, int]]:
        if self.tickets is None:
            yield 0, total
            return
        size = -(-total // self.tickets.count)
        while (k := self.tickets.take()) is not None:
            if k * size < total:
                yield k * size, min(total, (k + 1) * size)


# A result travels back from a child as plain tuples (pickling 10,000 dataclasses with their
# citations costs more than evaluating them); a rule's text object is shared by every citation
# of it, so pickle sends it once.
Packed = tuple[Any, ...]


def _pack_cite(c: Cite | None) -> tuple[str, int | None, str] | None:
    return None if c is None else (c.artifact, c.line, c.text)


def _unpack_cite(packed: tuple[str, int | None, str] | None) -> Cite | None:
    if packed is None:
        return None
    art, line, text = packed
    return Cite(art, None, text) if line is None else rule_cite(art, line, text)


def _pack(r: Result, share: dict[Any, Any]) -> Packed:
    """``share`` interns equal entry and citation lists (a Service port's traffic classes mostly
    reach the same backends through the same rules), so each travels, and is rebuilt, once."""
    entries = tuple((e.backend, e.verdict, e.probability, _pack_cite(e.rule), e.chain, e.ruleset) for e in r.actual)
    rules = tuple(_pack_cite(c) for c in r.rules)
    return (
        r.status,
        r.kind,
        r.note,
        share.setdefault(entries, entries),
        share.setdefault(rules, rules),
        r.stale_backends,
        r.missing_backends,
        r.uneven,
        r.local_policy,
        r.local_endpoints,
    )


def _unpack(case: Case, p: Packed, built: dict[int, list[Any]]) -> Result:
    """The Result of a packed one; ``built`` keeps the lists already rebuilt, by the identity of
    their packed form (interned by ``_pack``, and alive while the packed results are)."""
    res = _result(case, p[0])
    res.kind, res.note = p[1], p[2]
    actual = built.get(id(p[3]))
    if actual is None:
        actual = built[id(p[3])] = [Entry(b, v, pr, _unpack_cite(c), ch, tag) for b, v, pr, c, ch, tag in p[3]]
    rules = built.get(id(p[4]))
    if rules is None:
        rules = built[id(p[4])] = [c for c in map(_unpack_cite, p[4]) if c is not None]
    res.actual, res.rules = actual, rules
    res.stale_backends, res.missing_backends, res.uneven, res.local_policy, res.local_endpoints = p[5:10]
    return res


PackedShare = tuple[list[tuple[int, int]], list[Packed], list[StaleRule]]


def pack_share(ver: Verification) -> PackedShare:
    """A worker's part of the verification, to send to the calling process."""
    share: dict[Any, Any] = {}
    return ver.ranges, [_pack(r, share) for r in ver.results], ver.stale


def merge_shares(ver: Verification, parts: list[PackedShare]) -> Verification | None:
    """The calling process's part (``ver``) completed with the workers' parts: the same
    verification one process would have made, or None when some pieces are missing (a worker
    that failed after taking them)."""
    pieces: list[tuple[int, int, list[Result]]] = []
    pos = 0
    for start, end in ver.ranges:
        pieces.append((start, end, ver.results[pos : pos + end - start]))
        pos += end - start
    for ranges, packed, stale in parts:
        built: dict[int, list[Any]] = {}
        pos = 0
        for start, end in ranges:
            done = [_unpack(ver.cases[start + i], p, built) for i, p in enumerate(packed[pos : pos + end - start])]
            pieces.append((start, end, done))
            pos += end - start
        ver.stale.extend(stale)
    pieces.sort(key=lambda x: x[0])
    covered = 0
    for start, end, _ in pieces:
        if start != covered:
            return None
        covered = end
    if covered != len(ver.cases):
        return None
    ver.results = [r for _, _, done in pieces for r in done]
    ver.ranges = [(0, len(ver.cases))]
    return ver
