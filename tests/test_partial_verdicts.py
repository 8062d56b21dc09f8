"""Three-valued verdicts on partial rulesets (docs/verification.md, "Partial rules").

With only the nat table of a node, a result is *mismatch* when no completion of the missing filter
table reaches what the cluster expects, *ok* when kube-proxy's own filter rules for that Service
reach it, and *uncertain* only otherwise. The oracle here completes the nat table by brute force
with a fixed set of filter tables (accept-all, drop-all, reject-all, and the filter chains
kube-proxy writes for the Services given), verifies each complete dump, and derives the verdict
the nat-only dump must get. Any filter table can only accept, drop or reject, never translate:
these completions cover every outcome a filter rule can give one untranslated packet, and
kube-proxy's own is the one the node has when its filter table is as kube-proxy wrote it.
Translated packets pass every completion (see ``_filter``).
"""

from __future__ import annotations

import json
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Severity

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import gen_cluster  # type: ignore[import-not-found,unused-ignore]

NODE, NODE_IP, POD_CIDR = "node-a", "192.168.50.10", "10.244.0.0/16"


def _nat_section(save: str) -> str:
    m = re.search(r"^\*nat\n.*?^COMMIT\n", save, re.M | re.S)
    assert m is not None
    return m.group(0)


def _verify(tmp: Path, name: str, rules: str, cluster: dict[str, object]) -> dict[tuple[str, str, str], str]:
    d = tmp / name
    d.mkdir()
    (d / "iptables-save.txt").write_text(rules)
    (d / "cluster.json").write_text(json.dumps(cluster))
    rep, _ = diagnose_paths([d / "iptables-save.txt", d / "cluster.json"], command="verify")
    ver = rep.verification
    assert ver is not None and ver.evaluated, name
    return {(r.service, r.port, r.traffic): r.status for r in ver.results}


# -- the 2,000-Service node -----------------------------------------------------------------------


def test_a_nat_only_dump_names_every_service_without_rules_as_a_mismatch(tmp_path: Path) -> None:
    """A nat-only dump of a 2,000-Service node where some Services have no rules at all: each of
    them is a mismatch naming the Service, every other Service is ok, nothing is uncertain."""
    save, cluster = gen_cluster.generate(2000, 3)
    nat = _nat_section(save)
    rng = random.Random(2000)
    gone = sorted(rng.sample(range(2000), 25))
    names = {f"ns{i % 50}/svc{i}" for i in gone}
    kept = []
    for line in nat.splitlines():
        if any(f'"{n}:http' in line or f'"{n} ' in line for n in names):
            continue  # every rule of that Service (their chains stay declared, empty, unreached)
        kept.append(line)
    statuses = _verify(tmp_path, "nat-only", "\n".join(kept) + "\n", cluster)
    bad = {svc for (svc, _p, _t), s in statuses.items() if s == "mismatch"}
    assert bad == names
    assert "uncertain" not in statuses.values()
    rep, _ = diagnose_paths([tmp_path / "nat-only" / "iptables-save.txt", tmp_path / "nat-only" / "cluster.json"])
    named = {f.subject.get("service", "").split(":")[0] for f in rep.findings if f.subject}
    assert names <= named or any(f.cause == "service-rules-missing" for f in rep.findings)
    assert all(f.severity >= Severity.WARNING for f in rep.findings if f.cause == "service-rules-missing")


# -- the oracle -----------------------------------------------------------------------------------


@dataclass
class Svc:
    name: str
    ip: str
    nodeport: int | None
    endpoints: list[str]
    local: bool  # externalTrafficPolicy: Local


