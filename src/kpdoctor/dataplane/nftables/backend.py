"""The nftables backend: kube-proxy's nftables mode, evaluated through every base chain of the
node (kube-proxy's table, every other nftables table, and iptables rules of both backends).

kube-proxy's own table tells where each Service goes (``service-ips`` and ``service-nodeports``
map a destination to its chain); everything else on the hooks can still drop or translate the
packet first, so a verification walks them all (:mod:`.evaluate`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.dataplane.addresses import IPAddress, endpoint_text
from kpdoctor.dataplane.backend import Packet, TracedView, View
from kpdoctor.dataplane.expected import ANY_PORT, EXTERNAL_CLIENTS, Case, NodeView, Owned, pod_client
from kpdoctor.dataplane.iptables.backend import chain_owner, one_per_backend
from kpdoctor.dataplane.iptables.compile import compile_tables
from kpdoctor.dataplane.nftables.compile import NftTableRules, element_address, element_text
from kpdoctor.dataplane.nftables.evaluate import HOOKS, Evaluator, reachable_chains
from kpdoctor.dataplane.results import Entry, Result, StaleRule, TraceBranch, TraceStep, rule_cite
from kpdoctor.dataplane.walk import Outcome, Step, undecided_note
from kpdoctor.model import Cite
from kpdoctor.parse.iptables import Ruleset
from kpdoctor.parse.nft import KUBE_PROXY_TABLE, XT_TABLES

# kube-proxy's per-Service chains: prefix, hash, then ns/name/proto/portName
_SERVICE_CHAIN = lazy_re.compile(r"^(?:service|local|external|firewall)-[A-Z0-9]+-([^/]+)/([^/]+)/[^/]+/([^/]*)$")
# kube-proxy's chain for ClusterIP traffic no Service rule took: it rejects unknown ports of an
# active ClusterIP and drops addresses of the Service CIDR no Service has
NO_SERVICE_CHAIN = "cluster-ips-check"
# who writes a table, by its name (tables of iptables-nft are judged by their chains)
TABLE_OWNERS = (
    ("kube-proxy", "kube-proxy"),
    ("firewalld", "firewalld"),
    ("calico", "calico"),
    ("cilium", "cilium"),
    ("docker", "docker"),
    ("kube-router", "kube-router"),
    ("antrea", "antrea"),
)


def service_of_chain(chain: str) -> str | None:
    """``ns/name:port`` of a kube-proxy per-Service chain (``service-ULMVA6XW-ns1/svc1/tcp/p80``)."""
    m = _SERVICE_CHAIN.match(chain)
    if m is None:
        return None
    return f"{m.group(1)}/{m.group(2)}" + (f":{m.group(3)}" if m.group(3) else "")


def step_owner(step: Step) -> str | None:
    """Who wrote the rule a step took: by the nftables table's name, or by the iptables chain."""
    family, _, name = step.table.partition(" ")
    if not name:  # an iptables table (legacy or nft backend)
        return chain_owner(step.chain)
    if name in XT_TABLES and family in ("ip", "ip6"):
        return chain_owner(step.chain)
    return next((who for key, who in TABLE_OWNERS if key in name), None)


@dataclass(slots=True)
class _Family:
    family: int
    evaluator: Evaluator | None
    missing: str | None
    xt: list[Ruleset]


