"""KP123: kube-proxy itself writes a wrong rule (a known bug of its release)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start, suspect
from kpdoctor.checks.sync.ipset_compat import ENSURE_SET_FAILED
from kpdoctor.dataplane.ipvs.leftovers import split_address
from kpdoctor.dataplane.service_info import read_service
from kpdoctor.facts import Facts
from kpdoctor.facts.log import cite_line, is_other_writer, matched
from kpdoctor.facts.nft_errors import NFT_RULE_ERROR, failing_part
from kpdoctor.knowledge import VersionRow, check, messages, signature
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse import nft
from kpdoctor.parse.iptables import Rule, Ruleset, every_packet
from kpdoctor.parse.logscan import Hit
from kpdoctor.versions import KubeVersion

# iptables refusing a rule's *content* (not the node: no missing chain, extension, table or lock):
# `Bad argument `KUBE-SVC-X'`, `invalid mask `128' specified`, `host/network `fd00::1' not found`,
# `Port `x' not valid`, `Invalid port:port syntax`. In kube-proxy's own restore this is a rule it
# generated wrong for some input (an address of the other family, an empty value).
RULE_REFUSED_MESSAGES = messages(
    "restore-rule-refused",
    "iptables/bad-argument",
    "iptables/invalid-mask",
    "iptables/invalid-port-service",
    failure=True,
)
RULE_REFUSED = (  # refusals the messages catalogue does not hold (their source was not read)
    signature("restore-rule-bad-host", "host/network", r"host/network .([^']{1,80}). not found", failure=True),
    signature("restore-rule-bad-port", "not valid", r"Port .([^']{1,40}). not valid", failure=True),
)
# nft aborting on the input it was given: `nft: netlink_linearize.c:804: netlink_gen_expr:
# Assertion `dreg < ctx->reg_low' failed.` (the function is captured).
NFT_ASSERTION = signature(
    "nft-assertion-failed", "Assertion", r"nft: [a-z_]+\.c:[0-9]+: ([a-z_]+): Assertion .* failed", failure=True
)


IIF_OPERAND = lazy_re.compile(r"\biif\s*(!=|==)?\s*$")  # `iif != ` before a wildcard: an index match on a prefix


@dataclass(frozen=True, slots=True)
class GenerationBug:
    """A release's wrong rule: what it wrote, which releases, where it was fixed."""

    name: str
    what: str
    releases: str
    fixed: tuple[str, ...]
    fix: str
    reference: str


