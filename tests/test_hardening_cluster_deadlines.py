"""A hung or slow API server never holds kpdoctor (issue 36, item 2).

The API server here is a loopback one that accepts connections and then stalls
(``kubeapi_replay.StalledServer``): it never answers, or answers a byte at a time (its headers
too), which a socket read timeout never catches since each byte comes in time; or a replayed
recording with one answer trickled. Against it: ``collect_cluster`` ends within its budget and
says what it did not get; ``diagnose --live`` diagnoses the node's evidence and lists the cluster
as not collected; the agent's ``--once`` ends within its ``--timeout``; the continuous agent serves
``/healthz`` at once and runs its cycles; its lists and its writes give up on their deadlines.
Each case runs in a thread (or a process) joined with a bound of its own, so that a regression
fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import UPSTREAM
from kubeapi_replay import StalledServer, load_recording
from kubernetes import client as k8s
from test_collect_cluster import NODE, write_kubeconfig

from kpdoctor.collect.cluster import ClusterCollection, collect_cluster
from kpdoctor.collect.record import Budget

ROOT = Path(__file__).resolve().parent.parent
RULES = (UPSTREAM / "iptables" / "TestOverallIPTablesRules.legacy.save").read_text()

# (mode, headers trickled too): never answers; a body a byte at a time; the headers too
STALLS = {"silent": ("silent", False), "trickled body": ("trickle", False), "trickled headers": ("trickle", True)}


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


def in_thread(fn: Callable[[], Any], bound: float) -> tuple[bool, Any, float]:
    """``fn()`` in a daemon thread, waited for ``bound`` seconds: (finished, its result, seconds)."""
    out: list[Any] = []
    t0 = time.monotonic()
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(bound)
    return (not t.is_alive() and bool(out)), (out[0] if out else None), time.monotonic() - t0


@pytest.fixture
def stalled(request: pytest.FixtureRequest) -> Iterator[StalledServer]:
    mode, headers = STALLS[request.param]
    with StalledServer(mode, every=0.3, headers=headers) as server:
        yield server


# -- collect_cluster (diagnose --live, kpdoctor collect) ---------------------------------------------


@pytest.mark.parametrize("budget", [1.0, 2.5])
@pytest.mark.parametrize("stalled", list(STALLS), indirect=True)
def test_collect_cluster_ends_within_its_budget(stalled: StalledServer, budget: float, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", stalled.url)

    def run() -> ClusterCollection:
        return collect_cluster(node_hint=NODE, node_addresses=[], kubeconfig=str(kubeconfig), context=None,
                               budget=Budget(budget), progress=lambda _: None, kube_proxy_logs=True)

    done, result, took = in_thread(run, budget + 5)
    assert done, f"collect_cluster still running {budget + 5:.0f} s into a {budget} s budget"
    assert took < budget + 1.0
    assert result.error is not None and "timed out waiting for the API server's answer" in result.error
    assert "(no complete answer within " in result.error


@pytest.mark.parametrize(("every", "budget"), [(0.2, 2.0), (1.0, 3.5)])
def test_a_trickled_list_is_cut_and_what_was_read_is_kept(every: float, budget: float, tmp_path: Path) -> None:
    """The Node answers, the Services list trickles: the Node is collected, the Services are
    not (timed out, said), and what the budget no longer covers is said as such."""
    from kubeapi_replay import ReplayServer

    exchanges = load_recording("by-name")
    for ex in exchanges:
        if ex["request"]["path"] == "/api/v1/services":
            ex["response"]["trickle"] = every
    with ReplayServer(exchanges) as server:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)

        def run() -> ClusterCollection:
            return collect_cluster(node_hint=NODE, node_addresses=[], kubeconfig=str(kubeconfig), context=None,
                                   budget=Budget(budget), progress=lambda _: None, kube_proxy_logs=True)

        done, result, took = in_thread(run, budget + 5)
    assert done and took < budget + 1.0
    assert result.error is None and result.node == NODE
    assert [a.path for a in result.artifacts] == ["cluster/nodes.json"]
    skipped = {s.path: s.reason for s in result.skipped}
    assert skipped["cluster/services.json"].startswith("timed out waiting for the API server's answer")
    assert skipped["cluster/daemonsets.json"] == "time budget spent"


def _root() -> str | None:
    return None if os.geteuid() == 0 else "a live collection needs root"


@pytest.mark.skipif(_root() is not None, reason=str(_root()))
@pytest.mark.parametrize(("stalled", "timeout"), [("silent", 4.0), ("trickled body", 4.0), ("trickled headers", 7.0)],
                         indirect=["stalled"])
def test_diagnose_live_diagnoses_the_node_when_the_api_stalls(
    stalled: StalledServer, timeout: float, tmp_path: Path
) -> None:
    """The node's evidence is collected and diagnosed; the cluster is listed as not collected,
    with why; the run is not cut short by --timeout (it did not wait on the API past its share)."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", stalled.url)
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "kpdoctor", "diagnose", "--live", "--interval", "0", "--timeout", str(timeout),
         "--kubeconfig", str(kubeconfig), "--format", "json"],
        capture_output=True, text=True, timeout=timeout + 30, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    took = time.monotonic() - t0
    assert "gave up" not in res.stderr, res.stderr
    assert res.returncode in (0, 1, 3), res.stderr
    report = json.loads(res.stdout)
    assert "timed_out" not in report
    assert any(a.startswith("node/") for a in report["subject"]["artifacts"])
    problems = {p["source"]: p["message"] for p in report["input_problems"]}
    assert "timed out waiting for the API server's answer" in problems["cluster/"]
    assert took < timeout + 5


