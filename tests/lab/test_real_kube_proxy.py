"""kpdoctor on a node run by the real programs (:mod:`.real_node`): kube-apiserver v1.20 with etcd,
kubelet's chains, and kube-proxy v1.20 programming the node's rules from the API, on both
iptables backends.

A healthy node must be healthy to every command (``diagnose --live``, ``verify --live``,
``collect`` then ``diagnose`` of the bundle, ``trace``), with real traffic reaching the Pods; the
agent must stay quiet for ten cycles, follow EndpointSlice churn without a false alarm, raise
its condition within a cycle of a real fault and clear it within a cycle of the repair, give the
findings the command line gives, ride out an apiserver restart, and say what RBAC denies it.
The faults are produced by the real kube-proxy (stopped while the cluster changes; writing to
one backend while kubelet writes to the other), not written into the rules by hand.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_deploy import find_kubectl_120

from .control_plane import Binaries
from .kpdoctor_run import diagnose_json
from .real_node import NODE, PODS, TARGET_PORT, RealNode, in_node, real_node

KPDOCTOR = [sys.executable, "-m", "kpdoctor"]
CYCLE = re.compile(r"cycle (\d+): .*; (\d+) finding\(s\), (\d+) held back")


def _kubeconfig(rn: RealNode) -> list[str]:
    return ["--kubeconfig", str(rn.cp.kubeconfig_in_netns), "--node", NODE]


def diagnose(rn: RealNode, *extra: str) -> tuple[int, dict[str, Any]]:
    """``diagnose --live`` on the node, which it finds among the Nodes by its addresses (no --node)."""
    conf = ["--kubeconfig", str(rn.cp.kubeconfig_in_netns)]
    res = in_node(rn, [*KPDOCTOR, "diagnose", "--live", *conf, "--interval", "1", "--format", "json",
                       *extra])  # fmt: skip
    assert res.returncode in (0, 1), res.stderr[-3000:]
    return res.returncode, json.loads(res.stdout)


def visible(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted(
        (f["code"], f["cause"], str((f.get("subject") or {}).get("service") or ""))
        for f in report["findings"]
        if f["severity"] in ("critical", "warning")
    )


def agent_once(rn: RealNode, kubeconfig: Path | None = None) -> tuple[int, dict[str, Any]]:
    """``kpdoctor agent --once`` on the node: one cycle of the agent's own code path."""
    conf = ["--kubeconfig", str(kubeconfig or rn.cp.kubeconfig_in_netns), "--node", NODE]
    res = in_node(rn, [*KPDOCTOR, "agent", "--once", *conf, "--no-events", "--no-condition"])
    assert res.returncode in (0, 1), res.stderr[-3000:]
    return res.returncode, json.loads(res.stdout)


