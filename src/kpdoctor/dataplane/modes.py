"""kube-proxy's proxy modes: which one really runs on the node, where each forwards Services, and
how each departs from the expected state every mode shares.

A mode without a backend (dataplane/session.py chooses them) is *not evaluated*
(``verification.evaluated: false``, with the reason): its rules are never read as if they were
another mode's, so a healthy IPVS or nftables node is never told that its Service rules are
missing.

Which mode runs, and what each mode has left on the node: configuration says what was asked for;
it is not what runs. kube-proxy before 1.26 fell back from IPVS to iptables when IPVS's
prerequisites were missing, a ConfigMap that is not mounted leaves the default, and a mode switch
leaves the old mode's rules behind. So the mode is told, in this order, by: kube-proxy's own log
("Using ipvs Proxier") or its metrics server's ``/proxyMode``; the state only one mode writes
(iptables Service chains jumped to from KUBE-SERVICES, IPVS's ipset matches, virtual servers and
kube-ipvs0, the ``kube-proxy`` nftables table); the configuration (flags, config file); and the
default (iptables) when kube-proxy's configuration is known or its iptables chains are there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kpdoctor.dataplane.expected import SHARED, Deviations
from kpdoctor.model import Cite
from kpdoctor.parse.iptables import Ruleset
from kpdoctor.parse.ipvsadm import VirtualServer
from kpdoctor.parse.links import Link
from kpdoctor.parse.nft import KUBE_PROXY_TABLE, NftTable

# kube-proxy's iptables mode dispatches each Service from KUBE-SERVICES (or KUBE-NODEPORTS) to
# one of these chains; IPVS mode writes KUBE-SERVICES too, but matches ipsets there instead.
_IPTABLES_SERVICE_CHAINS = ("KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-XLB-")
_DISPATCH = frozenset({"KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-EXTERNAL-SERVICES"})
# the chains whose rules tell the mode (a node's quarter of a million other rules are not read)
_TELLING = _DISPATCH | {"KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "KUBE-POSTROUTING", "KUBE-IPVS-FILTER", "KUBE-FORWARD"}
IPVS_INTERFACE = "kube-ipvs0"
KNOWN_MODES = ("iptables", "ipvs", "nftables", "userspace", "kernelspace")


@dataclass(frozen=True, slots=True)
class ModeState:
    """Evidence that one mode's Service state is on the node."""

    mode: str
    what: str  # "KUBE-SVC chains (node/iptables-save.txt)"
    cite: Cite | None


@dataclass(slots=True)
class RunningMode:
    """The proxy mode kube-proxy runs in, with its provenance: how that is known and what cites
    it, the mode configured, and the state every mode left on the node."""

    mode: str | None  # None: the evidence does not tell
    how: str  # how it was told, for the report ("kube-proxy's log says so", "the default")
    cite: Cite | None = None
    requested: str | None = None  # the configured mode, when one is configured
    present: dict[str, ModeState] = field(default_factory=dict)  # the modes whose state is on the node
    # what kube-proxy's log ("Using ipvs Proxier") or its configuration says, with the line: its
    # claim, which the node's state may contradict (a fallback, a ConfigMap not mounted); the
    # default when its configuration is known and names no mode; None when nothing says
    claimed: tuple[str, Cite | None] | None = None

    @property
    def leftovers(self) -> list[ModeState]:
        """The state of modes kube-proxy does not run in: what a mode switch left behind."""
        return [s for m, s in self.present.items() if m != self.mode]


def iptables_states(rulesets: Iterable[Ruleset]) -> list[ModeState]:
    """iptables mode's Service dispatch and IPVS mode's ipset matches, each with its first rule."""
    out: dict[str, ModeState] = {}
    for rs in rulesets:
        if rs.form not in ("save", "S", "fragment"):
            continue
        for r in rs.in_chains(_TELLING):
            if "iptables" not in out and r.chain in _DISPATCH and (r.target or "").startswith(_IPTABLES_SERVICE_CHAINS):
                out["iptables"] = ModeState(
                    "iptables",
                    f"kube-proxy's iptables Service chains ({rs.artifact})",
                    Cite(rs.artifact, r.line, r.text),
                )
            elif "ipvs" not in out and "--match-set KUBE-" in r.text:
                out["ipvs"] = ModeState(
                    "ipvs", f"IPVS mode's ipset rules in iptables ({rs.artifact})", Cite(rs.artifact, r.line, r.text)
                )
            if len(out) == 2:
                break
    return list(out.values())


