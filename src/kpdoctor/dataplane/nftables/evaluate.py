"""Evaluate a packet through every base chain the kernel runs on its hooks, as the kernel would:
nftables chains of every table (kube-proxy's, firewalld's, a CNI's, iptables-nft's) and the
iptables tables of either backend, ordered by priority.

Semantics that decide outcomes here, and that reading kube-proxy's table alone would miss:

* ``accept`` ends only its own base chain: the next base chain on the hook still sees the packet;
  ``drop`` and ``reject`` end the packet.
* NAT chains run for a connection's first packet only, in priority order, and the first that
  binds a translation (``dnat``, ``masquerade``...) wins: later NAT chains on that hook are
  skipped for the connection.
* Chains of equal priority run in an order a listing does not show (the order they were
  registered). Where two of them could change each other's outcome (both translate, or one sets
  a mark the other reads), both orders are walked; if they differ, the result is *uncertain*.
* ``numgen random mod N`` splits the walk into N branches of 1/N each; a map without an element
  for some of them lets that share go on untranslated (and says so).

A match kpdoctor cannot decide (an interface it was not told) is tried both ways, as in the
iptables evaluator; an unknown statement makes that branch uncertain at its rule.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kpdoctor import memo
from kpdoctor.dataplane.backend import Packet
from kpdoctor.dataplane.iptables.compile import CompiledTable
from kpdoctor.dataplane.iptables.evaluate import MAX_BRANCHES, MAX_DEPTH, Mentions
from kpdoctor.dataplane.iptables.evaluate import Evaluator as XtEvaluator
from kpdoctor.dataplane.nftables.compile import (
    NAT_SOURCE_PRIORITY,
    XT_PRIORITY,
    Getter,
    NftChain,
    NftRule,
    NftSet,
    NftTableRules,
    Op,
    Span,
    element_text,
)
from kpdoctor.dataplane.walk import (
    Branch,
    IPAddress,
    Outcome,
    Result,
    State,
    Step,
    Uncertain,
    Undecided,
    merge_outcomes,
    settle,
    signature,
    walk_packet,
)

HOOKS = ("prerouting", "input", "forward", "output", "postrouting")
# the iptables built-in chains on each hook, by table
_XT_HOOKS = {
    "prerouting": (("raw", "PREROUTING"), ("mangle", "PREROUTING"), ("nat", "PREROUTING")),
    "input": (("mangle", "INPUT"), ("filter", "INPUT"), ("security", "INPUT"), ("nat", "INPUT")),
    "forward": (("mangle", "FORWARD"), ("filter", "FORWARD"), ("security", "FORWARD")),
    "output": (
        ("raw", "OUTPUT"),
        ("mangle", "OUTPUT"),
        ("nat", "OUTPUT"),
        ("filter", "OUTPUT"),
        ("security", "OUTPUT"),
    ),
    "postrouting": (("mangle", "POSTROUTING"), ("nat", "POSTROUTING")),
}
_RECORDED = frozenset({"drop", "reject", "dnat", "redirect"})  # steps a verification cites
INGRESS = -(10**6)  # ingress chains run before every prerouting chain, whatever their priority
_STATE_NEW = frozenset({"new"})
_NO_STATUS: frozenset[str] = frozenset()
_DNAT_STATUS = frozenset({"dnat"})
_ADDRESS_TEXT: dict[tuple[int, int], str] = memo.table()  # a backend's address as text, once per address


@dataclass(slots=True)
class Unit:
    """One base chain on a hook: an nftables base chain, or an iptables table's built-in chain."""

    hook: str
    prio: int
    nat: bool
    label: str  # "ip kube-proxy nat-prerouting", "iptables-legacy nat PREROUTING"
    table: NftTableRules | None = None
    chain: NftChain | None = None
    xt: XtEvaluator | None = None
    xt_table: str = ""
    xt_chain: str = ""
    # what it can do to another chain of the same priority (see Evaluator._interact)
    binds: bool = False
    writes_mark: bool = False
    reads_mark: bool = False
    ingress: bool = False  # a netdev (or inet) ingress chain: only on its device


