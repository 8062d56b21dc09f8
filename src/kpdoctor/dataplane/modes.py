"""kube-proxy's proxy modes as the verifier sees them: which has a backend, where each forwards
Services, and how each departs from the expected state every mode shares.

A mode without a backend here is *not evaluated* (``verification.evaluated: false``, with the
reason): its rules are never read as if they were another mode's, so a healthy IPVS or nftables
node is never told that its Service rules are missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kpdoctor.dataplane.addresses import IPAddress
from kpdoctor.dataplane.backend import Backend
from kpdoctor.dataplane.expected import SHARED, Deviations
from kpdoctor.dataplane.iptables.backend import IptablesBackend
from kpdoctor.dataplane.ipvs.backend import IpvsBackend
from kpdoctor.dataplane.nftables.backend import NftablesBackend
from kpdoctor.dataplane.nftables.compile import NftTableRules
from kpdoctor.parse.ipset import IpSet
from kpdoctor.parse.iptables import Ruleset
from kpdoctor.parse.ipvsadm import VirtualServer


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


def backend_for(
    mode: str,
    rulesets: list[Ruleset],
    local: Iterable[IPAddress],
    record: bool = False,
    nft: list[NftTableRules] | None = None,
    ipvs: list[tuple[VirtualServer, str]] | None = None,
    ipsets: dict[str, IpSet] | None = None,
) -> Backend | None:
    """The backend that evaluates ``mode``'s rules, or None when kpdoctor has none for it (or
    the evidence holds none of the state it reads: no nftables listing in nftables mode, no
    ``ipvsadm`` output in IPVS mode)."""
    if mode == "iptables":
        return IptablesBackend(rulesets, local, record=record)
    if mode == "nftables" and nft:
        return NftablesBackend(nft, rulesets, local, record=record)
    if mode == "ipvs" and ipvs:
        return IpvsBackend(ipvs, rulesets, ipsets or {}, local, record=record)
    return None


def not_evaluated_reason(mode: str, how: str) -> str:
    """Why a verification of a node in ``mode`` was not evaluated, for the report."""
    m = mode_named(mode)
    where = f"Services are forwarded by {m.forwards_with}, " if m else ""
    return f"kube-proxy runs in {mode} mode ({how}): {where}which kpdoctor does not evaluate yet"
