"""``nft list ruleset`` text -> the objects ``nft -j list ruleset`` prints (nftables 1.0.6).

Users paste the text form far more often than the JSON form (``nft -j`` is not in muscle memory,
and some builds lack JSON support). kpdoctor evaluates the libnftables JSON schema, so this module
turns the text into exactly those objects, and one evaluator serves both.

Output: the list under the top-level ``"nftables"`` key, without ``metainfo`` and without
``"handle"`` keys, plus two keys kpdoctor needs to cite evidence: ``"line"`` (1-based, offset by
``first_line - 1``) on every table, chain, set/map and rule, and ``"text"`` on every rule (the rule
as printed, stripped, without its ``counter packets N bytes M``).

Order is nft -j's, which differs from the text's: per table, the table, its named counters/quotas,
sets/maps and flowtables in listing order, then ALL its chains, then all its rules chain by chain
(nft 1.0.6 prints every chain before any rule; the text nests rules inside chains). Within a chain,
rules keep their order. Set elements keep the listing's order, which is the kernel's, as in JSON.

Never raises. A statement that cannot be converted becomes ``{"unknown": "<its text>"}`` in the
rule's ``"expr"`` and the rest of the rule is kept; lines outside any table are ignored; a truncated
listing yields what was complete.

Known differences from real ``nft -j`` output (checked against captures in
``tests/data/nftables/pairs``, see SOURCES.md there):

* Stateful snapshots: ``expires`` of set elements and counter values come from the moment the
  text was printed, not when JSON would have been.
* Table and chain ``comment`` lines are dropped, because nft 1.0.6's JSON does not print them;
  netdev ``device``/``devices`` are dropped for the same reason (no ``"dev"`` in 1.0.6's chain JSON).
  ``flags dormant`` is dropped: 1.0.6's JSON prints a wrong flag name there.
* Set ``flags``: JSON never shows ``dynamic`` and always shows ``timeout`` when the set has a
  default timeout, while the text omits ``flags timeout`` when a ``timeout`` line is present.
  Converted as JSON does (timeout also implied by elements with ``timeout``/``expires``). A set
  with the timeout flag but no timeout value and no elements shows ``flags timeout`` in text, so
  that is not lost.
* ``typeof`` keys are mapped to datatype names with a table of common expressions; an expression
  outside it keeps its text as the type name.
* iptables-nft tables: nft prints a translation of each xtables match/target, JSON an opaque
  ``{"xt": {"type": "match"|"target", "name": NAME}}``. A table is treated as iptables-nft's when
  nft's stderr warning ``# Warning: table ip nat is managed by iptables-nft, do not touch!`` is in
  the paste, or when it is an ip/ip6 filter/nat/mangle/raw/security table whose base chains are
  exactly iptables' (``INPUT`` ... at the table's standard priority), or one showing a translation
  only xtables produces (``xt match``, ``meta mark set mark or``, ``reject with icmp type``, an
  empty fragment). In such tables the statements iptables-nft 1.8.9 implements with xtables are
  mapped back to their module (``fib`` -> addrtype, ``ct ...`` -> conntrack (``-m state`` is stored
  as conntrack too), ``tcp dport { }`` -> multiport, ``dnat`` -> DNAT, ``meta mark set`` -> MARK,
  an empty fragment -> comment, ...); what it implements natively (addresses, ports, interfaces,
  ``-m mark``, ``-m limit``, NFLOG, verdicts) stays native. Limits: a hand-written table that
  mimics iptables' names and priorities is taken for iptables-nft's; a comment match is only seen
  as the double space it leaves (lost if the paste collapsed spaces, and at the start of a rule
  only while the indentation is still tabs).
  Builds of nft without xtables print ``xt match "NAME"``, ``XT target NAME not found`` or
  ``# xt_NAME``; those convert directly.
* Not capturable on the test kernel (missing modules), so written from nft's JSON source and
  untested against real output: flowtables, ``ct helper|timeout|expectation set``.
* Become ``unknown``: queue, dup, fwd, flow offload, osf, exthdr and raw ``ip option`` matches,
  and anything else the grammar below does not know.
  Named objects other than counters and quotas (limit, ct helper, secmark, synproxy) are skipped.
* ``nft -s`` (stateless) prints a bare ``counter``; it converts to ``{"counter": null}`` as
  ``nft -s -j`` prints it. ``nft -a``'s ``# handle N`` comments are ignored.
"""

from __future__ import annotations

import gc
import re
from dataclasses import dataclass, field
from typing import Any

from kpdoctor import lazy_re

Obj = dict[str, Any]

__all__ = ["text_to_objects"]

# --- tables the text needs --------------------------------------------------------------------

