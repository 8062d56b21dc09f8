"""The node agent's parts, each against real evidence: the verification carried over between
cycles (equal to a full one after every kind of change), the counter gate, the NPD plugin, and
the Events and Node condition written to the live replay API server."""

from __future__ import annotations

import copy
import ipaddress
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import UPSTREAM
from kubeapi_replay import LiveCluster, ReplayServer
from kubernetes import client as k8s

from kpdoctor import memo
from kpdoctor.agent.counters import CounterGate, TokenBucket
from kpdoctor.agent.node_status import NodeReporter, camel, condition_for
from kpdoctor.bundle.loader import load
from kpdoctor.dataplane.reuse import Carried, Reuse
from kpdoctor.diagnose import diagnose_evidence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import gen_cluster  # type: ignore[import-not-found,unused-ignore]

FIX = UPSTREAM / "iptables"
NAME = "TestOverallIPTablesRules"
RULES = (FIX / f"{NAME}.legacy.save").read_text()
CLUSTER = json.loads((FIX / f"{NAME}.cluster.json").read_text())


# -- the verification carried over -------------------------------------------------------------------


def verify(tmp: Path, rules: str, cluster: dict[str, Any], reuse: Reuse | None) -> dict[str, Any]:
    """One cycle's verification of these rules and objects (always the same file names, as the
    agent's artifacts have)."""
    (tmp / "iptables-save.txt").write_text(rules)
    (tmp / "cluster.json").write_text(json.dumps(cluster))
    ev = load([tmp / "iptables-save.txt", tmp / "cluster.json"])
    try:
        report = diagnose_evidence(ev, node="test-node", command="verify", reuse=reuse)
    finally:
        ev.close()
        memo.clear()
    assert report.verification is not None
    doc: dict[str, Any] = report.verification.to_json()
    return doc


