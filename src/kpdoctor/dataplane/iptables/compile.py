"""Compile iptables rules into matches and targets a packet can be evaluated against.

The model is semantic: it knows what ``-m statistic``, ``-m addrtype`` or ``-j DNAT`` do, never
what kube-proxy calls its chains, so it holds for any kube-proxy version and for rules nobody
generated. A match it does not know is kept as ``Cond("unknown")``, which makes an evaluation
that reaches it *uncertain* instead of guessing.

Speed matters (a node with 10,000 Services has a quarter of a million rules): addresses become
integer ranges, the commonest matches (``-s``, ``-d``, ``-p``, ``--dport``) are fields checked
inline, and chains are compiled lazily, the first time a packet enters them. Big chains (such as
KUBE-SERVICES) get an index by destination address or port, so a lookup does not walk 10,000
rules.
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Iterator
from dataclasses import dataclass

from kpdoctor import lazy_re, memo
from kpdoctor.dataplane.addresses import Span, address_span, parse_span, port_number
from kpdoctor.parse.iptables import NOT_KEPT, Rule, Table

INDEX_THRESHOLD = 24  # chains longer than this get a destination index


@dataclass(frozen=True, slots=True)
class Cond:
    """One condition of a rule: ``kind`` with its parameters, possibly negated."""

    kind: str  # iif oif sport addrtype mark ctstate statistic recent set physdev unknown
    value: object
    negated: bool = False


@dataclass(slots=True)  # not frozen: built per rule and per step, frozen init is 5x slower
class Target:
    name: str  # ACCEPT DROP REJECT RETURN DNAT SNAT MASQUERADE REDIRECT MARK NOTRACK CT LOG or a chain
    goto: bool = False
    to_destination: tuple[str, int | None] | None = None  # DNAT ip, port
    to_span: Span | None = None  # the DNAT address as parsed (None: not a single address)
    to_ports: int | None = None  # REDIRECT
    mark: tuple[str, int, int] | None = None  # MARK op ("set-xmark", value, mask) ...
    notrack: bool = False
    problem: str | None = None  # an option value that cannot be read: the rule's outcome is uncertain


class CompiledRule:
    """A rule as the evaluator checks it: the common matches as plain fields, the rest as conds."""

    __slots__ = (
        "conds",
        "dport",
        "dport_neg",
        "dst",
        "dst_neg",
        "prob",
        "proto",
        "proto_neg",
        "rule",
        "src",
        "src_neg",
        "target",
    )

    def __init__(
        self,
        rule: Rule,
        src: Span | None = None,
        src_neg: bool = False,
        dst: Span | None = None,
        dst_neg: bool = False,
        proto: str | None = None,
        dport: tuple[tuple[int, int], ...] | None = None,
        prob: float | None = None,
        target: Target | None = None,
    ) -> None:
        self.rule = rule
        self.src = src
        self.src_neg = src_neg
        self.dst = dst
        self.dst_neg = dst_neg
        self.proto = proto
        self.proto_neg = False
        self.dport = dport
        self.dport_neg = False
        self.prob = prob  # the rule's only condition: -m statistic --mode random (checked inline)
        self.conds: tuple[Cond, ...] = ()
        self.target = target

    @property
    def line(self) -> int:
        return self.rule.line

    @property
    def exact_dst(self) -> int | None:
        """The single destination address the rule requires, if any (for the chain index)."""
        d = self.dst
        if d is not None and not self.dst_neg and d[1] == d[2]:
            return d[1]
        return None

    @property
    def exact_dport(self) -> int | None:
        p = self.dport
        if p is not None and not self.dport_neg and len(p) == 1 and p[0][0] == p[0][1]:
            return p[0][0]
        return None


def _ports(text: str) -> tuple[tuple[int, int], ...] | None:
    """``80``, ``80:90``, ``:90``, ``80,443``; None when any part cannot be read (the match is
    then unknown, not silently never-matching)."""
    out = []
    for part in text.split(","):
        a, sep, b = part.partition(":")
        lo = port_number(a) if a else 0
        hi = port_number(b) if b else (lo if not sep else 65535)
        if lo is None or hi is None or (not a and not sep):
            return None
        out.append((lo, hi))
    return tuple(out) if out else None


def _number(text: str) -> int | None:
    """A mark or mask (``0x4000``, ``16384``, ``0o10``) within 32 bits, or None."""
    if len(text) > 34:
        return None
    try:
        n = int(text, 0)
    except ValueError:
        return None
    return n if 0 <= n <= 0xFFFFFFFF else None


def _mark(text: str) -> tuple[int, int] | None:
    v, sep, m = text.partition("/")
    value, mask = _number(v), (_number(m) if sep else 0xFFFFFFFF)
    return None if value is None or mask is None else (value, mask)


# Matches the evaluator understands (anything else makes the rule uncertain).
_KNOWN_MODULES = frozenset(
    {
        "comment",
        "tcp",
        "udp",
        "sctp",
        "multiport",
        "addrtype",
        "mark",
        "conntrack",
        "state",
        "statistic",
        "recent",
        "nfacct",
        "set",
        "physdev",
        "icmp",
        "icmp6",
        "icmpv6",
    }
)
# Options that only annotate or count: (option, number of values it takes).
_SKIP = {
    "--comment": 1,
    "--nfacct-name": 1,
    "--icmp-type": 1,
    "--icmpv6-type": 1,
    "--tcp-flags": 2,
    "--syn": 0,
    "--seconds": 1,
    "--hitcount": 1,
    "--name": 1,
    "--mask": 1,
    "--reap": 0,
    "--rsource": 0,
    "--rdest": 0,
    "--rttl": 0,
    "--limit-iface-in": 0,
    "--limit-iface-out": 0,
    "--reject-with": 1,
}


# Token -> what it is, so the compiler does one dict lookup per token instead of a chain of
# comparisons (compiling a quarter of a million rules is on the critical path).
_DST, _SRC, _PROTO, _MATCH, _JUMP, _DPORT, _SPORT, _IFACE, _ADDRTYPE, _CTSTATE = range(10)
_TOKENS: dict[str, int] = {
    "-d": _DST,
    "--destination": _DST,
    "-s": _SRC,
    "--source": _SRC,
    "-p": _PROTO,
    "--protocol": _PROTO,
    "-m": _MATCH,
    "--match": _MATCH,
    "-j": _JUMP,
    "--jump": _JUMP,
    "-g": _JUMP,
    "--goto": _JUMP,
    "--dport": _DPORT,
    "--destination-port": _DPORT,
    "--dports": _DPORT,
    "--destination-ports": _DPORT,
    "--sport": _SPORT,
    "--source-port": _SPORT,
    "--sports": _SPORT,
    "--source-ports": _SPORT,
    "-i": _IFACE,
    "--in-interface": _IFACE,
    "-o": _IFACE,
    "--out-interface": _IFACE,
    "--src-type": _ADDRTYPE,
    "--dst-type": _ADDRTYPE,
    "--ctstate": _CTSTATE,
    "--state": _CTSTATE,
}


# The shapes that make up nearly all of a big kube-proxy dump, in iptables-save's canonical option
# order: read with one regular expression instead of token by token. Anything else (or anything
# this cannot represent exactly) takes the general path below; a test holds the two equal.
_FAST = lazy_re.compile(
    r"-A \S+ "
    r"(?:(?P<sneg>! )?-s (?P<s>[0-9a-fA-F.:/]+) )?"
    r"(?:(?P<dneg>! )?-d (?P<d>[0-9a-fA-F.:/]+) )?"
    r"(?:-p (?P<p>tcp|udp|sctp) )?"
    r'(?:-m comment --comment (?:"[^"\\]*"|[^\s"]+) )?'
    r"(?:-m (?P<m>tcp|udp|sctp) (?:--dport (?P<dport>\d+) )?)?"
    r"(?:-m statistic --mode random --probability (?P<prob>[0-9.]+) )?"
    r"-(?P<jg>[jg]) (?P<t>[\w.-]+)"
    r"(?: --to-destination (?P<to>[0-9a-fA-F.:\[\]]+)| --set-xmark (?P<xm>0x[0-9a-fA-F]+/0x[0-9a-fA-F]+))?"
)


def _compile_fast(rule: Rule) -> CompiledRule | None:
    """The canonical shapes (see ``_FAST``) straight from the rule's line, or None."""
    m = _FAST.fullmatch(rule.body)
    if m is None:
        return None
    sneg, s, dneg, d, p, mod, dport, prob, jg, name, to, xm = m.groups()
    if mod and mod != p:
        return None  # -m tcp without -p tcp: iptables would refuse it; let the general path judge
    src = dst = None
    if s:
        src = address_span(s)
        if src is None:
            return None
    if d:
        dst = address_span(d)
        if dst is None:
            return None
    ports = None
    if dport:
        ports = _PORTS.get(dport)
        if ports is None:
            port = port_number(dport)
            if port is None:
                return None  # the general path says it cannot read it
            ports = _PORTS[dport] = ((port, port),)
    probability = None
    if prob:
        probability = _probability(prob)
        if probability is None:
            return None
    if to is not None:
        if name != "DNAT":
            return None
        target = _dnat(to, jg == "g")
    elif xm is not None:
        if name != "MARK":
            return None
        key = ("MARK", xm)
        marked = _PLAIN.get(key)
        if marked is None:
            marked, _ = _target(("-j", name, "--set-xmark", xm), 0)
            _PLAIN[key] = marked
        target = marked
    elif name in _OPTIONED:
        return None  # targets with options the pattern does not capture
    else:
        target = _plain_target(name, jg == "g")
    return CompiledRule(
        rule,
        src,
        sneg is not None,
        dst,
        dneg is not None,
        p,
        ports,
        probability,
        target,
    )