# -- the agent ---------------------------------------------------------------------------------------


def _fake_node() -> tuple[list[Any], list[Any]]:
    from kpdoctor.bundle.contents import Collected

    return [Collected("node/iptables-legacy-save.txt", RULES.encode(), "iptables-legacy-save")], []


@pytest.mark.parametrize("timeout", [3.0, 6.0])
@pytest.mark.parametrize("stalled", ["silent", "trickled body"], indirect=True)
def test_agent_once_ends_within_its_timeout(
    stalled: StalledServer, timeout: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kpdoctor agent --once --timeout T`` against a stalled API server: one cycle, its summary,
    within about T; the cluster's artifacts said as not collected."""
    from kpdoctor.agent import service
    from kpdoctor.agent.loop import AgentOptions

    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", stalled.url)
    opts = AgentOptions(node="test-node", nice=0, timeout=timeout)
    agent, link, _ = service.build(opts, kubeconfig=str(kubeconfig), context=None, cluster=True, events=True,
                                   condition=True, condition_type="KubeProxyProblem")
    agent.collect = _fake_node
    done, code, took = in_thread(lambda: service.serve(agent, link, ("127.0.0.1", 0), once=True), timeout + 10)
    assert done, f"agent --once still running {timeout + 10:.0f} s into a {timeout} s --timeout"
    assert took < timeout + 3
    assert code in (0, 1)
    summary = json.loads(capsys.readouterr().out)
    assert summary["cycle"] == 1
    missing = summary["not_collected"]  # the same reason for several: "cluster/services.json and 3 more"
    why = next(v for k, v in missing.items() if k.startswith("cluster/services.json"))
    assert why.startswith("not listed yet: the API server has not answered its list in"), missing


def test_agent_once_without_the_cluster_waits_for_none(capsys: pytest.CaptureFixture[str]) -> None:
    from kpdoctor.agent import service
    from kpdoctor.agent.loop import AgentOptions

    agent, link, _ = service.build(AgentOptions(node="test-node", nice=0, timeout=20.0), kubeconfig=None, context=None,
                                   cluster=False, events=False, condition=False, condition_type="KubeProxyProblem")
    agent.collect = _fake_node
    done, code, took = in_thread(lambda: service.serve(agent, link, ("127.0.0.1", 0), once=True), 15)
    assert done and code in (0, 1) and took < 3
    assert json.loads(capsys.readouterr().out)["cycle"] == 1


@pytest.mark.skipif(_root() is not None, reason=str(_root()))
@pytest.mark.parametrize(("stalled", "timeout"), [("silent", 4.0), ("trickled headers", 7.0)], indirect=["stalled"])
def test_kpdoctor_agent_once_ends_within_its_timeout(stalled: StalledServer, timeout: float, tmp_path: Path) -> None:
    """The attack as it was run: ``kpdoctor agent --once --timeout T`` on this node, the API
    server stalled. One cycle, its summary, about T seconds."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", stalled.url)
    t0 = time.monotonic()
    try:
        res = subprocess.run(
            [sys.executable, "-m", "kpdoctor", "agent", "--once", "--timeout", str(timeout), "--kubeconfig",
             str(kubeconfig), "--node", "test-node"],
            capture_output=True, text=True, timeout=timeout + 15, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"kpdoctor agent --once --timeout {timeout:g} still running after {timeout + 15:.0f} s")
    assert time.monotonic() - t0 < timeout + 4
    assert res.returncode in (0, 1), res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert summary["cycle"] == 1 and any(k.startswith("cluster/services.json") for k in summary["not_collected"])


DRIVER = textwrap.dedent("""
    import sys
    from kpdoctor.agent import service
    from kpdoctor.agent.loop import AgentOptions
    from kpdoctor.bundle.contents import Collected

    kubeconfig, port, sync = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    rules = open(sys.argv[4]).read().encode()
    service.SYNC_WAIT = sync
    opts = AgentOptions(node="test-node", nice=0, interval=3600, timeout=8.0)
    agent, link, _ = service.build(opts, kubeconfig=kubeconfig, context=None, cluster=True, events=True,
                                   condition=True, condition_type="KubeProxyProblem")
    agent.collect = lambda: ([Collected("node/iptables-legacy-save.txt", rules, "iptables-legacy-save")], [])
    print("serving", flush=True)
    service.serve(agent, link, ("127.0.0.1", port))
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize("stalled", ["silent", "trickled headers"], indirect=True)
def test_agent_serves_health_at_once_and_runs_cycles_while_the_api_stalls(
    stalled: StalledServer, tmp_path: Path
) -> None:
    """The continuous agent: /healthz answers within a second of starting (nothing waits on the
    API before the endpoints are up), and its first cycle ends (the node diagnosed, the cluster
    said as not collected) soon after the first lists' wait, however the API server stalls."""
    sync = 2.0
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", stalled.url)
    (tmp_path / "driver.py").write_text(DRIVER)
    (tmp_path / "rules.txt").write_text(RULES)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), str(kubeconfig), str(port), str(sync),
                             str(tmp_path / "rules.txt")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "serving"
        t0 = time.monotonic()
        health: tuple[int, str] | None = None
        while time.monotonic() - t0 < 1.5 and (health is None or health[0] != 200):
            try:
                health = _get(f"{base}/healthz", timeout=1.0)
            except OSError:
                time.sleep(0.05)
        assert health == (200, "ok\n"), f"no /healthz within 1.5 s of starting: {health}"
        ready = (0, "")
        while time.monotonic() - t0 < sync + 10 and ready[0] != 200:
            ready = _get(f"{base}/readyz")
            time.sleep(0.2)
        assert ready[0] == 200, f"no cycle finished within {sync + 10:.0f} s: {ready}"
        assert _get(f"{base}/healthz")[0] == 200
        _, text = _get(f"{base}/report")
        report = json.loads(text)
        problems = {p["source"]: p["message"] for p in report["input_problems"]}
        why = next(v for k, v in problems.items() if k.startswith("cluster/services.json"))
        assert why.startswith("not collected: not listed yet: the API server has not answered"), problems
        assert "node/iptables-legacy-save.txt" in report["subject"]["artifacts"] and report["checks_run"] > 0
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("list_seconds", [0.5, 1.5])
@pytest.mark.parametrize("stalled", ["silent", "trickled body"], indirect=True)
def test_agent_lists_give_up_on_their_deadline(
    stalled: StalledServer, list_seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each list page must arrive whole within LIST_SECONDS: past it, the resource is said as not
    current (its error), and the first cycle's wait for the lists ends."""
    from kpdoctor.agent import cluster as agent_cluster
    from kpdoctor.agent.cluster import ClusterCache

    monkeypatch.setattr(agent_cluster, "LIST_SECONDS", list_seconds, raising=False)
    with k8s.ApiClient(k8s.Configuration(host=stalled.url)) as client:
        cache = ClusterCache(client, "test-node")
        cache.start()
        try:
            t0 = time.monotonic()
            assert cache.wait_synced(list_seconds + 4), "the lists neither ended nor failed"
            assert time.monotonic() - t0 < list_seconds + 2
            errors = cache.errors()
            assert set(errors) == {r.path for r in cache.resources}
            assert all(f"no complete answer within {list_seconds:g}s" in e for e in errors.values()), errors
        finally:
            cache.stop()


@pytest.mark.parametrize("seconds", [1.0, 2.0])
@pytest.mark.parametrize("stalled", ["silent", "trickled headers"], indirect=True)
def test_writes_end_within_the_cycles_time_for_them(stalled: StalledServer, seconds: float) -> None:
    """Events and the condition share the time a cycle gives them; after a write the API server
    did not answer, the others are not tried (counted as failed, said)."""
    from kpdoctor.agent.node_status import NodeReporter, condition_for

    with k8s.ApiClient(k8s.Configuration(host=stalled.url)) as client:
        rep = NodeReporter(client, "test-node")

        def writes() -> None:
            rep.begin(seconds)
            rep.event("Warning", "IptablesBackendMismatch", "KP101 rules in both backends", None)
            rep.event("Warning", "ConntrackTableFull", "KP301 table full", None)
            rep.condition(condition_for([]), None)

        done, _, took = in_thread(writes, seconds + 10)
    assert done, "a write to a stalled API server is still waiting"
    assert took < seconds + 1
    assert stalled.connections == 1  # the first write timed out; the others were not tried
    assert rep.stats.errors == {"create event": 2, "patch node status": 1}
    assert "not tried" in rep.stats.last_error


@pytest.mark.parametrize("timeout", [2.0, 4.0])
def test_a_live_collection_leaves_behind_an_api_side_that_hangs_before_any_call(
    timeout: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubeconfig's exec plugin that never returns (it runs while the configuration loads,
    before any call a deadline covers): the collection stops waiting when its time is spent,
    keeps the node's evidence, and says each cluster artifact was not collected, and where the
    API side was."""
    from kpdoctor.collect import live

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                                   "command": "sleep", "args": ["20"], "interactiveMode": "Never"}}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "u"}}],
    }))  # fmt: skip
    monkeypatch.setattr(live, "preflight", lambda opts: None)  # the node's side as any user may read it
    opts = live.LiveOptions(kubeconfig=str(kubeconfig), interval=0.0, timeout=timeout)
    done, bundle, took = in_thread(lambda: live.collect(opts), timeout + 5)
    assert done, f"the collection still waits on the API side {timeout + 5:.0f} s into a {timeout} s --timeout"
    assert took < timeout + 1.5
    assert any(a.path.startswith("node/") for a in bundle.artifacts)
    why = {s.path: s.reason for s in bundle.skipped}
    for path in ("cluster/services.json", "cluster/endpointslices.json", "cluster/nodes.json"):
        assert why[path].startswith("not collected in time: the API side was still at 'connecting to the API'")


@pytest.mark.parametrize("margin", [0.25, 0.75])
def test_a_watch_that_streams_past_its_end_is_cut_and_resumed(margin: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """A watch the server never ends (a blank line every 0.2 s: no read timeout fires) is cut
    WATCH_MARGIN after its timeoutSeconds and resumed; the resource stays current."""
    from kubeapi_replay import BulkServer, bulk_objects

    from kpdoctor.agent import cluster as agent_cluster
    from kpdoctor.agent.cluster import ClusterCache

    monkeypatch.setattr(agent_cluster, "WATCH_MARGIN", margin, raising=False)
    with BulkServer(bulk_objects(20), watch="overrun") as server, \
            k8s.ApiClient(k8s.Configuration(host=server.url)) as client:
        cache = ClusterCache(client, "bulk-node", watch_seconds=1)
        cache.start()
        try:
            assert cache.wait_synced(10)
            time.sleep(3 * (1 + margin) + 0.5)
            watches = [r for r in server.requests if r["path"] == "/api/v1/services" and r["query"].get("watch")]
            assert len(watches) >= 3, f"{len(watches)} watch connections in {3 * (1 + margin) + 0.5:.1f} s"
            assert not cache.errors()
        finally:
            cache.stop()


def test_a_watch_never_answered_marks_the_resource_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    """Listed, then the watches get no answer at all: the resources are said not current (and
    the cycles use what was listed)."""
    from kubeapi_replay import BulkServer, bulk_objects

    from kpdoctor.agent import cluster as agent_cluster
    from kpdoctor.agent.cluster import ClusterCache

    monkeypatch.setattr(agent_cluster, "WATCH_MARGIN", 0.5, raising=False)
    with BulkServer(bulk_objects(20), watch="silent") as server, \
            k8s.ApiClient(k8s.Configuration(host=server.url)) as client:
        cache = ClusterCache(client, "bulk-node", watch_seconds=1)
        cache.start()
        try:
            assert cache.wait_synced(10)
            deadline = time.monotonic() + 6
            while len(cache.errors()) < len(cache.resources) and time.monotonic() < deadline:
                time.sleep(0.1)
            errors = cache.errors()
            assert set(errors) == {r.path for r in cache.resources}, errors
            assert all("no answer to the watch within 1.5s" in e for e in errors.values()), errors
            got, _ = cache.snapshot()
            services = next(a for a in got if a.path == "cluster/services.json")
            assert services.note.startswith("as last seen: not current") and services.parsed is not None
            assert len(services.parsed.items) == 20
        finally:
            cache.stop()