IIF_PREFIX = GenerationBug(
    "nft-iif-interface-prefix",
    "with `detectLocalMode: InterfaceNamePrefix` the nftables proxier writes `iif != PREFIX*` (an interface "
    "index match) where `iifname` is needed, so nft rejects the whole transaction (`Interface does not exist`)",
    "nftables mode, before 1.33.6, 1.34.2 and 1.35.0",
    ("v1.33.6", "v1.34.2", "v1.35.0"),
    "Upgrade kube-proxy to 1.33.6, 1.34.2, 1.35.0 or later, or use another detectLocalMode until then.",
    "https://github.com/kubernetes/kubernetes/pull/134024",
)
SCTP_SET_TYPE = GenerationBug(
    "ipvs-sctp-set-type",
    "a 1.15 pre-release changed KUBE-NODE-PORT-SCTP and KUBE-NODE-PORT-LOCAL-SCTP from bitmap:port to "
    "hash:ip,port under the same names; the sets an older kube-proxy left keep their type, so creating them fails",
    "1.15 pre-releases (k/k#74341)",
    ("v1.15.0",),
    "Use kube-proxy 1.15.0 or later (its sets are named KUBE-NODE-PORT-SCTP-HASH), or destroy the old sets "
    "(`ipset destroy KUBE-NODE-PORT-SCTP`) after stopping kube-proxy.",
    "https://github.com/kubernetes/kubernetes/issues/77265",
)
IPV6_SINGLE_DNAT = GenerationBug(
    "nft-ipv6-single-endpoint-dnat",
    "the simplified single-endpoint DNAT rule (k/k#140723) makes nft abort compiling it for IPv6",
    "1.37 development builds",
    (),
    "Use a released kube-proxy, or a development build with the follow-up fix (k/k#140951).",
    "https://github.com/kubernetes/kubernetes/issues/140951",
)
REUSED_POD_IP = GenerationBug(
    "endpointslice-reused-pod-ip",
    "when a new Pod gets the IP of a Pod that is terminating but not yet deleted, the EndpointSlice holds that "
    "address twice and kube-proxy writes no rules for the ready endpoint",
    "before 1.36.0",
    ("v1.36.0",),
    "Upgrade kube-proxy to 1.36.0 or later; until then, deleting the terminating Pod for good restores the rules.",
    "https://github.com/kubernetes/kubernetes/pull/135593",
)
USERSPACE_REAPPENDED = GenerationBug(
    "userspace-jumps-reappended",
    "kube-proxy's userspace proxier checked for its jump rules with `iptables -C` (or, where iptables had no "
    "`-C`, by parsing iptables-save) and appended them again whenever the check failed, so every sync added "
    "another copy and the nat table grew without bound",
    "the userspace proxier of kube-proxy 1.0-1.1 (k/k#14870)",
    (),
    "Move to the iptables proxier (`--proxy-mode=iptables`, the default from 1.2) or a current kube-proxy, and "
    "flush the copies (`iptables -t nat -F PREROUTING` and `OUTPUT` hold them; restart kube-proxy after).",
    "https://github.com/kubernetes/kubernetes/issues/14870",
)
IPVS_HEALTH_CHECK_REJECTED = GenerationBug(
    "ipvs-filter-rejects-health-check-node-port",
    "the IPVS proxier's KUBE-IPVS-FILTER rejects new connections to every address of KUBE-IPVS-IPS (load-balancer "
    "IPs among them) on any port that is not a Service's (k/k#108460), the healthCheckNodePort included: a cloud "
    "load balancer that probes `<load-balancer IP>:<healthCheckNodePort>` (GCP does) finds every node unhealthy, "
    "and externalTrafficPolicy: Local Services lose their node selection",
    "IPVS mode, 1.26.0-1.26.4 and 1.27.0-1.27.1",
    ("v1.26.5", "v1.27.2", "v1.28.0"),
    "Upgrade kube-proxy to 1.26.5, 1.27.2, 1.28.0 or later (KUBE-IPVS-FILTER then returns for "
    "KUBE-HEALTH-CHECK-NODE-PORT before its REJECT).",
    "https://github.com/kubernetes/kubernetes/pull/117723",
)
IPVS_MIXED_FAMILY = GenerationBug(
    "ipvs-entry-of-the-other-family",
    "an IPv6 address written into an IPv4 IPVS entry (or the other way round) reaches the kernel as the first four "
    "bytes of the address (fd00::1 becomes 253.0.0.0): no host has such an address, and traffic to that "
    "entry is black-holed. kube-proxy's IPVS proxier did so for NodePorts of IPv6-only clusters (k/k#68437, fixed "
    "by k/k#71035) and for dual-stack nodePortAddresses (k/k#89923)",
    "IPVS mode in IPv6-only and dual-stack clusters (k/k#68437, k/k#89923)",
    (),
    "Upgrade kube-proxy to a release with the IPv6 fixes of the IPVS proxier (k/k#71035 and the fix of "
    "k/k#89923); meanwhile use the iptables (or nftables) mode on IPv6 clusters, or list only one family's "
    "addresses in nodePortAddresses.",
    "https://github.com/kubernetes/kubernetes/issues/68437",
)
IPVS_LB_FIREWALL_CATCHES_ALL = GenerationBug(
    "ipvs-load-balancers-all-through-firewall",
    "the IPVS proxier sends every load balancer through the source-range firewall: once one Service sets "
    "loadBalancerSourceRanges, the clients of every other LoadBalancer Service are dropped (k/k#62638; in 1.9 "
    "and 1.10 the jump is written before each restore and flushed by it, so the ranges go unenforced and load "
    "balancers drop intermittently)",
    "IPVS mode of 1.11.0-alpha.1 and alpha.2; transiently 1.9 and 1.10",
    ("v1.11.0",),
    "Upgrade kube-proxy to 1.11.0 or later (only the set KUBE-LOAD-BALANCER-FW, the load balancers with source "
    "ranges, then enters the firewall chain); meanwhile remove loadBalancerSourceRanges from the Services.",
    "https://github.com/kubernetes/kubernetes/pull/62712",
)
IPVS_FILTER_REJECTS_EXTERNAL_LOCAL = GenerationBug(
    "ipvs-filter-rejects-external-ips-local",
    "KUBE-IPVS-FILTER returns early for the KUBE-EXTERNAL-IP set but not for KUBE-EXTERNAL-IP-LOCAL, where the "
    "IPVS proxier puts the externalIPs of Services with externalTrafficPolicy: Local; those addresses are bound "
    "on kube-ipvs0 (in KUBE-IPVS-IPS), so the filter's REJECT refuses every new connection to them "
    "(icmp-port-unreachable: `Connection refused`)",
    "IPVS mode, 1.26.0 to 1.29 (the 1.28 and 1.29 branches got the fix in a patch release: k/k#121928, #122323)",
    ("v1.30.0",),
    "Upgrade kube-proxy (1.30.0, or the 1.28/1.29 patch release with k/k#121928 or #122323); meanwhile use "
    "externalTrafficPolicy: Cluster for Services with externalIPs.",
    "https://github.com/kubernetes/kubernetes/pull/121919",
)
NFT_LONG_COMMENT = GenerationBug(
    "nft-element-comment-over-128-bytes",
    "the nftables proxier comments each map element with the Service port's name (`namespace/name:port`) and nft "
    "refuses a comment longer than 128 bytes: one such Service makes nft reject the whole transaction, so no "
    "Service change reaches the node any more (k/k#139515)",
    "nftables mode, before 1.37.0",
    ("v1.37.0",),
    "Upgrade kube-proxy to 1.37.0 or later (it cuts the comments to 128 bytes), or shorten the Service's "
    "namespace, name or port name until the comment fits.",
    "https://github.com/kubernetes/kubernetes/pull/139516",
)
NFT_LOCAL_TRAFFIC_DROPPED = GenerationBug(
    "nft-no-endpoint-check-before-dnat",
    "the nftables proxier puts the external and load-balancer IPs of an externalTrafficPolicy: Local Service "
    "without an endpoint on this node in `no-endpoint-services` with `drop` (for outside clients, as designed), "
    "and checks that map on the output hook before its DNAT (filter-output at priority -110, -101 in 1.29): the "
    "node's own traffic and hostNetwork Pods' to those addresses is dropped instead of being sent to the "
    "Service's other endpoints, and Pods' too wherever kube-proxy cannot tell Pod traffic (k/k#131765)",
    "nftables mode, 1.29.0-1.33.5; no 1.32 or older release has the fix",
    ("v1.33.6", "v1.34.0"),
    "Upgrade kube-proxy to 1.33.6, 1.34.0 or later (the filter chains then run after DNAT, at priority 0); "
    "meanwhile reach such Services by their ClusterIP from the nodes, or use externalTrafficPolicy: Cluster.",
    "https://github.com/kubernetes/kubernetes/pull/132456",
)
BUGS = (
    IIF_PREFIX,
    SCTP_SET_TYPE,
    IPV6_SINGLE_DNAT,
    REUSED_POD_IP,
    USERSPACE_REAPPENDED,
    IPVS_HEALTH_CHECK_REJECTED,
    IPVS_MIXED_FAMILY,
    IPVS_LB_FIREWALL_CATCHES_ALL,
    IPVS_FILTER_REJECTS_EXTERNAL_LOCAL,
    NFT_LONG_COMMENT,
    NFT_LOCAL_TRAFFIC_DROPPED,
)
# Addresses no host has (240.0.0.0/4, "reserved for future use"): where an IPv6 address read as
# IPv4 lands for the usual prefixes (fc00::/7 -> 252-253.x, fe80::/10 -> 254.128.x)
_RESERVED_V4 = ipaddress.ip_network("240.0.0.0/4")
IPVS_FILTER = "KUBE-IPVS-FILTER"
UNLISTED = GenerationBug(
    "restore-rule-refused",
    "iptables rejects the whole restore for what one generated rule says, not for anything missing on the "
    "node: kube-proxy mishandles some input (an address of the other IP family, an empty value), a bug not in "
    "kpdoctor's table",
    "not in kpdoctor's table",
    (),
    "Find the Service or endpoint behind the refused line (the restore payload kube-proxy logs at high "
    "verbosity), check it against kube-proxy's upstream issues for this release, and upgrade; removing or "
    "fixing that object restores the other Services' rules meanwhile.",
    "",
)


