"""`--format sarif`: every log validates against the vendored SARIF 2.1.0 schema, locations point at
the cited line, levels follow severities, and hostile evidence still gives valid JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import jsonschema
import pytest
from click.testing import CliRunner
from conftest import DATA, UPSTREAM

from kpdoctor.checks import CHECKS
from kpdoctor.cli import app
from kpdoctor.demo import DEMOS, demo_path
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Cite, Confidence, Finding, InputProblem, InternalError, Report, Severity
from kpdoctor.report import FORMATS
from kpdoctor.report.sarif import MISMATCH_RULE, artifact_uri, build_sarif, render_sarif

SCHEMA = json.loads((DATA / "sarif" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft4Validator(SCHEMA)
runner = CliRunner()
FIX = UPSTREAM / "iptables"
N = "TestOverallIPTablesRules"
SAVE, CLUSTER = (str(FIX / f"{N}.{x}") for x in ("nft.save", "cluster.json"))


def valid(text: str) -> dict[str, Any]:
    """The SARIF log, after checking it is strict UTF-8 JSON valid against the schema."""
    text.encode("utf-8")  # no lone surrogate survives
    doc: dict[str, Any] = json.loads(text)
    errors = sorted(VALIDATOR.iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])
    assert doc["version"] == "2.1.0" and len(doc["runs"]) == 1
    return doc


def test_schema_is_the_sarif_2_1_0_schema_and_rejects_a_broken_log() -> None:
    """The vendored schema is the real one: it refuses what SARIF forbids."""
    assert "2.1.0" in SCHEMA["title"] and "result" in SCHEMA["definitions"]
    assert not VALIDATOR.is_valid({"version": "2.1.0", "runs": [{"tool": {"driver": {}}}]})  # driver needs a name
    assert not VALIDATOR.is_valid(
        {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{"level": "fatal"}]}]}
    )


@pytest.mark.parametrize("name", [d.name for d in DEMOS])
def test_every_demo_is_valid_sarif_with_its_root_cause_first(name: str) -> None:
    r = runner.invoke(app, ["demo", name, "--format", "sarif"])
    assert r.exit_code in (0, 1, 3), r.output
    run = valid(r.output)["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "kpdoctor" and {x["id"] for x in driver["rules"]} >= set(CHECKS)
    assert run["invocations"][0]["exitCode"] == r.exit_code
    report, _ = diagnose_paths([demo_path(name)])
    first = report.visible()[0]
    assert run["results"][0]["ruleId"] == first.code
    assert run["results"][0]["message"]["text"] == first.summary
    assert run["results"][0]["properties"]["rank"] == 1
    for res in run["results"]:
        if res["ruleId"] in CHECKS:
            assert driver["rules"][res["ruleIndex"]]["id"] == res["ruleId"]
    # every location points into a file of the bundle, at a line it has; log, rule and config
    # lines are cited as they stand there (Kubernetes objects by a description of the object)
    checked = 0
    for res in run["results"]:
        for loc in res["locations"]:
            phys = loc["physicalLocation"]
            path = demo_path(name) / unquote(phys["artifactLocation"]["uri"])
            assert path.is_file(), path
            if "region" not in phys:
                continue
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            line = lines[phys["region"]["startLine"] - 1]
            if path.suffix != ".json":
                assert phys["region"]["snippet"]["text"].strip() in line, (path, line)
                checked += 1
    assert checked


def test_a_location_is_the_exact_evidence_line() -> None:
    """The config demo's root cause cites the command line, the config and the log line that prove it."""
    r = runner.invoke(app, ["demo", "config-ignores-hostname", "--format", "sarif"])
    root = valid(r.output)["runs"][0]["results"][0]
    assert root["ruleId"] == "KP112"
    where = []
    for loc in root["locations"]:
        phys = loc["physicalLocation"]
        path = demo_path("config-ignores-hostname") / phys["artifactLocation"]["uri"]
        line = path.read_text(encoding="utf-8").splitlines()[phys["region"]["startLine"] - 1]
        assert line == phys["region"]["snippet"]["text"]
        where.append((phys["artifactLocation"]["uri"], phys["region"]["startLine"]))
    assert where == [("kube-proxy/cmdline.txt", 1), ("kube-proxy/config.yaml", 19), ("kube-proxy/log.txt", 50)]
    assert root["properties"]["fix"] and root["properties"]["confidence"] == "high"
    assert root["properties"]["versions"]["found"] == {"kube-proxy": "v1.12.7"}
    assert any("v1.13.0" in x for x in root["properties"]["versions"]["fixed_in"])


