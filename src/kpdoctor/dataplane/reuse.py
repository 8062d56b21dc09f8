"""Carrying a verification's results to the next one, for what did not change.

The node agent verifies the same node every few minutes; between two cycles a few Services and
their rules change, the rest do not. A result is carried over only when everything it was worked
out from is provably the same:

* its case: the Service port, its endpoints and their conditions, the traffic class, source,
  destination and the outcomes allowed (:func:`case_signature`, compared whole, never hashed);
* the node around it (:func:`setting`): node name, the addresses taken as local, the proxy mode,
  and each set of rules' role (which backend, family, tables, whether it holds Service rules);
* the rules it looked at: in iptables mode the walk records every chain it entered (and, in an
  indexed dispatch chain, the rules its destination selects: ``KUBE-SERVICES`` holds every
  Service, but a packet only ever sees its own few), and each must hold the same rule texts. A
  mode whose backend records nothing (nftables, IPVS) depends on the whole of its rules: any
  change there evaluates every case again.

A carried result keeps its verdict but takes the new evidence's line numbers (a rule added above
it moves it down: the citation object every result of that rule shares is moved in place, once);
one whose notes cite lines that moved is evaluated again instead. The citations are moved all at
once when a verification begins, each once, not result by result: 22,000 carried results cite
about 50,000 rules some 200,000 times. Every
``full_every`` cycles the caller asks for a full pass, and the tests compare an incremental
verification with a full one after each kind of change.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kpdoctor import lazy_re
from kpdoctor.dataplane.expected import Case
from kpdoctor.dataplane.results import Result, move_cite
from kpdoctor.model import Cite

_LINE_REF = lazy_re.compile(r"\bline \d")

CaseKey = tuple[str, str, int, str, str, str | None, str]
Deps = frozenset[tuple[Hashable, object]] | None  # (dependency, its fingerprint); None: all rules


def case_key(case: Case) -> CaseKey:
    sp = case.sp
    return (sp.label, sp.protocol, sp.family, case.traffic, case.destination, case.source, case.hook)


def case_signature(case: Case) -> tuple[object, ...]:
    """Everything of a case its evaluation reads, as plain values (its Service's citation aside:
    that moves with the objects' file, and is taken from the new case)."""
    sp = case.sp
    eps = tuple((e.ip, e.port, e.node, e.ready, e.serving, e.terminating, e.zones) for e in sp.endpoints)
    return (
        sp.namespace, sp.name, sp.port_name, sp.protocol, sp.port, sp.family, sp.node_port, sp.cluster_ip,
        tuple(sp.external_ips), tuple(sp.lb_ips), tuple(str(r) for r in sp.source_ranges), sp.etp_local,
        sp.itp_local, sp.affinity, sp.affinity_timeout, sp.affinity_timeout_shown, sp.topology, eps,
        sp.endpoints_known, tuple(sp.problems), sp.node_port_problem, tuple(sp.notes),
        case.traffic, case.src, case.dst, case.dport, case.hook,
        tuple((tuple(sorted(a.backends)), a.why) for a in case.alternatives), tuple(case.notes), case.unknown,
    )  # fmt: skip


def setting(
    node: str | None,
    local: Iterable[object],
    mode: str | None,
    roles: Iterable[object],
    rules_text: Iterable[str] | None,
) -> object:
    """The part of a verification every case shares: the node's name, the addresses taken as
    local, the mode, each set of rules' place (see the module docstring), and the whole rules
    (``rules_text``) for a backend that records no dependencies."""
    digest = None
    if rules_text is not None:
        h = hashlib.sha256()
        for t in rules_text:
            h.update(t.encode("utf-8", "surrogatepass"))
            h.update(b"\0")
        digest = h.hexdigest()
    return (node, tuple(str(a) for a in local), mode, tuple(roles), digest)


@dataclass(slots=True)
class _Kept:
    case: Case
    signature: tuple[object, ...] | None  # worked out when a case other than ``case`` asks
    deps: frozenset[Hashable] | None  # the parts of the rules it read; None: all of them
    result: Result


@dataclass
class Carried:
    """What one verification leaves for the next: each case's result with what it depended on,
    and what every part of the rules held (``rules``; None for a backend that records nothing)."""

    setting: object = None
    kept: dict[CaseKey, _Kept] = field(default_factory=dict)
    rules: Any = None  # what the rules held (the backend's, e.g. iptables' RulesState)
    # Service ports and their cases by the identity of what they were made from (expected.py)
    ports: dict[Any, Any] = field(default_factory=dict)
    cases: dict[Any, Any] = field(default_factory=dict)
    # each iptables dump's rules by their line's text, for the next parse of it (parse_save)
    rules_read: dict[str, dict[str, Any]] = field(default_factory=dict)
    # typed views of the cluster's objects by object (facts/cluster.py)
    views: dict[int, Any] = field(default_factory=dict)
    keys: dict[int, CaseKey] = field(default_factory=dict)  # each kept case's key, by the case
    owned: tuple[Any, Any, Any] | None = None  # what the objects own, by their identity (verify.py)


class Reuse:
    """One verification's use of the previous one's results (``previous`` None, or ``full``:
    every case is evaluated, and what it depended on is recorded for the next)."""

    def __init__(self, previous: Carried | None = None, full: bool = False) -> None:
        self.previous = previous
        self.full = full
        self.next = Carried()
        self.reused = 0
        self.evaluated = 0
        self.changed: set[Hashable] = set()  # the parts of the rules that changed since the previous
        self._gone: set[int] = set()  # the registered citations whose rule is not one line now, by id
        self._moved: set[int] = set()  # the ones at another line now
        self._deps: dict[Hashable, Hashable] = {}  # one copy of each dependency, shared by the cases

    def rules_of(self, artifact: str) -> dict[str, Any] | None:
        """The previous parse's rules of ``artifact`` by their text (parse_save's ``reuse``)."""
        return self.previous.rules_read.pop(artifact, None) if self.previous is not None else None

    def keep_rules(self, artifact: str, rules: list[Any], unpooled: set[str] | None = None) -> None:
        """This parse's rules of ``artifact`` by their text, for the next parse and to find a
        rule's line now (a text on two lines is ambiguous: then no rule of it is kept; nor is a
        rule the parser read the long way, ``unpooled``)."""
        pool = {r.text: r for r in rules}
        for t in unpooled or ():
            pool.pop(t, None)
        if len(pool) != len(rules):
            for t, n in Counter(r.text for r in rules).items():
                if n > 1:
                    del pool[t]
        self.next.rules_read[artifact] = pool

    def begin(
        self,
        now: object,
        line_of: Callable[[str, str], int | None],
        rules: object | None,
        changed: set[Hashable] | None,
    ) -> None:
        """The verification's shared part (:func:`setting`), how to find a rule's line now
        (``line_of(artifact, text)``, None when that text is not one line of the artifact), what
        the rules hold now and which of their parts changed since the previous verification
        (both None: the backend records no dependencies, and depends on all of its rules)."""
        self.next.setting, self.next.rules = now, rules
        self.changed = changed or set()
        prev = self.previous
        if prev is not None and (prev.setting != now or (prev.rules is None) != (rules is None)):
            self.full = True
        if prev is not None and not self.full:
            self._reline(prev.kept.values(), line_of)

    def _reline(self, kept: Iterable[_Kept], line_of: Callable[[str, str], int | None]) -> None:
        """Put every rule the kept results cite at its line now, in place: a citation object is
        shared by every result citing that rule (results.rule_cite), and every one of them carried
        over moves with it, without copying a result or its entries. A rule whose text is not one
        line now is gone from the register, and the results citing it are evaluated again
        (:meth:`_carry`). The previous verification's report, which shares the objects, then cites
        the new dump's lines: the agent keeps no dump older than the one being read."""
        cites: dict[int, Cite] = {}
        for k in kept:
            for c in k.result.rules:
                cites[id(c)] = c
            for e in k.result.actual:  # (each cites one of the result's rules: safe)
                if e.rule is not None:
                    cites[id(e.rule)] = e.rule
        gone, moved = self._gone, self._moved
        for key, c in cites.items():
            if c.line is None:
                continue
            line = line_of(c.artifact, c.text)
            if line is None:
                gone.add(key)
            elif line != c.line:
                move_cite(c, line)
                moved.add(key)

    def result(
        self,
        case: Case,
        evaluate: Callable[[Case], Result],
        track: Callable[[], set[Any]] | None,
    ) -> Result:
        """The case's result: carried over when nothing it depends on changed, else evaluated.
        ``track()`` starts recording what an evaluation reads (returns the set it fills); None:
        the backend records nothing, and a case depends on all of its rules (part of the setting)."""
        prev = self.previous
        key = prev.keys.get(id(case)) if prev is not None else None
        if key is None or prev is None or prev.kept[key].case is not case:
            key = case_key(case)
        self.next.keys[id(case)] = key
        old = None if self.full or prev is None else prev.kept.get(key)
        sig = None
        if old is not None and old.case is not case:  # the same object: made from the same objects
            sig = case_signature(case)
            if old.signature is None:
                old.signature = case_signature(old.case)
        if old is not None and (sig is None or old.signature == sig):
            unchanged = self.next.rules is None if old.deps is None else old.deps.isdisjoint(self.changed)
            if unchanged:
                carried = self._carry(old.result, case)
                if carried is not None:
                    self.reused += 1
                    self.next.kept[key] = _Kept(case, sig if sig is not None else old.signature, old.deps, carried)
                    return carried
        seen = track() if track is not None else None
        res = evaluate(case)
        deps = None
        if seen is not None:
            share = self._deps.setdefault
            deps = frozenset(share(d, d) for d in seen)
        self.evaluated += 1
        self.next.kept[key] = _Kept(case, sig, deps, res)
        return res

    def _carry(self, res: Result, case: Case) -> Result | None:
        """``res`` with the new case's Service citation (its rules were put at their lines now
        when the verification began); None when a rule it cites is no longer one line, or a note
        cites a line that moved."""
        gone, moved = self._gone, self._moved
        if gone or (moved and _LINE_REF.search(res.note)):
            ids = {id(c) for c in res.rules}
            ids.update(id(e.rule) for e in res.actual if e.rule is not None)  # (one of its rules: safe)
            if not ids.isdisjoint(gone) or (_LINE_REF.search(res.note) and not ids.isdisjoint(moved)):
                return None
        cite = case.sp.cite
        if cite == res.service_cite:
            return res
        out: Result = _copy(res)
        out.service_cite = cite
        return out


def _copy(obj: Any) -> Any:
    """A shallow copy of a slotted dataclass (``dataclasses.replace`` costs ten times more)."""
    cls: Any = type(obj)
    new = cls.__new__(cls)
    for name in cls.__slots__:
        setattr(new, name, getattr(obj, name))
    return new
