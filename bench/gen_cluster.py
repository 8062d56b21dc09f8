"""Write a kube-proxy-shaped node dump plus the matching Services and EndpointSlices.

N Services x E endpoints (default 5). Every fifth Service is a NodePort. Deterministic: the same N
and E give the same files, and every mode writes the identical cluster.json.

--mode iptables (the default): the modern (1.28+) layout kube-proxy writes: a KUBE-SERVICES rule
per cluster IP, a KUBE-SVC chain with one `statistic` rule per endpoint, a KUBE-SEP chain per
endpoint, KUBE-NODEPORTS + KUBE-EXT for the NodePorts. Chain names use kube-proxy's own hash
(sha256 -> base32, 16 characters), so the dump looks like a real node's.

--mode nftables: the same cluster as kube-proxy's nftables mode programs it, in its "Gen A"
layout with the newest base-chain names (tests/data/upstream/nftables/TestOverallNFTablesRules.nft):
table `ip kube-proxy`, the sets cluster-ips and nodeport-ips, the verdict maps service-ips,
service-nodeports, no-endpoint-services, no-endpoint-nodeports and firewall-ips, the base and
helper chains, and per Service port a `service-H-ns/name/tcp/http` chain (masquerade off-cluster
sources, then `numgen random mod E vmap`), one `endpoint-H-ns/name/tcp/http__IP/8080` chain per
endpoint and, for the NodePorts, an `external-H-...` chain. H is kube-proxy's nftables hash: the
first 8 characters of base32(sha256(readable part)). As in that fixture, the masquerade rule is
`ip daddr IP ip saddr != 10.0.0.0/8 jump mark-for-masquerade` (releases with the older base-chain
names also matched `tcp dport 80`), and cluster-ips-check drops unallocated ClusterIPs in
172.16.0.0/12. Every Service has endpoints (E >= 1), so the no-endpoint and firewall maps are empty.

--mode ipvs: the same cluster as kube-proxy 1.28's IPVS proxier leaves it on a single-stack IPv4
node (tests/data/modes/ipvs-healthy is a small real one; its SOURCES.md names the upstream code): a
virtual server per ClusterIP:port and, for the NodePorts, per node address (NODE_IP; kube-proxy
skips loopback and kube-ipvs0's addresses):nodePort, the endpoints as masqueraded real servers of
weight 1, scheduler rr; every ClusterIP bound to kube-ipvs0; kube-proxy's 17 IPv4 ipsets
(KUBE-CLUSTER-IP, KUBE-NODE-PORT-TCP and KUBE-IPVS-IPS filled; KUBE-LOOP-BACK empty, no endpoint
being on this node) and its constant-size iptables rules matching them.

    python bench/gen_cluster.py OUTDIR --services 10000 [--endpoints 5] [--mode iptables|nftables|ipvs]

iptables mode writes OUTDIR/iptables-save.txt (nat + filter, as `iptables-save` prints it), the
restore payload OUTDIR/restore.txt (the same rules, for `iptables-legacy-restore --test`) and
OUTDIR/cluster.json (a List of Services, EndpointSlices and the Node).

nftables mode writes OUTDIR/nft-ruleset.json (what `nft -j list ruleset` prints on a node with
these rules: nftables 1.0.6's key order, element order and handles, one line), OUTDIR/ruleset.nft
(the same rules in `nft -f` syntax, kube-proxy's `add ...` commands with every set, map and chain
declared first, so that it loads into a real kernel) and OUTDIR/cluster.json.

ipvs mode writes, as the node's tools print them:
OUTDIR/ipvsadm-save.txt (`ipvsadm -Sn`: `-A -t VIP:PORT -s rr`, then `-a -t VIP:PORT -r EP:8080 -m
-w 1` per real server; virtual servers in libipvs's order: protocol, address as a number, port; real
servers by address, port), OUTDIR/ipset-save.txt (`ipset save`, ipset 7.17: the sets in kube-proxy's
creation order, hash sets created as kube-proxy creates them, `family inet hashsize 1024 maxelem
65536`, and listed after filling as the kernel lists them: the hashsize they have grown to (8192 at
30,000 Services), members in hash-bucket order; the seed (initval), random on a real node, is fixed
per set name. maxelem is kube-proxy's 65,536 up to N = 65,536 (10,000 and 30,000 Services fit);
past that it is raised to the member count, where kube-proxy itself would fail to add the rest),
OUTDIR/iptables-save.txt (`iptables-legacy-save`: nat and filter),
OUTDIR/ip-addr.txt (`ip addr`: lo, eth0 with NODE_IP/24, kube-ipvs0 with every ClusterIP as a /32)
and OUTDIR/cluster.json. The test (tests/test_bench_gen_ipvs.py) loads the ipsets and the rules into
a real kernel and checks they save back to the same bytes.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple, TextIO

NODE = "bench-node"
NODE_IP = "192.168.0.2"
POD_CIDR = "10.0.0.0/8"
SERVICE_CIDR = "172.16.0.0/12"
"""The service CIDR nftables mode drops unallocated ClusterIPs in; it holds every _svc_ip(i), i < 2**20."""
MODES = ("iptables", "nftables", "ipvs")
NFT_TABLE = "kube-proxy"
NFT_METAINFO = {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}
"""What nftables 1.0.6 (Debian 12) puts first in `nft -j list ruleset`."""


class _Svc(NamedTuple):
    ns: str
    name: str
    ip: str
    nodeport: int | None
    eps: list[str]


def _hash(s: str) -> str:
    return base64.b32encode(hashlib.sha256(s.encode()).digest()).decode()[:16]


def _nft_hash(s: str) -> str:
    """kube-proxy's nftables chain hash: over the readable part itself, 8 characters."""
    return base64.b32encode(hashlib.sha256(s.encode()).digest()).decode()[:8]


def _svc_ip(i: int) -> str:
    return f"172.{16 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}"


def _ep_ip(i: int, j: int, stride: int = 8) -> str:
    k = i * stride + j
    return f"10.{(k >> 16) & 255}.{(k >> 8) & 255}.{k & 255}"


