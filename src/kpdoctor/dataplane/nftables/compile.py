"""nftables rules, compiled once for evaluation: tables, base chains with their hooks and
priorities, named sets and maps indexed for lookups, and each rule as a short list of operations.

The input is libnftables' JSON schema (``nft -j list ruleset``, or a text listing converted to
it), read object by object: a 10,000-Service node's listing is tens of megabytes, and its parsed
dicts would be many times that, so each rule is compiled as it is read and its dicts dropped.

Expressions kpdoctor does not know compile to an *unknown* operation, never to a guess: a match
on one is tried both ways by the evaluator, a statement makes the branch uncertain at that rule.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kpdoctor import memo
from kpdoctor.dataplane.addresses import IPAddress
from kpdoctor.parse.nft import MapElement, NftObject, NftTable, is_iptables_nft, iter_objects, render_rule, reread

# Well-known priorities of the iptables tables (legacy or nft) on each hook: their base chains
# run among nftables' own by these numbers.
XT_PRIORITY = {"raw": -300, "mangle": -150, "nat": -100, "filter": 0, "security": 50}
NAT_SOURCE_PRIORITY = 100  # nat POSTROUTING and INPUT

PROTOCOLS = {1: "icmp", 6: "tcp", 17: "udp", 58: "ipv6-icmp", 132: "sctp"}
_PROTO_KEYS = {("meta", "l4proto"), ("payload", "ip", "protocol"), ("payload", "ip6", "nexthdr")}
_VERDICTS = ("accept", "drop", "return", "continue", "jump", "goto", "queue")

Getter = tuple[Any, ...]
Op = tuple[Any, ...]


@dataclass(slots=True)
class NftSet:
    """A set or map: exact elements in a dict, prefixes and ranges in a list; dynamic sets
    (affinity, meters) hold clients seen before, which a new connection's client never is."""

    name: str
    is_map: bool = False
    dynamic: bool = False
    exact: dict[Any, Any] = field(default_factory=dict)
    spans: list[tuple[tuple[tuple[Any, Any], ...], Any]] = field(default_factory=list)
    comments: dict[Any, str] = field(default_factory=dict)  # element key -> its comment
    size: int = 0
    line: int | None = None  # where it is declared (text listings)
    index: int = 0  # its position among a JSON listing's objects

    def add(self, key: Any, value: Any, comment: str | None = None) -> None:
        self.size += 1
        if comment:
            self.comments[key] = comment
        if _has_span(key):
            parts = key if isinstance(key, tuple) and not _is_span(key) else (key,)
            self.spans.append((tuple(p if _is_span(p) else _point(p) for p in parts), value))
        else:
            self.exact.setdefault(key, value)

    def lookup(self, key: Any) -> tuple[bool, Any]:
        if self.dynamic:
            return False, None
        try:
            if key in self.exact:
                return True, self.exact[key]
        except TypeError:
            return False, None
        parts = key if isinstance(key, tuple) else (key,)
        for spans, value in self.spans:
            if len(spans) == len(parts) and all(_within(x, s) for x, s in zip(parts, spans, strict=True)):
                return True, value
        return False, None

    def keys(self) -> list[Any]:
        return list(self.exact)

    @property
    def where(self) -> str:
        """Its line in a text listing, or its place in the JSON."""
        return f"line {self.line}" if self.line is not None else f"nftables[{self.index}]"


def _within(x: Any, span: tuple[Any, Any]) -> bool:
    lo, hi = span
    if type(x) is not type(lo):
        return False
    return bool(lo <= x <= hi)


class Span(tuple[Any, Any]):
    """An interval element (a prefix or a range), told apart from a concatenation."""

    __slots__ = ()


def _is_span(x: Any) -> bool:
    return isinstance(x, Span)


def _has_span(x: Any) -> bool:
    return _is_span(x) or (isinstance(x, tuple) and any(_is_span(p) for p in x))


def _point(x: Any) -> tuple[Any, Any]:
    return (x, x)


@dataclass(slots=True)
class NftRule:
    ops: list[Op]
    line: int | None
    index: int
    source: str | None  # the text listing's line, or None (rendered from the JSON on demand)
    doc: str | None = None  # the JSON document and where the rule is in it (for rendering)
    span: tuple[int, int] = (0, 0)
    numgen: tuple[int, int] | None = None  # (mod, offset) of a numgen the rule splits on
    problem: str | None = None  # a structural fault of the rule itself (a numgen map with gaps)
    _text: str | None = None

    @property
    def where(self) -> str:
        """Its line in a text listing, or its place in the JSON."""
        return f"line {self.line}" if self.line is not None else f"nftables[{self.index}]"

    @property
    def text(self) -> str:
        if self._text is None:
            if self.source is not None:
                self._text = self.source
            else:
                expr = reread(self.doc, self.span, "rule").get("expr")
                self._text = render_rule(expr if isinstance(expr, list) else [])
        return self._text