def plugin_cluster(rn: RealNode) -> dict[str, Any]:
    """``kubectl kpdoctor cluster -o json`` from outside the node (through the API only)."""
    plugin = [sys.executable, "-c", "from kpdoctor.kubectl_plugin.cli import main; main()"]
    res = subprocess.run([*plugin, "cluster", "--kubeconfig", str(rn.cp.kubeconfig), "-o", "json"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode in (0, 1), res.stderr
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def agent_findings(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted((f["code"], f["cause"], str(f.get("service") or "")) for f in summary["findings"])


@contextmanager
def agent(rn: RealNode, every: float = 5, kubeconfig: Path | None = None) -> Iterator[AgentProcess]:
    """``kpdoctor agent --every N`` running in the node namespace (its Events and condition real)."""
    proc = AgentProcess(rn, every, kubeconfig)
    try:
        yield proc
    finally:
        proc.stop()


class AgentProcess:
    def __init__(self, rn: RealNode, every: float, kubeconfig: Path | None) -> None:
        self.log = rn.dir / f"agent-{time.monotonic_ns()}.log"
        conf = ["--kubeconfig", str(kubeconfig or rn.cp.kubeconfig_in_netns), "--node", NODE]
        with open(self.log, "wb") as out:
            self.popen = subprocess.Popen(
                rn.lab.node.exec_argv(
                    ["env", f"PATH={os.environ.get('PATH', '')}", *KPDOCTOR, "agent", "--every", str(every), *conf]
                ),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def cycles(self) -> list[tuple[int, int, int]]:
        """(cycle, findings, held back) of every cycle logged so far."""
        return [(int(a), int(b), int(c)) for a, b, c in CYCLE.findall(self.text())]

    def wait_cycles(self, n: int, timeout: float) -> list[tuple[int, int, int]]:
        end = time.monotonic() + timeout
        while len(self.cycles()) < n:
            assert self.popen.poll() is None, f"the agent exited ({self.popen.returncode}):\n{self.text()[-3000:]}"
            assert time.monotonic() < end, f"{n} cycles not logged in {timeout}s:\n{self.text()[-3000:]}"
            time.sleep(0.5)
        return self.cycles()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)


def _until(ok: Any, what: str, timeout: float, interval: float = 0.5) -> Any:
    end = time.monotonic() + timeout
    while True:
        got = ok()
        if got:
            return got
        assert time.monotonic() < end, f"not within {timeout}s: {what}"
        time.sleep(interval)


# -- a healthy node ------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_a_healthy_node_is_healthy_to_every_command(lab_binaries: Binaries, backend: str, tmp_path: Path) -> None:
    with real_node(lab_binaries, backend=backend) as rn:
        web = rn.service("web", PODS[:2])
        rn.service("nodeport", PODS[2:], port=8443, type="NodePort")
        other = {"address": "192.168.0.3", "type": "InternalIP"}  # another node of the cluster
        rn.api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "lab-node-2"},
                                         "status": {"addresses": [other]}})  # fmt: skip
        rn.wait_synced()
        assert f"-d {web}/32" in rn.rules() and "default/nodeport:http" in rn.rules()
        assert "KUBE-SERVICES" not in rn.rules("nft" if backend == "legacy" else "legacy")
        with rn.lab.servers(8080):
            # real traffic, both Pods (each connection picks one at random: 24 miss one at odds of 2^-23)
            reached = rn.lab.connect(web, 80, count=24)
            assert set(reached) == set(PODS[:2]), reached

            code, report = diagnose(rn, "--save-bundle", str(tmp_path / "node.tar.gz"))
            assert code == 0 and visible(report) == [], visible(report)
            assert report["coverage"]["complete"], report["coverage"]
            assert not [f for f in report["findings"] if f["cause"] == "unexplained-signal"], report["findings"]

            res = in_node(rn, [*KPDOCTOR, "verify", "--live", *_kubeconfig(rn), "--format", "json"])
            assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]

            res = in_node(rn, [*KPDOCTOR, "trace", "--live", *_kubeconfig(rn), "--service", "default/web", "--format",
                               "json"])  # fmt: skip
            assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
            traced = json.loads(res.stdout)
            assert {f"{ip}:8080" for ip in PODS[:2]} <= set(re.findall(r"\d+\.\d+\.\d+\.\d+:8080", json.dumps(traced)))

        # `kpdoctor collect` on the node, the bundle read later elsewhere: the same answer
        res = in_node(rn, [*KPDOCTOR, "collect", *_kubeconfig(rn), "--interval", "1", "-o", str(tmp_path / "c.tar.gz")])
        assert res.returncode == 0, res.stderr[-2000:]
        # kube-proxy's own word on the mode it runs: as collect fetched it, as a user's curl prints it
        with tarfile.open(tmp_path / "c.tar.gz") as tar:
            (member,) = [m for m in tar.getmembers() if m.name.endswith("kube-proxy/proxy-mode.txt")]
            served = tar.extractfile(member)
            assert served is not None and served.read() == b"iptables"
        curl = in_node(rn, ["curl", "-s", "--max-time", "5", "127.0.0.1:10249/proxyMode"])
        assert curl.returncode == 0 and curl.stdout == "iptables", (curl.stdout, curl.stderr)
        for bundle in ("node.tar.gz", "c.tar.gz"):
            res = subprocess.run([*KPDOCTOR, "diagnose", str(tmp_path / bundle), "--format", "json"],
                                 capture_output=True, text=True, timeout=180)  # fmt: skip
            assert res.returncode == 0, res.stderr[-2000:]
            offline = json.loads(res.stdout)
            assert visible(offline) == visible(report) == []
            assert offline["coverage"]["complete"], (bundle, offline["coverage"])

        code, summary = agent_once(rn)
        assert code == 0 and summary["findings"] == [] and summary["error"] is None, summary
        assert summary["mode"] == "iptables" and not summary["not_collected"].get("cluster/endpointslices.json")


# -- the agent -----------------------------------------------------------------------------


