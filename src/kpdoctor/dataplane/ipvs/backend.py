"""The IPVS backend: kube-proxy's IPVS mode, a packet through the node's iptables rules (which
match IPVS mode's ipsets) and then into the virtual server for its destination.

In IPVS mode every ClusterIP, external IP and LoadBalancer IP is an address of the dummy
interface kube-ipvs0, so a Service's packet is for the node itself: it passes PREROUTING and the
filter table's INPUT (where ``KUBE-IPVS-FILTER`` rejects addresses on kube-ipvs0 that no Service
port uses) and IPVS takes it at LOCAL_IN. The virtual server for (protocol, address, port) picks a
real server: round robin and its weighted variants send new connections to real servers of weight
above 0, each its share of the weights. A real server at weight 0 takes no new connection: kube-
proxy leaves a removed TCP endpoint there until its connections end (draining, never stale). A
virtual server without a real server of weight above 0 has "no destination available": the
connection is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kpdoctor import memo
from kpdoctor.dataplane.addresses import IPAddress, endpoint_text
from kpdoctor.dataplane.backend import Packet, TracedView, View
from kpdoctor.dataplane.expected import Case, NodeView, Owned
from kpdoctor.dataplane.iptables.backend import FamilyRules, family_rules, outcome_entries, trace_branch
from kpdoctor.dataplane.ipvs.leftovers import leftover_virtual_servers, split_address
from kpdoctor.dataplane.results import Entry, Result, StaleRule, TraceBranch, TraceStep
from kpdoctor.dataplane.walk import Outcome, State, undecided_note
from kpdoctor.model import Cite
from kpdoctor.parse.ipset import IpSet
from kpdoctor.parse.iptables import Ruleset
from kpdoctor.parse.ipvsadm import RealServer, VirtualServer

IPVS_TABLE = "ipvs"  # how steps and entries name IPVS itself (not an iptables table)
# kube-proxy's filter chain that rejects new connections to an address on kube-ipvs0 that no
# Service port (in its ipsets) uses: a Service missing from the ipsets is refused there
NO_SERVICE_CHAIN = "KUBE-IPVS-FILTER"
# what an entry refused by a virtual server without a real server taking new connections names as
# its chain ("no destination available", the kernel logs)
EMPTY_VIRTUAL_SERVER = "IPVS virtual server without real servers"


@dataclass(slots=True)
class _Server:
    vs: VirtualServer
    artifact: str

    @property
    def cite(self) -> Cite:
        return Cite(self.artifact, self.vs.line, self.vs.text)


def _weight(r: RealServer) -> int:
    """A real server's share of new connections (a listing without weights: equal shares)."""
    return 1 if r.weight is None else r.weight


@memo.cached(maxsize=65536)
def _backend_text(address: str) -> str:
    """A real server's ``ip:port`` as kpdoctor names backends (IPv6 in brackets, compressed);
    cached: every traffic class of a Service reaches the same real servers."""
    if "[" not in address and address.count(":") == 1:
        return address  # ipvsadm -n prints IPv4 as kpdoctor names it: a.b.c.d:port
    hp = split_address(address)
    return endpoint_text(*hp) if hp is not None else address