_LOAD_BALANCER_SET = lazy_re.compile(r"match-set KUBE-LOAD-BALANCER\s")
# what decides whether KUBE-IPVS-FILTER's missing exception hurts, when no Service was given
DECIDES_EXTERNAL_LOCAL = (
    "it refuses the externalIPs of Services with externalTrafficPolicy: Local; whether one has any, "
    "`kubectl get services -A -o yaml` tells"
)
NFT_COMMENT_LIMIT = 128  # bytes nft keeps in a comment (its NFTNL_UDATA_COMMENT_MAXLEN)


def _ipvs_load_balancers_into_firewall(facts: Facts) -> list[Cite] | None:
    """KUBE-SERVICES sending the whole KUBE-LOAD-BALANCER set into KUBE-FIRE-WALL, and that chain
    marking for drop what it did not accept, unconditionally: the IPVS proxier of k/k#62638 (the
    fixed one sends only KUBE-LOAD-BALANCER-FW to KUBE-FIREWALL). The jump and the drop, cited."""
    for rs in facts.rulesets:
        # both rules name KUBE-FIRE-WALL on their line (as chain or target), unless a listing
        # names the chain in its header
        rules = [
            r
            for name, t in rs.tables.items()
            if name in ("nat", "unknown")
            for r in (t.rules if rs.form == "L" else t.containing("KUBE-FIRE-WALL"))
        ]
        jump = next(
            (
                r
                for r in rules
                # (from KUBE-SERVICES; any chain, or none a grep'd listing names: no other release
                # writes a jump to KUBE-FIRE-WALL)
                if _LOAD_BALANCER_SET.search(r.text) and r.target == "KUBE-FIRE-WALL"
            ),
            None,
        )
        drop = next(
            (
                r
                for r in rules
                if r.chain == "KUBE-FIRE-WALL" and r.target == "KUBE-MARK-DROP" and every_packet(r, rs.form)
            ),
            None,
        )
        if jump is not None and drop is not None:
            return [Cite(rs.artifact, r.line, r.text.strip()) for r in (jump, drop)]
    return None


