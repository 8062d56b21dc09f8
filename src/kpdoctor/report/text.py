"""The terminal report: the answer first, readable at 60 columns, without colour, piped to a file.

It lays out the view (report/view.py) and decides nothing: long summaries wrap under their
indentation, evidence lines are cut with the cut marked (never wrapped into the next line's
column). NO_COLOR is honoured.
"""

from __future__ import annotations

import io
import os
import re
import shutil

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from kpdoctor import lazy_re
from kpdoctor.model import Finding, Report, Severity
from kpdoctor.report import verification
from kpdoctor.report.safe import escape, plain
from kpdoctor.report.view import View, build, finding_meta

STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
VERDICT_STYLE = {0: "bold green", 1: "bold red", 2: "bold yellow", 3: "bold yellow", 4: "bold red"}
_TRAILING = lazy_re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.M)
PIPED_WIDTH = 100  # a report written to a file or a pipe
INPUTS_SHOWN = 20  # a bundle has dozens of files: the rest are in --format json


def _t(text: str, style: str = "") -> Text:
    """Evidence-derived text for the terminal: control characters shown, never obeyed."""
    return Text(plain(text), style=style)


def _wrapped(con: Console, text: str, indent: int, style: str = "") -> None:
    """``text`` wrapped at the console's width, every line under ``indent``."""
    con.print(Padding(_t(text, style=style), (0, 0, 0, indent), expand=False))


def _item(con: Console, text: str, indent: int) -> None:
    """``- text``, its continuation lines under the text, not under the dash."""
    grid = Table.grid(padding=0)
    grid.add_column(width=2, no_wrap=True)
    grid.add_column()
    grid.add_row("- ", _t(text))
    con.print(Padding(grid, (0, 0, 0, indent), expand=False))


def _cut(con: Console, text: Text, indent: int) -> None:
    """One line, cut at the console's width with the cut marked."""
    con.print(Padding(text, (0, 0, 0, indent), expand=False), no_wrap=True, overflow="ellipsis", crop=True)


def _emit_finding(con: Console, f: Finding, n: str, indent: int, view: View) -> None:
    verbose = view.verbose
    head = _t(f"{n} {f.severity.label.upper()}", style=STYLE[f.severity])
    head.append(" ")
    head.append(f.code, style="bold")
    head.append(plain(f" {f.cause}: {f.title}"))
    con.print(Padding(head, (0, 0, 0, indent), expand=False))
    _wrapped(con, f.summary, indent + 3)
    _wrapped(con, finding_meta(f), indent + 3, "dim")
    if f.versions_found:
        v = ", ".join(f"{k} {val}" for k, val in f.versions_found.items())
        _wrapped(con, "versions: " + v + (f"; fixed in {', '.join(f.fixed_in)}" if f.fixed_in else ""), indent + 3)
    if f.evidence:
        con.print(" " * (indent + 3) + "evidence:")
        shown = f.evidence if view.evidence_shown is None else f.evidence[: view.evidence_shown]
        for c in shown:
            where = c.where
            if len(where) + 30 > con.width - indent - 5:  # the place is never cut: its line alone, then the text
                _wrapped(con, where, indent + 5, "dim")
                _wrapped(con, c.text, indent + 7) if verbose else _cut(con, _t(c.text), indent + 7)
                continue
            if verbose:  # the whole line, wrapped
                _wrapped(con, f"{where}  {c.text}", indent + 5)
                continue
            line = _t(where, style="dim")
            line.append(plain("  " + c.text))
            _cut(con, line, indent + 5)
        if len(f.evidence) > len(shown):
            con.print(" " * (indent + 5) + f"[dim]... and {len(f.evidence) - len(shown)} more (-v)[/]")
    if f.fix:
        con.print(" " * (indent + 3) + "fix:")
        for x in f.fix:  # a multi-line item (a YAML snippet) keeps its shape, indented under its dash
            first, *rest = x.split("\n")
            _item(con, first, indent + 5)
            for r in rest:
                _cut(con, _t(r), indent + 7)
    for i, sub in enumerate(f.folded, 1):
        if verbose:
            con.print(" " * (indent + 3) + "explains:", style="dim")
            _emit_finding(con, sub, f"{n.rstrip('.')}.{i}", indent + 5, view)
            continue
        line = _t("explains ", style="dim")
        line.append(f"{sub.code} {sub.cause}", style="bold")
        line.append(plain(f" ({sub.severity.label}{f', {sub.occurrences}x' if sub.occurrences else ''}): {sub.title}"))
        _cut(con, line, indent + 3)
    if not verbose or indent == 0:
        con.print()