def test_the_agent_is_quiet_on_a_healthy_node_and_follows_a_real_fault(lab_binaries: Binaries) -> None:
    with real_node(lab_binaries) as rn:
        web = rn.service("web", PODS[:2])
        rn.wait_synced()
        with agent(rn, every=5) as ag:
            cycles = ag.wait_cycles(10, timeout=120)
            assert [c[1] for c in cycles[:10]] == [0] * 10, ag.text()[-3000:]
            cond = rn.node_condition()
            assert cond is not None and cond["status"] == "False", cond
            assert not [e for e in rn.events() if e["type"] == "Warning"]

            # the fault: kube-proxy stops; the Service's Pod moves (.2 -> .3) meanwhile
            rn.stop_kube_proxy()
            rn.set_endpoints("web", [PODS[0], PODS[2]])
            changed = len(ag.cycles())
            raised = _until(lambda: (c := rn.node_condition()) and c["status"] == "True" and c, "condition True", 40)
            assert raised["reason"] == "EndpointsOutOfSync", raised
            # no kube-proxy runs, so no change can be on its way: the next cycle reports it
            assert len(ag.cycles()) - changed <= 2, ag.cycles()
            warnings = [e for e in rn.events() if e["type"] == "Warning"]
            assert [e["reason"] for e in warnings] == ["EndpointsOutOfSync"], warnings
            assert "default/web" in warnings[0]["message"]

            # the plugin's cluster view reads what the agent wrote
            groups = plugin_cluster(rn)
            assert groups["groups"] == [{"group": "endpoints-out-of-sync", "nodes": [NODE]}], groups

            # the CLI and the agent's own path say the same of the same state
            code, report = diagnose(rn)
            _, summary = agent_once(rn)
            cli = visible(report)
            assert code == 1 and ("KP202", "endpoints-out-of-sync") in [c[:2] for c in cli], cli
            assert [c[:2] for c in agent_findings(summary)] == [c[:2] for c in cli], (summary, cli)

            # the repair: kube-proxy runs again and syncs; the next cycle clears the condition
            rn.start_kube_proxy()
            repaired = len(ag.cycles())
            cleared = _until(lambda: (c := rn.node_condition()) and c["status"] == "False" and c, "cleared", 30)
            assert cleared["reason"] == "KubeProxyHealthy"
            assert len(ag.cycles()) - repaired <= 2, ag.cycles()
            assert any(e["reason"] == "EndpointsOutOfSyncResolved" for e in rn.events())
            assert plugin_cluster(rn)["groups"] == [{"group": "(healthy)", "nodes": [NODE]}]
            with rn.lab.servers(8080):
                # each connection picks a Pod at random: 24 reach both but at odds of 2^-23 (10 failed once)
                assert set(rn.lab.connect(web, 80, count=24)) == {PODS[0], PODS[2]}


def test_endpointslice_churn_raises_nothing(lab_binaries: Binaries) -> None:
    """Endpoints changing every fraction of a second for half a minute, kube-proxy keeping up: the
    agent, cycling every second, sees many changes on their way and reports none of them."""
    sets = [PODS[:1], PODS, PODS[1:2], [PODS[2], PODS[0]]]
    with real_node(lab_binaries) as rn:
        rn.service("web", PODS[:2])
        rn.wait_synced()
        with agent(rn, every=1) as ag:
            ag.wait_cycles(2, timeout=60)
            t0, i = time.monotonic(), 0
            while time.monotonic() - t0 < 30:
                rn.set_endpoints("web", sets[i % len(sets)])
                i += 1
                time.sleep(0.3 + 0.4 * (i % 4))
            rn.wait_synced(after=0)
            n = len(ag.cycles())
            ag.wait_cycles(n + 3, timeout=60)
            cycles = ag.cycles()
        assert len(cycles) >= 15, cycles
        assert all(c[1] == 0 for c in cycles), ag.text()[-3000:]
        assert any(c[2] for c in cycles), "no cycle saw a change on its way: the churn did not test anything"
        assert not [e for e in rn.events() if e["type"] == "Warning"], rn.events()
        cond = rn.node_condition()
        assert cond is not None and cond["status"] == "False"


