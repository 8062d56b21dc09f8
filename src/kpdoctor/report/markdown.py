"""Markdown, for pasting into a ticket."""

from __future__ import annotations

from kpdoctor.model import Finding, Report
from kpdoctor.report import verification
from kpdoctor.report.safe import printable


def _finding(f: Finding, level: int) -> list[str]:
    h = "#" * level
    out = [f"{h} {f.severity.label.upper()} {f.code} `{f.cause}`: {f.title}", "", f.summary, ""]
    meta = [f"confidence {f.confidence.label}" + (f" ({f.confidence_reason})" if f.confidence_reason else "")]
    if f.alternative_to:
        meta.append(f"an alternative to {f.alternative_to}")
    if f.occurrences:
        meta.append(f"{f.occurrences} occurrence(s)")
    if f.first_seen:
        meta.append(f"first {f.first_seen}" + (f", last {f.last_seen}" if f.last_seen else ""))
    if f.ongoing is not None:
        meta.append("ongoing" if f.ongoing else "recovered")
    out += ["*" + ", ".join(meta) + "*", ""]
    if f.versions_found:
        out.append("Versions found: " + ", ".join(f"{k} {v}" for k, v in f.versions_found.items()))
        if f.fixed_in:
            out.append(f"Fixed in: {', '.join(f.fixed_in)}")
        out.append("")
    if f.evidence:
        out.append("Evidence:")
        out.append("")
        out.append("```")
        for c in f.evidence:
            where = f"{c.artifact}:{c.line}" if c.line else c.artifact
            if c.writer:
                where += f" ({c.whose})"
            out.append(f"{where}: {c.text}")
        out.append("```")
        out.append("")
    if f.fix:
        out.append("Fix:")
        out.append("")
        out += ["- " + x.replace("\n", "\n  ") for x in f.fix]  # snippets stay inside their item
        out.append("")
    if f.references:
        out.append("References: " + ", ".join(f.references))
        out.append("")
    for sub in f.folded:
        out.append(f"Explains {sub.code} ({sub.cause}):")
        out.append("")
        out += _finding(sub, level + 1)
    return out


def render_markdown(report: Report, color: bool = False) -> str:
    out = [f"# kpdoctor report{' for node ' + report.node if report.node else ''}", ""]
    vis = report.visible()
    if not vis:
        out += [f"No findings at or above {report.min_severity.label} ({report.checks_run} checks ran).", ""]
    for f in vis:
        out += _finding(f, 2)
    if report.verification is not None:
        ver = report.verification
        out += ["## Verification", "", verification.summary(ver), ""]
        rows, hidden = verification.rows(ver, report.show_all or report.command != "verify")
        if report.command != "verify":
            rows = [r for r in rows if r.status != "ok"]
        if rows:
            out += ["| service port | status | traffic classes |", "|---|---|---|"]
            out += [f"| {r.service} | {r.status} | {r.classes} |" for r in rows]
            out.append("")
            out += [f"- {r.service}: {d}" for r in rows for d in r.details]
            out.append("")
        if hidden:
            out += [f"{hidden} Service port(s) verified ok are not listed.", ""]
        out += [
            f"- stale: {s.destination}/{s.protocol} -> {', '.join(s.backends)}"
            + (f" (left from {s.leftover_of} mode)" if s.leftover_of else "")
            for s in ver.stale
        ]
    if report.skipped:
        out += ["## Skipped checks", ""]
        out += [f"- {s.code} `{s.cause}`: {s.reason}" for s in report.skipped]
        out.append("")
    if report.inputs:
        out += ["## Inputs read", ""]
        out += [f"- {i.describe()}" for i in report.inputs]
        out.append("")
    if report.problems:
        out += ["## Inputs not used or not collected", ""]
        out += [f"- {p.source}: {p.message}" for p in report.problems]
        out.append("")
    if report.errors:
        out += ["## Internal errors (kpdoctor bugs: the rest of the report stands)", ""]
        out += [f"- {e.stage}: {e.error}" for e in report.errors]
        out.append("")
    if report.timed_out:
        out += [f"**Partial report:** {report.timed_out}.", ""]
    return printable("\n".join(out))