@dataclass(slots=True)
class NftChain:
    """A chain; its rules are compiled the first time it is walked (a verification split across
    processes compiles in each only the chains its share of Services reaches)."""

    family: str
    table: str
    name: str
    type: str | None = None
    hook: str | None = None
    prio: int = 0
    policy: str = "accept"
    line: int | None = None
    index: int = 0
    pending: list[NftObject] = field(default_factory=list)  # rule objects not compiled yet
    _rules: list[NftRule] = field(default_factory=list)

    @property
    def base(self) -> bool:
        return self.hook is not None

    @property
    def size(self) -> int:
        return len(self._rules) + len(self.pending)

    @property
    def rules(self) -> list[NftRule]:
        if self.pending:
            for obj in self.pending:
                body = obj.body if obj.body else obj.reread()
                expr = body.get("expr")
                self._rules.append(compile_rule(expr if isinstance(expr, list) else [], obj))
            self.pending = []
        return self._rules


@dataclass(slots=True)
class NftTableRules:
    family: str  # ip | ip6 | inet | ...
    name: str
    artifact: str
    chains: dict[str, NftChain] = field(default_factory=dict)
    sets: dict[str, NftSet] = field(default_factory=dict)
    line: int | None = None

    @property
    def label(self) -> str:
        return f"{self.family} {self.name}"

    def families(self) -> tuple[int, ...]:
        """Address families whose packets its chains see (a netdev table's ingress: both)."""
        return {"ip": (4,), "ip6": (6,), "inet": (4, 6), "netdev": (4, 6)}.get(self.family, ())

    @property
    def iptables_nft(self) -> bool:
        return is_iptables_nft(self.family, self.name, [c.name for c in self.chains.values() if c.base])

    def summary(self) -> NftTable:
        """What :func:`kpdoctor.parse.nft.parse_tables` says of the table (its name, base chains and
        size), from the compiled listing: read once for both."""
        base = [f"{c.name}: {c.type} {c.hook} policy {c.policy}" for c in self.chains.values() if c.base]
        size = sum(c.size for c in self.chains.values())
        return NftTable(self.family, self.name, self.line or 1, f"table {self.label}", base, len(self.chains), size)


    def map_elements(self, line: int) -> list[MapElement]:
        """The exact elements of its maps as :func:`kpdoctor.parse.nft.map_elements` gives them,
        from the compiled listing (a JSON listing is decoded once, here), cited at ``line``."""
        out = []
        for s in self.sets.values():
            if not s.is_map:
                continue
            for key, value in s.exact.items():
                parts = tuple(_said(p) for p in (key if isinstance(key, tuple) else (key,)))
                verdict = " ".join(str(v) for v in value if v is not None) if isinstance(value, tuple) else str(value)
                comment = s.comments.get(key)
                text = " . ".join(parts) + (f' comment "{comment}"' if comment else "") + f" : {verdict}"
                out.append(MapElement(line, text, s.name, parts, comment, verdict))
        return out


def _said(part: Any) -> str:
    """A compiled key part as nft prints it: addresses are integers here (a port or a mark never
    exceeds 65535 in a key kube-proxy writes)."""
    if isinstance(part, int) and not isinstance(part, bool) and part > 0xFFFF:
        return str(ipaddress.ip_address(part) if part < 2**32 else ipaddress.IPv6Address(part))
    return str(part)


def compile_listing(artifact: str, text: str, first_line: int = 1) -> list[NftTableRules]:
    """The tables of one listing (``nft -j list ruleset`` or its text form), compiled."""
    return compile_objects(artifact, iter_objects(text, first_line))


