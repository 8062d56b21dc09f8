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

import dataclasses
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from kpdoctor.dataplane.rules import CompiledRule, CompiledTable, Cond

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_DEPTH = 64
MAX_BRANCHES = 4096
BUILTIN = {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}
TERMINAL = {"ACCEPT", "DROP", "REJECT"}
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


@dataclass(frozen=True, slots=True)
class Packet:
    src: IPAddress
    dst: IPAddress
    proto: str = "tcp"
    dport: int = 80
    sport: int = 40000
    iif: str | None = None
    oif: str | None = None
    mark: int = 0


@dataclass(frozen=True, slots=True)
class Step:
    """A rule the packet took (or the policy it fell to)."""

    table: str
    chain: str
    line: int | None
    text: str
    probability: float  # probability of the branch when it took this rule


@dataclass(slots=True)
class State:
    packet: Packet
    steps: list[Step] = field(default_factory=list)
    dnat: tuple[str, int | None] | None = None
    masquerade: bool = False
    notrack: bool = False
    affinity: list[int] = field(default_factory=list)  # lines of --rcheck rules seen

    def copy(self) -> State:
        return State(self.packet, list(self.steps), self.dnat, self.masquerade, self.notrack, list(self.affinity))


@dataclass(slots=True)
class Outcome:
    probability: float
    verdict: str  # ACCEPT | DROP | REJECT | UNCERTAIN
    state: State
    reason: str = ""  # for UNCERTAIN: what could not be evaluated, and where

    @property
    def backend(self) -> str | None:
        """``ip:port`` the packet was DNATed to, if any."""
        if self.state.dnat is None:
            return None
        host, port = self.state.dnat
        port = port if port is not None else self.state.packet.dport
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Uncertain(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Evaluator:
    """Walks packets through one backend's compiled tables (one address family)."""

    def __init__(
        self,
        tables: dict[str, CompiledTable],
        local_addresses: Iterable[IPAddress] = (),
        ipsets: dict[str, set[str]] | None = None,
    ) -> None:
        self.tables = tables
        self.local = set(local_addresses)
        self.ipsets = ipsets

    # -- public ------------------------------------------------------------------------
    def run(self, packet: Packet, hook: str = "prerouting") -> list[Outcome]:
        """All outcomes of a new connection entering at ``hook`` (prerouting or output)."""
        first = ["raw", "mangle", "nat"] if hook == "prerouting" else ["raw", "mangle", "nat", "filter"]
        chain = "PREROUTING" if hook == "prerouting" else "OUTPUT"
        branches = [(1.0, State(packet))]
        finals: list[Outcome] = []
        for table in first:
            branches = self._hook(table, chain, branches, finals)
        after: list[tuple[float, State]] = []
        for p, st in branches:
            local = self.is_local(st.packet.dst)
            if hook == "prerouting":
                route = "INPUT" if local else "FORWARD"
                nxt = self._hook("mangle", route, [(p, st)], finals)
                nxt = self._hook("filter", route, nxt, finals)
                if not local:
                    nxt = self._hook("mangle", "POSTROUTING", nxt, finals)
                    nxt = self._hook("nat", "POSTROUTING", nxt, finals)
            else:
                nxt = self._hook("mangle", "POSTROUTING", [(p, st)], finals)
                nxt = self._hook("nat", "POSTROUTING", nxt, finals)
                if local:
                    nxt = self._hook("filter", "INPUT", nxt, finals)
            after.extend(nxt)
        finals.extend(Outcome(p, "ACCEPT", st) for p, st in after)
        return _merge(finals)

    def is_local(self, addr: IPAddress) -> bool:
        return addr in self.local or any(addr in net for net in LOOPBACK if net.version == addr.version)

    # -- walking -----------------------------------------------------------------------
    def _hook(
        self, table: str, chain: str, branches: list[tuple[float, State]], finals: list[Outcome]
    ) -> list[tuple[float, State]]:
        """Run a built-in chain of one table; return the branches that continue."""
        tab = self.tables.get(table)
        if tab is None or chain not in tab.chains:
            return branches
        out: list[tuple[float, State]] = []
        for p, st in branches:
            if table == "nat" and st.notrack:
                out.append((p, st))
                continue
            for q, s2, verdict, reason in self._chain(tab, chain, p, st, 0):
                if verdict in ("ACCEPT", "RETURN", "END"):
                    out.append((q, s2))
                else:
                    finals.append(Outcome(q, verdict, s2, reason))
            if len(out) > MAX_BRANCHES:
                raise RuntimeError("too many branches")
        return out

    def _chain(
        self, tab: CompiledTable, chain: str, p: float, st: State, depth: int
    ) -> list[tuple[float, State, str, str]]:
        if depth > MAX_DEPTH:
            return [(p, st, "UNCERTAIN", f"chain nesting deeper than {MAX_DEPTH} at {tab.name}/{chain}")]
        rules = tab.chains.get(chain, [])
        return self._rules(tab, chain, rules, 0, p, st, depth)

    def _rules(
        self, tab: CompiledTable, chain: str, rules: list[CompiledRule], i: int, p: float, st: State, depth: int
    ) -> list[tuple[float, State, str, str]]:
        results: list[tuple[float, State, str, str]] = []
        while i < len(rules):
            r = rules[i]
            if any(c.kind == "recent" and c.value in ("rcheck", "update") for c in r.conds):
                st.affinity.append(r.line)  # a returning client may be sent elsewhere: reported, not simulated
            try:
                pm = self._match(r, st)
            except Uncertain as exc:
                st.steps.append(Step(tab.name, chain, r.line, r.rule.text.strip(), p))
                results.append((p, st, "UNCERTAIN", f"{exc.reason} at line {r.line}"))
                return results
            if pm <= 0.0:
                i += 1
                continue
            if pm < 1.0:  # a probabilistic rule: the branch that does not take it continues here
                results.extend(self._rules(tab, chain, rules, i + 1, p * (1 - pm), st.copy(), depth))
                p = p * pm
            taken = st
            taken.steps.append(Step(tab.name, chain, r.line, r.rule.text.strip(), p))
            tgt = r.target
            if tgt is None:
                i += 1
                continue
            name = tgt.name
            if name in TERMINAL:
                results.append((p, taken, name, ""))
                return results
            if name == "RETURN":
                results.append((p, taken, "RETURN", ""))
                return results
            if name == "DNAT" and tgt.to_destination:
                host, port = tgt.to_destination
                try:
                    new_dst = ipaddress.ip_address(host)
                except ValueError:
                    results.append((p, taken, "UNCERTAIN", f"DNAT to {host} at line {r.line}"))
                    return results
                taken.packet = dataclasses.replace(taken.packet, dst=new_dst, dport=port or taken.packet.dport)
                taken.dnat = (host, port)
                results.append((p, taken, "ACCEPT", ""))
                return results
            if name == "REDIRECT":
                lo = ipaddress.ip_address("127.0.0.1" if taken.packet.dst.version == 4 else "::1")
                taken.packet = dataclasses.replace(taken.packet, dst=lo, dport=tgt.to_ports or taken.packet.dport)
                taken.dnat = (str(lo), tgt.to_ports)
                results.append((p, taken, "ACCEPT", ""))
                return results
            if name in ("MASQUERADE", "SNAT"):
                taken.masquerade = True
                results.append((p, taken, "ACCEPT", ""))
                return results
            if name == "MARK" and tgt.mark:
                taken.packet = dataclasses.replace(taken.packet, mark=_apply_mark(taken.packet.mark, tgt.mark))
                i += 1
                continue
            if tgt.notrack:
                taken.notrack = True
                i += 1
                continue
            if name in ("LOG", "NFLOG", "TRACE", "CONNMARK", "CT"):
                i += 1
                continue
            if name in tab.chains:
                sub = self._chain(tab, name, p, taken, depth + 1)
                for q, s2, verdict, reason in sub:
                    if verdict in ("RETURN", "END"):
                        if tgt.goto:
                            results.append((q, s2, "RETURN", ""))
                        else:
                            results.extend(self._rules(tab, chain, rules, i + 1, q, s2, depth))
                    else:
                        results.append((q, s2, verdict, reason))
                return results
            results.append((p, taken, "UNCERTAIN", f"unknown target {name} at line {r.line}"))
            return results
        # fell off the end
        if chain in BUILTIN:
            policy = tab.policies.get(chain, "ACCEPT")
            st.steps.append(Step(tab.name, chain, None, f"policy {policy}", p))
            results.append((p, st, policy if policy in TERMINAL else "ACCEPT", ""))
        else:
            results.append((p, st, "END", ""))
        return results

    # -- matching ----------------------------------------------------------------------
    def _match(self, r: CompiledRule, st: State) -> float:
        """Probability that the rule matches (1, 0 or a statistic probability)."""
        prob = 1.0
        for c in r.conds:
            v = self._cond(c, st)
            if c.kind == "statistic":
                prob *= (1 - v) if c.negated else v
                continue
            ok = bool(v)
            if ok == c.negated:
                return 0.0
        return prob

    def _cond(self, c: Cond, st: State) -> float:
        pkt = st.packet
        k = c.kind
        if k in ("src", "dst"):
            addr = pkt.src if k == "src" else pkt.dst
            net = c.value
            assert isinstance(net, ipaddress.IPv4Network | ipaddress.IPv6Network)
            return 1.0 if addr.version == net.version and addr in net else 0.0
        if k == "proto":
            return 1.0 if c.value in (pkt.proto, "all") else 0.0
        if k in ("dport", "sport"):
            port = pkt.dport if k == "dport" else pkt.sport
            ranges = c.value
            assert isinstance(ranges, list)
            return 1.0 if any(lo <= port <= hi for lo, hi in ranges) else 0.0
        if k == "addrtype":
            side, typ = cast(tuple[str, str], c.value)
            addr = pkt.src if side == "src" else pkt.dst
            if typ == "LOCAL":
                return 1.0 if self.is_local(addr) else 0.0
            if typ == "UNICAST":
                return 0.0 if addr.is_multicast else 1.0
            raise Uncertain(f"address type {typ} not known")
        if k == "mark":
            value, mask = cast(tuple[int, int], c.value)
            return 1.0 if (pkt.mark & mask) == value else 0.0
        if k == "ctstate":
            states = {"NEW"} | ({"DNAT"} if st.dnat else set())
            assert isinstance(c.value, frozenset)
            return 1.0 if states & c.value else 0.0
        if k == "statistic":
            mode = c.value[0]  # type: ignore[index]
            if mode == "random":
                return float(c.value[1])  # type: ignore[index]
            return 1.0 / float(c.value[1])  # type: ignore[index]
        if k == "recent":
            return 1.0 if c.value == "set" else 0.0  # --rcheck: a new client has no entry
        if k in ("iif", "oif"):
            name = pkt.iif if k == "iif" else pkt.oif
            if name is None:
                raise Uncertain(f"interface match {'-i' if k == 'iif' else '-o'} {c.value} (interface not known)")
            pat = str(c.value)
            return 1.0 if (name.startswith(pat[:-1]) if pat.endswith("+") else name == pat) else 0.0
        if k == "set":
            name, _dirs = cast(tuple[str, str], c.value)
            if self.ipsets is None or name not in self.ipsets:
                raise Uncertain(f"ipset {name} not given")
            return 1.0 if str(pkt.dst) in self.ipsets[name] or str(pkt.src) in self.ipsets[name] else 0.0
        raise Uncertain(f"match {c.value} not evaluated" if k == "unknown" else f"{k} match not evaluated")


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


def _merge(outcomes: list[Outcome]) -> list[Outcome]:
    """Outcomes sorted by probability, most likely first."""
    return sorted(outcomes, key=lambda o: (-o.probability, o.verdict, o.backend or ""))
