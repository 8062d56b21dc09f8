"""Compile iptables rules into matches and targets a packet can be evaluated against.

The model is semantic: it knows what ``-m statistic``, ``-m addrtype`` or ``-j DNAT`` do, never
what kube-proxy calls its chains, so it holds for any kube-proxy version and for rules nobody
generated. A match it does not know is kept as :class:`Unknown`, which makes an evaluation that
reaches it *uncertain* instead of guessing.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from kpdoctor.parse.iptables import Rule, Table

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Cond:
    """One condition of a rule: ``kind`` with its parameters, possibly negated."""

    kind: str  # src dst proto iif oif sport dport addrtype mark ctstate statistic recent set physdev unknown
    value: object
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Target:
    name: str  # ACCEPT DROP REJECT RETURN DNAT SNAT MASQUERADE REDIRECT MARK NOTRACK CT LOG or a chain
    goto: bool = False
    to_destination: tuple[str, int | None] | None = None  # DNAT ip, port
    to_ports: int | None = None  # REDIRECT
    mark: tuple[str, int, int] | None = None  # MARK op ("xset", value, mask) / ("or", v, 0) ...
    notrack: bool = False


@dataclass(frozen=True, slots=True)
class CompiledRule:
    rule: Rule
    conds: tuple[Cond, ...]
    target: Target | None  # None: a rule without -j (counts only)

    @property
    def line(self) -> int:
        return self.rule.line


@dataclass(slots=True)
class CompiledTable:
    name: str
    chains: dict[str, list[CompiledRule]] = field(default_factory=dict)
    policies: dict[str, str] = field(default_factory=dict)


def _net(text: str) -> IPNetwork | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _ports(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        a, _, b = part.partition(":")
        try:
            lo = int(a) if a else 0
            hi = int(b) if b else (lo if not _ else 65535)
        except ValueError:
            continue
        out.append((lo, hi))
    return out


def _mark(text: str) -> tuple[int, int]:
    v, _, m = text.partition("/")
    return int(v, 0), (int(m, 0) if m else 0xFFFFFFFF)


# Options of the matches the evaluator understands (anything else makes the rule uncertain).
_KNOWN_MODULES = {
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
}


def compile_rule(rule: Rule) -> CompiledRule:
    """Turn ``-A CHAIN ...`` tokens into conditions and a target."""
    toks = list(rule.args)
    conds: list[Cond] = []
    target: Target | None = None
    i = 0
    neg = False
    module = ""
    while i < len(toks):
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if t == "!":
            neg = True
            i += 1
            continue
        if t in ("-s", "--source", "-d", "--destination"):
            net = _net(nxt)
            kind = "src" if t in ("-s", "--source") else "dst"
            conds.append(Cond(kind, net, neg) if net else Cond("unknown", f"{t} {nxt}", neg))
            i += 2
        elif t in ("-p", "--protocol"):
            conds.append(Cond("proto", nxt.lower(), neg))
            i += 2
        elif t in ("-i", "--in-interface", "-o", "--out-interface"):
            conds.append(Cond("iif" if t.startswith(("-i", "--in")) else "oif", nxt, neg))
            i += 2
        elif t in ("-m", "--match"):
            module = nxt
            if module not in _KNOWN_MODULES:
                conds.append(Cond("unknown", f"-m {module}", neg))
            i += 2
        elif t in ("-j", "--jump", "-g", "--goto"):
            target, i = _target(toks, i)
        elif t in ("--dport", "--destination-port", "--dports", "--destination-ports"):
            conds.append(Cond("dport", _ports(nxt), neg))
            i += 2
        elif t in ("--sport", "--source-port", "--sports", "--source-ports"):
            conds.append(Cond("sport", _ports(nxt), neg))
            i += 2
        elif t in ("--src-type", "--dst-type"):
            conds.append(Cond("addrtype", ("src" if t == "--src-type" else "dst", nxt.upper()), neg))
            i += 2
        elif t in ("--limit-iface-in", "--limit-iface-out"):
            i += 1
        elif t == "--mark" and module == "mark":
            conds.append(Cond("mark", _mark(nxt), neg))
            i += 2
        elif t in ("--ctstate", "--state"):
            conds.append(Cond("ctstate", frozenset(nxt.upper().split(",")), neg))
            i += 2
        elif t == "--mode" and module == "statistic":
            mode = nxt
            params: dict[str, str] = {}
            j = i + 2
            while j + 1 < len(toks) and toks[j] in ("--probability", "--every", "--packet"):
                params[toks[j]] = toks[j + 1]
                j += 2
            if mode == "random" and "--probability" in params:
                conds.append(Cond("statistic", ("random", float(params["--probability"])), neg))
            elif mode == "nth" and "--every" in params:
                conds.append(Cond("statistic", ("nth", int(params["--every"]), int(params.get("--packet", "0"))), neg))
            else:
                conds.append(Cond("unknown", f"statistic {mode}", neg))
            i = j
        elif module == "recent" and t in ("--set", "--rcheck", "--update", "--remove"):
            conds.append(Cond("recent", t[2:], neg))
            i += 1
        elif module == "recent" and t in ("--seconds", "--hitcount", "--name", "--mask"):
            i += 2
        elif module == "recent" and t in ("--reap", "--rsource", "--rdest", "--rttl"):
            i += 1
        elif t == "--match-set":
            conds.append(Cond("set", (nxt, toks[i + 2] if i + 2 < len(toks) else ""), neg))
            i += 3
        elif module == "physdev":
            conds.append(Cond("physdev", t, neg))
            i += 2 if t in ("--physdev-in", "--physdev-out") else 1
        elif t in ("--comment", "--nfacct-name", "--icmp-type", "--icmpv6-type", "--tcp-flags", "--syn"):
            i += 3 if t == "--tcp-flags" else (1 if t == "--syn" else 2)
        else:
            conds.append(Cond("unknown", t, neg))
            i += 1
        neg = False
    return CompiledRule(rule, tuple(conds), target)


def _target(toks: list[str], i: int) -> tuple[Target, int]:
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
    dest = None
    if name == "DNAT" and "--to-destination" in opts:
        d = opts["--to-destination"]
        if d.startswith("["):
            host, _, port = d[1:].partition("]:")
        elif d.count(":") == 1:
            host, _, port = d.partition(":")
        else:
            host, port = d, ""
        dest = (host, int(port.split("-")[0]) if port else None)
    mark = None
    if name == "MARK":
        for op in ("--set-xmark", "--set-mark", "--or-mark", "--xor-mark", "--and-mark"):
            if op in opts:
                v, m = _mark(opts[op]) if "/" in opts[op] else (int(opts[op], 0), 0xFFFFFFFF)
                mark = (op[2:], v, m)
    to_ports = int(opts["--to-ports"].split("-")[0]) if name == "REDIRECT" and "--to-ports" in opts else None
    notrack = name == "NOTRACK" or (name == "CT" and "--notrack" in flags)
    return Target(name, goto, dest, to_ports, mark, notrack), j


def compile_tables(tables: dict[str, Table]) -> dict[str, CompiledTable]:
    """Compile every table of a parsed :class:`~kpdoctor.parse.iptables.Ruleset`."""
    out: dict[str, CompiledTable] = {}
    for name, t in tables.items():
        ct = CompiledTable(name)
        for chain, policy in t.chains.items():
            ct.chains.setdefault(chain, [])
            if policy:
                ct.policies[chain] = policy
        for r in t.rules:
            ct.chains.setdefault(r.chain, []).append(compile_rule(r))
        out[name] = ct
    return out