def compile_objects(artifact: str, objects: Iterable[NftObject]) -> list[NftTableRules]:
    tables: dict[tuple[str, str], NftTableRules] = {}

    def table(fam: str, name: str) -> NftTableRules:
        t = tables.get((fam, name))
        if t is None:
            t = tables[(fam, name)] = NftTableRules(fam, name, artifact)
        return t

    for obj in objects:
        b = obj.body
        fam, kind = str(b.get("family", "")), obj.kind
        if kind == "table":
            table(fam, str(b.get("name"))).line = obj.line
        elif kind == "chain":
            t = table(fam, str(b.get("table")))
            name = str(b.get("name"))
            ch = t.chains.get(name)
            if ch is None:
                ch = t.chains[name] = NftChain(fam, t.name, name, line=obj.line, index=obj.index)
            if b.get("hook"):
                ch.type, ch.hook = str(b.get("type", "filter")), str(b.get("hook"))
                prio = b.get("prio", 0)
                ch.prio = prio if isinstance(prio, int) else 0
                ch.policy = str(b.get("policy", "accept"))
        elif kind in ("set", "map"):
            t = table(fam, str(b.get("table")))
            new = t.sets[str(b.get("name"))] = _compile_set(b, kind == "map")
            new.line, new.index = obj.line, obj.index
        elif kind == "element":
            t = table(fam, str(b.get("table")))
            s = t.sets.get(str(b.get("name")))
            if s is not None:
                _add_elements(s, b.get("elem"))
        elif kind == "rule":
            t = table(fam, str(b.get("table")))
            name = str(b.get("chain"))
            ch = t.chains.get(name)
            if ch is None:
                ch = t.chains[name] = NftChain(fam, t.name, name)
            if obj.doc is not None:  # JSON: decoded again when the chain is first walked
                obj.body = {}
            ch.pending.append(obj)
    return list(tables.values())


def _compile_set(b: dict[str, Any], is_map: bool) -> NftSet:
    flags = b.get("flags")
    flags = flags if isinstance(flags, list) else [flags] if isinstance(flags, str) else []
    s = NftSet(str(b.get("name")), is_map, dynamic="dynamic" in flags or "timeout" in flags)
    _add_elements(s, b.get("elem"))
    return s


def _add_elements(s: NftSet, elems: Any) -> None:
    for el in elems if isinstance(elems, list) else []:
        if s.is_map and isinstance(el, list) and len(el) == 2:
            key, comment = _element_key(el[0])
            s.add(key, _value(el[1]), comment)
        else:
            key, comment = _element_key(el)
            s.add(key, None, comment)


def _element_key(el: Any) -> tuple[Any, str | None]:
    if isinstance(el, dict) and isinstance(el.get("elem"), dict):
        inner = el["elem"]
        comment = inner.get("comment")
        return _value(inner.get("val")), comment if isinstance(comment, str) else None
    return _value(el), None


_ADDRESSES: dict[str, int | str] = memo.table()


def _address(x: str) -> int | str:
    """An address as an integer (remembered: a node's listing names each address many times)."""
    v = _ADDRESSES.get(x)
    if v is None:
        if len(_ADDRESSES) > 500_000:
            _ADDRESSES.clear()
        try:
            v = int.from_bytes(socket.inet_aton(x), "big") if x.count(".") == 3 else int(ipaddress.ip_address(x))
        except (OSError, ValueError):
            try:
                v = int(ipaddress.ip_address(x))
            except ValueError:
                v = x
        _ADDRESSES[x] = v
    return v


_PREFIXES: dict[str, Any] = memo.table()


def _prefix(text: str) -> Any:
    """A prefix as the span of addresses it covers (remembered: every Service chain of a node
    names the pod network)."""
    span = _PREFIXES.get(text)
    if span is None:
        if len(_PREFIXES) > 100_000:
            _PREFIXES.clear()
        try:
            net = ipaddress.ip_network(text, strict=False)
            span = Span((int(net.network_address), int(net.broadcast_address)))
        except ValueError:
            span = ("unknown", text)
        _PREFIXES[text] = span
    return span


def _value(x: Any) -> Any:
    """A constant as the evaluator compares it: addresses as integers, prefixes and ranges as
    spans, concatenations as tuples, verdicts as ("goto", chain) and the like."""
    if isinstance(x, bool):
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, str):
        if x and (x[0].isdigit() or ":" in x) and ("." in x or ":" in x):
            return _address(x)
        return x
    if isinstance(x, list):
        return tuple(_value(v) for v in x)
    if isinstance(x, dict) and len(x) == 1:
        key, v = next(iter(x.items()))
        if key == "prefix" and isinstance(v, dict):
            return _prefix(f"{v.get('addr')}/{v.get('len')}")
        if key == "range" and isinstance(v, list) and len(v) == 2:
            return Span((_value(v[0]), _value(v[1])))
        if key == "concat" and isinstance(v, list):
            return tuple(_value(p) for p in v)
        if key == "elem" and isinstance(v, dict):
            return _value(v.get("val"))
        if key in ("goto", "jump") and isinstance(v, dict):
            return (key, str(v.get("target")))
        if key in _VERDICTS:
            return (key, None)
    return ("unknown", str(x))