def _ipvs_filter_rejects_external_local(facts: Facts) -> tuple[list[Cite], str, bool] | None:
    """KUBE-IPVS-FILTER as 1.26.5-1.29 write it: the health-check exception there (else the earlier
    bug is the one to name), the REJECT of KUBE-IPVS-IPS, no exception for KUBE-EXTERNAL-IP-LOCAL.
    It hurts Services with externalIPs and externalTrafficPolicy: Local: named when the objects or
    the set show one (True); with no Services in the evidence, a suspicion (False), with what
    would decide."""
    for rs, chain, reject in _ipvs_filters(facts):
        texts = [r.text for r in chain]
        if not any("KUBE-HEALTH-CHECK-NODE-PORT" in t for t in texts) or any(
            "KUBE-EXTERNAL-IP-LOCAL" in t for t in texts
        ):
            continue
        cites = [Cite(rs.artifact, reject.line, reject.text.strip())]
        used = [v for v in facts.cluster.services if v.external_ips and read_service(v.obj).etp_local]
        if used:
            v = used[0]
            cites.append(Cite(v.obj.artifact, v.obj.line, f"Service {v.key}: externalIPs {', '.join(v.external_ips)}"))
            return cites, f"Service {v.key} has externalIPs and externalTrafficPolicy: Local", True
        members = facts.ipsets.get("KUBE-EXTERNAL-IP-LOCAL")
        if members is not None and (members.members or members.spans):
            return (
                cites,
                "the set KUBE-EXTERNAL-IP-LOCAL holds externalIPs of Services with externalTrafficPolicy: Local",
                True,
            )
        if facts.cluster.services:
            continue  # the Services are there, and none has an external IP with the Local policy
        return cites, DECIDES_EXTERNAL_LOCAL, False
    return None


def _nft_long_comments(facts: Facts) -> tuple[list[Cite], str] | None:
    """In nftables mode, a Service port whose name (``namespace/name:port``, the comment of its
    map elements) is longer than nft keeps a comment."""
    mode = facts.running_mode
    claimed = mode.claimed[0] if mode.claimed is not None else None
    if (mode.mode or claimed) != "nftables":
        return None
    for v in facts.cluster.services:
        info = read_service(v.obj)
        for p in info.ports:
            comment = f"{v.key}:{p.name}" if p.name else v.key
            if len(comment.encode()) > NFT_COMMENT_LIMIT:
                cite = Cite(v.obj.artifact, v.obj.line, f"Service {v.key}, port {p.name or p.port}")
                size = len(comment.encode())
                return [cite], f"the map elements of Service port `{comment}` carry a comment of {size} bytes"
    return None


# the chains of the fix (k/k#132456): the firewall check before DNAT, every other check after it
_PRE_DNAT_CHAINS = frozenset({"filter-output-pre-dnat", "filter-prerouting-pre-dnat"})


