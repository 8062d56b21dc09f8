"""The evaluator walks real iptables-save output (both backends) as the kernel would."""

from __future__ import annotations

import ipaddress
import json

import pytest
from conftest import UPSTREAM, obfuscate

from kpdoctor.dataplane.iptables.compile import compile_tables
from kpdoctor.dataplane.iptables.evaluate import Evaluator, Packet, _apply_mark
from kpdoctor.parse.iptables import parse_save

FIX = UPSTREAM / "iptables"
NODE_IP = ipaddress.ip_address("192.168.0.2")
A = ipaddress.ip_address


def evaluator(text: str) -> Evaluator:
    return Evaluator(compile_tables(parse_save(text, "x", None, 4).tables), [NODE_IP])


def summary(
    ev: Evaluator, src: str, dst: str, port: int, hook: str = "prerouting"
) -> list[tuple[float, str, str | None]]:
    return [(round(o.probability, 6), o.verdict, o.endpoint) for o in ev.run(Packet(A(src), A(dst), "tcp", port), hook)]


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_overall_rules(backend: str) -> None:
    ev = evaluator((FIX / f"TestOverallIPTablesRules.{backend}.save").read_text())
    pod, outside = "10.0.1.1", "203.0.113.5"
    assert summary(ev, pod, "172.30.0.41", 80) == [(1.0, "ACCEPT", "10.180.0.1:80")]
    assert summary(ev, pod, "172.30.0.44", 80) == [(0.5, "ACCEPT", "10.180.0.4:80"), (0.5, "ACCEPT", "10.180.0.5:80")]
    # eTP=Local without local endpoints: pods still reach it, outside clients are dropped
    assert summary(ev, pod, "192.168.99.22", 80) == [(1.0, "ACCEPT", "10.180.0.2:80")]
    assert summary(ev, outside, "192.168.99.22", 80) == [(1.0, "DROP", None)]
    assert summary(ev, outside, str(NODE_IP), 3001) == [(1.0, "DROP", None)]
    # NodePort from outside and ClusterIP from the node itself are masqueraded
    [np] = ev.run(Packet(A(outside), NODE_IP, "tcp", 3003))
    assert np.endpoint == "10.180.0.3:80" and np.state.masquerade
    [own] = ev.run(Packet(NODE_IP, A("172.30.0.41"), "tcp", 80), "output")
    assert own.endpoint == "10.180.0.1:80" and own.state.masquerade
    # session affinity is reported, not simulated
    [aff] = ev.run(Packet(A(pod), A("172.30.0.45"), "tcp", 80))
    assert aff.endpoint == "10.180.0.3:80" and aff.state.affinity
    # no Service: falls through untouched
    assert summary(ev, pod, "172.30.0.99", 80) == [(1.0, "ACCEPT", None)]


def _probes(name: str) -> list[tuple[str, str, int]]:
    doc = json.loads((FIX / f"{name}.cluster.json").read_text())
    out = []
    for item in doc["items"]:
        if item.get("kind") != "Service":
            continue
        spec = item["spec"]
        for port in spec.get("ports", []):
            for ip in [spec.get("clusterIP"), *spec.get("externalIPs", [])]:
                if ip and ip != "None":
                    out.append((ip, port.get("protocol", "TCP").lower(), port["port"]))
            if port.get("nodePort"):
                out.append((str(NODE_IP), port.get("protocol", "TCP").lower(), port["nodePort"]))
    return out


@pytest.mark.parametrize("name", sorted({p.name.rsplit(".", 2)[0] for p in FIX.glob("*.save")}))
def test_verdicts_survive_stripped_comments_and_renamed_chains(name: str) -> None:
    text = (FIX / f"{name}.nft.save").read_text()
    probes = _probes(name)
    assert probes
    for seed in (1, 2):
        ev1, ev2 = evaluator(text), evaluator(obfuscate(text, seed))
        for dst, proto, port in probes:
            for src, hook in (("10.0.1.1", "prerouting"), ("203.0.113.5", "prerouting"), (str(NODE_IP), "output")):
                pkt = Packet(A(src), A(dst), proto, port)
                a = [(round(o.probability, 9), o.verdict, o.endpoint, o.state.masquerade) for o in ev1.run(pkt, hook)]
                b = [(round(o.probability, 9), o.verdict, o.endpoint, o.state.masquerade) for o in ev2.run(pkt, hook)]
                assert a == b, (dst, port, src)


