"""Rendering a trace: the path table by table, chain by chain, branch by branch."""

from __future__ import annotations

import io
import json
import os

from rich.console import Console

from kpdoctor.dataplane.results import TraceBranch
from kpdoctor.dataplane.trace import Trace
from kpdoctor.report.safe import escape, json_safe, md_fence, md_text

SCHEMA = "kpdoctor.trace/v1"
# A Service of thousands of endpoints is thousands of branches with the same path: past this many,
# the first FULL_PATHS are shown step by step and every other one on a line of its own.
MANY_BRANCHES = 20
FULL_PATHS = 5


def pct(p: float) -> str:
    """A share as a user reads it: 33.3%, and 0.02% (not 0.0%) for one backend of 5,000."""
    if p == 0 or p >= 0.001:
        return f"{p:.1%}"
    return f"{p * 100:.2g}%"


def _deciding(b: TraceBranch) -> str:
    """Where a branch's outcome was decided, on one line: the DNAT or the refusing rule."""
    decisive = [
        s for s in b.steps if s.line is not None and ("DNAT" in s.rule or "REJECT" in s.rule or "DROP" in s.rule)
    ]
    s = decisive[-1] if decisive else (b.steps[-1] if b.steps else None)
    return f" ({s.table}/{s.chain} line {s.line})" if s is not None and s.line is not None else ""


def _head(t: Trace) -> str:
    p = t.packet
    dst = f"[{p.dst}]:{p.dport}" if p.dst.version == 6 else f"{p.dst}:{p.dport}"
    which = f" through the {t.variant} rules" if t.variant else ""
    return f"{p.proto.upper()} {p.src} -> {dst}, new connection entering {t.hook.upper()}{which} ({t.artifact})"


def render_trace_text(traces: list[Trace], color: bool = True) -> str:
    buf = io.StringIO()
    no_color = not color or "NO_COLOR" in os.environ
    con = Console(file=buf, force_terminal=not no_color, no_color=no_color, width=140, highlight=False)
    for t in traces:
        con.print(f"[bold]{escape(_head(t))}[/]")
        if t.service:
            con.print(f"[dim]Service {escape(t.service)}, {escape(t.traffic or '')}[/]")
        con.print(f"[dim]source: {escape(t.source_note)}[/]")
        con.print()
        full = FULL_PATHS if len(t.branches) > MANY_BRANCHES else len(t.branches)
        for i, b in enumerate(t.branches, 1):
            style = (
                "green"
                if b.verdict == "ACCEPT" and b.endpoint
                else ("red" if b.verdict in ("DROP", "REJECT") else "yellow")
            )
            if i > full:
                if i == full + 1:
                    rest = len(t.branches) - full
                    con.print(f"[dim]The other {rest:,} branches, one line each (--format json has their steps):[/]")
                where = escape(_deciding(b))
                con.print(f"[bold]{i}. {pct(b.probability)}[/] [{style}]{escape(b.outcome)}[/][dim]{where}[/]")
                continue
            con.print(f"[bold]{i}. {pct(b.probability)}[/] [{style}]{escape(b.outcome)}[/]")
            table_chain = ""
            last_p = 1.0
            for s in b.steps:
                here = f"{s.table}/{s.chain}"
                lead = f"   {here:<38}" if here != table_chain else f"   {'':<38}"
                table_chain = here
                where = f"line {s.line}" if s.line else "      "
                prob = f" [branch now {pct(s.probability)}]" if abs(s.probability - last_p) > 1e-9 else ""
                last_p = s.probability
                con.print(f"{escape(lead)} [dim]{where:>10}[/] {escape(s.rule)}{prob}", soft_wrap=True)
            if b.affinity_lines:
                con.print(
                    f"   [dim]session affinity at line(s) {', '.join(map(str, b.affinity_lines))}: "
                    "a returning client may go to its earlier backend[/]"
                )
            con.print()
        if len(t.branches) > full:
            con.print()
        con.print(f"[bold]Outcome:[/] {escape(t.summary())}")
        for n in t.notes:
            con.print(f"[dim]{escape(n)}[/]", soft_wrap=True)
        con.print()
    return buf.getvalue()


def render_trace_json(traces: list[Trace], color: bool = False) -> str:
    doc = {"schema": SCHEMA, "traces": [t.to_json() for t in traces]}
    return json_safe(json.dumps(doc, indent=2, ensure_ascii=False)) + "\n"


def render_trace_markdown(traces: list[Trace], color: bool = False) -> str:
    out: list[str] = []
    for t in traces:
        out += [f"## {md_text(_head(t))}", ""]
        if t.service:
            out += [f"Service {md_text(t.service)}, {md_text(str(t.traffic))}", ""]
        out += [f"Source: {md_text(t.source_note)}", ""]
        for i, b in enumerate(t.branches, 1):
            if len(t.branches) > MANY_BRANCHES and i > FULL_PATHS:
                out += [f"{i}. **{pct(b.probability)}** {md_text(f'{b.outcome}{_deciding(b)}')}"]
                continue
            out += [f"{i}. **{pct(b.probability)}** {md_text(str(b.outcome))}", ""]
            out += md_fence([f"{s.table}/{s.chain} line {s.line or '-'}: {s.rule}" for s in b.steps])
            out += [""]
        out += [f"**Outcome:** {md_text(t.summary())}", ""]
        out += [f"*{md_text(n)}*" for n in t.notes]
        out.append("")
    return "\n".join(out)


TRACE_FORMATS = {"text": render_trace_text, "json": render_trace_json, "markdown": render_trace_markdown}
