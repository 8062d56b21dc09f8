"""`kpdoctor verify` and `kpdoctor trace` as a user runs them: tables, JSON, exit codes, errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from conftest import UPSTREAM

from kpdoctor.cli import app
from kpdoctor.demo import demo_path

runner = CliRunner()
FIX = UPSTREAM / "iptables"
N = "TestOverallIPTablesRules"
SAVE, CLUSTER, CFG = (str(FIX / f"{N}.{x}") for x in ("nft.save", "cluster.json", "kube-proxy.yaml"))


def test_verify_clean_table_and_exit_0() -> None:
    r = runner.invoke(app, ["verify", SAVE, CLUSTER, CFG])
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())  # a sentence wraps at the terminal's width
    assert "6 Service(s) checked" in said and ": clean" in said
    assert "ns4/svc4:p80" in r.output and "pod ok, node ok, externalIP ok" in r.output


def test_verify_mismatch_exit_1_and_json(tmp_path: Path) -> None:
    doc = json.loads(Path(CLUSTER).read_text())
    for it in doc["items"]:
        if it["kind"] == "EndpointSlice" and it["metadata"]["name"] == "svc4-1":
            it["endpoints"] = it["endpoints"][:1]
    cl = tmp_path / "cluster.json"
    cl.write_text(json.dumps(doc))
    r = runner.invoke(app, ["verify", SAVE, str(cl)])
    assert r.exit_code == 1 and "mismatch" in r.output and "10.180.0.5:80" in r.output
    r = runner.invoke(app, ["verify", SAVE, str(cl), "--format", "json"])
    out = json.loads(r.output)
    assert out["schema"] == "kpdoctor.report/v1" and out["verification"]["mismatches"] == 3
    assert {f["cause"] for f in out["findings"]} == {"endpoints-out-of-sync"}
    bad = [x for x in out["verification"]["results"] if x["status"] == "mismatch"]
    assert all(x["stale_backends"] == ["10.180.0.5:80"] and x["service"] == "ns4/svc4" for x in bad)


def test_verify_service_filter() -> None:
    r = runner.invoke(app, ["verify", SAVE, CLUSTER, "--service", "ns5/svc5", "--format", "json"])
    assert r.exit_code == 0
    res = json.loads(r.output)["verification"]["results"]
    assert {x["service"] for x in res} == {"ns5/svc5"} and len(res) == 5
    r = runner.invoke(app, ["verify", SAVE, CLUSTER, "--service", "ns5/nope"])
    assert r.exit_code == 2 and "no Service ns5/nope in the evidence" in r.output


def test_verify_needs_rules_and_services() -> None:
    r = runner.invoke(app, ["verify", SAVE])
    assert r.exit_code == 2 and "needs the node's rules (iptables-save output" in r.output and "the cluster's Services" in r.output


def test_trace_to_address_text_and_json() -> None:
    r = runner.invoke(app, ["trace", SAVE, "--to", "172.30.0.44:80/tcp", "--from", "10.1.2.3"])
    assert r.exit_code == 0, r.output
    assert "1. 50.0% DNAT to 10.180.0.4:80" in r.output and "2. 50.0% DNAT to 10.180.0.5:80" in r.output
    assert "line 102" in r.output and "--probability 0.50000000000" in r.output
    r = runner.invoke(app, ["trace", SAVE, "--to", "172.30.0.46:80", "--format", "json"])
    doc = json.loads(r.output)
    assert doc["schema"] == "kpdoctor.trace/v1"
    [t] = doc["traces"]
    [o] = t["outcomes"]
    assert o["verdict"] == "REJECT" and o["steps"][-1]["table"] == "filter" and o["steps"][-1]["line"]


def test_trace_service_and_output_hook() -> None:
    r = runner.invoke(app, ["trace", SAVE, CLUSTER, "--service", "ns1/svc1", "--hook", "output"])
    assert r.exit_code == 0, r.output
    assert "DNAT to 10.180.0.1:80 (masqueraded)" in r.output and "the node's own address" in r.output


def test_trace_usage_errors() -> None:
    assert runner.invoke(app, ["trace", SAVE]).exit_code == 2
    r = runner.invoke(app, ["trace", SAVE, "--to", "nonsense"])
    assert r.exit_code == 2 and "expected IP:PORT" in r.output
    r = runner.invoke(app, ["trace", SAVE, "--to", "[2001:db8::1]:80", "--from", "10.0.0.1"])
    assert r.exit_code == 2 and "different address families" in r.output
    r = runner.invoke(app, ["trace", SAVE, "--to", "[2001:db8::1]:80"])
    assert r.exit_code == 2 and "IPv6" in r.output
    r = runner.invoke(app, ["trace", CLUSTER, "--to", "10.0.0.1:80"])
    assert r.exit_code == 2 and "no iptables rules" in r.output


# -- D18: --service as users write it; trace's other traffic classes and its exit codes ----------

EKS = str(demo_path("config-ignores-hostname"))


def test_verify_service_port_by_number_or_name() -> None:
    for wanted in ("ns1/svc1:80", "ns1/svc1:p80", "ns1/svc1:80/tcp", "svc1:80", "svc1"):
        r = runner.invoke(app, ["verify", SAVE, CLUSTER, "--service", wanted, "--format", "json"])
        assert r.exit_code == 0, (wanted, r.output)
        res = json.loads(r.output[r.output.index("{") : r.output.rindex("}") + 1])["verification"]["results"]
        assert {(x["service"], x["port"]) for x in res} == {("ns1/svc1", "p80")} and len(res) == 2, wanted
    r = runner.invoke(app, ["verify", SAVE, CLUSTER, "--service", "ns1/svc1:80"])
    assert "--service ns1/svc1:80 means ns1/svc1:p80" in r.output
    # port 53 is both of kube-dns's ports (UDP and TCP); 53/udp is one
    r = runner.invoke(app, ["verify", EKS, "--service", "kube-system/kube-dns:53"])
    assert r.exit_code == 0 and "kube-system/kube-dns:dns " in r.output and "kube-system/kube-dns:dns-tcp" in r.output
    r = runner.invoke(app, ["verify", EKS, "--service", "kube-dns:53/udp"])
    assert "kube-system/kube-dns:dns " in r.output and "kube-dns:dns-tcp" not in r.output.split("means")[-1]


def test_verify_service_that_is_not_there_says_what_is() -> None:
    r = runner.invoke(app, ["verify", SAVE, CLUSTER, "--service", "ns2/svc1"])
    assert r.exit_code == 2 and "no Service ns2/svc1 in the evidence; did you mean ns1/svc1?" in r.output
    r = runner.invoke(app, ["verify", SAVE, CLUSTER, "--service", "svc7"])
    assert r.exit_code == 2 and "no Service named svc7 in the evidence (give NS/NAME); did you mean" in r.output
    r = runner.invoke(app, ["verify", SAVE, CLUSTER, "--service", "ns1/svc1:81"])
    assert r.exit_code == 2 and "ns1/svc1 has no port 81 (its ports: p80 = 80/TCP)" in r.output


def test_verify_help_documents_exit_3_for_partly_uncertain() -> None:
    out = " ".join(runner.invoke(app, ["verify", "--help"]).output.split())
    assert "3: inconclusive, some results uncertain" in out and "NS/NAME:PORT with the port's name or number" in out


def test_trace_exit_1_when_every_branch_is_dropped() -> None:
    r = runner.invoke(app, ["trace", EKS, "--to", "10.188.166.140:30581", "--from", "203.0.113.9"])
    assert r.exit_code == 1 and "1. 100.0% DROP" in r.output and "Outcome: 100.0% dropped or rejected" in r.output


def test_trace_service_nodeport_traffic_as_verify_sends_it() -> None:
    """verify reports the NodePort of service-2048 as a mismatch (seed 002): the same packet is
    traced with --traffic nodeport, found by the port number users think in."""
    r = runner.invoke(app, ["verify", EKS, "--service", "2048-game/service-2048"])
    assert r.exit_code == 1 and "nodeport MISMATCH" in r.output
    r = runner.invoke(app, ["trace", EKS, "--service", "service-2048:80", "--traffic", "nodeport", "--format", "json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output[r.output.index("{") : r.output.rindex("}") + 1])
    [t] = doc["traces"]
    assert t["service"] == "2048-game/service-2048" and t["traffic"] == "external-to-nodeport"
    assert t["packet"]["dst"] == "10.188.166.140" and t["packet"]["dport"] == 30581
    assert t["packet"]["src"] == "198.51.100.77" and "stand-in outside client" in t["packet"]["source"]
    assert [o["verdict"] for o in t["outcomes"]] == ["DROP"] and t["summary"] == "100.0% dropped or rejected"
    # the ClusterIP is delivered, and its notes name the other classes to trace
    r = runner.invoke(app, ["trace", EKS, "--service", "2048-game/service-2048"])
    assert r.exit_code == 0 and "--traffic node (172.20.114.87:80), nodeport (10.188.166.140:30581)" in r.output


def test_trace_service_traffic_usage_errors() -> None:
    r = runner.invoke(app, ["trace", SAVE, CLUSTER, "--service", "ns1/svc1", "--traffic", "nodeport"])
    assert r.exit_code == 2 and "ns1/svc1:p80 has no nodeport traffic (--traffic pod, node)" in r.output
    r = runner.invoke(app, ["trace", SAVE, "--to", "172.30.0.41:80", "--traffic", "nodeport"])
    assert r.exit_code == 2 and "--traffic goes with --service" in r.output
    r = runner.invoke(app, ["trace", SAVE, CLUSTER, "--service", "ns3/svc3", "--traffic", "nodeport", "--hook", "output"])
    assert r.exit_code == 2 and "--hook output does not go with --traffic nodeport" in r.output
    r = runner.invoke(app, ["trace", SAVE, CLUSTER, "--service", "ns2/svc1"])
    assert r.exit_code == 2 and "did you mean ns1/svc1?" in r.output


def test_trace_exit_3_when_a_branch_cannot_be_read(tmp_path: Path) -> None:
    rules = Path(EKS, "node", "iptables-legacy-save.txt").read_text()
    broken = rules.replace("--to-destination 10.188.166.183:80\n", "--to-destination 10.188.166.183:0x50\n")
    assert broken != rules
    (tmp_path / "rules.txt").write_text(broken)
    r = runner.invoke(app, ["trace", str(tmp_path / "rules.txt"), "--to", "172.20.114.87:80"])
    assert r.exit_code == 3 and "uncertain: cannot read DNAT --to-destination 10.188.166.183:0x50" in r.output


def test_trace_help_documents_its_exit_codes_and_traffic() -> None:
    out = " ".join(runner.invoke(app, ["trace", "--help"]).output.split())
    assert "Exit 0: every branch delivered" in out and "1: some or all of the connections are dropped" in out
    assert "3: a branch could not be evaluated" in out and "--traffic nodeport" in out
