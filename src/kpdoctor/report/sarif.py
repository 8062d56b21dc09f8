"""SARIF 2.1.0, for code-scanning dashboards and other tools that read static-analysis results.

Drawn from the one view (report/view.py) like every renderer: the results are the ranked causes at
or above the threshold, each folded finding a result of its own pointing at its root cause. Every
check is a rule, documented from its docstring. Layout and choices: docs/report-schema.md
("SARIF").
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kpdoctor import lazy_re
from kpdoctor.knowledge import CHECKS
from kpdoctor.model import Cite, Finding, Report, Severity
from kpdoctor.report.safe import json_safe
from kpdoctor.report.view import View, build

SARIF_VERSION = "2.1.0"
# The OASIS standard's own schema address (the "id" of sarif-schema-2.1.0.json, errata 01).
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVELS = {Severity.CRITICAL: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
# A Service port that verification found wrong and no finding names (the KP2xx checks report at
# most a few Services each, then one finding sums the rest up): it is a result of this rule.
MISMATCH_RULE = "KP2xx-verify"
PRETTY_LIMIT = 3000  # results; above, no indentation (as the JSON report)
_SURROGATE = lazy_re.compile("[\ud800-\udfff]")


def _text(s: str) -> str:
    """A string any JSON reader takes: a lone surrogate (a name's byte that is not UTF-8) becomes
    U+FFFD (a strict parser may refuse a lone ``\\udcxx`` escape)."""
    return _SURROGATE.sub("\ufffd", s) if _SURROGATE.search(s) else s


def artifact_uri(name: str, cwd: str | None = None) -> str:
    """An artifact's name as a URI reference: bundle-relative names (and relative paths a user
    gave) stay relative; a user's absolute path is made relative to the current directory when it
    lies under it, else it is a ``file://`` URI. Characters a URI cannot hold are %-encoded
    (a file name's non-UTF-8 bytes as themselves)."""
    path = name.replace(os.sep, "/") if os.sep != "/" else name
    if path.startswith("/"):
        base = Path(cwd or os.getcwd())
        try:
            path = Path(path).relative_to(base).as_posix()
        except ValueError:
            return "file://" + _quote(path)
    return _quote(path)


def _quote(path: str) -> str:
    try:
        return quote(path, safe="/", errors="surrogateescape")
    except UnicodeEncodeError:  # a surrogate that stands for no byte
        return quote(_text(path), safe="/")


def _rules() -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Every check of the catalogue (docs/checks.md) as a rule, by code; the verification's
    unnamed mismatches last."""
    rules: list[dict[str, Any]] = []
    for spec in sorted(CHECKS.values(), key=lambda s: s.code):
        sec = spec.sections()
        # the sections as written (a Fix may hold a list or a command on lines of its own)
        parts = [(n, sec[n].strip()) for n in ("Symptom", "Cause", "How it is detected", "Fix") if n in sec]
        summary = " ".join(sec.get("Summary", "").split()) or spec.title
        rule: dict[str, Any] = {
            "id": spec.code,
            "name": spec.cause,
            "shortDescription": {"text": spec.title},
            "fullDescription": {"text": summary},
            "help": {
                "text": "\n\n".join(f"{n}: {t}" for n, t in parts),
                "markdown": "\n\n".join(f"**{n}.** {t}" for n, t in parts),
            },
            "defaultConfiguration": {"level": LEVELS[spec.severity]},
            "properties": {
                "cause": spec.cause,
                "severity": spec.severity.label,
                "evidence_read": [k.value for k in spec.needs],
                "references": spec.reference_urls(),
            },
        }
        if spec.needs_all:
            rule["properties"]["evidence_read_together_with"] = [k.value for k in spec.needs_all]
        if spec.explains:
            rule["properties"]["explains"] = list(spec.explains)
        urls = spec.reference_urls()
        if urls:
            rule["helpUri"] = urls[0]
        rules.append(rule)
    rules.append(
        {
            "id": MISMATCH_RULE,
            "name": "service-port-mismatch",
            "shortDescription": {"text": "A Service port's forwarding on the node disagrees with the cluster"},
            "fullDescription": {
                "text": "kpdoctor verify sent this Service port's traffic through the node's rules and "
                "reached other backends than its ready endpoints, or none. A KP2xx finding names at most "
                "a few Services; the Service ports it does not name are results of this rule."
            },
            "help": {
                "text": "Trace it: kpdoctor trace RULES CLUSTER --service NS/NAME:PORT --traffic CLASS. "
                "The KP2xx results of the same run give the cause."
            },
            "defaultConfiguration": {"level": "error"},
            "properties": {"cause": None, "severity": Severity.CRITICAL.label},
        }
    )
    return rules, {r["id"]: i for i, r in enumerate(rules)}


def _location(c: Cite, cwd: str) -> dict[str, Any]:
    """One cited line: its artifact and, when it has one, its line with the cited text."""
    loc: dict[str, Any] = {}
    if c.artifact:
        phys: dict[str, Any] = {"artifactLocation": {"uri": artifact_uri(c.artifact, cwd)}}
        if c.line is not None and c.line >= 1:
            phys["region"] = {"startLine": c.line, "snippet": {"text": _text(c.text)}}
        loc["physicalLocation"] = phys
    else:  # evidence from no artifact (rare): its text alone
        loc["message"] = {"text": _text(c.text)}
    if c.writer:
        loc["properties"] = {"writer": c.writer}
    return loc


def _result(
    f: Finding, rank: int, index: dict[str, int], cwd: str, parent: tuple[Finding, dict[str, Any]] | None
) -> dict[str, Any]:
    rule = f.code if f.code in index else None
    props: dict[str, Any] = {
        "cause": f.cause,
        "severity": f.severity.label,
        "confidence": f.confidence.label,
        "confidence_reason": f.confidence_reason,
        "title": f.title,
        "rank": rank,
        "versions": {"found": dict(f.versions_found), "fixed_in": list(f.fixed_in)},
        "fix": list(f.fix),
        "decided_by": list(f.decided_by),
        "references": list(f.references),
        "subject": {k: v for k, v in f.subject.items()} if f.subject else {},
    }
    for key, value in (
        ("occurrences", f.occurrences),
        ("first_seen", f.first_seen),
        ("last_seen", f.last_seen),
        ("ongoing", f.ongoing),
    ):
        if value is not None:
            props[key] = value
    if f.explains:
        props["explains"] = list(f.explains)
    if f.alternative_to:
        props["alternative_to"] = f.alternative_to  # the other reading of the same evidence
    out: dict[str, Any] = {
        "ruleId": f.code,
        "level": LEVELS[f.severity],
        "message": {"text": _text(f.summary) or _text(f.title)},
        "locations": [_location(c, cwd) for c in f.evidence],
        "properties": props,
    }
    if rule is not None:
        out["ruleIndex"] = index[rule]
    if parent is not None:
        root, root_result = parent
        props["folded_under"] = {"ruleId": root.code, "cause": root.cause, "rank": rank}
        first = next((loc for loc in root_result["locations"] if "physicalLocation" in loc), None)
        if first is not None:
            out["relatedLocations"] = [
                {
                    "id": 0,
                    "physicalLocation": first["physicalLocation"],
                    "message": {"text": f"explained by {root.code} ({root.cause}), the root cause"},
                }
            ]
    return out


def _named(findings: list[Finding]) -> tuple[set[str], list[str]]:
    """The Services the findings (folded ones too) are about, and their summaries (one finding
    sums up the Services past a check's cap by name): those mismatches are results already."""
    subjects: set[str] = set()
    summaries: list[str] = []
    for f in (f for top in findings for f in top.with_folded()):
        svc = f.subject.get("service") if f.subject else None
        if svc:
            subjects.add(svc)
        summaries.append(f.summary)
    return subjects, summaries


def _mismatches(view: View, index: dict[str, int], cwd: str, first_rank: int) -> list[dict[str, Any]]:
    """Mismatched Service ports of the verification that no finding names, one result each."""
    ver = view.verification
    if ver is None or not getattr(ver, "evaluated", False):
        return []
    named, summaries = _named(view.report.findings)
    by_port: dict[str, list[Any]] = {}
    for r in ver.problems():
        if r.status == "mismatch":
            by_port.setdefault(r.label, []).append(r)
    details = {row.service: row for row in view.rows}
    out: list[dict[str, Any]] = []
    for label in sorted(by_port):
        if label in named or label.split(":", 1)[0] in named or any(label in s for s in summaries):
            continue
        rs = by_port[label]
        cites: list[Cite] = []
        for r in rs:
            for c in [*r.rules, *([r.service_cite] if r.service_cite is not None else [])]:
                if c not in cites:
                    cites.append(c)
        row = details.get(label)
        what = ", ".join(sorted({r.kind or "mismatch" for r in rs}))
        out.append(
            {
                "ruleId": MISMATCH_RULE,
                "ruleIndex": index[MISMATCH_RULE],
                "level": "error",
                "message": {"text": _text(f"{label}: {row.classes if row else what}" + (f" ({what})" if row else ""))},
                "locations": [_location(c, cwd) for c in cites[:8]],
                "properties": {
                    "service": label,
                    "mismatch": what,
                    "details": [_text(d) for d in (row.details if row else [])],
                    "rank": first_rank + len(out),
                },
            }
        )
    return out


def _run_properties(view: View) -> dict[str, Any]:
    rep = view.report
    props: dict[str, Any] = {
        "command": rep.command,
        "verdict": view.verdict.word,
        "verdict_reason": _text(view.verdict.why),
        "node": rep.node,
        "collected_at": rep.collected_at,
        "min_severity": rep.min_severity.label,
        "checks_run": rep.checks_run,
        "inputs_not_used": [
            {"source": _text(p.source), "message": _text(p.message), **({"count": p.count} if p.count > 1 else {})}
            for p in view.unused
        ],
        "not_checked": [
            {"reason": _text(g.reason), "hint": _text(g.hint), "checks": sorted(s.code for s in g.checks)}
            for g in view.skipped
        ],
        "below_threshold": [{"ruleId": f.code, "summary": _text(f.summary)} for f in view.below],
    }
    if rep.damaged:
        props["damaged"] = [_text(d) for d in rep.damaged]
    if rep.timed_out:
        props["timed_out"] = _text(rep.timed_out)
    if view.verification_summary is not None:
        props["verification"] = _text(view.verification_summary)
    return props


def _artifacts(view: View, cwd: str) -> list[dict[str, Any]]:
    """Every input read, once per file, with how each part of it was read."""
    read: dict[str, list[dict[str, Any]]] = {}
    for i in view.inputs:
        read.setdefault(i.source, []).append({k: _text(str(v)) for k, v in i.details.items()} | {"kind": i.kind})
        read[i.source][-1]["lines"] = [i.first_line, i.last_line]
    names = list(dict.fromkeys([*view.report.artifacts, *read]))
    out: list[dict[str, Any]] = []
    for name in names:
        art: dict[str, Any] = {"location": {"uri": artifact_uri(name, cwd)}, "roles": ["analysisTarget"]}
        if name in read:
            art["properties"] = {"read_as": read[name]}
        out.append(art)
    return out


def build_sarif(report: Report | View, cwd: str | None = None) -> dict[str, Any]:
    """The SARIF log as a dict (``cwd``: what absolute paths are made relative to)."""
    view = report if isinstance(report, View) else build(report)
    rep = view.report
    here = cwd or os.getcwd()
    rules, index = _rules()
    results: list[dict[str, Any]] = []
    for rank, f in enumerate(view.causes, 1):
        root = _result(f, rank, index, here, None)
        results.append(root)
        stack = [(sub, (f, root)) for sub in f.folded]
        while stack:  # a folded finding may fold others: each is a result of its own
            sub, parent = stack.pop(0)
            res = _result(sub, rank, index, here, parent)
            results.append(res)
            stack.extend((s, (sub, res)) for s in sub.folded)
    results += _mismatches(view, index, here, len(view.causes) + 1)
    notes: list[dict[str, Any]] = [
        {"level": "warning", "message": {"text": _text(f"{p.source}: {p.message}")}} for p in view.unused
    ]
    notes += [
        {"level": "error", "message": {"text": _text(f"internal error in {e.stage}: {e.error}")}} for e in rep.errors
    ]
    invocation: dict[str, Any] = {
        "executionSuccessful": view.verdict.code not in (2, 4),
        "exitCode": view.verdict.code,
        "exitCodeDescription": view.verdict.word,
        "properties": {"verdict": view.verdict.word},
    }
    if notes:
        invocation["toolExecutionNotifications"] = notes
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "kpdoctor",
                "version": rep.tool_version,
                "rules": rules,
                "properties": {"documentation": "README.md, docs/checks.md and docs/report-schema.md of kpdoctor"},
            }
        },
        "invocations": [invocation],
        "artifacts": _artifacts(view, here),
        "results": results,
        "columnKind": "unicodeCodePoints",
        "properties": _run_properties(view),
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def render_sarif(report: Report | View, color: bool = False) -> str:
    """The SARIF log as JSON text, keys sorted (the same report gives the same bytes)."""
    doc = build_sarif(report)
    big = len(doc["runs"][0]["results"]) > PRETTY_LIMIT
    if big:
        text = json.dumps(doc, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    else:
        text = json.dumps(doc, ensure_ascii=False, sort_keys=True, indent=2)
    return json_safe(text) + "\n"
