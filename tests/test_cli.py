"""The command line as a user meets it: help everywhere, explain/rules, formats, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import MISMATCH

from kpdoctor import __version__
from kpdoctor.checks import CHECKS
from kpdoctor.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    "args", [["--help"], ["diagnose", "--help"], ["explain", "--help"], ["rules", "--help"], ["demo", "--help"]]
)
def test_help_everywhere(args: list[str]) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 0 and "Usage" in res.output


def test_version() -> None:
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and __version__ in res.output


@pytest.mark.parametrize("code", sorted(CHECKS))
def test_explain_every_check_by_code_and_cause(code: str) -> None:
    spec = CHECKS[code]
    for key in (code, code.lower(), spec.cause):
        res = runner.invoke(app, ["explain", key])
        assert res.exit_code == 0, res.output
        for section in ("Symptom", "Cause", "How it is detected", "Fix", "References"):
            assert section in res.output
        assert code in res.output


def test_explain_unknown_suggests() -> None:
    res = runner.invoke(app, ["explain", "iptables-backend-mismatc"])
    assert res.exit_code == 2 and "iptables-backend-mismatch" in res.output


def test_rules_lists_every_check() -> None:
    res = runner.invoke(app, ["rules", "--format", "json"])
    assert res.exit_code == 0
    assert {r["code"] for r in json.loads(res.output)} == set(CHECKS)


def test_diagnose_json_schema_and_exit_code(tmp_path: Path) -> None:
    p = tmp_path / "kp.log"
    p.write_text(MISMATCH)
    res = runner.invoke(app, ["diagnose", str(p), "--format", "json"])
    assert res.exit_code == 1
    doc = json.loads(res.output)
    assert doc["schema"] == "kpdoctor.report/v1"
    f = doc["findings"][0]
    for key in (
        "code",
        "cause",
        "severity",
        "confidence",
        "title",
        "summary",
        "subject",
        "occurrences",
        "first_seen",
        "last_seen",
        "ongoing",
        "versions",
        "explains",
        "evidence",
        "fix",
        "references",
    ):
        assert key in f
    # "writer" (added field): the component that wrote the line, when the line tells
    assert f["evidence"][0] == {"artifact": str(p), "line": 1, "text": MISMATCH.strip(), "writer": "kube-proxy"}
    assert isinstance(doc["skipped"], list)


def test_markdown_and_output_file(tmp_path: Path) -> None:
    p = tmp_path / "kp.log"
    p.write_text(MISMATCH)
    out = tmp_path / "report.md"
    res = runner.invoke(app, ["diagnose", str(p), "--format", "markdown", "-o", str(out)])
    assert res.exit_code == 1 and out.read_text().startswith("# kpdoctor report")


def test_usage_errors_are_exit_2(tmp_path: Path) -> None:
    assert runner.invoke(app, ["diagnose"]).exit_code == 2
    assert runner.invoke(app, ["diagnose", str(tmp_path / "nope")]).exit_code == 2
    p = tmp_path / "kp.log"
    p.write_text(MISMATCH)
    assert runner.invoke(app, ["diagnose", str(p), "--min-severity", "loud"]).exit_code == 2


def test_no_color_output_is_plain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    p = tmp_path / "kp.log"
    p.write_text(MISMATCH)
    res = runner.invoke(app, ["diagnose", str(p)])
    assert "\x1b[" not in res.output and "CRITICAL KP101" in res.output


def test_catalogue_doc_matches_the_checks() -> None:
    from kpdoctor.catalogue import render

    doc = Path(__file__).resolve().parents[1] / "docs" / "checks.md"
    assert doc.read_text() == render(), "regenerate: python -m kpdoctor.catalogue > docs/checks.md"


def test_every_check_cites_upstream_references() -> None:
    """A finding's references come from its check's docstring: none may be empty."""
    for spec in CHECKS.values():
        urls = spec.reference_urls()
        assert urls and all(u.startswith("https://") for u in urls), spec.code