def _nft_local_traffic_dropped(facts: Facts) -> tuple[list[Cite], str, bool] | None:
    """A `drop` element of kube-proxy's `no-endpoint-services` for an address that is not a
    ClusterIP (an ETP=Local external or load-balancer IP), and whether the listing shows the
    chains of a release before the fix (True: a whole kube-proxy table without the fix's
    pre-DNAT chains) or only the element (False: a part of the table, the release unknown)."""
    drops = [(e, a) for e, a in facts.nft_map_elements("no-endpoint-services") if e.value == "drop"]
    if drops:
        clusters = {ip for v in facts.cluster.services for ip in v.cluster_ips}
        drops = [(e, a) for e, a in drops if e.key and e.key[0] not in clusters]
    if not drops:
        return None
    tables = [t for t, _ in facts.nft_tables if t.name == nft.KUBE_PROXY_TABLE]
    if any(b.split(":", 1)[0] in _PRE_DNAT_CHAINS for t in tables for b in t.base_chains):
        return None  # the fixed release's chains
    whole = any(not t.partial and any(b.startswith("filter-output:") for b in t.base_chains) for t in tables)
    e, artifact = drops[0]
    where = " . ".join(e.key)
    svc = f" ({e.comment})" if e.comment else ""
    said = f"the nftables map no-endpoint-services drops {where}{svc}"
    if whole:
        said += ", checked on the output hook before DNAT (no filter-output-pre-dnat chain: a release before the fix)"
    return [Cite(artifact, e.line, e.text)], said, whole


def _ipvs_filters(facts: Facts) -> Iterator[tuple[Ruleset, list[Rule], Rule]]:
    """Each dump's KUBE-IPVS-FILTER that rejects new connections to KUBE-IPVS-IPS: (the dump,
    the chain's rules in order, the REJECT). What it lets through first tells the releases."""
    for rs in facts.rulesets:
        # a grep'd dump's rules without their *filter line: placed by their targets, some "unknown"
        tables = [t for name, t in rs.tables.items() if name in ("filter", "unknown")]
        chain = sorted((r for t in tables for r in t.rules if r.chain == IPVS_FILTER), key=lambda r: r.line)
        reject = next((r for r in chain if "KUBE-IPVS-IPS" in r.text and "REJECT" in r.text), None)
        if reject is not None:
            yield rs, chain, reject


def _ipvs_filter_without_health_check(facts: Facts) -> tuple[Cite, bool] | None:
    """KUBE-IPVS-FILTER's REJECT with no RETURN for KUBE-HEALTH-CHECK-NODE-PORT before it (the
    chain as 1.26.0-1.26.4 and 1.27.0-1.27.1 write it), and whether the chain is shown whole: a
    whole dump, or its rules from the first to the REJECT on consecutive lines (a grep of the
    chain's name keeps the health-check rule too)."""
    for rs, chain, reject in _ipvs_filters(facts):
        if any("KUBE-HEALTH-CHECK-NODE-PORT" in r.text for r in chain):
            continue
        lines = [r.line for r in chain]
        shown = rs.whole("filter") or (
            "KUBE-LOAD-BALANCER" in chain[0].text and lines == list(range(lines[0], lines[0] + len(lines)))
        )
        return Cite(rs.artifact, reject.line, reject.text.strip()), shown
    return None


def _mixed_family_entries(facts: Facts) -> tuple[Cite, str] | None:
    """An IPVS virtual or real server at an IPv4 address no host has (240.0.0.0/4): an IPv6
    address truncated to its first four bytes. Named with an IPv6 address of the listing that
    starts with those bytes (a real server's for a real server), when one is there."""
    v6: dict[tuple[bool, bytes], str] = {}  # (real server?, first four bytes) -> an address
    cut: tuple[Cite, str, bool] | None = None
    for vs, name in facts.ipvs_virtual_servers:
        entries = [(vs.address, vs.line, vs.text, False), *((r.address, r.line, r.text, True) for r in vs.reals)]
        for addr, line, text, real in entries:
            hp = split_address(addr)
            if hp is None:
                continue
            ip = hp[0]
            if ip.version == 6:
                v6.setdefault((real, ip.packed[:4]), str(ip))
            elif cut is None and ip in _RESERVED_V4:
                cut = (Cite(name, line, text.strip()), str(ip), real)
    if cut is None:
        return None
    cite, addr, real = cut
    packed = ipaddress.ip_address(addr).packed
    whole = v6.get((real, packed)) or v6.get((not real, packed))
    said = f"IPVS holds {addr}, an address no host has"
    if whole is None:
        return cite, f"{said} (240.0.0.0/4)"
    prefix = ipaddress.IPv6Network((int.from_bytes(packed, "big") << 96, 32))
    return cite, f"{said}: the first four bytes of an IPv6 address of {prefix}, such as {whole}"