def test_statistic_probabilities_are_exact() -> None:
    rules = "*nat\n:PREROUTING ACCEPT [0:0]\n:S - [0:0]\n-A PREROUTING -d 10.96.0.10/32 -p tcp -m tcp --dport 53 -j S\n"
    eps = ["10.1.0.1", "10.1.0.2", "10.1.0.3"]
    for i, ep in enumerate(eps):
        stat = f"-m statistic --mode random --probability {1 / (len(eps) - i):.10f} " if i < len(eps) - 1 else ""
        rules += f"-A S {stat}-p tcp -j DNAT --to-destination {ep}:53\n"
    rules += "COMMIT\n"
    out = summary(evaluator(rules), "10.0.1.1", "10.96.0.10", 53)
    assert sorted(b or "" for _, _, b in out) == sorted(f"{e}:53" for e in eps)
    assert all(abs(p - 1 / 3) < 1e-6 for p, _, _ in out)


def test_unknown_match_is_uncertain_at_its_rule() -> None:
    rules = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m hashlimit --hashlimit-above 5/sec -j DROP\nCOMMIT\n"
    [o] = evaluator(rules).run(Packet(A("203.0.113.5"), NODE_IP, "tcp", 22))
    assert o.verdict == "UNCERTAIN" and "line 3" in o.reason


def test_mark_semantics() -> None:
    assert _apply_mark(0, ("set-xmark", 0x4000, 0x4000)) == 0x4000
    assert _apply_mark(0x4000, ("set-xmark", 0x4000, 0x0)) == 0x0  # KUBE-POSTROUTING's xor form
    assert _apply_mark(0x8001, ("or-mark", 0x4000, 0)) == 0xC001
    assert _apply_mark(0xC000, ("xor-mark", 0x4000, 0)) == 0x8000


def test_undecidable_rule_that_does_not_matter_is_not_uncertain() -> None:
    """AWS VPC CNI's `-i eth0 ... -j CONNMARK` cannot be decided without interface names, but
    matching or not changes nothing: the outcome is certain and the rule is reported."""
    rules = (
        "*mangle\n:PREROUTING ACCEPT [0:0]\n"
        '-A PREROUTING -i eth0 -m comment --comment "AWS, primary ENI" -m addrtype --dst-type LOCAL '
        "--limit-iface-in -j CONNMARK --set-xmark 0x80/0x80\n"
        "COMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:S - [0:0]\n"
        "-A PREROUTING -d 10.96.0.10/32 -p tcp -m tcp --dport 53 -j S\n"
        "-A S -p tcp -j DNAT --to-destination 10.1.0.1:53\nCOMMIT\n"
        "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -i eni+ -j ACCEPT\nCOMMIT\n"
    )
    ev = evaluator(rules)
    [o] = ev.run(Packet(A("10.0.1.1"), A("10.96.0.10"), "tcp", 53))
    assert (o.verdict, o.endpoint) == ("ACCEPT", "10.1.0.1:53")
    assert any("line 3" in u for u in ev.undecided)
    # ... but an undecidable DROP does decide the outcome
    drop = rules.replace("-A FORWARD -i eni+ -j ACCEPT", "-A FORWARD -i eni+ -j DROP")
    [u] = evaluator(drop).run(Packet(A("10.0.1.1"), A("10.96.0.10"), "tcp", 53))
    assert u.verdict == "UNCERTAIN" and "line 13" in u.reason and "decides the outcome" in u.reason