def test_the_agent_rides_out_an_apiserver_restart(lab_binaries: Binaries) -> None:
    with real_node(lab_binaries) as rn:
        rn.service("web", PODS[:2])
        rn.wait_synced()
        with agent(rn, every=2) as ag:
            ag.wait_cycles(2, timeout=60)
            rn.cp.stop_apiserver()
            down = len(ag.cycles())
            ag.wait_cycles(down + 3, timeout=60)
            assert "not current" in ag.text() or "watching" in ag.text()
            rn.cp.start_apiserver()
            back = len(ag.cycles())
            ag.wait_cycles(back + 4, timeout=120)
            # while away and after: no finding (the objects last seen are still the truth)
            assert all(c[1] == 0 for c in ag.cycles()), ag.text()[-3000:]
            # the change made after the restart is followed (the watch resumed, or listed again)
            rn.set_endpoints("web", PODS)
            rn.wait_synced()
            code, summary = agent_once(rn)
            assert code == 0 and summary["findings"] == [], summary
        cond = rn.node_condition()
        assert cond is not None and cond["status"] == "False"
        assert not [e for e in rn.events() if e["type"] == "Warning"]


def test_an_agent_rbac_denies_says_what_it_may_not_do_and_finds_nothing(lab_binaries: Binaries) -> None:
    with real_node(lab_binaries) as rn:
        rn.service("web", PODS[:2])
        rn.wait_synced()
        rn.stop_kube_proxy()
        rn.set_endpoints("web", [PODS[2]])  # a real fault, which the agent may not see the cluster side of
        _, kubeconfig = rn.cp.service_account_kubeconfig("no-rights")
        netns_conf = rn.dir / "kubeconfig-no-rights"
        conf = json.loads(kubeconfig.read_text())
        conf["clusters"][0]["cluster"]["server"] = f"https://{rn.cp.address}:{rn.cp.PORT}"
        netns_conf.write_text(json.dumps(conf))
        _, summary = agent_once(rn, netns_conf)
    assert summary["findings"] == [], summary  # never verified against a view it could not read
    missing = summary["not_collected"]
    assert "cluster/services.json" in missing, summary
    why = missing["cluster/services.json"]
    assert "system:serviceaccount:default:no-rights" in why and "list" in why and "services" in why, why
    assert "grant" in why or "RBAC" in why, why


# -- a fault the real programs make ----------------------------------------------------------


def test_kubelet_and_kube_proxy_on_different_backends(lab_binaries: Binaries) -> None:
    """Seed 000: the host's iptables (kubelet's) is nf_tables, kube-proxy's image writes legacy.
    kube-proxy 1.20 declares KUBE-MARK-DROP in its backend and leaves it to kubelet, who filled the
    other one: the drop a Local-policy Service with no local endpoint needs is never marked."""
    with real_node(lab_binaries, backend="legacy", kubelet_backend="nft") as rn:
        rn.service("web", PODS[:2])
        rn.service("local", PODS[2:], port=8443, type="NodePort", externalTrafficPolicy="Local")
        rn.wait_synced()
        assert "KUBE-FIREWALL" in rn.rules("nft") and "KUBE-FIREWALL" not in rn.rules("legacy")
        code, report = diagnose(rn)
        top = next(f for f in report["findings"] if f["severity"] in ("critical", "warning"))
        assert code == 1 and (top["code"], top["cause"]) == ("KP121", "kubelet-chains-missing"), visible(report)
        assert "KP101" in top["explains"] and any(x["cause"] == "iptables-backend-mismatch" for x in top["folded"])
        assert any("has no local endpoints" in e["text"] for e in top["evidence"])
        _, summary = agent_once(rn)
        assert [(f["code"], f["cause"]) for f in summary["findings"]][:1] == [("KP121", "kubelet-chains-missing")]