_OPTIONED = frozenset({"DNAT", "MARK", "REDIRECT", "SNAT", "REJECT", "CT", "LOG"})
_PORTS: dict[str, tuple[tuple[int, int], ...]] = memo.table()
_PROBS: dict[str, float | None] = memo.table()


def _probability(text: str) -> float | None:
    """``--probability`` as a number in [0, 1], or None when it is not one (memoised)."""
    p = _PROBS.get(text, -1.0)
    if p == -1.0:
        try:
            p = float(text) if len(text) < 40 else None
        except ValueError:
            p = None
        if p is not None and not 0.0 <= p <= 1.0:  # also NaN
            p = None
        if len(_PROBS) < 10_000:
            _PROBS[text] = p
    return p


def compile_rule(rule: Rule) -> CompiledRule:
    """Turn ``-A CHAIN ...`` into fields, conditions and a target (once per Rule: a rule the
    next parse of the same dump keeps, parse_save's ``reuse``, keeps its compiled form; a rule
    the native core read keeps none, :data:`~kpdoctor.parse.iptables.NOT_KEPT`)."""
    done = rule.compiled
    if isinstance(done, CompiledRule):
        return done
    cr = _compile_fast(rule) or compile_general(rule)
    if done is not NOT_KEPT:
        rule.compiled = cr
    return cr


