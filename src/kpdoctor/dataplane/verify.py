"""Verification: what the node's rules do with each Service's traffic, against what they should do.

Every :class:`~kpdoctor.dataplane.expected.Case` (Service port x traffic class x family) is
evaluated by the backend of the mode kube-proxy runs in (:mod:`.modes`) and judged against the
outcomes the cluster allows (:func:`~kpdoctor.dataplane.results.judge`). Where the backend has
several independent sets of live rules (iptables rules in both backends), each is judged, and a
disagreement is a mismatch of its own. Beyond the Services the cluster has, the rules are searched
for destinations that still forward although no Service owns them (stale rules, seed 003).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from kpdoctor.dataplane.backend import Backend, RecordsReads, SettlesCases
from kpdoctor.dataplane.expected import (
    ENDPOINTS_UNKNOWN,
    SHARED,
    Behaviour,
    Case,
    Deviations,
    NodeView,
    Owned,
    cases,
    owned_destinations,
    partial_listing,
    service_ports,
)
from kpdoctor.dataplane.results import (
    PROB_TOLERANCE,
    Entry,
    Result,
    StaleRule,
    Verification,
    describe_entries,
    judge,
    open_note,
    outcome_signature,
    rule_cite,
)
from kpdoctor.dataplane.reuse import Reuse
from kpdoctor.model import Cite
from kpdoctor.parallel import Tickets
from kpdoctor.parse.k8s import K8sObject


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


def affinity_difference(rules: int, service: int) -> str:
    """What the node does when the rules' session affinity is not the Service's (a verb phrase:
    "the node ..." in a result's note, and in findings)."""
    if not service:
        return f"keeps each client on one backend for {rules} s although the Service has no session affinity"
    if not rules:
        return f"applies no session affinity although the Service asks for ClientIP ({service} s)"
    return f"keeps each client on one backend for {rules} s although the Service asks for {service} s"


def evaluate_case(case: Case, backend: Backend, node: NodeView) -> Result:
    sp = case.sp
    res = _result(case, "uncertain")
    res.local_policy = sp.etp_local if case.traffic.startswith("external") else sp.itp_local
    notes = list(case.notes)
    missing = backend.missing(sp.family)
    presence_only = case.unknown == ENDPOINTS_UNKNOWN and not missing and case.src is not None and case.dst is not None
    if (case.unknown and not presence_only) or missing or case.src is None or case.dst is None:
        res.note = "; ".join([case.unknown or missing or "no address to test", *notes])
        return res
    views = backend.evaluate(case)
    if presence_only:
        return _presence(case, res, views, notes)
    for v in views:
        notes.extend(v.notes)
    first = views[0]
    status, kind, alt = judge(case, first.entries)
    res.actual, res.rules = first.entries, first.rules
    if len(views) > 1:
        others = [judge(case, v.entries)[:2] for v in views[1:]]
        sig0 = outcome_signature(first.entries)
        if any(outcome_signature(v.entries) != sig0 for v in views[1:]) or any(o != (status, kind) for o in others):
            res.actual = [x for v in views for x in v.entries]
            res.rules = [c for v in views for c in v.rules]
            status, kind = "mismatch", "split"
            notes.insert(
                0,
                "the two iptables backends disagree: "
                + " vs ".join(f"{v.label}: {describe_entries(v.entries)}" for v in views),
            )
        else:
            notes.append("Service rules are in both iptables backends (they agree)")
    res.status, res.kind = status, kind
    if status == "uncertain":
        notes.insert(0, "; ".join(dict.fromkeys(first.uncertain)))
    elif opened := open_note(case, res.actual, status):
        notes.insert(0, opened)
    if status == "ok" and first.affinity is not None and (sp.affinity_timeout_shown or not sp.affinity):
        asked = sp.affinity_timeout if sp.affinity else 0
        if first.affinity != asked:
            status, kind = res.status, res.kind = "mismatch", "affinity"
            res.affinity = (first.affinity, asked)
            notes.insert(0, "the node " + affinity_difference(first.affinity, asked))
    if status == "ok" and alt is not None and len(case.alternatives) > 1:
        notes.append(f"matches: {alt.why}")
    if status == "mismatch" and kind in ("backends", "not-refused", "partly-refused"):
        fwd = {e.endpoint for e in res.actual if e.endpoint and e.verdict == "ACCEPT"}
        forwarding = (a for a in case.alternatives if not a.refused)
        best = max(forwarding, key=lambda a: len(fwd.intersection(a.backends)), default=None)
        want = set(best.backends) if best else set()
        res.stale_backends = sorted(fwd - want)
        res.missing_backends = sorted(want - fwd)
        if best and not res.stale_backends and not res.missing_backends:
            n = len(want)
            res.uneven = any(abs(e.probability - 1 / n) > PROB_TOLERANCE for e in res.actual if e.endpoint)
    if status == "mismatch":
        notes[:0] = backend.explain_mismatch(case, res)
    if res.local_policy:
        res.local_endpoints = sorted({e.addr for e in sp.endpoints if e.node and e.node == node.name})
    res.note = "; ".join(n for n in notes if n)
    return res


def _presence(case: Case, res: Result, views: list[Any], notes: list[str]) -> Result:
    """A case whose Service's endpoints are not shown: only a packet every backend's rules leave
    untouched is judged (the Service port has no rules: a mismatch whatever its endpoints are);
    any other outcome stays uncertain, its backends unknown."""
    judged = [judge(case, v.entries)[:2] for v in views]
    if all(j == ("mismatch", "no-rules") for j in judged):
        res.status, res.kind = "mismatch", "no-rules"
        res.actual, res.rules = views[0].entries, views[0].rules
        notes.insert(0, f"the rules leave it untouched ({ENDPOINTS_UNKNOWN}: its backends are not judged)")
    else:
        notes.insert(0, f"{ENDPOINTS_UNKNOWN}: the rules handle it, its backends are not judged")
    res.note = "; ".join(n for n in notes if n)
    return res


def run_verification(
    backend: Backend,
    services: list[K8sObject],
    slices: list[K8sObject],
    endpoints: list[K8sObject],
    pods: list[K8sObject],
    node: NodeView,
    behaviour: Behaviour,
    endpoints_exported: bool = False,
    part: Part | None = None,
    deviations: Deviations = SHARED,
    reuse: Reuse | None = None,
) -> Verification:
    """Evaluate every Service port x traffic class, then look for stale destinations.

    ``part``: the pieces of the cases this process evaluates, when several share the work (see
    :class:`Part`); :func:`merge_shares` puts them together."""
    part = part or Part()
    unverified: list[tuple[str, str]] = []
    ports = cases_of = None
    if reuse is not None:
        before = reuse.previous
        ports = (before.ports if before is not None else {}, reuse.next.ports)
        cases_of = (before.cases if before is not None else {}, reuse.next.cases)
    sps, count = service_ports(services, slices, endpoints, endpoints_exported, unverified, carry=ports)
    todo = cases(sps, node, behaviour, deviations, carry=cases_of)
    ver = Verification(count, unverified=unverified, mode=backend.mode)
    ver.split = backend.split()
    ver.cases = todo
    if reuse is not None:
        track = _tracking(backend)
        for c in todo:
            ver.results.append(reuse.result(c, lambda c: evaluate_case(c, backend, node), track))
        ver.ranges.append((0, len(todo)))
        if isinstance(backend, RecordsReads):
            backend.deps = None
    else:
        for start, end in part.ranges(len(todo)):
            ver.rows.extend(_evaluated(todo[start:end], backend, node, ver))
            ver.ranges.append((start, end))
    if part.stale and not partial_listing(services):
        ver.stale = backend.stale(_owned(services, pods, reuse), node)
    ver.not_evaluated.extend(backend.not_evaluated())
    return ver


def _evaluated(todo: list[Case], backend: Backend, node: NodeView, ver: Verification) -> list[Result | Case]:
    """The rows of these cases: the cases a backend that can (:class:`SettlesCases`) settles
    as "ok" are kept as cases, their Results built when read (``ver.build``); every other case
    is evaluated now."""
    settled = [False] * len(todo)
    if isinstance(backend, SettlesCases):
        walkable = [i for i, c in enumerate(todo) if _walkable(c, backend)]
        for i, ok in zip(walkable, backend.settled([todo[i] for i in walkable]), strict=True):
            settled[i] = ok
    if any(settled):
        ver.build = functools.partial(evaluate_case, backend=backend, node=node)
    return [c if ok else evaluate_case(c, backend, node) for c, ok in zip(todo, settled, strict=True)]


def _walkable(case: Case, backend: Backend) -> bool:
    """Whether evaluating the case walks its packet and judges every backend (not a case that
    lacks evidence, nor one whose endpoints are not shown)."""
    return not case.unknown and case.src is not None and case.dst is not None and not backend.missing(case.sp.family)


def _owned(services: list[K8sObject], pods: list[K8sObject], reuse: Reuse | None) -> Owned:
    """What the cluster's objects own; the previous run's when they are the very same objects
    (the node agent keeps them parsed: a cycle where only EndpointSlices changed owns the same)."""
    key = (tuple(map(id, services)), tuple(map(id, pods)))
    before = reuse.previous.owned if reuse is not None and reuse.previous is not None else None
    owned = before[1] if before is not None and before[0] == key else owned_destinations(services, pods)
    if reuse is not None:
        reuse.next.owned = (key, owned, (services, pods))  # the objects kept alive: their ids stay theirs
    return owned


def _tracking(backend: Backend) -> Callable[[], set[Any]] | None:
    """How to learn what one evaluation reads, for a backend that records it (iptables)."""
    if not isinstance(backend, RecordsReads):
        return None
    recording = backend

    def track() -> set[Any]:
        seen: set[Any] = set()
        recording.deps = seen
        return seen

    return track


def unevaluated(
    reason: str, services: list[K8sObject], slices: list[K8sObject], endpoints: list[K8sObject], mode: str | None
) -> Verification:
    """The verification of a node whose proxy mode no backend reads: no results, only why."""
    unverified: list[tuple[str, str]] = []
    _, count = service_ports(services, slices, endpoints, False, unverified)
    return Verification(count, evaluated=False, reason=reason, mode=mode)


def leftovers(backend: Backend, node: NodeView, mode: str) -> list[StaleRule]:
    """What ``backend``'s mode (which kube-proxy no longer runs in) still forwards: nothing of it
    is owned, but only destinations that kube-proxy's own rules forward are its leftovers."""
    out = []
    for s in backend.stale(Owned.nothing(), node):
        if s.label or any("KUBE-" in c.text for c in s.rules):
            s.leftover_of = mode
            out.append(s)
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
    entries = tuple(
        (
            e.endpoint,
            e.verdict,
            e.probability,
            _pack_cite(e.rule),
            e.chain,
            e.ruleset,
            e.owner,
            e.no_service_rule,
            e.open_table,
            e.no_real_servers,
        )
        for e in r.actual
    )
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
        r.affinity,
    )


def _unpack(case: Case, p: Packed, built: dict[int, list[Any]]) -> Result:
    """The Result of a packed one; ``built`` keeps the lists already rebuilt, by the identity of
    their packed form (interned by ``_pack``, and alive while the packed results are)."""
    res = _result(case, p[0])
    res.kind, res.note = p[1], p[2]
    actual = built.get(id(p[3]))
    if actual is None:
        actual = built[id(p[3])] = [
            Entry(b, v, pr, _unpack_cite(c), ch, tag, o, unowned, t, empty)
            for b, v, pr, c, ch, tag, o, unowned, t, empty in p[3]
        ]
    rules = built.get(id(p[4]))
    if rules is None:
        rules = built[id(p[4])] = [c for c in map(_unpack_cite, p[4]) if c is not None]
    res.actual, res.rules = actual, rules
    res.stale_backends, res.missing_backends, res.uneven, res.local_policy, res.local_endpoints, res.affinity = p[5:11]
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
