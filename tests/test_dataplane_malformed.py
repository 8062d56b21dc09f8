"""Rules a half-synced or damaged node really has, and values no kube-proxy writes: verification
and diagnosis carry on and say what they could not read (D7, D8), never a traceback.

Built from the EKS demo bundle (seed 002) and kube-proxy's own upstream rule sets, mutated the way
a partial sync, a hand edit or a corrupted copy mutates them."""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import DATA, UPSTREAM

from kpdoctor.cli import app
from kpdoctor.dataplane.iptables.compile import compile_tables
from kpdoctor.dataplane.iptables.evaluate import Evaluator, Packet
from kpdoctor.demo import demo_path
from kpdoctor.parse.iptables import parse_save

runner = CliRunner()
EKS = demo_path("config-ignores-hostname")
RULES = "node/iptables-legacy-save.txt"
OVERALL = UPSTREAM / "iptables" / "TestOverallIPTablesRules"


def eks_copy(tmp: Path) -> Path:
    dest = tmp / "bundle"
    shutil.copytree(EKS, dest)
    return dest


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


Doc = dict[str, Any]


def verify_json(*args: str) -> tuple[int, Doc, str]:
    r = runner.invoke(app, ["verify", *args, "--format", "json"])
    assert "internal error" not in r.output and "Traceback" not in r.output, r.output
    start = r.output.index("{")
    return r.exit_code, json.loads(r.output[start : r.output.rindex("}") + 1]), r.output


def diagnose_problems(*args: str) -> list[str]:
    """``kpdoctor diagnose --format json``'s input problems, once it is known not to have crashed."""
    r = runner.invoke(app, ["diagnose", *args, "--format", "json"])
    assert r.exit_code in (0, 1, 3) and "internal error" not in r.output, r.output
    doc = json.loads(r.output[r.output.index("{") : r.output.rindex("}") + 1])
    return [p["message"] for p in doc["input_problems"]]


def results(doc: Doc, service: str) -> list[Doc]:
    return [x for x in doc["verification"]["results"] if x["service"] == service]


# -- D7: a KUBE-SEP chain without its DNAT rule --------------------------------------------------


def test_sep_chain_without_dnat_is_a_mismatch_naming_the_rule(tmp_path: Path) -> None:
    """A node in the middle of a sync: one endpoint's chain lost its DNAT rule. Half of the
    traffic goes on un-DNATed; the path also crosses `-i eni+` rules that cannot be decided
    (the case that made the two forks' outcomes unsortable)."""
    b = eks_copy(tmp_path)
    rules = b / RULES
    rules.write_text(re.sub(r"(?m)^-A KUBE-SEP-BBIMAE4S3SOUTVAM .*DNAT.*\n", "", rules.read_text()))
    jump = rules.read_text().splitlines().index("-A KUBE-SVC-NPX46M4PTMTKRN6Y -j KUBE-SEP-BBIMAE4S3SOUTVAM") + 1
    code, doc, _ = verify_json(str(b))
    assert code == 1
    [pod, node] = [r for r in results(doc, "default/kubernetes") if r["traffic"].endswith("clusterip")]
    for r in (pod, node):
        assert r["status"] == "mismatch" and r["missing_backends"] == ["10.188.130.27:443"]
        lost = [a for a in r["actual"] if a["backend"] is None]
        assert lost and lost[0]["verdict"] == "ACCEPT" and lost[0]["probability"] == 0.5
        assert lost[0]["rule"]["line"] == jump  # the jump into the chain that has no DNAT
        assert f"50% of this traffic is not translated to any backend after line {jump}" in r["note"]
        assert "KUBE-SEP-BBIMAE4S3SOUTVAM" in r["note"]
    text = runner.invoke(app, ["verify", str(b)])
    assert text.exit_code == 1 and f"not translated 50% (line {jump})" in text.output


def test_split_backends_where_one_lost_a_dnat_rule(tmp_path: Path) -> None:
    """Service rules in both iptables backends, one of them missing an endpoint's DNAT: the two
    disagree (a "split" mismatch), which compares an un-DNATed outcome with DNATed ones."""
    legacy = (OVERALL.with_suffix(".legacy.save")).read_text()
    broken = re.sub(r"(?m)^-A KUBE-SEP-\w+ .*--to-destination 10\.180\.0\.5:80\n", "", legacy)
    assert broken != legacy
    (tmp_path / "legacy.save").write_text(broken)
    shutil.copy(OVERALL.with_suffix(".nft.save"), tmp_path / "nft.save")
    code, doc, _ = verify_json(
        str(tmp_path / "legacy.save"), str(tmp_path / "nft.save"), str(OVERALL.with_suffix(".cluster.json"))
    )
    assert code == 1
    svc4 = results(doc, "ns4/svc4")
    assert svc4 and all(r["status"] == "mismatch" and r["mismatch"] == "split" for r in svc4)
    assert "the two iptables backends disagree" in str(svc4[0]["note"])