def _emit_verification(con: Console, view: View) -> None:
    text, said = verification.summary_parts(view.verification)
    if said:
        con.print(_t(f"Verification: {said}", style="bold"))
        _wrapped(con, text, 2)
    else:  # not evaluated: why is the whole message
        _wrapped(con, f"Verification {text}", 0, "bold")
    if view.rows:
        table = Table("service port", "status", "traffic classes", box=None, pad_edge=False, show_edge=False)
        style = {"ok": "green", "mismatch": "bold red", "uncertain": "yellow"}
        for r in view.rows:
            table.add_row(escape(r.service), f"[{style[r.status]}]{r.status}[/]", escape(r.classes))
        con.print(table)
        for r in view.rows:
            for d in r.details:
                _wrapped(con, f"{r.service} {d}", 2)
    if view.rows_hidden:
        con.print(f"[dim]{view.rows_hidden} Service port(s) verified ok are not listed (verify --all lists them).[/]")
    ver = view.verification
    for s in ver.stale[:10]:
        named = f" (rules name {s.label})" if s.label else ""
        named += f" (left from {s.leftover_of} mode)" if s.leftover_of else ""
        _cut(
            con,
            _t("stale ", style="bold red") + _t(f"{s.destination}/{s.protocol} -> {', '.join(s.backends[:4])}{named}"),
            2,
        )
    for n in ver.not_evaluated:
        _cut(con, _t("not evaluated: ", style="yellow") + _t(n), 2)
    con.print()


def _emit_unused(con: Console, view: View) -> None:
    con.print(f"[bold]Inputs not used or not collected ({len(view.unused)}):[/]")
    for p in view.unused:
        more = f" (and {p.count - 1} more like it)" if p.count > 1 else ""
        _wrapped(con, f"{p.source}: {p.message}{more}", 2)
    con.print()


def _emit_inputs(con: Console, view: View) -> None:
    con.print(f"[bold]Inputs read ({len(view.inputs)}):[/]")
    shown = view.inputs if view.verbose else view.inputs[:INPUTS_SHOWN]
    for i in shown:
        _wrapped(con, i.describe(), 2)
    if len(view.inputs) > len(shown):
        con.print(f"  [dim]... and {len(view.inputs) - len(shown)} more (-v, or --format json, lists every one)[/]")
    con.print()


def _emit_skipped(con: Console, view: View) -> None:
    con.print(f"[bold]Not checked[/] ({view.not_checked}: missing evidence, not healthy):")
    for g in view.skipped:
        _wrapped(con, g.line(), 2)
        if view.verbose:
            for s in g.checks:
                _cut(con, _t(f"{s.code} {s.cause}", style="dim"), 4)
    if not view.verbose:
        con.print("  [dim](-v lists each check)[/]")
    con.print()


def render_text(report: Report | View, color: bool = True, width: int | None = None) -> str:
    view = report if isinstance(report, View) else build(report)
    rep = view.report
    buf = io.StringIO()
    no_color = not color or "NO_COLOR" in os.environ
    if width is None:
        width = shutil.get_terminal_size((PIPED_WIDTH, 24)).columns if color else PIPED_WIDTH
    con = Console(
        file=buf, force_terminal=not no_color, no_color=no_color, width=max(40, width), highlight=False, emoji=False
    )
    title = f"kpdoctor {rep.tool_version}" + (f" - node {rep.node}" if rep.node else "")
    con.print(_t(title, style="bold"))
    if rep.node and rep.node_rule and rep.node_inferred:
        con.print(_t(f"node chosen as {rep.node_rule}", style="dim"))
    v = view.verdict
    line = _t(v.word.upper(), style=VERDICT_STYLE.get(v.code, "bold"))
    line.append(plain(f": {v.why}") if v.why else "")
    line.append(f" ({len(rep.artifacts)} input(s), {rep.checks_run} check(s) ran)", style="dim")
    con.print(line)
    con.print()
    if view.unused_first:
        _emit_unused(con, view)
    if view.causes:
        many = len(view.causes) > 1
        con.print(f"[bold]Root causes, most likely first ({len(view.causes)}):[/]" if many else "[bold]Root cause:[/]")
        for i, f in enumerate(view.causes, 1):
            _emit_finding(con, f, f"{i}.", 0, view)
    if view.below:
        con.print(f"[bold]Below the threshold[/] ({rep.min_severity.label}; --min-severity info shows them in full):")
        for f in view.below:
            _cut(con, _t(f"{f.severity.label} {f.code} {f.cause}: ", style="cyan") + _t(f.summary), 2)
        con.print()
    if view.verification is not None:
        _emit_verification(con, view)
    if view.unused and not view.unused_first:
        _emit_unused(con, view)
    if view.inputs:
        _emit_inputs(con, view)
    if view.skipped:
        _emit_skipped(con, view)
    if rep.errors:
        con.print("[bold red]Internal errors[/] (kpdoctor bugs: the rest of the report stands; please report them):")
        for e in rep.errors:
            _wrapped(con, f"{e.stage}: {e.error}", 2)
        con.print()
    if rep.timed_out:
        _wrapped(con, f"Partial report: {rep.timed_out}.", 0, "bold yellow")
        con.print()
    # Rich pads wrapped lines to the width: trailing blanks are noise in a file and a diff
    return _TRAILING.sub(r"\1", buf.getvalue())