def compile_general(rule: Rule) -> CompiledRule:
    """The token-by-token compiler: every option kpdoctor knows, in any order."""
    cr = CompiledRule(rule)
    toks = rule.args
    n = len(toks)
    conds: list[Cond] = []
    i = 0
    neg = False
    module = ""
    tokens, skip = _TOKENS, _SKIP
    while i < n:
        t = toks[i]
        if t == "!":
            neg = True
            i += 1
            continue
        kind = tokens.get(t)
        nxt = toks[i + 1] if i + 1 < n else ""
        if kind is None:
            if t in skip:
                i += 1 + skip[t]
            else:
                i = _other(toks, i, module, neg, conds)
        elif kind == _MATCH:
            module = nxt
            if module not in _KNOWN_MODULES:
                conds.append(Cond("unknown", f"-m {module}", neg))
            i += 2
        elif kind in (_DST, _SRC):
            span = parse_span(nxt)
            if span is None:
                conds.append(Cond("unknown", f"{t} {nxt}", neg))
            elif kind == _DST:
                cr.dst, cr.dst_neg = span, neg
            else:
                cr.src, cr.src_neg = span, neg
            i += 2
        elif kind == _PROTO:
            cr.proto, cr.proto_neg = nxt.lower(), neg
            i += 2
        elif kind == _JUMP:
            cr.target, i = _target(toks, i)
        elif kind == _DPORT:
            ports = _ports(nxt)
            if ports is None:
                conds.append(Cond("unknown", f"{t} {nxt}", neg))
            else:
                cr.dport, cr.dport_neg = ports, neg
            i += 2
        elif kind == _SPORT:
            ports = _ports(nxt)
            conds.append(Cond("unknown", f"{t} {nxt}", neg) if ports is None else Cond("sport", ports, neg))
            i += 2
        elif kind == _IFACE:
            conds.append(Cond("iif" if t in ("-i", "--in-interface") else "oif", nxt, neg))
            i += 2
        elif kind == _ADDRTYPE:
            conds.append(Cond("addrtype", ("src" if t == "--src-type" else "dst", nxt.upper()), neg))
            i += 2
        else:  # _CTSTATE
            conds.append(Cond("ctstate", frozenset(nxt.upper().split(",")), neg))
            i += 2
        neg = False
    if len(conds) == 1 and conds[0].kind == "statistic" and not conds[0].negated and conds[0].value[0] == "random":  # type: ignore[index]
        cr.prob = conds[0].value[1]  # type: ignore[index]
    elif conds:
        cr.conds = tuple(conds)
    return cr