def _cluster(svcs: list[Svc]) -> dict[str, object]:
    items: list[dict[str, object]] = []
    for s in svcs:
        port: dict[str, object] = {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}
        spec: dict[str, object] = {"type": "ClusterIP", "clusterIP": s.ip, "clusterIPs": [s.ip], "ports": [port]}
        if s.nodeport:
            port["nodePort"] = s.nodeport
            spec["type"] = "NodePort"
            if s.local:
                spec["externalTrafficPolicy"] = "Local"
        items.append(
            {"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": "ns", "name": s.name}, "spec": spec}
        )
        items.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "namespace": "ns",
                    "name": f"{s.name}-x",
                    "labels": {"kubernetes.io/service-name": s.name},
                },
                "addressType": "IPv4",
                "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
                "endpoints": [
                    {"addresses": [ep], "conditions": {"ready": True}, "nodeName": "node-b"} for ep in s.endpoints
                ],
            }
        )
    items.append(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE},
            "spec": {"podCIDR": "10.244.1.0/24"},
            "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]},
        }
    )
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _nat(svcs: list[Svc], damage: dict[str, str]) -> str:
    """kube-proxy 1.20's nat table for ``svcs`` (no rules for a Service without endpoints; the
    external chain of a Local Service drops by mark when it has no local endpoint), with
    ``damage``: per Service, "jump" (its KUBE-SERVICES rule gone), "dnat" (its DNAT rules gone),
    "wrong" (DNAT to an address no endpoint has) or "extra" (rules written although it has no
    endpoints, to a dead address)."""
    decl = [":KUBE-SERVICES - [0:0]", ":KUBE-NODEPORTS - [0:0]", ":KUBE-MARK-MASQ - [0:0]", ":KUBE-MARK-DROP - [0:0]"]
    rules = [
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
        "-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000",
    ]
    svc_rules: list[str] = []
    for s in svcs:
        d = damage.get(s.name, "")
        eps = list(s.endpoints) or (["10.99.0.1"] if d == "extra" else [])
        if not eps:
            continue
        spn = f"ns/{s.name}:http"
        chain, xlb = f"KUBE-SVC-{s.name.upper()}", f"KUBE-XLB-{s.name.upper()}"
        decl.append(f":{chain} - [0:0]")
        if d != "jump":
            svc_rules.append(
                f'-A KUBE-SERVICES -d {s.ip}/32 -p tcp -m comment --comment "{spn} cluster IP" -m tcp --dport 80 -j {chain}'
            )
        if s.nodeport:
            target = xlb if s.local else chain
            if s.local:
                decl.append(f":{xlb} - [0:0]")
                rules.append(f'-A {xlb} -s {POD_CIDR} -m comment --comment "Redirect pods" -j {chain}')
                rules.append(f'-A {xlb} -m comment --comment "{spn} has no local endpoints" -j KUBE-MARK-DROP')
            rules.append(
                f'-A KUBE-NODEPORTS -p tcp -m comment --comment "{spn}" -m tcp --dport {s.nodeport} -j {target}'
            )
        for j, ep in enumerate(eps):
            sep = f"KUBE-SEP-{s.name.upper()}{j}"
            decl.append(f":{sep} - [0:0]")
            left = len(eps) - j
            prob = "" if left == 1 else f" -m statistic --mode random --probability {1 / left:.11f}"
            rules.append(f"-A {chain} -m comment --comment {spn}{prob} -j {sep}")
            if d == "dnat":
                continue
            to = "10.99.9.9" if d == "wrong" else ep
            rules.append(f"-A {sep} -p tcp -m comment --comment {spn} -m tcp -j DNAT --to-destination {to}:8080")
    tail = [
        '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS'
    ]
    head = [
        "*nat",
        ":PREROUTING ACCEPT [0:0]",
        ":INPUT ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":POSTROUTING ACCEPT [0:0]",
    ]
    base = ["-A PREROUTING -j KUBE-SERVICES", "-A OUTPUT -j KUBE-SERVICES"]
    return "\n".join(head + decl + base + rules + svc_rules + tail + ["COMMIT"]) + "\n"