class Evaluator:
    """Walks packets of one address family through every base chain of the node.

    ``tables``: nftables tables (of every listing given); ``xt``: iptables rules per backend
    ("legacy", "nft"), compiled, that take part at their tables' priorities; ``local``: the
    node's own addresses (``fib daddr type local``)."""

    def __init__(
        self,
        family: int,
        tables: Iterable[NftTableRules],
        xt: Iterable[tuple[str, dict[str, CompiledTable]]] = (),
        local: Iterable[IPAddress] = (),
        record: bool = False,
    ) -> None:
        self.family = family
        self.tables = [t for t in tables if family in t.families()]
        local = list(local)
        self.local = {int(a) for a in local if a.version == family}
        self.record = record
        self._forced: dict[int, bool] = {}
        self.undecided: list[str] = []
        self.hooks: dict[str, list[list[Unit]]] = {}
        size = 0
        units: list[Unit] = []
        for t in self.tables:
            for ch in t.chains.values():
                size += ch.size
                if ch.hook in HOOKS:
                    units.append(Unit(ch.hook or "", ch.prio, ch.type == "nat", f"{t.label} {ch.name}", t, ch))
                elif ch.hook == "ingress" and t.family in ("netdev", "inet"):
                    # before any prerouting chain, on the device it is bound to (which nft -j
                    # does not print): whether the packet meets it is tried both ways
                    label = f"{t.label} {ch.name}"
                    units.append(Unit("prerouting", INGRESS + ch.prio, False, label, t, ch, ingress=True))
        for backend, compiled in xt:
            ev = XtEvaluator(compiled, local, record=record)
            ev.share_forced(self._forced)  # one set of forced choices for the whole walk
            size += sum(ct.size for ct in compiled.values())
            for hook, pairs in _XT_HOOKS.items():
                for tname, cname in pairs:
                    tab = compiled.get(tname)
                    if tab is None or not tab.has_chain(cname):
                        continue
                    prio = XT_PRIORITY[tname]
                    if tname == "nat" and cname in ("POSTROUTING", "INPUT"):
                        prio = NAT_SOURCE_PRIORITY
                    label = f"iptables-{backend} {tname} {cname}"
                    units.append(Unit(hook, prio, tname == "nat", label, xt=ev, xt_table=tname, xt_chain=cname))
        for hook in HOOKS:
            mine = sorted((u for u in units if u.hook == hook), key=lambda u: u.prio)
            groups: list[list[Unit]] = []
            for u in mine:
                if groups and groups[-1][0].prio == u.prio:
                    groups[-1].append(u)
                else:
                    groups.append([u])
            self.hooks[hook] = groups
        self.max_branches = MAX_BRANCHES + size
        self._interacting: dict[int, bool] = {}
        self._cache: dict[tuple[Any, ...], list[tuple[float, str, str, State]]] = {}
        self._mentions: dict[tuple[Any, ...], tuple[set[int], list[tuple[int, int]]] | bool] = {}

    # -- public ------------------------------------------------------------------------
    def run(self, packet: Packet, hook: str = "prerouting", postrouting: bool = True) -> list[Outcome]:
        """All outcomes of a new connection entering at ``hook`` (prerouting or output);
        ``postrouting=False`` leaves out the source NAT chains (they cannot drop)."""
        return walk_packet(
            lambda: self._run_once(packet, hook, postrouting),
            packet,
            self._forced,
            self.undecided,
            lambda und: f"{und.step.chain}: {und.reason}",
        )

    # -- the walk ------------------------------------------------------------------------
    def _run_once(self, packet: Packet, hook: str, postrouting: bool) -> list[Outcome]:
        finals: list[Outcome] = []
        branches = self._hook(hook, [(1.0, State.start(packet))], finals, postrouting)
        done: list[Branch] = []
        for p, st in branches:
            local = self._is_local(st.dst)
            if hook == "prerouting":
                stages: tuple[str, ...] = ("input",) if local else ("forward", "postrouting")
            else:
                stages = ("postrouting", "input") if local else ("postrouting",)
            self._after(stages, local, postrouting, p, st, done, finals)
        finals.extend(Outcome(p, "ACCEPT", st) for p, st in done)
        return merge_outcomes(finals)

    def _after(
        self,
        stages: tuple[str, ...],
        local: bool,
        postrouting: bool,
        p: float,
        st: State,
        done: list[Branch],
        finals: list[Outcome],
    ) -> None:
        """The hooks after the routing decision for one branch, memoised (see :meth:`_memo`)."""
        units = [u for stage in stages for g in self.hooks.get(stage, ()) for u in g]

        def walk(probe: State) -> tuple[list[Outcome], list[Branch]]:
            sub: list[Outcome] = []
            rest: list[Branch] = [(1.0, probe)]
            for stage in stages:
                rest = self._hook(stage, rest, sub, postrouting)
            return sub, rest

        self._memo(("after", stages, local, postrouting), units, p, st, walk, done, finals)

    def _memo(
        self,
        what: tuple[Any, ...],
        units: list[Unit],
        p: float,
        st: State,
        walk: Callable[[State], tuple[list[Outcome], list[Branch]]],
        done: list[Branch],
        finals: list[Outcome],
    ) -> None:
        """Walk ``units`` for one branch through a cache: chains that look at few addresses (a
        firewall map of LoadBalancer IPs, the ClusterIP set) walk a node's 50,000 endpoints the same
        way, so the key holds addresses and ports only as far as some rule there tells them apart.
        Only what those chains can change is carried back: marks, masquerade, the steps taken."""
        key = None if self.record else self._memo_key(what, units, st)
        cached = self._cache.get(key) if key is not None else None
        if cached is None:
            probe = st.copy()
            probe.steps, probe.affinity = [], []
            sub, rest = walk(probe)
            cached = [(o.probability, o.verdict, o.reason, o.state) for o in sub]
            cached += [(q, "", "", s2) for q, s2 in rest]
            if key is not None:
                self._cache[key] = cached
        last = len(cached) - 1
        for i, (q, verdict, reason, s2) in enumerate(cached):
            out = st if i == last else st.copy()
            if s2.steps:
                out.steps.extend(Step(x.table, x.chain, x.line, x.text, x.probability * p, x.origin) for x in s2.steps)
            if s2.affinity:
                out.affinity.extend(a for a in s2.affinity if a not in out.affinity)
            out.mark, out.masquerade, out.notrack = s2.mark, out.masquerade or s2.masquerade, s2.notrack
            if verdict:
                finals.append(Outcome(p * q, verdict, out, reason))
            else:
                done.append((p * q, out))

    def _memo_key(self, what: tuple[Any, ...], units: list[Unit], st: State) -> tuple[Any, ...] | None:
        m = self._mentions.get(what)
        if m is None:
            m = self._mentions[what] = self._mentioned(units)
        if isinstance(m, bool):
            return None
        ints, spans = m
        pkt = st.packet
        src, dst, dport = st.src, st.dst, st.dport
        return (
            tuple(self._forced.items()) if self._forced else (),
            what,
            src if src in ints else -1,
            dst if dst in ints else -1,
            dport if dport in ints else -1,
            tuple(i for i, (lo, hi) in enumerate(spans) if lo <= src <= hi or lo <= dst <= hi or lo <= dport <= hi)
            if spans
            else (),
            pkt.proto,
            pkt.sport,
            pkt.iif,
            pkt.oif,
            st.mark,
            st.dnat is not None,
            st.masquerade,
            st.notrack,
            self._is_local(src),
            self._is_local(dst),
        )

    def _mentioned(self, units: list[Unit]) -> tuple[set[int], list[tuple[int, int]]] | bool:
        """Every number (address, port) and span the rules of these chains compare anything with;
        False when some rule reads what that cannot capture (an ipset by address)."""
        ints: set[int] = set()
        spans: set[tuple[int, int]] = set()
        for u in units:
            if u.xt is not None:
                xm = Mentions.of([u.xt.tables], self.family, ((u.xt_table, u.xt_chain),))
                if xm.opaque:
                    return False
                ints |= xm.dsts | xm.ports
                spans.update(xm.dst_spans)
                spans.update(xm.port_ranges)
                continue
            assert u.table is not None and u.chain is not None
            for chain in reachable_chains(u.table, u.chain):
                for rule in chain.rules:
                    for op in rule.ops:
                        _numbers(op, u.table, ints, spans)
        return ints, sorted(spans)

    def _hook(self, hook: str, branches: list[Branch], finals: list[Outcome], postrouting: bool) -> list[Branch]:
        for group in self.hooks.get(hook, ()):
            if not branches:
                break
            if len(group) == 1 or not self._interact(group):
                for u in group:
                    branches = self._unit(u, branches, finals, postrouting)
                continue
            branches = self._either_order(group, branches, finals, postrouting)
        return branches

    def _either_order(
        self, group: list[Unit], branches: list[Branch], finals: list[Outcome], postrouting: bool
    ) -> list[Branch]:
        """Chains of one priority that can change each other's outcome: walked in both orders;
        when the outcomes differ, which one the kernel takes is not in the evidence."""
        results = []
        for order in (group, group[::-1]):
            f: list[Outcome] = []
            b = [(p, st.copy()) for p, st in branches]
            for u in order:
                b = self._unit(u, b, f, postrouting)
            results.append((f, b))
        (f1, b1), (f2, b2) = results
        passed1 = f1 + [Outcome(p, "PASS", st) for p, st in b1]
        passed2 = f2 + [Outcome(p, "PASS", st) for p, st in b2]
        if signature(passed1) == signature(passed2):
            finals.extend(f1)
            return b1
        names = " and ".join(u.label for u in group)
        why = (
            f"{names} run at the same priority ({group[0].prio}) on {group[0].hook}, in an order the "
            "listing does not show, and the order decides the outcome"
        )
        for p, st in branches:
            finals.append(Outcome(p, "UNCERTAIN", st, why))
        return []

    def _unit(self, u: Unit, branches: list[Branch], finals: list[Outcome], postrouting: bool) -> list[Branch]:
        out: list[Branch] = []
        for p, st in branches:
            if u.nat and (st.notrack or self._bound(u.hook, st) or (u.hook == "postrouting" and not postrouting)):
                out.append((p, st))
                continue
            if not u.nat and not self.record and u.hook in ("prerouting", "output"):
                # a filter chain before the routing decision (kube-proxy's firewall check): it
                # cannot translate, so its outcome is memoised like the hooks after routing
                self._memo(("unit", id(u)), [u], p, st, functools.partial(self._unit_alone, u), out, finals)
                continue
            settle(self._run_unit(u, p, st), out, finals, self.max_branches, u.label)
        return out

    def _unit_alone(self, u: Unit, probe: State) -> tuple[list[Outcome], list[Branch]]:
        sub: list[Outcome] = []
        rest: list[Branch] = []
        settle(self._run_unit(u, 1.0, probe), rest, sub)
        return sub, rest

    @staticmethod
    def _bound(hook: str, st: State) -> bool:
        """Has an earlier NAT chain of this hook already translated the connection?"""
        if hook in ("prerouting", "output"):
            return st.dnat is not None
        return st.masquerade

    def _run_unit(self, u: Unit, p: float, st: State) -> list[Result]:
        if u.xt is not None:
            return u.xt.run_builtin(u.xt_table, u.xt_chain, p, st)
        assert u.table is not None and u.chain is not None
        if u.ingress and st.packet.iif is None:
            on_device = self._forced.get(id(u))
            if on_device is None:
                why = f"ingress chain {u.label}, bound to a device the listing does not show"
                step = Step(u.table.label, u.chain.name, u.chain.line, why, p)
                raise Undecided(id(u), u.chain.line or 0, why, step, f"chain {u.chain.name}")
            if not on_device:
                return [(p, st, "ACCEPT", "")]
        out: list[Result] = []
        for q, s2, verdict, reason in self._chain(u.table, u.chain, p, st, 0):
            if verdict in ("RETURN", "END"):  # fell off the base chain: its policy
                if self.record or u.chain.policy == "drop":
                    s2.steps.append(Step(u.table.label, u.chain.name, None, f"policy {u.chain.policy}", q))
                verdict = "DROP" if u.chain.policy == "drop" else "ACCEPT"
            out.append((q, s2, verdict, reason))
        return out

    def _chain(self, tab: NftTableRules, chain: NftChain, p: float, st: State, depth: int) -> list[Result]:
        """Every branch of ``st`` through ``chain``: (probability, state, verdict, reason), the
        verdict RETURN or END when a branch leaves the chain without one."""
        if depth > MAX_DEPTH:
            return [(p, st, "UNCERTAIN", f"chain nesting deeper than {MAX_DEPTH} at {tab.label} {chain.name}")]
        results: list[Result] = []
        todo: list[tuple[int, float, State]] = [(0, p, st)]
        rules = chain.rules
        n = len(rules)
        ops = self._ops
        while todo:
            pos, p, st = todo.pop()
            while pos < n:
                rule = rules[pos]
                if rule.numgen is None:  # (most rules: no branches, the common outcome inline)
                    action, arg = ops(tab, chain, rule, p, st, None)
                    if action == "next" or action == "pass":
                        pos += 1
                        continue
                    outs = [(p, st, action, arg)]
                else:
                    outs = self._rule(tab, chain, rule, p, st)
                cont: list[tuple[int, float, State]] = []
                for q, s2, action, arg in outs:
                    if action in ("next", "pass"):
                        cont.append((pos + 1, q, s2))
                    elif action in ("jump", "goto"):
                        sub = tab.chains.get(arg or "")
                        if sub is None:
                            results.append(
                                (q, s2, "UNCERTAIN", f"{action} to chain {arg}, which is not in the listing")
                            )
                            continue
                        for q2, s3, verdict, reason in self._chain(tab, sub, q, s2, depth + 1):
                            if verdict in ("RETURN", "END"):
                                if action == "goto":
                                    results.append((q2, s3, "RETURN", ""))
                                else:
                                    cont.append((pos + 1, q2, s3))
                            else:
                                results.append((q2, s3, verdict, reason))
                    else:
                        results.append((q, s2, _VERDICT_OF[action], arg or ""))
                todo.extend(reversed(cont))
                break
            else:
                results.append((p, st, "END", ""))
        return results

    def _rule(self, tab: NftTableRules, chain: NftChain, rule: NftRule, p: float, st: State) -> list[Any]:
        """The branches of one rule: (probability, state, action, argument); action "next" when a
        match failed, "pass" when every statement ran without a verdict."""
        ng = rule.numgen
        if ng is None:
            action, arg = self._ops(tab, chain, rule, p, st, None)
            return [(p, st, action, arg)]
        mod, off = ng
        if mod <= 0:
            return [(p, st, "uncertain", f"numgen mod {mod} at {rule.where}")]
        out = []
        for i, k in enumerate(range(off, off + mod)):
            s = st if i == mod - 1 else st.copy()
            action, arg = self._ops(tab, chain, rule, p / mod, s, k)
            out.append((p / mod, s, action, arg))
        return out

    def _ops(
        self, tab: NftTableRules, chain: NftChain, rule: NftRule, p: float, st: State, ng: int | None
    ) -> tuple[str, str | None]:
        """Run one rule's statements on ``st``: ("next", None) when a match fails, ("pass", None)
        when all ran without a verdict, else the verdict and its argument (chain, or reason)."""
        action: str
        arg: str | None
        chosen: str | None = None  # the map element taken, for a trace
        for op in rule.ops:
            kind = op[0]
            arg = None
            if kind == "addr":  # ("addr", is_dst, version, negated, span): decided inline
                if st.version != op[2]:
                    return "next", None
                v = st.dst if op[1] else st.src
                lo, hi = op[4]
                if (lo <= v <= hi) == op[3]:
                    return "next", None
                continue
            if kind == "match":
                try:
                    ok = self._match(tab, op, st, ng)
                except Uncertain as exc:
                    forced = self._forced.get(id(op))
                    if forced is None:
                        step, where = self._step(tab, chain, rule, p), f"{rule.where} in {chain.name}"
                        raise Undecided(id(op), rule.line or 0, exc.reason, step, where) from None
                    ok = forced
                if not ok:
                    return "next", None
                continue
            if kind == "noop":
                continue
            try:
                if kind == "verdict":
                    if op[1] == "continue":
                        continue
                    action, arg = op[1], op[2]
                elif kind == "vmap":
                    key = self._get(op[1], st, ng, tab)
                    found, val = (False, None) if key is None else self._lookup(tab, op[2], key, st, rule)
                    if not found:
                        return "next", None
                    if not isinstance(val, tuple) or len(val) != 2 or val[0] == "unknown":
                        raise Uncertain(f"verdict map value {val}")
                    if val[0] == "continue":
                        continue
                    action, arg = val[0], val[1]
                    if self.record:  # a trace names the element the packet took
                        verdict = f"{val[0]} {val[1]}" if val[1] else val[0]
                        chosen = f"element {element_text(key, st.version)} : {verdict}"
                elif kind == "mark":
                    v = self._get(op[1], st, ng, tab)
                    if not isinstance(v, int):
                        raise Uncertain(f"mark set to {v}")
                    st.mark = v & 0xFFFFFFFF
                    continue
                elif kind == "dnat":
                    if not self._dnat(tab, op, st, ng):
                        return "next", None
                    action = "dnat"
                    if self.record and ng is not None and op[2][0] == "map":
                        chosen = f"element {ng} : {st.dnat[0] if st.dnat else '?'} . {st.dport}"
                elif kind == "masq":
                    st.masquerade = True
                    action = "masq"
                elif kind == "redirect":
                    st.dst = 0x7F000001 if st.version == 4 else 1
                    st.dport = op[1] or st.dport
                    st.dnat = ("127.0.0.1" if st.version == 4 else "::1", op[1])
                    action = "redirect"
                elif kind == "reject":
                    action = "reject"
                elif kind == "notrack":
                    st.notrack = True
                    continue
                elif kind == "affinity":
                    self._affinity(rule, st)
                    continue
                else:
                    raise Uncertain(f"cannot evaluate {op[1]}")
            except Uncertain as exc:
                action, arg = "uncertain", f"{exc.reason} at {rule.where}"
            if self.record or action in _RECORDED or action == "uncertain":
                step = self._step(tab, chain, rule, p, chosen)
                st.steps.append(step)
                if action in ("dnat", "redirect"):
                    st.dnat_step = step
            return action, arg
        if self.record:
            st.steps.append(self._step(tab, chain, rule, p))
        return "pass", None

    def _dnat(self, tab: NftTableRules, op: Op, st: State, ng: int | None) -> bool:
        """Translate the destination; False when a map has no element for this packet (the rule
        then does not apply)."""
        addr = self._get(op[2], st, ng, tab)
        if addr is None:
            return False
        port = self._get(op[3], st, ng, tab) if op[3] is not None else None
        if isinstance(addr, tuple) and len(addr) == 2:
            addr, port = addr
        if not isinstance(addr, int):
            raise Uncertain(f"DNAT to {addr}")
        text = _ADDRESS_TEXT.get((st.version, addr))
        if text is None:
            if len(_ADDRESS_TEXT) > 500_000:
                _ADDRESS_TEXT.clear()
            ip = ipaddress.IPv4Address(addr) if st.version == 4 else ipaddress.IPv6Address(addr)
            text = _ADDRESS_TEXT[(st.version, addr)] = str(ip)
        st.dst = addr
        st.dport = port if isinstance(port, int) else st.dport
        st.dnat = (text, port if isinstance(port, int) else None)
        return True

    def _step(self, tab: NftTableRules, chain: NftChain, rule: NftRule, p: float, chosen: str | None = None) -> Step:
        text = rule.text if rule.line is not None else f"{rule.text} (chain {chain.name}, nftables[{rule.index}])"
        return Step(tab.label, chain.name, rule.line, f"{text} [{chosen}]" if chosen else text, p)

    @staticmethod
    def _affinity(rule: NftRule, st: State) -> None:
        """A client seen before may be sent to its earlier backend: reported, not simulated."""
        if rule.line is not None and rule.line not in st.affinity:  # (JSON has no lines to name)
            st.affinity.append(rule.line)

    # -- values ----------------------------------------------------------------------------
    def _get(self, g: Getter, st: State, ng: int | None, tab: NftTableRules) -> Any:
        """The packet's value for an expression; None where it does not apply to this packet (an
        ``ip daddr`` of an IPv6 packet, a ``udp dport`` of a TCP one): such a rule never matches."""
        kind = g[0]
        if kind == "const":
            return g[1]
        if kind == "payload":
            proto, fld = g[1], g[2]
            if proto in ("ip", "ip6"):
                if (proto == "ip") != (st.version == 4):
                    return None
                if fld == "daddr":
                    return st.dst
                if fld == "saddr":
                    return st.src
                if fld in ("protocol", "nexthdr"):
                    return st.packet.proto
                raise Uncertain(f"{proto} {fld} not evaluated")
            if proto in ("th", "tcp", "udp", "sctp", "udplite"):
                if proto != "th" and st.packet.proto != proto:
                    return None
                if fld == "dport":
                    return st.dport
                if fld == "sport":
                    return st.packet.sport
                raise Uncertain(f"{proto} {fld} not evaluated")
            if proto in ("icmp", "icmpv6"):
                return None
            raise Uncertain(f"{proto} {fld} not evaluated")
        if kind == "meta":
            key = g[1]
            if key == "l4proto":
                return st.packet.proto
            if key == "mark":
                return st.mark
            if key == "nfproto":
                return "ipv4" if st.version == 4 else "ipv6"
            if key == "protocol":
                return "ip" if st.version == 4 else "ip6"
            if key == "pkttype":
                return "host"
            if key in ("iifname", "iif", "oifname", "oif"):
                name = st.packet.iif if key.startswith("i") else st.packet.oif
                if name is None:
                    raise Uncertain(f"meta {key} (interface not known)")
                return name
            raise Uncertain(f"meta {key} not evaluated")
        if kind == "ct":
            key = g[1]
            if key == "state":
                return _STATE_NEW
            if key == "status":
                return _DNAT_STATUS if st.dnat is not None else _NO_STATUS
            if key == "direction":
                return "original"
            raise Uncertain(f"ct {key} not evaluated")
        if kind == "fib":
            flags, result = g[1], g[2]
            if result == "type":
                addr = st.src if "saddr" in flags else st.dst
                return "local" if self._is_local(addr) else "unicast"
            if result in ("oif", "oifname"):
                return "(a route)"  # the node routes what it receives: "missing" never matches
            raise Uncertain(f"fib {result} not evaluated")
        if kind == "numgen":
            if ng is None:
                raise Uncertain("numgen not evaluated")
            return ng
        if kind == "concat":
            parts = []
            for sub in g[1]:
                v = self._get(sub, st, ng, tab)
                if v is None:
                    return None
                parts.append(v)
            return tuple(parts)
        if kind == "binop":
            a, b = self._get(g[2], st, ng, tab), self._get(g[3], st, ng, tab)
            if not isinstance(a, int) or not isinstance(b, int):
                raise Uncertain(f"{g[1]} of {a} and {b}")
            return a & b if g[1] == "&" else a | b if g[1] == "|" else a ^ b
        if kind == "map":
            key = self._get(g[1], st, ng, tab)
            if key is None:
                return None
            found, val = self._lookup(tab, g[2], key, st, None)
            return val if found else None
        raise Uncertain(f"{g[1] if len(g) > 1 else g} not evaluated")

    def _lookup(self, tab: NftTableRules, ref: tuple[Any, ...], key: Any, st: State, rule: NftRule | None) -> Any:
        s = self._set(tab, ref)
        if s.dynamic and rule is not None:
            self._affinity(rule, st)
        return s.lookup(key)

    @staticmethod
    def _set(tab: NftTableRules, ref: tuple[Any, ...]) -> NftSet:
        if ref[0] == "set":
            s: NftSet = ref[1]
            return s
        if ref[0] == "ref":
            named = tab.sets.get(ref[1])
            if named is None:
                raise Uncertain(f"set @{ref[1]}, which is not in the listing")
            return named
        raise Uncertain(f"lookup in {ref[1]}")

    def _match(self, tab: NftTableRules, op: Op, st: State, ng: int | None) -> bool:
        v = self._get(op[1], st, ng, tab)
        if v is None:
            return False
        how, m = op[2], op[3]
        kind = m[0]
        if kind == "value":
            want = m[1]
            if how in ("<", ">", "<=", ">="):
                if not isinstance(v, int) or not isinstance(want, int):
                    raise Uncertain(f"comparison {how} {want}")
                return bool(
                    v < want if how == "<" else v > want if how == ">" else v <= want if how == "<=" else v >= want
                )
            hit = want in v if isinstance(v, frozenset) else v == want
        elif kind == "flags":
            hit = bool(v & m[1]) if isinstance(v, frozenset) else v in m[1]
        elif kind == "span":
            lo, hi = m[1]
            hit = type(v) is type(lo) and lo <= v <= hi
        elif kind in ("set", "ref"):
            s = self._set(tab, m)
            # (a dynamic set, affinity's, never holds a new connection's client)
            hit = any(s.lookup(x)[0] for x in v) if isinstance(v, frozenset) else s.lookup(v)[0]
        else:
            raise Uncertain(f"match against {m[1]}")
        return (not hit) if how == "!=" else hit

    def _is_local(self, addr: int) -> bool:
        if addr in self.local:
            return True
        if self.family == 4:
            return addr >> 24 == 127
        return addr == 1

    # -- static: can two chains of one priority change each other's outcome? ---------------
    def _interact(self, group: list[Unit]) -> bool:
        key = id(group)
        known = self._interacting.get(key)
        if known is None:
            for u in group:
                _effects(u)
            known = any(
                (a.nat and b.nat and a.binds and b.binds)
                or (a.writes_mark and b.reads_mark)
                or (b.writes_mark and a.reads_mark)
                for i, a in enumerate(group)
                for b in group[i + 1 :]
            )
            self._interacting[key] = known
        return known


