"""node-problem-detector's custom-plugin protocol: one short line on stdout and an exit code,
0 OK, 1 a problem (NonOK), 2 unknown (``pkg/custompluginmonitor``). NPD cuts the line to its
``max_output_length``; kpdoctor cuts it first, at a word, so the condition's message reads well.
"""

from __future__ import annotations

from kpdoctor.model import Report
from kpdoctor.report.view import View, build

OK, PROBLEM, UNKNOWN = 0, 1, 2


def npd_status(report: Report | View) -> tuple[int, str]:
    """The plugin's exit code and message, drawn from the report's view (report/view.py: its
    causes and its verdict)."""
    view = report if isinstance(report, View) else build(report)
    report = view.report
    exit_code = view.verdict.code
    findings = view.causes
    if findings:
        top = findings[0]
        more = f" (+{len(findings) - 1})" if len(findings) > 1 else ""
        return PROBLEM, f"{top.code} {top.cause}{more}: {top.summary}"
    if exit_code == 0:
        ver = report.verification
        checked = f", {ver.services_checked} Services verified" if ver is not None and ver.evaluated else ""
        return OK, f"kube-proxy OK ({report.checks_run} checks{checked})"
    if report.errors:
        return UNKNOWN, f"kpdoctor internal error in {report.errors[0].stage}"
    if report.timed_out:
        return UNKNOWN, f"kpdoctor: {report.timed_out}"
    if exit_code == 2:  # nothing usable was given: say what was wrong with it
        why = f": {report.problems[0].source}: {report.problems[0].message}" if report.problems else ""
        return UNKNOWN, f"kpdoctor: nothing usable to diagnose{why}"
    return UNKNOWN, "kpdoctor: inconclusive (nothing could be checked)"


def clip(line: str, limit: int) -> str:
    """One line of at most ``limit`` characters, cut at a word when it can be."""
    line = " ".join(line.split())
    if len(line) <= limit:
        return line
    cut = line[: max(limit - 3, 1)]
    if " " in cut[limit // 2 :]:
        cut = cut.rsplit(" ", 1)[0]
    return cut + "..."