def test_kube_proxy_without_a_cluster_cidr_shows_in_its_rules(lab_binaries: Binaries, tmp_path: Path) -> None:
    """kube-proxy 1.20 without --cluster-cidr (masqueradeAll off) writes no masquerade rule for
    ClusterIP traffic from outside the Pod network: its dump alone makes KP126 suspected, naming
    what decides (its flags). With the CIDR (every other lab test), the `! -s` rule is there."""
    with real_node(lab_binaries, start_proxy=False) as rn:
        rn.start_kube_proxy("--cluster-cidr=")
        web = rn.service("web", PODS[:2])
        rn.wait_synced()
        without = rn.rules()
        rn.stop_kube_proxy()
        rn.start_kube_proxy()  # the lab's --cluster-cidr (returns once it synced)
        with_cidr = rn.rules()
    assert f"-d {web}/32" in without and "cluster IP" in without
    masq = [ln for ln in with_cidr.splitlines() if "cluster IP" in ln and "KUBE-MARK-MASQ" in ln]
    assert masq and "! -s" in masq[0], with_cidr
    assert not [ln for ln in without.splitlines() if "cluster IP" in ln and "KUBE-MARK-MASQ" in ln], without

    def kp126(rules: str) -> list[dict[str, Any]]:
        dump = tmp_path / "iptables-save.txt"
        dump.write_text(rules)
        res = subprocess.run([*KPDOCTOR, "diagnose", str(dump), "--format", "json", "--min-severity", "info"],
                             capture_output=True, text=True, timeout=180)  # fmt: skip
        return [f for f in json.loads(res.stdout)["findings"] if f["code"] == "KP126"]

    (f,) = kp126(without)
    assert f["suspected"] and f["cause"] == "cluster-cidr-misconfigured", f
    assert any("cluster IP" in e["text"] for e in f["evidence"]) and f["decided_by"], f
    assert kp126(with_cidr) == []


def test_a_node_name_nothing_expanded_is_read_from_client_go_s_request_log(
    lab_binaries: Binaries, tmp_path: Path
) -> None:
    """kube-proxy 1.20 given `--hostname-override=$(NODE_NAME)` (a DaemonSet whose env lost
    NODE_NAME: kubelet leaves the reference as written) looks up a Node "$(node_name)" and gets 404.
    At -v=6 client-go logs that GET; kpdoctor names the cause from it, also when the log holds
    nothing else (its own "not found" line cut off or grep'd away), and from a file whose name
    alone says it is kube-proxy's."""
    with real_node(lab_binaries, start_proxy=False) as rn:
        rn.start_kube_proxy("--hostname-override=$(NODE_NAME)", "--v=6")
        log = rn.proxy_log_text()
    gets = [ln for ln in log.splitlines() if "round_trippers.go" in ln and "/api/v1/nodes/" in ln]
    assert any(" 404 Not Found in " in ln and "/nodes/$%28node_name%29" in ln for ln in gets), gets

    def kp111(name: str, text: str) -> dict[str, Any]:
        path = tmp_path / name
        path.write_text(text)
        (f,) = [f for f in diagnose_json(path)["findings"] if f["code"] == "KP111"]
        return f

    whole = kp111("proxy.log", log)
    assert '"$(node_name)"' in whole["summary"] and "nothing expanded" in whole["summary"], whole
    only_gets = kp111("kube-proxy.log", "".join(ln + "\n" for ln in gets))
    assert only_gets["confidence"] == "high" and "nothing expanded" in only_gets["summary"], only_gets
    assert all("round_trippers.go" in e["text"] for e in only_gets["evidence"]), only_gets


