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

from kpdoctor import lazy_re
from kpdoctor.dataplane.addresses import IPAddress
from kpdoctor.dataplane.backend import Backend, Packet
from kpdoctor.dataplane.expected import (
    DEFAULT_POD_CLIENT,
    TRAFFIC_CLASSES,
    Behaviour,
    NodeView,
    cases,
    pod_client,
    service_ports,
)
from kpdoctor.dataplane.iptables.backend import IptablesBackend
from kpdoctor.dataplane.results import TraceBranch, service_matches
from kpdoctor.dataplane.selection import ServiceNotFound, resolve_service
from kpdoctor.parse.iptables import Ruleset
from kpdoctor.parse.k8s import K8sObject

STATE_NOTE = (
    "A new connection from a new client is traced: established connections follow their conntrack "
    "entry, and a client seen before by session affinity (`-m recent`, an nftables affinity set, or an IPVS "
    "persistent virtual server) returns to its earlier backend."
)
_TO = lazy_re.compile(r"^\[?(?P<ip>[0-9a-fA-F.:]+?)\]?:(?P<port>\d{1,5})(?:/(?P<proto>tcp|udp|sctp))?$", re.I)


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


# ``--traffic``: the traffic classes verify checks, by the short names its table prints (pod,
# node, nodeport, externalIP, LB, LB-denied) or the names of its JSON results.
TRAFFIC_NAMES: dict[str, str] = {
    **{short.lower(): name for name, (short, _) in TRAFFIC_CLASSES.items()},
    **{name: name for name in TRAFFIC_CLASSES},
    "clusterip": "pod-to-clusterip",
    "loadbalancer": "external-to-loadbalancer",
}


@dataclass(slots=True)
class ServiceTarget:
    """The packet verify sends for one Service port and traffic class, to trace it."""

    label: str  # NS/NAME:PORT, as kube-proxy names it
    traffic: str  # pod-to-clusterip | node-to-clusterip | external-to-nodeport | ...
    dst: IPAddress
    port: int
    proto: str
    src: IPAddress | None  # None: the trace's default for the hook (a pod, or the node itself)
    hook: str
    src_note: str = ""  # what ``src`` stands for, when it is given
    warnings: list[str] = field(default_factory=list)  # for stderr
    notes: list[str] = field(default_factory=list)  # for the trace


def short_traffic(traffic: str) -> str:
    return TRAFFIC_CLASSES[traffic][0].lower()


def service_target(
    services: list[K8sObject], wanted: str, node: NodeView, traffic: str | None = None, hook: str = "prerouting"
) -> ServiceTarget:
    """The packet of ``NS/NAME[:PORT]`` (port name or number, or a bare NAME: see
    :func:`~kpdoctor.dataplane.verify.resolve_service`) for one traffic class: by default Pods to
    the ClusterIP (the node itself with ``hook="output"``); ``traffic`` picks another class verify
    checks (outside clients to the NodePort, an external IP or the load-balancer IP), built as
    verify builds it, so a mismatch verify reports can be traced as such."""
    try:
        filt, notice = resolve_service(services, wanted)
    except ServiceNotFound as exc:
        raise TraceError(str(exc)) from None
    warnings = [notice] if notice else []
    sps, _ = service_ports(services, [], [])
    mine = [sp for sp in sps if service_matches(sp.label, filt)]
    if not mine:
        raise TraceError(f"{filt}: headless or ExternalName, kube-proxy writes no rules for it (nothing to trace)")
    if len({m.label for m in mine}) > 1:
        warnings.append(f"{wanted} has several ports; tracing {mine[0].label} (name one with NS/NAME:PORT)")
    sp = mine[0]
    if sp.problems:
        raise TraceError("; ".join(sp.problems) + ": nothing to trace")
    want = TRAFFIC_NAMES.get((traffic or "").lower()) if traffic else None
    if traffic and want is None:
        raise TraceError(f"--traffic {traffic}: expected one of {', '.join(sorted(TRAFFIC_NAMES))}")
    want = want or ("node-to-clusterip" if hook == "output" else "pod-to-clusterip")
    options = [c for c in cases([sp], node, Behaviour.of(None)) if c.sp is sp]
    case = next((c for c in options if c.traffic == want), None)
    if case is None:
        have = ", ".join(dict.fromkeys(short_traffic(c.traffic) for c in options))
        raise TraceError(f"{sp.label} has no {short_traffic(want)} traffic (--traffic {have})")
    if want == "external-to-nodeport" and sp.node_port_problem:
        raise TraceError(sp.node_port_problem + ": nothing to trace")
    if case.dst is None:
        if want == "external-to-nodeport":
            raise TraceError(
                f"the node's address is not known ({node.unknown_why or 'no Node object or ip addr output'}): "
                f"give it with --to NODE_IP:{case.dport}/{sp.protocol.lower()} --from {case.source or 'CLIENT_IP'}"
            )
        raise TraceError(f"{sp.label}: no address to send {short_traffic(want)} traffic to")
    others = [
        f"{short_traffic(c.traffic)} ({c.destination})" for c in options if c.traffic != want and c.dst is not None
    ]
    src, src_note = None, ""
    if want.startswith("external") and case.src is not None:  # pod and node: trace's own defaults
        src = case.src
        src_note = (
            f"{src}, a client inside loadBalancerSourceRanges (as verify sends it; give --from for another)"
            if want == "external-to-loadbalancer" and sp.source_ranges
            else f"{src}, a stand-in outside client (as verify sends it; give --from for another)"
        )
    proto = sp.protocol.lower()
    target = ServiceTarget(sp.label, want, case.dst, case.dport, proto, src, case.hook, src_note, warnings)
    target.notes.append(f"Traced: {TRAFFIC_CLASSES[want][1]} of {sp.label} ({case.destination}), as verify sends it.")
    if others:
        target.notes.append("Its other traffic: --traffic " + ", ".join(dict.fromkeys(others)) + ".")
    return target


