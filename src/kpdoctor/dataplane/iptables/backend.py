"""The iptables backend: kube-proxy's iptables mode (and every other writer's iptables rules).

Each address family is evaluated through its ``iptables-save`` rules. When kube-proxy's rules are
in both iptables backends (legacy and nft), both are live in the kernel: each is a view of its
own, and the verifier says where they disagree. Rules of the other backend that hold no Service
rules (firewalls, CNI filters) still take part: a packet must pass them too.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kpdoctor import lazy_re
from kpdoctor.dataplane.addresses import IPAddress, Span, endpoint_text
from kpdoctor.dataplane.backend import Packet, TracedView, View
from kpdoctor.dataplane.expected import ANY_PORT, EXTERNAL_CLIENTS, Case, NodeView, Owned, pod_client
from kpdoctor.dataplane.iptables.compile import CompiledTable, compile_tables
from kpdoctor.dataplane.iptables.evaluate import Dep, Evaluator
from kpdoctor.dataplane.iptables.native import CoreMissing, NativeEntry, NativeEvaluator, native_walks
from kpdoctor.dataplane.results import Entry, Result, StaleRule, TraceBranch, TraceStep, rule_cite
from kpdoctor.dataplane.walk import Outcome, Step, undecided_note
from kpdoctor.model import Cite
from kpdoctor.parse.ipset import IpSet
from kpdoctor.parse.iptables import Rule, Ruleset

if TYPE_CHECKING:
    from kpdoctor._core import RulesState as CoreRulesState

_SVC_COMMENT = lazy_re.compile(
    r'--comment "?([a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[\w.-]+)?)'
)

# Who writes a chain, by its name: the owner of the rule that decided a packet's fate.
KUBELET_CHAINS = frozenset({"KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"})
KUBE_ROUTER_PREFIXES = ("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-")  # KUBE-* too, but not kube-proxy's
CHAIN_OWNERS = (
    ("cali-", "calico"),
    ("CILIUM_", "cilium"),
    ("DOCKER", "docker"),
    ("CNI-", "a CNI plugin"),
    ("FLANNEL", "flannel"),
    ("WEAVE", "weave"),
    ("ANTREA", "antrea"),
    ("ufw-", "ufw"),
    ("ts-", "tailscale"),
    ("f2b-", "fail2ban"),
)


def chain_owner(chain: str | None) -> str | None:
    """The component that writes ``chain`` (None for built-in chains and names nobody claims).
    Called for every entry of a verification: KUBE-* (nearly all of them) is decided first."""
    if not chain:
        return None
    if chain.startswith("KUBE-"):
        if chain in KUBELET_CHAINS:
            return "kubelet"
        return "kube-router" if chain.startswith(KUBE_ROUTER_PREFIXES) else "kube-proxy"
    return next((who for prefix, who in CHAIN_OWNERS if chain.startswith(prefix)), None)


def has_service_rules(rs: Ruleset) -> bool:
    """Does this backend hold Service forwarding (any DNAT in nat)?"""
    nat = rs.tables.get("nat")
    return nat is not None and next(nat.containing("DNAT"), None) is not None


def one_per_backend(rulesets: Iterable[Ruleset]) -> list[Ruleset]:
    """One dump per iptables backend: the same backend's dump given twice is one."""
    seen: set[str | None] = set()
    out = []
    for rs in rulesets:
        if rs.variant in seen and rs.variant is not None:
            continue
        seen.add(rs.variant)
        out.append(rs)
    return out


_GONE = object()


@dataclass
class RulesState:
    """What the rules held at one verification: for the rules the Python evaluator walked, per
    (artifact, table), each chain's parts (CompiledTable.chain_state) and every chain's policy;
    for those the native core walked, per artifact, the core's fingerprints of the same parts
    (``_core.RulesState``: the texts and compiled rules are not kept between cycles)."""

    tables: dict[tuple[str, str], dict[str, dict[object, object]]] = field(default_factory=dict)
    decls: dict[tuple[str, str], dict[str, str | None]] = field(default_factory=dict)
    native: dict[str, CoreRulesState] = field(default_factory=dict)


