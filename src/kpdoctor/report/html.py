"""The HTML report: one self-contained page to attach to a ticket.

It lays out the view (report/view.py) and decides nothing: the sections, their order, the
verdict, the causes, the skip groups come from the view; the page shows the complete data the
view carries (every evidence line with the lines around it, every Service port of the
verification, the failing ones' paths). Nothing is fetched: the style and the script are inline
and allowed by their hashes alone (Content-Security-Policy), so even markup slipped past the
escaping could not run a script or load anything. Evidence is hostile: every string from it is
escaped here, and the table's rows travel as JSON the script escapes again. Without scripts the
page still reads: the table then holds the rows the text report lists.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re

from kpdoctor.model import Cite, Finding, Report
from kpdoctor.report.safe import plain, printable
from kpdoctor.report.trace import pct
from kpdoctor.report.verification import Row
from kpdoctor.report.view import BRANCHES_DRAWN, Excerpt, ServicePath, View, branch_end, build, finding_meta

PAGE_SIZE = 200  # table rows drawn at once: a filter keystroke redraws this many, never 10,000

CSS = """
:root{color-scheme:light;--fg:#1a1a1a;--muted:#4a4a4a;--bg:#fff;--panel:#f4f5f7;--line:#c9ccd1;
--crit:#a4001d;--warn:#7a4a00;--info:#00528a;--ok:#1d5e20;--mark:#fff1a8;--focus:#0b57d0}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Liberation Sans",sans-serif;
color:var(--fg);background:var(--bg)}
.skip{position:absolute;left:-999px;top:0;background:var(--bg);padding:.4em}
.skip:focus{left:.5em}
header,main,nav.toc{max-width:1200px;margin:0 auto;padding:0 1.2em}
header{padding-top:1em}
h1{font-size:1.5em;margin:.3em 0}
h2{font-size:1.25em;margin:1.6em 0 .5em;border-bottom:2px solid var(--line);padding-bottom:.2em}
h3{font-size:1.08em;margin:1.1em 0 .4em}
a{color:var(--info)}
:focus-visible{outline:3px solid var(--focus);outline-offset:2px}
code,pre,.mono{font-family:ui-monospace,"DejaVu Sans Mono","Liberation Mono",Menlo,monospace;font-size:.92em}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:.3em 0}
.verdict{font-size:1.15em;padding:.6em .8em;border-left:6px solid var(--muted);background:var(--panel)}
.verdict strong{letter-spacing:.03em}
.v0{border-color:var(--ok)}.v0 strong{color:var(--ok)}
.v1,.v4{border-color:var(--crit)}.v1 strong,.v4 strong{color:var(--crit)}
.v2,.v3{border-color:var(--warn)}.v2 strong,.v3 strong{color:var(--warn)}
.meta,.muted{color:var(--muted)}
nav.toc ul{display:flex;flex-wrap:wrap;gap:.3em 1.2em;padding:0;margin:.4em 0;list-style:none}
.finding{border:1px solid var(--line);border-left:6px solid var(--muted);border-radius:4px;
padding:.4em 1em .8em;margin:1em 0}
.finding.critical{border-left-color:var(--crit)}.finding.warning{border-left-color:var(--warn)}
.finding.info{border-left-color:var(--info)}
.sev{font-weight:700;text-transform:uppercase}
.sev.critical{color:var(--crit)}.sev.warning{color:var(--warn)}.sev.info{color:var(--info)}
.versions{display:grid;grid-template-columns:max-content 1fr;gap:.1em 1em;margin:.4em 0}
.versions dt{font-weight:600}.versions dd{margin:0}
ol.evidence{padding-left:1.4em;margin:.3em 0}
ol.evidence>li{margin:.25em 0}
.where{color:var(--muted);font-size:.9em}
mark,.hit{background:var(--mark);color:#000}
ol.evidence mark{white-space:pre-wrap;overflow-wrap:anywhere}
details>summary{cursor:pointer}
.ctx pre{background:var(--panel);border:1px solid var(--line);padding:.4em .6em}
.ctx .ln{display:inline-block;min-width:4.5em;text-indent:0;color:var(--muted);user-select:none}
.ctx .l{display:block;padding-left:4.5em;text-indent:-4.5em}
.ctx .hitline{background:var(--mark);color:#000;font-weight:600}
ul.fix li{margin:.2em 0}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid var(--line);padding:.3em .5em;text-align:left;vertical-align:top}
thead th{background:var(--panel);position:sticky;top:0}
thead button{font:inherit;font-weight:700;border:0;background:none;padding:0;cursor:pointer;color:var(--fg)}
tbody th{font-weight:400}
.st{font-weight:700}
.st-mismatch{color:var(--crit)}.st-uncertain{color:var(--warn)}.st-ok{color:var(--ok)}
.details{font-size:.9em;overflow-wrap:anywhere}
.controls{display:flex;flex-wrap:wrap;gap:.5em 1.2em;align-items:center;margin:.5em 0}
.controls input[type=search]{font:inherit;padding:.25em .4em;min-width:18em}
.controls select,.controls button{font:inherit}
.path{border:1px solid var(--line);border-radius:4px;margin:1em 0;padding:.5em 1em}
.path figcaption{font-weight:600}
.flow{display:flex;flex-direction:column;align-items:flex-start;gap:.3em;margin:.5em 0}
.down{font-weight:700;color:var(--muted);padding-left:1.2em}
.box{border:2px solid var(--line);border-radius:6px;padding:.3em .6em;background:var(--bg);max-width:46em}
.box small{display:block;color:var(--muted)}
.chains>li{margin:.4em 0}.steps{margin:.2em 0 .2em 1.5em;padding-left:1em;border-left:2px solid var(--line)}
.steps code{display:block;white-space:pre-wrap;overflow-wrap:anywhere}
.box code{display:block;white-space:pre-wrap;overflow-wrap:anywhere}
.branch>.box{max-width:none}
.arrow{align-self:center;font-weight:700;color:var(--muted)}
.branches{list-style:none;padding:0;margin:0;display:flex;flex-direction:column;gap:.4em;width:100%}
.branch{display:grid;grid-template-columns:4.5em 1.2em minmax(0,1fr) 1.2em minmax(9em,18em);align-items:center;gap:.4em}
.prob{font-weight:700;min-width:4.5em;text-align:right}
.end-dnat{border-color:var(--ok)}.end-drop{border-color:var(--crit)}
.end-through,.end-uncertain{border-color:var(--warn)}
.end-dnat strong{color:var(--ok)}.end-drop strong{color:var(--crit)}
.end-through strong,.end-uncertain strong{color:var(--warn)}
footer{max-width:1200px;margin:2em auto;padding:0 1.2em;color:var(--muted);font-size:.9em}
@media print{
.skip,nav.toc,.controls,.pager,.noprint{display:none!important}
body{font-size:11pt}
thead th{position:static}
.finding,.path{break-inside:avoid}
a{color:inherit}
}
"""

JS = r"""
(function () {
  "use strict";
  var holder = document.getElementById("kpd-rows");
  var table = document.getElementById("kpd-table");
  if (!holder || !table) { return; }
  var rows = JSON.parse(holder.textContent);
  var n = rows.length;
  var RANK = {mismatch: 0, uncertain: 1, ok: 2};
  var keys = new Array(n), order = new Array(n), cache = new Array(n);
  for (var i = 0; i < n; i++) {
    var r = rows[i];
    keys[i] = (r[0] + "\n" + r[1] + "\n" + r[2] + "\n" + r[3]).toLowerCase();
    order[i] = i;
  }
  var body = table.tBodies[0];
  var q = document.getElementById("kpd-q");
  var status = document.getElementById("kpd-status");
  var size = document.getElementById("kpd-size");
  var count = document.getElementById("kpd-count");
  var prev = document.getElementById("kpd-prev");
  var next = document.getElementById("kpd-next");
  var shown = order.slice(), page = 0, per = parseInt(size.value, 10) || 200, printing = false;
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }
  function rowHtml(i) {
    var h = cache[i];
    if (h === undefined) {
      var r = rows[i], st = RANK.hasOwnProperty(r[1]) ? r[1] : "other";
      h = cache[i] = '<tr><th scope="row" class="mono">' + esc(r[0]) + '</th><td class="st st-' + st + '">' +
        esc(r[1]) + "</td><td>" + esc(r[2]) + '</td><td class="details">' +
        esc(r[3]).replace(/\n/g, "<br>") + "</td></tr>";
    }
    return h;
  }
  function draw() {
    var pages = Math.max(1, Math.ceil(shown.length / per));
    if (page >= pages) { page = pages - 1; }
    var start = printing ? 0 : page * per;
    var end = printing ? shown.length : Math.min(shown.length, start + per);
    var out = new Array(end - start);
    for (var k = start; k < end; k++) { out[k - start] = rowHtml(shown[k]); }
    body.innerHTML = out.join("");
    count.textContent = shown.length ? ("Rows " + (start + 1).toLocaleString() + "\u2013" + end.toLocaleString() +
      " of " + shown.length.toLocaleString() + " matching (" + n.toLocaleString() + " Service ports)")
      : ("No Service port matches (" + n.toLocaleString() + " in all)");
    prev.disabled = page === 0;
    next.disabled = page >= pages - 1;
  }
  function filter() {
    var terms = q.value.toLowerCase().split(/\s+/).filter(Boolean);
    var want = status.value, out = [];
    for (var k = 0; k < n; k++) {
      var i = order[k], r = rows[i];
      if (want === "problems" ? r[1] === "ok" : (want !== "all" && r[1] !== want)) { continue; }
      var key = keys[i], hit = true;
      for (var t = 0; t < terms.length; t++) {
        if (key.indexOf(terms[t]) < 0) { hit = false; break; }
      }
      if (hit) { out.push(i); }
    }
    shown = out;
    page = 0;
    draw();
  }
  function sortBy(col, button) {
    var th = button.parentNode, dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    var heads = table.tHead.rows[0].cells;
    for (var h = 0; h < heads.length; h++) { heads[h].removeAttribute("aria-sort"); }
    th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
    var key = col === 1 ? function (i) { return RANK.hasOwnProperty(rows[i][1]) ? RANK[rows[i][1]] : 3; }
      : function (i) { return rows[i][col].toLowerCase(); };
    var ks = new Array(n);
    for (var j = 0; j < n; j++) { ks[j] = key(j); }
    order.sort(function (a, b) { return ks[a] < ks[b] ? -dir : ks[a] > ks[b] ? dir : a - b; });
    filter();
  }
  q.addEventListener("input", filter);
  status.addEventListener("change", filter);
  size.addEventListener("change", function () { per = parseInt(size.value, 10) || n || 1; page = 0; draw(); });
  prev.addEventListener("click", function () { if (page > 0) { page--; draw(); } });
  next.addEventListener("click", function () { page++; draw(); });
  var buttons = table.tHead.querySelectorAll("button[data-col]");
  for (var b = 0; b < buttons.length; b++) {
    (function (btn) {
      btn.addEventListener("click", function () { sortBy(parseInt(btn.getAttribute("data-col"), 10), btn); });
    })(buttons[b]);
  }
  var opened = [];
  window.addEventListener("beforeprint", function () {
    var ds = document.querySelectorAll("details:not([open])");
    for (var d = 0; d < ds.length; d++) { ds[d].open = true; opened.push(ds[d]); }
    printing = true; draw();
  });
  window.addEventListener("afterprint", function () {
    for (var d = 0; d < opened.length; d++) { opened[d].open = false; }
    opened = []; printing = false; draw();
  });
  document.getElementById("kpd-controls").hidden = false;
  document.getElementById("kpd-static").hidden = true;
  filter();
})();
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