def _services(n: int, e: int) -> list[_Svc]:
    out = []
    for i in range(n):
        nodeport = 30000 + (i // 5) % 2768 if i % 5 == 0 and i // 5 < 2768 else None
        eps = sorted((_ep_ip(i, j, max(8, e)) for j in range(e)), key=lambda a: f"{a}:8080")
        out.append(_Svc(f"ns{i % 50}", f"svc{i}", _svc_ip(i), nodeport, eps))
    return out


def _cluster(svcs: list[_Svc]) -> dict[str, object]:
    """The Services, EndpointSlices and the Node as a Kubernetes List (the same for every mode)."""
    items: list[dict[str, object]] = []
    for s in svcs:
        spec: dict[str, object] = {
            "type": "NodePort" if s.nodeport else "ClusterIP",
            "clusterIP": s.ip,
            "clusterIPs": [s.ip],
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}],
        }
        if s.nodeport:
            spec["ports"] = [{**spec["ports"][0], "nodePort": s.nodeport}]  # type: ignore[index]
        items.append(
            {"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": s.ns, "name": s.name}, "spec": spec}
        )
        items.append(slice_of(s, s.eps))
    items.append(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE},
            "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]},
        }
    )
    return {"apiVersion": "v1", "kind": "List", "items": items}


def service_chain(s: _Svc) -> str:
    return f"KUBE-SVC-{_hash(f'{s.ns}/{s.name}:http' + 'tcp')}"


def endpoint_rules(s: _Svc, eps: list[str]) -> tuple[list[str], list[str]]:
    """Service ``s``'s KUBE-SEP chain declarations, and its KUBE-SVC rules to the endpoints ``eps``
    followed by each KUBE-SEP chain's rules, as kube-proxy writes them (the KUBE-SVC chain's first
    rule, the masquerade of off-cluster sources, is not among them)."""
    spn = f"{s.ns}/{s.name}:http"
    svc_chain = service_chain(s)
    decl: list[str] = []
    rules: list[str] = []
    e_ = len(eps)
    for j, ep in enumerate(eps):
        sep = f"KUBE-SEP-{_hash(spn + 'tcp' + ep + ':8080')}"
        decl.append(f":{sep} - [0:0]")
        stat = f" -m statistic --mode random --probability {1 / (e_ - j):.11f}" if j < e_ - 1 else ""
        rules.append(f'-A {svc_chain} -m comment --comment "{spn} -> {ep}:8080"{stat} -j {sep}')
        rules.append(f'-A {sep} -s {ep}/32 -m comment --comment "{spn}" -j KUBE-MARK-MASQ')
        rules.append(f'-A {sep} -p tcp -m comment --comment "{spn}" -m tcp -j DNAT --to-destination {ep}:8080')
    return decl, rules


def resync(svcs: list[_Svc], eps: list[list[str]], before: list[list[str]]) -> str:
    """An ``iptables-restore --noflush`` payload that moves Services ``svcs`` from the endpoints
    ``before`` to ``eps``, as kube-proxy's partial sync does: each KUBE-SVC chain is declared
    again (which flushes it) and rewritten, new KUBE-SEP chains are created, and the ones no
    longer used are flushed and deleted."""
    decl: list[str] = []
    rules: list[str] = []
    gone: list[str] = []
    for s, now, was in zip(svcs, eps, before, strict=True):
        spn = f"{s.ns}/{s.name}:http"
        decl.append(f":{service_chain(s)} - [0:0]")
        rules.append(
            f'-A {service_chain(s)} ! -s {POD_CIDR} -d {s.ip}/32 -p tcp -m comment --comment "{spn} cluster IP" '
            f"-m tcp --dport 80 -j KUBE-MARK-MASQ"
        )
        d, r = endpoint_rules(s, now)
        decl += d
        rules += r
        old = set(endpoint_rules(s, was)[0]) - set(d)
        decl += sorted(old)
        gone += [f"-X {x[1:].split()[0]}" for x in sorted(old)]
    return "\n".join(["*nat", *decl, *rules, *gone, "COMMIT", ""])