# -- rules -------------------------------------------------------------------------------------


def compile_rule(expr: list[Any], obj: NftObject) -> NftRule:
    ops: list[Op] = []
    numgen: tuple[int, int] | None = None
    problem = None
    for stmt in expr:
        op = _statement(stmt)
        ops.append(op)
        ng = _numgen_of(stmt)
        if ng is not None:
            numgen = ng
            problem = problem or _numgen_gap(op, ng)
    return NftRule(ops, obj.line, obj.index, obj.text, obj.doc, obj.span, numgen, problem)


def _numgen_of(stmt: Any) -> tuple[int, int] | None:
    """(mod, offset) of a ``numgen random`` choosing a verdict or a DNAT target (the places
    kube-proxy, and anyone balancing with nftables, put one)."""
    if not isinstance(stmt, dict):
        return None
    body = stmt.get("vmap") or stmt.get("dnat") or stmt.get("snat")
    if not isinstance(body, dict):
        return None
    key = body.get("key") if "vmap" in stmt else body.get("addr")
    if isinstance(key, dict) and isinstance(key.get("map"), dict):
        key = key["map"].get("key")
    ng = key.get("numgen") if isinstance(key, dict) else None
    if isinstance(ng, dict) and isinstance(ng.get("mod"), int) and ng.get("mode", "random") == "random":
        off = ng.get("offset", 0)
        return ng["mod"], off if isinstance(off, int) else 0
    return None


def _numgen_gap(op: Op, ng: tuple[int, int]) -> str | None:
    """A numgen map whose keys are not exactly offset..offset+mod-1: some share of the traffic
    finds no element (and goes on un-translated), or an element is never chosen."""
    mapref = op[2] if op[0] == "vmap" else op[2][2] if op[0] == "dnat" and op[2][0] == "map" else None
    if not isinstance(mapref, tuple) or mapref[0] != "set":
        return None
    keys = set(mapref[1].keys())
    mod, off = ng
    want = set(range(off, off + mod))
    if keys == want:
        return None
    missing = sorted(want - keys)
    extra = sorted(keys - want, key=str)
    parts = []
    if missing:
        parts.append(f"no element for {', '.join(map(str, missing[:8]))} (of numgen mod {mod})")
    if extra:
        parts.append(f"elements {', '.join(map(str, extra[:8]))} are never chosen")
    return "; ".join(parts)


def _statement(s: Any) -> Op:
    if not isinstance(s, dict) or len(s) != 1:
        return ("unknown", str(s))
    key, v = next(iter(s.items()))
    if key == "match" and isinstance(v, dict):
        left = _getter(v.get("left"))
        how, right = str(v.get("op", "==")), _matcher(v.get("right"), left)
        fast = _address_match(left, how, right)
        return fast if fast is not None else ("match", left, how, right)
    if key in _VERDICTS:
        target = v.get("target") if isinstance(v, dict) else None
        return ("verdict", key, str(target) if target is not None else None)
    if key == "vmap" and isinstance(v, dict):
        return ("vmap", _getter(v.get("key")), _mapref(v.get("data")))
    if key == "mangle" and isinstance(v, dict):
        k = v.get("key")
        if isinstance(k, dict) and k.get("meta", {}).get("key") == "mark":
            return ("mark", _getter(v.get("value")))
        return ("noop",)  # ct mark, priority...: nothing the verdicts read without a fork
    if key in ("dnat", "snat") and isinstance(v, dict):
        addr = v.get("addr")
        addr_g = _getter(addr) if addr is not None else ("const", None)
        port = v.get("port")
        port_g = _getter(port) if port is not None else None
        if key == "snat":
            return ("masq",)
        return ("dnat", str(v.get("family") or ""), addr_g, port_g)
    if key == "masquerade":
        return ("masq",)
    if key == "redirect":
        port = v.get("port") if isinstance(v, dict) else None
        return ("redirect", port if isinstance(port, int) else None)
    if key == "reject":
        return ("reject",)
    if key == "notrack":
        return ("notrack",)
    if key in ("counter", "log", "comment"):
        return ("noop",)
    if key == "set" and isinstance(v, dict):
        ref = str(v.get("set", ""))
        return ("affinity", ref.lstrip("@"))
    if key == "xt" and isinstance(v, dict):
        what = f"xt {v.get('type')} {v.get('name')} (an iptables-nft extension nft cannot show)"
        if v.get("type") == "match":
            if v.get("name") == "comment":
                return ("noop",)
            return ("match", ("unknown", what), "==", ("value", True))  # tried both ways
        return ("unknown", what)
    if key == "unknown":
        return ("unknown", str(v))
    return ("unknown", render_rule([s]))