class IpvsBackend:
    """kube-proxy's IPVS mode: ``ipvsadm -Ln`` virtual servers, the ipsets, and the iptables
    rules around them, per address family."""

    mode = "ipvs"

    def __init__(
        self,
        servers: list[tuple[VirtualServer, str]],
        rulesets: list[Ruleset],
        ipsets: dict[str, IpSet],
        local: Iterable[IPAddress],
        record: bool = False,
    ) -> None:
        self.rulesets = rulesets
        self.ipsets = ipsets
        self.local = list(local)
        self._own = {(a.version, int(a)) for a in self.local}
        self.record = record
        self.servers = servers
        self.index: dict[tuple[str, int, int, int], _Server] = {}
        for vs, artifact in servers:
            hp = split_address(vs.address)
            if hp is not None and vs.protocol != "FWM":
                self.index.setdefault((vs.protocol.lower(), hp[0].version, int(hp[0]), hp[1]), _Server(vs, artifact))
        self._families: dict[int, FamilyRules] = {}

    def family(self, family: int) -> FamilyRules:
        fr = self._families.get(family)
        if fr is None:
            fr = self._families[family] = family_rules(self.rulesets, family, self.local, self.record, self.ipsets)
        return fr

    def missing(self, family: int) -> str | None:
        if not any(k[1] == family for k in self.index):
            return f"no IPVS virtual server of IPv{family} in the ipvsadm output"
        return None

    def split(self) -> dict[int, list[str]]:
        return {}

    def server(self, proto: str, dst: IPAddress, port: int) -> _Server | None:
        return self.index.get((proto, dst.version, int(dst), port))

    def evaluate(self, case: Case) -> list[View]:
        assert case.src is not None and case.dst is not None
        packet = Packet(case.src, case.dst, case.sp.protocol.lower(), case.dport)
        fam = self.family(case.sp.family)
        entries, rules, reasons, notes, _, persistence = self._walk(fam, packet, case.hook, record=False)
        # persistence is kube-proxy's ClientIP affinity: -p <timeoutSeconds> on the virtual server
        affinity = next(iter(persistence)) if len(persistence) == 1 else None
        return [View(None, entries, rules, reasons, notes, affinity)]

    def _walk(
        self, fam: FamilyRules, packet: Packet, hook: str, record: bool
    ) -> tuple[list[Entry], list[Cite], list[str], list[str], list[TraceBranch], set[int]]:
        """The iptables walk, then IPVS for what reaches the node itself untranslated; with the
        persistence timeouts of the virtual servers reached (those whose listing shows it)."""
        notes: list[str] = []
        if fam.primary:
            rs, ev = fam.primary[0]
            if record and not ev.record:
                ev = ev.recording()
            outcomes = ev.run(packet, hook, postrouting=record)
            notes += undecided_note(ev.undecided)
        else:
            rs, ev = None, None
            outcomes = [Outcome(1.0, "ACCEPT", State.start(packet))]
            notes.append(fam.missing or "no iptables rules given: the packet is taken to reach IPVS")
        entries: list[Entry] = []
        rules: dict[Cite, None] = {}
        reasons: list[str] = []
        branches: list[TraceBranch] = []
        persistence: set[int] = set()
        for o in outcomes:
            st = o.state
            cur = st.current.dst
            # IPVS takes a packet at LOCAL_IN: only one for an address of the node (kube-ipvs0's)
            ipvs_sees = o.verdict == "ACCEPT" and st.dnat is None and (cur.version, int(cur)) in self._own
            srv = self.server(packet.proto, cur, st.dport) if ipvs_sees else None
            if srv is None:
                if rs is not None:
                    es, cs, rr = outcome_entries(rs, [o], None)
                    for e in es:  # IPVS mode's catch-all: kube-ipvs0 addresses no Service port uses
                        e.no_service_rule = e.chain == NO_SERVICE_CHAIN and e.verdict == "REJECT"
                    entries += es
                    rules.update(dict.fromkeys(cs))
                    reasons += rr
                    if record:
                        branches.append(trace_branch(rs, o))
                else:
                    entries.append(Entry(None, o.verdict, o.probability))
                    if record:
                        branches.append(TraceBranch(o.probability, o.verdict, None, [], o.reason))
                continue
            rules[srv.cite] = None
            if srv.vs.shown:
                persistence.add(srv.vs.persistent)
            live = srv.vs.live
            total = sum(_weight(r) for r in live)
            if not live or total <= 0:
                why = f"IPVS virtual server {srv.vs.address} has no real server taking new connections"
                refused = Entry(None, "REJECT", o.probability, srv.cite, EMPTY_VIRTUAL_SERVER, None, "kube-proxy")
                refused.no_real_servers = True
                entries.append(refused)
                if record:
                    branches.append(self._branch(rs, o, srv, None, o.probability, why))
                continue
            for r in live:
                share = o.probability * _weight(r) / total
                cite = Cite(srv.artifact, r.line, r.text) if r.text else srv.cite
                entries.append(Entry(_backend_text(r.address), "ACCEPT", share, cite, None, None, "kube-proxy"))
                rules[cite] = None
                if record:
                    branches.append(self._branch(rs, o, srv, r, share, ""))
        return entries, list(rules), reasons, notes, branches, persistence

    def _branch(
        self, rs: Ruleset | None, o: Outcome, srv: _Server, r: RealServer | None, p: float, why: str
    ) -> TraceBranch:
        base = trace_branch(rs, o) if rs is not None else TraceBranch(o.probability, o.verdict, None, [])
        steps = list(base.steps)
        steps.append(TraceStep(srv.artifact, IPVS_TABLE, "virtual server", srv.vs.line, srv.vs.text, o.probability))
        if r is None:
            return TraceBranch(p, "REJECT", None, steps, why, base.masquerade, base.affinity_lines)
        steps.append(TraceStep(srv.artifact, IPVS_TABLE, "real server", r.line, r.text, p))
        return TraceBranch(p, "ACCEPT", _backend_text(r.address), steps, "", base.masquerade, base.affinity_lines)

    def explain_mismatch(self, case: Case, result: Result) -> list[str]:
        """The virtual server behind the mismatch: missing, empty, or with real servers that take
        no new connection (weight 0: draining, or set by hand)."""
        if case.dst is None:
            return []
        srv = self.server(case.sp.protocol.lower(), case.dst, case.dport)
        if srv is None:
            return [f"no IPVS virtual server for {case.sp.protocol} {case.destination}"]
        notes = []
        if (case.dst.version, int(case.dst)) not in self._own:
            notes.append(
                f"{case.dst} is not an address of the node (not on kube-ipvs0): IPVS, which takes packets for "
                f"the node only, never sees this traffic, although virtual server {srv.vs.address} exists"
            )
        idle = [r for r in srv.vs.reals if not r.takes_new]
        if idle:
            notes.append(
                f"{len(idle)} real server(s) of {srv.vs.address} at weight 0 take no new connection "
                f"({', '.join(r.address for r in idle[:4])})"
            )
        if not srv.vs.reals:
            notes.insert(0, f"IPVS virtual server {srv.vs.address} has no real server (line {srv.vs.line})")
        return notes

    def stale(self, owned: Owned, node: NodeView) -> list[StaleRule]:
        return leftover_virtual_servers(self.servers, owned, node, leftover_of=None)

    def trace(self, packet: Packet, hook: str) -> list[TracedView]:
        fam = self.family(packet.dst.version)
        branches = self._walk(fam, packet, hook, record=True)[4]
        artifact = fam.primary[0][0].artifact if fam.primary else (self.servers[0][1] if self.servers else "ipvsadm")
        return [TracedView(None, artifact, branches)]

    def not_evaluated(self) -> list[str]:
        out = []
        fwm = [vs for vs, _ in self.servers if vs.protocol == "FWM"]
        if fwm:
            out.append(f"{len(fwm)} firewall-mark IPVS virtual server(s) are not evaluated")
        named = [vs for vs, _ in self.servers if vs.protocol != "FWM" and split_address(vs.address) is None]
        if named:
            out.append(
                f"{len(named)} IPVS virtual server(s) are listed by name, not address ({named[0].address}): "
                "`ipvsadm -L` without -n; give `ipvsadm -Ln`"
            )
        return out
