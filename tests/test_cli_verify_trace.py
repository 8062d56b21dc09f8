"""`kpdoctor verify` and `kpdoctor trace` as a user runs them: tables, JSON, exit codes, errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from conftest import UPSTREAM

from kpdoctor.cli import app

runner = CliRunner()
FIX = UPSTREAM / "iptables"
N = "TestOverallIPTablesRules"
SAVE, CLUSTER, CFG = (str(FIX / f"{N}.{x}") for x in ("nft.save", "cluster.json", "kube-proxy.yaml"))


def test_verify_clean_table_and_exit_0() -> None:
    r = runner.invoke(app, ["verify", SAVE, CLUSTER, CFG])
    assert r.exit_code == 0, r.output
    assert "6 Service(s) checked" in r.output and ": clean" in r.output
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
    assert r.exit_code == 2 and "no Service port matches" in r.output


def test_verify_needs_rules_and_services() -> None:
    r = runner.invoke(app, ["verify", SAVE])
    assert r.exit_code == 2 and "needs iptables-save output and the cluster's Services" in r.output


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
