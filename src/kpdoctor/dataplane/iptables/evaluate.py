"""Evaluate a packet through the node's netfilter tables as the kernel would.

The walk follows the hooks in order (raw, mangle, nat, then INPUT or FORWARD by the routing
decision after DNAT, then POSTROUTING), jumps, gotos, RETURNs and policies. Probabilistic
matches (``-m statistic``) split the walk into branches with exact probabilities, so a Service
with three endpoints yields three outcomes of 1/3. Anything the evaluator cannot know (an unknown
match, an ipset it was not given, interface names it was not told) ends that branch as
*uncertain at rule N*: never a silent guess. Conntrack and ``recent`` state are invisible to a
static analysis: a new connection is assumed, and ``--rcheck`` is reported as affinity.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from kpdoctor.dataplane.backend import Packet
from kpdoctor.dataplane.iptables.compile import ChainIndex, CompiledRule, CompiledTable, Cond
from kpdoctor.dataplane.walk import (
    Branch,
    IPAddress,
    Outcome,
    Result,
    State,
    Step,
    TooManyBranches,
    Uncertain,
    Undecided,
    merge_outcomes,
    settle,
    walk_packet,
)
from kpdoctor.parse.ipset import IpSet

MAX_DEPTH = 64
MAX_BRANCHES = 4096  # paths through one hook beyond one per rule: a rule set that multiplies them
BUILTIN = {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}
TERMINAL = {"ACCEPT", "DROP", "REJECT"}
_ALWAYS_RECORDED = {"DROP", "REJECT", "DNAT", "REDIRECT"}  # steps a verification cites


DROP_MARK = 0x8000  # what KUBE-MARK-DROP sets, and KUBE-FIREWALL (filter) drops

# What a walk looked at: (artifact, table, chain, part): part None for the whole chain, or, in an
# indexed chain, "*" (what every packet sees) and (by, key) (what its key selects); chain None:
# whether the table exists (CompiledTable.state gives the same parts)
Dep = tuple[str, str, str | None, tuple[str, int] | str | None]


class Evaluator:
    """Walks packets through one backend's compiled tables (one address family).

    ``layers`` are further tables the kernel runs at the same hooks (the other iptables
    backend's filter rules, for example): a packet must pass them too.
    """

    def __init__(
        self,
        tables: dict[str, CompiledTable],
        local_addresses: Iterable[IPAddress] = (),
        ipsets: dict[str, IpSet] | None = None,
        layers: Iterable[dict[str, CompiledTable]] = (),
        record: bool = True,
    ) -> None:
        self.tables = tables
        self.layers = [tables, *layers]
        self._has_filter = any("filter" in layer for layer in self.layers)  # else: see _passed
        # a Service's endpoints are one path each: a node's paths grow with its rules, never faster
        self.max_branches = MAX_BRANCHES + sum(t.size for layer in self.layers for t in layer.values())
        self.local = {(a.version, int(a)) for a in local_addresses}
        self.ipsets = ipsets
        self.record = record  # keep the steps (a trace); verification only needs the outcome
        self._cache: dict[tuple[object, ...], list[tuple[float, str, str, State]]] = {}
        self._cache_deps: dict[tuple[object, ...], set[Dep]] = {}  # what each cached walk looked at
        self._stages_cache: dict[tuple[str, bool, bool], tuple[tuple[str, str], ...]] = {}
        self._forced: dict[int, bool] = {}  # undecidable rules (by identity) taken as matching or not
        self._splits = 0  # probabilistic splits of the walk so far (bounded: max_branches)
        self.undecided: list[str] = []  # of the last run: undecidable rules that did not matter
        self._mentions: dict[tuple[int, tuple[tuple[str, str], ...]], Mentions] = {}
        # when set: every (artifact, table, chain, index key) a walk looked at is added, so that a
        # result can be carried to the next verification while those are unchanged (reuse.py)
        self.deps: set[Dep] | None = None

    def recording(self) -> Evaluator:
        """The same rules and node, keeping every step: to explain one result of a verification
        (which runs without steps) by the rules its packet took."""
        ev = Evaluator(self.tables, (), self.ipsets, self.layers[1:], record=True)
        ev.local = self.local
        return ev

    def share_forced(self, forced: dict[int, bool]) -> None:
        """Take undecidable rules' forced choices from a walk that drives this evaluator chain by
        chain (the nftables evaluator, where iptables tables hook among nftables chains)."""
        self._forced = forced

    def run_builtin(self, table: str, chain: str, p: float, st: State) -> list[Result]:
        """One built-in chain of one table for one branch (its policy included): a base chain
        among others on a hook, as the nftables evaluator walks them."""
        tab = self.tables.get(table)
        entry = tab.chain(chain) if tab is not None else None
        if tab is None or entry is None:
            return [(p, st, "ACCEPT", "")]
        if table == "nat" and st.notrack:
            return [(p, st, "ACCEPT", "")]
        self._splits = 0
        return self._chain(tab, chain, entry, p, st, 0)

    # -- public ------------------------------------------------------------------------
    def run(self, packet: Packet, hook: str = "prerouting", postrouting: bool = True) -> list[Outcome]:
        """All outcomes of a new connection entering at ``hook`` (prerouting or output).

        ``postrouting=False`` skips the nat POSTROUTING walk, which can only masquerade (never
        drop): verification does not need it, a trace does.

        A match the evaluator cannot decide (an interface it was not told, an unknown module)
        is tried both ways: when both give the same outcomes (same verdicts, backends and
        probabilities; AWS's ``-i eth0 ... -j CONNMARK`` rules, for example), the result is
        certain and says which rules did not matter; otherwise it is *uncertain at rule N*.
        """
        return walk_packet(
            lambda: self._run_once(packet, hook, postrouting),
            packet,
            self._forced,
            self.undecided,
            lambda und: f"line {und.line} ({und.reason})",
        )

    def _run_once(self, packet: Packet, hook: str, postrouting: bool) -> list[Outcome]:
        chain = "PREROUTING" if hook == "prerouting" else "OUTPUT"
        self._splits = 0
        branches: list[Branch] = [(1.0, State.start(packet))]
        finals: list[Outcome] = []
        for table in ("raw", "mangle", "nat"):
            branches = self._hook(table, chain, branches, finals)
        after: list[Branch] = []
        for p, st in branches:
            self._after_nat(hook, postrouting, p, st, after, finals)
        finals.extend(self._passed(p, st) for p, st in after)
        return merge_outcomes(finals)

    def _passed(self, p: float, st: State) -> Outcome:
        """A packet no rule given stopped. Accepted, unless the filter table is missing from the
        evidence (a nat-only dump, a grep'd chain): then what it would do is not known, and a
        packet carrying kube-proxy's drop mark is dropped there (KUBE-FIREWALL), never "passes
        untouched"."""
        if self._has_filter:
            return Outcome(p, "ACCEPT", st)
        if st.mark & DROP_MARK == DROP_MARK:
            why = "kube-proxy's drop mark 0x8000 (KUBE-MARK-DROP) is set: dropped by mark (filter table not given)"
            return Outcome(p, "DROP", st, why, by_mark=True)
        if st.dnat is None:
            why = "not translated, and the filter table (which may accept, reject or drop it) was not given"
            return Outcome(p, "UNCERTAIN", st, why, open_table="filter")
        return Outcome(p, "ACCEPT", st)

    def _stages(self, hook: str, local: bool, postrouting: bool) -> list[tuple[str, str]]:
        """The (table, chain) walks after the entry hook's nat, by the routing decision."""
        if hook == "prerouting":
            route = "INPUT" if local else "FORWARD"
            out = [("mangle", route), ("filter", route)]
            if not local:
                out.append(("mangle", "POSTROUTING"))
                if postrouting:
                    out.append(("nat", "POSTROUTING"))
            return out
        out = [("filter", "OUTPUT"), ("mangle", "POSTROUTING")]
        if postrouting:
            out.append(("nat", "POSTROUTING"))
        if local:
            out.append(("filter", "INPUT"))
        return out

    def _after_nat(
        self, hook: str, postrouting: bool, p: float, st: State, after: list[Branch], finals: list[Outcome]
    ) -> None:
        """Filter, mangle and postrouting for one branch, memoised: these walks rarely depend on
        the backend address, so for a node's 50,000 endpoints they are computed a few times."""
        local = self._is_local(st.version, st.dst)
        skey = (hook, local, postrouting)
        stages = self._stages_cache.get(skey)
        if stages is None:
            stages = self._stages_cache[skey] = tuple(self._stages(hook, local, postrouting))
        deps = self.deps
        # not memoised while recording what the walk reads: a walk taken from the memo was
        # worked out for another destination, whose index buckets it read, not this one's
        key = self._stage_key(st, local, stages) if deps is None else None
        cached = self._cache.get(key) if key is not None else None
        if deps is not None and key not in self._cache_deps:
            cached = None  # worked out without recording what it looked at: once more, recording
        if cached is None:
            # what the walk does, not what the packet came with: the memo's key does not hold
            # the steps, the affinity or whether an earlier rule masqueraded the packet
            probe = st.copy()
            probe.steps, probe.affinity, probe.masquerade = [], [], False
            sub_finals: list[Outcome] = []
            branches: list[Branch] = [(1.0, probe)]
            if deps is not None:
                self.deps = set()
            try:
                for table, chain in stages:
                    branches = self._hook(table, chain, branches, sub_finals)
            finally:
                sub_deps, self.deps = self.deps, deps
            cached = [(o.probability, o.verdict, o.reason, o.state) for o in sub_finals]
            cached += [(q, "", "", s2) for q, s2 in branches]
            if key is not None:
                self._cache[key] = cached
                if sub_deps is not None:
                    self._cache_deps[key] = sub_deps
            if deps is not None and sub_deps is not None:
                deps |= sub_deps
        elif deps is not None and key is not None:
            deps |= self._cache_deps[key]
        if len(cached) == 1:
            q, verdict, _reason, s2 = cached[0]
            if not verdict and not s2.steps and not s2.affinity and s2.mark == st.mark and not s2.masquerade:
                after.append((p * q, st))  # passed untouched (the common case): nothing to copy
                return
        for i, (q, verdict, reason, s2) in enumerate(cached):
            out = st if i == len(cached) - 1 else st.copy()
            out.steps.extend(Step(x.table, x.chain, x.line, x.text, x.probability * p, x.origin) for x in s2.steps)
            out.affinity.extend(s2.affinity)
            out.mark, out.masquerade = s2.mark, out.masquerade or s2.masquerade
            if verdict:
                finals.append(Outcome(p * q, verdict, out, reason))
            else:
                after.append((p * q, out))

    def _stage_key(self, st: State, local: bool, stages: tuple[tuple[str, str], ...]) -> tuple[object, ...] | None:
        """What the after-nat walk can depend on; addresses and ports only as far as some rule
        of those tables tells them apart. None: not memoisable (ipsets are read by address)."""
        mkey = (st.version, stages)
        m = self._mentions.get(mkey)
        if m is None:
            m = self._mentions[mkey] = Mentions.of(self.layers, st.version, stages)
        if m.opaque:
            return None
        pkt = st.packet
        return (
            tuple(self._forced.items()) if self._forced else (),
            id(stages),  # one tuple per (hook, local, postrouting), kept in _stages_cache
            st.version,
            st.src,
            m.dst_key(st.dst) if m.dst_spans or st.dst in m.dsts else None,
            m.port_key(st.dport) if m.port_ranges or st.dport in m.ports else None,
            pkt.proto,
            pkt.sport,
            pkt.iif,
            pkt.oif,
            st.mark,
            st.dnat is not None,
            st.notrack,
            local,
            _multicast(st.version, st.dst) if m.dst_type else None,
        )

    def _is_local(self, version: int, addr: int) -> bool:
        if (version, addr) in self.local:
            return True
        if version == 4:
            return addr >> 24 == 127
        return addr == 1

    # -- walking -----------------------------------------------------------------------
    def _hook(self, table: str, chain: str, branches: list[Branch], finals: list[Outcome]) -> list[Branch]:
        """Run a built-in chain of one table (in every layer); return the branches that continue."""
        deps = self.deps
        for layer in self.layers:
            tab = layer.get(table)
            entry = tab.chain(chain) if tab is not None else None
            if deps is not None:
                origin = next(iter(layer.values())).origin if layer else ""
                deps.add((origin, table, None, None) if tab is None else (origin, table, chain, None))
            if tab is None or entry is None:
                continue
            out: list[Branch] = []
            for p, st in branches:
                if table == "nat" and st.notrack:
                    out.append((p, st))
                    continue
                settle(self._chain(tab, chain, entry, p, st, 0), out, finals, self.max_branches, f"{table} {chain}")
            branches = out
        return branches

    def _chain(
        self,
        tab: CompiledTable,
        chain: str,
        entry: tuple[list[CompiledRule], ChainIndex | None],
        p: float,
        st: State,
        depth: int,
    ) -> list[Result]:
        if depth > MAX_DEPTH:
            return [(p, st, "UNCERTAIN", f"chain nesting deeper than {MAX_DEPTH} at {tab.name}/{chain}")]
        rules, idx = entry
        order: list[int] | None = None
        key: tuple[str, int] | None = None
        if idx is not None:
            key = (idx.by, st.dst if idx.by == "dst" else st.dport)
            order = idx.positions(key[1])
        if self.deps is not None:
            self.deps.add((tab.origin, tab.name, chain, key))
            if key is not None:  # what every packet sees in the chain, and its index kind
                self.deps.add((tab.origin, tab.name, chain, "*"))
        return self._rules(tab, chain, rules, order, 0, p, st, depth)

    def _rules(
        self,
        tab: CompiledTable,
        chain: str,
        rules: list[CompiledRule],
        order: list[int] | None,
        pos: int,
        p: float,
        st: State,
        depth: int,
    ) -> list[Result]:
        """Every branch of ``st`` through ``chain`` from rule ``pos``: (probability, state,
        verdict, reason), verdict RETURN or END when it leaves the chain without one.

        Branches that continue in this chain (the share of a ``-m statistic`` rule not taken; a
        branch back from a jump that returned) wait on a stack instead of a recursive call: a
        Service of 5,000 endpoints is 5,000 ``statistic`` rules in one chain, and Python's stack
        is not that deep. They are taken in the order recursion would take them: each split's
        untaken share first, then the taken one, so outcomes keep their order."""
        results: list[Result] = []
        end = len(rules) if order is None else len(order)
        # (position, probability, state, matched): matched = the rule at position is taken
        # (its probability already applied), only its target remains
        todo: list[tuple[int, float, State, bool]] = [(pos, p, st, False)]
        while todo:
            pos, p, st, matched = todo.pop()
            while pos < end:
                r = rules[pos if order is None else order[pos]]
                if not matched:
                    # the common matches inline (most rules fail here): -d, -s, -p, --dport
                    d = r.dst
                    if d is not None and (d[0] == st.version and d[1] <= st.dst <= d[2]) == r.dst_neg:
                        pos += 1
                        continue
                    d = r.src
                    if d is not None and (d[0] == st.version and d[1] <= st.src <= d[2]) == r.src_neg:
                        pos += 1
                        continue
                    pr = r.proto
                    if pr is not None and (pr == st.packet.proto or pr == "all") == r.proto_neg:
                        pos += 1
                        continue
                    dp = r.dport
                    if dp is not None and _in_ranges(st.dport, dp) == r.dport_neg:
                        pos += 1
                        continue
                    pm = self._conds_match(tab, chain, r, p, st) if r.conds else r.prob
                    if pm is not None:
                        if pm <= 0.0:
                            pos += 1
                            continue
                        if pm < 1.0:  # probabilistic: the untaken share goes on from the next rule first
                            # a chain that jumps to itself twice doubles its paths at every level:
                            # every split counts against one bound for the whole walk
                            self._splits += 1
                            if self._splits > self.max_branches:
                                raise TooManyBranches(
                                    f"more than {self.max_branches:,} paths through {tab.name} {chain}: rules "
                                    "whose probabilistic branches multiply are not evaluated"
                                )
                            todo.append((pos, p * pm, st, True))
                            pos, p, st = pos + 1, p * (1 - pm), st.copy()
                            continue
                matched = False
                tgt = r.target
                if tgt is None:
                    if self.record:
                        st.steps.append(Step(tab.name, chain, r.rule.line, r.rule.text, p, tab.origin))
                    pos += 1
                    continue
                name = tgt.name
                if self.record or name in _ALWAYS_RECORDED:
                    st.steps.append(Step(tab.name, chain, r.rule.line, r.rule.text, p, tab.origin))
                if name == "KUBE-MARK-DROP":
                    st.drop_mark_step = Step(tab.name, chain, r.rule.line, r.rule.text, p, tab.origin)
                if name in TERMINAL or name == "RETURN":
                    results.append((p, st, name, ""))
                    break
                if tgt.problem is not None:  # a target option kpdoctor cannot read: never a guess
                    results.append((p, st, "UNCERTAIN", f"cannot read {tgt.problem} at line {r.line}"))
                    break
                if name == "DNAT" and tgt.to_destination:
                    host, port = tgt.to_destination
                    span = tgt.to_span
                    if span is None:
                        results.append((p, st, "UNCERTAIN", f"DNAT to {host} at line {r.line}"))
                        break
                    st.dst = span[1]
                    st.dport = port or st.dport
                    st.dnat = (host, port)
                    st.dnat_step = st.steps[-1]
                    results.append((p, st, "ACCEPT", ""))
                    break
                if name == "REDIRECT":
                    lo = "127.0.0.1" if st.version == 4 else "::1"
                    st.dst = 0x7F000001 if st.version == 4 else 1
                    st.dport = tgt.to_ports or st.dport
                    st.dnat = (lo, tgt.to_ports)
                    st.dnat_step = st.steps[-1] if st.steps else None
                    results.append((p, st, "ACCEPT", ""))
                    break
                if name in ("MASQUERADE", "SNAT"):
                    st.masquerade = True
                    results.append((p, st, "ACCEPT", ""))
                    break
                if name == "MARK" and tgt.mark:
                    st.mark = _apply_mark(st.mark, tgt.mark)
                    pos += 1
                    continue
                if tgt.notrack:
                    st.notrack = True
                    pos += 1
                    continue
                if name in ("LOG", "NFLOG", "TRACE", "CONNMARK", "CT", "NFQUEUE_BYPASS"):
                    pos += 1
                    continue
                entry = tab.chain(name)
                if entry is None:
                    if self.deps is not None:
                        self.deps.add((tab.origin, tab.name, name, None))
                    results.append((p, st, "UNCERTAIN", f"unknown target {name} at line {r.line}"))
                    break
                back: list[tuple[int, float, State, bool]] = []
                for q, s2, verdict, reason in self._chain(tab, name, entry, p, st, depth + 1):
                    if verdict in ("RETURN", "END"):
                        if tgt.goto:
                            results.append((q, s2, "RETURN", ""))
                        else:
                            back.append((pos + 1, q, s2, False))
                    else:
                        results.append((q, s2, verdict, reason))
                todo.extend(reversed(back))  # the first one back goes on first
                break
            else:  # fell off the end
                if chain in BUILTIN:
                    policy = tab.policies.get(chain, "ACCEPT")
                    if self.record or policy in ("DROP", "REJECT"):
                        st.steps.append(Step(tab.name, chain, None, f"policy {policy}", p, tab.origin))
                    results.append((p, st, policy if policy in TERMINAL else "ACCEPT", ""))
                else:
                    results.append((p, st, "END", ""))
        return results

    def _conds_match(self, tab: CompiledTable, chain: str, r: CompiledRule, p: float, st: State) -> float:
        """The probability that the rule's further conditions hold; an undecidable one is tried
        both ways by the caller of :meth:`run` (see ``_forced``)."""
        try:
            return self._match(r, st)
        except Uncertain as exc:
            forced = self._forced.get(id(r))
            if forced is None:
                step = Step(tab.name, chain, r.line, r.rule.text.strip(), p, tab.origin)
                raise Undecided(id(r), r.line, exc.reason, step) from None
            return self._match_rest(r, st) if forced else 0.0

    # -- matching ----------------------------------------------------------------------
    def _match_rest(self, r: CompiledRule, st: State) -> float:
        """The rule's match probability with its undecidable conditions taken as true."""
        prob = 1.0
        for c in r.conds:
            try:
                v = self._cond(c, st)
            except Uncertain:
                continue
            if c.kind == "statistic":
                prob *= (1 - v) if c.negated else v
            elif bool(v) == c.negated:
                return 0.0
        return prob

    def _match(self, r: CompiledRule, st: State) -> float:
        """Probability that the rule's conditions hold (1, 0 or a statistic probability), once
        its addresses, protocol and ports have matched (``_rules`` checks those inline)."""
        prob = 1.0
        for c in r.conds:
            if c.kind == "recent" and c.value in ("rcheck", "update") and r.line not in st.affinity:
                st.affinity.append(r.line)  # a returning client may be sent elsewhere: reported, not simulated
            v = self._cond(c, st)
            if c.kind == "statistic":
                prob *= (1 - v) if c.negated else v
                continue
            if bool(v) == c.negated:
                return 0.0
        return prob

    def _cond(self, c: Cond, st: State) -> float:
        k = c.kind
        if k == "addrtype":
            side, typ = cast(tuple[str, str], c.value)
            addr = st.src if side == "src" else st.dst
            if typ == "LOCAL":
                return 1.0 if self._is_local(st.version, addr) else 0.0
            if typ == "UNICAST":
                return 0.0 if _multicast(st.version, addr) else 1.0
            raise Uncertain(f"address type {typ} not known")
        if k == "mark":
            value, mask = cast(tuple[int, int], c.value)
            return 1.0 if (st.mark & mask) == value else 0.0
        if k == "ctstate":
            states = {"NEW", "DNAT"} if st.dnat else {"NEW"}
            assert isinstance(c.value, frozenset)
            return 1.0 if states & c.value else 0.0
        if k == "statistic":
            mode = c.value[0]  # type: ignore[index]
            if mode == "random":
                return float(c.value[1])  # type: ignore[index]
            return 1.0 / float(c.value[1])  # type: ignore[index]
        if k == "recent":
            return 1.0 if c.value == "set" else 0.0  # --rcheck: a new client has no entry
        if k == "sport":
            ranges = cast(tuple[tuple[int, int], ...], c.value)
            return 1.0 if any(lo <= st.packet.sport <= hi for lo, hi in ranges) else 0.0
        if k in ("iif", "oif"):
            name = st.packet.iif if k == "iif" else st.packet.oif
            if name is None:
                raise Uncertain(f"interface match {'-i' if k == 'iif' else '-o'} {c.value} (interface not known)")
            pat = str(c.value)
            return 1.0 if (name.startswith(pat[:-1]) if pat.endswith("+") else name == pat) else 0.0
        if k == "set":
            name, dirs = cast(tuple[str, str], c.value)
            s = self.ipsets.get(name) if self.ipsets is not None else None
            if s is None:
                raise Uncertain(f"ipset {name} not given")
            key = _set_key(s, dirs, st)
            if key is None:
                raise Uncertain(f"ipset {name} of type {s.type} not evaluated")
            return 1.0 if s.family in (0, st.version) and s.holds(key) else 0.0
        raise Uncertain(f"match {c.value} not evaluated" if k == "unknown" else f"{k} match not evaluated")


class Mentions:
    """The addresses and ports the filter/mangle/postrouting rules of one family look at: any two
    packets that no rule tells apart walk those tables the same way."""

    def __init__(self) -> None:
        self.dsts: set[int] = set()
        self.dst_spans: list[tuple[int, int]] = []
        self.ports: set[int] = set()
        self.port_ranges: list[tuple[int, int]] = []
        self.opaque = False
        # a rule asks the destination's address type (UNICAST: is it multicast?): packets to a
        # multicast and to a unicast address walk those tables differently
        self.dst_type = False

    @classmethod
    def of(cls, layers: list[dict[str, CompiledTable]], version: int, roots: tuple[tuple[str, str], ...]) -> Mentions:
        """Addresses and ports of every rule reachable from ``roots`` (table, built-in chain)."""
        m = cls()
        full = (1 << (32 if version == 4 else 128)) - 1
        spans: set[tuple[int, int]] = set()
        ranges: set[tuple[int, int]] = set()
        for layer in layers:
            todo = [(t, c) for t, c in roots if t in layer and layer[t].has_chain(c)]
            seen = set(todo)
            while todo:
                tname, chain = todo.pop()
                tab = layer[tname]
                for r in tab.rules(chain):
                    d = r.dst
                    if d is not None and d[0] == version:
                        if d[1] == d[2]:
                            m.dsts.add(d[1])
                        elif not (d[1] == 0 and d[2] == full):
                            spans.add((d[1], d[2]))
                    for lo, hi in r.dport or ():
                        if lo == hi:
                            m.ports.add(lo)
                        else:
                            ranges.add((lo, hi))
                    if any(c.kind == "set" for c in r.conds):
                        m.opaque = True
                    if any(c.kind == "addrtype" and c.value[0] == "dst" for c in r.conds):  # type: ignore[index]
                        m.dst_type = True
                    t = r.target
                    if t is not None and tab.has_chain(t.name) and (tname, t.name) not in seen:
                        seen.add((tname, t.name))
                        todo.append((tname, t.name))
        m.dst_spans, m.port_ranges = sorted(spans), sorted(ranges)
        return m

    def dst_key(self, dst: int) -> tuple[int, tuple[int, ...]]:
        exact = dst if dst in self.dsts else -1
        return exact, tuple(i for i, (lo, hi) in enumerate(self.dst_spans) if lo <= dst <= hi)

    def port_key(self, port: int) -> tuple[int, tuple[int, ...]]:
        exact = port if port in self.ports else -1
        return exact, tuple(i for i, (lo, hi) in enumerate(self.port_ranges) if lo <= port <= hi)


def _multicast(version: int, addr: int) -> bool:
    return (addr >> 28 == 0xE) if version == 4 else (addr >> 120 == 0xFF)


def _set_key(s: IpSet, dirs: str, st: State) -> tuple[object, ...] | None:
    """The key a packet presents to set ``s`` (``--match-set NAME dst,dst``): per dimension of the
    set's type, the address or the protocol and port of the side the match names."""
    sides = dirs.split(",") if dirs else ["dst"]
    key: list[object] = []
    for i, dim in enumerate(s.dims):
        side = sides[i] if i < len(sides) else sides[-1]
        if dim in ("ip", "net"):
            key.append(st.dst if side == "dst" else st.src)
        elif dim == "port":
            port = st.dport if side == "dst" else st.packet.sport
            key.append((None if s.type.startswith("bitmap") else st.packet.proto, port))
        else:
            return None
    return tuple(key)


def _in_ranges(port: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    if len(ranges) == 1:
        return ranges[0][0] <= port <= ranges[0][1]
    return any(lo <= port <= hi for lo, hi in ranges)


def _apply_mark(mark: int, op: tuple[str, int, int]) -> int:
    kind, v, m = op
    if kind == "set-xmark":
        return ((mark & ~m) ^ v) & 0xFFFFFFFF
    if kind == "set-mark":
        return ((mark & ~m) | v) & 0xFFFFFFFF if m != 0xFFFFFFFF else v
    if kind == "or-mark":
        return mark | v
    if kind == "xor-mark":
        return mark ^ v
    if kind == "and-mark":
        return mark & v
    return mark