def _reused_ips(facts: Facts) -> list[tuple[str, str, Cite]]:
    """(address, slice, citation) for an address held by a terminating and a ready endpoint."""
    out = []
    for sl in facts.cluster.slices:
        states: dict[str, set[str]] = {}
        for ep in sl.endpoints:
            state = "terminating" if ep.terminating else ("ready" if ep.ready else "other")
            for addr in ep.addresses:
                states.setdefault(addr, set()).add(state)
        for addr, st in states.items():
            if {"terminating", "ready"} <= st:
                name = "/".join(p for p in (sl.obj.namespace, sl.obj.name) if p) or "(its name is not in the paste)"
                out.append((addr, name, Cite(sl.obj.artifact, sl.obj.line, f"EndpointSlice {name}: {addr} twice")))
    return out


@check(
    "KP123",
    cause="kube-proxy-rule-generation-bug",
    title="kube-proxy writes a wrong rule (a bug of its release)",
    severity=Severity.CRITICAL,
    needs=[
        Kind.KUBE_PROXY_LOG,
        Kind.K8S_OBJECTS,
        Kind.IPTABLES_SAVE,
        Kind.IPTABLES_RULES_S,
        Kind.IPTABLES_LIST,
        Kind.IPVSADM,
        Kind.NFT_RULESET_TEXT,
        Kind.NFT_RULESET,
    ],
    explains=("ipset-incompatible", "nft-binary-known-bug", *RESTORE_SYMPTOMS),
    versions=tuple(VersionRow("kube-proxy", b.releases, ", ".join(b.fixed), b.reference) for b in BUGS),
)
def rule_generation_bug(facts: Facts) -> Iterator[Finding]:
    """kube-proxy's own release generates an invalid or wrong rule.

    Symptom: every sync fails on a rule kube-proxy wrote (`/dev/stdin:72:109-112: Error:
        Interface does not exist` under `iif != azv*`; nft aborting with `netlink_gen_expr:
        Assertion ... failed` for IPv6; `Failed to make sure ip set: &{{KUBE-NODE-PORT-LOCAL-SCTP
        hash:ip,port ...` after an upgrade), or a Service silently gets no rules (its
        EndpointSlice holds one address twice: a terminating Pod and the new Pod that reused
        its IP).
    Cause: bugs of kube-proxy releases (table BUGS): the nftables `iif`/`iifname` mix-up for
        interface-prefix local detection (fixed 1.33.6, 1.34.2, 1.35.0); the 1.15 pre-release
        SCTP set type change (k/k#77265); the IPv6 single-endpoint DNAT of 1.37 development
        builds (k/k#140951); a reused Pod IP (fixed 1.36.0, k/k#135593); the IPVS filter that
        rejects load balancers' health checks on the load-balancer IP (1.26.0-1.26.4,
        1.27.0-1.27.1, k/k#117723); IPVS entries of the other IP family in IPv6 and dual-stack
        clusters (k/k#68437, k/k#89923); the IPVS proxier sending every load balancer into
        KUBE-FIRE-WALL (1.11 alphas, k/k#62638); KUBE-IPVS-FILTER without the exception for
        KUBE-EXTERNAL-IP-LOCAL (1.26-1.29, k/k#121909); nftables element comments over 128 bytes
        (before 1.37.0, k/k#139515); the nftables proxier checking `no-endpoint-services` before
        DNAT on the output hook, which drops the node's own traffic to a Local Service's external
        addresses (1.29.0-1.33.5, k/k#131765).
    How it is detected: the failing input under nft's carets, the set kube-proxy cannot create
        with its type, nft's assertion in an IPv6 nftables sync, EndpointSlices holding an
        address for a terminating and a ready endpoint; copies of the userspace proxier's jump
        rules (KUBE-PORTALS-*, KUBE-NODEPORT-*) in one built-in chain; IPVS mode's
        KUBE-IPVS-FILTER rejecting KUBE-IPVS-IPS with no RETURN for KUBE-HEALTH-CHECK-NODE-PORT
        (the chain whole, or its rules on consecutive lines of a grep); an IPVS entry at an IPv4
        address no host has (240.0.0.0/4: an IPv6 address cut to its first four bytes, named
        when the listing holds it); KUBE-SERVICES jumping to KUBE-FIRE-WALL on the
        KUBE-LOAD-BALANCER set with an unconditional KUBE-MARK-DROP there; KUBE-IPVS-FILTER with
        its health-check exception but none for KUBE-EXTERNAL-IP-LOCAL, named with a Service that
        has externalIPs under the Local policy (or that set's members; with no Services given, a
        suspected cause); in nftables mode, a
        Service port whose `namespace/name:port` is longer than 128 bytes, and a `drop` element of
        `no-endpoint-services` for an address that is no Service's ClusterIP in a kube-proxy
        table without the fix's `filter-output-pre-dnat` chain (in a part of the table, where
        the chains are not shown, a suspected cause at warning); the kube-proxy version
        when given. A
        restore iptables refuses for a rule's content (`Bad argument`, `invalid mask '128'
        specified`, `host/network ... not found`) that no table row names is reported as an
        unlisted generation bug, at medium confidence.
    Fix: the release that fixed it (each row), or the row's workaround.
    References: https://github.com/kubernetes/kubernetes/pull/134024;
        https://github.com/kubernetes/kubernetes/issues/77265; https://github.com/kubernetes/kubernetes/issues/140951;
        https://github.com/kubernetes/kubernetes/issues/135266
    """
    found: list[tuple[GenerationBug, list[Hit], list[Cite], str]] = []
    iif = [
        (h, got)
        for h in facts.log.hits(NFT_RULE_ERROR.id)
        if (got := failing_part(facts, h)) is not None
        and got[0] == "Interface does not exist"
        and IIF_OPERAND.search(got[3])
        and got[1].endswith("*")
    ]
    if iif:
        found.append((IIF_PREFIX, [h for h, _ in iif], [], f"the refused rule: `{iif[0][1][2]}`"))
    sctp = [
        h
        for h in facts.log.hits(ENSURE_SET_FAILED.id)
        if h.groups
        and h.groups[0] in ("KUBE-NODE-PORT-SCTP", "KUBE-NODE-PORT-LOCAL-SCTP")
        and h.groups[1] != "bitmap:port"
    ]
    if sctp:
        found.append((SCTP_SET_TYPE, sctp, [], f"kube-proxy cannot create {sctp[0].groups[0]} as {sctp[0].groups[1]}"))
    asserts = [h for h in facts.log.hits(NFT_ASSERTION.id) if "IPv6" in h.record or 'ipFamily="IPv6"' in h.header]
    if asserts and (facts.running_mode.claimed is None or facts.running_mode.claimed[0] == "nftables"):
        found.append((IPV6_SINGLE_DNAT, asserts, [], "nft aborts on the IPv6 rules kube-proxy gives it"))
    reused = _reused_ips(facts)
    if reused:
        kpv = facts.kube_proxy_version
        if kpv is None or not kpv.value.at_least(KubeVersion(1, 36, 0)):
            addr, sl, c = reused[0]
            found.append((REUSED_POD_IP, [], [c], f"EndpointSlice {sl} holds {addr} for a terminating and a ready Pod"))
    reappended = [d for d in facts.duplicated_rules if d.userspace_jump]
    if reappended:
        d = reappended[0]
        cite = Cite(d.artifact, d.rule.line, d.rule.text.strip())
        found.append(
            (USERSPACE_REAPPENDED, [], [cite], f"{d.copies} copies of the jump to {d.rule.target} in {d.chain}")
        )
    mixed = _mixed_family_entries(facts)
    if mixed is not None:
        found.append((IPVS_MIXED_FAMILY, [], [mixed[0]], mixed[1]))
    filtered = _ipvs_filter_without_health_check(facts)
    if filtered is not None:
        cite, shown = filtered
        said = "KUBE-IPVS-FILTER rejects new connections to KUBE-IPVS-IPS with no exception for health checks"
        found.append((IPVS_HEALTH_CHECK_REJECTED, [], [cite], said if shown else said + " (among the rules shown)"))
    into_firewall = _ipvs_load_balancers_into_firewall(facts)
    if into_firewall is not None:
        found.append(
            (
                IPVS_LB_FIREWALL_CATCHES_ALL,
                [],
                into_firewall,
                "KUBE-SERVICES jumps to KUBE-FIRE-WALL for the whole KUBE-LOAD-BALANCER set, and KUBE-FIRE-WALL "
                "marks for drop what it did not accept",
            )
        )
    external = _ipvs_filter_rejects_external_local(facts)
    if external is not None and filtered is None:
        cites, why, _ = external
        said = "KUBE-IPVS-FILTER rejects new connections to KUBE-IPVS-IPS with no exception for KUBE-EXTERNAL-IP-LOCAL"
        found.append((IPVS_FILTER_REJECTS_EXTERNAL_LOCAL, [], cites, f"{said} ({why})"))
    long_comment = _nft_long_comments(facts)
    if long_comment is not None:
        found.append((NFT_LONG_COMMENT, [], *long_comment))
    local_dropped = _nft_local_traffic_dropped(facts)
    if local_dropped is not None:
        found.append((NFT_LOCAL_TRAFFIC_DROPPED, [], local_dropped[0], local_dropped[1]))
    refused = [
        h
        for h in facts.log.hits(*RULE_REFUSED_MESSAGES.ids, *(sig.id for sig in RULE_REFUSED))
        # kube-proxy's own restore (its message, or a line known to be its): another writer's
        # refused rule (a CNI's, the runtime's) is that writer's bug
        if not is_other_writer(h) and (h.writer == "kube-proxy" or "Failed to execute ip" in (h.record or h.text))
    ]
    if refused and not found:
        said = matched(refused[0])
        found.append((UNLISTED, refused, [], f"iptables refuses a rule kube-proxy wrote ({said})"))
    if not found:
        return
    bug, hits, cites, detail = found[0]
    kpv = facts.kube_proxy_version
    f = start(facts, "KP123", hits, confidence=Confidence.HIGH if hits else Confidence.MEDIUM)
    if bug in (USERSPACE_REAPPENDED, IPVS_HEALTH_CHECK_REJECTED):
        f.severity = Severity.WARNING  # the table grows / only load balancers' probes fail; traffic is forwarded
    if bug is UNLISTED:
        f.confidence = Confidence.MEDIUM
        f.confidence_reason = "the refusal names the rule's content, and no missing part of the node explains it"
    f.summary = (
        f"{detail}: {bug.what}."
        if bug is UNLISTED
        else f"{detail[0].upper() + detail[1:]}: a kube-proxy bug: {bug.what} ({bug.releases})."
    )
    f.evidence.extend(c for c in cites if c not in f.evidence)
    if hits:
        c = cite_line(hits[0])
        if c not in f.evidence:
            f.evidence.append(c)
    if kpv is not None:
        f.versions_found["kube-proxy"] = str(kpv.value)
        f.evidence.append(kpv.cite)
        fixed_here = [fx for x in bug.fixed if (fx := KubeVersion.parse(x)) is not None]
        newest = max((fx.line for fx in fixed_here), default=None)
        if any(fx.line == kpv.value.line and kpv.value.at_least(fx) for fx in fixed_here) or (
            newest is not None and kpv.value.line > newest
        ):
            f.confidence = Confidence.LOW
            f.summary += f" kube-proxy {kpv.value} already has the fix: look for another cause."
    elif not hits:
        f.confidence = Confidence.LOW
        f.summary += " kube-proxy's version is not in the evidence (send `kube-proxy --version`)."
    if bug is IPVS_FILTER_REJECTS_EXTERNAL_LOCAL and external is not None and not external[2]:
        # the rules are the release's, but whether a Service is hurt is not shown
        f.severity = Severity.WARNING
        suspect(
            f, "the filter lacks the exception; no Service is shown to need it", ["kubectl get services -A -o yaml"]
        )
    if bug is NFT_LOCAL_TRAFFIC_DROPPED and local_dropped is not None and local_dropped[2] and kpv is None:
        f.confidence = Confidence.MEDIUM  # the table's own chains are the release's: no version needed
    if bug is NFT_LOCAL_TRAFFIC_DROPPED and local_dropped is not None and not local_dropped[2]:
        # the element is every release's; only the release (or the table's chains) says it is dropped
        f.severity = Severity.WARNING
        if kpv is None:
            suspect(
                f,
                "a Local Service's external address is in no-endpoint-services; the release was not shown",
                ["kube-proxy --version", "nft list table ip kube-proxy (whether filter-output-pre-dnat exists)"],
            )
    f.fix = [bug.fix]
    f.fixed_in = list(bug.fixed)
    if bug.reference and bug.reference not in f.references:
        f.references.append(bug.reference)
    yield f