def test_a_metrics_port_another_program_holds_is_read_from_go_s_error(lab_binaries: Binaries, tmp_path: Path) -> None:
    """kube-proxy 1.20 whose metrics port (127.0.0.1:10249) another socket holds logs "starting
    metrics server failed" with Go's "bind: address already in use" after it: read from that
    error (not the wrapper alone, which also says "missing port" or "cannot assign"), a second
    kube-proxy or another program holding its port (KP109)."""
    with real_node(lab_binaries, start_proxy=False) as rn:
        holder = subprocess.Popen(
            rn.lab.node.exec_argv([sys.executable, "-c", HOLD_10249]), stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "listening"
            rn.start_kube_proxy()
            _until(lambda: "starting metrics server failed" in rn.proxy_log_text(), "the metrics failure", 30)
            log = rn.proxy_log_text()
        finally:
            holder.kill()
            holder.wait(timeout=30)
    (line,) = {ln.split("] ", 1)[1] for ln in log.splitlines() if "starting metrics server failed" in ln}
    assert line == "starting metrics server failed: listen tcp 127.0.0.1:10249: bind: address already in use"
    path = tmp_path / "kube-proxy.log"
    path.write_text(log)
    found = [f for f in diagnose_json(path)["findings"] if f["cause"] == "multiple-kube-proxy"]
    assert found and found[0]["code"] == "KP109" and "10249" in found[0]["summary"], found


HOLD_10249 = """import socket, time
s = socket.socket()
s.bind(("127.0.0.1", 10249))
s.listen()
print("listening", flush=True)
time.sleep(600)
"""


def test_a_service_table_shows_what_kube_proxy_never_synced(lab_binaries: Binaries, tmp_path: Path) -> None:
    """kube-proxy stopped, then a Service created: `kubectl get svc` (Debian's kubectl 1.20) and
    the node's iptables-save show a Service port the rules leave untouched (KP200), though the
    table shows no endpoints; the synced Service is not named, nor is any rule called stale (the
    table lists one namespace)."""
    kubectl, why = find_kubectl_120(tmp_path / "kubectl")
    assert kubectl is not None, why
    with real_node(lab_binaries) as rn:
        rn.service("web", PODS[:2])
        rn.wait_synced()
        rn.stop_kube_proxy()
        late = rn.service("late", PODS[:1], port=8080)
        rules = rn.rules()
        table = subprocess.run([kubectl, "--kubeconfig", str(rn.cp.kubeconfig), "get", "svc"],
                               capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip
    assert f" {late} " in table
    (tmp_path / "svc.txt").write_text(table)
    (tmp_path / "iptables-save.txt").write_text(rules)
    report = diagnose_json(tmp_path / "svc.txt", tmp_path / "iptables-save.txt")
    missing = [f for f in report["findings"] if f["code"] == "KP200"]
    assert [f["subject"]["service"] for f in missing] == ["default/late"], missing
    assert f"[{late}]:8080" in missing[0]["summary"] or f"{late}:8080" in missing[0]["summary"]
    assert not report["verification"]["stale_rules"]
    assert not [f for f in report["findings"] if f["code"] == "KP201"]


def _v1_endpoints(rn: RealNode, name: str, ips: list[str]) -> None:
    """The Service's v1 Endpoints (what kubectl 1.20's describer reads; the lab has no endpoints
    controller), holding ``ips`` on the Service's port."""
    body = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name},
            "subsets": [{"addresses": [{"ip": ip} for ip in ips],
                         "ports": [{"name": "http", "port": TARGET_PORT, "protocol": "TCP"}]}]}  # fmt: skip
    path = "/api/v1/namespaces/default/endpoints"
    try:
        current = rn.api("GET", f"{path}/{name}")
    except RuntimeError:
        rn.api("POST", path, body)
        return
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    rn.api("PUT", f"{path}/{name}", body)


def _api_changed_unsynced(rn: RealNode) -> None:
    """Services web and api synced by kube-proxy, then kube-proxy stopped and api's endpoints
    changed (PODS[0] gone, PODS[2] added; v1 Endpoints too, what kubectl 1.20 prints)."""
    for name in ("web", "api"):
        rn.service(name, PODS[:2], port=80 if name == "web" else 8081)
        _v1_endpoints(rn, name, PODS[:2])
    rn.wait_synced()
    rn.stop_kube_proxy()
    rn.set_endpoints("api", PODS[1:])
    _v1_endpoints(rn, "api", PODS[1:])


