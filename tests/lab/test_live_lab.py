"""``kpdoctor diagnose --live`` inside a node namespace whose rules were broken on purpose.

Each case starts from upstream kube-proxy's own rules (TestOverallIPTablesRules, restored with real
``iptables-restore``), stages one failure from the seeds for real, and runs kpdoctor's **live**
collector in the node namespace, as a user on that node would: ``kpdoctor diagnose --live`` plus
the cluster's objects as a file (the node has no API access here). The report must name the
cause, the Service and a fix, citing what the live collection found on the node.

The lab's namespaces are joined only to each other, every address is one the lab assigned, and
everything is deleted when a test ends, also when it fails (see :mod:`.topology`).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from conftest import DATA, UPSTREAM

from .iptables_capture import load
from .netns import Netns, require_lab
from .topology import Lab

require_lab()

FIX = UPSTREAM / "iptables"
NAME = "TestOverallIPTablesRules"
NODE_IP, CLIENT_IP = "192.168.0.2", "192.168.0.100"
PODS = ["10.180.0.1", "10.180.0.2", "10.180.0.3", "10.180.0.4", "10.180.0.5"]
RULES = (FIX / f"{NAME}.rules").read_text()

# What kubelet (host iptables, nf_tables on a modern OS) creates for itself, as in seed 000.
KUBELET_NFT = """*nat
:KUBE-MARK-DROP - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
COMMIT
*filter
:KUBE-FIREWALL - [0:0]
-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" -m mark --mark 0x8000/0x8000 -j DROP
COMMIT
"""

# A kube-proxy of the KUBE-XLB era (<= 1.23) syncing a Local-policy Service: it jumps to kubelet's
# KUBE-MARK-DROP and never declares it, trusting it to exist in its own backend.
OLD_PROXY_SYNC = """*nat
:KUBE-SERVICES - [0:0]
:KUBE-XLB-AQI6ZPL3RDXEXQXV - [0:0]
-A KUBE-XLB-AQI6ZPL3RDXEXQXV -m comment --comment "ns2/svc2:p80 has no local endpoints" -j KUBE-MARK-DROP
COMMIT
"""


def cluster(mutate: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The fixture's Services, EndpointSlices and Node (with the lab's node address), mutated."""
    doc = json.loads((FIX / f"{NAME}.cluster.json").read_text())
    for it in doc["items"]:
        if it["kind"] == "Node":
            it["status"]["addresses"] = [{"type": "InternalIP", "address": NODE_IP}]
    if mutate:
        mutate(doc)
    return doc


