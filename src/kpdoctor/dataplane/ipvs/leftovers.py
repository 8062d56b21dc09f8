"""IPVS virtual servers left on a node that no longer runs kube-proxy in IPVS mode.

Switching from IPVS to iptables mode leaves kube-ipvs0 (every ClusterIP still a local address)
and the virtual servers: for a Service that still exists iptables DNATs first and they never see
a packet, but one whose Service is gone still forwards to its old real servers.
"""

from __future__ import annotations

from kpdoctor.dataplane.addresses import IPAddress, endpoint_text, host_address
from kpdoctor.dataplane.expected import ANY_PORT, NodeView, Owned
from kpdoctor.dataplane.results import StaleRule
from kpdoctor.model import Cite
from kpdoctor.parse.ipvsadm import VirtualServer

MAX_CITED_REALS = 3


def split_address(address: str) -> tuple[IPAddress, int] | None:
    """A virtual or real server's ``10.96.0.10:53`` / ``[fd00::a]:53`` as (address, port)."""
    host, sep, port = address.rpartition(":")
    addr = host_address(host.strip("[]")) if sep else None
    if addr is None or not port.isdigit():
        return None
    return addr, int(port)


def leftover_virtual_servers(
    servers: list[tuple[VirtualServer, str]], owned: Owned, node: NodeView, leftover_of: str | None = "ipvs"
) -> list[StaleRule]:
    """Virtual servers with real servers that no Service (or hostPort) owns: what a switch away
    from IPVS mode left (``leftover_of``), or, in IPVS mode itself (None), stale state."""
    local = {int(a) for addrs in node.addresses.values() for a in addrs}
    out: list[StaleRule] = []
    for vs, artifact in servers:
        hp = split_address(vs.address)
        if hp is None or not vs.reals or vs.protocol == "FWM":
            continue
        addr, port = hp
        proto = vs.protocol.lower()
        nodeport = int(addr) in local
        if (int(addr), proto, port) in owned.ips or (int(addr), ANY_PORT, 0) in owned.ips:
            continue
        if nodeport and (proto, port) in owned.ports:
            continue
        cites = [Cite(artifact, vs.line, vs.text)]
        cites += [Cite(artifact, r.line, r.text) for r in vs.reals[:MAX_CITED_REALS] if r.text]
        dest = endpoint_text(addr, port)
        out.append(
            StaleRule(
                addr.version, dest, proto, None, [r.address for r in vs.reals], cites, nodeport, leftover_of
            )
        )
    return out