def _filter(kind: str, svcs: list[Svc]) -> str:
    """A filter table: accept-all, drop-all, reject-all, or the one kube-proxy 1.20 writes (its
    "has no endpoints" REJECTs, the marked-packet drop of kubelet's KUBE-FIREWALL). Drop-all and
    reject-all refuse what nat did not translate and pass what it did: a filter table that refuses
    translated Service traffic is another component's firewall, a finding of its own that only a
    given filter table shows, never a completion a nat-only verdict may assume."""
    if kind == "accept":
        return "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
    if kind in ("drop", "reject"):
        verdict = "DROP" if kind == "drop" else "REJECT --reject-with icmp-port-unreachable"
        rules = [f"-A {c} -m conntrack ! --ctstate DNAT -j {verdict}" for c in ("INPUT", "FORWARD", "OUTPUT")]
        return (
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
            + "\n".join(rules)
            + "\nCOMMIT\n"
        )
    lines = [
        "*filter",
        ":INPUT ACCEPT [0:0]",
        ":FORWARD ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]",
        ":KUBE-EXTERNAL-SERVICES - [0:0]",
        ":KUBE-FIREWALL - [0:0]",
        ":KUBE-SERVICES - [0:0]",
        '-A INPUT -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
        "-A INPUT -j KUBE-FIREWALL",
        '-A FORWARD -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        "-A OUTPUT -j KUBE-FIREWALL",
        "-A FORWARD -m mark --mark 0x8000/0x8000 -j DROP",
        '-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" '
        "-m mark --mark 0x8000/0x8000 -j DROP",
    ]
    for s in svcs:
        if s.endpoints:
            continue
        spn = f"ns/{s.name}:http"
        lines.append(
            f'-A KUBE-SERVICES -d {s.ip}/32 -p tcp -m comment --comment "{spn} has no endpoints" -m tcp --dport 80 '
            "-j REJECT --reject-with icmp-port-unreachable"
        )
        if s.nodeport:
            lines.append(
                f'-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment "{spn} has no endpoints" -m addrtype '
                f"--dst-type LOCAL -m tcp --dport {s.nodeport} -j REJECT --reject-with icmp-port-unreachable"
            )
    return "\n".join([*lines, "COMMIT"]) + "\n"


def _oracle(complete: dict[str, dict[tuple[str, str, str], str]]) -> dict[tuple[str, str, str], str]:
    out = {}
    for key in complete["kube-proxy"]:
        verdicts = {c: complete[c][key] for c in complete}
        if all(v == "mismatch" for v in verdicts.values()):
            out[key] = "mismatch"
        elif verdicts["kube-proxy"] == "ok":
            out[key] = "ok"
        else:
            out[key] = "uncertain"
    return out


@st.composite
def _nodes(draw: st.DrawFn) -> tuple[list[Svc], dict[str, str]]:
    n = draw(st.integers(1, 5))
    svcs = []
    damage = {}
    for i in range(n):
        k = draw(st.integers(0, 3))
        nodeport = 30100 + i if draw(st.booleans()) else None
        local = nodeport is not None and draw(st.booleans())
        svcs.append(
            Svc(f"s{i}", f"10.96.0.{10 + i}", nodeport, [f"10.244.2.{10 * i + j + 1}" for j in range(k)], local)
        )
        d = draw(st.sampled_from(["", "", "jump", "dnat", "wrong", "extra"]))
        if d:
            damage[f"s{i}"] = d
    return svcs, damage


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(node=_nodes())
def test_nat_only_verdicts_agree_with_the_completions(
    tmp_path_factory: object, node: tuple[list[Svc], dict[str, str]]
) -> None:
    import tempfile

    svcs, damage = node
    cluster = _cluster(svcs)
    nat = _nat(svcs, damage)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        complete = {
            c: _verify(base, c, nat + _filter(c, svcs), cluster) for c in ("accept", "drop", "reject", "kube-proxy")
        }
        got = _verify(base, "nat-only", nat, cluster)
    want = _oracle(complete)
    assert got == want, {k: (got.get(k), want[k]) for k in want if got.get(k) != want[k]}


def test_an_untranslated_service_with_endpoints_is_a_mismatch_and_one_without_is_ok(tmp_path: Path) -> None:
    """The two halves of the rule, by hand: nat has no rule for either Service; the one with
    endpoints reaches none of them whatever filter does; the one without is refused by kube-proxy's
    own filter rule (its "has no endpoints" REJECT), which the dump would show if it had it."""
    svcs = [Svc("web", "10.96.0.20", None, ["10.244.2.5"], False), Svc("idle", "10.96.0.21", None, [], False)]
    statuses = _verify(tmp_path, "one", _nat(svcs, {"web": "jump"}), _cluster(svcs))
    assert {s for (svc, _p, _t), s in statuses.items() if svc == "ns/web"} == {"mismatch"}
    assert {s for (svc, _p, _t), s in statuses.items() if svc == "ns/idle"} == {"ok"}