def slice_of(s: _Svc, eps: list[str]) -> dict[str, object]:
    """Service ``s``'s EndpointSlice with the endpoints ``eps`` (as in cluster.json)."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"namespace": s.ns, "name": f"{s.name}-abcde", "labels": {"kubernetes.io/service-name": s.name}},
        "addressType": "IPv4",
        "endpoints": [
            {
                "addresses": [ep],
                "conditions": {"ready": True, "serving": True, "terminating": False},
                "nodeName": f"node{s.eps.index(ep) if ep in s.eps else j}",
            }
            for j, ep in enumerate(eps)
        ],
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
    }


def generate(n: int, e: int) -> tuple[str, dict[str, object]]:
    """The iptables-save text (nat + filter, without the header and footer comments) and the List."""
    svcs = _services(n, e)
    decl_nat: list[str] = []
    rules_nat: list[str] = []
    svc_rules: list[str] = []
    np_rules: list[str] = []
    for s in svcs:
        spn = f"{s.ns}/{s.name}:http"
        svc_chain = f"KUBE-SVC-{_hash(spn + 'tcp')}"
        decl_nat.append(f":{svc_chain} - [0:0]")
        svc_rules.append(
            f'-A KUBE-SERVICES -d {s.ip}/32 -p tcp -m comment --comment "{spn} cluster IP" -m tcp --dport 80 '
            f"-j {svc_chain}"
        )
        rules_nat.append(
            f'-A {svc_chain} ! -s {POD_CIDR} -d {s.ip}/32 -p tcp -m comment --comment "{spn} cluster IP" '
            f"-m tcp --dport 80 -j KUBE-MARK-MASQ"
        )
        if s.nodeport is not None:
            ext = f"KUBE-EXT-{_hash(spn + 'tcp')}"
            decl_nat.append(f":{ext} - [0:0]")
            np_rules.append(
                f'-A KUBE-NODEPORTS -p tcp -m comment --comment "{spn}" -m tcp --dport {s.nodeport} -j {ext}'
            )
            rules_nat.append(
                f'-A {ext} -m comment --comment "masquerade traffic for {spn} external destinations" -j KUBE-MARK-MASQ'
            )
            rules_nat.append(f"-A {ext} -j {svc_chain}")
        sep_decl, sep_rules = endpoint_rules(s, s.eps)
        decl_nat += sep_decl
        rules_nat += sep_rules
    head = [
        "*nat",
        ":PREROUTING ACCEPT [0:0]",
        ":INPUT ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":POSTROUTING ACCEPT [0:0]",
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-NODEPORTS - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-SERVICES - [0:0]",
    ]
    base = [
        '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
        "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0",
        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE',
    ]
    tail = [
        '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in '
        'this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
        "COMMIT",
        "*filter",
        ":INPUT ACCEPT [0:0]",
        ":FORWARD ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":KUBE-FORWARD - [0:0]",
        '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT',
        "COMMIT",
    ]
    lines = head + decl_nat + base + np_rules + rules_nat + svc_rules + tail
    return "\n".join(lines) + "\n", _cluster(svcs)


# --- nftables mode --------------------------------------------------------------------------------
#
# The JSON is written as text, object by object, exactly as `nft -j list ruleset` (nftables 1.0.6)
# prints it: one line, ", " and ": " separators, nft's key order. Listing order is nft's: the table,
# its sets and maps, its chains, then each chain's rules, chains in creation order. Handles are the
# ones the kernel gives when OUTDIR/ruleset.nft is loaded into an empty namespace: tables count on
# their own; inside the table sets, chains, rules and the anonymous set of every `numgen ... vmap
# { ... }` (created just before its rule) share one counter, in the order ruleset.nft adds them.
# The single-prefix set `ip daddr { CIDR }` is folded into a prefix match by nft and gets no handle.

_T = f'"family": "ip", "table": "{NFT_TABLE}"'
# (name, type, comment); a map's type is its key's, its value type is always verdict.
_NFT_SETS: list[tuple[str, tuple[str, ...], str]] = [
    ("cluster-ips", ("ipv4_addr",), "Active ClusterIPs"),
    ("nodeport-ips", ("ipv4_addr",), "IPs that accept NodePort traffic"),
]
_NFT_MAPS: list[tuple[str, tuple[str, ...], str]] = [
    (
        "firewall-ips",
        ("ipv4_addr", "inet_proto", "inet_service"),
        "destinations that are subject to LoadBalancerSourceRanges",
    ),
    (
        "no-endpoint-nodeports",
        ("inet_proto", "inet_service"),
        "vmap to drop or reject packets to service nodeports with no endpoints",
    ),
    (
        "no-endpoint-services",
        ("ipv4_addr", "inet_proto", "inet_service"),
        "vmap to drop or reject packets to services with no endpoints",
    ),
    ("service-ips", ("ipv4_addr", "inet_proto", "inet_service"), "ClusterIP, ExternalIP and LoadBalancer IP traffic"),
    ("service-nodeports", ("inet_proto", "inet_service"), "NodePort traffic"),
]
# (name, (type, hook, priority) for a base chain, comment): kube-proxy's chains, in its order.
_NFT_CHAINS: list[tuple[str, tuple[str, str, int] | None, str | None]] = [
    ("cluster-ips-check", None, None),
    ("filter-prerouting-pre-dnat", ("filter", "prerouting", -110), None),
    ("filter-output-pre-dnat", ("filter", "output", -110), None),
    ("filter-forward", ("filter", "forward", 0), None),
    ("filter-input", ("filter", "input", 0), None),
    ("filter-output", ("filter", "output", 0), None),
    ("firewall-check", None, None),
    ("mark-for-masquerade", None, None),
    ("masquerading", None, None),
    ("nat-output", ("nat", "output", -100), None),
    ("nat-postrouting", ("nat", "postrouting", 100), None),
    ("nat-prerouting", ("nat", "prerouting", -100), None),
    ("nodeport-endpoints-check", None, None),
    ("reject-chain", None, "helper for @no-endpoint-services / @no-endpoint-nodeports"),
    ("services", None, None),
    ("service-endpoints-check", None, None),
]
_DADDR = {"payload": {"protocol": "ip", "field": "daddr"}}
_L4PROTO = {"meta": {"key": "l4proto"}}
_DPORT = {"payload": {"protocol": "th", "field": "dport"}}
_MARK = {"meta": {"key": "mark"}}
_REJECT = {"reject": {"type": "icmp", "expr": "port-unreachable"}}


def _ct_new_jump(target: str) -> list[object]:
    return [{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "new"}}, {"jump": {"target": target}}]


def _vmap(key: list[object], data: str) -> dict[str, object]:
    return {"vmap": {"key": {"concat": key}, "data": data}}


_CIDR_ADDR, _CIDR_LEN = SERVICE_CIDR.split("/")
# (chain, nft -f text, comment, JSON expr), in chain order.
_NFT_BASE_RULES: list[tuple[str, str, str | None, list[object]]] = [
    (
        "cluster-ips-check",
        "ip daddr @cluster-ips reject",
        "Reject traffic to invalid ports of ClusterIPs",
        [{"match": {"op": "==", "left": _DADDR, "right": "@cluster-ips"}}, _REJECT],
    ),
    (
        "cluster-ips-check",
        f"ip daddr {{ {SERVICE_CIDR} }} drop",
        "Drop traffic to unallocated ClusterIPs",
        [
            {
                "match": {
                    "op": "==",
                    "left": _DADDR,
                    "right": {"prefix": {"addr": _CIDR_ADDR, "len": int(_CIDR_LEN)}},
                }
            },
            {"drop": None},
        ],
    ),
    ("filter-prerouting-pre-dnat", "ct state new jump firewall-check", None, _ct_new_jump("firewall-check")),
    ("filter-output-pre-dnat", "ct state new jump firewall-check", None, _ct_new_jump("firewall-check")),
    ("filter-forward", "ct state new jump service-endpoints-check", None, _ct_new_jump("service-endpoints-check")),
    ("filter-forward", "ct state new jump cluster-ips-check", None, _ct_new_jump("cluster-ips-check")),
    ("filter-input", "ct state new jump nodeport-endpoints-check", None, _ct_new_jump("nodeport-endpoints-check")),
    ("filter-input", "ct state new jump service-endpoints-check", None, _ct_new_jump("service-endpoints-check")),
    ("filter-output", "ct state new jump service-endpoints-check", None, _ct_new_jump("service-endpoints-check")),
    ("filter-output", "ct state new jump cluster-ips-check", None, _ct_new_jump("cluster-ips-check")),
    (
        "firewall-check",
        "ip daddr . meta l4proto . th dport vmap @firewall-ips",
        None,
        [_vmap([_DADDR, _L4PROTO, _DPORT], "@firewall-ips")],
    ),
    (
        "mark-for-masquerade",
        "mark set mark or 0x4000",
        None,
        [{"mangle": {"key": _MARK, "value": {"|": [_MARK, 16384]}}}],
    ),
    (
        "masquerading",
        "mark and 0x4000 == 0 return",
        None,
        [{"match": {"op": "==", "left": {"&": [_MARK, 16384]}, "right": 0}}, {"return": None}],
    ),
    ("masquerading", "mark set mark xor 0x4000", None, [{"mangle": {"key": _MARK, "value": {"^": [_MARK, 16384]}}}]),
    ("masquerading", "masquerade fully-random", None, [{"masquerade": {"flags": "fully-random"}}]),
    ("nat-output", "jump services", None, [{"jump": {"target": "services"}}]),
    ("nat-postrouting", "jump masquerading", None, [{"jump": {"target": "masquerading"}}]),
    ("nat-prerouting", "jump services", None, [{"jump": {"target": "services"}}]),
    (
        "nodeport-endpoints-check",
        "ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports",
        None,
        [
            {"match": {"op": "==", "left": _DADDR, "right": "@nodeport-ips"}},
            _vmap([_L4PROTO, _DPORT], "@no-endpoint-nodeports"),
        ],
    ),
    ("reject-chain", "reject", None, [_REJECT]),
    (
        "services",
        "ip daddr . meta l4proto . th dport vmap @service-ips",
        None,
        [_vmap([_DADDR, _L4PROTO, _DPORT], "@service-ips")],
    ),
    (
        "services",
        "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
        None,
        [
            {"match": {"op": "==", "left": _DADDR, "right": "@nodeport-ips"}},
            _vmap([_L4PROTO, _DPORT], "@service-nodeports"),
        ],
    ),
    (
        "service-endpoints-check",
        "ip daddr . meta l4proto . th dport vmap @no-endpoint-services",
        None,
        [_vmap([_DADDR, _L4PROTO, _DPORT], "@no-endpoint-services")],
    ),
]


class _NftSvc(NamedTuple):
    svc: _Svc
    service: str  # chain names
    external: str | None
    endpoints: list[str]


def nft_service_chain(prefix: str, ns: str, name: str, port: str, proto: str = "tcp") -> str:
    """kube-proxy's name for a per-service-port chain: ``prefix`` is service, external or firewall."""
    base = f"{ns}/{name}/{proto}/{port}"
    return f"{prefix}-{_nft_hash(base)}-{base}"


