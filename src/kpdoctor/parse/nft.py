"""nftables rulesets (``nft list ruleset``, and its ``-j`` JSON form): the tables and their base
chains, each with its line, and the elements of their maps.

Enough to tell which mode kube-proxy runs in (its own ``kube-proxy`` table in nftables mode),
what else filters packets on the node (firewalld, a CNI's table), and which tables are only
iptables-nft's. Evaluating the rules themselves is the nftables backend's work.

A part of a listing cut out of its table (a ``chain``, ``set`` or ``map`` block pasted alone, as
people quote the block they mean) is read too, as a table that is not shown whole
(:attr:`NftTable.partial`): its family is unknown, and it is kube-proxy's when its blocks carry the
names only kube-proxy's nftables proxier gives (pkg/proxy/nftables/proxier.go). The verification
never evaluates such a part: what the rest of the table holds is unknown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kpdoctor import lazy_re
from kpdoctor.parse.structured import load_json, strip_bom

# The tables iptables-nft keeps its rules in (``iptables-nft-save`` shows them as iptables rules).
XT_TABLES = frozenset({"filter", "nat", "mangle", "raw", "security"})
XT_BUILTIN_CHAINS = frozenset({"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"})
KUBE_PROXY_TABLE = "kube-proxy"  # kube-proxy's nftables mode: "table ip kube-proxy", "table ip6 kube-proxy"

_TABLE = lazy_re.compile(r"^[ \t]*table\s+(ip|ip6|inet|arp|bridge|netdev)\s+([\w.-]+)\s*\{", re.M)
_CHAIN = lazy_re.compile(r"^\s*chain\s+(\S+)\s*\{")
_HOOK = lazy_re.compile(
    r"^\s*type\s+(\w+)\s+hook\s+(\w+)(?:\s+device\s+\S+)?\s+priority\s+([^;]+);(?:\s*policy\s+(\w+);)?"
)
_RULE_HINT = lazy_re.compile(r"\b(jump|goto|dnat|snat|masquerade|accept|drop|reject|vmap|counter)\b")
_BLOCK = lazy_re.compile(r"^\s*(chain|set|map|flowtable)\s+([\w.@/-]+)\s*\{")
# what only an nft listing prints inside a chain, set or map block: a base chain's hook line, a
# set's or map's type (types joined by " . ", a map's value after " : "), its elements or flags
_NFT_BODY = lazy_re.compile(
    r"^\s*(?:type\s+(?:filter|nat|route)\s+hook\s+\w+|"
    r"type\s+[a-z0-9_]+(?:\s+\.\s+[a-z0-9_]+)*(?:\s+:\s+[a-z0-9_]+)?\s*$|typeof\s+\S|"
    r"elements\s+=\s+\{|flags\s+(?:interval|timeout|constant|dynamic)\b)",
    re.M,
)
# the set and map names kube-proxy's nftables proxier gives (pkg/proxy/nftables/proxier.go):
# none is another program's, so a block of one of them is a part of kube-proxy's table
KUBE_PROXY_OBJECTS = frozenset(
    {
        "no-endpoint-services", "no-endpoint-nodeports", "service-ips", "service-nodeports", "cluster-ips",
        "nodeport-ips", "firewall-ips", "service-endpoints-check", "nodeport-endpoints-check", "cluster-ips-check",
        "firewall-check", "mark-for-masquerade", "masquerading", "reject-chain",
    }
)  # fmt: skip


@dataclass(slots=True)
class NftTable:
    family: str  # ip | ip6 | inet | arp | bridge | netdev
    name: str
    line: int  # where it starts (1 for JSON, which has no lines worth citing)
    text: str  # the line that opens it
    base_chains: list[str] = field(default_factory=list)  # "name: type hook policy P"
    chains: int = 0
    rules: int = 0
    sets: int = 0  # sets and maps
    partial: bool = False  # a part cut out of the table: what the rest holds is unknown

    @property
    def iptables_nft(self) -> bool:
        """One of the tables iptables-nft writes (its rules are read from iptables-nft-save)."""
        return is_iptables_nft(self.family, self.name, [b.split(":", 1)[0] for b in self.base_chains])

    @property
    def label(self) -> str:
        return f"{self.family} {self.name}" if self.family else f"{self.name} (a part of it, its family not shown)"

    @property
    def described(self) -> str:
        """``inet firewalld (filter_INPUT: filter input policy accept)``"""
        return self.label + (f" ({'; '.join(self.base_chains)})" if self.base_chains else "")


def is_iptables_nft(family: str, name: str, base_chains: list[str]) -> bool:
    """Is this table iptables-nft's? Its name is an iptables table's and its base chains carry
    iptables' built-in names: a hand-written ``table ip filter { chain forward { ... } }`` is
    not (iptables-nft-save shows such a table only as "incompatible", never its rules)."""
    return family in ("ip", "ip6") and name in XT_TABLES and all(c in XT_BUILTIN_CHAINS for c in base_chains)


def looks_like_nft_text(text: str) -> bool:
    """``nft list ruleset`` (or ``nft list table ...``) printed as text."""
    return bool(_TABLE.search(text[:65536])) and bool(re.search(r"^\s*(chain|set|map)\s+\S+\s*\{", text, re.M))


def looks_like_nft_part(text: str) -> bool:
    """A ``chain``, ``set`` or ``map`` block of an nft listing without its table: it opens with
    the block and holds a line only nft prints there (a hook, a type, elements, flags)."""
    head = text[:65536]
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    return bool(_BLOCK.match(first)) and not _TABLE.search(head) and bool(_NFT_BODY.search(head))


def parse_tables(text: str, first_line: int = 1, part: bool = False) -> list[NftTable]:
    """The tables of an nftables listing, text or JSON; what cannot be read is left out.
    ``part``: the text is a part of a table (:func:`looks_like_nft_part`): read as one partial
    table."""
    if text.lstrip().startswith("{"):
        return _json_tables(text)
    out: list[NftTable] = []
    table: NftTable | None = None
    chain: str | None = None
    depth = 1 if part else 0  # a part's blocks sit where a table's do
    names: list[str] = []
    if part:
        first = next((i for i, ln in enumerate(text.splitlines()) if ln.strip()), 0)
        table = NftTable(
            "", "", first_line + first, text.splitlines()[first].strip() if text.strip() else "", partial=True
        )
        out.append(table)
    for i, raw in enumerate(text.splitlines()):
        line = raw.split("#", 1)[0] if "#" in raw and "comment" not in raw else raw
        m = _TABLE.match(line)
        if m and depth == 0:
            table = NftTable(m.group(1), m.group(2), first_line + i, raw.strip())
            out.append(table)
        elif table is not None and depth == 1 and (b := _BLOCK.match(line)):
            names.append(b.group(2))
            if b.group(1) == "chain":
                chain = b.group(2)
                table.chains += 1
            else:
                table.sets += 1
        elif table is not None and depth == 2 and chain and (h := _HOOK.match(line)):
            policy = h.group(4) or "accept"
            table.base_chains.append(f"{chain}: {h.group(1)} {h.group(2)} policy {policy}")
        elif table is not None and depth == 2 and chain and _RULE_HINT.search(line):
            table.rules += 1
        depth += line.count("{") - line.count("}")
        if depth <= 1:
            chain = None
        if depth <= 0 and not part:
            depth, table = 0, None
    if part and out:
        kube = any(n in KUBE_PROXY_OBJECTS for n in names)
        out[0].name = KUBE_PROXY_TABLE if kube else "?"
    return out


@dataclass(frozen=True, slots=True)
class MapElement:
    """One element of a map as ``nft list`` prints it: its key's parts (``10.88.1.2 . tcp . 80``),
    its comment, and its value (a verdict: ``drop``, ``goto reject-chain``)."""

    line: int
    text: str
    map: str
    key: tuple[str, ...]
    comment: str | None
    value: str


_ELEMENT = lazy_re.compile(r'^(?P<key>[^":{}]+?)(?:\s+comment\s+"(?P<comment>[^"]*)")?\s+:\s+(?P<value>[^,}]+?)\s*$')


_MAP_OPEN = lazy_re.compile(r"^[ \t]*map[ \t]+([\w.@/-]+)[ \t]*\{", re.M)


def map_elements(text: str, first_line: int = 1, names: frozenset[str] | None = None) -> list[MapElement]:
    """The elements of the maps of a text listing (or of a part of one), each at its line, of the
    maps ``names`` only when given (a node's listing holds maps of thousands of elements); a
    JSON listing's come from its compiled tables (``NftTableRules.map_elements``)."""
    out: list[MapElement] = []
    line_no, counted_to = first_line, 0
    for block in _MAP_OPEN.finditer(text):
        name = block.group(1)
        if names is not None and name not in names:
            continue
        line_no += text.count("\n", counted_to, block.start())
        counted_to = block.start()
        out += _elements(_lines_from(text, block.end()), line_no, name)
    return out


def _lines_from(text: str, pos: int) -> Iterator[str]:
    """The text's lines from ``pos`` on (the rest of that line first), read as they are needed."""
    while pos <= len(text):
        nl = text.find("\n", pos)
        end = len(text) if nl < 0 else nl
        yield text[pos:end].rstrip("\r")
        pos = end + 1


def _elements(lines: Iterator[str], line_no: int, name: str) -> list[MapElement]:
    """The elements of the map whose block opened on line ``line_no`` (``lines``: the rest of
    that line, then the lines after it)."""
    out: list[MapElement] = []
    inside = False  # within its `elements = { ... }`
    for i, raw in enumerate(lines):
        line = raw.strip()
        if i and _BLOCK.match(raw):
            break  # the next block: this one ended without its closing brace (a cut listing)
        if line.startswith("elements = {"):
            inside, line = True, line[len("elements = {") :]
        if not inside:
            if line == "}":
                break
            continue
        closing = _outside_quotes_index(line, "}")
        body = line if closing < 0 else line[:closing]
        for part in _split_outside_quotes(body, ","):
            m = _ELEMENT.match(part.strip())
            if m is not None:
                key = tuple(k.strip() for k in m.group("key").split(" . "))
                out.append(MapElement(line_no + i, raw.strip(), name, key, m.group("comment"), m.group("value")))
        if closing >= 0:
            inside = False
    return out


def _outside_quotes_index(line: str, ch: str) -> int:
    quoted = False
    for i, c in enumerate(line):
        if c == '"':
            quoted = not quoted
        elif c == ch and not quoted:
            return i
    return -1


def _split_outside_quotes(text: str, sep: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    quoted = False
    for c in text:
        if c == '"':
            quoted = not quoted
        if c == sep and not quoted:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    out.append("".join(cur))
    return out


def _json_tables(text: str) -> list[NftTable]:
    """Tables and base chains of ``nft -j`` output (the verification sums a listing up from its
    compiled tables instead: :meth:`kpdoctor.dataplane.nftables.compile.NftTableRules.summary`)."""
    tables: dict[tuple[str, str], NftTable] = {}
    for item, _ in _json_items(strip_bom(text)):
        if not isinstance(item, dict) or len(item) != 1:
            continue
        what, obj = next(iter(item.items()))
        if what not in ("table", "chain", "rule") or not isinstance(obj, dict):
            continue
        fam = str(obj.get("family"))
        name = str(obj.get("name") if what == "table" else obj.get("table"))
        if what == "table":
            tables.setdefault((fam, name), NftTable(fam, name, 1, f"table {fam} {name}"))
            continue
        t = tables.get((fam, name))
        if t is None:
            continue
        if what == "rule":
            t.rules += 1
            continue
        t.chains += 1
        if obj.get("hook"):
            t.base_chains.append(
                f"{obj.get('name')}: {obj.get('type')} {obj.get('hook')} policy {obj.get('policy', 'accept')}"
            )
    return list(tables.values())


def foreign_tables(text: str, first_line: int = 1) -> list[str]:
    """Tables that are not iptables-nft's and not kube-proxy's, with their base chains, e.g.
    ``inet firewalld (filter_INPUT: filter input policy accept)``: rules kpdoctor does not
    evaluate that may also drop Service traffic."""
    return [t.described for t in parse_tables(text, first_line) if not t.iptables_nft and t.name != KUBE_PROXY_TABLE]


# -- the whole ruleset, object by object (for the nftables backend) -------------------------


@dataclass(slots=True)
class NftObject:
    """One object of a listing (table, chain, set, map, rule...) in libnftables' JSON schema,
    with where it is: its line in a text listing, or its index in the JSON's ``nftables`` array."""

    kind: str  # "table" | "chain" | "set" | "map" | "rule" | ...
    body: dict[str, Any]
    line: int | None  # text listings only
    index: int  # position among the listing's objects
    text: str | None = None  # the rule as a text listing prints it (text listings only)
    # where a JSON object is in its document, to decode it again when it is cited (a listing's
    # parsed dicts are many times its text: they are not kept)
    doc: str | None = None
    span: tuple[int, int] = (0, 0)

    def reread(self) -> dict[str, Any]:
        """The object's body, decoded again from the document (JSON listings)."""
        return reread(self.doc, self.span, self.kind)

    @property
    def where(self) -> str:
        """How a citation points at it: the line, or the JSON path."""
        return f"line {self.line}" if self.line is not None else f"nftables[{self.index}]"


def iter_objects(text: str, first_line: int = 1) -> Iterator[NftObject]:
    """The objects of ``nft -j list ruleset`` (read one at a time: a 10,000-Service node's listing
    is tens of megabytes, and a rule's dicts are many times its text) or of a text listing
    (converted by :mod:`kpdoctor.parse.nft_text`)."""
    if not text.lstrip().startswith("{"):
        from kpdoctor.parse.nft_text import text_to_objects

        for i, obj in enumerate(text_to_objects(text, first_line)):
            kind, body = next(iter(obj.items()))
            if not isinstance(body, dict):
                continue
            line = body.pop("line", None)
            rule_text = body.pop("text", None)
            yield NftObject(kind, body, line if isinstance(line, int) else None, i, rule_text)
        return
    text = strip_bom(text)
    for i, (item, span) in enumerate(_json_items(text)):
        if not isinstance(item, dict) or len(item) != 1:
            continue
        kind, body = next(iter(item.items()))
        if isinstance(body, dict):
            yield NftObject(kind, body, None, i, None, text if span[1] else None, span)


def reread(doc: str | None, span: tuple[int, int], kind: str) -> dict[str, Any]:
    if doc is None or not span[1]:
        return {}
    try:
        item = _DECODER.raw_decode(doc, span[0])[0]
    except (ValueError, RecursionError):
        return {}
    body = item.get(kind) if isinstance(item, dict) else None
    return body if isinstance(body, dict) else {}


_DECODER = json.JSONDecoder()
_ARRAY = lazy_re.compile(r'\A\s*\{\s*"nftables"\s*:\s*\[\s*')
_SEP = lazy_re.compile(r"\s*(,|\])\s*")


def _json_items(text: str) -> Iterator[tuple[Any, tuple[int, int]]]:
    """The items of the ``nftables`` array, decoded one by one, each with where it is; a
    document of another shape (pretty-printed with other keys first, say) is decoded whole."""
    m = _ARRAY.match(text)
    if m is None:
        try:
            doc = load_json(text)
        except ValueError:
            return
        items = doc.get("nftables") if isinstance(doc, dict) else None
        for it in items if isinstance(items, list) else []:
            yield it, (0, 0)
        return
    pos = m.end()
    while pos < len(text) and text[pos] != "]":
        start = pos
        try:
            item, pos = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return  # truncated or damaged from here on: what was read stands
        yield item, (start, pos)
        sep = _SEP.match(text, pos)
        if sep is None or sep.group(1) == "]":
            return
        pos = sep.end()


# -- JSON expressions as nft prints them (for citations of rules read from JSON) -------------


def render_rule(expr: list[Any]) -> str:
    """A rule's statements in nft's text syntax, as far as kpdoctor knows them (a citation of a
    rule read from ``nft -j`` output, which has no lines worth citing)."""
    return " ".join(_stmt(s) for s in expr if isinstance(s, dict))


def _stmt(s: dict[str, Any]) -> str:
    if len(s) != 1:
        return json.dumps(s, separators=(",", ":"))
    key, v = next(iter(s.items()))
    if key == "match" and isinstance(v, dict):
        op = v.get("op", "==")
        left, right = render_expr(v.get("left")), render_expr(v.get("right"))
        if op == "in" or (op == "==" and not _is_binop(v.get("left"))):
            return f"{left} {right}"
        return f"{left} {op} {right}"
    if key in ("accept", "drop", "return", "continue"):
        return key
    if key in ("jump", "goto") and isinstance(v, dict):
        return f"{key} {v.get('target')}"
    if key == "vmap" and isinstance(v, dict):
        return f"{render_expr(v.get('key'))} vmap {render_expr(v.get('data'))}"
    if key == "mangle" and isinstance(v, dict):
        return f"{render_expr(v.get('key'))} set {render_expr(v.get('value'))}"
    if key in ("dnat", "snat") and isinstance(v, dict):
        fam = f" {v['family']}" if v.get("family") else ""
        to = render_expr(v.get("addr")) if "addr" in v else ""
        if "port" in v:
            to = f"{to}:{render_expr(v.get('port'))}"
        return f"{key}{fam} to {to}".rstrip()
    if key in ("masquerade", "redirect"):
        flags = v.get("flags") if isinstance(v, dict) else None
        port = f" to :{render_expr(v['port'])}" if isinstance(v, dict) and "port" in v else ""
        return key + port + (f" {','.join(flags) if isinstance(flags, list) else flags}" if flags else "")
    if key == "reject":
        if isinstance(v, dict) and v.get("type"):
            return f"reject with {v.get('type')} {render_expr(v.get('expr'))}".rstrip()
        return "reject"
    if key == "counter":
        return "counter"
    if key == "set" and isinstance(v, dict):
        return f"{v.get('op', 'add')} {v.get('set')} {{ {render_expr(v.get('elem'))} }}"
    if key == "xt" and isinstance(v, dict):
        return f"xt {v.get('type')} {v.get('name')}"
    if key == "unknown":
        return str(v)
    return json.dumps(s, separators=(",", ":"))


def _is_binop(e: Any) -> bool:
    return isinstance(e, dict) and len(e) == 1 and next(iter(e)) in ("&", "|", "^")


def render_expr(e: Any) -> str:
    """One JSON expression in nft's text syntax."""
    if isinstance(e, bool) or e is None:
        return json.dumps(e)
    if isinstance(e, str | int | float):
        return str(e)
    if isinstance(e, list):
        return "{ " + ", ".join(render_expr(x) for x in e) + " }"
    if not isinstance(e, dict) or len(e) != 1:
        return json.dumps(e, separators=(",", ":"))
    key, v = next(iter(e.items()))
    if key == "payload" and isinstance(v, dict):
        return f"{v.get('protocol')} {v.get('field')}"
    if key in ("meta", "ct") and isinstance(v, dict):
        return f"{key} {v.get('key')}"
    if key == "fib" and isinstance(v, dict):
        flags = v.get("flags")
        fl = " . ".join(flags) if isinstance(flags, list) else str(flags)
        return f"fib {fl} {v.get('result')}"
    if key == "numgen" and isinstance(v, dict):
        off = f" offset {v['offset']}" if v.get("offset") else ""
        return f"numgen {v.get('mode', 'random')} mod {v.get('mod')}{off}"
    if key == "concat" and isinstance(v, list):
        return " . ".join(render_expr(x) for x in v)
    if key == "prefix" and isinstance(v, dict):
        return f"{render_expr(v.get('addr'))}/{v.get('len')}"
    if key == "range" and isinstance(v, list) and len(v) == 2:
        return f"{render_expr(v[0])}-{render_expr(v[1])}"
    if key == "set" and isinstance(v, list):
        return "{ " + ", ".join(_element(x) for x in v) + " }"
    if key == "map" and isinstance(v, dict):
        return f"{render_expr(v.get('key'))} map {render_expr(v.get('data'))}"
    if key == "elem" and isinstance(v, dict):
        return render_expr(v.get("val"))
    if key in ("&", "|", "^", "<<", ">>") and isinstance(v, list) and len(v) == 2:
        right = v[1]
        r = f"0x{right:08x}" if isinstance(right, int) and key in ("&", "|", "^") else render_expr(right)
        return f"{render_expr(v[0])} {key} {r}"
    if key in ("goto", "jump") and isinstance(v, dict):
        return f"{key} {v.get('target')}"
    if key in ("accept", "drop", "return", "continue"):
        return str(key)
    return json.dumps(e, separators=(",", ":"))


def _element(x: Any) -> str:
    if isinstance(x, list) and len(x) == 2:
        return f"{render_expr(x[0])} : {render_expr(x[1])}"
    return render_expr(x)