def test_folded_findings_are_results_related_to_their_root_cause() -> None:
    r = runner.invoke(app, ["demo", "config-ignores-hostname", "--format", "sarif"])
    results = valid(r.output)["runs"][0]["results"]
    folded = [x for x in results if "folded_under" in x["properties"]]
    assert {x["ruleId"] for x in folded} == {"KP111", "KP203"}
    assert results[0]["properties"]["explains"] == ["KP111", "KP203"]
    for x in folded:
        assert x["properties"]["folded_under"] == {"ruleId": "KP112", "cause": "config-overrides-flags", "rank": 1}
        related = x["relatedLocations"][0]
        assert related["physicalLocation"] == results[0]["locations"][0]["physicalLocation"]
        assert "KP112" in related["message"]["text"]


def finding(code: str, severity: Severity, **kw: Any) -> Finding:
    spec = CHECKS[code]
    return Finding(code, spec.cause, severity, Confidence.MEDIUM, spec.title, f"{code} summary", **kw)


def report(findings: list[Finding], **kw: Any) -> Report:
    base: dict[str, Any] = {
        "tool_version": "0.1.0",
        "node": "n1",
        "collected_at": None,
        "artifacts": ["kube-proxy/log.txt"],
        "findings": findings,
        "skipped": [],
        "checks_run": 3,
        "problems": [],
    }
    return Report(**(base | kw))


def test_levels_follow_severities() -> None:
    rep = report(
        [finding("KP101", Severity.CRITICAL), finding("KP104", Severity.WARNING), finding("KP401", Severity.INFO)],
        min_severity=Severity.INFO,
    )
    run = valid(render_sarif(rep))["runs"][0]
    assert [(x["ruleId"], x["level"]) for x in run["results"]] == [
        ("KP101", "error"),
        ("KP104", "warning"),
        ("KP401", "note"),
    ]
    rules = {x["id"]: x for x in run["tool"]["driver"]["rules"]}
    assert rules["KP101"]["defaultConfiguration"]["level"] == "error"
    assert rules["KP401"]["defaultConfiguration"]["level"] == "note"
    assert rules["KP101"]["name"] == "iptables-backend-mismatch"
    assert rules["KP101"]["shortDescription"]["text"] == CHECKS["KP101"].title
    assert "**Fix.**" in rules["KP101"]["help"]["markdown"] and "Symptom:" in rules["KP101"]["help"]["text"]
    assert rules["KP101"]["helpUri"] in CHECKS["KP101"].reference_urls()
    assert (
        rules["KP101"]["properties"].items() >= {"cause": "iptables-backend-mismatch", "severity": "critical"}.items()
    )


def test_below_the_threshold_is_not_a_result_and_alternatives_are_marked() -> None:
    alt = finding("KP104", Severity.WARNING, alternative_to="xtables-lock-not-shared")
    rep = report([finding("KP102", Severity.CRITICAL), alt, finding("KP401", Severity.INFO)])
    run = valid(render_sarif(rep))["runs"][0]
    assert [x["ruleId"] for x in run["results"]] == ["KP102", "KP104"]
    assert run["results"][1]["properties"]["alternative_to"] == "xtables-lock-not-shared"
    assert "alternative_to" not in run["results"][0]["properties"]
    assert [x["properties"]["rank"] for x in run["results"]] == [1, 2]


def test_a_report_with_no_findings_is_valid_with_zero_results() -> None:
    rep = report([])
    doc = valid(render_sarif(rep))
    run = doc["runs"][0]
    assert run["results"] == []
    assert run["invocations"][0].items() >= {"exitCode": 0, "executionSuccessful": True}.items()
    assert run["properties"]["verdict"] == "healthy" and run["invocations"][0]["properties"]["verdict"] == "healthy"
    assert len(run["tool"]["driver"]["rules"]) == len(CHECKS) + 1
    assert run["artifacts"][0]["location"]["uri"] == "kube-proxy/log.txt"


def test_inputs_not_used_and_internal_errors_are_notifications() -> None:
    rep = report(
        [],
        problems=[InputProblem("junk.bin", "binary data, not text evidence: skipped")],
        errors=[InternalError("check KP200", "TypeError: x")],
    )
    run = valid(render_sarif(rep))["runs"][0]
    inv = run["invocations"][0]
    assert inv["exitCode"] == 4 and inv["executionSuccessful"] is False
    notes = [(n["level"], n["message"]["text"]) for n in inv["toolExecutionNotifications"]]
    assert ("warning", "junk.bin: binary data, not text evidence: skipped") in notes
    assert ("error", "internal error in check KP200: TypeError: x") in notes
    assert run["properties"]["inputs_not_used"] == [
        {"source": "junk.bin", "message": "binary data, not text evidence: skipped"}
    ]