def _other(toks: tuple[str, ...], i: int, module: str, neg: bool, conds: list[Cond]) -> int:
    """The less common options (mark, statistic, recent, ipset, physdev); returns the next index."""
    n = len(toks)
    t = toks[i]
    nxt = toks[i + 1] if i + 1 < n else ""
    if t == "--mark" and module == "mark":
        mark = _mark(nxt)
        conds.append(Cond("unknown", f"--mark {nxt}", neg) if mark is None else Cond("mark", mark, neg))
        return i + 2
    if t == "--mode" and module == "statistic":
        params: dict[str, str] = {}
        j = i + 2
        while j + 1 < n and toks[j] in ("--probability", "--every", "--packet"):
            params[toks[j]] = toks[j + 1]
            j += 2
        prob = _probability(params["--probability"]) if "--probability" in params else None
        every = _number(params.get("--every", ""))
        if nxt == "random" and prob is not None:
            conds.append(Cond("statistic", ("random", prob), neg))
        elif nxt == "nth" and every and _number(params.get("--packet", "0")) is not None:
            conds.append(Cond("statistic", ("nth", every, _number(params.get("--packet", "0"))), neg))
        else:
            conds.append(Cond("unknown", f"statistic {nxt}", neg))
        return j
    if module == "recent" and t in ("--set", "--rcheck", "--update", "--remove"):
        conds.append(Cond("recent", t[2:], neg))
        return i + 1
    if t == "--match-set":
        conds.append(Cond("set", (nxt, toks[i + 2] if i + 2 < n else ""), neg))
        return i + 3
    if module == "physdev":
        conds.append(Cond("physdev", t, neg))
        return i + (2 if t in ("--physdev-in", "--physdev-out") else 1)
    conds.append(Cond("unknown", t, neg))
    return i + 1