def test_a_description_shows_what_kube_proxy_never_synced(lab_binaries: Binaries, tmp_path: Path) -> None:
    """kube-proxy stopped, then one Service's endpoints changed and another Service created:
    `kubectl describe svc` (Debian's kubectl 1.20) and the node's iptables-save show the first's
    rules sending to an endpoint it no longer has and missing the one it gained (KP202), and the
    new one's port left untouched (KP200); the Service kube-proxy synced is not named, and no
    rule is called stale (a description names only the Services described)."""
    kubectl, why = find_kubectl_120(tmp_path / "kubectl")
    assert kubectl is not None, why
    with real_node(lab_binaries) as rn:
        _api_changed_unsynced(rn)
        late = rn.service("late", PODS[:1], port=8080)
        _v1_endpoints(rn, "late", PODS[:1])
        rules = rn.rules()
        described = subprocess.run([kubectl, "--kubeconfig", str(rn.cp.kubeconfig), "describe", "svc", "web", "api", "late"],
                                   capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip
    assert f"{PODS[2]}:{TARGET_PORT}" in described
    (tmp_path / "describe.txt").write_text(f"$ kubectl describe svc web api late\n{described}")
    (tmp_path / "iptables-save.txt").write_text(rules)
    report = diagnose_json(tmp_path / "describe.txt", tmp_path / "iptables-save.txt")
    kinds = {a["kind"] for a in report["inputs"]}
    assert "kubectl describe services/nodes" in kinds, report["inputs"]
    missing = [f for f in report["findings"] if f["code"] == "KP200"]
    assert [f["subject"]["service"] for f in missing] == ["default/late:http"], missing  # its port named
    assert late in missing[0]["summary"]
    behind = [f for f in report["findings"] if f["code"] == "KP202"]
    assert [f["subject"]["service"] for f in behind] == ["default/api:http"], behind
    assert PODS[0] in behind[0]["summary"] and PODS[2] in behind[0]["summary"], behind[0]["summary"]
    named = {f["subject"].get("service") for f in report["findings"]}
    assert not [n for n in named if n and n.startswith("default/web")]
    assert not report["verification"]["stale_rules"]
    assert not [f for f in report["findings"] if f["code"] == "KP201"]


def test_a_grep_of_the_rules_and_kubectl_get_endpoints_show_what_kube_proxy_never_synced(
    lab_binaries: Binaries, tmp_path: Path
) -> None:
    """What a user pastes: `iptables-save | grep api` on the node and `kubectl get endpoints`
    (Debian's kubectl 1.20) after kube-proxy stopped and the Service's endpoints changed. The
    grep'd rules still DNAT to the endpoint the Service lost: KP202 names it, from a fragment and
    a table row; the Service kube-proxy synced is not named."""
    kubectl, why = find_kubectl_120(tmp_path / "kubectl")
    assert kubectl is not None, why
    with real_node(lab_binaries) as rn:
        _api_changed_unsynced(rn)
        rules = rn.rules()
        table = subprocess.run([kubectl, "--kubeconfig", str(rn.cp.kubeconfig), "get", "endpoints"],
                               capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip
    grepped = [ln for ln in rules.splitlines() if "default/api" in ln or "default/web" in ln]
    assert any(f"{PODS[0]}:{TARGET_PORT}" in ln and "default/api" in ln for ln in grepped)
    paste = tmp_path / "issue.md"
    paste.write_text(
        "After the rollout some requests to api still fail.\n\n```\n$ kubectl get endpoints\n" + table + "```\n\n"
        "```\nroot@node-1:~# iptables-save | grep default/\n" + "\n".join(grepped) + "\n```\n"
    )
    report = diagnose_json(paste)
    behind = [f for f in report["findings"] if f["code"] == "KP202"]
    assert [f["subject"]["service"] for f in behind] == ["default/api"], report["findings"]
    assert f"{PODS[0]}:{TARGET_PORT}" in behind[0]["summary"] and behind[0]["confidence"] == "medium"
    assert any(e["text"].startswith("api ") for e in behind[0]["evidence"]), behind[0]["evidence"]


# -- the shipped RBAC ------------------------------------------------------------------------

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "base"
PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}


def test_the_agent_does_its_work_with_the_rbac_it_ships_with(lab_binaries: Binaries) -> None:
    """deploy/base's ServiceAccount, ClusterRole and bindings, applied to the real apiserver: the
    agent with that ServiceAccount's token reads everything it watches (no list or watch
    forbidden), and writes its condition and Events when a fault appears."""
    import yaml

    with real_node(lab_binaries) as rn:
        for name in ("serviceaccount.yaml", "rbac.yaml"):
            for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
                path = PATHS[doc["kind"]].format(ns=doc["metadata"].get("namespace", ""))
                rn.api("POST", path, doc)
        _, kubeconfig = rn.cp.service_account_kubeconfig("kpdoctor", "kube-system")
        conf = json.loads(kubeconfig.read_text())
        conf["clusters"][0]["cluster"]["server"] = f"https://{rn.cp.address}:{rn.cp.PORT}"
        in_netns = rn.dir / "kubeconfig-kpdoctor"
        in_netns.write_text(json.dumps(conf))
        rn.service("web", PODS[:2])
        rn.wait_synced()
        with agent(rn, every=2, kubeconfig=in_netns) as ag:
            ag.wait_cycles(2, timeout=60)
            cond = rn.node_condition()
            assert cond is not None and cond["status"] == "False", cond
            rn.stop_kube_proxy()
            rn.set_endpoints("web", [PODS[2]])
            _until(lambda: (c := rn.node_condition()) and c["status"] == "True", "condition True", 40)
            assert [e["reason"] for e in rn.events() if e["type"] == "Warning"] == ["EndpointsOutOfSync"]
            log = ag.text()
        assert "forbidden" not in log.lower(), log[-3000:]