_VERDICT_OF = {
    "accept": "ACCEPT",
    "drop": "DROP",
    "reject": "REJECT",
    "return": "RETURN",
    "dnat": "ACCEPT",
    "masq": "ACCEPT",
    "redirect": "ACCEPT",
    "uncertain": "UNCERTAIN",
    "queue": "UNCERTAIN",
}


def _effects(u: Unit) -> None:
    """Fill in what the chain (and every chain it reaches) can do: translate, set a mark, read one."""
    if u.xt is not None:
        xtab = u.xt.tables.get(u.xt_table)
        if xtab is None:
            return
        seen = {u.xt_chain}
        todo = [u.xt_chain]
        while todo:
            for r in xtab.rules(todo.pop()):
                t = r.target
                name = t.name if t is not None else ""
                u.binds |= name in ("DNAT", "SNAT", "MASQUERADE", "REDIRECT")
                u.writes_mark |= name in ("MARK", "CONNMARK")
                u.reads_mark |= any(c.kind == "mark" for c in r.conds)
                if t is not None and xtab.has_chain(name) and name not in seen:
                    seen.add(name)
                    todo.append(name)
        return
    assert u.table is not None and u.chain is not None
    for chain in reachable_chains(u.table, u.chain):
        for rule in chain.rules:
            for op in rule.ops:
                kind = op[0]
                u.binds |= kind in ("dnat", "masq", "redirect")
                u.writes_mark |= kind == "mark"
                u.reads_mark |= kind == "match" and _reads_mark(op[1])