def _dnat(dest: str, goto: bool = False) -> Target:
    """``--to-destination`` ``ip``, ``ip:port``, ``[ip6]:port`` (a range keeps its first port).
    A port that is not one (``0x50``, ``99999``) makes the target's outcome uncertain, named."""
    if dest.startswith("["):
        host, _, port = dest[1:].partition("]:")
    elif dest.count(":") == 1:
        host, _, port = dest.partition(":")
    else:
        host, port = dest, ""
    span = address_span(host)
    to_span = span if span is not None and span[1] == span[2] else None
    number = port_number(port.split("-")[0]) if port else None
    if port and not number:
        problem = f"DNAT --to-destination {dest[:80]} (port not readable)"
        return Target("DNAT", goto, (host, None), None, problem=problem)
    return Target("DNAT", goto, (host, number), to_span)


def _target(toks: tuple[str, ...], i: int) -> tuple[Target, int]:
    goto = toks[i] in ("-g", "--goto")
    name = toks[i + 1] if i + 1 < len(toks) else ""
    j = i + 2
    opts: dict[str, str] = {}
    flags: set[str] = set()
    while j < len(toks) and toks[j].startswith("--"):
        if j + 1 < len(toks) and not toks[j + 1].startswith("--"):
            opts[toks[j]] = toks[j + 1]
            j += 2
        else:
            flags.add(toks[j])
            j += 1
    if not opts and not flags:
        return _plain_target(name, goto), j
    dest = to_span = None
    problem = None
    if name == "DNAT" and "--to-destination" in opts:
        dn = _dnat(opts["--to-destination"], goto)
        dest, to_span, problem = dn.to_destination, dn.to_span, dn.problem
    mark = None
    if name == "MARK":
        for op in ("--set-xmark", "--set-mark", "--or-mark", "--xor-mark", "--and-mark"):
            if op in opts:
                vm = _mark(opts[op])
                if vm is None:
                    problem = f"MARK {op} {opts[op][:40]} (not a 32-bit value)"
                else:
                    mark = (op[2:], vm[0], vm[1])
    to_ports = None
    if name == "REDIRECT" and "--to-ports" in opts:
        to_ports = port_number(opts["--to-ports"].split("-")[0])
        if not to_ports:
            problem = f"REDIRECT --to-ports {opts['--to-ports'][:40]} (port not readable)"
    notrack = name == "NOTRACK" or (name == "CT" and "--notrack" in flags)
    return Target(name, goto, dest, to_span, to_ports, mark, notrack, problem), j


_PLAIN: dict[tuple[str, bool] | tuple[str, str], Target] = memo.table()


def _plain_target(name: str, goto: bool) -> Target:
    """Targets without options (ACCEPT, a chain jump) are shared, not rebuilt per rule."""
    key = (name, goto)
    t = _PLAIN.get(key)
    if t is None:
        t = _PLAIN[key] = Target(name, goto, notrack=name == "NOTRACK")
    return t