def test_hostile_evidence_gives_valid_json() -> None:
    nasty = 'say "hi" \\ \x1b]0;owned\x07 \x00 \x9b2J \ud800 \ufffd \u2028 end'
    bad_name = "logs/kube\udcffproxy #1 %.log"  # a file name whose byte is not UTF-8
    f = finding(
        "KP100",
        Severity.CRITICAL,
        evidence=[Cite(bad_name, 3, nasty, writer="kube\x1bproxy"), Cite("", None, nasty), Cite("obj.json", None, "x")],
        fix=[nasty],
    )
    f.summary = nasty
    rep = report([f], artifacts=[bad_name], problems=[InputProblem(nasty, nasty)])
    text = render_sarif(rep)
    assert "\x1b" not in text and "\x00" not in text and "\x9b" not in text  # escaped, never raw
    run = valid(text)["runs"][0]
    res = run["results"][0]
    assert res["message"]["text"].startswith('say "hi" \\ \x1b]0;owned\x07 \x00 \x9b2J \ufffd \ufffd')
    first, second, third = res["locations"]
    assert first["physicalLocation"]["artifactLocation"]["uri"] == "logs/kube%FFproxy%20%231%20%25.log"
    assert first["physicalLocation"]["region"]["startLine"] == 3
    assert second == {"message": {"text": nasty.replace("\ud800", "\ufffd")}}
    assert third == {"physicalLocation": {"artifactLocation": {"uri": "obj.json"}}}  # no line: the artifact only


def test_artifact_uris_are_relative_when_they_can_be() -> None:
    assert artifact_uri("kube-proxy/log.txt") == "kube-proxy/log.txt"
    assert artifact_uri("/home/u/case 7/log.txt", cwd="/home/u") == "case%207/log.txt"
    assert artifact_uri("/srv/logs/a.txt", cwd="/home/u") == "file:///srv/logs/a.txt"
    assert artifact_uri("a:b.txt") == "a%3Ab.txt"  # not read as a URI scheme


def test_output_is_deterministic() -> None:
    rep = report([finding("KP101", Severity.CRITICAL, evidence=[Cite("/abs/x.save", 9, "-A X")])])
    assert render_sarif(rep) == render_sarif(rep)
    text = render_sarif(rep)
    assert text == json.dumps(json.loads(text), ensure_ascii=False, sort_keys=True, indent=2) + "\n"


def test_verify_on_an_upstream_fixture_is_valid_sarif(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIX)
    r = runner.invoke(app, ["verify", SAVE, CLUSTER, "--format", "sarif"])
    assert r.exit_code == 0, r.output
    run = valid(r.output)["runs"][0]
    assert run["results"] == [] and run["invocations"][0]["exitCode"] == 0
    assert run["properties"]["command"] == "verify" and "clean" in run["properties"]["verification"]
    assert {a["location"]["uri"] for a in run["artifacts"]} == {f"{N}.nft.save", f"{N}.cluster.json"}
    # a mismatch: the KP202 finding is the result, the verification's rows are not repeated
    doc = json.loads(Path(CLUSTER).read_text())
    for it in doc["items"]:
        if it["kind"] == "EndpointSlice" and it["metadata"]["name"] == "svc4-1":
            it["endpoints"] = it["endpoints"][:1]
    cl = tmp_path / "cluster.json"
    cl.write_text(json.dumps(doc))
    r = runner.invoke(app, ["verify", SAVE, str(cl), "--format", "sarif"])
    assert r.exit_code == 1
    run = valid(r.output)["runs"][0]
    assert [x["ruleId"] for x in run["results"]] == ["KP202"]
    loc = run["results"][0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == f"{N}.nft.save"  # the user's absolute path, relative to here
    line = Path(SAVE).read_text().splitlines()[loc["region"]["startLine"] - 1]
    assert line.strip() == loc["region"]["snippet"]["text"]
    # no finding names the Service port (a check that did not report it): the row is a result
    rep, _ = diagnose_paths([SAVE, str(cl)], command="verify", min_severity=Severity.INFO)
    rep.findings = []
    run = valid(render_sarif(rep))["runs"][0]
    assert [(x["ruleId"], x["properties"]["service"]) for x in run["results"]] == [(MISMATCH_RULE, "ns4/svc4:p80")]
    assert run["results"][0]["locations"] and run["invocations"][0]["exitCode"] == 1


def test_sarif_is_a_format_of_every_report_command(tmp_path: Path) -> None:
    assert FORMATS["sarif"] is render_sarif
    out = tmp_path / "r.sarif"
    r = runner.invoke(app, ["demo", "tke-backend-mismatch", "-f", "sarif", "-o", str(out)])
    assert r.exit_code == 1 and valid(out.read_text(encoding="utf-8"))["runs"][0]["results"]
    rep, _ = diagnose_paths([demo_path("tke-backend-mismatch")])
    assert build_sarif(rep, cwd="/")["runs"][0]["results"][0]["ruleId"] == rep.visible()[0].code