def nft_endpoint_chain(ns: str, name: str, port: str, ip: str, target_port: int, proto: str = "tcp") -> str:
    """kube-proxy's name for an (IPv4) endpoint chain."""
    base = f"{ns}/{name}/{proto}/{port}__{ip}/{target_port}"
    return f"endpoint-{_nft_hash(base)}-{base}"


def _nft_chains(s: _Svc) -> _NftSvc:
    return _NftSvc(
        s,
        nft_service_chain("service", s.ns, s.name, "http"),
        nft_service_chain("external", s.ns, s.name, "http") if s.nodeport is not None else None,
        [nft_endpoint_chain(s.ns, s.name, "http", ep, 8080) for ep in s.eps],
    )


def _ip_bytes(ip: str) -> bytes:
    return bytes(int(x) for x in ip.split("."))


# How nft orders the elements it lists (it sorts them; values as it holds them). A plain ipv4_addr
# set: by address. A concatenation: the whole key, each field padded to 4 bytes, read as one
# little-endian number, so the last field weighs most and inside a field the last byte does
# (inet_service 80 is the bytes 00 50). Seen on x86-64; the upstream .ruleset.json agrees.
def _concat_order(*fields: bytes) -> int:
    return int.from_bytes(b"".join(f.ljust(4, b"\0") for f in fields), "little")


_TCP = bytes([6])


def _port(p: int) -> bytes:
    return p.to_bytes(2, "big")


def _goto(target: str) -> str:
    return f'{{"goto": {{"target": "{target}"}}}}'


def _nft_text(svcs: list[_NftSvc]) -> Iterator[str]:
    """ruleset.nft, a block of lines at a time: kube-proxy's commands, declarations first (the
    kernel resolves a `goto` when the rule is added, so every chain must exist before a rule or
    element refers to it)."""
    t = f"ip {NFT_TABLE}"
    head = [f'add table {t} {{ comment "rules for kube-proxy" ; }}', ""]
    head += [f'add set {t} {name} {{ type {" . ".join(ty)} ; comment "{c}" ; }}' for name, ty, c in _NFT_SETS]
    head += [f'add map {t} {name} {{ type {" . ".join(ty)} : verdict ; comment "{c}" ; }}' for name, ty, c in _NFT_MAPS]
    head.append("")
    for name, hook, comment in _NFT_CHAINS:
        spec = f"type {hook[0]} hook {hook[1]} priority {hook[2]} ; " if hook else ""
        spec += f'comment "{comment}" ; ' if comment else ""
        head.append(f"add chain {t} {name}" + (f" {{ {spec}}}" if spec else ""))
    yield "\n".join(head) + "\n"
    for v in svcs:
        chains = [v.service] + ([v.external] if v.external is not None else []) + v.endpoints
        yield "".join(f"add chain {t} {c}\n" for c in chains)
    base = [""]
    for chain, text, comment, _ in _NFT_BASE_RULES:
        base.append(f"add rule {t} {chain} {text}" + (f' comment "{comment}"' if comment else ""))
    base.append(f"add element {t} nodeport-ips {{ {NODE_IP} }}")
    yield "\n".join(base) + "\n"
    for v in svcs:
        s = v.svc
        vmap = " , ".join(f"{j} : goto {c}" for j, c in enumerate(v.endpoints))
        out = [
            "",
            f"# {s.ns}/{s.name}:http",
            f"add rule {t} {v.service} ip daddr {s.ip} ip saddr != {POD_CIDR} jump mark-for-masquerade",
            f"add rule {t} {v.service} numgen random mod {len(v.endpoints)} vmap {{ {vmap} }}",
        ]
        if v.external is not None:
            out += [
                f"add rule {t} {v.external} jump mark-for-masquerade",
                f"add rule {t} {v.external} goto {v.service}",
            ]
        for c, ep in zip(v.endpoints, s.eps, strict=True):
            out += [
                f"add rule {t} {c} ip saddr {ep} jump mark-for-masquerade",
                f"add rule {t} {c} meta l4proto tcp dnat to {ep}:8080",
            ]
        out += [
            f"add element {t} cluster-ips {{ {s.ip} }}",
            f"add element {t} service-ips {{ {s.ip} . tcp . 80 : goto {v.service} }}",
        ]
        if v.external is not None:
            out.append(f"add element {t} service-nodeports {{ tcp . {s.nodeport} : goto {v.external} }}")
        yield "\n".join(out) + "\n"