CSP = (
    f"default-src 'none'; style-src {_csp_hash(CSS)}; script-src {_csp_hash(JS)}; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)


def _e(text: str) -> str:
    """Any text for the page: control characters shown, markup escaped."""
    return html.escape(printable(text), quote=True)


def _ev(text: str) -> str:
    """Evidence text: as :func:`_e`, and at most :data:`~kpdoctor.report.safe.MAX_SHOWN` characters."""
    return html.escape(plain(text), quote=True)


def _ticks(text: str) -> str:
    """Escaped text with its `backticked` parts as code (fixes and hints name commands so)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


def _json(data: object) -> str:
    """JSON inside a <script> element: nothing in it can close the element or start markup."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _where(c: Excerpt) -> str:
    return f'<span class="where mono">{_e(c.cite.where)}</span>'


def _evidence_line(x: Excerpt) -> str:
    """The cited line, highlighted; the lines around it behind a disclosure when they were read."""
    line = f'<mark class="mono">{_ev(x.cite.text)}</mark>'
    if not x.lines:
        return f"<li>{_where(x)} {line}</li>"
    ctx = []
    for n, text in x.lines:
        cls = "l hitline" if n == x.cite.line else "l"
        ctx.append(f'<span class="{cls}"><span class="ln">{n}</span>{_ev(text) or " "}</span>')
    first, last = x.lines[0][0], x.lines[-1][0]
    label = _e(f"lines {first} to {last} of {x.cite.artifact}")
    body = "".join(ctx)
    return (
        f'<li><details class="ctx"><summary>{_where(x)} {line}</summary>'
        f'<pre aria-label="{label}">{body}</pre></details></li>'
    )


def _meta(f: Finding) -> str:
    return finding_meta(f, "{n} occurrence(s)")


def _finding(f: Finding, n: str, level: int, view: View, ctx: dict[Cite, Excerpt], anchor: str) -> list[str]:
    sev = f.severity.label
    h = f"h{min(level, 6)}"
    out = [
        f'<article class="finding {sev}" id="{anchor}" aria-labelledby="{anchor}-h">',
        f'<{h} id="{anchor}-h">{_e(n)} <span class="sev {sev}">{sev}</span> <span class="mono">{_e(f.code)}</span> '
        f"<code>{_e(f.cause)}</code>: {_e(f.title)}</{h}>",
        f"<p>{_e(f.summary)}</p>",
        f'<p class="meta">{_e(_meta(f))}</p>',
    ]
    if f.versions_found or f.fixed_in:
        out.append('<dl class="versions">')
        out += [f"<dt>{_e(k)}</dt><dd class='mono'>{_e(v)}</dd>" for k, v in f.versions_found.items()]
        if f.fixed_in:
            out.append(f"<dt>fixed in</dt><dd>{_e(', '.join(f.fixed_in))}</dd>")
        out.append("</dl>")
    if f.evidence:
        shown = len(f.evidence) if view.evidence_shown is None else view.evidence_shown
        items = [_evidence_line(ctx.get(c) or Excerpt(c)) for c in f.evidence]
        many = f"{len(f.evidence)} lines" if len(f.evidence) > 1 else "1 line"
        out.append(f'<p><strong>Evidence</strong> <span class="muted">({many})</span></p>')
        out.append('<ol class="evidence">' + "".join(items[:shown]) + "</ol>")
        if len(items) > shown:
            out.append(
                f"<details><summary>{len(items) - shown} more evidence line(s)</summary>"
                f'<ol class="evidence" start="{shown + 1}">' + "".join(items[shown:]) + "</ol></details>"
            )
        alone = {e.why: None for c in f.evidence if not (e := ctx.get(c) or Excerpt(c)).lines and e.why}
        if alone:
            out.append(f'<p class="muted">Lines alone, without the lines around them: {_e("; ".join(alone))}.</p>')
    if f.fix:
        out.append("<p><strong>Fix</strong></p><ul class='fix'>")
        for item in f.fix:
            first, *rest = item.split("\n")
            snippet = f"<pre>{_e(chr(10).join(rest))}</pre>" if rest else ""
            out.append(f"<li>{_ticks(first)}{snippet}</li>")
        out.append("</ul>")
    if f.references:
        links = []
        for ref in f.references:
            if re.match(r"^https?://", ref):
                links.append(f'<a href="{_e(ref)}" rel="noreferrer noopener">{_e(ref)}</a>')
            else:
                links.append(_e(ref))
        out.append("<p><strong>References</strong>: " + ", ".join(links) + "</p>")
    for i, sub in enumerate(f.folded, 1):
        out.append(
            f"<details class='folded'><summary>Explains <span class='mono'>{_e(sub.code)}</span> "
            f"<code>{_e(sub.cause)}</code> ({_e(sub.severity.label)}): {_e(sub.title)}</summary>"
        )
        out += _finding(sub, f"{n.rstrip('.')}.{i}", level + 1, view, ctx, f"{anchor}-{i}")
        out.append("</details>")
    out.append("</article>")
    return out


def _chains(p: ServicePath) -> str:
    """The path chain by chain: per branch (its share), every rule the packet met, in order, then
    where it ends; folded past BRANCHES_DRAWN branches."""
    items = []
    for t in p.traces:
        variant = f" ({t.variant} iptables)" if t.variant else ""
        for b in t.branches:
            steps = "".join(
                f'<li><span class="mono">{_e(f"{s.table}/{s.chain}" if s.table else s.chain)}</span>'
                + (f" <small>line {s.line} of {_e(s.artifact)}</small>" if s.line else "")
                + (f"<code>{_ev(s.rule)}</code>" if s.rule else "")
                + "</li>"
                for s in b.steps
            )
            items.append(
                f'<li><span class="prob">{_e(pct(b.probability))}</span>{_e(variant)}'
                f'<ol class="steps">{steps}</ol>'
                f'<div class="box end-{branch_end(b.verdict, b.endpoint)}"><strong>{_e(b.outcome)}</strong></div></li>'
            )
    shown = "".join(items[:BRANCHES_DRAWN])
    more = f"<p class='muted'>{len(items) - BRANCHES_DRAWN} more branches</p>" if len(items) > BRANCHES_DRAWN else ""
    return (
        f"<details open><summary>Chain by chain ({len(items)} branch{'es' if len(items) != 1 else ''})</summary>"
        f'<ol class="chains">{shown}</ol>{more}</details>'
    )


def _path(p: ServicePath, i: int) -> list[str]:
    """One failing Service port's path: the packet, then each branch's deciding rule, then its end."""
    src = p.source or "?"
    packet = (
        f'<div class="box"><strong>{_e(p.protocol)} {_e(src)} &#8594; {_e(p.destination)}</strong>'
        f"<small>{_e(p.traffic_text)}</small></div>"
        f'<div class="down"><span aria-hidden="true">&#8595;</span> enters at <span class="mono">{_e(p.hook)}</span>'
        "</div>"
    )
    branches = []
    for b in p.branches:
        where = ""
        rule = ""
        if b.rule is not None:
            where = f"line {b.rule.line} of {b.rule.artifact}" if b.rule.line else b.rule.artifact
            rule = f"<code>{_ev(b.rule.text)}</code>"
        who = f", written by {b.owner}" if b.owner else ""
        backend = f" ({b.ruleset} iptables)" if b.ruleset else ""
        chain = (
            f'<div class="box"><strong class="mono">{_e(b.chain or "rules")}</strong>{rule}'
            f"<small>{_e(where + who + backend)}</small></div>"
        )
        branches.append(
            f'<li class="branch"><span class="prob">{_e(pct(b.probability))}</span>'
            f'<span class="arrow" aria-hidden="true">&#8594;</span>{chain}'
            f'<span class="arrow" aria-hidden="true">&#8594;</span>'
            f'<div class="box end-{"drop" if b.unexpected else b.end}"><strong>{_e(b.outcome)}</strong>'
            + ("<small>not a ready endpoint</small>" if b.unexpected else "")
            + "</div></li>"
        )
    drawn = "".join(branches[:BRANCHES_DRAWN])
    more = ""
    if len(branches) > BRANCHES_DRAWN:  # a Service of thousands of endpoints: the rest one line each
        rest = []
        for b in p.branches[BRANCHES_DRAWN:]:
            where = f" ({b.chain} line {b.rule.line})" if b.rule is not None and b.rule.line else ""
            stale = ", not a ready endpoint" if b.unexpected else ""
            rest.append(f"<li>{_e(f'{pct(b.probability)} {b.outcome}{stale}{where}')}</li>")
        more = (
            f"<details><summary>{len(rest)} more branches</summary>"
            f'<ol class="mono" start="{BRANCHES_DRAWN + 1}">{"".join(rest)}</ol></details>'
        )
    kind = f" ({p.kind})" if p.kind else ""
    out = [
        f'<figure class="path" id="path-{i}" aria-labelledby="path-{i}-cap">',
        f'<figcaption id="path-{i}-cap"><span class="mono">{_e(p.service)}</span>, {_e(p.traffic_text)}: '
        f'<span class="st st-mismatch">mismatch{_e(kind)}</span></figcaption>',
        f'<div class="flow">{packet}<ol class="branches" aria-label="branches, by share">{drawn}</ol></div>',
        more,
        f"<p>Expected: <span class='mono'>{_e(p.expected)}</span></p>",
    ]
    if p.missing:
        out.append(f"<p>Never reached: <span class='mono'>{_e(', '.join(p.missing))}</span></p>")
    if p.note:
        out.append(f'<p class="muted">{_e(p.note)}</p>')
    if p.traces:
        out.append(_chains(p))
        out.append(f'<p class="muted">The same in a terminal: <code>{_e(p.command)}</code></p></figure>')
    else:
        out.append(f'<p class="muted">Every step, rule by rule: <code>{_e(p.command)}</code></p></figure>')
    return out


def _verification(view: View, table: list[Row]) -> list[str]:
    ver = view.verification
    out = ['<section id="verification" aria-labelledby="verification-h">']
    out.append('<h2 id="verification-h">Verification</h2>')
    out.append(f"<p>{_e(view.verification_summary or '')}</p>")
    if table:
        data = [[printable(r.service), r.status, printable(r.classes), printable("\n".join(r.details))] for r in table]
        problems = sum(1 for r in table if r.status != "ok")
        out += [
            '<h3 id="table-h">Service ports</h3>',
            '<div class="controls" id="kpd-controls" hidden>',
            '<label for="kpd-q">Filter</label>',
            '<input type="search" id="kpd-q" autocomplete="off" spellcheck="false" '
            'placeholder="Service, namespace, status..." aria-controls="kpd-table">',
            '<label for="kpd-status">Status</label><select id="kpd-status" aria-controls="kpd-table">',
            f'<option value="all">all ({len(table):,})</option>',
            f'<option value="problems">problems ({problems:,})</option>',
            '<option value="mismatch">mismatch</option><option value="uncertain">uncertain</option>',
            '<option value="ok">ok</option></select>',
            '<label for="kpd-size">Rows per page</label><select id="kpd-size">',
            f'<option value="{PAGE_SIZE}" selected>{PAGE_SIZE}</option><option value="1000">1,000</option>',
            '<option value="0">all</option></select>',
            '<span class="pager"><button type="button" id="kpd-prev">Previous</button> '
            '<button type="button" id="kpd-next">Next</button></span>',
            '<p id="kpd-count" aria-live="polite" role="status"></p>',
            "</div>",
            '<table id="kpd-table" aria-labelledby="table-h"><thead><tr>',
            '<th scope="col"><button type="button" data-col="0">Service port</button></th>',
            '<th scope="col"><button type="button" data-col="1">Status</button></th>',
            '<th scope="col"><button type="button" data-col="2">Traffic classes</button></th>',
            '<th scope="col">Details</th></tr></thead><tbody>',
        ]
        for r in view.rows:  # without scripts: the rows the text report lists
            details = "<br>".join(_e(d) for d in r.details)
            st = r.status if r.status in ("ok", "mismatch", "uncertain") else "other"
            out.append(
                f'<tr><th scope="row" class="mono">{_e(r.service)}</th><td class="st st-{st}">{_e(r.status)}</td>'
                f'<td>{_e(r.classes)}</td><td class="details">{details}</td></tr>'
            )
        out.append("</tbody></table>")
        if view.rows_hidden:
            out.append(
                f'<p class="muted" id="kpd-static">{view.rows_hidden:,} Service port(s) verified ok are listed '
                "only with scripts on.</p>"
            )
        else:
            out.append('<p hidden id="kpd-static"></p>')
        out.append(f'<script type="application/json" id="kpd-rows">{_json(data)}</script>')
    elif view.rows_hidden:
        out.append(f'<p class="muted">{view.rows_hidden:,} Service port(s) verified ok.</p>')
    paths, more = view.paths()
    if paths:
        out.append('<h3 id="paths-h">Paths of the failing Service ports</h3>')
        out.append(
            '<p class="muted">The packet verify sent, the rule that decided each branch, and where each branch '
            "ends.</p>"
        )
        for i, p in enumerate(paths, 1):
            out += _path(p, i)
        if more:
            out.append(f'<p class="muted">{more:,} more failing Service port path(s): the table lists them.</p>')
    if ver.stale:
        out.append("<h3>Stale rules</h3><ul>")
        for s in ver.stale:
            named = f" (rules name {s.label})" if s.label else ""
            named += f" (left from {s.leftover_of} mode)" if s.leftover_of else ""
            line = f"{s.destination}/{s.protocol} -> {', '.join(s.backends)}{named}"
            out.append(f'<li class="mono">{_e(line)}</li>')
        out.append("</ul>")
    if ver.not_evaluated:
        out.append("<h3>Not evaluated</h3><ul>" + "".join(f"<li>{_e(x)}</li>" for x in ver.not_evaluated) + "</ul>")
    out.append("</section>")
    return out


def _unused(view: View) -> list[str]:
    out = [
        '<section id="unused" aria-labelledby="unused-h">',
        f'<h2 id="unused-h">Inputs not used or not collected ({len(view.unused)})</h2><ul>',
    ]
    for p in view.unused:
        more = f" (and {p.count - 1} more like it)" if p.count > 1 else ""
        out.append(f'<li><span class="mono">{_e(p.source)}</span>: {_e(p.message + more)}</li>')
    return [*out, "</ul></section>"]


def render_html(report: Report | View, color: bool = False) -> str:
    """The view as one page (see the module docstring); ``color`` is the terminal's, unused."""
    view = report if isinstance(report, View) else build(report)
    rep = view.report
    v = view.verdict
    title = "kpdoctor report" + (f" for node {rep.node}" if rep.node else "")
    toc: list[tuple[str, str]] = []
    body: list[str] = []
    if view.unused_first:
        body += _unused(view)
        toc.append(("unused", "Inputs not used"))
    ctx = view.excerpts() if view.causes or view.below else {}
    if view.causes:
        many = len(view.causes) > 1
        head = f"Root causes, most likely first ({len(view.causes)})" if many else "Root cause"
        body.append(f'<section id="causes" aria-labelledby="causes-h"><h2 id="causes-h">{head}</h2>')
        for i, f in enumerate(view.causes, 1):
            body += _finding(f, f"{i}.", 3, view, ctx, f"cause-{i}")
        body.append("</section>")
        toc.append(("causes", "Root causes" if many else "Root cause"))
    if view.below:
        body.append(
            f'<section id="below" aria-labelledby="below-h"><h2 id="below-h">Below the threshold '
            f"({_e(rep.min_severity.label)})</h2>"
        )
        for i, f in enumerate(view.below, 1):
            body.append(f"<details><summary>{_e(f'{f.severity.label} {f.code} {f.cause}: {f.summary}')}</summary>")
            body += _finding(f, f"{i}.", 3, view, ctx, f"below-{i}")
            body.append("</details>")
        body.append("</section>")
        toc.append(("below", "Below the threshold"))
    table = view.table()
    if view.verification is not None:
        body += _verification(view, table)
        toc.append(("verification", "Verification"))
    if view.unused and not view.unused_first:
        body += _unused(view)
        toc.append(("unused", "Inputs not used"))
    if view.inputs:
        body.append(
            f'<section id="inputs" aria-labelledby="inputs-h"><h2 id="inputs-h">Inputs read ({len(view.inputs)})</h2>'
        )
        body.append("<ul>" + "".join(f'<li class="mono">{_e(i.describe())}</li>' for i in view.inputs) + "</ul>")
        body.append("</section>")
        toc.append(("inputs", "Inputs read"))
    if view.skipped:
        body.append(
            f'<section id="skipped" aria-labelledby="skipped-h"><h2 id="skipped-h">Not checked ({view.not_checked}: '
            "missing evidence, not healthy)</h2><ul>"
        )
        for g in view.skipped:
            checks = "".join(
                f"<li><span class='mono'>{_e(s.code)}</span> <code>{_e(s.cause)}</code></li>" for s in g.checks
            )
            body.append(f"<li><details><summary>{_ticks(g.line())}</summary><ul>{checks}</ul></details></li>")
        body.append("</ul></section>")
        toc.append(("skipped", "Not checked"))
    if rep.errors:
        body.append(
            '<section id="errors" aria-labelledby="errors-h"><h2 id="errors-h">Internal errors</h2>'
            "<p>kpdoctor bugs: the rest of the report stands; please report them.</p><ul>"
        )
        body += [f"<li>{_e(f'{e.stage}: {e.error}')}</li>" for e in rep.errors]
        body.append("</ul></section>")
        toc.append(("errors", "Internal errors"))
    if rep.timed_out:
        body.append(f'<p class="verdict v3"><strong>Partial report</strong>: {_e(rep.timed_out)}.</p>')
    meta = [f"kpdoctor {rep.tool_version}", f"{len(rep.artifacts)} input(s)", f"{rep.checks_run} check(s) ran"]
    if rep.collected_at:
        meta.append(f"collected {rep.collected_at}")
    nav = "".join(f'<li><a href="#{a}">{_e(t)}</a></li>' for a, t in toc)
    script = f"<script>{JS}</script>" if table else ""
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="referrer" content="no-referrer">',
        '<link rel="icon" href="data:,">',
        f"<title>{_e(title)}: {_e(v.word)}</title>",
        f"<style>{CSS}</style></head><body>",
        '<a class="skip" href="#main">Skip to the report</a>',
        f"<header><h1>{_e(title)}</h1>",
        f'<p class="verdict v{v.code}" id="verdict"><strong>{_e(v.word.upper())}</strong>'
        + (f": {_e(v.why)}" if v.why else "")
        + f' <span class="muted">(exit code {v.code})</span></p>',
        f'<p class="meta">{_e(", ".join(meta))}</p></header>',
        f'<nav class="toc" aria-label="Sections"><ul>{nav}</ul></nav>' if toc else "",
        '<main id="main">',
        *body,
        "</main>",
        f"<footer>kpdoctor {_e(rep.tool_version)}: "
        "a report made from the evidence given; nothing on this page is fetched.</footer>",
        script,
        "</body></html>",
    ]
    return "\n".join(x for x in page if x) + "\n"