class CompiledTable:
    """One table's chains, compiled on first use, with an index for long chains."""

    def __init__(self, name: str, table: Table | None = None, origin: str = "") -> None:
        self.name = name
        self.origin = origin  # the artifact the table was read from (a dependency's address)
        self.policies: dict[str, str] = {}
        self._source: dict[str, list[Rule]] = {}
        self._compiled: dict[str, list[CompiledRule]] = {}
        self._index: dict[str, ChainIndex | None] = {}
        self._chains: dict[str, tuple[list[CompiledRule], ChainIndex | None]] = {}
        self.size = 0  # rules in the table
        if table is not None:
            for chain, policy in table.chains.items():
                self._source.setdefault(chain, [])
                if policy:
                    self.policies[chain] = policy
            self.size = len(table.rules)
            for r in table.rules:
                src = self._source.get(r.chain)
                if src is None:
                    src = self._source[r.chain] = []
                src.append(r)

    def has_chain(self, chain: str) -> bool:
        return chain in self._source or chain in self._compiled

    def rules(self, chain: str) -> list[CompiledRule]:
        out = self._compiled.get(chain)
        if out is None:
            out = self._compiled[chain] = [compile_rule(r) for r in self._source.get(chain, ())]
        return out

    def compiled(self, rules: list[Rule]) -> Iterator[CompiledRule]:
        """These rules of this table compiled: a chain that holds several of them (the Service
        dispatch chains) is compiled whole, once, as a walk would; a single rule alone."""
        per_chain = collections.Counter(r.chain for r in rules)
        by_rule: dict[int, CompiledRule] = {}
        for r in rules:
            if per_chain[r.chain] > 1 or r.chain in self._compiled:
                if id(r) not in by_rule:
                    by_rule.update((id(c.rule), c) for c in self.rules(r.chain))
                yield by_rule[id(r)]
            else:
                yield compile_rule(r)

    def index(self, chain: str) -> ChainIndex | None:
        if chain in self._index:
            return self._index[chain]
        rules = self.rules(chain)
        idx = ChainIndex.build(rules) if len(rules) > INDEX_THRESHOLD else None
        self._index[chain] = idx
        return idx

    def chain(self, chain: str) -> tuple[list[CompiledRule], ChainIndex | None] | None:
        """A chain's compiled rules and index in one lookup (None: no such chain): the
        evaluator asks this for every jump."""
        got = self._chains.get(chain)
        if got is None:
            if not self.has_chain(chain):
                return None
            got = self._chains[chain] = (self.rules(chain), self.index(chain))
        return got


    def declared(self) -> dict[str, str | None]:
        """Every chain and its policy (None for a user chain)."""
        return {chain: self.policies.get(chain) for chain in self._source}

    def chain_state(self, chain: str) -> dict[object, object]:
        """What each walk through ``chain`` can see, by part: ``None``, the chain's policy and rule
        texts in order; for a chain long enough to be indexed, instead, ``"*"`` its index kind,
        policy and the rules every packet sees, and ``(by, key)`` the rules the index gives a
        packet with that key, each with how many of the others come before it. A walk records the
        same parts it reads (evaluate.py), so equal fingerprints mean the same walk
        (dataplane/reuse.py). Empty: no such chain."""
        source = self._source.get(chain)
        if source is None:
            return {}
        policy = self.policies.get(chain)
        idx = self.index(chain) if len(source) > INDEX_THRESHOLD else None
        if idx is None:
            return {None: (policy, tuple(r.body for r in source))}
        out: dict[object, object] = {"*": (idx.by, policy, tuple(source[i].body for i in idx.rest))}
        rest = idx.rest
        for key, positions in idx.buckets.items():
            out[(idx.by, key)] = tuple((bisect.bisect(rest, i), source[i].body) for i in positions)
        return out


class ChainIndex:
    """Positions of a long chain's rules by exact destination address (or port): a packet only
    visits the rules that can match it, in their original order."""

    __slots__ = ("buckets", "by", "rest")

    def __init__(self, by: str, buckets: dict[int, list[int]], rest: list[int]) -> None:
        self.by = by
        self.buckets = buckets
        self.rest = rest

    @classmethod
    def build(cls, rules: list[CompiledRule]) -> ChainIndex | None:
        by_dst = sum(1 for r in rules if r.exact_dst is not None)
        by_port = sum(1 for r in rules if r.exact_dport is not None)
        by = "dst" if by_dst >= by_port else "dport"
        if max(by_dst, by_port) < len(rules) // 2:
            return None
        buckets: dict[int, list[int]] = {}
        rest: list[int] = []
        for i, r in enumerate(rules):
            key = r.exact_dst if by == "dst" else r.exact_dport
            if key is None:
                rest.append(i)
            else:
                buckets.setdefault(key, []).append(i)
        return cls(by, buckets, rest)

    def positions(self, key: int) -> list[int]:
        hit = self.buckets.get(key)
        if not hit:
            return self.rest
        if not self.rest:
            return hit
        return sorted(hit + self.rest)


def compile_tables(tables: dict[str, Table], origin: str = "") -> dict[str, CompiledTable]:
    """Prepare every table of a parsed :class:`~kpdoctor.parse.iptables.Ruleset` (lazily);
    ``origin``: the artifact it was read from."""
    return {name: CompiledTable(name, t, origin) for name, t in tables.items()}