def ipvs_state(servers: list[tuple[VirtualServer, str]], links: list[tuple[str, Link]]) -> ModeState | None:
    """IPVS virtual servers, or the dummy interface IPVS mode binds ClusterIPs to."""
    if servers:
        vs, artifact = servers[0]
        return ModeState(
            "ipvs", f"{len(servers)} IPVS virtual server(s) ({artifact})", Cite(artifact, vs.line, vs.text)
        )
    for artifact, link in links:
        if link.name == IPVS_INTERFACE:
            return ModeState(
                "ipvs", f"the {IPVS_INTERFACE} interface ({artifact})", Cite(artifact, link.line, link.text)
            )
    return None


def nftables_state(tables: list[tuple[NftTable, str]]) -> ModeState | None:
    """kube-proxy's own nftables table, with chains in it."""
    for t, artifact in tables:
        if t.name == KUBE_PROXY_TABLE and (t.chains or t.rules or t.sets):
            return ModeState("nftables", f"the {t.label} nftables table ({artifact})", Cite(artifact, t.line, t.text))
    return None


def running_mode(
    logged: tuple[str, Cite | None] | None,
    configured: tuple[str, Cite | None] | None,
    states: Iterable[ModeState],
    default_known: bool,
    served: tuple[str, Cite | None] | None = None,
) -> RunningMode:
    """Decide the mode (see the module docstring). ``default_known``: kube-proxy's configuration
    or its iptables chains are in the evidence, so "nothing configured" means the default.
    ``served``: what kube-proxy's ``/proxyMode`` answered, its word as its log's is."""
    present: dict[str, ModeState] = {}
    for s in states:
        present.setdefault(s.mode, s)
    requested = configured[0].lower() if configured and configured[0] else None
    if logged is not None:
        return RunningMode(logged[0].lower(), "kube-proxy's log says so", logged[1], requested, present)
    if served is not None:
        return RunningMode(served[0], "kube-proxy says so (/proxyMode)", served[1], requested, present)
    if len(present) == 1:
        only = next(iter(present.values()))
        return RunningMode(only.mode, f"only its state is on the node: {only.what}", only.cite, requested, present)
    if len(present) > 1:
        if requested in present:
            return RunningMode(
                requested,
                "configured, and its state is on the node",
                configured[1] if configured else None,
                requested,
                present,
            )
        if set(present) == {"iptables", "ipvs"} and "iptables" in present and "match-set" not in present["ipvs"].what:
            # KUBE-SERVICES is rewritten whole by whichever mode synced last: it dispatches to
            # iptables Service chains, so IPVS's virtual servers are what the switch left
            it = present["iptables"]
            return RunningMode(
                "iptables", f"kube-proxy's iptables Service dispatch is live: {it.what}", it.cite, requested, present
            )
        names = "; ".join(f"{m}: {s.what}" for m, s in present.items())
        why = (
            f"the state of several modes is on the node ({names}) and neither kube-proxy's log nor its "
            "configuration says which runs"
        )
        return RunningMode(None, why, None, requested, present)
    if requested:
        return RunningMode(requested, "configured", configured[1] if configured else None, requested, present)
    if default_known:
        return RunningMode("iptables", "the default (no other mode is configured)", None, None, present)
    return RunningMode(None, "nothing in the evidence says which mode kube-proxy runs in", None, None, present)


@dataclass(frozen=True, slots=True)
class Mode:
    name: str
    forwards_with: str  # where kube-proxy forwards Services in this mode
    deviations: Deviations


MODES = {
    "iptables": Mode("iptables", "iptables nat chains (KUBE-SERVICES, KUBE-SVC-*, KUBE-SEP-*)", SHARED),
    "ipvs": Mode(
        "ipvs", "IPVS virtual servers, ipsets and the kube-ipvs0 interface", Deviations(clusterips_local=True)
    ),
    "nftables": Mode(
        "nftables", "its own nftables table (table ip kube-proxy)", Deviations(undeclared_ports_refused=True)
    ),
    "userspace": Mode("userspace", "a proxy process listening on the node (removed in 1.26)", SHARED),
    "kernelspace": Mode("kernelspace", "Windows HNS load balancers", SHARED),
}


def mode_named(name: str | None) -> Mode | None:
    return MODES.get((name or "").strip().lower())


def not_evaluated_reason(mode: str, how: str, verb: str = "evaluate") -> str:
    """Why the rules of a node in ``mode`` were not evaluated (``verb``: or traced), for the report."""
    m = mode_named(mode)
    where = f"Services are forwarded by {m.forwards_with}, " if m else ""
    return f"kube-proxy runs in {mode} mode ({how}): {where}which kpdoctor does not {verb} yet"
