"""``kpdoctor agent`` on a lab node whose rules and cluster change under it.

The node is a network namespace holding upstream kube-proxy's own rules (TestOverallIPTablesRules,
loaded with real ``iptables-restore``); the cluster is the live replay API server
(tests/kubeapi_replay.py) driven by the real ``kubernetes`` client: the agent lists and watches it,
writes its Events and the Node condition to it. The agent's collection runs the real commands in
the node namespace (a :class:`Host` that enters it). Between cycles the test breaks the node the
way the seeds describe, then repairs it: findings appear and resolve, Events and the condition
follow, the metrics say so, and each incremental verification equals a full one.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubeapi_replay import LiveCluster, ReplayServer
from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from kpdoctor.agent.cluster import ClusterCache
from kpdoctor.agent.loop import Agent, AgentOptions
from kpdoctor.agent.node_status import NodeReporter, camel
from kpdoctor.agent.server import AgentServer
from kpdoctor.collect.runner import Host

from .netns import Netns
from .test_live_lab import cluster, node

NODE = "test-node"


class NamespaceHost(Host):
    """The lab node: the machine's root, the node namespace's network (entered by a process that
    lives in it, as the agent on a node enters PID 1's)."""

    def __init__(self, pid: int) -> None:
        super().__init__("/", False)
        self.pid = pid

    def net_proc(self, name: str) -> str:
        return f"/proc/{self.pid}/{name}"

    def argv(self, argv: list[str]) -> list[str]:
        return ["nsenter", f"--net=/proc/{self.pid}/ns/net", "--", *argv]


@contextmanager
def inside(ns: Netns) -> Iterator[NamespaceHost]:
    sleeper = subprocess.Popen(ns.exec_argv(["sleep", "600"]), stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{sleeper.pid}/ns/net").resolve() == Path("/proc/self/ns/net").resolve():
            assert time.monotonic() < deadline, "the sleeper never entered the namespace"
            time.sleep(0.02)
        # `ip netns exec` execs sleep in place: the pid is the process in the namespace
        yield NamespaceHost(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)


def objects() -> list[dict[str, Any]]:
    return cluster()["items"]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def post(url: str) -> dict[str, Any]:
    req = urllib.request.Request(url, method="POST")
    with urllib.request.urlopen(req, timeout=120) as resp:
        data: dict[str, Any] = json.loads(resp.read())
        return data


def metrics(base: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    status, text = get(base + "/metrics")
    assert status == 200
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def value(m: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float | None:
    for lab, v in m.get(name, []):
        if all(lab.get(k) == want for k, want in labels.items()):
            return v
    return None


def condition_of(live: LiveCluster) -> dict[str, Any]:
    n = live.get("Node", "", NODE) or live.get("Node", None, NODE)  # type: ignore[arg-type]
    assert n is not None
    conds = [c for c in n["status"].get("conditions", []) if c["type"] == "KubeProxyProblem"]
    assert len(conds) == 1, n["status"].get("conditions")
    return conds[0]


def events(server: ReplayServer) -> list[dict[str, Any]]:
    return [w["body"] for w in server.writes if w["method"] == "POST" and w["path"].endswith("/events")]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


def test_agent_follows_a_node_breaking_and_healing() -> None:
    live = LiveCluster(objects())
    with node() as lab, inside(lab.node) as host, ReplayServer(cluster=live) as api:
        api_client = k8s.ApiClient(k8s.Configuration(host=api.url))
        cache = ClusterCache(api_client, NODE, watch_seconds=30)
        reporter = NodeReporter(api_client, NODE, refill_seconds=1.0)
        # settle=0: the changes below are the state to judge, not changes on their way (the real
        # kube-proxy's lab, test_real_kube_proxy.py, tests the holding of changes on their way)
        opts = AgentOptions(node=NODE, interval=3600, full_every=100, timeout=60, nice=0, settle=0)
        agent = Agent(opts, cluster=cache, reporter=reporter, host=host)
        # the same node judged from scratch every cycle: what the incremental one must equal
        full = Agent(AgentOptions(node=NODE, interval=3600, full_every=1, timeout=60, nice=0, settle=0), cluster=cache,
                     host=host)
        server = AgentServer(agent, "127.0.0.1", 0)
        stop = threading.Event()
        loop = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        cache.start()
        assert cache.wait_synced(30)
        server.start()
        server.alive.set()
        base = "http://{}:{}".format(*server.address)
        try:
            assert get(base + "/readyz")[0] == 503  # no cycle yet
            loop.start()
            assert agent.wait_for(1, 120), agent.status().last_error

            # 1. healthy: the condition is False, nothing reported, every Service verified ok
            st = agent.status()
            assert st.findings == [], [f.summary for f in st.findings]
            assert condition_of(live)["status"] == "False"
            assert get(base + "/readyz")[0] == 200 and get(base + "/healthz")[0] == 200
            m = metrics(base)
            assert value(m, "kpdoctor_services_verified", result="ok") == 6
            assert value(m, "kpdoctor_services_verified", result="mismatch") == 0
            assert value(m, "kpdoctor_node_condition", status="False") == 1
            assert value(m, "kpdoctor_last_successful_cycle_timestamp_seconds") is not None
            assert value(m, "kpdoctor_proxy_mode_info", mode="iptables") == 1
            assert not events(api)

            # 2. broken: a Service kube-proxy never programmed, an endpoint gone from a slice
            # while its rules still forward to it, and a foreign DROP before kube-proxy's rules
            svc7 = copy.deepcopy(next(o for o in objects() if o["metadata"]["name"] == "svc1"))
            svc7["metadata"].update(name="svc7", namespace="ns7", uid="svc7-uid")
            svc7["spec"]["clusterIP"] = svc7["spec"]["clusterIPs"][0] = "172.30.0.47"
            live.apply(svc7)
            slice5 = live.get("EndpointSlice", "ns4", "svc4-1")
            assert slice5 is not None
            shrunk = copy.deepcopy(slice5)
            shrunk["endpoints"] = shrunk["endpoints"][1:]
            assert shrunk["endpoints"], "svc4 needs two endpoints for this case"
            live.apply(shrunk)
            lab.node.check(["iptables-legacy", "-I", "FORWARD", "1", "-d", "10.180.0.2", "-j", "DROP"])
            before = agent.status().cycle
            answer = post(base + "/run?wait=120")
            assert answer["finished"] and answer["cycle"] == before + 1
            st = agent.status()
            codes = {f.code for f in st.findings}
            services = {f.subject.get("service", "").split(":")[0] for f in st.findings}
            assert {"ns7/svc7", "ns4/svc4"} <= services, [(f.code, f.subject, f.summary) for f in st.findings]
            assert st.reused > 0 and st.evaluated > 0  # only what changed was evaluated again
            assert full.run_cycle() is not None
            assert (
                st.report is not None
                and full.status().report is not None
                and st.report.verification is not None
                and full.status().report.verification is not None  # type: ignore[union-attr]
                and st.report.verification.to_json() == full.status().report.verification.to_json()  # type: ignore[union-attr]
            )
            cond = condition_of(live)
            assert cond["status"] == "True" and cond["reason"] == camel(st.findings[0].cause)
            warnings = [e for e in events(api) if e["type"] == "Warning"]
            assert {e["reason"] for e in warnings} >= {camel(f.cause) for f in st.findings[:1]}
            assert all(e["involvedObject"]["kind"] == "Node" and e["involvedObject"]["name"] == NODE for e in warnings)
            m = metrics(base)
            assert value(m, "kpdoctor_services_verified", result="mismatch") >= 2  # type: ignore[operator]
            assert value(m, "kpdoctor_node_condition", status="True") == 1
            for code in codes:
                assert value(m, "kpdoctor_findings", code=code) is not None
            assert value(m, "kpdoctor_finding_service", namespace="ns7", service="svc7") == 1
            assert value(m, "kpdoctor_verification_cases", how="carried_over") == st.reused

            # 3. repaired: the DROP removed, the endpoint back, the Service gone
            lab.node.check(["iptables-legacy", "-D", "FORWARD", "-d", "10.180.0.2", "-j", "DROP"])
            live.apply(slice5)
            live.delete("Service", "ns7", "svc7")
            answer = post(base + "/run?wait=120")
            assert answer["finished"]
            st = agent.status()
            assert st.findings == [], [(f.code, f.summary) for f in st.findings]
            assert condition_of(live)["status"] == "False"
            resolved = [e for e in events(api) if e["type"] == "Normal"]
            assert resolved and all(e["reason"].endswith("Resolved") for e in resolved)
            m = metrics(base)
            assert value(m, "kpdoctor_services_verified", result="ok") == 6
            assert value(m, "kpdoctor_findings") is None
            assert value(m, "kpdoctor_cycles_total", result="ok") == 3
        finally:
            stop.set()
            agent.request()
            loop.join(timeout=60)
            server.stop()
            cache.stop()


def test_agent_once_on_the_command_line(tmp_path: Path) -> None:
    """``kpdoctor agent --once --no-cluster`` run as root in the node namespace: one cycle of the
    host collection, its summary as JSON."""
    with node() as lab:
        res = lab.node.run(
            [sys.executable, "-m", "kpdoctor", "agent", "--once", "--no-cluster", "--node", NODE],
            timeout=120,
        )
    assert res.returncode in (0, 1), res.stderr
    summary = json.loads(res.stdout)
    assert summary["mode"] == "iptables" and summary["cycle"] == 1 and summary["error"] is None
    # no cluster: nothing to verify the rules against, and no counter reading to compare yet
    assert summary["cases"] == {"evaluated": 0, "carried_over": 0, "full": True}


@pytest.mark.slow
def test_short_soak_keeps_memory_flat() -> None:
    """The soak of bench/agent_cycle.py, short: a real `kpdoctor agent` process on a lab node of
    500 Services whose rules and EndpointSlices change every cycle; the median of its resident
    memory over the last tenth of the run may not be more than 15 MB above the median over the
    second tenth (the hour-long run, and its figures, are in bench/README.md)."""
    res = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[2] / "bench" / "agent_cycle.py"), "--soak", "45",
         "--services", "500", "--max-growth-mb", "15"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    last = (res.stdout.strip().splitlines() or [""])[-1]
    assert last.startswith("{"), res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads(last)
    assert summary["cycles"] >= 10 and summary["growth_mb"] <= 15, summary
    assert res.returncode == 0, res.stdout[-3000:]


@contextmanager
def running_agent(host: NamespaceHost, api: ReplayServer) -> Iterator[tuple[Agent, str]]:
    """An agent on the lab node with its watch and HTTP server, cycles run by the caller."""
    api_client = k8s.ApiClient(k8s.Configuration(host=api.url))
    cache = ClusterCache(api_client, NODE, watch_seconds=30)
    reporter = NodeReporter(api_client, NODE, refill_seconds=1.0)
    agent = Agent(AgentOptions(node=NODE, interval=3600, timeout=60, nice=0), cluster=cache, reporter=reporter, host=host)
    server = AgentServer(agent, "127.0.0.1", 0)
    cache.start()
    assert cache.wait_synced(30)
    server.start()
    server.alive.set()
    try:
        yield agent, "http://{}:{}".format(*server.address)
    finally:
        server.stop()
        cache.stop()


def test_agent_survives_an_apiserver_outage_and_partial_rbac() -> None:
    """The API away: the node side is still diagnosed with the objects last seen, the report and
    the metrics say which sources are not current, failed writes are counted; the API back: all
    current again. Writes refused by RBAC are counted, never fatal."""
    live = LiveCluster(objects())
    with node() as lab, inside(lab.node) as host, ReplayServer(cluster=live) as api, \
            running_agent(host, api) as (agent, base):  # fmt: skip
        assert agent.run_cycle() is not None
        live.down = True
        time.sleep(0.5)  # the watches see the connection go
        report = agent.run_cycle()
        assert report is not None and report.verification is not None and report.verification.evaluated
        st = agent.status()
        assert st.findings == []
        assert not all(st.sources.values()), st.sources
        m = metrics(base)
        assert any(v == 0 for lab_, v in m.get("kpdoctor_cluster_source_up", []))
        status, why = get(base + "/readyz")
        assert status == 200 and "not current" in why
        live.down = False
        live.deny("*", "/api/v1/nodes/test-node/status")
        assert agent.cluster is not None
        deadline = time.monotonic() + 60
        while agent.cluster.errors() and time.monotonic() < deadline:  # the watches back (after their backoff)
            time.sleep(0.2)
        assert not agent.cluster.errors()
        lab.node.check(["iptables-legacy", "-I", "FORWARD", "1", "-d", "10.180.0.2", "-j", "DROP"])
        assert agent.run_cycle() is not None
        assert agent.status().findings  # found
        assert agent.status().sources and all(agent.status().sources.values())
        assert agent.reporter is not None and agent.reporter.stats.errors["patch node status"] >= 1
        assert value(metrics(base), "kpdoctor_cluster_write_errors_total", what="patch node status") is not None


def test_a_cycle_takes_no_xtables_lock_and_records_each_binary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """kube-proxy's lock held by someone else for the whole cycle: the cycle does not wait for it
    (the reads take no lock). Each rule dump says which binary printed it, and its version."""
    import fcntl

    lock = tmp_path / "xtables.lock"
    monkeypatch.setenv("XTABLES_LOCKFILE", str(lock))
    with node() as lab, inside(lab.node) as host, open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        agent = Agent(AgentOptions(node=NODE, interval=3600, timeout=60, nice=0), host=host)
        t0 = time.monotonic()
        artifacts, _ = agent.collect()
        assert time.monotonic() - t0 < 30
        dumps = [a for a in artifacts if a.path.endswith("-save.txt") and a.data]
        assert dumps, [a.path for a in artifacts]
        for a in dumps:
            assert a.exit_code == 0, (a.path, a.stderr)
            assert a.binary.startswith("/") and a.binary_version.startswith(("iptables", "ip6tables")), a
            assert "-w" not in a.source.split() and " -L" not in a.source
