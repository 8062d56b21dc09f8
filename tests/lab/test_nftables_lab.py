"""kube-proxy's nftables mode on a real kernel: ``kpdoctor trace`` and ``kpdoctor verify`` agree
with what real TCP connections do, healthy and after each kind of breakage.

The node namespace of a :class:`~.topology.Lab` holds upstream kube-proxy's own nftables rules
(TestOverallNFTablesRules, loaded with real ``nft -f`` by :mod:`.nft_capture`); Pods 10.180.0.1-5
serve on port 80 and answer with their own address. kpdoctor reads what the node really has:
``nft -j list ruleset``, ``iptables-legacy-save`` and ``ip -j addr`` taken inside the node
namespace, plus the cluster's objects and kube-proxy's configuration from the fixture.

Connections come from the lab's client (on the node's link) and from the node itself. The
client is outside the pod CIDR (10.0.0.0/8), so kube-proxy masquerades its connections and Pods
answer the node, as in the iptables lab. To send verify's own packets for real, the stand-in
sources verify uses (a pod address, outside clients in and out of loadBalancerSourceRanges) are
added to the client as /32s: the node's default route points at the client, so answers to them
come back. The node's ICMP rate limit is switched off (a namespace sysctl), so every REJECT the
rules make really reaches the client as a port-unreachable instead of a rate-limited silence.

A mutation is made with real ``nft``/``iptables-legacy`` commands in the node namespace and
undone after its test (the whole ruleset is reloaded and compared with the healthy listing).
Every address is one the lab assigns to its own namespaces; everything is deleted at the end.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import UPSTREAM

from kpdoctor.bundle.loader import load as load_evidence
from kpdoctor.cli import app
from kpdoctor.dataplane.nftables.backend import NftablesBackend
from kpdoctor.dataplane.trace import trace
from kpdoctor.facts import Facts

from . import nft_capture
from .netns import Netns, require_lab
from .topology import Lab

require_lab()
if shutil.which("nft") is None:
    if os.environ.get("CI"):
        pytest.fail("the nftables lab must run in CI: nft is not installed", pytrace=False)
    pytest.skip("nft is not installed", allow_module_level=True)

FIX = UPSTREAM / "nftables"
NAME = "TestOverallNFTablesRules"
DUMP = (FIX / f"{NAME}.nft").read_text()
CLUSTER = FIX / f"{NAME}.cluster.json"
CONFIG = FIX / f"{NAME}.kube-proxy.yaml"
NODE_IP, CLIENT_IP = "192.168.0.2", "192.168.0.100"
PODS = ["10.180.0.1", "10.180.0.2", "10.180.0.3", "10.180.0.4", "10.180.0.5"]
IN_SOURCE_RANGES = "203.0.113.10"  # inside svc5's loadBalancerSourceRanges (203.0.113.0/25)
MANY = 200
SPLIT = 40  # connections per random split when sending verify's packets: (2/3)**40 < 1e-7
# Seconds a connection is given. A delivered one takes milliseconds; a dropped SYN is resent after
# TCP's initial retransmission timeout (1 s), and as the drop freed its unconfirmed conntrack entry
# the resent SYN is a new connection to the rules (numgen draws again, and may pick a backend the
# rules do not drop). Giving up before that keeps one connection = one trip through the rules.
WAIT = 0.8
LATE_WAIT = 5.0  # a connection sent again because it should have been answered (resend_late)

SVC1 = "service-ULMVA6XW-ns1/svc1/tcp/p80"
SVC4 = "service-LAUZTJTB-ns4/svc4/tcp/p80"
EP4 = "goto endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80"
EP5 = "goto endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80"

# Connections in parallel (each target in its own thread, so drops cost one timeout, not one
# each): argv TIMEOUT SRC,HOST,PORT... (SRC "-": the kernel picks it); prints a JSON list with,
# per target, the backend that answered, "refused", "timeout" or "error:ERRNO".
PROBE_SRC = r"""
import json, socket, sys
from concurrent.futures import ThreadPoolExecutor
timeout = float(sys.argv[1])
targets = [t.split(",") for t in sys.argv[2:]]
def one(t):
    src, host, port = t
    s = socket.socket()
    s.settimeout(timeout)
    try:
        if src != "-":
            s.bind((src, 0))
        s.connect((host, int(port)))
        return s.recv(64).decode() or "closed"
    except ConnectionRefusedError:
        return "refused"
    except (socket.timeout, TimeoutError):
        return "timeout"
    except OSError as e:
        return f"error:{e.errno}"
    finally:
        s.close()
