"""``kubectl-kpdoctor`` as a process against the live replay API server (tests/kubeapi_replay.py):
the debug Pod it creates, its log streamed back, the Pod deleted however the run ends (success,
failure, timeout, Ctrl-C, SIGTERM), and the cluster table read from what the real agent writes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzz_hostile import as_from_a_shell
from kubeapi_replay import LiveCluster, PodScript, ReplayServer
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from test_deploy import find_kubectl_120

import kpdoctor
from kpdoctor.agent.node_status import Condition, NodeReporter

PLUGIN = str(Path(sys.executable).parent / "kubectl-kpdoctor")
NODE = "worker-1"
NS = "kpdoctor-test"
IMAGE = "registry.example/kpdoctor:test"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


def node_obj(name: str, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"conditions": conditions or [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }


def write_kubeconfig(path: Path, server: str, namespace: str | None = None) -> Path:
    """Two contexts on the same server: ``lab`` (current, with ``namespace``) and ``other`` (ns ``elsewhere``)."""
    lab: dict[str, Any] = {"cluster": "lab", "user": "me"}
    if namespace:
        lab["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lab", "cluster": {"server": server}}],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        "contexts": [
            {"name": "lab", "context": lab},
            {"name": "other", "context": {"cluster": "lab", "user": "me", "namespace": "elsewhere"}},
        ],
        "current-context": "lab",
    }
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[LiveCluster, ReplayServer, Path]]:
    cluster = LiveCluster([node_obj(NODE)])
    with ReplayServer(cluster=cluster) as server:
        yield cluster, server, write_kubeconfig(tmp_path / "kubeconfig", server.url)


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and k != "KUBECONFIG"}
    out["HOME"] = "/nonexistent"  # no ~/.kube/config of the machine's
    return out


def plugin(
    kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PLUGIN, "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        input=stdin if stdin is not None else "",
        env=env(),
        timeout=timeout,
    )


def start(kubeconfig: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PLUGIN, "--kubeconfig", str(kubeconfig), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        preexec_fn=as_from_a_shell,  # signals only: safe with the test process's threads
    )


def pod_writes(server: ReplayServer, method: str) -> list[dict[str, Any]]:
    return [w for w in server.writes if w["method"] == method and "/pods" in w["path"]]


def created_pod(server: ReplayServer) -> dict[str, Any]:
    (post,) = pod_writes(server, "POST")
    assert post["path"] == f"/api/v1/namespaces/{NS}/pods" and post["status"] == 201
    body: dict[str, Any] = post["body"]
    return body


def assert_deleted(server: ReplayServer, cluster: LiveCluster, name: str) -> None:
    deletes = pod_writes(server, "DELETE")
    assert [d["path"] for d in deletes] == [f"/api/v1/namespaces/{NS}/pods/{name}"], server.paths()
    assert deletes[0]["status"] == 200
    assert cluster.objects("Pod") == []


LOG = [
    (0.3, "kpdoctor: collected 29 artifacts in 1.0s\n"),
    (0.6, "KP101 critical iptables-backend-mismatch\n"),
    (0.9, "Inputs read: 29\n"),
]


# -- the replay server's Pods, with the real client ------------------------------------------------------


def test_replay_pods_follow_their_script_and_stream_their_log(live: tuple[LiveCluster, ReplayServer, Path]) -> None:
    cluster, server, _ = live
    cluster.pod_script = PodScript(phases=((0.3, "Running"), (1.2, "Succeeded")), log=LOG, exit_code=0)
    api = k8s.ApiClient(k8s.Configuration(host=server.url))
    core = k8s.CoreV1Api(api)
    pod = {"metadata": {"generateName": "p-"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    made = json.loads(core.create_namespaced_pod(NS, pod, _preload_content=False).data)
    name = made["metadata"]["name"]
    assert made["status"]["phase"] == "Pending" and name.startswith("p-")
    with pytest.raises(ApiException) as waiting:
        core.read_namespaced_pod_log(name, NS)
    assert waiting.value.status == 400 and "waiting to start: ContainerCreating" in waiting.value.body
    t0 = time.monotonic()
    while core.read_namespaced_pod(name, NS).status.phase == "Pending":
        assert time.monotonic() - t0 < 5
        time.sleep(0.05)
    resp = core.read_namespaced_pod_log(name, NS, container="c", follow=True, _preload_content=False)
    got = [(time.monotonic() - t0, chunk.decode()) for chunk in resp.stream(1024)]
    assert "".join(text for _, text in got) == "".join(text for _, text in LOG)
    assert got[-1][0] - got[0][0] > 0.3  # written as the container wrote it, not at once
    done = core.read_namespaced_pod(name, NS)
    assert done.status.phase == "Succeeded"
    assert done.status.container_statuses[0].state.terminated.exit_code == 0
    assert core.read_namespaced_pod_log(name, NS) == "".join(text for _, text in LOG)
    core.delete_namespaced_pod(name, NS)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod(name, NS)
    assert gone.value.status == 404
    with pytest.raises(ApiException) as twice:
        core.delete_namespaced_pod(name, NS)
    assert twice.value.status == 404
    assert [w["method"] for w in server.writes] == ["POST", "DELETE", "DELETE"]
    with pytest.raises(ApiException) as invalid:
        core.create_namespaced_pod(NS, {"metadata": {"name": "x"}, "spec": {"containers": []}})
    assert invalid.value.status == 422


def test_replay_pod_log_stream_ends_when_the_pod_is_deleted(live: tuple[LiveCluster, ReplayServer, Path]) -> None:
    cluster, server, _ = live
    cluster.pod_script = PodScript(phases=((0.0, "Running"),), log=[(0.1, "one\n"), (60, "never\n")])
    core = k8s.CoreV1Api(k8s.ApiClient(k8s.Configuration(host=server.url)))
    core.create_namespaced_pod(NS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    time.sleep(0.2)
    resp = core.read_namespaced_pod_log("p", NS, follow=True, _preload_content=False)
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(resp.stream(1024)), daemon=True)
    reader.start()
    time.sleep(0.3)
    core.delete_namespaced_pod("p", NS)
    reader.join(5)
    assert not reader.is_alive() and b"".join(chunks) == b"one\n"


# -- kubectl kpdoctor node -----------------------------------------------------------------------------------


def test_node_creates_the_sysadmin_pod_streams_its_report_and_deletes_it(
    live: tuple[LiveCluster, ReplayServer, Path],
) -> None:
    cluster, server, kubeconfig = live
    cluster.pod_script = PodScript(
        phases=((0.2, "Running"), (3.5, "Failed")), log=[(0.3, "first line\n"), (3.0, "last line\n")], exit_code=1
    )
    proc = start(kubeconfig, "node", NODE, "-n", NS, "--image", IMAGE, "--yes", "-o", "json")
    assert proc.stdout is not None
    first = proc.stdout.readline()
    # streamed: the first line is here while the container still runs (its last line not yet written)
    (running,) = cluster.objects("Pod")
    assert running["status"]["phase"] == "Running"
    rest = proc.stdout.read()
    assert proc.wait(30) == 1, proc.stderr.read() if proc.stderr else ""  # kpdoctor's exit code: found something
    assert first + rest == "first line\nlast line\n"

    pod = created_pod(server)
    name = pod["metadata"]["name"]
    assert name.startswith(f"kpdoctor-{NODE}-")
    spec = pod["spec"]
    assert spec["nodeName"] == NODE  # pinned, as kubectl debug node/NODE does
    assert spec["hostNetwork"] and spec["hostPID"] and spec["hostIPC"]
    assert spec["restartPolicy"] == "Never" and {"operator": "Exists"} in spec["tolerations"]
    assert spec["activeDeadlineSeconds"] >= 300  # bounded on the server even if this process is killed
    (c,) = spec["containers"]
    assert c["image"] == IMAGE
    assert c["securityContext"]["privileged"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    host = next(m for m in c["volumeMounts"] if m["mountPath"] == "/host")
    assert host["readOnly"] is True and volumes[host["name"]]["hostPath"]["path"] == "/"
    assert c["command"][:5] == ["kpdoctor", "diagnose", "--live", "--host-root", "/host"]
    assert c["command"][5:7] == ["--node", NODE] and "--format" in c["command"]
    assert c["command"][c["command"].index("--format") + 1] == "json"
    assert "--no-cluster" in c["command"] and spec["automountServiceAccountToken"] is False
    assert_deleted(server, cluster, name)
    logs = [r for r in server.requests if r["path"] == f"/api/v1/namespaces/{NS}/pods/{name}/log"]
    assert [r["query"].get("follow", "").lower() for r in logs] == ["true"]


def test_node_the_pod_command_is_kpdoctors(live: tuple[LiveCluster, ReplayServer, Path]) -> None:
    """The Pod's command, parsed by kpdoctor's own command line: it must be what the image runs."""
    from kpdoctor.cli import app
    from kpdoctor.kubectl_plugin.node import NodeRun, pod_manifest

    for sa in (None, "kpdoctor"):
        run = NodeRun(node=NODE, namespace=NS, image=IMAGE, service_account=sa, min_severity="info", output="markdown")
        command = pod_manifest(run)["spec"]["containers"][0]["command"]
        assert command[:2] == ["kpdoctor", "diagnose"]
        ctx = app.commands["diagnose"].make_context("kpdoctor diagnose", list(command[2:]))
        assert ctx.params["live"] is True and ctx.params["host_root"] == "/host" and ctx.params["node"] == NODE
        assert ctx.params["no_cluster"] is (sa is None)
        assert ctx.params["fmt"] == "markdown" and ctx.params["min_severity"] == "info"
        assert ctx.params["timeout"] < run.timeout


def test_node_offers_every_report_format_diagnose_has() -> None:
    """`kubectl kpdoctor node -o html > report.html`: every format of `kpdoctor diagnose -f`."""
    from kpdoctor.cli import app
    from kpdoctor.kubectl_plugin.cli import main as plugin
    from kpdoctor.kubectl_plugin.node import NodeRun, pod_manifest
    from kpdoctor.report import FORMATS

    output = next(p for p in plugin.commands["node"].params if p.name == "output")
    assert list(output.type.choices) == list(FORMATS)  # type: ignore[attr-defined]
    for fmt in FORMATS:
        command = pod_manifest(NodeRun(node=NODE, namespace=NS, image=IMAGE, output=fmt))["spec"]["containers"][0]
        ctx = app.commands["diagnose"].make_context("kpdoctor diagnose", list(command["command"][2:]))
        assert ctx.params["fmt"] == fmt


def test_node_with_a_service_account_lets_the_diagnosis_read_the_cluster(
    live: tuple[LiveCluster, ReplayServer, Path],
) -> None:
    cluster, server, kubeconfig = live
    cluster.pod_script = PodScript(phases=((0.1, "Running"), (0.4, "Succeeded")), log=[(0.2, "ok\n")])
    done = plugin(kubeconfig, "-n", NS, "node", NODE, "--yes", "--service-account", "kpdoctor")
    assert done.returncode == 0, done.stderr
    spec = created_pod(server)["spec"]
    assert spec["serviceAccountName"] == "kpdoctor" and spec["automountServiceAccountToken"] is True
    assert "--no-cluster" not in spec["containers"][0]["command"]
    assert done.stdout == "ok\n"


def test_node_image_that_cannot_be_pulled_fails_fast_and_deletes(live: tuple[LiveCluster, ReplayServer, Path]) -> None:
    cluster, server, kubeconfig = live
    cluster.pod_script = PodScript(phases=(), waiting_reason="ErrImagePull")
    t0 = time.monotonic()
    done = plugin(kubeconfig, "node", NODE, "-n", NS, "--yes", "--image", "nope:missing")
    assert done.returncode == 3, done.stderr
    assert "ErrImagePull" in done.stderr and time.monotonic() - t0 < 20
    assert_deleted(server, cluster, created_pod(server)["metadata"]["name"])


def test_node_internal_error_in_the_pod_is_reported_and_deletes(live: tuple[LiveCluster, ReplayServer, Path]) -> None:
    cluster, server, kubeconfig = live
    cluster.pod_script = PodScript(phases=((0.1, "Running"), (0.3, "Failed")), log=[(0.2, "Traceback\n")], exit_code=4)
    done = plugin(kubeconfig, "node", NODE, "-n", NS, "--yes")
    assert done.returncode == 4 and done.stdout == "Traceback\n"
    assert_deleted(server, cluster, created_pod(server)["metadata"]["name"])


@pytest.mark.parametrize("stuck", ["pending", "running"])
def test_node_timeout_deletes_the_pod(live: tuple[LiveCluster, ReplayServer, Path], stuck: str) -> None:
    cluster, server, kubeconfig = live
    if stuck == "running":
        cluster.pod_script = PodScript(phases=((0.1, "Running"),), log=[(0.2, "collecting...\n")])
    t0 = time.monotonic()
    done = plugin(kubeconfig, "node", NODE, "-n", NS, "--yes", "--timeout", "3")
    elapsed = time.monotonic() - t0
    assert done.returncode == 3, done.stderr
    assert "timed out after 3 s" in done.stderr and 3 <= elapsed < 15
    assert done.stdout == ("collecting...\n" if stuck == "running" else "")
    assert_deleted(server, cluster, created_pod(server)["metadata"]["name"])


@pytest.mark.parametrize(
    ("sig", "when"), [(signal.SIGINT, "running"), (signal.SIGINT, "pending"), (signal.SIGTERM, "running")]
)
def test_node_interrupt_deletes_the_pod(live: tuple[LiveCluster, ReplayServer, Path], sig: int, when: str) -> None:
    cluster, server, kubeconfig = live
    if when == "running":
        cluster.pod_script = PodScript(phases=((0.1, "Running"),), log=[(0.2, "collecting...\n")])
    proc = start(kubeconfig, "node", NODE, "-n", NS, "--yes")
    assert proc.stdout is not None and proc.stderr is not None
    if when == "running":
        assert proc.stdout.readline() == "collecting...\n"
    else:
        t0 = time.monotonic()
        while not cluster.objects("Pod"):
            assert time.monotonic() - t0 < 20, server.paths()
            time.sleep(0.05)
        time.sleep(0.3)
    assert cluster.objects("Pod"), "the Pod must exist when the signal comes"
    proc.send_signal(sig)
    assert proc.wait(20) == 130
    err = proc.stderr.read()
    assert ("interrupted" if sig == signal.SIGINT else "signal") in err and "Traceback" not in err
    assert_deleted(server, cluster, created_pod(server)["metadata"]["name"])


def test_node_asks_before_creating_the_privileged_pod(live: tuple[LiveCluster, ReplayServer, Path]) -> None:
    cluster, server, kubeconfig = live
    refused = plugin(kubeconfig, "node", NODE, "-n", NS, stdin="n\n")
    assert refused.returncode == 2 and "privileged" in refused.stderr and "Create it?" in refused.stderr
    no_answer = plugin(kubeconfig, "node", NODE, "-n", NS, stdin="")
    assert no_answer.returncode == 2
    assert pod_writes(server, "POST") == [] and pod_writes(server, "DELETE") == []
    cluster.pod_script = PodScript(phases=((0.1, "Running"), (0.3, "Succeeded")), log=[(0.2, "fine\n")])
    agreed = plugin(kubeconfig, "node", NODE, "-n", NS, stdin="y\n")
    assert agreed.returncode == 0 and agreed.stdout == "fine\n"
    assert_deleted(server, cluster, created_pod(server)["metadata"]["name"])


def test_node_unknown_node_or_refused_create_leaves_nothing(live: tuple[LiveCluster, ReplayServer, Path]) -> None:
    cluster, server, kubeconfig = live
    missing = plugin(kubeconfig, "node", "no-such-node", "-n", NS, "--yes")
    assert missing.returncode == 2 and 'nodes "no-such-node" not found' in missing.stderr
    cluster.deny("POST", f"/api/v1/namespaces/{NS}/pods")
    refused = plugin(kubeconfig, "node", NODE, "-n", NS, "--yes")
    assert refused.returncode == 2 and "forbidden: " in refused.stderr
    assert "with the rule apiGroups: [\"\"], resources: [pods], verbs: [create]" in refused.stderr  # what to grant
    assert [w["status"] for w in pod_writes(server, "POST")] == [403]
    assert pod_writes(server, "DELETE") == []  # refused: there is no Pod to delete


def test_node_namespace_and_context_as_kubectl_chooses_them(tmp_path: Path) -> None:
    cluster = LiveCluster([node_obj(NODE)])
    cluster.pod_script = PodScript(phases=((0.05, "Running"), (0.2, "Succeeded")), log=[(0.1, "x\n")])
    with ReplayServer(cluster=cluster) as server:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url, namespace="from-context")
        assert plugin(kubeconfig, "node", NODE, "--yes").returncode == 0
        assert plugin(kubeconfig, "node", NODE, "--yes", "--context", "other").returncode == 0
        assert plugin(kubeconfig, "--context", "other", "-n", "flag", "node", NODE, "--yes").returncode == 0
        posts = [w["path"] for w in server.writes if w["method"] == "POST"]
        assert posts == [
            "/api/v1/namespaces/from-context/pods",
            "/api/v1/namespaces/elsewhere/pods",
            "/api/v1/namespaces/flag/pods",
        ]
        assert len([w for w in server.writes if w["method"] == "DELETE"]) == 3
        assert all(r["authorization"] == "Bearer t0ken" for r in server.requests)


# -- kubectl kpdoctor cluster ----------------------------------------------------------------------------------


def agent_wrote(
    server: ReplayServer,
    node: str,
    findings: list[tuple[str, str, str]],
    resolved: list[tuple[str, str]],
    cond: Condition,
) -> None:
    """What ``kpdoctor agent`` writes, written by its own NodeReporter: Warning Events, Resolved ones, the condition."""
    api = k8s.ApiClient(k8s.Configuration(host=server.url))
    reporter = NodeReporter(api, node)
    for reason, code, summary in findings:
        reporter.event("Warning", reason, f"{code} {summary}", None)
        time.sleep(1.05)  # Event timestamps have a resolution of one second
    for reason, text in resolved:
        reporter.event("Normal", reason + "Resolved", text, None)
    reporter.condition(cond, None)
    assert not reporter.stats.errors, reporter.stats.last_error


def test_cluster_table_groups_nodes_by_cause(tmp_path: Path) -> None:
    nodes = ["node-a", "node-b", "node-c", "node-d", "node-e"]
    stale = [
        {
            "type": "KubeProxyProblem",
            "status": "True",
            "reason": "ConntrackTableFull",
            "message": "KP301 conntrack table full",
            "lastHeartbeatTime": "2020-01-01T00:00:00Z",
            "lastTransitionTime": "2020-01-01T00:00:00Z",
        }
    ]
    cluster = LiveCluster([node_obj(n) for n in nodes[:4]] + [node_obj("node-e", stale)])
    with ReplayServer(cluster=cluster) as server:
        mismatch = ("IptablesBackendMismatch", "KP101", "kube-proxy writes legacy rules, the node reads nft")
        agent_wrote(
            server,
            "node-a",
            [mismatch],
            [],
            Condition("True", "IptablesBackendMismatch", "KP101 kube-proxy writes legacy rules"),
        )
        agent_wrote(
            server,
            "node-b",
            [("StaleServiceRules", "KP201", "12 Services have stale rules"), mismatch],
            [("StaleServiceRules", "KP201 resolved: stale rules")],
            Condition("True", "IptablesBackendMismatch", "KP101 kube-proxy writes legacy rules"),
        )
        agent_wrote(server, "node-c", [], [], Condition("False", "KubeProxyHealthy", "kpdoctor found no problem"))
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)

        table = plugin(kubeconfig, "cluster")
        assert table.returncode == 1, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split() == ["CAUSE", "NODES", "NODE", "CONDITION", "AGE", "CODE", "SUMMARY"]
        causes = [ln.split()[0] for ln in lines[1:] if not ln.startswith(" ")]
        # the most widespread cause first; the resolved one is gone; then no agent, healthy
        assert causes == ["iptables-backend-mismatch", "conntrack-table-full", "(no", "(healthy)"], table.stdout
        mismatch_rows = lines[1:3]
        assert mismatch_rows[0].split()[:4] == ["iptables-backend-mismatch", "2", "node-a", "True"]
        assert mismatch_rows[1].split()[:2] == ["node-b", "True"]
        assert re.fullmatch(r"\d+s", mismatch_rows[0].split()[4])  # the Warning's age, as kubectl prints ages
        assert "KP101" in mismatch_rows[0] and "kube-proxy writes legacy rules" in mismatch_rows[0]
        assert "True (stale)" in table.stdout and "node-e" in table.stdout
        assert "KP201" not in table.stdout and "stale-service-rules" not in table.stdout
        no_agent = next(ln for ln in lines if ln.startswith("(no agent)"))
        assert "node-d" in no_agent and no_agent.split()[2] == "1"
        healthy = next(ln for ln in lines if ln.startswith("(healthy)"))
        assert "node-c" in healthy and "False" in healthy

        as_json = plugin(kubeconfig, "cluster", "-o", "json")
        assert as_json.returncode == 1
        doc = json.loads(as_json.stdout)
        assert doc["schema"] == "kpdoctor.cluster/v1" and doc["conditionType"] == "KubeProxyProblem"
        groups = {g["group"]: g["nodes"] for g in doc["groups"]}
        assert groups["iptables-backend-mismatch"] == ["node-a", "node-b"]
        assert groups["(no agent)"] == ["node-d"] and groups["(healthy)"] == ["node-c"]
        by_node = {n["name"]: n for n in doc["nodes"]}
        assert [f["code"] for f in by_node["node-b"]["findings"]] == ["KP101"]
        assert by_node["node-e"]["stale"] is True and by_node["node-d"]["condition"] is None
        # what was asked: two lists, the Events by field selector; nothing written
        events = [r for r in server.requests if r["path"] == "/api/v1/events"]
        assert events and events[-1]["query"]["fieldSelector"] == "involvedObject.kind=Node,source=kpdoctor"
        writes_before = len(server.writes)
        plugin(kubeconfig, "cluster")
        assert len(server.writes) == writes_before


def test_cluster_all_healthy_exits_0_and_says_when_no_agent_runs(tmp_path: Path) -> None:
    cluster = LiveCluster([node_obj("n1"), node_obj("n2")])
    with ReplayServer(cluster=cluster) as server:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
        none = plugin(kubeconfig, "cluster")
        assert none.returncode == 0 and "no Node has the KubeProxyProblem condition" in none.stderr
        assert none.stdout.splitlines()[1].split()[:4] == ["(no", "agent)", "2", "n1,"]
        agent_wrote(server, "n1", [], [], Condition("False", "KubeProxyHealthy", "fine"))
        agent_wrote(server, "n2", [], [], Condition("False", "KubeProxyHealthy", "fine"))
        fine = plugin(kubeconfig, "cluster")
        assert fine.returncode == 0 and fine.stderr == ""
        assert fine.stdout.splitlines()[1].split()[:4] == ["(healthy)", "2", "n1,", "n2"]


def test_cluster_api_refusal_is_one_line(live: tuple[LiveCluster, ReplayServer, Path]) -> None:
    cluster, _, kubeconfig = live
    cluster.deny("GET", "/api/v1/nodes")
    done = plugin(kubeconfig, "cluster")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "forbidden: nodes is forbidden" in done.stderr
    assert "resources: [nodes], verbs: [list]" in done.stderr


def test_missing_kubeconfig_is_a_usage_error(tmp_path: Path) -> None:
    done = plugin(tmp_path / "nope", "cluster")
    assert done.returncode == 2 and "not found" in done.stderr


# -- from kubectl itself --------------------------------------------------------------------------------------


def test_kubectl_finds_and_runs_the_plugin(tmp_path: Path) -> None:
    """Debian's kubectl 1.20 finds kubectl-kpdoctor on PATH and hands it its flags (``kubectl kpdoctor ...``)."""
    kubectl120, why = find_kubectl_120(tmp_path / "kubernetes-client")
    if kubectl120 is None:
        pytest.skip(why)
    cluster = LiveCluster([node_obj("n1")])
    with ReplayServer(cluster=cluster) as server:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
        agent_wrote(server, "n1", [], [], Condition("False", "KubeProxyHealthy", "fine"))
        path = f"{Path(PLUGIN).parent}{os.pathsep}/usr/bin{os.pathsep}/bin"
        listed = subprocess.run(
            [kubectl120, "plugin", "list"], capture_output=True, text=True, env={**env(), "PATH": path}, timeout=60
        )
        assert PLUGIN in listed.stdout, listed.stdout + listed.stderr
        done = subprocess.run(
            [kubectl120, "kpdoctor", "cluster", "--kubeconfig", str(kubeconfig), "-o", "json"],
            capture_output=True,
            text=True,
            env={**env(), "PATH": path},
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["groups"] == [{"group": "(healthy)", "nodes": ["n1"]}]


def test_krew_manifest_matches_the_plugin() -> None:
    """The krew manifest's name, version and binary are the plugin's (krew's own lint rules)."""
    path = Path(__file__).resolve().parent.parent / "deploy" / "krew" / "kpdoctor.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2" and doc["kind"] == "Plugin"
    assert doc["metadata"]["name"] == path.stem  # krew: the name is the file's
    spec = doc["spec"]
    assert spec["version"] == f"v{kpdoctor.__version__}"
    assert len(spec["shortDescription"]) <= 50 and "kubectl kpdoctor node" in spec["description"]
    seen = set()
    for p in spec["platforms"]:
        labels = p["selector"]["matchLabels"]
        seen.add((labels["os"], labels["arch"]))
        assert p["bin"] == "kubectl-kpdoctor" and re.fullmatch(r"[0-9a-f]{64}", p["sha256"])
        assert p["uri"].startswith("https://") and p["uri"].endswith(f"_{labels['os']}_{labels['arch']}.tar.gz")
        assert {"from": "LICENSE", "to": "."} in p["files"]
        assert spec["version"] in p["uri"]
    assert ("linux", "amd64") in seen
    build = (path.parent / "build-archive.sh").read_text()
    assert "kubectl-kpdoctor_${os}_${arch}.tar.gz" in build and "kpdoctor.kubectl_plugin.cli import main" in build