_FAMILIES = frozenset({"ip", "ip6", "inet", "arp", "bridge", "netdev"})
_XT_TABLES = frozenset({"filter", "nat", "mangle", "raw", "security"})
_XT_PRIO = {"filter": (0,), "nat": (-100, 100), "mangle": (-150,), "raw": (-300,), "security": (50,)}
_STD_PRIO = {"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0, "security": 50, "srcnat": 100}
_BRIDGE_PRIO = {"dstnat": -300, "filter": -200, "out": 100, "srcnat": 300}

_VERDICTS = frozenset({"accept", "drop", "continue", "return", "queue"})
_JUMPS = frozenset({"jump", "goto"})
_OPS = frozenset({"==", "!=", "<", ">", "<=", ">="})
_BINOPS = {"&": "&", "|": "|", "^": "^", "<<": "<<", ">>": ">>", "and": "&", "or": "|", "xor": "^"}
_PAYLOAD = frozenset({
    "ip", "ip6", "tcp", "udp", "udplite", "sctp", "dccp", "th", "icmp", "icmpv6", "igmp",
    "ether", "vlan", "arp", "ah", "esp", "comp",
})  # fmt: skip
# meta keys nft prints (or xtables translations print) without "meta"
_BARE_META = frozenset({
    "iif", "oif", "iifname", "oifname", "iiftype", "oiftype", "iifgroup", "oifgroup", "skuid",
    "skgid", "nftrace", "rtclassid", "ibriport", "obriport", "ibrname", "obrname", "pkttype",
    "cpu", "cgroup", "mark",
})  # fmt: skip
_SELECTORS = _PAYLOAD | _BARE_META | {"meta", "ct", "fib", "numgen", "jhash", "symhash", "socket", "rt"}
_CT_DIRS = frozenset({"original", "reply"})
_FIB_FLAGS = ("saddr", "daddr", "mark", "iif", "oif")
_NAT_FLAGS = ("random", "fully-random", "persistent", "netmap")
_NAT_FLAG_SET = frozenset(_NAT_FLAGS)
_LOG_LEVELS = frozenset({"emerg", "alert", "crit", "err", "warn", "notice", "info", "debug", "audit"})
_BYTE_UNITS = {"bytes": 1, "kbytes": 1024, "mbytes": 1024**2, "gbytes": 1024**3}

# datatype names of common ``typeof`` expressions (as ``nft -j`` names them)
_TYPEOF = {
    "ip saddr": "ipv4_addr", "ip daddr": "ipv4_addr", "ip6 saddr": "ipv6_addr", "ip6 daddr": "ipv6_addr",
    "ip protocol": "inet_proto", "ip6 nexthdr": "inet_proto", "meta l4proto": "inet_proto",
    "ct protocol": "inet_proto", "ip dscp": "dscp", "ip6 dscp": "dscp",
    "meta mark": "mark", "ct mark": "mark", "meta iifname": "ifname", "meta oifname": "ifname",
    "iifname": "ifname", "oifname": "ifname", "meta iif": "iface_index", "meta oif": "iface_index",
    "iif": "iface_index", "oif": "iface_index", "ether saddr": "ether_addr", "ether daddr": "ether_addr",
    "ether type": "ether_type", "meta protocol": "ether_type", "meta nfproto": "nf_proto",
    "ct state": "ct_state", "ct status": "ct_status", "ct direction": "ct_dir", "meta pkttype": "pkt_type",
    "icmp type": "icmp_type", "icmpv6 type": "icmpv6_type", "meta skuid": "uid", "meta skgid": "gid",
    "ip ttl": "integer", "vlan id": "integer", "ct zone": "integer", "meta priority": "classid",
    "verdict": "verdict",
}  # fmt: skip
for _p in ("tcp", "udp", "udplite", "sctp", "dccp", "th"):
    _TYPEOF[f"{_p} sport"] = _TYPEOF[f"{_p} dport"] = "inet_service"

_TABLE_RE = lazy_re.compile(r"table\s+(?:(\S+)\s+)?(\"[^\"]*\"|[^\s{]+)\s*\{")
_BLOCK_RE = lazy_re.compile(r"(chain|set|map|flowtable|counter|quota)\s+(\"[^\"]*\"|[^\s{]+)\s*\{")
_WARNING_RE = lazy_re.compile(r"#\s*Warning: table (\S+) (\S+) is managed by iptables-nft")
_HOOK_RE = lazy_re.compile(
    r"type\s+(\S+)\s+hook\s+(\S+)(?:\s+devices?\s*(?:=\s*\{[^}]*\}|\S+))?\s+priority\s+([^;]+);(?:\s*policy\s+(\w+)\s*;)?"
)
_HANDLE_RE = lazy_re.compile(r"\s*#\s*handle\s+\d+\s*$")
_TOKEN_RE = lazy_re.compile(r'"[^"]*"?|[{}]|[^\s{},"]+(?:,[^\s{},"]+)*|,')
_INT_RE = lazy_re.compile(r"\d+|0x[0-9a-fA-F]+")
_V4_RE = lazy_re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_V6_RE = lazy_re.compile(r"[0-9a-fA-F:]*:[0-9a-fA-F:.]*")
_NAT_V4_RE = lazy_re.compile(r"(\d{1,3}(?:\.\d{1,3}){3})(?:-(\d{1,3}(?:\.\d{1,3}){3}))?(?::(\d+(?:-\d+)?))?")
_NAT_V6_RE = lazy_re.compile(r"\[([0-9a-fA-F:.]+)\](?::(\d+(?:-\d+)?))?")
_TIME_RE = lazy_re.compile(r"(?:\d+(?:d|h|ms|m|s))+")
_TIME_PART_RE = lazy_re.compile(r"(\d+)(d|h|ms|m|s)")
_IDENT_RE = lazy_re.compile(r"[a-z][a-z0-9-]*")
_XT_CUE_RE = lazy_re.compile(
    r"\bxt (?:match|target) |\bXT (?:match|target) |meta mark set mark (?:or|and|xor) |ct mark set mark\b"
    r"|reject with icmp(?:v6|x)? type "
)
_TIME_UNITS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
_COMMENT_XT = "\x00"  # token standing for the empty text an xtables comment match prints


class _Fail(Exception):
    """This statement is not one the converter knows (its tokens become ``unknown``)."""


# --- values -----------------------------------------------------------------------------------


def _unquote(tok: str) -> str:
    if tok.startswith('"'):
        return tok[1:-1] if len(tok) > 1 and tok.endswith('"') else tok[1:]
    return tok


def _int(tok: str) -> int | str:
    """Decimal or hex as JSON prints integers (a value wider than 64 bits stays a ``0x`` string)."""
    n = int(tok, 16) if tok[:2] == "0x" else int(tok)
    return n if n < 1 << 64 else hex(n)


def _is_addr(tok: str) -> bool:
    return bool(_V4_RE.fullmatch(tok) or (":" in tok and _V6_RE.fullmatch(tok)))


def _atom(tok: str) -> Any:
    """A single constant: a number becomes an int, everything else the string nft prints."""
    c = tok[0]
    if c == '"':
        return _unquote(tok)
    if "0" <= c <= "9":
        if tok.isdigit() and tok.isascii():
            n = int(tok)
            return n if n < 1 << 64 else hex(n)
        return _int(tok) if _INT_RE.fullmatch(tok) else tok
    if tok == "exists":
        return True
    if tok == "missing":
        return False
    return tok


def _value(tok: str) -> Any:
    """A constant as it appears on the right of a match or in a set: prefix, range, flag list..."""
    c = tok[0]
    if c == '"' or c == "@":
        return _unquote(tok)
    if c == "(" and tok.endswith(")"):
        return [_atom(p) for p in tok[1:-1].split("|") if p]
    if "," in tok:
        return [_atom(p) for p in tok.split(",") if p]
    if "/" in tok:
        addr, _, plen = tok.rpartition("/")
        if plen.isascii() and plen.isdigit() and _is_addr(addr):
            return {"prefix": {"addr": addr, "len": int(plen)}}
    if "-" in tok:
        lo, _, hi = tok.partition("-")
        if lo and hi:
            if lo.isascii() and hi.isascii() and _INT_RE.fullmatch(lo) and _INT_RE.fullmatch(hi):
                return {"range": [_int(lo), _int(hi)]}
            if _is_addr(lo) and _is_addr(hi):
                return {"range": [lo, hi]}
    return _atom(tok)


def _seconds(tok: str) -> int:
    """``2h59m59s940ms`` -> 10799: JSON prints set timeouts and expiries in whole seconds."""
    if tok.isascii() and tok.isdigit():
        return int(tok)
    if not _TIME_RE.fullmatch(tok):
        raise _Fail(tok)
    return sum(int(n) * _TIME_UNITS[u] for n, u in _TIME_PART_RE.findall(tok)) // 1000


def _one_or_list(items: list[Any]) -> Any:
    return items[0] if len(items) == 1 else items


# --- rule parser ------------------------------------------------------------------------------


class _Parser:
    """Recursive descent over one rule's tokens (or one set's element tokens)."""

    __slots__ = ("family", "n", "pos", "toks")

    def __init__(self, toks: list[str], family: str) -> None:
        self.toks = [*toks, "", "", ""]  # sentinels: peek(k) needs no bounds check
        self.n = len(toks)
        self.pos = 0
        self.family = family

    # token helpers
    def peek(self, k: int = 0) -> str:
        return self.toks[self.pos + k]

    def take(self) -> str:
        if self.pos >= self.n:
            raise _Fail("end of rule")
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def expect(self, tok: str) -> None:
        if self.take() != tok:
            raise _Fail(tok)

    def take_int(self) -> int:
        tok = self.take()
        if not (tok.isascii() and tok.isdigit()):
            raise _Fail(tok)
        return int(tok)

    def take_value_tok(self) -> str:
        tok = self.take()
        if tok in ("{", "}", ",", ":", ".", "") or tok in _OPS:
            raise _Fail(tok)
        return tok

    # statements
    def statement(self) -> Obj:
        tok = self.peek()
        nxt = self.peek(1)
        if tok in _VERDICTS and tok != "queue":
            self.pos += 1
            return {tok: None}
        if tok in _JUMPS:
            self.pos += 1
            return {tok: {"target": _unquote(self.take_value_tok())}}
        handler = _STATEMENTS.get(tok)
        if handler is not None:
            return handler(self)
        if tok == "ct" and nxt == "count":
            return self.ct_count()
        if tok == "ct" and nxt in ("helper", "timeout", "expectation") and self.peek(2) == "set":
            self.pos += 3
            return {f"ct {nxt}": _unquote(self.take_value_tok())}
        if tok in ("add", "update", "delete") and nxt.startswith("@"):
            return self.set_op()
        return self.expression_statement()

    def expression_statement(self) -> Obj:
        """A match (``LHS [op] RHS``), a verdict map (``LHS vmap ...``) or a mangle (``LHS set V``)."""
        left = self.lhs()
        tok = self.peek()
        if tok == "set":
            self.pos += 1
            return {"mangle": {"key": left, "value": self.value_expr()}}
        if tok == "vmap":
            self.pos += 1
            return {"vmap": {"key": left, "data": self.map_data()}}
        op: str | None = None
        if tok in _OPS:
            op = tok
            self.pos += 1
        right = self.rhs()
        if isinstance(right, tuple):  # "tcp flags syn / syn,ack": (value, mask)
            return {"match": {"op": op or "==", "left": {"&": [left, right[1]]}, "right": right[0]}}
        if op is None:
            lookup = (isinstance(right, dict) and "set" in right) or (isinstance(right, str) and right[:1] == "@")
            op = "in" if not lookup and _is_bitmask(left) else "=="
        return {"match": {"op": op, "left": left, "right": right}}

    # expressions
    def lhs(self) -> Any:
        items = [self.term()]
        while self.peek() == ".":
            self.pos += 1
            items.append(self.term())
        return items[0] if len(items) == 1 else {"concat": items}

    def term(self) -> Any:
        expr = self.primary()
        while self.peek() in _BINOPS:
            op = _BINOPS[self.take()]
            expr = {op: [expr, self.operand()]}
        return expr

    def operand(self) -> Any:
        if self.peek() in _SELECTORS:
            return self.primary()
        return _value(self.take_value_tok())

    def primary(self) -> Any:
        tok = self.take()
        if tok in _PAYLOAD:
            if tok == "tcp" and self.peek() == "option":
                self.pos += 1
                name = self.take()
                fld = self.take()
                if not _IDENT_RE.fullmatch(fld):
                    raise _Fail(fld)
                return {"tcp option": {"name": name, "field": fld}}
            fld = self.take()
            if not _IDENT_RE.fullmatch(fld) or fld in _BINOPS:
                raise _Fail(fld)
            return {"payload": {"protocol": tok, "field": fld}}
        if tok == "meta":
            key = self.take()
            if not _IDENT_RE.fullmatch(key):
                raise _Fail(key)
            return {"meta": {"key": key}}
        if tok in _BARE_META:
            return {"meta": {"key": tok}}
        if tok == "ct":
            return self.ct_expr()
        if tok == "fib":
            return self.fib_expr()
        if tok == "numgen":
            mode = self.take()
            if mode not in ("random", "inc"):
                raise _Fail(mode)
            self.expect("mod")
            mod = self.take_int()
            offset = 0
            if self.peek() == "offset":
                self.pos += 1
                offset = self.take_int()
            return {"numgen": {"mode": mode, "mod": mod, "offset": offset}}
        if tok in ("jhash", "symhash"):
            return self.hash_expr(tok)
        if tok == "socket":
            return {"socket": {"key": self.take()}}
        if tok == "rt":
            key = self.take()
            if key in ("ip", "ip6") and self.peek() == "nexthop":
                self.pos += 1
                return {"rt": {"key": "nexthop", "family": key}}
            return {"rt": {"key": key}}
        if tok.startswith("@") and tok.count(",") == 2:  # raw payload @base,offset,len
            base, off, ln = tok[1:].split(",")
            if off.isdigit() and ln.isdigit():
                return {"payload": {"base": base, "offset": int(off), "len": int(ln)}}
        raise _Fail(tok)

    def ct_expr(self) -> Obj:
        d: Obj = {}
        if self.peek() in _CT_DIRS:
            d["dir"] = self.take()
        key = self.take()
        if key in ("ip", "ip6"):
            key = f"{key} {self.take()}"
        elif not _IDENT_RE.fullmatch(key):
            raise _Fail(key)
        return {"ct": {"key": key, **d}}

    def fib_expr(self) -> Obj:
        flags = {self.take()}
        while self.peek() == ".":
            self.pos += 1
            flags.add(self.take())
        if not flags <= set(_FIB_FLAGS):
            raise _Fail("fib flags")
        result = self.take()
        if result not in ("type", "oif", "oifname"):
            raise _Fail(result)
        return {"fib": {"result": result, "flags": [f for f in _FIB_FLAGS if f in flags]}}

    def hash_expr(self, kind: str) -> Obj:
        d: Obj = {}
        expr = self.lhs() if kind == "jhash" else None
        self.expect("mod")
        d["mod"] = self.take_int()
        while self.peek() in ("seed", "offset"):
            key = self.take()
            d[key] = _int(self.take())
        if expr is not None:
            d["expr"] = expr
        return {kind: d}

    def value_expr(self) -> Any:
        """The value of ``... set VALUE`` or a NAT address: a constant, an expression, or a map."""
        items = [self.value_term()]
        while self.peek() == ".":
            self.pos += 1
            items.append(self.value_term())
        expr = items[0] if len(items) == 1 else {"concat": items}
        if self.peek() in ("map", "vmap"):
            kind = "vmap" if self.take() == "vmap" else "map"
            expr = {kind: {"key": expr, "data": self.map_data()}}
        return expr

    def value_term(self) -> Any:
        if self.peek() in _SELECTORS:
            return self.term()
        expr = _value(self.take_value_tok())
        while self.peek() in _BINOPS:
            op = _BINOPS[self.take()]
            expr = {op: [expr, self.operand()]}
        return expr

    def rhs(self) -> Any:
        if self.peek() == "{":
            return self.anon_set()
        items = [_value(self.take_value_tok())]
        while self.peek() == ".":
            self.pos += 1
            items.append(self.anon_set() if self.peek() == "{" else _value(self.take_value_tok()))
        value: Any = items[0] if len(items) == 1 else {"concat": items}
        if self.peek() == "/":  # flags VALUE / MASK
            self.pos += 1
            return (value, _value(self.take_value_tok()))
        if self.peek() == "-" and isinstance(value, str):  # meta hour "10:00"-"12:00"
            self.pos += 1
            return {"range": [value, _value(self.take_value_tok())]}
        while self.peek() == "|":  # "ct state != established | related"
            self.pos += 1
            value = {"|": [value, _value(self.take_value_tok())]}
        return value

    def map_data(self) -> Any:
        if self.peek().startswith("@"):
            return self.take()
        return self.anon_set()

    def anon_set(self) -> Obj:
        self.expect("{")
        elems: list[Any] = []
        while self.peek() != "}":
            elems.append(self.element())
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "}":
                raise _Fail("set element")
        self.pos += 1
        return {"set": elems}

    def element(self) -> Any:
        """``KEY [timeout T] [expires T] [comment "C"] [counter ...] [: DATA]`` of a set or map."""
        keys = [_value(self.take_value_tok())]
        while self.peek() == ".":
            self.pos += 1
            keys.append(_value(self.take_value_tok()))
        key: Any = keys[0] if len(keys) == 1 else {"concat": keys}
        opts: Obj = {}
        while True:
            tok = self.peek()
            if tok in ("timeout", "expires"):
                self.pos += 1
                opts[tok] = _seconds(self.take())
            elif tok == "comment":
                self.pos += 1
                opts["comment"] = _unquote(self.take())
            elif tok == "counter":
                for k, v in self.counter().items():
                    opts.setdefault(k, v)
            else:
                break
        if opts:
            key = {"elem": {"val": key, **opts}}
        if self.peek() != ":":
            return key
        self.pos += 1
        return [key, self.element_data()]

    def element_data(self) -> Any:
        tok = self.peek()
        if tok in _VERDICTS:
            self.pos += 1
            return {tok: None}
        if tok in _JUMPS:
            self.pos += 1
            return {tok: {"target": _unquote(self.take_value_tok())}}
        items = [_value(self.take_value_tok())]
        while self.peek() == ".":
            self.pos += 1
            items.append(_value(self.take_value_tok()))
        return items[0] if len(items) == 1 else {"concat": items}

    # statement handlers (dispatched on their first word through _STATEMENTS)
    def counter(self) -> Obj:
        self.expect("counter")
        if self.peek() == "packets":
            self.pos += 1
            packets = self.take_int()
            self.expect("bytes")
            return {"counter": {"packets": packets, "bytes": self.take_int()}}
        if self.peek() == "name":
            self.pos += 1
            return {"counter": _unquote(self.take())}
        return {"counter": None}

    def log(self) -> Obj:
        self.expect("log")
        d: Obj = {}
        flags: list[str] = []
        while True:
            tok = self.peek()
            if tok == "prefix":
                self.pos += 1
                d["prefix"] = _unquote(self.take())
            elif tok in ("group", "snaplen", "queue-threshold"):
                self.pos += 1
                d[tok] = self.take_int()
            elif tok == "level":
                self.pos += 1
                level = self.take()
                if level not in _LOG_LEVELS:
                    raise _Fail(level)
                if level != "warn":
                    d["level"] = level
            elif tok == "flags":
                self.pos += 1
                flags.extend(self.log_flags())
            else:
                break
        if flags:
            d["flags"] = "all" if "all" in flags else _one_or_list(flags)
        return {"log": d or None}

    def log_flags(self) -> list[str]:
        out: list[str] = []
        while True:
            tok = self.peek()
            if tok in ("all", "skuid", "ether"):
                self.pos += 1
                out.append(tok)
            elif tok == "tcp":
                self.pos += 1
                out.extend(f"tcp {f}" for f in self.take().split(","))
            elif tok == "ip" and self.peek(1) == "options":
                self.pos += 2
                out.append("ip options")
            else:
                if not out:
                    raise _Fail("log flags")
                return out

    def limit(self) -> Obj:
        self.expect("limit")
        self.expect("rate")
        inv = self.peek() == "over"
        if inv:
            self.pos += 1
        tok = self.take()
        d: Obj
        if "/" in tok:
            rate, _, per = tok.partition("/")
            burst = 5
            if self.peek() == "burst":
                self.pos += 1
                burst = self.take_int()
                self.expect("packets")
            d = {"rate": int(rate), "burst": burst, "per": per}
        else:
            unit, _, per = self.take().partition("/")
            if unit not in _BYTE_UNITS or not per:
                raise _Fail(unit)
            d = {"rate": int(tok), "burst": 0, "per": per, "rate_unit": unit, "burst_unit": "bytes"}
            if self.peek() == "burst":
                self.pos += 1
                d["burst"] = self.take_int()
                d["burst_unit"] = self.take()
        if inv:
            d["inv"] = True
        return {"limit": d}

    def reject(self) -> Obj:
        self.expect("reject")
        if self.peek() != "with":
            kind = {"ip": "icmp", "ip6": "icmpv6"}.get(self.family, "icmpx")
            return {"reject": {"type": kind, "expr": "port-unreachable"}}
        self.pos += 1
        kind = self.take()
        if kind == "tcp":
            self.expect("reset")
            return {"reject": {"type": "tcp reset"}}
        if kind not in ("icmp", "icmpv6", "icmpx"):
            raise _Fail(kind)
        if self.peek() == "type":  # xtables' translation says "with icmp type X"
            self.pos += 1
        return {"reject": {"type": kind, "expr": _atom(self.take_value_tok())}}

    def nat(self) -> Obj:
        kind = self.take()
        d: Obj = {}
        if kind in ("snat", "dnat") and self.peek() in ("ip", "ip6") and self.peek(1) in ("to", "prefix"):
            d["family"] = self.take()
        type_flags = self.peek() == "prefix"
        if type_flags:
            self.pos += 1
        if self.peek() == "to":
            self.pos += 1
            self.nat_target(d)
        flags: set[str] = set()
        while (tok := self.peek()) and _NAT_FLAG_SET.issuperset(tok.split(",")):
            flags.update(tok.split(","))
            self.pos += 1
        if flags:
            d["flags"] = _one_or_list([f for f in _NAT_FLAGS if f in flags])
        if type_flags:
            d["type_flags"] = "prefix"
        return {kind: d or None}

    def nat_target(self, d: Obj) -> None:
        tok = self.peek()
        if tok.startswith(":"):
            self.pos += 1
            d["port"] = _value(tok[1:])
            return
        if m := _NAT_V4_RE.fullmatch(tok):
            self.pos += 1
            d["addr"] = {"range": [m.group(1), m.group(2)]} if m.group(2) else m.group(1)
            if m.group(3):
                d["port"] = _value(m.group(3))
            return
        if m := _NAT_V6_RE.fullmatch(tok):
            self.pos += 1
            d["addr"] = m.group(1)
            if m.group(2):
                d["port"] = _value(m.group(2))
            return
        if ":" in tok and _V6_RE.fullmatch(tok):
            self.pos += 1
            d["addr"] = tok
            return
        d["addr"] = self.value_expr()

    def tproxy(self) -> Obj:
        self.expect("tproxy")
        d: Obj = {}
        if self.peek() in ("ip", "ip6"):
            d["family"] = self.take()
        self.expect("to")
        self.nat_target(d)
        return {"tproxy": d}

    def quota(self) -> Obj:
        self.expect("quota")
        if self.peek() == "name":
            self.pos += 1
            return {"quota": _unquote(self.take())}
        d: Obj = {}
        inv = self.peek() == "over"
        if inv:
            self.pos += 1
        d["val"] = self.take_int()
        d["val_unit"] = self.take()
        if inv:
            d["inv"] = True
        if self.peek() == "used":
            self.pos += 1
            d["used"] = self.take_int()
            d["used_unit"] = self.take()
        return {"quota": d}

    def ct_count(self) -> Obj:
        self.pos += 2
        inv = self.peek() == "over"
        if inv:
            self.pos += 1
        d: Obj = {"val": self.take_int()}
        if inv:
            d["inv"] = True
        return {"ct count": d}

    def set_op(self) -> Obj:
        op = self.take()
        name = self.take()
        self.expect("{")
        elem = self.value_expr()
        if self.peek() == "timeout":
            self.pos += 1
            elem = {"elem": {"val": elem, "timeout": _seconds(self.take())}}
        stmts: list[Obj] = []
        while self.peek() not in ("}", ""):
            stmts.append(self.statement())
        self.expect("}")
        d: Obj = {"op": op, "elem": elem, "set": name}
        if stmts:
            d["stmt"] = stmts
        return {"set": d}

    def meter(self) -> Obj:
        self.expect("meter")
        name = self.take()
        size = None
        if self.peek() == "size":
            self.pos += 1
            size = self.take_int()
        self.expect("{")
        key = self.value_expr()
        stmt = self.statement()
        self.expect("}")
        d: Obj = {"key": key, "stmt": stmt}
        if size is not None:
            d["size"] = size
        d["name"] = name
        return {"meter": d}

    def synproxy(self) -> Obj:
        self.expect("synproxy")
        d: Obj = {}
        flags: list[str] = []
        while True:
            tok = self.peek()
            if tok in ("mss", "wscale"):
                self.pos += 1
                d[tok] = self.take_int()
            elif tok in ("timestamp", "sack-perm"):
                self.pos += 1
                flags.append(tok)
            else:
                break
        if flags:
            d["flags"] = [f for f in ("timestamp", "sack-perm") if f in flags]
        return {"synproxy": d or None}

    def notrack(self) -> Obj:
        self.expect("notrack")
        return {"notrack": None}

    def xt(self) -> Obj:
        """``xt match "NAME"`` (nft without xtables) or ``XT target NAME not found``."""
        tag = self.take()
        kind = self.take()
        if kind not in ("match", "target"):
            raise _Fail(kind)
        name = _unquote(self.take())
        if tag == "XT":
            self.expect("not")
            self.expect("found")
        return {"xt": {"type": kind, "name": name}}

    def xt_hash(self) -> Obj:
        """``# xt_NAME``: some nft builds print untranslatable xtables extensions like this."""
        tok = self.take()
        if tok == "#":
            tok = self.take()
        name = tok.lstrip("#")
        if not name.startswith("xt_") or len(name) < 4:
            raise _Fail(tok)
        name = name[3:]
        return {"xt": {"type": "target" if name.isupper() else "match", "name": name}}

    def xt_comment(self) -> Obj:
        self.pos += 1
        return {"xt": {"type": "match", "name": "comment"}}


_STATEMENTS = {
    "counter": _Parser.counter,
    "log": _Parser.log,
    "limit": _Parser.limit,
    "reject": _Parser.reject,
    "snat": _Parser.nat,
    "dnat": _Parser.nat,
    "masquerade": _Parser.nat,
    "redirect": _Parser.nat,
    "tproxy": _Parser.tproxy,
    "quota": _Parser.quota,
    "meter": _Parser.meter,
    "synproxy": _Parser.synproxy,
    "notrack": _Parser.notrack,
    "xt": _Parser.xt,
    "XT": _Parser.xt,
    "#": _Parser.xt_hash,
    _COMMENT_XT: _Parser.xt_comment,
}


def _is_bitmask(left: Any) -> bool:
    """A bare flag on a bitmask selector (``ct state new``) is JSON op ``in``, not ``==``."""
    if not isinstance(left, dict):
        return False
    if "ct" in left:
        return bool(left["ct"].get("key") in ("state", "status", "event"))
    if "payload" in left:
        return bool(left["payload"].get("protocol") == "tcp" and left["payload"].get("field") == "flags")
    return False


# --- iptables-nft: text shows xtables' translation, JSON an opaque xt object ------------------


def _mentions(value: Any, key: str) -> bool:
    if isinstance(value, dict):
        return key in value or any(_mentions(v, key) for v in value.values())
    if isinstance(value, list):
        return any(_mentions(v, key) for v in value)
    return False


def _xt_of(st: Obj) -> Obj | None:
    """The xt object nft -j prints for a statement iptables-nft 1.8.9 implements with xtables."""
    kind = next(iter(st))
    val = st[kind]
    name: str | None = None
    xt_type = "target"
    if kind == "match":
        xt_type = "match"
        left, right = val["left"], val["right"]
        lk = next(iter(left)) if isinstance(left, dict) else ""
        if isinstance(right, str) and right.startswith("@"):
            name = "set"
        elif lk == "fib":
            name = "addrtype"
        elif lk == "ct":
            name = {"mark": "connmark", "helper": "helper"}.get(left["ct"]["key"], "conntrack")
        elif lk == "numgen":
            name = "statistic"
        elif lk == "meta":
            name = {"random": "statistic", "skuid": "owner", "skgid": "owner", "pkttype": "pkttype"}.get(
                left["meta"]["key"]
            )
        elif lk == "&" and left["&"][0] == {"meta": {"key": "random"}}:
            name = "statistic"
        elif lk == "payload":
            proto, fld = left["payload"].get("protocol"), left["payload"].get("field")
            if proto in ("icmp", "icmpv6"):
                name = "icmp" if proto == "icmp" else "icmp6"
            elif proto == "ether":
                name = "mac"
            elif isinstance(right, dict) and "set" in right and fld in ("sport", "dport"):
                name = "multiport"
            elif isinstance(right, dict) and "range" in right and proto in ("ip", "ip6"):
                name = "iprange"
    elif kind in ("dnat", "snat", "masquerade", "redirect", "reject", "tproxy"):
        name = kind.upper()
    elif kind == "log":
        name = None if isinstance(val, dict) and "group" in val else "LOG"
    elif kind == "notrack":
        name = "CT"
    elif kind == "mangle":
        key = val["key"]
        if "ct" in key:
            name = "CONNMARK" if key["ct"]["key"] == "mark" else "CT"
        elif key == {"meta": {"key": "mark"}}:
            name = "CONNMARK" if _mentions(val["value"], "ct") else "MARK"  # --restore-mark: ct mark
        elif "tcp option" in key:
            name = "TCPMSS"
    if name is None:
        return None
    return {"xt": {"type": xt_type, "name": name}}


# --- rules --------------------------------------------------------------------------------------


def _outside_quotes(text: str) -> str:
    return re.sub(r'"[^"]*"?', '""', text) if '"' in text else text


def _strip_comment(line: str) -> str:
    """Drop ``# handle N`` (``nft -a``) and other ``#`` comments, but keep ``# xt_NAME`` fragments."""
    if "#" not in line:
        return line
    line = _HANDLE_RE.sub("", line)
    bare = _outside_quotes(line)
    i = bare.find("#")
    while i >= 0:
        if not re.match(r"#\s*xt_\w", bare[i:]):
            return line[:i].rstrip()
        i = bare.find("#", i + 1)
    return line


def _without_counter(content: str) -> str:
    """The rule text without ``counter packets N bytes M`` (a value that changes every listing)."""
    if "counter packets" not in content:
        return content
    for m in re.finditer(r"(?:^|\s)counter packets \d+ bytes \d+(?=\s|$)", content):
        if content.count('"', 0, m.start()) % 2 == 0:
            left, right = content[: m.start()].rstrip(), content[m.end() :].lstrip()
            return f"{left} {right}".strip()
    return content


def _tokens(content: str, xt_leading: bool, xt_mode: bool) -> tuple[list[str], list[tuple[int, int]]]:
    """Tokens and their spans; in iptables-nft tables an empty xtables translation (the double
    space a comment match leaves) becomes a token of its own."""
    toks: list[str] = []
    spans: list[tuple[int, int]] = []
    if xt_leading:
        toks.append(_COMMENT_XT)
        spans.append((0, 0))
    prev_end = -1
    for m in _TOKEN_RE.finditer(content):
        start, end = m.span()
        if xt_mode and prev_end >= 0 and start - prev_end >= 2 and content[prev_end:start].strip(" ") == "":
            for _ in range(start - prev_end - 1):  # each empty translation adds one space
                toks.append(_COMMENT_XT)
                spans.append((prev_end, prev_end))
        toks.append(m.group())
        spans.append((start, end))
        prev_end = end
    return toks, spans


def _parse_rule(content: str, family: str, xt_mode: bool, xt_leading: bool) -> tuple[list[Obj], str | None]:
    """The statements of one rule and its comment; what cannot be read becomes ``unknown``."""
    if xt_mode:
        toks, spans = _tokens(content, xt_leading, xt_mode)
    else:  # spans are only needed for unknown fragments: computed then
        toks, spans = _TOKEN_RE.findall(content), []
    p = _Parser(toks, family)
    out: list[Obj] = []
    comment: str | None = None
    unknown: list[int] | None = None  # [first token, last token] of the unknown run being built
    failures = 0

    def close_unknown() -> None:
        nonlocal unknown, spans
        if unknown is not None:
            if not spans:
                spans = _tokens(content, False, False)[1]
            frag = content[spans[unknown[0]][0] : spans[unknown[1]][1]].strip()
            out.append({"unknown": frag})
            unknown = None

    while p.pos < p.n:
        start = p.pos
        tok = toks[start]
        if tok == "comment" and start + 2 == p.n and toks[start + 1].startswith('"'):
            close_unknown()
            comment = _unquote(toks[start + 1])
            break
        try:
            st = p.statement()
        except (_Fail, ValueError, KeyError, IndexError, RecursionError):
            failures += 1
            end = start if failures < 64 else p.n - 1  # give up on pathological lines
            p.pos = end + 1
            if unknown is None:
                unknown = [start, end]
            else:
                unknown[1] = end
            continue
        close_unknown()
        if xt_mode:
            st = _xt_of(st) or st
        out.append(st)
    close_unknown()
    return out, comment


# --- structure ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _PendingRule:
    chain: str
    line: int
    content: str
    xt_leading: bool


@dataclass(slots=True)
class _Table:
    family: str
    name: str
    line: int
    head: list[Obj] = field(default_factory=list)  # named objects, sets/maps, flowtables
    chains: list[Obj] = field(default_factory=list)
    rules: list[_PendingRule] = field(default_factory=list)


def _balance(line: str) -> int:
    if "{" not in line and "}" not in line:
        return 0
    bare = _outside_quotes(line)
    return bare.count("{") - bare.count("}")


def _priority(expr: str, family: str) -> int | None:
    parts = expr.split()
    if not parts:
        return None
    names = _BRIDGE_PRIO if family == "bridge" else _STD_PRIO
    try:
        base = names[parts[0]] if parts[0] in names else int(parts[0])
        if len(parts) == 3 and parts[1] in "+-":
            base += int(parts[2]) if parts[1] == "+" else -int(parts[2])
    except ValueError:
        return None
    return base


def _type_names(text: str, typeof: bool) -> list[str]:
    parts = [p.strip() for p in text.split(" . ")]
    return [_TYPEOF.get(p, p) for p in parts] if typeof else parts


class _Builder:
    """Walks the listing line by line, keeping tables, sets and chains; rules are parsed later."""

    def __init__(self, first_line: int) -> None:
        self.first_line = first_line
        self.tables: list[_Table] = []
        self.xt_warned: set[tuple[str, str]] = set()
        self.table: _Table | None = None
        self.block: str | None = None  # chain | set | flowtable | counter | quota | skip
        self.obj: Obj = {}
        self.set_state: Obj = {}
        self.skip_depth = 0
        self.pending: list[str] | None = None  # lines of a multi-line rule or element list
        self.pending_line = 0
        self.pending_leading = False
        self.pending_depth = 0  # brace balance of the pending lines

    def run(self, text: str) -> None:
        for idx, raw in enumerate(text.splitlines()):
            try:
                self.feed(raw, self.first_line + idx)
            except Exception:  # never raise on pasted text: drop the line
                self.pending = None
        self.flush_pending()
        self.close_block()

    # multi-line accumulation (element lists and rules that wrap)
    def flush_pending(self) -> None:
        if self.pending is None:
            return
        content = " ".join(self.pending)
        self.pending = None
        if self.block == "set":
            self.set_elements(content)
        elif self.block == "chain" and self.table is not None:
            self.table.rules.append(_PendingRule(self.obj["name"], self.pending_line, content, self.pending_leading))

    def feed(self, raw: str, lineno: int) -> None:
        line = raw.strip()
        if not line:
            return
        if line.startswith("#"):
            if m := _WARNING_RE.match(line):
                self.xt_warned.add((m.group(1), m.group(2)))
            return
        line = _strip_comment(line)
        if self.pending is not None:
            if line == "}":
                self.flush_pending()
            else:
                self.pending.append(line)
                self.pending_depth += _balance(line)
                if self.pending_depth <= 0:
                    self.flush_pending()
                return
        if (m := _TABLE_RE.match(line)) and (m.group(1) is None or m.group(1) in _FAMILIES):
            self.close_block()
            self.table = _Table(m.group(1) or "ip", _unquote(m.group(2)), lineno)
            self.tables.append(self.table)
            if _balance(line) <= 0:
                self.table = None
            return
        if self.table is None:
            return
        if self.block is None:
            self.table_line(line, lineno)
        elif self.block == "skip":
            self.skip_depth += _balance(line)
            if self.skip_depth <= 0:
                self.block = None
        elif line.startswith("}"):
            self.close_block()
        elif _BLOCK_RE.match(line):  # a block opens while one is open: its "}" was lost
            self.close_block()
            self.table_line(line, lineno)
        elif self.block == "chain":
            self.chain_line(raw, line, lineno)
        elif self.block == "set":
            self.set_line(line, lineno)
        elif self.block in ("counter", "quota"):
            self.object_line(line)
        elif self.block == "flowtable":
            self.flowtable_line(line)

    def table_line(self, line: str, lineno: int) -> None:
        assert self.table is not None
        if line.startswith("}"):
            self.table = None
            return
        m = _BLOCK_RE.match(line)
        if m is None:
            if _balance(line) > 0:
                self.block, self.skip_depth = "skip", _balance(line)
            return  # table flags / comment: not in nft 1.0.6's JSON
        kind, name = m.group(1), _unquote(m.group(2))
        t = self.table
        self.block = "set" if kind == "map" else kind
        if kind == "chain":
            self.obj = {"family": t.family, "table": t.name, "name": name, "line": lineno}
            t.chains.append({"chain": self.obj})
        else:  # set, map, flowtable, named counter or quota: before the chains in nft -j
            self.obj = {"family": t.family, "name": name, "table": t.name, "line": lineno}
            t.head.append({kind: self.obj})
            self.set_state = {"flags": set()}
        if _balance(line) <= 0:
            self.close_block()

    def close_block(self) -> None:
        self.flush_pending()
        if self.block == "set":
            self.finish_set()
        self.block = None

    # chains
    def chain_line(self, raw: str, line: str, lineno: int) -> None:
        if line.startswith("type ") and " hook " in line:
            if m := _HOOK_RE.match(line):
                assert self.table is not None
                prio = _priority(m.group(3), self.table.family)
                self.obj.update(type=m.group(1), hook=m.group(2), policy=m.group(4) or "accept")
                if prio is not None:
                    self.obj["prio"] = prio
            return
        if line.startswith("comment ") or line.startswith("policy "):
            return  # chain comment: not in nft 1.0.6's JSON
        leading = bool(re.match(r"\t+ +\S", raw))
        if _balance(line) > 0:
            self.pending, self.pending_line, self.pending_leading = [line], lineno, leading
            self.pending_depth = _balance(line)
            return
        assert self.table is not None
        self.table.rules.append(_PendingRule(self.obj["name"], lineno, line, leading))

    # sets and maps
    def set_line(self, line: str, lineno: int) -> None:
        word, _, rest = line.partition(" ")
        st = self.set_state
        if word in ("type", "typeof"):
            key, sep, data = rest.partition(" : ")
            types = _type_names(key, word == "typeof")
            self.obj["type"] = _one_or_list(types)
            if sep:
                self.obj["map"] = " . ".join(_type_names(data, word == "typeof"))
        elif word == "flags":
            st["flags"].update(f.strip() for f in rest.split(","))
        elif word in ("timeout", "gc-interval"):
            self.obj[word] = _seconds(rest.strip())
            if word == "timeout":
                st["flags"].add("timeout")
        elif word == "size":
            self.obj["size"] = int(rest)
        elif word == "policy":
            if rest.strip() != "performance":
                self.obj["policy"] = rest.strip()
        elif word == "comment":
            self.obj["comment"] = _unquote(rest.strip())
        elif word == "counter":
            self.obj["stmt"] = [{"counter": None}]
        elif word == "elements":
            if _balance(line) > 0:
                self.pending, self.pending_line, self.pending_depth = [line], lineno, _balance(line)
            else:
                self.set_elements(line)

    def set_elements(self, content: str) -> None:
        body = content.partition("=")[2]
        toks = _TOKEN_RE.findall(body)
        p = _Parser(toks, self.table.family if self.table else "ip")
        elems: list[Any] = []
        try:
            p.expect("{")
            while p.peek() not in ("}", ""):
                try:
                    elems.append(p.element())
                except (_Fail, ValueError, KeyError, IndexError):  # skip to the next element
                    while p.peek() not in (",", "}", ""):
                        p.pos += 1
                if p.peek() == ",":
                    p.pos += 1
        except (_Fail, ValueError, KeyError, IndexError):
            pass  # keep the elements read so far
        for e in elems:  # an element with a timeout means the set has the timeout flag
            inner = e[0] if isinstance(e, list) else e
            opts = inner.get("elem") if isinstance(inner, dict) else None
            if isinstance(opts, dict) and ("timeout" in opts or "expires" in opts):
                self.set_state["flags"].add("timeout")
        if elems:
            self.obj.setdefault("elem", []).extend(elems)

    def finish_set(self) -> None:
        flags = self.set_state.get("flags", set())
        out = [f for f in ("constant", "interval", "timeout") if f in flags]
        if out:
            self.obj["flags"] = out
        if "constant" in flags:
            self.obj.pop("size", None)
            self.obj.pop("policy", None)
        self.set_state = {}

    # named counters/quotas and flowtables
    def object_line(self, line: str) -> None:
        toks = line.split()
        if self.block == "counter" and len(toks) == 4 and toks[0] == "packets" and toks[2] == "bytes":
            self.obj["packets"], self.obj["bytes"] = int(toks[1]), int(toks[3])
        elif self.block == "quota" and toks:
            inv = toks[0] == "over"
            toks = toks[1:] if inv else toks
            if len(toks) >= 2 and toks[1] in _BYTE_UNITS:
                self.obj["bytes"] = int(toks[0]) * _BYTE_UNITS[toks[1]]
                used = 0
                if len(toks) >= 5 and toks[2] == "used" and toks[4] in _BYTE_UNITS:
                    used = int(toks[3]) * _BYTE_UNITS[toks[4]]
                self.obj.update(used=used, inv=inv)

    def flowtable_line(self, line: str) -> None:
        if m := re.match(r"hook\s+(\S+)\s+priority\s+([^;]+)", line):
            self.obj["hook"] = m.group(1)
            prio = _priority(m.group(2), "netdev")
            if prio is not None:
                self.obj["prio"] = prio
        elif line.startswith("devices"):
            devs = [_unquote(d) for d in re.findall(r'"[^"]*"|[^\s{},=;]+', line.partition("=")[2])]
            if devs:
                self.obj["dev"] = _one_or_list(devs)


def _is_xt_table(t: _Table, warned: set[tuple[str, str]]) -> bool:
    """Rules of this table print xtables translations (see the module doc for the evidence used)."""
    if (t.family, t.name) in warned:
        return True
    if t.family not in ("ip", "ip6") or t.name not in _XT_TABLES:
        return False
    base = [c["chain"] for c in t.chains if "hook" in c["chain"]]
    if base and all(
        c["name"] == c["hook"].upper() and c.get("prio") in _XT_PRIO[t.name] for c in base
    ):  # iptables-nft's own base chains: INPUT, FORWARD, ... at the table's standard priority
        return True
    for r in t.rules:
        bare = _outside_quotes(r.content)
        if r.xt_leading or "  " in bare or _XT_CUE_RE.search(bare):
            return True
    return False


def text_to_objects(text: str, first_line: int = 1) -> list[dict[str, Any]]:
    """The objects ``nft -j list ruleset`` would print for this text listing (see the module doc),
    each table, chain, set/map and rule with its ``"line"``, each rule with its ``"text"``."""
    # A large listing allocates ~10^6 small dicts; the cyclic collector would rescan them again and
    # again (2-3x the run time) although none of them can form a cycle.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _convert(text, first_line)
    finally:
        if gc_was_enabled:
            gc.enable()


def _convert(text: str, first_line: int) -> list[Obj]:
    out: list[Obj] = []
    try:
        b = _Builder(first_line)
        b.run(text if isinstance(text, str) else str(text))
    except Exception:  # never raise: keep what was built
        return out
    for t in b.tables:
        out.append({"table": {"family": t.family, "name": t.name, "line": t.line}})
        out.extend(t.head)
        out.extend(t.chains)
        xt_mode = _is_xt_table(t, b.xt_warned)
        for r in t.rules:
            rule: Obj = {"family": t.family, "table": t.name, "chain": r.chain, "line": r.line}
            try:
                exprs, comment = _parse_rule(r.content, t.family, xt_mode, r.xt_leading and xt_mode)
            except Exception:  # never raise: the whole rule becomes unknown
                exprs, comment = [{"unknown": r.content}], None
            if comment is not None:
                rule["comment"] = comment
            rule["expr"] = exprs
            rule["text"] = _without_counter(r.content)
            out.append({"rule": rule})
    return out