def _write_nft_json(f: TextIO, svcs: list[_NftSvc]) -> None:
    """nft-ruleset.json, streamed: see the comment above _NFT_SETS for the order and the handles."""
    w = f.write
    w('{"nftables": [')
    w(json.dumps({"metainfo": NFT_METAINFO}))
    w(f', {{"table": {{"family": "ip", "name": "{NFT_TABLE}", "handle": 1}}}}')
    h = 0  # the table's object handle counter
    cluster_ips = sorted((v.svc.ip for v in svcs), key=_ip_bytes)
    svc_ips = sorted(
        ((_concat_order(_ip_bytes(v.svc.ip), _TCP, _port(80)), v.svc.ip, v.service) for v in svcs),
    )
    nodeports = sorted(
        (_concat_order(_TCP, _port(v.svc.nodeport)), v.svc.nodeport, v.external)
        for v in svcs
        if v.external is not None and v.svc.nodeport is not None
    )
    elems: dict[str, list[str]] = {
        "cluster-ips": [f'"{ip}"' for ip in cluster_ips],
        "nodeport-ips": [f'"{NODE_IP}"'],
        "service-ips": [f'[{{"concat": ["{ip}", "tcp", 80]}}, {_goto(c)}]' for _, ip, c in svc_ips],
        "service-nodeports": [f'[{{"concat": ["tcp", {p}]}}, {_goto(str(c))}]' for _, p, c in nodeports],
    }
    for kind, table in (("set", _NFT_SETS), ("map", _NFT_MAPS)):
        for name, ty, comment in table:
            h += 1
            tys = json.dumps(ty[0] if len(ty) == 1 else list(ty))
            w(f', {{"{kind}": {{"family": "ip", "name": "{name}", "table": "{NFT_TABLE}", "type": {tys}, ')
            w(f'"handle": {h}, "comment": "{comment}"' + (', "map": "verdict"' if kind == "map" else ""))
            if elems.get(name):
                w(', "elem": [')
                w(", ".join(elems[name]))
                w("]")
            w("}}")
    for name, hook, _ in _NFT_CHAINS:
        h += 1
        w(f', {{"chain": {{{_T}, "name": "{name}", "handle": {h}')
        if hook:
            w(f', "type": "{hook[0]}", "hook": "{hook[1]}", "prio": {hook[2]}, "policy": "accept"')
        w("}}")
    for v in svcs:
        for c in [v.service] + ([v.external] if v.external is not None else []) + v.endpoints:
            h += 1
            w(f', {{"chain": {{{_T}, "name": "{c}", "handle": {h}}}}}')
    for chain, _text, rule_comment, expr in _NFT_BASE_RULES:
        h += 1
        cm = f', "comment": "{rule_comment}"' if rule_comment else ""
        w(f', {{"rule": {{{_T}, "chain": "{chain}", "handle": {h}{cm}, "expr": {json.dumps(expr)}}}}}')
    masq = '{"jump": {"target": "mark-for-masquerade"}}'
    pod_addr, pod_len = POD_CIDR.split("/")
    not_pod = (
        '{"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, '
        f'"right": {{"prefix": {{"addr": "{pod_addr}", "len": {pod_len}}}}}}}}}'
    )
    for v in svcs:
        s = v.svc
        parts = []
        h += 1
        parts.append(
            f', {{"rule": {{{_T}, "chain": "{v.service}", "handle": {h}, "expr": [{{"match": {{"op": "==", '
            f'"left": {{"payload": {{"protocol": "ip", "field": "daddr"}}}}, "right": "{s.ip}"}}}}, '
            f"{not_pod}, {masq}]}}}}"
        )
        h += 2  # the vmap's anonymous set, then the rule
        vmap = ", ".join(f"[{j}, {_goto(c)}]" for j, c in enumerate(v.endpoints))
        parts.append(
            f', {{"rule": {{{_T}, "chain": "{v.service}", "handle": {h}, "expr": [{{"vmap": {{"key": {{"numgen": '
            f'{{"mode": "random", "mod": {len(v.endpoints)}, "offset": 0}}}}, "data": {{"set": [{vmap}]}}}}}}]}}}}'
        )
        if v.external is not None:
            parts.append(f', {{"rule": {{{_T}, "chain": "{v.external}", "handle": {h + 1}, "expr": [{masq}]}}}}')
            parts.append(
                f', {{"rule": {{{_T}, "chain": "{v.external}", "handle": {h + 2}, "expr": [{_goto(v.service)}]}}}}'
            )
            h += 2
        for c, ep in zip(v.endpoints, s.eps, strict=True):
            parts.append(
                f', {{"rule": {{{_T}, "chain": "{c}", "handle": {h + 1}, "expr": [{{"match": {{"op": "==", '
                f'"left": {{"payload": {{"protocol": "ip", "field": "saddr"}}}}, "right": "{ep}"}}}}, {masq}]}}}}'
            )
            parts.append(
                f', {{"rule": {{{_T}, "chain": "{c}", "handle": {h + 2}, "expr": [{{"match": {{"op": "==", '
                f'"left": {{"meta": {{"key": "l4proto"}}}}, "right": "tcp"}}}}, '
                f'{{"dnat": {{"addr": "{ep}", "port": 8080}}}}]}}}}'
            )
            h += 2
        w("".join(parts))
    w("]}\n")