with ThreadPoolExecutor(max(len(targets), 1)) as ex:
    print(json.dumps(list(ex.map(one, targets))))
"""

Target = tuple[str | None, str, int]  # (source or None, destination, port)


@dataclass
class Node:
    lab: Lab
    tmp: Path
    healthy: str  # `nft list ruleset` of the healthy node
    own: set[str]  # the client's extra /32 sources added so far


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    with Lab(NODE_IP, CLIENT_IP, PODS) as lab:
        lab.node.check(["sysctl", "-q", "-w", "net.ipv4.icmp_ratelimit=0"])
        nft_capture.load(lab.node, DUMP)
        with lab.servers(port=80):
            yield Node(lab, tmp_path_factory.mktemp("nft-lab"), nft_capture.listing(lab.node, json=False), set())


# --- what kpdoctor reads, and what it says -------------------------------------------------------


def capture(node: Node, name: str) -> list[Path]:
    """What kpdoctor reads from the node namespace now, plus the cluster file and kube-proxy's config."""
    d = node.tmp / name
    d.mkdir()
    ns = node.lab.node
    files = {
        "nft-ruleset.json": nft_capture.listing(ns),
        "ip-addr.json": node.lab.node_addresses(),
        "iptables-legacy-save.txt": ns.check(["iptables-legacy-save"]),
    }
    for fname, text in files.items():
        (d / fname).write_text(text)
    return [d / f for f in files] + [CLUSTER, CONFIG]


def verify(files: list[Path]) -> tuple[int, dict[str, Any]]:
    res = CliRunner().invoke(app, ["verify", "-f", "json", *map(str, files)])
    assert res.exit_code in (0, 1, 3), (res.exit_code, res.output, res.exception)
    return res.exit_code, json.loads(res.stdout)


def findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every finding, the ones folded under another included."""
    out = []
    for f in report["findings"]:
        out += [f, *f.get("folded", [])]
    return out


def named(report: dict[str, Any], code: str, text: str) -> list[dict[str, Any]]:
    """The findings of ``code`` whose summary or subject names ``text``."""
    return [
        f
        for f in findings(report)
        if f["code"] == code and (text in f["summary"] or text in str((f.get("subject") or {}).get("service")))
    ]


def bad(report: dict[str, Any]) -> set[str]:
    """NS/NAME:PORT of every result that is not ok."""
    return {f"{r['service']}:{r['port']}" for r in report["verification"]["results"] if r["status"] != "ok"}


def predict(
    files: list[Path], dst: str, port: int, src: str | None = CLIENT_IP, hook: str = "prerouting"
) -> dict[str, float]:
    """kpdoctor's trace of a new connection (Python API): backend address, or verdict -> probability."""
    evidence = load_evidence(files)
    try:
        facts = Facts(evidence)
        assert facts.running_mode.mode == "nftables", facts.running_mode
        backend = NftablesBackend(facts.nft_rules, facts.rulesets, facts.node_view.local(), record=True)
        [t] = trace(
            backend,
            facts.node_view,
            ipaddress.ip_address(dst),
            port,
            "tcp",
            ipaddress.ip_address(src) if src else None,
            hook,
        )
    finally:
        evidence.close()
    out: dict[str, float] = {}
    for b in t.branches:
        key = b.endpoint.rsplit(":", 1)[0] if b.endpoint and b.verdict == "ACCEPT" else b.verdict
        out[key] = out.get(key, 0.0) + b.probability
    return {k: round(v, 6) for k, v in out.items()}


def cli_trace(files: list[Path], to: str, src: str) -> tuple[int, dict[str, Any]]:
    res = CliRunner().invoke(app, ["trace", "--to", to, "--from", src, "-f", "json", *map(str, files)])
    assert res.exit_code in (0, 1, 3), (res.exit_code, res.output, res.exception)
    [t] = json.loads(res.stdout)["traces"]
    return res.exit_code, t


