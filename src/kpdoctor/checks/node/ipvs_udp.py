"""KP321: IPVS keeps UDP clients on a real server that is draining or gone."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start, suspect
from kpdoctor.checks.node.stale_udp import dns_severity
from kpdoctor.checks.sync.ipvs import GT_DELETE_RS
from kpdoctor.dataplane.addresses import one_spelling as _ip
from kpdoctor.facts import Facts
from kpdoctor.knowledge import VersionRow, check, messages
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse import ipvs_conn
from kpdoctor.parse.ipvs_conn import endpoint_of
from kpdoctor.parse.ipvsadm import RealServer, VirtualServer
from kpdoctor.parse.logscan import Hit
from kpdoctor.versions import KubeVersion

CAUSE = "stale-udp-conntrack"
MAX_SHOWN = 3
# net/netfilter/ipvs/ip_vs_proto_udp.c: udp_timeouts[IP_VS_UDP_S_NORMAL] = 5*60*HZ; each packet of
# the flow sets it again
KERNEL_UDP_TIMEOUT = 300
# kube-proxy's IPVS graceful termination (pkg/proxy/ipvs/graceful_termination.go, k/k#66012): a
# removed endpoint's real server goes to weight 0 and a sweep every minute deletes it once it holds
# no connection; a UDP real server's connections are all "inactive" and each packet renews one, so
# with clients that keep their source port it never empties. k/k#77802 exempted UDP (shipped
# comparing a lower-case "udp" with the kernel's "UDP", so it did nothing); k/k#78999 made it work.
# First release with graceful termination per line (cherry-picked to 1.11 and 1.12):
GRACEFUL_FROM = {
    (1, 11): (1, 11, 5),
    (1, 12): (1, 12, 2),
    (1, 13): (1, 13, 0),
    (1, 14): (1, 14, 0),
    (1, 15): (1, 15, 0),
}
# First release that deletes UDP real servers at once (k/k#78999 and its cherry-picks #79103,
# #79102, #79101; 1.15 through #79044, present in 1.15.5, whether 1.15.0-1.15.4 had it is not
# known); 1.11 never got it; 1.16.0 onward all do.
UDP_FIXED = {(1, 12): (1, 12, 10), (1, 13): (1, 13, 8), (1, 14): (1, 14, 4), (1, 15): (1, 15, 5)}
_FIXED = [f"{a}.{b}.{c}" for a, b, c in (*UDP_FIXED.values(), (1, 16, 0))]
FIXED_TEXT = f"{', '.join(_FIXED[:-1])} or {_FIXED[-1]}"

# graceful_termination.go's sweep (every minute) keeping a drained real server that still holds
# connections, `Not deleting, RS <VIP>/<PROTO>/<RS>: ...` (1.14-1.18; 1.11.5-1.13 only repeat
# "Trying to delete rs"): for a UDP real server it is printed only by the releases that drain UDP
KEPT_IN_DRAIN = messages("ipvs-rs-kept-draining", "kube-proxy/ipvs-graceful-not-deleting-rs")
FIX_PR_WORKING = "https://github.com/kubernetes/kubernetes/pull/78999"


def _affected(v: KubeVersion | None) -> bool | None:
    """Does this kube-proxy keep UDP real servers at weight 0 while they hold connections?"""
    if v is None:
        return None
    first = GRACEFUL_FROM.get(v.line)
    if v.line >= (1, 16) or first is None or v.upstream < first:
        return False
    fixed = UDP_FIXED.get(v.line)
    if fixed is not None and v.upstream >= fixed:
        return False
    return None if v.line == (1, 15) else True


def _fixed_in(v: KubeVersion | None) -> list[str]:
    fixed = UDP_FIXED.get(v.line) if v is not None else None
    if fixed is not None:
        return [f"kube-proxy v{fixed[0]}.{fixed[1]}.{fixed[2]}"]
    return [f"kube-proxy v{x}" for x in (_FIXED[-1:] if v is not None else _FIXED)]


@dataclass(slots=True)
class _Held:
    """UDP connections IPVS holds to one real server that no longer should get them."""

    virtual: str  # ip:port
    destination: str  # ip:port
    why: str  # "at weight 0 (draining)", "no longer a real server of ...", "not an endpoint of ..."
    deleted: bool = False  # the real server is gone: IPVS drops the packets instead of sending them
    cites: list[Cite] = field(default_factory=list)
    renewed: int | None = None  # the newest connection's seconds since its last packet
    count: int = 0

    @property
    def port(self) -> int | None:
        p = self.virtual.rpartition(":")[2]
        return int(p) if p.isdigit() else None


Key = tuple[str, str]  # (address in one spelling, port)


class _Listed:
    """The UDP virtual servers of the ``ipvsadm -Ln`` listings given, by address and port, each
    with its real servers by theirs (a connection table's rows are looked up by both)."""

    def __init__(self, facts: Facts) -> None:
        self.by_vip: dict[Key, tuple[VirtualServer, str, dict[Key, RealServer]]] = {}
        for vs, art in facts.ipvs_listed:
            if vs.protocol == "UDP":
                reals = {endpoint_of(r.address).key: r for r in vs.reals}
                self.by_vip.setdefault(endpoint_of(vs.address).key, (vs, art, reals))

    def real(self, vip: Key, dest: Key) -> tuple[VirtualServer, str, RealServer | None] | None:
        got = self.by_vip.get(vip)
        return None if got is None else (got[0], got[1], got[2].get(dest))


def _endpoints_by_vip(facts: Facts) -> dict[Key, tuple[str, frozenset[str]]]:
    """Each UDP Service address and port (ClusterIPs, external and load-balancer addresses) -> the
    Service and its ready endpoints' addresses, from the Services and EndpointSlices given."""
    cluster = facts.cluster
    eps = cluster.endpoints_of()
    out: dict[Key, tuple[str, frozenset[str]]] = {}
    for svc in cluster.services:
        mine = eps.get(svc.key)
        if mine is None:
            continue  # its endpoints are not given: nothing to compare with
        ready = frozenset(_ip(a) for v in mine if v.ready for a in v.addresses)
        for p in svc.ports:
            if p.protocol.upper() != "UDP" or p.port is None:
                continue
            for ip in (*svc.cluster_ips, *svc.external_ips, *svc.lb_ingress_ips):
                out.setdefault((_ip(ip), str(p.port)), (svc.key, ready))
    return out


def _udp_timeout(facts: Facts) -> tuple[int, str]:
    t = facts.ipvs_timeouts
    if t is not None and t[0].udp > 0:
        return t[0].udp, "ipvsadm --timeout"
    return KERNEL_UDP_TIMEOUT, "the kernel's default"


def _from_connections(facts: Facts, listed: _Listed, timeout: int) -> dict[tuple[Key, Key], _Held]:
    """UDP rows of the connection table whose real server the listing shows at weight 0 or
    without, or that is not a ready endpoint of the Service of the virtual address, by (virtual
    server, real server)."""
    by_vip = _endpoints_by_vip(facts) if facts.cluster.services else {}
    held: dict[tuple[Key, Key], _Held] = {}
    for c, cite in facts.records(ipvs_conn.SHAPE):
        if c.protocol != "UDP" or c.template or not (c.virtual.numeric and c.destination.numeric):
            continue
        vip, dest = c.virtual.key, c.destination.key
        why, listing, deleted = None, None, False
        real = listed.real(vip, dest)
        if real is not None:
            vs, art, rs = real
            if rs is None:
                why = f"no longer a real server of {vs.address} in the ipvsadm listing"
                listing, deleted = Cite(art, vs.line, vs.text), True
            elif rs.weight == 0:
                why = "at weight 0 in the ipvsadm listing (draining: kube-proxy removed its endpoint)"
                listing = Cite(art, rs.line, rs.text or rs.address)
        if why is None and vip in by_vip:
            svc, ready = by_vip[vip]
            if dest[0] not in ready:
                why = f"not a ready endpoint of {svc} in the EndpointSlices given"
        if why is None:
            continue
        h = held.get((vip, dest))
        if h is None:
            h = held[vip, dest] = _Held(str(c.virtual), str(c.destination), why, deleted)
            if listing is not None:
                h.cites.append(listing)  # what the listing shows of it, then the connections held to it
        h.count += 1
        age = max(timeout - c.expires, 0)
        h.renewed = age if h.renewed is None else min(h.renewed, age)
        if len(h.cites) < MAX_SHOWN + 1:
            h.cites.append(cite)
    return held


def _from_listing(listed: _Listed, shown: set[tuple[Key, Key]]) -> list[_Held]:
    """Real servers of UDP virtual servers at weight 0 that still hold connections (those the
    connection table already showed aside)."""
    out = []
    for vip, (vs, art, reals) in listed.by_vip.items():
        for dest, rs in reals.items():
            held = (rs.active or 0) + (rs.inactive or 0)
            if rs.weight == 0 and held > 0 and (vip, dest) not in shown:
                h = _Held(vs.address, rs.address, "at weight 0 (draining: kube-proxy removed its endpoint)")
                h.count = held
                h.cites = [Cite(art, vs.line, vs.text), Cite(art, rs.line, rs.text or rs.address)]
                out.append(h)
    return out


def _severity(held: list[_Held]) -> Severity:
    return max(dns_severity(h.port) for h in held)


@check(
    "KP321",
    cause=CAUSE,
    title="IPVS keeps UDP clients on a real server that is draining or gone",
    severity=Severity.WARNING,
    needs=[Kind.IPVSADM, Kind.IPVS_CONNECTIONS, Kind.KUBE_PROXY_LOG],
    versions=(
        VersionRow(
            "kube-proxy",
            "1.11.5+, 1.12.2-1.12.9, 1.13.0-1.13.7, 1.14.0-1.14.3 (and 1.15.0-1.15.4, not confirmed) in IPVS "
            "mode: graceful termination keeps UDP real servers at weight 0 until they hold no connection",
            "1.12.10, 1.13.8, 1.14.4, 1.15.5, 1.16.0 (UDP real servers deleted at once)",
            FIX_PR_WORKING,
        ),
    ),
)
def ipvs_udp_held(facts: Facts) -> Iterator[Finding]:
    """UDP clients of an IPVS Service keep reaching a removed Pod, for as long as they keep sending.

    Symptom: in IPVS mode, after a UDP Service's Pods were replaced (a CoreDNS rollout, a
        syslog or statsd receiver restarted), some clients' queries or datagrams go unanswered
        for minutes or for good, while other clients and new source ports work.
    Cause: IPVS sends every packet of a client ip:port to the real server its connection entry
        names, and each packet renews a UDP entry (300 s by default). kube-proxy 1.11.5-1.14
        drained a removed endpoint's real server at weight 0 and deleted it only once it held no
        connection; UDP entries never close, so a client that keeps its source port (DNS
        forwarders, syslog, statsd, the conntrack entry's own port) keeps its entry, the real
        server is never deleted and the client keeps sending to a Pod that is gone. From
        1.12.10, 1.13.8, 1.14.4 and 1.16 (1.15.5 at the latest) kube-proxy deletes UDP real
        servers at once (with net.ipv4.vs.expire_nodest_conn=1 the next packet of such an entry
        is dropped and the entry expired).
    How it is detected: `ipvsadm -Lnc` (or /proc/net/ip_vs_conn) rows of UDP connections whose
        real server the `ipvsadm -Ln` listing shows at weight 0 or no longer lists, or that is
        not a ready endpoint of the Service in the EndpointSlices given; the rows' expiry tells
        how recently the client sent. Without the connection table, a UDP virtual server's real
        server at weight 0 that still holds connections, or kube-proxy's sweep logging `Not
        deleting, RS <VIP>/UDP/<Pod>: 0 ActiveConn, N InactiveConn` (printed only by releases
        that drain UDP) or trying one UDP real server again a minute later (`Trying to delete
        rs: <VIP>/UDP/<Pod>`, 1.11.6-1.13): proven with an affected kube-proxy or the log lines,
        suspected when kube-proxy's version is not given, nothing for a fixed release.
    Fix: upgrade kube-proxy to 1.12.10, 1.13.8, 1.14.4, 1.15.5, 1.16 or later. Until then delete
        the stuck real server by hand (`ipvsadm -d -u <VIP>:<port> -r <Pod IP>:<port>`): with
        expire_nodest_conn=1 the kernel drops the entries' next packets and the clients are
        scheduled again.
    References: https://github.com/kubernetes/kubernetes/pull/78999;
        https://github.com/kubernetes/kubernetes/pull/77802;
        https://github.com/kubernetes/kubernetes/issues/71514;
        https://www.kernel.org/doc/html/latest/networking/ipvs-sysctl.html
    """
    listed = _Listed(facts)
    timeout, timeout_how = _udp_timeout(facts)
    in_table = _from_connections(facts, listed, timeout)
    from_table = sorted(in_table.values(), key=lambda h: (h.renewed if h.renewed is not None else timeout, -h.count))
    from_listing = _from_listing(listed, set(in_table))
    logged = [h for h in facts.log.hits(*KEPT_IN_DRAIN.ids) if h.groups and "/UDP/" in (h.groups[0] or "")]
    logged = logged or _swept_again(facts)
    kpv = facts.kube_proxy_version
    affected = _affected(kpv.value if kpv else None)
    if from_table:
        f, h = _table_finding(facts, from_table, timeout, timeout_how), from_table[0]
    elif logged:
        f, h = _logged_finding(facts, logged)
    elif from_listing and affected is not False:
        f, h = _listing_finding(facts, from_listing, affected)
    else:
        return
    f.subject = {"service": h.virtual, "backend": h.destination}
    if kpv is not None:
        f.versions_found["kube-proxy"] = str(kpv.value)
        if affected:
            f.evidence.append(kpv.cite)
    f.fixed_in = _fixed_in(kpv.value if kpv else None)
    upgrade = (
        f"Upgrade kube-proxy ({kpv.value}) to {f.fixed_in[0].removeprefix('kube-proxy ')} or later"
        if kpv is not None and affected is not False
        else f"Run kube-proxy {FIXED_TEXT} or later"
    )
    f.fix = [
        f"Delete the real server the clients are held to: `ipvsadm -d -u {h.virtual} -r {h.destination}` (with "
        "net.ipv4.vs.expire_nodest_conn=1, which kube-proxy sets, their next packets are dropped and they are "
        "scheduled again).",
        upgrade + ": it deletes a UDP real server at once instead of draining it (k/k#78999).",
    ]
    yield f


def _table_finding(facts: Facts, held: list[_Held], timeout: int, timeout_how: str) -> Finding:
    h = held[0]
    recent = h.renewed is not None and h.renewed < timeout
    f = start(facts, "KP321", [], confidence=Confidence.HIGH, severity=_severity(held))
    more = f" (and {len(held) - 1} more real server(s))" if len(held) > 1 else ""
    if h.deleted:
        # ip_vs_in(): a connection whose real server is gone has its packets dropped; its timer is not
        # restarted, and with net.ipv4.vs.expire_nodest_conn=1 the entry is expired at the packet
        what = (
            "IPVS drops those clients' packets (their entries name a real server that is gone) until each entry "
            "expires, or at once and for one packet with net.ipv4.vs.expire_nodest_conn=1"
        )
    else:
        what = "every packet of those clients' source ports goes there" + (
            f"; the newest was renewed {h.renewed} s ago (UDP timeout {timeout} s, {timeout_how}): its client is "
            "still sending"
            if recent
            else ""
        )
    f.summary = f"IPVS holds {h.count} UDP connection(s) of {h.virtual} to {h.destination}, {h.why}{more}: {what}."
    f.evidence = [c for x in held[:MAX_SHOWN] for c in x.cites]
    return f


def _swept_again(facts: Facts) -> list[Hit]:
    """The sweep's `Trying to delete rs: <VIP>/UDP/<RS>` for one UDP real server in two sweeps or
    more (a minute apart): it was not deleted at the first, so it held connections (1.11.6-1.13
    print no other line for it)."""
    by_rs: dict[str, list[Hit]] = {}
    for h in facts.log.hits(GT_DELETE_RS.id):
        name = h.groups[0] if h.groups else None
        if name and "/UDP/" in name:
            by_rs.setdefault(name, []).append(h)
    return max((hs for hs in by_rs.values() if len(hs) >= 2), key=len, default=[])


def _logged_finding(facts: Facts, hits: list[Hit]) -> tuple[Finding, _Held]:
    """kube-proxy's sweep keeping a UDP real server: it tries again once a minute while the real
    server holds connections."""
    last = hits[-1]
    virtual, _, destination = (last.groups[0] or "").partition("/UDP/")
    h = _Held(virtual, destination, "kept at weight 0 by kube-proxy's graceful termination")
    f = start(facts, "KP321", hits, confidence=Confidence.HIGH, severity=_severity([h]))
    held = f"; {last.groups[2]} connection(s) at the last" if len(last.groups) >= 3 and last.groups[2] else ""
    f.summary = (
        f"kube-proxy keeps UDP real server {destination} of {virtual} draining at weight 0 (its sweep, once a "
        f"minute, found it still in use{held}): its clients keep renewing their UDP entries, so it is never "
        "deleted and they keep sending to the removed Pod."
    )
    return f, h


def _listing_finding(facts: Facts, held: list[_Held], affected: bool | None) -> tuple[Finding, _Held]:
    h = max(held, key=lambda x: x.count)
    f = start(facts, "KP321", [], confidence=Confidence.HIGH, severity=_severity(held))
    more = f" (and {len(held) - 1} more)" if len(held) > 1 else ""
    f.summary = (
        f"UDP real server {h.destination} of {h.virtual} is at weight 0 and still holds {h.count} connection(s)"
        f"{more}: kube-proxy drained it because its endpoint was removed, and its clients keep sending to it."
    )
    f.evidence = [c for x in held[:MAX_SHOWN] for c in x.cites]
    if affected is None:
        suspect(
            f,
            "a UDP real server at weight 0 that still holds connections; kube-proxy's version (the releases that "
            "drain UDP real servers never delete it while clients keep sending) was not given",
            ["kube-proxy --version", f"ipvsadm -Lnc | grep {h.virtual}"],
            Confidence.MEDIUM,
        )
    return f, h