def write_nftables(out: Path, n: int, e: int) -> tuple[Path, Path]:
    """Write OUTDIR/nft-ruleset.json, OUTDIR/ruleset.nft and OUTDIR/cluster.json (nftables mode)."""
    if e < 1:
        raise ValueError("nftables mode needs at least one endpoint per Service")
    out.mkdir(parents=True, exist_ok=True)
    svcs = _services(n, e)
    nsvcs = [_nft_chains(s) for s in svcs]
    js = out / "nft-ruleset.json"
    with js.open("w", encoding="utf-8") as f:
        _write_nft_json(f, nsvcs)
    with (out / "ruleset.nft").open("w", encoding="utf-8") as f:
        f.writelines(_nft_text(nsvcs))
    cl = out / "cluster.json"
    cl.write_text(json.dumps(_cluster(svcs)))
    return js, cl


# --- IPVS mode -------------------------------------------------------------------------------------
#
# What kube-proxy 1.28's IPVS proxier leaves on a single-stack IPv4 node (tests/data/modes/SOURCES.md
# and realize.sh build the same node for real, small): a virtual server per ClusterIP:port and per
# node address:NodePort (real servers: the endpoints, masquerading, weight 1), every ClusterIP bound
# to kube-ipvs0 as a /32, the 17 ipsets of `ipsetInfo` and a constant set of iptables rules matching
# them. No endpoint is on this node (their nodeName is node0, node1, ...), so KUBE-LOOP-BACK is empty
# and its hairpin MASQUERADE rule is not written.

IPVS_FILES = ("ipvsadm-save.txt", "ipset-save.txt", "iptables-save.txt", "ip-addr.txt")
"""The node's files in ipvs mode (OUTDIR/...), as kpdoctor is given them, before cluster.json."""
IPVS_SCHEDULER = "rr"
IPSET_HASHSIZE = 1024
"""kube-proxy creates every hash set with ``hashsize 1024 maxelem 65536`` (pkg/proxy/ipvs/ipset)."""
IPSET_MAXELEM = 65536
IPSET_BUCKETSIZE = 12
"""The kernel's default bucket size (AHASH_MAX_SIZE); a bucket that would hold more grows the table."""
SAVE_DATE = "Sat Nov 21 10:00:00 2026"
# kube-proxy's ipsetInfo, in its order (IPv4 names; the node is single-stack, so no KUBE-6-* sets).
_IPVS_SETS: list[tuple[str, str]] = [
    ("KUBE-LOOP-BACK", "hash:ip,port,ip"),
    ("KUBE-CLUSTER-IP", "hash:ip,port"),
    ("KUBE-EXTERNAL-IP", "hash:ip,port"),
    ("KUBE-EXTERNAL-IP-LOCAL", "hash:ip,port"),
    ("KUBE-LOAD-BALANCER", "hash:ip,port"),
    ("KUBE-LOAD-BALANCER-FW", "hash:ip,port"),
    ("KUBE-LOAD-BALANCER-LOCAL", "hash:ip,port"),
    ("KUBE-LOAD-BALANCER-SOURCE-IP", "hash:ip,port,ip"),
    ("KUBE-LOAD-BALANCER-SOURCE-CIDR", "hash:ip,port,net"),
    ("KUBE-NODE-PORT-TCP", "bitmap:port"),
    ("KUBE-NODE-PORT-LOCAL-TCP", "bitmap:port"),
    ("KUBE-NODE-PORT-UDP", "bitmap:port"),
    ("KUBE-NODE-PORT-LOCAL-UDP", "bitmap:port"),
    ("KUBE-NODE-PORT-SCTP-HASH", "hash:ip,port"),
    ("KUBE-NODE-PORT-LOCAL-SCTP-HASH", "hash:ip,port"),
    ("KUBE-HEALTH-CHECK-NODE-PORT", "bitmap:port"),
    ("KUBE-IPVS-IPS", "hash:ip"),
]
_IPPROTO_TCP = 6
_M32 = 0xFFFFFFFF


def _ip_int(ip: str) -> int:
    return int.from_bytes(_ip_bytes(ip), "big")