# -- D8: values kpdoctor cannot read ------------------------------------------------------------


def test_v1_endpoints_with_a_null_address(tmp_path: Path) -> None:
    b = eks_copy(tmp_path)
    p = b / "cluster" / "endpoints.json"
    doc = json.loads(p.read_text())
    for e in doc.get("items", [doc]):
        for s in e.get("subsets") or []:
            s["addresses"] = (s.get("addresses") or []) + [None]
    p.write_text(json.dumps(doc, indent=1))
    problems = diagnose_problems(str(b))
    assert any(
        re.match(r"cluster/endpoints.json line \d+: Endpoints kube-system/kube-dns: address\(es\) null: not IP", p)
        for p in problems
    ), problems
    code, out, _ = verify_json(str(b))
    assert code == 3  # nothing mismatched, and nothing verified as if the address were valid
    [dns] = [x for x in results(out, "kube-system/kube-dns") if x["traffic"] == "pod-to-clusterip"][:1]
    assert dns["status"] == "uncertain" and "Endpoints kube-dns (cluster/endpoints.json line" in str(dns["note"])


def test_dnat_port_that_is_not_decimal_is_uncertain_with_a_note(tmp_path: Path) -> None:
    b = eks_copy(tmp_path)
    edit(b / RULES, "--to-destination 10.188.166.183:80\n", "--to-destination 10.188.166.183:0x50\n")
    r = runner.invoke(app, ["diagnose", str(b)])
    assert r.exit_code == 1 and "internal error" not in r.output  # the seed's root cause is still found
    assert "KP203" in r.output
    _, doc, _ = verify_json(str(b))
    [pod] = [x for x in results(doc, "2048-game/service-2048") if x["traffic"] == "pod-to-clusterip"]
    assert pod["status"] == "uncertain"
    assert "cannot read DNAT --to-destination 10.188.166.183:0x50 (port not readable) at line 68" in str(pod["note"])
    assert {a["verdict"] for a in pod["actual"]} == {"ACCEPT", "UNCERTAIN"}


def test_a_counter_of_5000_digits(tmp_path: Path) -> None:
    text = (DATA / "iptables" / "real" / "nft-save-counters.txt").read_text()
    huge = text.replace("[0:0] -A INPUT", "[" + "9" * 5000 + ":0] -A INPUT", 1)
    assert huge != text
    rs = parse_save(huge, "c.txt", None, 4)
    line = next(i for i, x in enumerate(huge.splitlines(), 1) if x.startswith("[9999"))
    [rule] = [r for r in rs.all_rules() if r.line == line]
    assert rule.chain == "INPUT" and rule.packets is None and rule.args
    assert any(d.line == line and "counters too large" in d.message for d in rs.diagnostics)
    p = tmp_path / "c.txt"
    p.write_text(huge)
    assert f"line {line}: rule counters too large to read: ignored" in diagnose_problems(str(p))


NAT = """*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:X - [0:0]
-A PREROUTING -j X
-A X {rule}
-A X -j DNAT --to-destination 10.9.9.9:80
COMMIT
"""


@pytest.mark.parametrize(
    "rule",
    [
        "-m mark --mark 0xZZ -j RETURN",
        "-m mark --mark 0x1/0x100000000 -j RETURN",
        "-m statistic --mode random --probability 1.5 -j RETURN",
        "-m statistic --mode random --probability nan -j RETURN",
        "-m statistic --mode nth --every 0 --packet 0 -j RETURN",
        "-p tcp -m tcp --dport 99999999999999999999 -j RETURN",
        "-p tcp -m tcp --dport " + "9" * 5000 + " -j RETURN",
        "-p tcp -m tcp --dport \u0663 -j RETURN",
        "-p tcp -m tcp --sport x:y -j RETURN",
        "-p tcp -j REDIRECT --to-ports eighty",
        "-p tcp -j MARK --set-xmark 0xG/0x1",
        "-p tcp -j DNAT --to-destination 10.1.1.1:" + "9" * 5000,
        "-p tcp -j DNAT --to-destination 10.1.1.1:99999",
    ],
)
def test_a_rule_value_kpdoctor_cannot_read_makes_the_packet_uncertain(rule: str) -> None:
    """Siblings of the DNAT port: marks, probabilities, `--every`, ports. The rule's outcome is
    *uncertain at line 7*, never a crash (ValueError, ZeroDivisionError) nor a silent guess."""
    tables = parse_save(NAT.format(rule=rule), "x", None, 4).tables
    ev = Evaluator(compile_tables(tables), [ipaddress.ip_address("192.168.0.2")])
    pkt = Packet(ipaddress.ip_address("10.0.0.1"), ipaddress.ip_address("10.2.2.2"), "tcp", 80)
    [o] = ev.run(pkt)
    assert o.verdict == "UNCERTAIN" and "line 7" in o.reason, o.reason
