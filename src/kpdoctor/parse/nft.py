"""nftables rulesets (``nft list ruleset``, and its ``-j`` JSON form): the tables and their base
chains, each with its line.

Enough to tell which mode kube-proxy runs in (its own ``kube-proxy`` table in nftables mode),
what else filters packets on the node (firewalld, a CNI's table), and which tables are only
iptables-nft's. Evaluating the rules themselves is the nftables backend's work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kpdoctor.parse.structured import load_json

# The tables iptables-nft keeps its rules in (``iptables-nft-save`` shows them as iptables rules).
XT_TABLES = frozenset({"filter", "nat", "mangle", "raw", "security"})
KUBE_PROXY_TABLE = "kube-proxy"  # kube-proxy's nftables mode: "table ip kube-proxy", "table ip6 kube-proxy"

_TABLE = re.compile(r"^\s*table\s+(ip|ip6|inet|arp|bridge|netdev)\s+([\w.-]+)\s*\{", re.M)
_CHAIN = re.compile(r"^\s*chain\s+(\S+)\s*\{")
_HOOK = re.compile(r"^\s*type\s+(\w+)\s+hook\s+(\w+)(?:\s+device\s+\S+)?\s+priority\s+([^;]+);(?:\s*policy\s+(\w+);)?")
_RULE_HINT = re.compile(r"\b(jump|goto|dnat|snat|masquerade|accept|drop|reject|vmap|counter)\b")


@dataclass(slots=True)
class NftTable:
    family: str  # ip | ip6 | inet | arp | bridge | netdev
    name: str
    line: int  # where it starts (1 for JSON, which has no lines worth citing)
    text: str  # the line that opens it
    base_chains: list[str] = field(default_factory=list)  # "name: type hook policy P"
    chains: int = 0
    rules: int = 0

    @property
    def iptables_nft(self) -> bool:
        """One of the tables iptables-nft writes (its rules are read from iptables-nft-save)."""
        return self.family in ("ip", "ip6") and self.name in XT_TABLES

    @property
    def label(self) -> str:
        return f"{self.family} {self.name}"

    @property
    def described(self) -> str:
        """``inet firewalld (filter_INPUT: filter input policy accept)``"""
        return self.label + (f" ({'; '.join(self.base_chains)})" if self.base_chains else "")


def looks_like_nft_text(text: str) -> bool:
    """``nft list ruleset`` (or ``nft list table ...``) printed as text."""
    return bool(_TABLE.search(text[:65536])) and bool(re.search(r"^\s*(chain|set|map)\s+\S+\s*\{", text, re.M))


def parse_tables(text: str, first_line: int = 1) -> list[NftTable]:
    """The tables of an nftables listing, text or JSON; what cannot be read is left out."""
    if text.lstrip().startswith("{"):
        return _json_tables(text)
    out: list[NftTable] = []
    table: NftTable | None = None
    chain: str | None = None
    depth = 0
    for i, raw in enumerate(text.splitlines()):
        line = raw.split("#", 1)[0] if "#" in raw and "comment" not in raw else raw
        m = _TABLE.match(line)
        if m and depth == 0:
            table = NftTable(m.group(1), m.group(2), first_line + i, raw.strip())
            out.append(table)
        elif table is not None and depth == 1 and (c := _CHAIN.match(line)):
            chain = c.group(1)
            table.chains += 1
        elif table is not None and depth == 2 and chain and (h := _HOOK.match(line)):
            policy = h.group(4) or "accept"
            table.base_chains.append(f"{chain}: {h.group(1)} {h.group(2)} policy {policy}")
        elif table is not None and depth == 2 and chain and _RULE_HINT.search(line):
            table.rules += 1
        depth += line.count("{") - line.count("}")
        if depth <= 1:
            chain = None
        if depth <= 0:
            depth, table = 0, None
    return out


def _json_tables(text: str) -> list[NftTable]:
    try:
        doc = load_json(text)
    except ValueError:
        return []
    items = doc.get("nftables") if isinstance(doc, dict) else None
    tables: dict[tuple[str, str], NftTable] = {}
    for it in items if isinstance(items, list) else []:
        if not isinstance(it, dict):
            continue
        for what in ("table", "chain", "rule"):
            obj = it.get(what)
            if not isinstance(obj, dict):
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
