"""``kpdoctor trace``: one packet through the node's rules, table by table, chain by chain.

The same evaluator as verification, with every step kept: the rule's line in its file, the
probability of the branch at that point, and the final DNAT, drop or pass. Conntrack and the
``recent`` module's state are invisible to a static analysis: the trace is for a new connection
from a new client, and says so.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from kpdoctor.dataplane.evaluate import Outcome, Packet
from kpdoctor.dataplane.expected import DEFAULT_POD_CLIENT, IPAddress, NodeView, pod_client, service_ports
from kpdoctor.dataplane.verify import family_rules, service_matches
from kpdoctor.parse.iptables import Ruleset
from kpdoctor.parse.k8s import K8sObject

STATE_NOTE = (
    "A new connection from a new client is traced: established connections follow their conntrack "
    "entry, and a client seen before by `-m recent` (session affinity) returns to its earlier backend."
)
_TO = re.compile(r"^\[?(?P<ip>[0-9a-fA-F.:]+?)\]?:(?P<port>\d{1,5})(?:/(?P<proto>tcp|udp|sctp))?$", re.I)


class TraceError(ValueError):
    """A destination or option the trace cannot use (said to the user in one line)."""


def parse_destination(text: str) -> tuple[IPAddress, int, str]:
    """``IP:PORT[/tcp|udp|sctp]`` (IPv6 in brackets)."""
    m = _TO.match(text.strip())
    if not m:
        raise TraceError(f"--to {text!r}: expected IP:PORT[/tcp|udp|sctp], e.g. 10.96.0.10:53/udp")
    try:
        ip = ipaddress.ip_address(m.group("ip"))
    except ValueError:
        raise TraceError(f"--to {text!r}: {m.group('ip')} is not an IP address") from None
    port = int(m.group("port"))
    if not 0 < port < 65536:
        raise TraceError(f"--to {text!r}: port {port} out of range")
    return ip, port, (m.group("proto") or "tcp").lower()


def service_destination(services: list[K8sObject], wanted: str) -> tuple[IPAddress, int, str, str]:
    """ClusterIP, port and protocol of ``NS/NAME[:PORT]``, and a warning when the Service has
    several ports and the first was taken."""
    sps, _ = service_ports(services, [], [])
    mine = [sp for sp in sps if service_matches(sp.label, wanted) and sp.cluster_ip]
    if not mine:
        known = ", ".join(sorted({sp.label for sp in sps})[:10])
        raise TraceError(
            f"no Service port matches {wanted!r}"
            + (f" (known: {known})" if known else " (no Services in the evidence)")
        )
    sp = mine[0]
    warning = ""
    if len({m.label for m in mine}) > 1:
        warning = f"{wanted} has several ports; tracing {sp.label} (name one with NS/NAME:PORT)"
    return ipaddress.ip_address(sp.cluster_ip or ""), sp.port, sp.protocol.lower(), warning


@dataclass(slots=True)
class TraceStep:
    artifact: str
    table: str
    chain: str
    line: int | None
    rule: str
    probability: float

    def to_json(self) -> dict[str, Any]:
        return {
            "artifact": self.artifact,
            "table": self.table,
            "chain": self.chain,
            "line": self.line,
            "rule": self.rule,
            "probability": round(self.probability, 6),
        }


@dataclass(slots=True)
class TraceBranch:
    probability: float
    verdict: str
    backend: str | None
    steps: list[TraceStep]
    reason: str = ""
    masquerade: bool = False
    affinity_lines: list[int] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        if self.verdict == "UNCERTAIN":
            return f"uncertain: {self.reason}"
        if self.verdict == "ACCEPT":
            if self.backend:
                return f"DNAT to {self.backend}" + (" (masqueraded)" if self.masquerade else "")
            return "not translated: leaves for its original destination"
        return self.verdict

    def to_json(self) -> dict[str, Any]:
        return {
            "probability": round(self.probability, 6),
            "verdict": self.verdict,
            "backend": self.backend,
            "outcome": self.outcome,
            "masquerade": self.masquerade,
            "reason": self.reason or None,
            "affinity_rules": self.affinity_lines,
            "steps": [s.to_json() for s in self.steps],
        }


@dataclass(slots=True)
class Trace:
    packet: Packet
    hook: str
    source_note: str
    backend: str | None  # iptables backend traced (when the rules are in both)
    artifact: str
    branches: list[TraceBranch]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        p = self.packet
        return {
            "packet": {
                "src": str(p.src),
                "dst": str(p.dst),
                "protocol": p.proto,
                "dport": p.dport,
                "hook": self.hook,
                "source": self.source_note,
            },
            "artifact": self.artifact,
            "iptables_backend": self.backend,
            "outcomes": [b.to_json() for b in self.branches],
            "notes": self.notes,
        }


def _branch(rs: Ruleset, o: Outcome) -> TraceBranch:
    steps = [TraceStep(rs.artifact, s.table, s.chain, s.line, s.text.strip(), s.probability) for s in o.state.steps]
    return TraceBranch(o.probability, o.verdict, o.backend, steps, o.reason, o.state.masquerade, list(o.state.affinity))


def trace(
    rulesets: list[Ruleset],
    node: NodeView,
    dst: IPAddress,
    port: int,
    proto: str,
    src: IPAddress | None,
    hook: str,
) -> list[Trace]:
    """Trace one new connection; one Trace per iptables backend holding Service rules."""
    fam = dst.version
    if src is not None and src.version != fam:
        raise TraceError(f"--from {src} and --to {dst} are of different address families")
    if src is None:
        if hook == "output":
            src = node.primary(fam)
            note = "the node's own address (output)" if src is not None else ""
            if src is None:
                src = ipaddress.ip_address("192.0.2.1" if fam == 4 else "2001:db8::1")
                note = "a stand-in node address (the node's addresses are not in the evidence; give --from)"
        else:
            src = pod_client(node, fam)
            known = any(n.version == fam for n in node.pod_cidrs)
            note = (
                "an address in the pod network"
                if known
                else (f"{DEFAULT_POD_CLIENT[fam]}, a stand-in pod address (clusterCIDR unknown; give --from)")
            )
    else:
        note = "given with --from"
    local = [a for addrs in node.addresses.values() for a in addrs]
    fr = family_rules(rulesets, fam, local, record=True)
    if not fr.primary:
        raise TraceError(fr.missing or f"no IPv{fam} rules in the evidence")
    pkt = Packet(src, dst, proto, port)
    out = []
    for rs, ev in fr.primary:
        outcomes = ev.run(pkt, hook, postrouting=True)
        t = Trace(
            pkt,
            hook,
            note,
            rs.backend if len(fr.primary) > 1 else None,
            rs.artifact,
            [_branch(rs, o) for o in outcomes],
            [STATE_NOTE],
        )
        if not node.addresses:
            t.notes.append("The node's addresses are not in the evidence: `--dst-type LOCAL` matches only loopback.")
        if len(fr.primary) > 1:
            t.notes.append("Service rules are in both iptables backends: the kernel runs both; each is traced.")
        out.append(t)
    return out
