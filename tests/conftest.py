"""Shared test helpers: write evidence files and diagnose them like a user would."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Finding, Report, Severity

SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"
DATA = Path(__file__).resolve().parent / "data"


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return p


def causes(report: Report) -> list[str]:
    return [f.cause for f in report.visible()]


def all_findings(report: Report) -> list[Finding]:
    out: list[Finding] = []
    for f in report.findings:
        out.append(f)
        out.extend(f.folded)
    return out


@pytest.fixture
def diagnose(tmp_path: Path) -> Callable[..., Report]:
    """diagnose({"name": "text", ...}) -> Report, files written under a temp dir."""

    def run(files: dict[str, str], node: str | None = None, min_severity: Severity = Severity.INFO) -> Report:
        paths = [write(tmp_path, name, text) for name, text in files.items()]
        report, _ = diagnose_paths(paths, node=node, min_severity=min_severity)
        return report

    return run