def _reads_mark(g: Getter) -> bool:
    if g[0] in ("meta", "ct"):
        return bool(g[1] == "mark")
    if g[0] == "binop":
        return _reads_mark(g[2]) or _reads_mark(g[3])
    if g[0] == "concat":
        return any(_reads_mark(x) for x in g[1])
    return False


def chain_targets(op: Op, tab: NftTableRules) -> list[str]:
    """Chains an operation can jump or go to (directly, or through a verdict map)."""
    if op[0] == "verdict" and op[1] in ("jump", "goto") and op[2]:
        return [op[2]]
    if op[0] == "vmap":
        ref = op[2]
        s = ref[1] if ref[0] == "set" else tab.sets.get(ref[1]) if ref[0] == "ref" else None
        if isinstance(s, NftSet):
            vals = list(s.exact.values()) + [v for _, v in s.spans]
            return [v[1] for v in vals if isinstance(v, tuple) and len(v) == 2 and v[0] in ("jump", "goto")]
    return []


def reachable_chains(tab: NftTableRules, start: NftChain) -> list[NftChain]:
    """``start`` and every chain its rules jump or go to (directly, or through verdict maps)."""
    seen = {start.name}
    out = [start]
    todo = [start]
    while todo:
        for rule in todo.pop().rules:
            for op in rule.ops:
                for name in chain_targets(op, tab):
                    sub = tab.chains.get(name)
                    if sub is not None and name not in seen:
                        seen.add(name)
                        out.append(sub)
                        todo.append(sub)
    return out


def _numbers(x: Any, tab: NftTableRules, ints: set[int], spans: set[tuple[int, int]]) -> None:
    """Collect the integers and integer spans anywhere in an operation (and the sets it names)."""
    stack = [x]
    while stack:
        v = stack.pop()
        if isinstance(v, bool):
            continue
        if isinstance(v, int):
            ints.add(v)
        elif isinstance(v, tuple):
            if len(v) == 2 and v[0] == "ref" and isinstance(v[1], str):
                named = tab.sets.get(v[1])
                if named is not None:
                    stack.append(named)
                continue
            if isinstance(v, Span) and isinstance(v[0], int) and isinstance(v[1], int):
                spans.add((v[0], v[1]))
                continue
            stack.extend(v)
        elif isinstance(v, NftSet):
            stack.extend(v.exact.keys())
            for sp, _ in v.spans:
                stack.extend(sp)

