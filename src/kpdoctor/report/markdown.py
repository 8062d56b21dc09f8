"""Markdown, for pasting into a ticket."""

from __future__ import annotations

from kpdoctor.model import Finding, Report
from kpdoctor.report.safe import printable
from kpdoctor.report.view import View, build, finding_meta


def _finding(f: Finding, level: int) -> list[str]:
    h = "#" * level
    out = [f"{h} {f.severity.label.upper()} {f.code} `{f.cause}`: {f.title}", "", f.summary, ""]
    out += ["*" + finding_meta(f, "{n} occurrence(s)") + "*", ""]
    if f.versions_found:
        out.append("Versions found: " + ", ".join(f"{k} {v}" for k, v in f.versions_found.items()))
        if f.fixed_in:
            out.append(f"Fixed in: {', '.join(f.fixed_in)}")
        out.append("")
    if f.evidence:
        out.append("Evidence:")
        out.append("")
        out.append("```")
        out += [f"{c.where}: {c.text}" for c in f.evidence]
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


def render_markdown(report: Report | View, color: bool = False) -> str:
    """The view as Markdown: the verdict, the answer, then what else was found and not checked."""
    view = report if isinstance(report, View) else build(report)
    rep = view.report
    out = [f"# kpdoctor report{' for node ' + rep.node if rep.node else ''}", ""]
    if rep.node and rep.node_rule and rep.node_inferred:
        out += [f"Node chosen as {printable(rep.node_rule)}.", ""]
    v = view.verdict
    out += [f"**{v.word.upper()}**: {v.why} ({len(rep.artifacts)} input(s), {rep.checks_run} check(s) ran)", ""]
    if view.unused_first:
        out += _unused(view)
    for f in view.causes:
        out += _finding(f, 2)
    if view.below:
        out += [f"## Below the threshold ({rep.min_severity.label})", ""]
        out += [f"- {f.severity.label} {f.code} `{f.cause}`: {f.summary}" for f in view.below]
        out.append("")
    ver = view.verification
    if ver is not None:
        out += ["## Verification", "", view.verification_summary or "", ""]
        if view.rows:
            out += ["| service port | status | traffic classes |", "|---|---|---|"]
            out += [f"| {r.service} | {r.status} | {r.classes} |" for r in view.rows]
            out.append("")
            out += [f"- {r.service}: {d}" for r in view.rows for d in r.details]
            out.append("")
        if view.rows_hidden:
            out += [f"{view.rows_hidden} Service port(s) verified ok are not listed.", ""]
        out += [
            f"- stale: {s.destination}/{s.protocol} -> {', '.join(s.backends)}"
            + (f" (left from {s.leftover_of} mode)" if s.leftover_of else "")
            for s in ver.stale
        ]
    if view.unused and not view.unused_first:
        out += _unused(view)
    if view.inputs:
        out += ["## Inputs read", ""]
        out += [f"- {i.describe()}" for i in view.inputs]
        out.append("")
    if view.skipped:
        out += ["## Not checked (missing evidence, not healthy)", ""]
        for g in view.skipped:
            out.append(f"- {g.line()}")
            if view.verbose:
                out += [f"  - {s.code} `{s.cause}`" for s in g.checks]
        out.append("")
    if rep.errors:
        out += ["## Internal errors (kpdoctor bugs: the rest of the report stands)", ""]
        out += [f"- {e.stage}: {e.error}" for e in rep.errors]
        out.append("")
    if rep.timed_out:
        out += [f"**Partial report:** {rep.timed_out}.", ""]
    return printable("\n".join(out))


def _unused(view: View) -> list[str]:
    out = ["## Inputs not used or not collected", ""]
    out += [f"- {p.source}: {p.message}" + (f" (and {p.count - 1} more)" if p.count > 1 else "") for p in view.unused]
    return [*out, ""]