# --- what the kernel does ------------------------------------------------------------------------

KERNEL = {"REJECT": "refused", "DROP": "timeout"}


def as_seen(predicted: dict[str, float]) -> set[str]:
    """A trace's outcomes as a client sees them (a backend's address, refused or timeout)."""
    return {KERNEL.get(k, k) for k in predicted}


def probe(jobs: list[tuple[Netns, list[Target]]], timeout: float = WAIT) -> list[list[str]]:
    """What each connection reached, every namespace's connections at once."""
    procs = []
    for ns, targets in jobs:
        argv = [sys.executable, "-c", PROBE_SRC, str(timeout), *(f"{s or '-'},{h},{p}" for s, h, p in targets)]
        procs.append(subprocess.Popen(ns.exec_argv(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=60)
        assert p.returncode == 0, stderr
        out.append(json.loads(stdout))
    return out


def resend_late(ns: Netns, targets: list[Target], seen: list[str], answered: list[bool]) -> None:
    """Send again, once and given longer, each connection that timed out although it should be
    ``answered``: on this shared machine a late answer is the load (WAIT is short on purpose),
    while a rule that drops a connection drops it every time."""
    late = [i for i, got in enumerate(seen) if got == "timeout" and answered[i]]
    if late:
        again = probe([(ns, [targets[i] for i in late])], timeout=LATE_WAIT)[0]
        for i, got in zip(late, again, strict=True):
            seen[i] = got


def own(node: Node, src: str) -> None:
    """Give the client ``src`` (a /32 on its link): its connections can then come from there."""
    if src in node.own or src == CLIENT_IP:
        return
    assert ipaddress.ip_address(src).version == 4 and src != NODE_IP and src not in PODS, src
    node.lab.client.check(["ip", "addr", "add", f"{src}/32", "dev", "eth0"])
    node.own.add(src)


def seen_by_kernel(entry: dict[str, Any], dst: str) -> str:
    """What a client sees of one outcome verify evaluated (a result's ``actual`` entry)."""
    if entry["verdict"] == "ACCEPT" and entry["backend"]:
        return str(entry["backend"]).rsplit(":", 1)[0]
    if entry["verdict"] in KERNEL:
        return KERNEL[entry["verdict"]]
    if entry["verdict"] == "ACCEPT":  # not translated: to the node itself (nothing listens), or on
        return "refused" if dst == NODE_IP else "timeout"  # to the lab's router, which forwards nothing
    raise AssertionError(f"verify's outcome cannot be sent for real: {entry}")


def kernel_agrees_with_verify(node: Node, report: dict[str, Any]) -> None:
    """Send each of verify's results for real, from the source verify used (the node's own
    connections from the node, every other from the client), and compare what the connections
    reach with the outcomes verify evaluated: the same set, every random branch hit."""
    results = report["verification"]["results"]
    assert results
    jobs: dict[str, list[Target]] = {"client": [], "node": []}
    where: list[tuple[dict[str, Any], str, int, int, set[str]]] = []
    for r in results:
        dst, port = r["destination"].rsplit(":", 1)
        predicted = {seen_by_kernel(e, dst) for e in r["actual"]}
        side = "node" if r["traffic"].startswith("node-") else "client"
        if side == "client":
            own(node, r["source"])
        n = SPLIT if len(r["actual"]) > 1 else 2
        where.append((r, side, len(jobs[side]), n, predicted))
        jobs[side] += [(r["source"], dst, int(port))] * n
    seen_client, seen_node = probe([(node.lab.client, jobs["client"]), (node.lab.node, jobs["node"])])
    seen = {"client": seen_client, "node": seen_node}
    for side, ns in (("client", node.lab.client), ("node", node.lab.node)):
        answered = [False] * len(jobs[side])
        for _r, at_side, at, n, predicted in where:
            if at_side == side and "timeout" not in predicted:
                answered[at : at + n] = [True] * n
        resend_late(ns, jobs[side], seen[side], answered)
    wrong = []
    for r, side, at, n, predicted in where:
        got = Counter(seen[side][at : at + n])
        if set(got) != predicted:
            wrong.append(
                f"{r['service']}:{r['port']} {r['traffic']} {r['destination']} from {r['source']}: "
                f"verify says {sorted(predicted)}, the kernel did {dict(got)}"
            )
    assert not wrong, "\n".join(wrong)


@contextmanager
def mutated(node: Node, script: str) -> Iterator[None]:
    """The node with an ``nft -f`` script applied; afterwards the healthy ruleset again (reloaded)."""
    nft_capture.apply(node.lab.node, script)
    try:
        yield
    finally:
        node.lab.node.check(["nft", "flush", "ruleset"])
        nft_capture.load(node.lab.node, DUMP)
    assert nft_capture.listing(node.lab.node, json=False) == node.healthy, "the healthy ruleset was not restored"


def numgen_rule(node: Node, chain: str) -> int:
    """The handle of the rule of kube-proxy's ``chain`` that picks an endpoint (numgen vmap)."""
    doc = json.loads(node.lab.node.check(["nft", "-j", "list", "chain", "ip", "kube-proxy", chain]))
    [handle] = [o["rule"]["handle"] for o in doc["nftables"] if "rule" in o and '"numgen"' in json.dumps(o["rule"])]
    return int(handle)


# --- the tests -------------------------------------------------------------------------------------


def test_the_loaded_ruleset_is_the_recorded_one(node: Node) -> None:
    """The reordered knftables dump loads into the real kernel and lists back as the recorded
    `nft list ruleset` of tests/data (which the unit tests verify)."""
    assert node.healthy == (FIX / f"{NAME}.ruleset.txt").read_text()


def test_single_endpoint_lands_where_the_trace_says(node: Node) -> None:
    files = capture(node, "single")
    for dst, port, backend in [
        ("172.30.0.41", 80, "10.180.0.1"),  # ns1/svc1 ClusterIP
        ("172.30.0.43", 80, "10.180.0.3"),  # ns3/svc3 ClusterIP
        (NODE_IP, 3003, "10.180.0.3"),  # ns3/svc3 NodePort
        ("172.30.0.45", 80, "10.180.0.3"),  # ns5/svc5 (session affinity)
    ]:
        assert predict(files, dst, port) == {backend: 1.0}, (dst, port)
        assert node.lab.connect(dst, port, count=3) == [backend] * 3, (dst, port)
    # the CLI says the same, and that the client (outside the pod CIDR) is masqueraded
    code, t = cli_trace(files, "172.30.0.41:80", CLIENT_IP)
    assert code == 0
    assert [(o["verdict"], o["backend"], o["masquerade"]) for o in t["outcomes"]] == [("ACCEPT", "10.180.0.1:80", True)]
    assert any(s["chain"] == SVC1 for s in t["outcomes"][0]["steps"])


def test_two_endpoints_spread_over_the_predicted_backends(node: Node) -> None:
    files = capture(node, "many")
    predicted = predict(files, "172.30.0.44", 80)
    assert predicted == {"10.180.0.4": 0.5, "10.180.0.5": 0.5}
    seen = Counter(node.lab.connect("172.30.0.44", 80, count=MANY))
    assert sum(seen.values()) == MANY
    assert set(seen) == set(predicted), seen  # every connection on a predicted backend, each one hit
    assert min(seen.values()) > MANY * 0.3, seen  # 50/50 (p < 1e-8 of failing by chance)


def test_predicted_reject_and_drop_fail_for_real(node: Node) -> None:
    files = capture(node, "refused")
    own(node, IN_SOURCE_RANGES)
    cases: list[tuple[Target, dict[str, float]]] = [
        ((None, "172.30.0.41", 81), {"REJECT": 1.0}),  # a port ns1/svc1 does not declare: cluster-ips-check
        ((None, "172.30.0.46", 80), {"REJECT": 1.0}),  # ns6/svc6 has no endpoints
        ((None, "172.30.0.47", 80), {"DROP": 1.0}),  # an unallocated address of the Service CIDR
        ((None, "5.6.7.8", 80), {"DROP": 1.0}),  # ns5/svc5's LB, client outside loadBalancerSourceRanges
        ((None, NODE_IP, 3001), {"DROP": 1.0}),  # ns2/svc2 NodePort, Local policy, no local endpoint
        ((IN_SOURCE_RANGES, "5.6.7.8", 80), {"10.180.0.3": 1.0}),  # the same LB from inside the ranges
    ]
    for (src, dst, port), want in cases:
        assert predict(files, dst, port, src or CLIENT_IP) == want, (src, dst, port)
    targets = [t for t, _ in cases]
    want_seen = [next(iter(as_seen(want))) for _, want in cases]
    [seen] = probe([(node.lab.client, targets)])
    resend_late(node.lab.client, targets, seen, [w != "timeout" for w in want_seen])
    assert seen == want_seen
    code, t = cli_trace(files, "5.6.7.8:80", CLIENT_IP)
    assert code == 1 and [o["verdict"] for o in t["outcomes"]] == ["DROP"]
    last = t["outcomes"][0]["steps"][-1]
    assert last["chain"] == "firewall-HVFWP5L3-ns5/svc5/tcp/p80" and "203.0.113.0/25 drop" in last["rule"], last


def test_the_healthy_node_verifies_clean_and_the_kernel_agrees(node: Node) -> None:
    code, report = verify(capture(node, "healthy"))
    ver = report["verification"]
    assert code == 0, [
        (r["service"], r["traffic"], r["status"], r["note"]) for r in ver["results"] if r["status"] != "ok"
    ]
    assert ver["evaluated"] and ver["proxy_mode"]["mode"] == "nftables"
    assert ver["services_checked"] == 6 and ver["mismatches"] == 0 and ver["uncertain"] == 0
    assert ver["stale_rules"] == [] and ver["not_evaluated"] == []
    assert [f["code"] for f in report["findings"] if f["severity"] in ("critical", "warning")] == []
    kernel_agrees_with_verify(node, report)


def test_a_deleted_service_element(node: Node) -> None:
    with mutated(node, "delete element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 }"):
        files = capture(node, "deleted-element")
        code, report = verify(files)
        assert code == 1 and bad(report) == {"ns1/svc1:p80"}
        assert named(report, "KP200", "ns1/svc1:p80") or named(report, "KP202", "ns1/svc1:p80"), findings(report)
        assert predict(files, "172.30.0.41", 80) == {"REJECT": 1.0}
        assert node.lab.connect("172.30.0.41", 80, count=1) == ["refused"]
        kernel_agrees_with_verify(node, report)
    assert node.lab.connect("172.30.0.41", 80, count=1) == ["10.180.0.1"]


def test_a_stale_service_element(node: Node) -> None:
    stale = f"add element ip kube-proxy service-ips {{ 172.30.0.99 . tcp . 80 : goto {SVC1} }}"
    with mutated(node, stale):
        code, report = verify(capture(node, "stale-element"))
        assert code == 1 and bad(report) == set()
        [s] = report["verification"]["stale_rules"]
        assert (s["destination"], s["named"], s["backends"]) == ("172.30.0.99:80", "ns1/svc1:p80", ["10.180.0.1:80"])
        assert named(report, "KP201", "172.30.0.99:80"), findings(report)
        # the stale element really forwards: from a Pod (as verify evaluates it) and from outside
        pod = report["verification"]["results"][0]["source"]
        own(node, pod)
        targets: list[Target] = [(pod, "172.30.0.99", 80), (None, "172.30.0.99", 80)]
        [seen] = probe([(node.lab.client, targets)])
        resend_late(node.lab.client, targets, seen, [True, True])
        assert seen == ["10.180.0.1", "10.180.0.1"]
    assert probe([(node.lab.client, [(None, "172.30.0.99", 80)])]) == [["timeout"]]  # healthy: dropped


def test_a_backend_missing_from_the_numgen_map(node: Node) -> None:
    rule = (
        f"replace rule ip kube-proxy {SVC4} handle {numgen_rule(node, SVC4)} numgen random mod 1 vmap {{ 0 : {EP4} }}"
    )
    with mutated(node, rule):
        files = capture(node, "missing-backend")
        code, report = verify(files)
        assert code == 1 and bad(report) == {"ns4/svc4:p80"}
        [f] = named(report, "KP202", "ns4/svc4:p80")
        assert "10.180.0.5" in f["summary"], f["summary"]
        assert predict(files, "172.30.0.44", 80) == {"10.180.0.4": 1.0}
        assert Counter(node.lab.connect("172.30.0.44", 80, count=20)) == Counter({"10.180.0.4": 20})
        kernel_agrees_with_verify(node, report)


def test_a_numgen_map_with_a_gap(node: Node) -> None:
    rule = (
        f"replace rule ip kube-proxy {SVC4} handle {numgen_rule(node, SVC4)} "
        f"numgen random mod 3 vmap {{ 0 : {EP4}, 1 : {EP5} }}"
    )
    with mutated(node, rule):
        files = capture(node, "gap")
        code, report = verify(files)
        assert code == 1 and bad(report) == {"ns4/svc4:p80"}
        notes = [r["note"] for r in report["verification"]["results"] if r["status"] == "mismatch"]
        assert notes and all("no element for 2" in n for n in notes), notes
        # what falls through the map is not translated: kube-proxy's cluster-ips-check rejects it
        third = round(1 / 3, 6)
        assert predict(files, "172.30.0.44", 80) == {"10.180.0.4": third, "10.180.0.5": third, "REJECT": third}
        seen = Counter(node.lab.connect("172.30.0.44", 80, count=60))
        assert set(seen) == {"10.180.0.4", "10.180.0.5", "refused"}, seen  # (2/3)**60 of missing one
        kernel_agrees_with_verify(node, report)


def test_a_drop_in_another_table_at_an_earlier_priority(node: Node) -> None:
    firewall = (
        "add table inet filter\n"
        "add chain inet filter prerouting { type filter hook prerouting priority -200 ; }\n"
        "add rule inet filter prerouting ip daddr 172.30.0.44 drop\n"
    )
    with mutated(node, firewall):
        files = capture(node, "firewall")
        code, report = verify(files)
        assert code == 1 and bad(report) == {"ns4/svc4:p80"}
        [f] = named(report, "KP204", "ns4/svc4:p80")
        assert any("ip daddr 172.30.0.44 drop" in e["text"] for e in f["evidence"]), f["evidence"]
        assert predict(files, "172.30.0.44", 80) == {"DROP": 1.0}
        assert predict(files, "192.168.99.33", 80) == {"10.180.0.4": 0.5, "10.180.0.5": 0.5}  # its external IP
        assert predict(files, "172.30.0.44", 80, src=None, hook="output") == {"10.180.0.4": 0.5, "10.180.0.5": 0.5}
        [seen] = probe([(node.lab.client, [(None, "172.30.0.44", 80)])])
        assert seen == ["timeout"]  # the drop really blocks it
        kernel_agrees_with_verify(node, report)  # and only it: the external IP and the node still get through


def test_a_drop_in_an_iptables_legacy_table(node: Node) -> None:
    rule = ["FORWARD", "-d", "10.180.0.4", "-j", "DROP"]
    node.lab.node.check(["iptables-legacy", "-A", *rule])
    try:
        files = capture(node, "legacy")
        assert "-A FORWARD -d 10.180.0.4/32 -j DROP" in files[2].read_text()
        code, report = verify(files)
        assert code == 1 and bad(report) == {"ns4/svc4:p80"}
        [f] = named(report, "KP204", "ns4/svc4:p80")
        assert any(e["artifact"].endswith("iptables-legacy-save.txt") for e in f["evidence"]), f["evidence"]
        assert predict(files, "172.30.0.44", 80) == {"10.180.0.5": 0.5, "DROP": 0.5}
        [seen] = probe([(node.lab.client, [(None, "172.30.0.44", 80)] * 20)])
        assert set(seen) == {"10.180.0.5", "timeout"}, seen  # never 10.180.0.4; 2**-20 of missing one
        kernel_agrees_with_verify(node, report)
    finally:
        node.lab.node.check(["iptables-legacy", "-D", *rule])
    assert "10.180.0.4" in node.lab.connect("172.30.0.44", 80, count=20)


NATIVE_IP_FILTER = (  # as /etc/nftables.conf often writes it: a native table, not iptables-nft's
    "add table ip filter\n"
    "add chain ip filter forward { type filter hook forward priority 0 ; }\n"
    "add rule ip filter forward ip daddr 10.180.0.4 drop\n"
)


def test_a_drop_in_a_native_nftables_table_named_filter(node: Node) -> None:
    with mutated(node, NATIVE_IP_FILTER):
        files = capture(node, "native-ip-filter")
        code, report = verify(files)
        assert code == 1 and bad(report) == {"ns4/svc4:p80"}
        [f] = named(report, "KP204", "ns4/svc4:p80")
        assert any("ip daddr 10.180.0.4 drop" in e["text"] for e in f["evidence"]), f["evidence"]
        assert predict(files, "172.30.0.44", 80) == {"10.180.0.5": 0.5, "DROP": 0.5}
        [seen] = probe([(node.lab.client, [(None, "172.30.0.44", 80)] * 20)])
        assert set(seen) == {"10.180.0.5", "timeout"}, seen


def test_live_verify_sees_a_drop_in_a_native_nftables_table_named_filter(node: Node) -> None:
    """iptables-nft-save (which --live collects) shows a hand-written `table ip filter` only as
    "incompatible": its rules are evaluated from the nftables listing, not left out."""
    tmp = node.tmp / "live-native-ip-filter"
    tmp.mkdir()
    with mutated(node, NATIVE_IP_FILTER):
        assert "incompatible" in node.lab.node.check(["iptables-nft-save"])  # iptables-nft cannot show it
        [seen] = probe([(node.lab.client, [(None, "172.30.0.44", 80)] * 20)])
        assert set(seen) == {"10.180.0.5", "timeout"}, seen  # the kernel drops half of ns4/svc4
        code, report = verify_live(node.lab.node, tmp)
    assert code == 1 and bad(report) == {"ns4/svc4:p80"}, report["verification"]["results"]
    assert named(report, "KP204", "ns4/svc4:p80"), findings(report)


def verify_live(ns: Netns, tmp: Path) -> tuple[int, dict[str, Any]]:
    """``kpdoctor verify --live`` in the node namespace, with the cluster and config as files."""
    argv = [sys.executable, "-m", "kpdoctor", "verify", "--live", "--no-cluster", "--interval", "1"]
    argv += ["--format", "json", "--save-bundle", str(tmp / "live.tar.gz"), str(CLUSTER), str(CONFIG)]
    res = ns.run(argv, timeout=120)
    assert res.returncode in (0, 1), f"exit {res.returncode}: {res.stderr}"
    return res.returncode, json.loads(res.stdout)


def test_live_verify_in_the_node_namespace_is_clean_and_nftables(node: Node) -> None:
    tmp = node.tmp / "live"
    tmp.mkdir()
    code, report = verify_live(node.lab.node, tmp)
    ver = report["verification"]
    assert code == 0, [
        (r["service"], r["traffic"], r["status"], r["note"]) for r in ver["results"] if r["status"] != "ok"
    ]
    assert ver["evaluated"] and ver["proxy_mode"]["mode"] == "nftables"
    assert "node/nft-ruleset.json" in ver["proxy_mode"]["how"], ver["proxy_mode"]  # read from the live node
    assert ver["services_checked"] == 6 and ver["ok"] == len(ver["results"]) and ver["stale_rules"] == []
    with tarfile.open(tmp / "live.tar.gz") as tf:
        assert any(n.endswith("/node/nft-ruleset.json") for n in tf.getnames())


def test_live_verify_sees_a_broken_live_ruleset(node: Node) -> None:
    """The same live run after a real deletion: it reads the namespace's ruleset, not a file."""
    tmp = node.tmp / "live-broken"
    tmp.mkdir()
    with mutated(node, "delete element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 }"):
        code, report = verify_live(node.lab.node, tmp)
    assert code == 1 and bad(report) == {"ns1/svc1:p80"}
    [f] = named(report, "KP200", "ns1/svc1:p80") or named(report, "KP202", "ns1/svc1:p80")
    assert any(e["artifact"] == "node/nft-ruleset.json" for e in f["evidence"]), f["evidence"]