def _address_match(left: Getter, how: str, right: tuple[Any, ...]) -> Op | None:
    """The most common match, an address against a value or prefix, in a form the evaluator
    decides inline: ("addr", is_dst, version, negated, span)."""
    if left[0] != "payload" or left[1] not in ("ip", "ip6") or left[2] not in ("saddr", "daddr"):
        return None
    if how not in ("==", "!=") or right[0] not in ("value", "span"):
        return None
    span = right[1] if right[0] == "span" else Span((right[1], right[1]))
    if not isinstance(span[0], int) or not isinstance(span[1], int):
        return None
    return ("addr", left[2] == "daddr", 4 if left[1] == "ip" else 6, how == "!=", span)


def _mapref(x: Any) -> tuple[Any, ...]:
    if isinstance(x, str) and x.startswith("@"):
        return ("ref", x[1:])
    if isinstance(x, dict) and isinstance(x.get("set"), list):
        s = NftSet("(anonymous)", is_map=True)
        _add_elements(s, x["set"])
        return ("set", s)
    return ("unknown", str(x))


def _getter(x: Any) -> Getter:
    if not isinstance(x, dict):
        return ("const", _value(x))
    if len(x) != 1:
        return ("unknown", str(x))
    key, v = next(iter(x.items()))
    if key == "payload" and isinstance(v, dict):
        if "base" in v:  # raw payload (@nh,16,16): not decoded
            return ("unknown", f"raw payload {v}")
        return ("payload", str(v.get("protocol")), str(v.get("field")))
    if key == "meta" and isinstance(v, dict):
        return ("meta", str(v.get("key")))
    if key == "ct" and isinstance(v, dict):
        return ("ct", str(v.get("key")), str(v.get("dir", "")))
    if key == "fib" and isinstance(v, dict):
        flags = v.get("flags")
        fl = tuple(flags) if isinstance(flags, list) else (str(flags),)
        return ("fib", fl, str(v.get("result")))
    if key == "numgen" and isinstance(v, dict):
        off = v.get("offset", 0)
        return ("numgen", v.get("mod"), off if isinstance(off, int) else 0)
    if key == "concat" and isinstance(v, list):
        return ("concat", tuple(_getter(p) for p in v))
    if key in ("&", "|", "^") and isinstance(v, list) and len(v) == 2:
        return ("binop", key, _getter(v[0]), _getter(v[1]))
    if key == "map" and isinstance(v, dict):
        return ("map", _getter(v.get("key")), _mapref(v.get("data")))
    return ("const", _value(x))


def _matcher(x: Any, left: Getter) -> tuple[Any, ...]:
    if isinstance(x, str) and x.startswith("@"):
        return ("ref", x[1:])
    if isinstance(x, dict) and isinstance(x.get("set"), list):
        s = NftSet("(anonymous)")
        for el in x["set"]:
            key, _ = _element_key(el)
            s.add(_proto_name(key) if _is_proto(left) else key, None)
        return ("set", s)
    if isinstance(x, list):  # ct state { established, related } as nft -j prints flag lists
        return ("flags", frozenset(str(v) for v in x))
    v = _value(x)
    if _is_span(v):
        return ("span", v)
    if _is_proto(left):
        v = _proto_name(v)
    return ("value", v)


def _is_proto(g: Getter) -> bool:
    return g in _PROTO_KEYS


def _proto_name(v: Any) -> Any:
    return PROTOCOLS.get(v, v) if isinstance(v, int) else v


def element_address(v: object, family: int) -> IPAddress | None:
    """An element's address component (an integer of the family's width), or None."""
    if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v >= 1 << (32 if family == 4 else 128):
        return None
    return ipaddress.IPv4Address(v) if family == 4 else ipaddress.IPv6Address(v)


def element_text(key: Any, family: int) -> str:
    """A set or map key as nft prints it: ``172.30.0.41 . tcp . 80``."""
    parts = key if isinstance(key, tuple) else (key,)
    shown = []
    for v in parts:
        addr = element_address(v, family) if isinstance(v, int) and v > 65535 else None
        shown.append(str(addr) if addr is not None else str(v))
    return " . ".join(shown)