def _item(doc: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    return next(i for i in doc["items"] if i["kind"] == kind and i["metadata"]["name"] == name)


def diagnose_live(ns: Netns, tmp: Path, files: list[Path], timeout: float = 60) -> tuple[dict[str, Any], float]:
    """``kpdoctor diagnose --live`` in the node namespace: (JSON report, seconds it took)."""
    argv = [sys.executable, "-m", "kpdoctor", "diagnose", "--live", "--no-cluster", "--interval", "1"]
    argv += ["--timeout", str(timeout), "--format", "json", "--save-bundle", str(tmp / "live.tar.gz")]
    t0 = time.monotonic()
    res = ns.run([*argv, *map(str, files)], timeout=timeout + 60)
    took = time.monotonic() - t0
    assert res.returncode in (0, 1), f"exit {res.returncode}: {res.stderr}"
    return json.loads(res.stdout), took


def top(report: dict[str, Any]) -> dict[str, Any]:
    visible = [f for f in report["findings"] if f["severity"] in ("critical", "warning")]
    assert visible, f"nothing found: {json.dumps(report, indent=1)[:3000]}"
    return visible[0]


def cites_live(finding: dict[str, Any], prefix: str = "node/") -> list[str]:
    """The live artifacts a finding (or the findings folded under it) cites."""
    return [e["artifact"] for e in finding["evidence"] if e["artifact"].startswith(prefix)]


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


@contextmanager
def node(pods: list[str] = PODS, legacy: str | None = RULES, nft: str | None = None) -> Iterator[Lab]:
    with Lab(NODE_IP, CLIENT_IP, pods) as lab:
        # what kube-proxy itself sets at start-up (localhost NodePorts need it)
        lab.node.check(["sysctl", "-q", "-w", "net.ipv4.conf.all.route_localnet=1"])
        if legacy is not None:
            load(lab.node, legacy, "legacy")
        if nft is not None:
            lab.node.check(["iptables-nft-restore", "--noflush"], input=nft)
        yield lab


def _drop_svc1(doc: dict[str, Any]) -> None:
    """ns1/svc1 was deleted; its rules still DNAT to 10.180.0.1."""
    doc["items"] = [
        i
        for i in doc["items"]
        if not (i["kind"] == "Service" and i["metadata"]["name"] == "svc1")
        and not (i["kind"] == "EndpointSlice" and i["metadata"]["name"].startswith("svc1"))
    ]


def test_stale_rules_for_a_deleted_service(tmp_path: Path) -> None:
    with node() as lab:
        report, _ = diagnose_live(lab.node, tmp_path, [write(tmp_path, "cluster.json", json.dumps(cluster(_drop_svc1)))])
    f = top(report)
    assert (f["code"], f["cause"]) == ("KP201", "stale-service-rules")
    assert f["subject"]["service"].startswith("ns1/svc1")
    assert "node/iptables-legacy-save.txt" in cites_live(f)
    assert f["fix"]


def test_endpoint_chain_pointing_at_a_pod_that_no_longer_exists(tmp_path: Path) -> None:
    # svc1's Pod 10.180.0.1 was replaced by 10.180.0.7; the rules still DNAT to the old one.
    def moved(doc: dict[str, Any]) -> None:
        _item(doc, "EndpointSlice", "svc1-1")["endpoints"][0]["addresses"] = ["10.180.0.7"]

    with node(pods=["10.180.0.7", *PODS[1:]]) as lab:
        report, _ = diagnose_live(lab.node, tmp_path, [write(tmp_path, "cluster.json", json.dumps(cluster(moved)))])
    f = top(report)
    assert (f["code"], f["cause"]) == ("KP202", "endpoints-out-of-sync")
    assert f["subject"]["service"].startswith("ns1/svc1")
    assert "node/iptables-legacy-save.txt" in cites_live(f)
    assert any("10.180.0.1" in e["text"] for e in f["evidence"])
    assert f["fix"]


def test_no_local_endpoints_drop_while_the_pod_is_local(tmp_path: Path) -> None:
    # svc2 (externalTrafficPolicy: Local): its endpoint runs on this node, yet the rules still
    # say "has no local endpoints" and drop external traffic.
    def local(doc: dict[str, Any]) -> None:
        _item(doc, "EndpointSlice", "svc2-1")["endpoints"][0]["nodeName"] = "test-node"

    with node() as lab:
        report, _ = diagnose_live(lab.node, tmp_path, [write(tmp_path, "cluster.json", json.dumps(cluster(local)))])
    f = top(report)
    # The root cause ranked first is kube-proxy not knowing its own node (seed 002), with the
    # dropped Local-policy traffic folded under it as its symptom.
    assert (f["code"], f["cause"]) == ("KP111", "node-ip-unresolved")
    assert "KP203" in f["explains"] and "ns2/svc2" in f["summary"]
    [symptom] = [x for x in f["folded"] if x["code"] == "KP203"]
    assert symptom["cause"] == "local-endpoints-not-recognised" and symptom["subject"]["service"].startswith("ns2/svc2")
    assert "node/iptables-legacy-save.txt" in cites_live(f)
    assert any("hostnameOverride" in x or "hostname-override" in x for x in f["fix"])


def test_a_foreign_drop_in_forward(tmp_path: Path) -> None:
    with node() as lab:
        lab.node.check(["iptables-legacy", "-t", "filter", "-I", "FORWARD", "1", "-d", "10.180.0.3/32", "-j", "DROP"])
        report, _ = diagnose_live(lab.node, tmp_path, [write(tmp_path, "cluster.json", json.dumps(cluster()))])
    f = top(report)
    assert (f["code"], f["cause"]) == ("KP204", "iptables-drop-rule")
    assert f["subject"]["service"].split(":")[0] in ("ns3/svc3", "ns5/svc5")
    assert any("-A FORWARD -d 10.180.0.3/32 -j DROP" in e["text"] for e in f["evidence"])
    assert "node/iptables-legacy-save.txt" in cites_live(f)


def test_kube_rules_split_across_backends(tmp_path: Path) -> None:
    # An earlier kube-proxy image wrote nf_tables rules; the current one writes legacy. The old
    # set still sends svc1 to its previous Pod.
    older = RULES.replace("10.180.0.1", "10.180.0.9")
    with node(legacy=None) as lab:
        load(lab.node, RULES, "legacy")
        load(lab.node, older, "nft")
        report, _ = diagnose_live(lab.node, tmp_path, [write(tmp_path, "cluster.json", json.dumps(cluster()))])
    f = top(report)
    assert f["cause"] == "iptables-backend-mismatch"
    assert f["code"] in ("KP205", "KP101")
    live = cites_live(f)
    assert "node/iptables-legacy-save.txt" in live and "node/iptables-nft-save.txt" in live
    split = [x for x in [f, *f.get("folded", [])] if x["code"] == "KP205"]
    assert split and split[0]["subject"]["service"].startswith("ns1/svc1"), "the disagreeing Service port is named"
    assert f["fix"]


def test_kube_mark_drop_only_in_the_other_backend(tmp_path: Path) -> None:
    # kubelet (nf_tables) made KUBE-MARK-DROP; a legacy kube-proxy's restore cannot find it.
    with node(nft=KUBELET_NFT) as lab:
        res = lab.node.run(["iptables-legacy-restore", "--noflush"], input=OLD_PROXY_SYNC)
        assert res.returncode != 0 and "Couldn't load target `KUBE-MARK-DROP'" in res.stderr, res.stderr
        stderr = write(tmp_path, "restore-stderr.txt", res.stderr)
        report, _ = diagnose_live(lab.node, tmp_path, [stderr, write(tmp_path, "cluster.json", json.dumps(cluster()))])
    f = top(report)
    assert (f["code"], f["cause"]) == ("KP101", "iptables-backend-mismatch")
    assert any(e["artifact"].endswith("restore-stderr.txt") for e in f["evidence"])
    assert cites_live(f), "the diagnosis also cites what the live collection found on the node"
    assert any("upgrade" in x.lower() or "backend" in x.lower() for x in f["fix"])


@contextmanager
def lock_held(ns: Netns, lockfile: Path) -> Iterator[subprocess.Popen[str]]:
    """A real iptables-restore holding the lab's xtables lock (it takes it at ``*filter`` and keeps
    it while it waits for the rest of its input)."""
    env = dict(os.environ, XTABLES_LOCKFILE=str(lockfile))
    holder = subprocess.Popen(
        ns.exec_argv(["iptables-legacy-restore", "--noflush"]),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert holder.stdin is not None
        holder.stdin.write("*filter\n")
        holder.stdin.flush()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(f" {holder.pid} " in line and "FLOCK" in line for line in Path("/proc/locks").read_text().splitlines()):
                break
            time.sleep(0.05)
        yield holder
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_xtables_lock_held_by_another_process(tmp_path: Path) -> None:
    lockfile = tmp_path / "xtables.lock"  # the lab's own: /run/xtables.lock is never touched
    env = dict(os.environ, XTABLES_LOCKFILE=str(lockfile))
    with node() as lab, lock_held(lab.node, lockfile):
        res = subprocess.run(
            lab.node.exec_argv(["iptables-legacy-restore", "-w", "1", "--noflush"]),
            input="*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n",
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
        )
        assert res.returncode == 4 and "Stopped waiting after 1s" in res.stderr, res.stderr
        stderr = write(tmp_path, "restore-stderr.txt", res.stderr)
        report, _ = diagnose_live(lab.node, tmp_path, [stderr, write(tmp_path, "cluster.json", json.dumps(cluster()))])
    f = top(report)
    assert (f["code"], f["cause"]) == ("KP104", "xtables-lock-held-too-long")
    assert "node/locks.txt" in cites_live(f) and "node/processes.txt" in cites_live(f)
    assert "iptables-legacy-restore" in f["summary"]
    assert f["fix"]


def test_the_saved_bundle_gives_the_same_diagnosis_offline(tmp_path: Path) -> None:
    """What --live saw, saved with --save-bundle, diagnoses the same later on another machine."""
    files = [write(tmp_path, "cluster.json", json.dumps(cluster(_drop_svc1)))]
    with node() as lab:
        live, _ = diagnose_live(lab.node, tmp_path, files)
    bundle = tmp_path / "live.tar.gz"
    with tarfile.open(bundle) as tf:
        names = tf.getnames()
    assert any(n.endswith("/manifest.json") for n in names)
    assert any(n.endswith("/node/iptables-legacy-save.txt") for n in names)
    res = subprocess.run(
        [sys.executable, "-m", "kpdoctor", "diagnose", "--format", "json", str(bundle), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    offline = json.loads(res.stdout)

    def key(r: dict[str, Any]) -> list[tuple[str, str, str | None]]:
        return [(f["code"], f["severity"], (f.get("subject") or {}).get("service")) for f in r["findings"]]

    assert key(offline) == key(live)
    assert copy.deepcopy(offline["verification"]["results"]) == live["verification"]["results"]


def test_a_healthy_node_collected_live_is_healthy_and_a_lone_listing_is_not(tmp_path: Path) -> None:
    """Everything --live collects, with kube-proxy's log (the lab runs no kube-proxy: a real healthy
    one's log is given, as a user on a node whose kube-proxy runs elsewhere would), lets most
    checks of every family of causes run: a healthy node is then "healthy" (exit 0). Without the
    log, sync failures are not ruled out and the log is what to send. Its iptables-save alone, the
    same rules, is only "nothing found in what was given", naming the families it could not rule
    out and the live run."""
    files = [write(tmp_path, "cluster.json", json.dumps(cluster()))]
    files.append(DATA / "logs" / "healthy-structured-era-2.log")  # an iptables-mode kube-proxy
    with node() as lab:
        live, _ = diagnose_live(lab.node, tmp_path, files)
        saved = lab.node.check(["iptables-legacy-save"])
    cov = live["coverage"]
    assert [f for f in live["findings"] if f["severity"] != "info"] == []
    assert cov["complete"] and cov["not_ruled_out"] == [] and cov["send"] == [], json.dumps(cov, indent=1)
    text = subprocess.run(
        [sys.executable, "-m", "kpdoctor", "diagnose", str(tmp_path / "live.tar.gz"), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert text.returncode == 0 and "HEALTHY" in text.stdout.splitlines()[1], text.stdout[:500]
    lone = subprocess.run(
        [sys.executable, "-m", "kpdoctor", "diagnose", str(write(tmp_path, "rules.txt", saved))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = " ".join(lone.stdout.split())  # the terminal report wraps its lines
    assert lone.returncode == 0 and "NOTHING FOUND IN WHAT WAS GIVEN" in said, lone.stdout[:500]
    assert "not ruled out" in said and "--live" in said
    no_log = subprocess.run(
        [sys.executable, "-m", "kpdoctor", "diagnose", "-f", "json", str(tmp_path / "live.tar.gz"), str(files[0])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    cov = json.loads(no_log.stdout)["coverage"]
    assert cov["not_ruled_out"] == ["rule sync failures"] and not any("--live" in s for s in cov["send"])
    assert any("kube-proxy" in s and "logs" in s for s in cov["send"]), cov["send"]


REPO = Path(__file__).resolve().parents[2]
TOKEN = "PLANTED-TOKEN-5d1e0c7f9a2b4c6e"
SECRET = "PLANTED-SECRET-0a9b8c7d6e5f"
PASSWORD = "PLANTED-PASSWORD-f00dfeed"


@contextmanager
def api_server(ns: Netns, tmp: Path, objects: dict[str, Any]) -> Iterator[Path]:
    """The replay API server (tests/kubeapi_replay.py) listening on 127.0.0.1 inside ``ns``; yields
    a kubeconfig for it whose user carries a planted token."""
    from kubeapi_replay import cluster_exchanges, get_exchange

    exchanges = cluster_exchanges(**objects)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "ns1"},
              "type": "Opaque", "data": {"password": SECRET}, "stringData": {"plain": SECRET}}
    exchanges.append(get_exchange("/api/v1/namespaces/ns1/secrets/db", secret, repeat=True))
    exchanges.append(get_exchange("/api/v1/secrets", {"kind": "SecretList", "apiVersion": "v1", "items": [secret]},
                                  repeat=True, query={}))
    (tmp / "exchanges.json").write_text(json.dumps(exchanges))
    portfile = tmp / "port"
    server = subprocess.Popen(
        ns.exec_argv([sys.executable, "-m", "tests.kubeapi_replay", str(tmp / "exchanges.json"), str(portfile)]),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while not portfile.exists():
            assert server.poll() is None and time.monotonic() < deadline, "replay server did not start"
            time.sleep(0.05)
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
            f"clusters:\n- name: lab\n  cluster:\n    server: http://127.0.0.1:{portfile.read_text()}\n"
            "contexts:\n- name: lab\n  context:\n    cluster: lab\n    user: lab\n"
            f"users:\n- name: lab\n  user:\n    token: {TOKEN}\n"
        )
        yield kubeconfig
    finally:
        server.kill()
        server.wait(timeout=10)


def api_objects() -> dict[str, Any]:
    """The stale-rules case as the API serves it, plus a Pod with a password in its environment
    and a kube-proxy ConfigMap whose kubeconfig carries a token."""
    doc = cluster(_drop_svc1)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for it in doc["items"]:
        by_kind.setdefault(it["kind"], []).append(it)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": "ns2"},
        "spec": {"nodeName": "test-node", "containers": [
            {"name": "db", "image": "postgres:16", "env": [{"name": "DB_PASSWORD", "value": PASSWORD}]}]},
        "status": {"phase": "Running", "podIP": "10.180.0.2"},
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "data": {
            "config.conf": (FIX / f"{NAME}.kube-proxy.yaml").read_text(),
            "kubeconfig.conf": f"apiVersion: v1\nkind: Config\nusers:\n- name: kube-proxy\n  user:\n    token: {TOKEN}\n",
        },
    }
    return {
        "services": by_kind["Service"],
        "endpointslices": by_kind["EndpointSlice"],
        "nodes": by_kind["Node"],
        "pods": [pod],
        "configmaps": [configmap],
    }


def test_live_with_the_api_and_no_secret_reaches_the_bundle(tmp_path: Path) -> None:
    """The cluster's objects come from the API (the replay server inside the node namespace):
    the diagnosis is the same, the Node is found by its address, and neither the kubeconfig's
    token, nor a Secret, nor a Pod's password reaches the saved bundle."""
    bundle = tmp_path / "live.tar.gz"
    with node() as lab, api_server(lab.node, tmp_path, api_objects()) as kubeconfig:
        argv = [sys.executable, "-m", "kpdoctor", "diagnose", "--live", "--kubeconfig", str(kubeconfig)]
        argv += ["--interval", "1", "--format", "json", "--save-bundle", str(bundle)]
        res = lab.node.run(argv, timeout=120)
        assert res.returncode == 1, res.stderr
        report = json.loads(res.stdout)
    assert report["subject"]["node"] == "test-node"
    f = top(report)
    assert (f["code"], f["subject"]["service"].split(":")[0]) == ("KP201", "ns1/svc1")
    assert report["verification"]["services_checked"] == 5
    with tarfile.open(bundle) as tf:
        names = tf.getnames()
        blob = b"".join(fh.read() for m in tf.getmembers() if (fh := tf.extractfile(m)) is not None)
    assert any(n.endswith("cluster/services.json") for n in names)
    assert any(n.endswith("cluster/configmaps.json") for n in names)
    assert any(n.endswith("cluster/pods.json") for n in names)
    for planted in (TOKEN, SECRET, PASSWORD):
        assert planted.encode() not in blob, planted
        assert base64.b64encode(planted.encode()) not in blob, planted
    assert b"<redacted>" in blob


def _summary(report: dict[str, Any]) -> tuple[list[tuple[str, str, str | None]], list[tuple[str, str, str, str]]]:
    findings = [(f["code"], f["severity"], (f.get("subject") or {}).get("service")) for f in report["findings"]]
    rows = sorted((r["service"], r["port"], r["traffic"], r["status"]) for r in report["verification"]["results"])
    return findings, rows


def test_a_bundle_with_redacted_addresses_diagnoses_the_same(tmp_path: Path) -> None:
    """--redact-ips replaces every address in every artifact with one prefix-preserving mapping,
    so the bundle still says the same thing about the node."""
    redacted = tmp_path / "redacted.tar.gz"
    with node() as lab, api_server(lab.node, tmp_path, api_objects()) as kubeconfig:
        res = lab.node.run(
            [sys.executable, "-m", "kpdoctor", "diagnose", "--live", "--kubeconfig", str(kubeconfig), "--interval",
             "1", "--format", "json"],
            timeout=120,
        )
        live = json.loads(res.stdout)
        res = lab.node.run(
            [sys.executable, "-m", "kpdoctor", "collect", "--redact-ips", "--kubeconfig", str(kubeconfig), "--interval",
             "1", "-o", str(redacted)],
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
    res = subprocess.run([sys.executable, "-m", "kpdoctor", "diagnose", "--format", "json", str(redacted)],
                         capture_output=True, text=True, timeout=120)
    offline = json.loads(res.stdout)
    assert _summary(offline) == _summary(live)
    assert offline["findings"][0]["code"] == "KP201"
    with tarfile.open(redacted) as tf:
        blob = b"".join(fh.read() for m in tf.getmembers() if (fh := tf.extractfile(m)) is not None)
    for original in (NODE_IP, *PODS, "172.30.0.41", CLIENT_IP):
        assert not re.search(rb"(?<![\d.])" + re.escape(original.encode()) + rb"(?![\d])", blob), original


def test_no_namespace_of_this_run_is_left() -> None:
    """Every namespace the cases above made is gone, failed cases included (Lab and Netns delete
    theirs on the way out)."""
    from .netns import PREFIX, list_netns

    assert list_netns(f"{PREFIX}{os.getpid()}-") == []