def _rol32(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M32


def _jhash2(words: tuple[int, ...], initval: int) -> int:
    """The kernel's jhash2() (include/linux/jhash.h) of one to three 32-bit words."""
    a = b = c = (0xDEADBEEF + (len(words) << 2) + initval) & _M32
    if len(words) == 3:
        c = (c + words[2]) & _M32
    if len(words) >= 2:
        b = (b + words[1]) & _M32
    a = (a + words[0]) & _M32
    # __jhash_final(a, b, c)
    c ^= b
    c = (c - _rol32(b, 14)) & _M32
    a ^= c
    a = (a - _rol32(c, 11)) & _M32
    b ^= a
    b = (b - _rol32(a, 25)) & _M32
    c ^= b
    c = (c - _rol32(b, 16)) & _M32
    a ^= c
    a = (a - _rol32(c, 4)) & _M32
    b ^= a
    b = (b - _rol32(a, 14)) & _M32
    c ^= b
    c = (c - _rol32(b, 24)) & _M32
    return c


def _ipset_initval(name: str) -> int:
    """The set's hash seed. The kernel draws it at random when kube-proxy creates the set (it gives
    none); here it is fixed per name so that the same N and E give the same bytes."""
    return int.from_bytes(hashlib.sha256(f"kpdoctor bench ipset {name}".encode()).digest()[:4], "big")


def _ipset_key(set_type: str, member: str) -> tuple[int, ...]:
    """The words the kernel hashes for an IPv4 member: its element struct read as host (little-endian,
    x86-64 and arm64) 32-bit words. hash:ip is ``{__be32 ip}``; hash:ip,port is ``{__be32 ip; __be16
    port; u8 proto; u8 padding}`` (net/netfilter/ipset/ip_set_hash_ip.c, ip_set_hash_ipport.c)."""
    if set_type == "hash:ip":
        return (int.from_bytes(_ip_bytes(member), "little"),)
    if set_type == "hash:ip,port":
        ip, _, rest = member.partition(",")
        proto, _, port = rest.partition(":")
        if proto != "tcp":
            raise ValueError(f"only TCP members are generated, not {member!r}")
        tail = int(port).to_bytes(2, "big") + bytes([_IPPROTO_TCP, 0])
        return (int.from_bytes(_ip_bytes(ip), "little"), int.from_bytes(tail, "little"))
    raise ValueError(f"no members of {set_type} are generated")


def _hash_set_listing(set_type: str, initval: int, members: list[str]) -> tuple[list[str], int]:
    """The members in the order `ipset save` lists them, and the hashsize it prints, after adding
    ``members`` one by one to a set created with hashsize 1024 (net/netfilter/ipset/ip_set_hash_gen.h):

    * an element goes to bucket ``jhash2(element, initval) & (2**bits - 1)``, after the bucket's
      elements (buckets grow by 2 slots up to the bucket size, 12);
    * adding a 13th element to a bucket first resizes: the table doubles and every element is
      moved, old bucket by old bucket and in their order, into the new table (doubling again if a
      bucket overflows while moving), then the add is retried;
    * listing walks the buckets in order, each bucket's elements in order.

    Checked against the kernel (tests/test_bench_gen_ipvs.py), resizes included."""
    bits = IPSET_HASHSIZE.bit_length() - 1
    table: dict[int, list[tuple[int, str]]] = {}
    for member in members:
        h = _jhash2(_ipset_key(set_type, member), initval)
        while True:
            bucket = table.setdefault(h & ((1 << bits) - 1), [])
            if len(bucket) < IPSET_BUCKETSIZE:
                bucket.append((h, member))
                break
            table, bits = _hash_set_resize(table, bits)
    return [m for b in sorted(table) for _, m in table[b]], 1 << bits


def _hash_set_resize(
    table: dict[int, list[tuple[int, str]]], bits: int
) -> tuple[dict[int, list[tuple[int, str]]], int]:
    while True:
        bits += 1
        mask = (1 << bits) - 1
        new: dict[int, list[tuple[int, str]]] = {}
        fits = True
        for b in sorted(table):
            for h, member in table[b]:
                bucket = new.setdefault(h & mask, [])
                if len(bucket) >= IPSET_BUCKETSIZE:
                    fits = False
                    break
                bucket.append((h, member))
            if not fits:
                break
        if fits:
            return new, bits


def _ipvs_set_members(svcs: list[_Svc]) -> dict[str, list[str]]:
    """Each non-empty set's members, in the order they are added (the Services' order)."""
    return {
        "KUBE-CLUSTER-IP": [f"{s.ip},tcp:80" for s in svcs],
        "KUBE-NODE-PORT-TCP": [str(s.nodeport) for s in svcs if s.nodeport is not None],
        "KUBE-IPVS-IPS": [s.ip for s in svcs],
    }


def _ipset_save(svcs: list[_Svc]) -> Iterator[str]:
    """ipset-save.txt, a set at a time: `ipset save` (ipset 7.17) of the node's sets, in creation order.

    kube-proxy creates the hash sets with ``family inet hashsize 1024 maxelem 65536`` and the bitmaps
    with ``range 0-65535``; `ipset save` adds the bucket size and the seed, and prints the hashsize
    the set has grown to. maxelem is raised to the member count for a set that would hold more than
    65,536 (N > 65,536 Services; kube-proxy would fail to add the rest: "set is full")."""
    members = _ipvs_set_members(svcs)
    for name, set_type in _IPVS_SETS:
        got = members.get(name, [])
        if set_type.startswith("bitmap:"):
            lines = [f"create {name} {set_type} range 0-65535"]
            lines += [f"add {name} {p}" for p in sorted(got, key=int)]
        else:
            initval = _ipset_initval(name)
            order, hashsize = _hash_set_listing(set_type, initval, got) if got else ([], IPSET_HASHSIZE)
            maxelem = max(IPSET_MAXELEM, len(got))
            lines = [
                f"create {name} {set_type} family inet hashsize {hashsize} maxelem {maxelem} "
                f"bucketsize {IPSET_BUCKETSIZE} initval 0x{initval:08x}"
            ]
            lines += [f"add {name} {m}" for m in order]
        yield "\n".join(lines) + "\n"


def _ipvsadm_save(svcs: list[_Svc]) -> Iterator[str]:
    """ipvsadm-save.txt, a virtual server at a time: `ipvsadm -Sn`.

    ipvsadm.c print_service_entry() with FMT_RULE: ``-A -t ADDR:PORT -s SCHED`` (``-u`` for UDP,
    `` -p TIMEOUT`` with ClientIP affinity, which no generated Service has), then per real server
    ``-a -t ADDR:PORT -r ADDR:PORT -m -w WEIGHT`` (``-m``: masquerading). Virtual servers are sorted
    by libipvs ipvs_cmp_services (fwmark, family, protocol, ``ntohl(a) - ntohl(b)`` as an int, port),
    real servers by ipvs_cmp_dests (address the same way, port). The address difference wraps at
    2**31; every address here lies in a window narrower than that, where the comparison is the
    plain numeric order, so a sort by (address, port) is ipvsadm's."""
    vss: list[tuple[int, int, str, list[str]]] = []
    for s in svcs:
        reals = [f"{ep}:8080" for ep in sorted(s.eps, key=_ip_int)]
        vss.append((_ip_int(s.ip), 80, s.ip, reals))
        if s.nodeport is not None:
            vss.append((_ip_int(NODE_IP), s.nodeport, NODE_IP, reals))
    # virtual servers are compared with each other, real servers with each other
    for addrs in ([v[0] for v in vss], [_ip_int(ep) for s in svcs for ep in s.eps]):
        if addrs and max(addrs) - min(addrs) >= 1 << 31:
            raise ValueError("addresses too far apart for ipvsadm's wrapping comparison")
    vss.sort(key=lambda v: (v[0], v[1]))
    for _, port, addr, reals in vss:
        vs = f"-t {addr}:{port}"
        out = [f"-A {vs} -s {IPVS_SCHEDULER}"]
        out += [f"-a {vs} -r {r} -m -w 1" for r in reals]
        yield "\n".join(out) + "\n"


def _ipvs_iptables_save(nodeports: bool) -> str:
    """iptables-save.txt: the nat and filter tables as `iptables-legacy-save` (v1.8.9) prints what
    kube-proxy 1.28's IPVS proxier restores (the layout of tests/data/modes/ipvs-healthy, without
    kubelet's chains: the iptables form has none either). Constant size: the rules match
    the sets. The KUBE-NODE-PORT-TCP rule is written when the set has members; KUBE-LOOP-BACK's
    hairpin rule is not, its set being empty."""
    gen = f"# Generated by iptables-save v1.8.9 on {SAVE_DATE}"
    done = f"# Completed on {SAVE_DATE}"
    nat = [
        gen,
        "*nat",
        ":PREROUTING ACCEPT [0:0]",
        ":INPUT ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":POSTROUTING ACCEPT [0:0]",
        ":KUBE-LOAD-BALANCER - [0:0]",
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-NODE-PORT - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-SERVICES - [0:0]",
        '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
        "-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ",
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
    ]
    if nodeports:
        nat.append(
            '-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" '
            "-m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ"
        )
    nat += [
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
        "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0",
        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE '
        "--random-fully",
        "-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN",
        f'-A KUBE-SERVICES ! -s {POD_CIDR} -m comment --comment "Kubernetes service cluster ip + port for '
        'masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ',
        "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT",
        "-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT",
        "COMMIT",
        done,
    ]
    filt = [
        gen,
        "*filter",
        ":INPUT ACCEPT [0:0]",
        ":FORWARD ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":KUBE-FORWARD - [0:0]",
        ":KUBE-IPVS-FILTER - [0:0]",
        ":KUBE-NODE-PORT - [0:0]",
        ":KUBE-PROXY-FIREWALL - [0:0]",
        ":KUBE-SOURCE-RANGES-FIREWALL - [0:0]",
        '-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER',
        '-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL',
        '-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT',
        '-A FORWARD -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL',
        '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT',
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate '
        "RELATED,ESTABLISHED -j ACCEPT",
        "-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN",
        "-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN",
        "-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN",
        "-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN",
        "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT "
        "--reject-with icmp-port-unreachable",
        '-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set '
        "KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT",
        "-A KUBE-SOURCE-RANGES-FIREWALL -j DROP",
        "COMMIT",
        done,
    ]
    return "\n".join(nat + filt) + "\n"


# `ip addr` of the node (iproute2 6.1), lo and eth0 as in tests/data/modes/ipvs-healthy/ip-addr.txt
# (there too NODE_IP/24 on a veth eth0); kube-ipvs0 is the dummy device kube-proxy creates and never
# sets up, each bound ClusterIP a /32 in the order kube-proxy binds them.
_NODE_NET = NODE_IP.rsplit(".", 1)[0]
_IP_ADDR_HEAD = [
    "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN group default qlen 1000",
    "    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00",
    "    inet 127.0.0.1/8 scope host lo",
    "       valid_lft forever preferred_lft forever",
    "    inet6 ::1/128 scope host ",  # iproute2 ends the line with a space
    "       valid_lft forever preferred_lft forever",
    "3: eth0@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP group default qlen 1000",
    "    link/ether 72:6d:18:92:98:3c brd ff:ff:ff:ff:ff:ff link-netnsid 0",
    f"    inet {NODE_IP}/24 brd {_NODE_NET}.255 scope global eth0",
    "       valid_lft forever preferred_lft forever",
    "    inet6 fe80::706d:18ff:fe92:983c/64 scope link ",
    "       valid_lft forever preferred_lft forever",
    "4: kube-ipvs0: <BROADCAST,NOARP> mtu 1500 qdisc noop state DOWN group default ",
    "    link/ether 42:a5:4a:e2:3c:ec brd ff:ff:ff:ff:ff:ff",
]


def _ip_addr(svcs: list[_Svc], chunk: int = 4096) -> Iterator[str]:
    yield "\n".join(_IP_ADDR_HEAD) + "\n"
    for k in range(0, len(svcs), chunk):
        yield "".join(
            f"    inet {s.ip}/32 scope global kube-ipvs0\n       valid_lft forever preferred_lft forever\n"
            for s in svcs[k : k + chunk]
        )


def write_ipvs(out: Path, n: int, e: int) -> tuple[Path, Path]:
    """Write OUTDIR/ipvsadm-save.txt, ipset-save.txt, iptables-save.txt, ip-addr.txt and cluster.json
    (ipvs mode); return (ipvsadm-save.txt, cluster.json)."""
    out.mkdir(parents=True, exist_ok=True)
    svcs = _services(n, e)
    ipvsadm = out / IPVS_FILES[0]
    with ipvsadm.open("w", encoding="utf-8") as f:
        f.writelines(_ipvsadm_save(svcs))
    with (out / IPVS_FILES[1]).open("w", encoding="utf-8") as f:
        f.writelines(_ipset_save(svcs))
    (out / IPVS_FILES[2]).write_text(_ipvs_iptables_save(any(s.nodeport is not None for s in svcs)))
    with (out / IPVS_FILES[3]).open("w", encoding="utf-8") as f:
        f.writelines(_ip_addr(svcs))
    cl = out / "cluster.json"
    cl.write_text(json.dumps(_cluster(svcs)))
    return ipvsadm, cl


def write(out: Path, n: int, e: int, mode: str = "iptables") -> tuple[Path, Path]:
    """Write the files of ``mode``; return (the node's rules as kpdoctor collects them, cluster.json).

    In ipvs mode that is OUTDIR/ipvsadm-save.txt; the node's other files are :data:`IPVS_FILES`,
    next to it."""
    if mode == "nftables":
        return write_nftables(out, n, e)
    if mode == "ipvs":
        return write_ipvs(out, n, e)
    if mode != "iptables":
        raise ValueError(f"unknown mode {mode!r}: one of {', '.join(MODES)}")
    out.mkdir(parents=True, exist_ok=True)
    dump, cluster = generate(n, e)
    save = out / "iptables-save.txt"
    save.write_text(f"# Generated by iptables-save v1.8.9 on Sat Nov 21 10:00:00 2026\n{dump}# Completed\n")
    (out / "restore.txt").write_text(dump)
    cl = out / "cluster.json"
    cl.write_text(json.dumps(cluster))
    return save, cl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--services", type=int, default=10000)
    ap.add_argument("--endpoints", type=int, default=5)
    ap.add_argument("--mode", choices=MODES, default="iptables")
    a = ap.parse_args()
    if a.mode == "nftables" and a.endpoints < 1:
        ap.error("--mode nftables needs --endpoints >= 1")
    rules, cl = write(a.out, a.services, a.endpoints, a.mode)
    files = [rules, a.out / "ruleset.nft"] if a.mode == "nftables" else [rules]
    if a.mode == "ipvs":
        files = [a.out / name for name in IPVS_FILES]
    print(", ".join(f"{p} ({p.stat().st_size / 1e6:.1f} MB)" for p in [*files, cl]))


if __name__ == "__main__":
    main()
