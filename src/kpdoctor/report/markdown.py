"""Markdown, for pasting into a ticket.

Every string that is not this module's own text (names, messages, evidence lines, prose that
quotes them) goes through report/safe.py's ``md_text``/``md_cell``/``md_fence``: a bundle's file
or Service name cannot end a fence, start a heading, open a link or inject HTML."""

from __future__ import annotations

from kpdoctor.model import Finding, Report
from kpdoctor.report.safe import md_cell, md_fence, md_text, printable
from kpdoctor.report.view import View, build, finding_meta


def _finding(f: Finding, level: int) -> list[str]:
    h = "#" * level
    out = [f"{h} {f.severity.label.upper()} {f.code} `{f.cause}`: {md_text(f.title)}", ""]
    out += [md_text(f.summary), ""]
    out += ["*" + md_text(finding_meta(f, "{n} occurrence(s)")) + "*", ""]
    if f.versions_found:
        out.append("Versions found: " + md_text(", ".join(f"{k} {v}" for k, v in f.versions_found.items())))
        if f.fixed_in:
            out.append(f"Fixed in: {md_text(', '.join(f.fixed_in))}")
        out.append("")
    if f.evidence:
        out.append("Evidence:")
        out.append("")
        out += md_fence([f"{c.where}: {c.text}" for c in f.evidence])
        out.append("")
    if f.fix:
        out.append("Fix:")
        out.append("")
        for x in f.fix:  # a snippet after its first line is a code block inside its item
            first, _, rest = x.partition("\n")
            out.append("- " + md_text(first))
            if rest.strip():
                out += ["", *("  " + line for line in md_fence(rest.splitlines())), ""]
        out.append("")
    if f.references:
        out.append("References: " + ", ".join(md_text(r) for r in f.references))
        out.append("")
    for sub in f.folded:
        out.append(f"Explains {sub.code} ({md_text(sub.cause)}):")
        out.append("")
        out += _finding(sub, level + 1)
    return out


def render_markdown(report: Report | View, color: bool = False) -> str:
    """The view as Markdown: the verdict, the answer, then what else was found and not checked."""
    view = report if isinstance(report, View) else build(report)
    rep = view.report
    out = [f"# kpdoctor report{' for node ' + md_text(rep.node) if rep.node else ''}", ""]
    if rep.node and rep.node_rule and rep.node_inferred:
        out += [f"Node chosen as {md_text(rep.node_rule)}.", ""]
    v = view.verdict
    ran = f"({len(rep.artifacts)} input(s), {rep.checks_run} check(s) ran)"
    out += [f"**{v.word.upper()}**: {md_text(v.why)} {ran}", ""]
    if view.unused_first:
        out += _unused(view)
    for f in view.causes:
        out += _finding(f, 2)
    if view.below:
        out += [f"## Below the threshold ({rep.min_severity.label})", ""]
        out += [f"- {f.severity.label} {f.code} `{f.cause}`: {md_text(f.summary)}" for f in view.below]
        out.append("")
    ver = view.verification
    if ver is not None:
        out += ["## Verification", "", md_text(view.verification_summary or ""), ""]
        if view.rows:
            out += ["| service port | status | traffic classes |", "|---|---|---|"]
            out += [f"| {md_cell(r.service)} | {md_cell(r.status)} | {md_cell(r.classes)} |" for r in view.rows]
            out.append("")
            out += [f"- {md_text(r.service)}: {md_text(d)}" for r in view.rows for d in r.details]
            out.append("")
        if view.rows_hidden:
            out += [f"{view.rows_hidden} Service port(s) verified ok are not listed.", ""]
        out += [
            "- stale: "
            + md_text(f"{s.destination}/{s.protocol} -> {', '.join(s.backends)}")
            + (f" (left from {md_text(s.leftover_of)} mode)" if s.leftover_of else "")
            for s in ver.stale
        ]
    if view.unused and not view.unused_first:
        out += _unused(view)
    if view.inputs:
        out += ["## Inputs read", ""]
        out += [f"- {md_text(i.describe())}" for i in view.inputs]
        out.append("")
    if view.skipped:
        out += ["## Not checked (missing evidence, not healthy)", ""]
        for g in view.skipped:
            out.append(f"- {md_text(g.line())}")
            if view.verbose:
                out += [f"  - {s.code} `{s.cause}`" for s in g.checks]
        out.append("")
    if rep.errors:
        out += ["## Internal errors (kpdoctor bugs: the rest of the report stands)", ""]
        out += [f"- {md_text(e.stage)}: {md_text(e.error)}" for e in rep.errors]
        out.append("")
    if rep.timed_out:
        out += [f"**Partial report:** {md_text(rep.timed_out)}.", ""]
    return printable("\n".join(out))


def _unused(view: View) -> list[str]:
    out = ["## Inputs not used or not collected", ""]
    out += [
        f"- {md_text(p.source)}: {md_text(p.message)}" + (f" (and {p.count - 1} more)" if p.count > 1 else "")
        for p in view.unused
    ]
    return [*out, ""]