@dataclass(slots=True)
class FamilyRules:
    """The rules one address family is evaluated with."""

    family: int
    primary: list[tuple[Ruleset, Evaluator | NativeEvaluator]]  # one, or two when Service rules are in both backends
    missing: str | None = None  # why there is nothing to evaluate


def family_rules(
    rulesets: list[Ruleset],
    family: int,
    local: Iterable[IPAddress],
    record: bool = True,
    ipsets: dict[str, IpSet] | None = None,
) -> FamilyRules:
    """The rules of one family, ready to walk (``ipsets``: the sets ``-m set`` rules read, as
    IPVS mode's rules do), in the native core where it can (KPDOCTOR_CORE permitting)."""
    uniq = one_per_backend(rs for rs in rulesets if rs.family == family and rs.form in ("save", "S"))
    if not uniq:
        return FamilyRules(family, [], f"no ip{'6' if family == 6 else ''}tables-save output for IPv{family}")
    kube = [rs for rs in uniq if has_service_rules(rs)]
    local = list(local)
    made: dict[int, dict[str, CompiledTable]] = {}

    def compiled(rs: Ruleset) -> dict[str, CompiledTable]:
        got = made.get(id(rs))
        if got is None:
            got = made[id(rs)] = compile_tables(rs.tables, rs.artifact)
        return got

    def evaluator(primary: Ruleset, others: list[Ruleset]) -> Evaluator | NativeEvaluator:
        # the native core walks a verification's packets; steps kept (trace) and ipsets read
        # (IPVS mode) are the Python evaluator's still
        if not record and ipsets is None and native_walks():
            try:
                return NativeEvaluator(primary, others, local, compiled)
            except CoreMissing:
                pass  # the same walk, slower (the command says why: cli._core_notice)
            except (UnicodeError, ValueError):
                pass  # text that is not UTF-8 (kept as surrogate escapes): the Python evaluator reads it
        return Evaluator(compiled(primary), local, ipsets, [compiled(rs) for rs in others], record=record)

    if len(kube) >= 2:
        return FamilyRules(family, [(rs, evaluator(rs, [])) for rs in kube])
    primary = kube[0] if kube else uniq[0]
    return FamilyRules(family, [(primary, evaluator(primary, [rs for rs in uniq if rs is not primary]))])


def step_cite(rs: Ruleset, step: Step | None) -> Cite | None:
    """A step's rule (or policy) cited in the dump it was read from (``rs``: the view's own,
    unless the step crossed into the other backend's tables)."""
    if step is None:
        return None
    artifact = step.origin or rs.artifact
    if step.line is None:
        return Cite(artifact, None, f"{step.table} {step.chain} {step.text}")
    return rule_cite(artifact, step.line, step.text)


def outcome_entries(rs: Ruleset, outcomes: list[Outcome], tag: str | None) -> tuple[list[Entry], list[Cite], list[str]]:
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
        cite = step_cite(rs, step)
        chain = step.chain if step else None
        entries.append(
            Entry(o.endpoint, verdict, o.probability, cite, chain, tag, chain_owner(chain), open_table=o.open_table)
        )
        if cite is not None:
            rules[cite] = None
    return entries, list(rules), reasons


def native_entries(
    ev: NativeEvaluator, native: list[NativeEntry], tag: str | None
) -> tuple[list[Entry], list[Cite], list[str]]:
    """:func:`outcome_entries` of the native core's walk (it chose the step to cite, and says
    which dump each step was read from; each step's citation, chain and owner are worked out
    once per evaluator: a verification cites the same rules from many of its 100,000 entries)."""
    entries: list[Entry] = []
    rules: dict[Cite, None] = {}
    reasons: list[str] = []
    known = ev.citations
    for prob, verdict, reason, backend, step, open_table in native:
        if verdict == "UNCERTAIN":
            reasons.append(reason)
        cite = chain = owner = None
        if step is not None:
            got = known.get(step)
            if got is None:
                table, chain, line, text, origin = ev.cited(step)
                cite = Cite(origin, None, f"{table} {chain} {text}") if line is None else rule_cite(origin, line, text)
                got = known[step] = (cite, chain, chain_owner(chain))
            cite, chain, owner = got
            rules[cite] = None
        entries.append(Entry(backend, verdict, prob, cite, chain, tag, owner, open_table=open_table))
    return entries, list(rules), reasons