class NftablesBackend:
    """kube-proxy's nftables mode: the node's nftables listings (``nft -j list ruleset``, or the
    text form) and its iptables-save output, per address family."""

    mode = "nftables"

    def __init__(
        self,
        tables: list[NftTableRules],
        rulesets: list[Ruleset],
        local: Iterable[IPAddress],
        record: bool = False,
    ) -> None:
        self.tables = tables
        self.rulesets = rulesets
        self.local = list(local)
        self.record = record
        self._families: dict[int, _Family] = {}
        self._artifacts = {t.label: t.artifact for t in reversed(tables)}  # (the first listing wins)
        self._decided: dict[tuple[str, str, int | None, str], tuple[Cite | None, str | None]] = {}

    def family(self, family: int) -> _Family:
        fam = self._families.get(family)
        if fam is None:
            fam = self._families[family] = self._build(family, self.record)
        return fam

    def _build(self, family: int, record: bool) -> _Family:
        mine = [t for t in self.tables if family in t.families()]
        if not mine and self.tables:
            fam_name = "ip6" if family == 6 else "ip"
            why = f"the nftables listing holds no IPv{family} table (no table {fam_name} kube-proxy)"
            return _Family(family, None, why, [])
        xt = one_per_backend(rs for rs in self.rulesets if rs.family == family and rs.form in ("save", "S"))
        if any(rs.variant != "legacy" for rs in xt):
            # iptables-nft's tables are read from iptables-nft-save, which shows what nft -j cannot
            mine = [t for t in mine if not t.iptables_nft]
        compiled = [(rs.variant or "save", compile_tables(rs.tables)) for rs in xt]
        return _Family(family, Evaluator(family, mine, compiled, self.local, record), None, xt)

    def missing(self, family: int) -> str | None:
        return self.family(family).missing

    def split(self) -> dict[int, list[str]]:
        return {}

    def evaluate(self, case: Case) -> list[View]:
        fam = self.family(case.sp.family)
        assert fam.evaluator is not None and case.src is not None and case.dst is not None
        ev = fam.evaluator
        outcomes = ev.run(Packet(case.src, case.dst, case.sp.protocol.lower(), case.dport), case.hook, False)
        entries, rules, reasons = self._entries(fam, outcomes)
        return [View(None, entries, rules, reasons, undecided_note(ev.undecided))]

    def _entries(self, fam: _Family, outcomes: list[Outcome]) -> tuple[list[Entry], list[Cite], list[str]]:
        entries: list[Entry] = []
        rules: dict[Cite, None] = {}
        reasons: list[str] = []
        for o in outcomes:
            if o.verdict == "ACCEPT":
                step = o.state.dnat_step if o.state.dnat is not None else None
            else:
                step = o.decided_by
                if o.verdict == "UNCERTAIN":
                    reasons.append(o.reason)
            if step is None:
                cite, chain, owner = None, None, None
            else:
                key = (step.table, step.chain, step.line, step.text)
                known = self._decided.get(key)
                if known is None:  # each rule once: a node's 50,000 DNAT rules are cited again and again
                    owner = None if step.line is None and step.text.startswith("policy ") else step_owner(step)
                    known = self._decided[key] = (self._cite(fam, step), owner)
                (cite, owner), chain = known, step.chain
            unowned = chain == NO_SERVICE_CHAIN and owner == "kube-proxy" and o.verdict in ("DROP", "REJECT")
            entries.append(Entry(o.endpoint, o.verdict, o.probability, cite, chain, None, owner, unowned))
            if cite is not None:
                rules[cite] = None
        return entries, list(rules), reasons

    def _cite(self, fam: _Family, step: Step | None) -> Cite | None:
        if step is None:
            return None
        artifact = self._artifact(fam, step)
        if step.line is None:  # JSON: the rule's text says its chain and where it is
            return Cite(artifact, None, f"{step.table}: {step.text}" if " " in step.table else step.text)
        return rule_cite(artifact, step.line, step.text)

    def _artifact(self, fam: _Family, step: Step) -> str:
        if " " in step.table:  # "ip kube-proxy": an nftables table
            return self._artifacts.get(step.table, "nftables listing")
        for rs in fam.xt:  # an iptables table: the dump whose rule is at that line
            tab = rs.tables.get(step.table)
            if tab is not None and any(r.line == step.line for r in tab.rules):
                return rs.artifact
        return fam.xt[0].artifact if fam.xt else "iptables-save"

    def explain_mismatch(self, case: Case, result: Result) -> list[str]:
        """Where kube-proxy's own table sends this traffic, when that explains the mismatch: a
        chain with no rules (kube-proxy flushes a chain it stops using, then deletes it a second
        later: a live map element pointing at it is a fault), a chain missing from the listing,
        or a random choice whose map does not cover every number it draws."""
        notes: list[str] = []
        target = self._kube_proxy_chain(case)
        if target is None:
            return notes
        tab, via, chain_name = target
        chain = tab.chains.get(chain_name)
        if chain is None:
            notes.append(f"{via} sends this traffic to chain {chain_name}, which is not in the listing")
            return notes
        if not chain.rules:
            notes.append(
                f"{via} sends this traffic to chain {chain_name}, which has no rules (kube-proxy empties a chain "
                "it no longer uses and deletes it about a second later; a live element pointing at it is a fault)"
            )
        for ch in reachable_chains(tab, chain):
            notes += [f"chain {ch.name}: {r.problem} ({r.text[:160]})" for r in ch.rules if r.problem]
        return notes

    def _kube_proxy_chain(self, case: Case) -> tuple[NftTableRules, str, str] | None:
        """kube-proxy's table of the case's family, the map element that matches the case's
        destination, and the chain it goes to."""
        if case.dst is None:
            return None
        fam_name = "ip6" if case.sp.family == 6 else "ip"
        tab = next((t for t in self.tables if t.family == fam_name and t.name == KUBE_PROXY_TABLE), None)
        if tab is None:
            return None
        proto = case.sp.protocol.lower()
        for name, key in (
            ("service-ips", (int(case.dst), proto, case.dport)),
            ("service-nodeports", (proto, case.dport)),
        ):
            s = tab.sets.get(name)
            if s is None:
                continue
            found, val = s.lookup(key)
            if found and isinstance(val, tuple) and len(val) == 2 and val[0] in ("goto", "jump"):
                return tab, f"map {name} ({s.where})", str(val[1])
        return None

    def stale(self, owned: Owned, node: NodeView) -> list[StaleRule]:
        """Elements of kube-proxy's ``service-ips`` and ``service-nodeports`` maps that no Service
        owns and that still forward somewhere."""
        out: list[StaleRule] = []
        for tab in self.tables:
            if tab.name != KUBE_PROXY_TABLE or tab.family not in ("ip", "ip6"):
                continue
            f = 6 if tab.family == "ip6" else 4
            fam = self.family(f)
            if fam.evaluator is None:
                continue
            node_ip = node.primary(f)
            ext = ipaddress.ip_address(EXTERNAL_CLIENTS[f][0])
            for name, nodeport in (("service-ips", False), ("service-nodeports", True)):
                s = tab.sets.get(name)
                if s is None:
                    continue
                for key, val in s.exact.items():
                    if not isinstance(key, tuple):
                        continue
                    if nodeport:
                        if len(key) != 2 or node_ip is None or (key[0], key[1]) in owned.ports:
                            continue
                        proto, port = key
                        if not isinstance(port, int):
                            continue
                        pkt = Packet(ext, node_ip, str(proto), int(port))
                        dest = endpoint_text(node_ip, port)
                    else:
                        if len(key) != 3 or not isinstance(key[0], int):
                            continue
                        ip, proto, port = key
                        if (ip, proto, port) in owned.ips or (ip, ANY_PORT, 0) in owned.ips:
                            continue
                        addr = element_address(ip, f)
                        if addr is None or not isinstance(port, int):
                            continue
                        pkt = Packet(pod_client(node, f), addr, str(proto), int(port))
                        dest = endpoint_text(addr, port)
                    target = str(val[1]) if isinstance(val, tuple) and len(val) == 2 else ""
                    label = service_of_chain(target)
                    if label and label.split(":")[0] in owned.unreadable:
                        continue
                    outcomes = fam.evaluator.run(pkt, "prerouting", postrouting=False)
                    backends = sorted({o.endpoint for o in outcomes if o.endpoint and o.verdict == "ACCEPT"})
                    if not backends:
                        continue
                    elem = element_text(key, f) + (f" : goto {target}" if target else "")
                    at = "" if s.line is not None else f" ({s.where})"
                    cites = [Cite(tab.artifact, s.line, f"map {name} element {elem}{at}")]
                    cites += [c for o in outcomes if (c := self._cite(fam, o.state.dnat_step)) is not None][:3]
                    out.append(StaleRule(f, dest, str(proto), label, backends, cites[:4], nodeport))
        return out

    def trace(self, packet: Packet, hook: str) -> list[TracedView]:
        fam = self.family(packet.dst.version)
        if fam.evaluator is None:
            return []
        ev = fam.evaluator if fam.evaluator.record else self._build(packet.dst.version, True).evaluator
        assert ev is not None
        outcomes = ev.run(packet, hook, postrouting=True)
        artifact = next((t.artifact for t in self.tables if packet.dst.version in t.families()), "nftables listing")
        branches = []
        for o in outcomes:
            steps = [
                TraceStep(self._artifact(fam, s), s.table, s.chain, s.line, s.text.strip(), s.probability)
                for s in o.state.steps
            ]
            branches.append(
                TraceBranch(
                    o.probability, o.verdict, o.endpoint, steps, o.reason, o.state.masquerade, list(o.state.affinity)
                )
            )
        return [TracedView(None, artifact, branches, undecided_note(ev.undecided))]

    def not_evaluated(self) -> list[str]:
        out = []
        for t in self.tables:
            for ch in t.chains.values():
                if ch.hook is not None and ch.hook not in (*HOOKS, "ingress"):
                    out.append(f"nftables chain {t.label} {ch.name} (hook {ch.hook}) is not evaluated")
        return out