def service_destination(services: list[K8sObject], wanted: str) -> tuple[IPAddress, int, str, str]:
    """ClusterIP, port and protocol of ``NS/NAME[:PORT]``, and a warning when the Service has
    several ports and the first was taken (kept for callers of the first version; the CLI uses
    :func:`service_target`)."""
    t = service_target(services, wanted, NodeView(None, {}))
    return t.dst, t.port, t.proto, "; ".join(t.warnings)


@dataclass(slots=True)
class Trace:
    packet: Packet
    hook: str
    source_note: str
    variant: str | None  # the iptables variant traced (when the rules are in both)
    artifact: str
    branches: list[TraceBranch]
    notes: list[str] = field(default_factory=list)
    service: str | None = None  # NS/NAME:PORT traced with --service
    traffic: str | None = None  # its traffic class

    def share(self, *verdicts: str) -> float:
        return sum(b.probability for b in self.branches if b.verdict in verdicts)

    def summary(self) -> str:
        """One line: what becomes of the connection, by share."""
        parts = []
        delivered = sum(b.probability for b in self.branches if b.verdict == "ACCEPT" and b.endpoint)
        through = sum(b.probability for b in self.branches if b.verdict == "ACCEPT" and not b.endpoint)
        for share, what in (
            (delivered, "DNAT to a backend"),
            (through, "not translated" if self.service else "passed untranslated"),
            (self.share("DROP", "REJECT"), "dropped or rejected"),
            (self.share("UNCERTAIN"), "uncertain"),
        ):
            if share > 1e-9:
                parts.append(f"{share:.1%} {what}")
        return ", ".join(parts) or "no outcome"

    def to_json(self) -> dict[str, Any]:
        p = self.packet
        return {
            "service": self.service,
            "traffic": self.traffic,
            "summary": self.summary(),
            "packet": {
                "src": str(p.src),
                "dst": str(p.dst),
                "protocol": p.proto,
                "dport": p.dport,
                "hook": self.hook,
                "source": self.source_note,
            },
            "artifact": self.artifact,
            "iptables_backend": self.variant,
            "outcomes": [b.to_json() for b in self.branches],
            "notes": self.notes,
        }


def exit_status(traces: list[Trace]) -> int:
    """``kpdoctor trace``'s exit code: 1 when some or all of the traced connections are dropped
    or rejected (with ``--service``, also when a branch reaches no backend: a ClusterIP nobody
    answers); else 3 when a branch could not be evaluated (uncertain); 0 when every branch is
    delivered."""
    branches = [(t, b) for t in traces for b in t.branches]
    if not branches:
        return 3
    if any(b.verdict in ("DROP", "REJECT") for _, b in branches):
        return 1
    if any(t.service and b.verdict == "ACCEPT" and not b.endpoint for t, b in branches):
        return 1
    if any(b.verdict == "UNCERTAIN" for _, b in branches):
        return 3
    return 0


def trace(
    rules: Backend | list[Ruleset],
    node: NodeView,
    dst: IPAddress,
    port: int,
    proto: str,
    src: IPAddress | None,
    hook: str,
) -> list[Trace]:
    """Trace one new connection; one Trace per independent set of live rules (iptables: per
    backend holding Service rules). ``rules``: the backend of the node's proxy mode, or its
    iptables rules (read by the iptables backend)."""
    backend = IptablesBackend(rules, node.local(), record=True) if isinstance(rules, list) else rules
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
    missing = backend.missing(fam)
    if missing:
        raise TraceError(missing)
    pkt = Packet(src, dst, proto, port)
    out = []
    views = backend.trace(pkt, hook)
    for v in views:
        t = Trace(pkt, hook, note, v.label, v.artifact, v.branches, [STATE_NOTE, *v.notes])
        if not node.addresses:
            t.notes.append("The node's addresses are not in the evidence: `--dst-type LOCAL` matches only loopback.")
        if len(views) > 1:
            t.notes.append("Service rules are in both iptables backends: the kernel runs both; each is traced.")
        out.append(t)
    return out


def trace_results(
    rules: Backend | list[Ruleset], services: list[K8sObject], node: NodeView, results: list[Any], limit: int
) -> dict[tuple[str, str], list[Trace]]:
    """The first ``limit`` of ``results`` (verify's Service port x traffic class results) traced
    step by step, as `kpdoctor trace --service LABEL --traffic TRAFFIC` traces them: for a report
    that draws a failing Service's path chain by chain. A result that cannot be traced (its
    Service changed shape, no node address) is left out."""
    out: dict[tuple[str, str], list[Trace]] = {}
    for r in results[:limit]:
        try:
            t = service_target(services, r.label, node, r.traffic)
            traces = trace(rules, node, t.dst, t.port, t.proto, t.src, t.hook)
        except TraceError:
            continue
        for tr in traces:
            tr.service, tr.traffic = t.label, t.traffic
        out[(r.label, r.traffic)] = traces
    return out