class IptablesBackend:
    """kube-proxy's iptables mode: the node's ``iptables-save`` rules, per address family.

    ``local``: the node's own addresses (``--dst-type LOCAL``); ``record``: keep every step
    (``trace``; a verification needs only outcomes)."""

    mode = "iptables"

    def __init__(self, rulesets: list[Ruleset], local: Iterable[IPAddress], record: bool = False) -> None:
        self.rulesets = rulesets
        self.local = list(local)
        self.record = record
        self._families: dict[int, FamilyRules] = {}
        # set around one evaluation to learn what it looked at (dataplane/reuse.py)
        self.deps: set[Dep] | None = None

    def family(self, family: int) -> FamilyRules:
        fr = self._families.get(family)
        if fr is None:
            fr = self._families[family] = family_rules(self.rulesets, family, self.local, record=self.record)
        return fr

    def families(self) -> list[int]:
        """Families with rules in the evidence."""
        return sorted({rs.family for rs in self.rulesets if rs.form in ("save", "S")})

    def missing(self, family: int) -> str | None:
        return self.family(family).missing

    def split(self) -> dict[int, list[str]]:
        out = {}
        for f in self.families():
            fr = self.family(f)
            if len(fr.primary) > 1:
                out[f] = [rs.artifact for rs, _ in fr.primary]
        return out

    def settled(self, cases: list[Case]) -> list[bool]:
        """Which cases the rules certainly handle as the cluster expects (see :class:`SettlesCases`):
        those of a family whose Service rules are in one backend, walked by the native core, and
        only while no evaluation's reads are being recorded (the agent's carried results)."""
        out = [False] * len(cases)
        if self.deps is not None:
            return out
        by_family: dict[int, list[int]] = {}
        for i, case in enumerate(cases):
            by_family.setdefault(case.sp.family, []).append(i)
        for family, which in by_family.items():
            fam = self.family(family)
            ev = fam.primary[0][1] if len(fam.primary) == 1 and not fam.missing else None
            if isinstance(ev, NativeEvaluator):
                walks = [(_packet(cases[i]), cases[i].hook, cases[i].alternatives) for i in which]
                for i, ok in zip(which, ev.settled(walks), strict=True):
                    out[i] = ok
        return out

    def evaluate(self, case: Case) -> list[View]:
        fam = self.family(case.sp.family)
        pkt = _packet(case)
        views = []
        for rs, ev in fam.primary:
            tag = rs.variant if len(fam.primary) > 1 else None
            if isinstance(ev, NativeEvaluator):
                native, undecided = ev.entries(pkt, case.hook, self.deps)
                entries, rules, reasons = native_entries(ev, native, tag)
                views.append(View(tag, entries, rules, reasons, undecided_note(undecided)))
                continue
            ev.deps = self.deps
            try:
                outcomes = ev.run(pkt, case.hook, postrouting=False)
            finally:
                ev.deps = None
            notes = undecided_note(ev.undecided)
            entries, rules, reasons = outcome_entries(rs, outcomes, tag)
            views.append(View(tag, entries, rules, reasons, notes))
        return views

    def rule_changes(self, before: RulesState | None) -> tuple[RulesState, set[Dep]]:
        """What every part of the rules holds now (CompiledTable.chain_state), for every set of
        rules evaluated, and which parts differ from ``before`` (the previous verification's):
        a result none of whose recorded parts is among them is still right. A dump parsed with
        the previous one's rules (parse_save's ``reuse``) says which chains may have changed:
        only those, and chains declared or dropped or given another policy, are looked at again;
        ``before`` is updated in place and returned."""
        now = RulesState()
        changed: set[Dep] = set()
        seen: set[int] = set()
        marks = {rs.artifact: rs.changed_chains for rs in self.rulesets}
        for f in self.families():
            for _, ev in self.family(f).primary:
                if isinstance(ev, NativeEvaluator):
                    for origin, state in ev.states(known=now.native):
                        now.native[origin] = state
                        old_state = before.native.pop(origin, None) if before is not None else None
                        changed.update((origin, t, c, p) for t, c, p in state.changes(old_state))
                    continue
                for layer in ev.layers:
                    if id(layer) in seen:
                        continue
                    seen.add(id(layer))
                    for tname, tab in layer.items():
                        where = (tab.origin, tname)
                        old = before.tables.pop(where, None) if before is not None else None
                        old_decl = before.decls.pop(where, None) if before is not None else None
                        decl = tab.declared()
                        mark = marks.get(tab.origin)
                        if old is None or old_decl is None or mark is None:
                            parts = {c: tab.chain_state(c) for c in decl}
                            look: Iterable[str] = set(decl) | set(old or {})
                            if old is None:
                                changed.add((tab.origin, tname, None, None))  # the table appeared
                                old = {}
                        else:
                            parts = old
                            look = {c for t, c in mark if t == tname}
                            if decl != old_decl:
                                look |= {c for c in set(decl) | set(old_decl) if decl.get(c, 0) != old_decl.get(c, 0)}
                            old = {c: parts.get(c, {}) for c in look}
                            for c in look:
                                parts[c] = tab.chain_state(c)
                        for c in look:
                            was, got = old.get(c, {}), parts.get(c, {})
                            if not got:
                                parts.pop(c, None)
                            if bool(was) != bool(got):
                                changed.add((tab.origin, tname, c, None))  # declared, or dropped
                            for part in was.keys() | got.keys():
                                if was.get(part, _GONE) != got.get(part, _GONE):
                                    changed.add((tab.origin, tname, c, part))  # type: ignore[arg-type]
                        now.tables[where] = parts
                        now.decls[where] = decl
        if before is not None:  # tables no longer given (or walked the other way): every part of them changed
            for origin, state in before.native.items():
                changed.update((origin, t, c, p) for t, c, p in state.changes())
            for (origin, tname), parts in before.tables.items():
                changed.add((origin, tname, None, None))
                changed.update((origin, tname, c, p) for c, ps in parts.items() for p in [None, *ps])  # type: ignore[misc]
        return now, changed

    def explain_mismatch(self, case: Case, result: Result) -> list[str]:
        """Name the rule after which part of the traffic went on un-DNATed while the rest reached
        backends: a KUBE-SEP chain without its DNAT rule, as a node in the middle of a sync (or
        with a rule deleted by hand) has. The verification walk keeps no steps, so this one case
        is walked again with them (rare: only such mismatches pay for it)."""
        fam = self.family(case.sp.family)
        pkt = _packet(case)
        notes: list[str] = []
        for rs, ev in fam.primary:
            tag = rs.variant if len(fam.primary) > 1 else None
            mine = [e for e in result.actual if e.ruleset == tag]
            lost = [e for e in mine if e.verdict == "ACCEPT" and not e.endpoint]
            if not lost or len(lost) == len(mine):
                continue  # all of it untranslated: "no-rules", which says so itself
            outcomes = ev.recording().run(pkt, case.hook, postrouting=False)
            walked = [o for o in outcomes if o.verdict == "ACCEPT" and not o.endpoint]
            cites: list[Cite] = []
            for o in walked:
                step = next((x for x in reversed(o.state.steps) if x.table == "nat" and x.line is not None), None)
                cite = step_cite(rs, step)
                if cite is not None:
                    cites.append(cite)
            if len(cites) == len(lost):
                for e, c in zip(lost, cites, strict=True):
                    e.rule, e.chain = c, None
            for c in dict.fromkeys(cites):
                if c not in result.rules:
                    result.rules.append(c)
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
        return notes

    def stale(self, owned: Owned, node: NodeView) -> list[StaleRule]:
        out: list[StaleRule] = []
        for f in self.families():
            fr = self.family(f)
            if fr.primary:
                ext = ipaddress.ip_address(EXTERNAL_CLIENTS[f][0])
                out.extend(find_stale(fr, owned.ips, owned.ports, node, pod_client(node, f), ext, owned.unreadable))
        return out

    def trace(self, packet: Packet, hook: str) -> list[TracedView]:
        fam = self.family(packet.dst.version)
        views = []
        for rs, ev in fam.primary:
            outcomes = ev.run(packet, hook, postrouting=True)
            label = rs.variant if len(fam.primary) > 1 else None
            views.append(TracedView(label, rs.artifact, [trace_branch(rs, o) for o in outcomes]))
        return views

    def not_evaluated(self) -> list[str]:
        if any(rs.form == "L" for rs in self.rulesets):
            return ["iptables -L listings are not evaluated (they drop match details): give iptables-save"]
        return []