def _items(doc: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    return next(i for i in doc["items"] if i["kind"] == kind and i["metadata"]["name"] == name)


def _drop_line(pattern: str) -> Callable[[str], str]:
    def change(rules: str) -> str:
        lines = rules.splitlines(keepends=True)
        i = next(i for i, ln in enumerate(lines) if re.search(pattern, ln))
        return "".join(lines[:i] + lines[i + 1 :])

    return change


def _insert_before(pattern: str, line: str) -> Callable[[str], str]:
    def change(rules: str) -> str:
        lines = rules.splitlines(keepends=True)
        i = next(i for i, ln in enumerate(lines) if re.search(pattern, ln))
        return "".join([*lines[:i], line + "\n", *lines[i:]])

    return change


def _same(rules: str) -> str:
    return rules


def _slice_without_first_endpoint(doc: dict[str, Any]) -> None:
    _items(doc, "EndpointSlice", "svc4-1")["endpoints"].pop(0)


def _new_service(doc: dict[str, Any]) -> None:
    svc = copy.deepcopy(_items(doc, "Service", "svc1"))
    svc["metadata"].update(name="svc9", namespace="ns9")
    svc["spec"]["clusterIP"] = svc["spec"]["clusterIPs"][0] = "172.30.0.99"
    doc["items"].append(svc)


def _session_affinity(doc: dict[str, Any]) -> None:
    _items(doc, "Service", "svc2")["spec"]["sessionAffinity"] = "ClientIP"


def _node_address(doc: dict[str, Any]) -> None:
    _items(doc, "Node", "test-node")["status"]["addresses"] = [{"type": "InternalIP", "address": "192.168.0.9"}]


def _swap_svc4_rules(rules: str) -> str:
    """svc4's two endpoint rules in the other order (the same texts: the 50 % one last)."""
    lines = rules.splitlines(keepends=True)
    i = next(i for i, ln in enumerate(lines) if ln.startswith("-A KUBE-SVC-4SW47YFZTEDKD3PK") and "statistic" in ln)
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return "".join(lines)


def _drop_sep_chain(rules: str) -> str:
    """A KUBE-SEP chain gone (its declaration and rules), the jump to it left: an unknown target."""
    sep = "KUBE-SEP-UKSFD7AGPMPPLUHC"
    return "".join(ln for ln in rules.splitlines(keepends=True) if sep not in ln or "-j " + sep in ln)


CHANGES: dict[str, tuple[Callable[[str], str], Callable[[dict[str, Any]], None] | None]] = {
    "two rules of a chain swapped (the same texts)": (_swap_svc4_rules, None),
    "FORWARD's policy DROP": (lambda r: r.replace(":FORWARD ACCEPT [0:0]", ":FORWARD DROP [0:0]"), None),
    "a chain jumped to gone": (_drop_sep_chain, None),
    "nothing": (_same, None),
    "a DNAT rule deleted": (_drop_line(r"-A KUBE-SEP-\S+ .*DNAT"), None),
    "a DROP inserted at the top of KUBE-SERVICES": (
        _insert_before(r"^-A KUBE-SERVICES ", "-A KUBE-SERVICES -d 172.30.0.41/32 -p tcp -j DROP"),
        None,
    ),
    "a catch-all DROP in FORWARD": (_insert_before(r"^-A FORWARD ", "-A FORWARD -j DROP"), None),
    "a rule above every Service (lines move)": (
        _insert_before(r"^-A KUBE-SERVICES ", "-A KUBE-SERVICES -d 10.255.255.1/32 -j RETURN"),
        None,
    ),
    "an endpoint removed from a slice": (_same, _slice_without_first_endpoint),
    "a Service added without rules": (_same, _new_service),
    "session affinity asked for": (_same, _session_affinity),
    "the node's address changed": (_same, _node_address),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_carried_over_verification_equals_a_full_one(tmp_path: Path, change: str) -> None:
    change_rules, change_cluster = CHANGES[change]
    first = Reuse(None)
    verify(tmp_path, RULES, CLUSTER, first)
    cluster = copy.deepcopy(CLUSTER)
    if change_cluster is not None:
        change_cluster(cluster)
    rules = change_rules(RULES)
    again = Reuse(first.next)
    incremental = verify(tmp_path, rules, cluster, again)
    full = verify(tmp_path, rules, cluster, None)
    assert incremental == full
    if change == "nothing":
        assert again.evaluated == 0 and again.reused == first.evaluated
    elif change in ("an endpoint removed from a slice", "a DNAT rule deleted", "session affinity asked for"):
        assert again.reused > 0 and again.evaluated > 0  # only the Service that changed is evaluated


def test_carried_results_keep_their_objects_and_cite_the_lines_their_rules_moved_to(tmp_path: Path) -> None:
    """A chain no packet enters, added at the top of the dump, moves every rule down: the carried
    results are the previous objects (not copies), and their citations are at the new lines."""
    first = Reuse(None)
    verify(tmp_path, RULES, CLUSTER, first)
    before = {k: kept.result for k, kept in first.next.kept.items()}
    old_lines = {k: [c.line for c in r.rules] for k, r in before.items()}
    rules = _insert_before(r"^-A ", "-A KPD-UNUSED -j RETURN")(_insert_before(r"^:", ":KPD-UNUSED - [0:0]")(RULES))
    lines = rules.splitlines()
    again = Reuse(first.next)
    verify(tmp_path, rules, CLUSTER, again)
    carried = [k for k, kept in again.next.kept.items() if kept.result is before.get(k)]
    assert again.reused > 0 and len(carried) == again.reused
    moved = 0
    for k in carried:
        for c, was in zip(before[k].rules, old_lines[k], strict=True):
            if c.line is not None:
                assert lines[c.line - 1].strip() == c.text  # the citation names the rule's line now
                moved += c.line != was
    assert moved > 0


def test_a_change_of_setting_evaluates_everything(tmp_path: Path) -> None:
    first = Reuse(None)
    verify(tmp_path, RULES, CLUSTER, first)
    cluster = copy.deepcopy(CLUSTER)
    _node_address(cluster)
    again = Reuse(first.next)
    verify(tmp_path, RULES, cluster, again)
    assert again.full and again.reused == 0


def test_nftables_mode_carries_over_only_unchanged_rules(tmp_path: Path) -> None:
    """A backend that records nothing (nftables) depends on all of its rules: unchanged, every
    result is carried over; one rule changed, every case is evaluated again."""
    nft = UPSTREAM / "nftables"
    files = []
    for x in ("ruleset.json", "cluster.json", "kube-proxy.yaml"):
        files.append(tmp_path / f"TestOverallNFTablesRules.{x}")
        files[-1].write_text((nft / files[-1].name).read_text())

    def run(reuse: Reuse) -> dict[str, Any]:
        ev = load(files)
        try:
            report = diagnose_evidence(ev, node="test-node", command="verify", reuse=reuse)
        finally:
            ev.close()
            memo.clear()
        return report.verification.to_json() if report.verification else {}

    first = Reuse(None)
    a = run(first)
    assert a.get("proxy_mode", {}).get("mode") == "nftables" and first.evaluated > 0
    again = Reuse(first.next)
    assert run(again) == a
    assert again.evaluated == 0 and again.reused == first.evaluated
    # the same rules with one element more: a new setting, every case evaluated
    text = files[0].read_text()
    ruleset = json.loads(text)
    ruleset["nftables"].append(ruleset["nftables"][-1])  # the last rule twice
    files[0].write_text(json.dumps(ruleset))
    third = Reuse(again.next)
    run(third)
    assert third.full and third.reused == 0


def _generated(n: int) -> tuple[str, dict[str, Any]]:
    """A generated node of ``n`` Services x 3 endpoints (bench/gen_cluster.py): its KUBE-SERVICES
    is long enough to be indexed by destination, the part a Service's packets read of it."""
    dump, cluster = gen_cluster.generate(n, 3)
    return f"# Generated by iptables-save v1.8.9 on Sat Nov 21 10:00:00 2026\n{dump}# Completed\n", cluster


def _sorted_kube_services(rules: str) -> str:
    """KUBE-SERVICES' rules in another order (each Service's rule moves, none changes)."""
    lines = rules.splitlines(keepends=True)
    at = [i for i, ln in enumerate(lines) if ln.startswith("-A KUBE-SERVICES -d ")]
    for i, ln in zip(at, sorted((lines[i] for i in at), reverse=True), strict=True):
        lines[i] = ln
    return "".join(lines)


GENERATED_CHANGES: dict[str, Callable[[str], str]] = {
    "nothing": _same,
    "a Service's KUBE-SERVICES rule deleted": _drop_line(r"^-A KUBE-SERVICES -d 172\.16\.0\.12/32 "),
    "a rule every packet sees added to KUBE-SERVICES": _insert_before(
        r"^-A KUBE-SERVICES -d ", "-A KUBE-SERVICES -p udp -m udp --dport 53 -j RETURN"
    ),
    "a DROP for one Service's address added to KUBE-SERVICES": _insert_before(
        r"^-A KUBE-SERVICES -d ", "-A KUBE-SERVICES -d 172.16.0.20/32 -p tcp -j DROP"
    ),
    "KUBE-SERVICES reordered": _sorted_kube_services,
    "an endpoint's DNAT deleted": _drop_line(r"-A KUBE-SEP-\S+ .*DNAT --to-destination 10\.0\.\d+\.\d+:8080"),
    "the nat table gone": lambda r: re.sub(r"\*nat\n.*?COMMIT\n", "", r, flags=re.S),
}


@pytest.mark.parametrize("walk", ["native", "python"])
@pytest.mark.parametrize("change", list(GENERATED_CHANGES))
def test_an_indexed_chain_s_change_evaluates_again_only_the_cases_that_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str, walk: str
) -> None:
    """On a node of 40 Services (KUBE-SERVICES indexed by destination), walked by the native core
    or in Python: after each change the incremental verification equals a full one, and a change
    to what only some Services' packets read evaluates only those again."""
    monkeypatch.setenv("KPDOCTOR_CORE", walk)
    rules, cluster = _generated(40)
    first = Reuse(None)
    verify(tmp_path, rules, cluster, first)
    again = Reuse(first.next)
    changed = GENERATED_CHANGES[change](rules)
    assert (changed == rules) == (change == "nothing")
    incremental = verify(tmp_path, changed, cluster, again)
    assert incremental == verify(tmp_path, changed, cluster, None)
    if change == "the nat table gone":
        assert again.full  # the tables given are part of what every result shares
        return
    assert not again.full and again.reused + again.evaluated == first.evaluated
    if change in ("nothing", "KUBE-SERVICES reordered"):
        assert again.evaluated == 0  # the same rules for every packet: every result carried over
    elif change == "a rule every packet sees added to KUBE-SERVICES":
        walked = sum(1 for kept in first.next.kept.values() if kept.deps is None or kept.deps)
        assert again.evaluated == walked  # every case whose packet was walked (all enter KUBE-SERVICES)
    else:
        assert 0 < again.evaluated < first.evaluated / 10


def test_a_change_of_walk_between_cycles_evaluates_everything_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cycle walked by the native core, the next by the Python walk (the core no longer
    loads, or KPDOCTOR_CORE changed), and back: what one walk recorded is never taken for the
    other's, every case is evaluated again, and the verification equals a full one."""
    rules, cluster = _generated(30)
    reuse = Reuse(None)
    for walk in ["native", "python", "native"]:
        monkeypatch.setenv("KPDOCTOR_CORE", walk)
        nxt = Reuse(reuse.next)
        assert verify(tmp_path, rules, cluster, nxt) == verify(tmp_path, rules, cluster, None)
        walked = sum(1 for kept in nxt.next.kept.values() if kept.deps is None or kept.deps)
        if reuse.previous is not None:  # every case whose packet is walked: not one carried over
            assert nxt.evaluated == walked > 0
        reuse = nxt


def test_the_core_names_only_the_parts_of_the_rules_that_changed() -> None:
    """What the core says changed between two dumps is what a walk reads there: one Service's
    rule deleted from KUBE-SERVICES changes that destination's part of it (and nothing every
    packet reads), one endpoint dropped changes its Service's chain and the endpoint's own."""
    from kpdoctor.dataplane.iptables.native import NativeEvaluator
    from kpdoctor.parse.iptables import parse_save

    rules, _ = _generated(40)

    def state(text: str) -> Any:
        rs = parse_save(text, "iptables-save.txt", "legacy", 4)
        return NativeEvaluator(rs, [], [], lambda _rs: {}).states()[0][1]

    before = state(rules)
    assert before.changes(state(rules)) == []
    gone = state(_drop_line(r"^-A KUBE-SERVICES -d 172\.16\.0\.12/32 ")(rules))
    assert gone.changes(before) == [("nat", "KUBE-SERVICES", ("dst", int(ipaddress.ip_address("172.16.0.12"))))]
    sep = re.search(r"^-A (KUBE-SEP-\S+) .*DNAT --to-destination 10\.0\.", rules, re.M)
    assert sep is not None
    without = state(_drop_line(rf"^-A {sep.group(1)} .*DNAT")(rules))
    assert without.changes(before) == [("nat", sep.group(1), None)]
    added = state(rules.replace(":KUBE-SERVICES - [0:0]", ":KUBE-SERVICES - [0:0]\n:KPD-NEW - [0:0]", 1))
    assert added.changes(before) == [("nat", "KPD-NEW", None)]
    assert sorted(before.changes(), key=str) == sorted(before.changes(None), key=str)
    assert len(before.changes()) >= len(before)


def test_reuse_starts_empty() -> None:
    r = Reuse(Carried())
    assert r.reused == r.evaluated == 0 and not r.full


# -- counters ------------------------------------------------------------------------------------------


def test_first_reading_is_the_baseline_and_a_year_of_drops_is_not_a_spike() -> None:
    gate = CounterGate()
    gate.observe({"insert_failed": 1_000_000}, at=0.0)
    assert not gate.seeded("insert_failed") and not gate.spiking("insert_failed")
    gate.observe({"insert_failed": 1_000_000}, at=300.0)
    assert gate.seeded("insert_failed") and not gate.spiking("insert_failed")


def test_a_short_burst_is_absorbed_a_trickle_persists_a_flood_exceeds() -> None:
    gate = CounterGate(rate=0.1, burst=100, persist=2)
    gate.observe({"c": 0}, at=0)
    gate.observe({"c": 50}, at=300)  # one burst within the budget
    assert not gate.spiking("c")
    gate.observe({"c": 50}, at=600)
    gate.observe({"c": 51}, at=900)
    assert not gate.spiking("c")
    gate.observe({"c": 52}, at=1200)  # grew twice in a row
    assert gate.spiking("c")
    flood = CounterGate(rate=0.1, burst=100, persist=5)
    flood.observe({"c": 0}, at=0)
    flood.observe({"c": 10_000}, at=300)  # far beyond 100 + 30
    assert flood.spiking("c")


def test_a_counter_that_goes_down_is_seeded_again() -> None:
    gate = CounterGate(persist=1)
    gate.observe({"c": 500}, at=0)
    gate.observe({"c": 600}, at=300)
    assert gate.spiking("c")
    gate.observe({"c": 3}, at=600)  # a reboot
    assert not gate.seeded("c") and not gate.spiking("c")


def test_token_bucket_refills_up_to_its_burst() -> None:
    b = TokenBucket(rate=1.0, burst=10)
    assert not b.spend(10, 0)
    assert b.spend(1, 0)
    assert not b.spend(5, 100)  # refilled to 10, not 100


# -- Events and the Node condition ----------------------------------------------------------------------


@pytest.fixture
def api() -> Iterator[tuple[LiveCluster, ReplayServer, Any]]:
    node = _items(copy.deepcopy(CLUSTER), "Node", "test-node")
    live = LiveCluster([node])
    with ReplayServer(cluster=live) as server, k8s.ApiClient(k8s.Configuration(host=server.url)) as client:
        yield live, server, client


def test_events_are_deduplicated_and_rate_limited(api: tuple[LiveCluster, ReplayServer, Any]) -> None:
    live, server, client = api
    rep = NodeReporter(client, "test-node", burst=2, refill_seconds=3600)
    rep.event("Warning", "IptablesBackendMismatch", "KP101 rules in both backends", "uid-1")
    rep.event("Warning", "IptablesBackendMismatch", "KP101 rules in both backends", "uid-1")  # a repeat
    rep.event("Warning", "ConntrackTableFull", "KP301 table full", "uid-1")
    rep.event("Warning", "XtablesLockContention", "KP102 lock", "uid-1")  # beyond the burst
    created = [w for w in server.writes if w["method"] == "POST"]
    patched = [w for w in server.writes if w["method"] == "PATCH"]
    assert [w["body"]["reason"] for w in created] == ["IptablesBackendMismatch", "ConntrackTableFull"]
    assert len(patched) == 1 and patched[0]["body"]["count"] == 2
    assert rep.stats.dropped == 1 and rep.stats.events["aggregated"] == 1
    ev = live.objects("Event")
    assert {e["involvedObject"]["name"] for e in ev} == {"test-node"}
    assert next(e for e in ev if e["reason"] == "IptablesBackendMismatch")["count"] == 2


def test_condition_in_npd_polarity_moves_its_transition_only_on_a_flip(
    api: tuple[LiveCluster, ReplayServer, Any],
) -> None:
    live, _server, client = api
    rep = NodeReporter(client, "test-node", heartbeat_seconds=3600)
    others = [c["type"] for c in live.get("Node", "", "test-node")["status"].get("conditions", [])]  # type: ignore[index]
    rep.condition(condition_for([]), None)
    cond = _condition(live)
    assert (cond["status"], cond["reason"]) == ("False", "KubeProxyHealthy")
    first = cond["lastTransitionTime"]
    rep.condition(condition_for([]), None)  # the same: nothing written before the heartbeat
    assert rep.stats.condition_writes == 1
    rep.condition(condition_for([], inconclusive="nothing could be checked"), None)
    assert _condition(live)["status"] == "Unknown"
    kept = [c["type"] for c in live.get("Node", "", "test-node")["status"]["conditions"]]  # type: ignore[index]
    assert set(others) <= set(kept)  # other conditions untouched
    assert first
    assert camel("iptables-backend-mismatch") == "IptablesBackendMismatch"


def _condition(live: LiveCluster) -> dict[str, Any]:
    node = live.get("Node", "", "test-node")
    assert node is not None
    return next(c for c in node["status"]["conditions"] if c["type"] == "KubeProxyProblem")


def test_writes_that_fail_are_counted_not_raised(api: tuple[LiveCluster, ReplayServer, Any]) -> None:
    live, _, client = api
    live.deny("*", "/api/v1/nodes/test-node/status")
    live.deny("POST", "/api/v1/namespaces/default/events")
    rep = NodeReporter(client, "test-node")
    rep.condition(condition_for([]), None)
    rep.event("Warning", "X", "y", None)
    assert rep.stats.errors == {"patch node status": 1, "create event": 1}
    assert "403" in rep.stats.last_error


# -- the NPD plugin --------------------------------------------------------------------------------------


def npd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kpdoctor", "npd", *args], capture_output=True, text=True, timeout=120)


def test_npd_plugin_says_problem_in_one_short_line() -> None:
    from kpdoctor.demo import demo_path

    res = npd(str(demo_path("tke-backend-mismatch")))
    assert res.returncode == 1, res.stderr
    line = res.stdout.rstrip("\n")
    assert "\n" not in line and len(line) <= 80
    assert line.startswith("KP1")


def test_npd_plugin_ok_and_unknown(tmp_path: Path) -> None:
    (tmp_path / "iptables-save.txt").write_text(RULES)
    (tmp_path / "cluster.json").write_text(json.dumps(CLUSTER))
    ok = npd(str(tmp_path / "iptables-save.txt"), str(tmp_path / "cluster.json"), "--max-output", "200")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith("kube-proxy OK")
    (tmp_path / "notes.txt").write_text("nothing a node printed\n")
    unknown = npd(str(tmp_path / "notes.txt"))
    assert unknown.returncode == 2 and len(unknown.stdout.strip().splitlines()) == 1


# -- the metrics, from a real cycle ---------------------------------------------------------------------


def one_cycle(live: LiveCluster, collect: Callable[[], tuple[list[Any], list[Any]]]) -> tuple[Any, Any, str]:
    """(the agent, its report, its metrics text) after one cycle on ``collect``'s node, the cluster
    being ``live`` (served by the replay API server, watched by the agent)."""
    from prometheus_client import generate_latest

    from kpdoctor.agent.cluster import ClusterCache
    from kpdoctor.agent.loop import Agent, AgentOptions
    from kpdoctor.agent.server import AgentServer

    with ReplayServer(cluster=live) as server, k8s.ApiClient(k8s.Configuration(host=server.url)) as client:
        cache = ClusterCache(client, "test-node")
        cache.start()
        try:
            assert cache.wait_synced(30)
            agent = Agent(AgentOptions(node="test-node", nice=0), cluster=cache, collect=collect)
            report = agent.run_cycle()
            return agent, report, generate_latest(AgentServer(agent, "127.0.0.1", 0).registry).decode()
        finally:
            cache.stop()


def test_metrics_of_a_real_cycle_name_the_services_of_each_finding() -> None:
    """25 Services the node has no rules for: the findings (which name a few and sum up the rest)
    give a Service series for each Service they name, and counts by code, cause and severity."""
    from prometheus_client.parser import text_string_to_metric_families

    from kpdoctor.agent.metrics import services_named
    from kpdoctor.bundle.contents import Collected

    items = copy.deepcopy(CLUSTER)["items"]
    svc1 = _items(CLUSTER, "Service", "svc1")
    for i in range(25):
        extra = copy.deepcopy(svc1)
        extra["metadata"].update(name=f"extra{i}", namespace="ns9")
        extra["spec"]["clusterIP"] = extra["spec"]["clusterIPs"][0] = f"172.30.1.{i + 1}"
        items.append(extra)
    addr = [{"ifname": "eth0", "addr_info": [{"family": "inet", "local": "192.168.0.2", "prefixlen": 24}]}]

    def collect() -> tuple[list[Collected], list[Any]]:
        return [
            Collected("node/iptables-legacy-save.txt", RULES.encode(), "iptables-legacy-save"),
            Collected("node/ip-addr.json", json.dumps(addr).encode(), "ip -j addr"),
        ], []

    agent, report, text = one_cycle(LiveCluster(items), collect)
    assert report is not None
    findings = agent.status().findings
    named = {n for f in findings for n in services_named(f)}
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    series = {(s.labels["namespace"], s.labels["service"]) for s in samples if s.name == "kpdoctor_finding_service"}
    assert series == named and len(named) >= 5
    counts = {s.labels["code"]: s.value for s in samples if s.name == "kpdoctor_findings"}
    assert counts and sum(counts.values()) == len(findings)
    assert {s.labels["result"]: s.value for s in samples if s.name == "kpdoctor_services_verified"}["mismatch"] >= 25
    assert any(s.name == "kpdoctor_build_info" for s in samples)
    inf = [s for s in samples if s.name == "kpdoctor_cycle_duration_seconds_bucket" and s.labels["le"] == "+Inf"]
    assert [s.value for s in inf] == [1.0]  # the exposition format's last bucket, as Prometheus reads it


def test_at_most_20_services_per_code_are_labelled() -> None:
    from kpdoctor.agent.metrics import service_labels
    from kpdoctor.model import Confidence, Finding, Severity

    def finding(i: int, sev: Severity) -> Finding:
        return Finding("KP201", "rules-stale", sev, Confidence.HIGH, "t", "s", subject={"service": f"ns/svc{i}:http"})

    findings = [finding(i, Severity.WARNING) for i in range(30)] + [finding(99, Severity.CRITICAL)]
    named, left = service_labels(findings)
    assert len(named) == 20 and left == {"KP201": 11}
    assert named[0][3:] == ("ns", "svc99")  # the worst first


def test_a_cycle_leaves_no_reference_cycles_behind() -> None:
    """The agent turns the collector off during a cycle and runs it rarely: whatever a cycle
    drops must be freed by reference counts, or memory grows cycle after cycle. The rules change
    between cycles (a rule dropped, then back), so the rules kept from one parse to the next
    (each with its compiled form) come and go."""
    import gc

    from kpdoctor.agent.loop import Agent, AgentOptions
    from kpdoctor.bundle.contents import Collected

    addr = [{"ifname": "eth0", "addr_info": [{"family": "inet", "local": "192.168.0.2", "prefixlen": 24}]}]
    texts = [RULES, _drop_line(r"-A KUBE-SEP-\S+ .*DNAT")(RULES)]
    turn = [0]

    def collect() -> tuple[list[Collected], list[Any]]:
        turn[0] += 1
        return [
            Collected("node/iptables-legacy-save.txt", texts[turn[0] % 2].encode(), "iptables-legacy-save"),
            Collected("node/ip-addr.json", json.dumps(addr).encode(), "ip -j addr"),
            Collected("cluster/services.json", json.dumps(CLUSTER).encode(), "a file"),
        ], []

    agent = Agent(AgentOptions(node="test-node", nice=0), collect=collect)
    agent.run_cycle()
    agent.run_cycle()
    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        for _ in range(4):
            assert agent.run_cycle() is not None
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                found = gc.collect()
                kinds = sorted({type(o).__name__ for o in gc.garbage})
            finally:
                gc.garbage.clear()
                gc.set_debug(0)
            assert found == 0, kinds
    finally:
        if was:
            gc.enable()


def test_a_resource_the_agent_may_not_list_is_reported_not_fatal() -> None:
    """RBAC that lets the agent read Services but not EndpointSlices: the cycle still runs, the
    report says what could not be read and why, and the metrics say that source is not current."""
    from prometheus_client.parser import text_string_to_metric_families

    from kpdoctor.bundle.contents import Collected

    def collect() -> tuple[list[Collected], list[Any]]:
        return [Collected("node/iptables-legacy-save.txt", RULES.encode(), "iptables-legacy-save")], []

    live = LiveCluster(copy.deepcopy(CLUSTER)["items"])
    live.deny("GET", "/apis/discovery.k8s.io/")
    _, report, text = one_cycle(live, collect)
    assert report is not None and not report.errors
    why = [p.message for p in report.problems if "endpointslices" in p.source]
    assert why and why[0].startswith("not collected: forbidden: "), report.problems
    assert "needs a ClusterRole" in why[0] and "resources: [endpointslices], verbs: [list]" in why[0], why
    up = {
        s.labels["resource"]: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "kpdoctor_cluster_source_up"
    }
    assert up["endpointslices"] == 0 and up["services"] == 1


def test_cycles_with_objects_kept_parsed_verify_as_a_full_run() -> None:
    """The agent keeps the watched objects parsed, and with them Service ports, cases, views and
    what the Services own: after each kind of change between cycles (an endpoint gone, a Service
    changed, a Service deleted, which moves every later object in its file, a rule dropped) its
    verification equals a fresh agent's full one on the same node."""
    from kpdoctor.agent.cluster import ClusterCache
    from kpdoctor.agent.loop import Agent, AgentOptions
    from kpdoctor.bundle.contents import Collected

    addr = [{"ifname": "eth0", "addr_info": [{"family": "inet", "local": "192.168.0.2", "prefixlen": 24}]}]
    rules = [RULES]

    def collect() -> tuple[list[Collected], list[Any]]:
        return [
            Collected("node/iptables-legacy-save.txt", rules[0].encode(), "iptables-legacy-save"),
            Collected("node/ip-addr.json", json.dumps(addr).encode(), "ip -j addr"),
        ], []

    def svc4_shrinks(live: LiveCluster) -> None:
        sl = copy.deepcopy(live.get("EndpointSlice", "ns4", "svc4-1"))
        assert sl is not None
        sl["endpoints"].pop(0)
        live.apply(sl)

    def svc2_asks_affinity(live: LiveCluster) -> None:
        svc = copy.deepcopy(live.get("Service", "ns2", "svc2"))
        assert svc is not None
        svc["spec"]["sessionAffinity"] = "ClientIP"
        live.apply(svc)

    def svc1_deleted(live: LiveCluster) -> None:
        live.delete("Service", "ns1", "svc1")

    def dnat_dropped(live: LiveCluster) -> None:
        rules[0] = _drop_line(r"-A KUBE-SEP-\S+ .*DNAT")(rules[0])

    live = LiveCluster(copy.deepcopy(CLUSTER)["items"])
    with ReplayServer(cluster=live) as server, k8s.ApiClient(k8s.Configuration(host=server.url)) as client:
        cache = ClusterCache(client, "test-node")
        cache.start()
        try:
            assert cache.wait_synced(30)
            agent = Agent(AgentOptions(node="test-node", nice=0, full_every=100), cluster=cache, collect=collect)
            assert agent.run_cycle() is not None
            for change in (svc4_shrinks, svc2_asks_affinity, svc1_deleted, dnat_dropped):
                before = cache.generation
                change(live)
                deadline = time.monotonic() + 10
                while change is not dnat_dropped and cache.generation == before and time.monotonic() < deadline:
                    time.sleep(0.02)  # the watch has seen it
                report = agent.run_cycle()
                fresh = Agent(AgentOptions(node="test-node", nice=0), cluster=cache, collect=collect).run_cycle()
                assert report is not None and fresh is not None
                assert report.verification is not None and fresh.verification is not None
                assert agent.status().reused > 0, change.__name__
                assert report.verification.to_json() == fresh.verification.to_json(), change.__name__
        finally:
            cache.stop()


def test_counter_findings_wait_for_a_spike_not_a_since_boot_total() -> None:
    """A node up for a long time: conntrack -S shows 70,000 insert_failed since boot. The first
    cycle only seeds the baseline and says nothing; a cycle where it grew a little (within the
    budget, once) says nothing; a flood says it."""
    from kpdoctor.agent.loop import Agent, AgentOptions
    from kpdoctor.bundle.contents import Collected
    from kpdoctor.demo import demo_path

    base = demo_path("node-packet-loss") / "node"
    stats = (base / "counters" / "T0" / "conntrack-stats.txt").read_text()
    sysctl = (base / "sysctl.txt").read_bytes()
    grow = [0]

    def collect() -> tuple[list[Collected], list[Any]]:
        text = re.sub(r"insert_failed=(\d+)", lambda m: f"insert_failed={int(m.group(1)) + grow[0]}", stats)
        return [
            Collected("node/counters/T0/conntrack-stats.txt", text.encode(), "conntrack -S"),
            Collected("node/sysctl.txt", sysctl, "sysctl -a"),
            Collected("node/iptables-legacy-save.txt", RULES.encode(), "iptables-legacy-save"),
        ], []

    agent = Agent(AgentOptions(node="test-node", nice=0), collect=collect)

    def kp300() -> tuple[bool, bool]:
        assert agent.run_cycle() is not None
        st = agent.status()
        return any(f.code == "KP300" for f in st.findings), any(f.code == "KP300" for f in st.held)

    assert kp300()[0] is False  # the totals alone (the baseline): nothing said
    assert kp300() == (False, False)  # no growth: nothing happening
    grow[0] = 10
    assert kp300() == (False, True)  # growing, the check says; a little, once: held back (within the budget)
    grow[0] = 50_000
    assert kp300() == (True, False)  # a flood


# -- the watch and the schedule ---------------------------------------------------------------------


def test_the_watch_lists_again_after_a_410_and_stays_current() -> None:
    """A watch that ends is resumed from the last version it saw; when that version is too old
    (the API server compacted its history: 410), the resource is listed again. Either way the
    cache ends up holding what the cluster holds."""
    from kpdoctor.agent.cluster import ClusterCache

    live = LiveCluster(copy.deepcopy(CLUSTER)["items"])
    with ReplayServer(cluster=live) as server, k8s.ApiClient(k8s.Configuration(host=server.url)) as client:
        cache = ClusterCache(client, "test-node", watch_seconds=1)
        cache.start()
        try:
            assert cache.wait_synced(30)
            svc = copy.deepcopy(_items(CLUSTER, "Service", "svc1"))
            svc["metadata"].update(name="late", namespace="ns9")
            live.down = True  # the watches are cut; meanwhile a Service is added, and the history compacted
            live.apply(svc)
            live.compact()  # every version the watches saw is now too old: resuming gets a 410
            time.sleep(0.2)
            live.down = False
            state = cache.state["cluster/services.json"]
            deadline = time.monotonic() + 30
            while ("ns9/late" not in state.objects or not state.relists) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "ns9/late" in state.objects and state.relists >= 1
            live.delete("Service", "ns9", "late")
            deadline = time.monotonic() + 20
            while "ns9/late" in state.objects and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "ns9/late" not in state.objects
            assert not cache.errors()
        finally:
            cache.stop()


def test_cycles_never_overlap_and_requests_are_answered_together() -> None:
    """Asking for a cycle while one runs is answered by the next one, however many ask; the
    scheduled interval is far away; stopping ends the loop."""
    import threading

    from kpdoctor.agent.loop import Agent, AgentOptions
    from kpdoctor.bundle.contents import Collected

    running = threading.Event()
    release = threading.Event()
    overlapping = []
    busy = [0]

    def collect() -> tuple[list[Collected], list[Any]]:
        busy[0] += 1
        overlapping.append(busy[0])
        running.set()
        release.wait(10)
        busy[0] -= 1
        return [Collected("node/iptables-legacy-save.txt", RULES.encode(), "iptables-legacy-save")], []

    agent = Agent(AgentOptions(node="test-node", nice=0, interval=3600, jitter=0.0), collect=collect)
    stop = threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    loop.start()
    assert running.wait(10)  # the first cycle runs
    asked = {agent.request() for _ in range(5)}  # while it runs: all answered by cycle 2
    assert asked == {2}
    release.set()
    assert agent.wait_for(2, 30)
    time.sleep(0.3)
    assert agent.status().cycle == 2  # no third: nobody asked, and the interval is an hour away
    assert max(overlapping) == 1
    stop.set()
    loop.join(timeout=10)
    assert not loop.is_alive()


def test_what_nothing_explains_never_raises_the_condition() -> None:
    """kube-proxy's log ends with an error nothing knows, again and again: the report says so (a
    low-confidence warning, KP140), but the agent holds it back from the Node condition and its
    Events: an unexplained line is a lead for a reader, not a node problem."""
    from kpdoctor.agent.loop import Agent, AgentOptions
    from kpdoctor.bundle.contents import Collected

    log = (Path(__file__).parent / "data" / "logs" / "healthy-glog-era-2.log").read_text()
    log += "".join(
        f'E1204 15:{m:02d}:29.100000       1 proxier.go:900] "Frobnicating the widget failed" err="quux {m}"\n'
        for m in range(30, 60)
    )

    def collect() -> tuple[list[Collected], list[Any]]:
        return [
            Collected("kube-proxy/log.txt", log.encode(), "kubectl logs"),
            Collected("node/iptables-legacy-save.txt", RULES.encode(), "iptables-legacy-save"),
        ], []

    agent = Agent(AgentOptions(node="test-node", nice=0), collect=collect)
    report = agent.run_cycle()
    assert report is not None
    assert any(f.code == "KP140" and f.severity.label == "warning" for f in report.visible())
    st = agent.status()
    assert [f.code for f in st.findings if f.code == "KP140"] == [] and any(f.code == "KP140" for f in st.held)
    assert st.condition is not None and st.condition.status == "False", st.condition


def test_a_finding_about_a_service_that_just_changed_waits_until_the_change_settled() -> None:
    """A Service's EndpointSlice changes; the node's rules (the fixture's, never updated) still have
    the old endpoint. The cycle right after the change holds the mismatch (kube-proxy may be
    applying it) and asks for a cycle once it settled; that cycle reports it. With no kube-proxy
    running there is nothing on its way: reported at once."""
    from kpdoctor.agent.cluster import ClusterCache
    from kpdoctor.agent.loop import Agent, AgentOptions
    from kpdoctor.bundle.contents import Collected

    def collect() -> tuple[list[Collected], list[Any]]:
        return [Collected("node/iptables-legacy-save.txt", RULES.encode(), "iptables-legacy-save")], []

    live = LiveCluster(copy.deepcopy(CLUSTER)["items"])
    with ReplayServer(cluster=live) as server, k8s.ApiClient(k8s.Configuration(host=server.url)) as client:
        cache = ClusterCache(client, "test-node", watch_seconds=30)
        cache.start()
        try:
            assert cache.wait_synced(30)
            agent = Agent(AgentOptions(node="test-node", nice=0, settle=1.5), cluster=cache, collect=collect)
            assert agent.run_cycle() is not None and agent.status().findings == []
            shrunk = copy.deepcopy(_items(CLUSTER, "EndpointSlice", "svc4-1"))
            shrunk["endpoints"] = shrunk["endpoints"][1:]
            live.apply(shrunk)
            deadline = time.monotonic() + 10
            while cache.changed_at("ns4/svc4") is None:  # the watch event arrives
                assert time.monotonic() < deadline
                time.sleep(0.05)
            changed = cache.changed_at("ns4/svc4")
            agent.run_cycle()
            st = agent.status()
            assert st.findings == [] and [f.code for f in st.held] == ["KP202"], (st.findings, st.held)
            assert agent.recheck_at is not None and changed is not None
            assert agent.recheck_at == pytest.approx(changed + 1.5)
            time.sleep(max(0.0, agent.recheck_at - time.monotonic()) + 0.1)
            agent.run_cycle()
            st = agent.status()
            assert [(f.code, f.subject["service"].split(":")[0]) for f in st.findings] == [("KP202", "ns4/svc4")]
            assert agent.recheck_at is None

            # kube-proxy not running: no change can be on its way
            fresh = Agent(AgentOptions(node="test-node", nice=0, settle=600), cluster=cache, collect=collect)
            fresh.proxy_running = False
            fresh.run_cycle()
            assert [f.code for f in fresh.status().findings] == ["KP202"]
        finally:
            cache.stop()
