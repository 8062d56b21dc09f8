"""KP305: Pod interfaces, tunnels and the host's uplink disagree about the MTU."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.checks.common import start
from kpdoctor.facts import Facts
from kpdoctor.facts.node import POD_PREFIXES, pod_facing
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.links import Link

# Encapsulation overhead on an IPv4 underlay (Calico's and Cilium's documented figures).
OVERHEAD = {"vxlan": 50, "geneve": 50, "ipip": 20, "wireguard": 60, "gre": 24, "gretap": 38}
TUNNEL_NAMES = {
    "flannel.": "vxlan",
    "flannel-v6.": "vxlan",
    "vxlan.calico": "vxlan",
    "vxlan-v6.calico": "vxlan",
    "tunl0": "ipip",
    "wireguard.cali": "wireguard",
    "wg-v6.cali": "wireguard",
    "cilium_vxlan": "vxlan",
    "cilium_geneve": "geneve",
    "cilium_wg0": "wireguard",
    "antrea-tun0": "geneve",
    "genev_sys_6081": "geneve",
    "weave": "vxlan",
}
HOST_VIRTUAL_PREFIXES = ("docker", "br-", "virbr", "kube-", "cni", "cbr", "nodelocaldns", "antrea-", "cilium_")
VIRTUAL_KINDS = {
    "veth",
    "bridge",
    "dummy",
    "vxlan",
    "ipip",
    "geneve",
    "wireguard",
    "gre",
    "gretap",
    "tun",
    "ipvlan",
    "macvlan",
    "bond",
    "vlan",
    "openvswitch",
    "sit",
    "ip6tnl",
    "nlmon",
    "ifb",
}


def _tunnel_kind(ln: Link) -> str | None:
    if ln.kind in OVERHEAD:
        return ln.kind
    for prefix, kind in TUNNEL_NAMES.items():
        if ln.name == prefix or (prefix.endswith(".") and ln.name.startswith(prefix)) or ln.name == prefix.rstrip("."):
            return kind
    return None


def _uplink(links: list[tuple[Artifact, Link]]) -> tuple[Artifact, Link] | None:
    """The host's physical interface: up, not loopback, not virtual; the largest MTU wins ties
    (bonds and VLANs carry the traffic too, but their MTU follows their members)."""
    cands = [
        (a, ln)
        for a, ln in links
        if ln.up
        and ln.name != "lo"
        and ln.mtu
        and ln.link_netnsid is None
        and (ln.kind or "") not in VIRTUAL_KINDS
        and _tunnel_kind(ln) is None
        and not ln.name.startswith(POD_PREFIXES + HOST_VIRTUAL_PREFIXES)
    ]
    return max(cands, key=lambda x: x[1].mtu or 0) if cands else None


@check(
    "KP305",
    cause="mtu-mismatch",
    title="Pod, tunnel and host interfaces disagree about the MTU",
    severity=Severity.WARNING,
    needs=[Kind.IP_LINK],
)
def mtu_mismatch(facts: Facts) -> Iterator[Finding]:
    """Packets larger than the path allows leave a Pod or a tunnel and are lost.

    Symptom: small requests work, large responses or uploads hang (TLS handshakes with big
        certificates, file transfers); ping works but `curl` stalls.
    Cause: the CNI gave Pod interfaces (or its tunnel device) an MTU larger than what the
        host's uplink can carry once the overlay header is added; the node does not fragment
        them as a router would, and PMTU discovery does not always recover (ICMP filtered, or
        DF cleared inside the tunnel).
    How it is detected: `ip -d link` / `ip -j -d link` (or `ifconfig`, which shows no link
        kinds: tunnels and Pod interfaces are then known by name): Pod-facing veths (peer in another
        network namespace, or cali*/veth*/lxc* names), tunnel devices (vxlan, ipip, geneve,
        wireguard by kind, or flannel.1, tunl0, vxlan.calico, wireguard.cali, cilium_vxlan...)
        and the uplink (the up, non-virtual interface). A tunnel whose MTU exceeds the uplink's
        minus its overhead (VXLAN/Geneve 50, IPIP 20, WireGuard 60, IPv4 underlay), or a Pod
        interface larger than the tunnel (overlay) or than the uplink (routed), is a warning.
    Fix: set the CNI's MTU to the uplink MTU minus the overlay overhead (e.g. 1450 for VXLAN
        on 1500, 1480 for IPIP, 1440 for WireGuard) and recreate the Pods so their interfaces
        pick it up.
    References: https://docs.tigera.io/calico/latest/networking/configuring/mtu;
        https://github.com/flannel-io/flannel/blob/master/Documentation/troubleshooting.md
    """
    links = facts.node_state.links
    up = _uplink(links)
    tunnels = [(a, ln, k) for a, ln in links if ln.mtu and (k := _tunnel_kind(ln)) is not None]
    pods = [(a, ln) for a, ln in links if ln.mtu and pod_facing(ln) and _tunnel_kind(ln) is None]
    problems: list[str] = []
    cites: list[Cite] = []
    fix_mtu: int | None = None
    if up is not None:
        ua, ul = up
        for a, t, kind in tunnels:
            limit = (ul.mtu or 0) - OVERHEAD[kind]
            if t.mtu and t.mtu > limit:
                problems.append(
                    f"tunnel {t.name} ({kind}) has MTU {t.mtu}, but {ul.name} ({ul.mtu}) carries at most {limit} "
                    f"after the {OVERHEAD[kind]}-byte {kind} header"
                )
                cites += [Cite(a.name, t.line, t.text), Cite(ua.name, ul.line, ul.text)]
                fix_mtu = limit
    path = min((t.mtu or 0 for _, t, _ in tunnels), default=None) if tunnels else (up[1].mtu if up else None)
    via = (
        f"tunnel {min(tunnels, key=lambda x: x[1].mtu or 0)[1].name}"
        if tunnels
        else (f"uplink {up[1].name}" if up else "")
    )
    if path:
        big = [(a, p) for a, p in pods if p.mtu and p.mtu > path]
        if big:
            names = ", ".join(f"{p.name} ({p.mtu})" for _, p in big[:5])
            problems.append(
                f"{len(big)} Pod interface(s) have an MTU above the {path} of the {via}: {names}"
                + (f" and {len(big) - 5} more" if len(big) > 5 else "")
            )
            cites += [Cite(a.name, p.line, p.text) for a, p in big[:2]]
            fix_mtu = fix_mtu or path
    if not problems:
        return
    f = start(
        facts,
        "KP305",
        [],
        confidence=Confidence.HIGH if up is not None else Confidence.MEDIUM,
        summary="MTU mismatch: " + "; ".join(problems) + ". Packets larger than the path are dropped.",
    )
    f.evidence = list(dict.fromkeys(cites))[:5]
    f.fix = [
        f"Set the CNI's MTU to {fix_mtu} (uplink MTU minus the overlay header) and recreate the Pods so their "
        "interfaces pick it up (Calico: FelixConfiguration/Installation mtu; Flannel: it derives it from the "
        "uplink; Cilium: --mtu)."
    ]
    yield f
