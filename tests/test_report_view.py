"""The one view and the focused terminal report (issue 23, parts 1-2): the answer on the first
screen, the verdict the exit code gives, skipped checks grouped, info findings below a default
threshold, unused inputs before the rest, and lines that fit 60 and 80 columns."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA

from kpdoctor.cli import app
from kpdoctor.demo import DEMOS, demo_path
from kpdoctor.diagnose import diagnose_paths, exit_code
from kpdoctor.model import Severity
from kpdoctor.report.markdown import render_markdown
from kpdoctor.report.text import render_text
from kpdoctor.report.view import build, group_skipped

runner = CliRunner()
UPSTREAM = DATA / "upstream" / "iptables" / "TestOverallIPTablesRules"


def _first_finding_end(text: str) -> int:
    """The line number (1-based) of the first root cause's last line."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("1. "))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    return end  # the blank line's index = the number of the last content line


@pytest.mark.parametrize("name", [d.name for d in DEMOS])
def test_each_demo_answers_on_the_first_screen(name: str) -> None:
    report, _ = diagnose_paths([demo_path(name)])
    text = render_text(report, color=False, width=100)
    view = build(report)
    if len(view.causes) == 1:
        assert _first_finding_end(text) <= 24, text
    assert max(len(ln) for ln in text.splitlines()) <= 100
    assert text.index("Root cause") < text.index("Not checked")


@pytest.mark.parametrize("width", [60, 80])
def test_narrow_terminals_wrap_and_cut_never_overflow(width: int) -> None:
    report, _ = diagnose_paths([demo_path("tke-backend-mismatch")])
    text = render_text(report, color=False, width=width)
    assert max(len(ln) for ln in text.splitlines()) <= width
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if "kube-proxy/log.txt:78" in ln)
    # cut, and the cut marked (at 60 columns the place has its own line and the text the next)
    assert lines[at].endswith("…") or (width == 60 and lines[at + 1].endswith("…"))
    assert not re.search(r"[ \t]$", text, re.M)  # no padding to the width


def test_verdict_is_the_exit_code(tmp_path: Path) -> None:
    demo, _ev = diagnose_paths([demo_path("tke-backend-mismatch")])
    assert build(demo).verdict.code == exit_code(demo) == 1
    clean, _ = diagnose_paths([Path(f"{UPSTREAM}.nft.save"), Path(f"{UPSTREAM}.cluster.json")])
    assert build(clean).verdict.code == exit_code(clean) == 0
    junk = tmp_path / "notes.txt"
    junk.write_text("we restarted the node and it still fails\n")
    nothing, _ = diagnose_paths([junk])
    assert build(nothing).verdict.code == 2 and build(nothing).verdict.word == "nothing usable"


def test_skipped_checks_are_grouped_and_verbose_lists_each() -> None:
    report, _ = diagnose_paths([demo_path("tke-backend-mismatch")])
    groups = group_skipped(report.skipped)
    assert len(groups) < len(report.skipped) and sum(len(g.checks) for g in groups) == len(report.skipped)
    objects = next(g for g in groups if "Kubernetes objects" in g.reason)
    assert objects.line().startswith(f"{len(objects.checks)} checks need Kubernetes objects: `kubectl get")
    text = render_text(report, color=False)
    assert "(-v lists each check)" in text and "KP200 service-rules-missing" not in text
    report.verbose = True
    assert "KP200 service-rules-missing" in render_text(report, color=False)


def test_info_findings_show_below_a_default_threshold_only(tmp_path: Path) -> None:
    version = tmp_path / "version.txt"
    version.write_text("iptables v1.8.7 (nf_tables)\n")
    default = runner.invoke(app, ["diagnose", str(version)])
    assert "Below the threshold" in default.output and "info KP101" in default.output
    chosen = runner.invoke(app, ["diagnose", str(version), "--min-severity", "warning"])
    assert "Below the threshold" not in chosen.output
    assert default.exit_code == chosen.exit_code == 3  # versions alone: inconclusive either way
    assert json.loads(runner.invoke(app, ["diagnose", str(version), "--format", "json"]).stdout)["findings"] == []


def test_unused_inputs_come_before_the_rest_when_nothing_was_found(tmp_path: Path) -> None:
    version = tmp_path / "version.txt"
    version.write_text("iptables v1.8.4 (legacy)\n")
    junk = tmp_path / "notes.txt"
    junk.write_text("we restarted the node and it still fails\n")
    report, _ = diagnose_paths([version, junk], min_severity=Severity.CRITICAL)
    report.threshold_explicit = True
    text = render_text(report, color=False)
    assert text.index("Inputs not used") < text.index("Inputs read") < text.index("Not checked")
    md = render_markdown(report)
    assert md.index("## Inputs not used") < md.index("## Inputs read")


def test_verify_all_groups_ok_rows_on_a_large_node(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
    import gen_cluster

    save, cluster = gen_cluster.write(tmp_path, 120, 2)
    res = runner.invoke(app, ["verify", str(save), str(cluster), "--all"])
    rows = [ln for ln in res.output.splitlines() if " ok " in ln and "Service port" in ln]
    assert rows and len(rows) <= 2, res.output  # 120 namespaces of ok rows: one line, not 120
    every = runner.invoke(app, ["verify", str(save), str(cluster), "--all", "-v"])
    assert sum(1 for ln in every.output.splitlines() if re.match(r"^\S+/\S+:\S+\s+ok\s", ln)) >= 120
