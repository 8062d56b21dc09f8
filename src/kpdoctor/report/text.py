"""Terminal output with Rich: readable without colour; NO_COLOR is honoured."""

from __future__ import annotations

import io
import os

from rich.console import Console
from rich.table import Table

from kpdoctor.model import Finding, Report, Severity
from kpdoctor.report import verification
from kpdoctor.report.safe import escape

STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def _emit_finding(con: Console, f: Finding, n: str, indent: str = "") -> None:
    sev = f.severity.label.upper()
    con.print(f"{indent}[{STYLE[f.severity]}]{n} {sev}[/] [bold]{f.code}[/] {escape(f.cause)}: {escape(f.title)}")
    con.print(f"{indent}   {escape(f.summary)}", highlight=False, soft_wrap=True)
    meta = [f"confidence {f.confidence.label}" + (f" ({f.confidence_reason})" if f.confidence_reason else "")]
    if f.alternative_to:
        meta.append(f"an alternative to {f.alternative_to}")
    if f.occurrences:
        meta.append(f"{f.occurrences}x")
    if f.first_seen:
        meta.append(
            f"first {f.first_seen}" + (f", last {f.last_seen}" if f.last_seen and f.last_seen != f.first_seen else "")
        )
    if f.ongoing is not None:
        meta.append("ONGOING" if f.ongoing else "recovered")
    con.print(f"{indent}   [dim]{escape(', '.join(meta))}[/]")
    if f.versions_found:
        v = ", ".join(f"{k} {val}" for k, val in f.versions_found.items())
        fixed = f"; fixed in {', '.join(f.fixed_in)}" if f.fixed_in else ""
        con.print(f"{indent}   versions: {escape(v + fixed)}", highlight=False, soft_wrap=True)
    if f.evidence:
        con.print(f"{indent}   evidence:")
        for c in f.evidence:
            where = f"{c.artifact}:{c.line}" if c.line else c.artifact
            if c.writer:
                where += f" ({c.whose})"
            text = c.text if len(c.text) <= 400 else c.text[:397] + "..."
            con.print(f"{indent}     [dim]{escape(where)}[/]  {escape(text)}", highlight=False, soft_wrap=True)
    if f.fix:
        con.print(f"{indent}   fix:")
        for x in f.fix:  # a multi-line item (a YAML snippet) keeps its shape, indented under its dash
            text = x.replace("\n", "\n" + indent + "       ")
            con.print(f"{indent}     - {escape(text)}", highlight=False, soft_wrap=True)
    for i, sub in enumerate(f.folded, 1):
        con.print(f"{indent}   [dim]explains:[/]")
        _emit_finding(con, sub, f"{n.rstrip('.')}.{i}", indent + "     ")
    con.print()


def _emit_verification(con: Console, report: Report) -> None:
    ver = report.verification
    con.print(f"[bold]Verification[/] {escape(verification.summary(ver))}")
    rows, hidden = verification.rows(ver, report.show_all)
    if report.command != "verify":
        rows = [r for r in rows if r.status != "ok"][:20]
        hidden = 0
    if rows:
        table = Table("service port", "status", "traffic classes", box=None, pad_edge=False, show_edge=False)
        style = {"ok": "green", "mismatch": "bold red", "uncertain": "yellow"}
        for r in rows:
            table.add_row(escape(r.service), f"[{style[r.status]}]{r.status}[/]", escape(r.classes))
        con.print(table)
        for r in rows:
            for d in r.details:
                con.print(f"  [dim]{escape(r.service)}[/] {escape(d)}", soft_wrap=True)
    if hidden:
        con.print(f"[dim]{hidden} Service port(s) verified ok are not listed (--all lists them).[/]")
    for s in ver.stale[:10]:
        named = f" (rules name {s.label})" if s.label else ""
        named += f" (left from {s.leftover_of} mode)" if s.leftover_of else ""
        to = escape(", ".join(s.backends[:4]))
        con.print(f"  [bold red]stale[/] {escape(s.destination)}/{s.protocol} -> {to}{escape(named)}")
    for n in ver.not_evaluated:
        con.print(f"  [yellow]not evaluated:[/] {escape(n)}")
    con.print()


INPUTS_SHOWN = 20  # a bundle has dozens of files: the rest are in --format json


def _emit_inputs(con: Console, report: Report) -> None:
    con.print("[bold]Inputs read:[/]")
    for i in report.inputs[:INPUTS_SHOWN]:
        con.print(f"  {escape(i.describe())}", highlight=False, soft_wrap=True)
    if len(report.inputs) > INPUTS_SHOWN:
        con.print(f"  [dim]... and {len(report.inputs) - INPUTS_SHOWN} more (--format json lists every one)[/]")
    con.print()


def render_text(report: Report, color: bool = True) -> str:
    buf = io.StringIO()
    no_color = not color or "NO_COLOR" in os.environ
    con = Console(file=buf, force_terminal=not no_color, no_color=no_color, width=110, highlight=False)
    title = f"kpdoctor {report.tool_version}"
    if report.node:
        title += f" - node {report.node}"
    con.print(f"[bold]{escape(title)}[/]")
    con.print(
        f"[dim]{len(report.artifacts)} artifact(s), {report.checks_run} check(s) ran, {len(report.skipped)} skipped[/]"
    )
    con.print()
    vis = report.visible()
    if not vis:
        con.print(f"[green]No findings at or above {report.min_severity.label}.[/]")
        con.print()
    else:
        con.print(f"[bold]Root causes, most likely first ({len(vis)}):[/]")
        con.print()
        for i, f in enumerate(vis, 1):
            _emit_finding(con, f, f"{i}.")
    if report.verification is not None:
        _emit_verification(con, report)
    if report.inputs:
        _emit_inputs(con, report)
    if report.skipped and report.command != "verify":
        con.print("[bold]Skipped[/] (missing evidence, not healthy):")
        for s in report.skipped:
            con.print(f"  {s.code} {escape(s.cause)}: {escape(s.reason)}", highlight=False)
        con.print()
    if report.problems:
        con.print("[bold]Inputs not used or not collected:[/]")
        for p in report.problems:
            con.print(f"  {escape(p.source)}: {escape(p.message)}", highlight=False)
        con.print()
    if report.errors:
        con.print("[bold red]Internal errors[/] (kpdoctor bugs: the rest of the report stands; please report them):")
        for e in report.errors:
            con.print(f"  {escape(e.stage)}: {escape(e.error)}", highlight=False)
        con.print()
    if report.timed_out:
        con.print(f"[bold yellow]Partial report:[/] {escape(report.timed_out)}.")
        con.print()
    return buf.getvalue()