def _packet(case: Case) -> Packet:
    """The first packet of a case's connection (the verifier evaluates only cases with both ends)."""
    assert case.src is not None and case.dst is not None
    return Packet(case.src, case.dst, case.sp.protocol.lower(), case.dport)


def trace_branch(rs: Ruleset, o: Outcome) -> TraceBranch:
    steps = [
        TraceStep(s.origin or rs.artifact, s.table, s.chain, s.line, s.text.strip(), s.probability)
        for s in o.state.steps
    ]
    state = o.state
    return TraceBranch(o.probability, o.verdict, o.endpoint, steps, o.reason, state.masquerade, list(state.affinity))


def port_rules(
    rs: Ruleset, ev: Evaluator | NativeEvaluator, table: str
) -> tuple[Sequence[Rule], list[tuple[int, int, str, Span | None, bool]]]:
    """The rules of ``table`` that match one destination port of one protocol: only those can
    name a Service's address (see :meth:`NativeEvaluator.port_rules`), as a sequence of rules
    and, per such rule, its place in it (its Rule is made only for a stale one)."""
    if isinstance(ev, NativeEvaluator):
        return ev.port_rules(table)
    tab, compiled = rs.tables.get(table), ev.tables.get(table)
    if tab is None or compiled is None:
        return [], []
    rules: list[Rule] = []
    found = []
    # most of them compiled already, by the walks of the Services' own traffic
    for cr in compiled.compiled([r for r in tab.rules if "-dport" in r.text]):
        port, proto = cr.exact_dport, cr.proto
        if port is not None and proto is not None and not cr.proto_neg:
            found.append((len(rules), port, proto, cr.dst, cr.dst_neg))
            rules.append(cr.rule)
    return rules, found


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
        seen: set[tuple[int | None, str, int]] = set()
        rules, found = port_rules(rs, ev, "nat")
        for at, port, proto, span, span_neg in found:
            dst = span[1] if span is not None and not span_neg and span[1] == span[2] else None
            if dst is not None and span is not None and span[0] == fam.family:
                if (dst, proto, port) in owned_ips or (dst, proto, port) in seen or (dst, ANY_PORT, 0) in owned_ips:
                    continue
                if node_ip is not None and dst == int(node_ip) and (proto, port) in owned_ports:
                    continue
                seen.add((dst, proto, port))
                addr = ipaddress.ip_address(dst) if fam.family == 4 else ipaddress.IPv6Address(dst)
                pkt = Packet(pod_src, addr, proto, port)
                nodeport = False
            elif span is None or span_neg or (span[0] == 4 and span[1] >> 24 == 127):
                if (proto, port) in owned_ports or (None, proto, port) in seen or node_ip is None:
                    continue
                seen.add((None, proto, port))
                pkt = Packet(ext_src, node_ip, proto, port)
                nodeport = True
            else:
                continue
            outcomes = ev.run(pkt, "prerouting", postrouting=False)
            backends = sorted({o.endpoint for o in outcomes if o.endpoint and o.verdict == "ACCEPT"})
            if not backends:
                continue
            rule = rules[at]
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
            dest = endpoint_text(pkt.dst, port)
            out.append(StaleRule(fam.family, dest, proto, m.group(1) if m else None, backends, cites[:4], nodeport))
    return out
