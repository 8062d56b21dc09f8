"""The one view of a report that every renderer draws.

What a reader sees first, what is grouped, and the verdict (the exit code's) are decided here,
once; the text, Markdown, HTML and SARIF renderers only lay the view out. The view keeps the
complete report (``view.report``): caps and grouping are for human readers, and JSON is the
report itself, never shortened.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kpdoctor.model import Finding, InputProblem, InputRead, Report, Severity, Skipped
from kpdoctor.report import verification
from kpdoctor.report.verification import Row

# How to give what a skipped check lacked, by the evidence's kind (bundle/artifacts.Kind values).
HOW_TO_GIVE = {
    "kube-proxy log": "`kubectl -n kube-system logs <kube-proxy pod>` (add `-p` after a crash)",
    "Kubernetes objects": "`kubectl get svc,endpointslices -A -o yaml` and the Node (`kubectl get node NAME -o yaml`)",
    "iptables-save output": "`iptables-save` on the node (`iptables-legacy-save` and `iptables-nft-save` if both)",
    "iptables --version": "`iptables --version` on the node and inside the kube-proxy container",
    "kube-proxy command line": "`ps -ef | grep kube-proxy` on the node",
    "KubeProxyConfiguration": "`kubectl -n kube-system get cm kube-proxy -o yaml`",
    "process list": "`ps -ef` on the node",
    "/proc/locks": "`cat /proc/locks` on the node",
    "/proc/modules": "`cat /proc/modules` on the node",
    "ipvsadm output": "`ipvsadm -Ln` on the node",
    "sysctl output": "`sysctl -a` on the node",
    "conntrack -S output": "`conntrack -S` on the node, twice a few seconds apart",
    "kernel log (dmesg)": "`dmesg -T` on the node",
}
LIVE = "or run `kpdoctor diagnose --live` on the node"
EVIDENCE_SHOWN = 4  # evidence lines per finding on a human's first screen (-v: all)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The run's answer in one word, and the exit code that says the same to a script."""

    code: int  # 0 clean, 1 problems, 2 nothing usable, 3 inconclusive, 4 a kpdoctor bug met
    word: str
    why: str


@dataclass(frozen=True, slots=True)
class SkipGroup:
    """Checks that could not run for the same missing evidence."""

    reason: str  # the checks' own reason ("no kube-proxy log", "none of: A, B")
    checks: tuple[Skipped, ...]
    hint: str  # how to give what is missing ("" when nothing to say)

    def line(self) -> str:
        """``9 checks need a kube-proxy log: `kubectl ... logs ...`, or run `kpdoctor diagnose --live`...``."""
        n = len(self.checks)
        need = "need" if n > 1 else "needs"
        what = self.reason
        together = re.match(r"^no (.+) \(needed together with the (.+) given\)$", what)
        if together:
            what = f"{need} {together.group(1)} too (with the {together.group(2)} given)"
        elif what.startswith("no "):
            what = f"{need} {what[3:]}"
        elif what.startswith("none of: "):
            what = f"{need} one of: {what[9:]}"
        elif what.startswith("other node state"):
            what = f"{need} {what}"
        else:
            what = f"not run: {what}"
        head = f"{n} check{'s' if n > 1 else ''} {what}"
        return f"{head}: {self.hint}" if self.hint else head


@dataclass(slots=True)
class View:
    report: Report  # the complete data (JSON, SARIF, and any renderer that lists everything)
    verdict: Verdict
    causes: list[Finding]  # ranked, at or above the threshold: the answer
    below: list[Finding]  # info findings, one line each, when nothing reaches the default threshold
    unused: list[InputProblem]  # inputs not used or not collected, with what to send instead
    unused_first: bool  # nothing was found: why the inputs were not read is the next thing to say
    inputs: list[InputRead]
    skipped: list[SkipGroup]
    rows: list[Row] = field(default_factory=list)  # the verification table (problems, or --all)
    rows_hidden: int = 0  # Service ports verified ok that the table leaves out
    verbose: bool = False
    evidence_shown: int | None = EVIDENCE_SHOWN  # None: every line

    @property
    def verification(self) -> Any:
        return self.report.verification

    @property
    def verification_summary(self) -> str | None:
        ver = self.report.verification
        return None if ver is None else verification.summary(ver)


def verdict(report: Report) -> Verdict:
    """The exit code and its word (DESIGN.md): 4 a bug met (the report still stands), 2 nothing
    usable, 1 findings at or above the threshold (``verify``: a mismatch or stale rules), 3
    inconclusive (a run cut short, damaged evidence, only versions given, nothing checked, or
    uncertain results), else 0."""
    if report.errors:
        return Verdict(4, "internal error", "kpdoctor met a bug; the rest of the report stands")
    if not report.artifacts:
        if report.timed_out:
            return Verdict(3, "inconclusive", report.timed_out)
        return Verdict(2, "nothing usable", "no input could be read")
    if report.command == "verify":
        ver = report.verification
        if ver is None:
            if report.timed_out:
                return Verdict(3, "inconclusive", report.timed_out)
            return Verdict(2, "nothing usable", "the rules and the cluster's objects are both needed to verify")
        if ver.count("mismatch") or ver.stale:
            return Verdict(1, "mismatch", "the node's rules disagree with the cluster")
        if not ver.results or ver.count("uncertain") or ver.unverified or report.timed_out:
            return Verdict(3, "inconclusive", report.timed_out or "some Services could not be verified")
        return Verdict(0, "clean", "every Service port forwards to its endpoints")
    if report.visible():
        return Verdict(
            1, "problems found", f"{len(report.visible())} root cause(s) at or above {report.min_severity.label}"
        )
    if report.timed_out:
        return Verdict(3, "inconclusive", report.timed_out)
    if report.damaged:
        return Verdict(3, "inconclusive", f"damaged evidence ({', '.join(report.damaged)})")
    if report.checks_run == 0:
        return Verdict(3, "inconclusive", "the input was readable but no check could run")
    if report.context_only:
        return Verdict(3, "inconclusive", "only versions and identity were given, not the node's state")
    return Verdict(0, "clean", f"nothing at or above {report.min_severity.label}")


def group_skipped(skipped: list[Skipped], every: bool = False) -> list[SkipGroup]:
    """Skipped checks by the evidence they lacked, largest group first. Unless ``every``, the
    groups a command cannot be named for (node state a live run collects) are one group."""
    groups: dict[str, list[Skipped]] = {}
    for s in skipped:  # "no X" and "no X (needed together with Y)": both are given by giving X
        key = s.reason.split(" (needed together", 1)[0] if s.reason.startswith("no ") else s.reason
        groups.setdefault(key, []).append(s)
    out = [SkipGroup(reason, tuple(checks), _hint(reason)) for reason, checks in groups.items()]
    out.sort(key=lambda g: (-len(g.checks), g.reason))
    if every:
        return out
    named = [g for g in out if g.hint != LIVE[3:]]
    rest = [s for g in out if g.hint == LIVE[3:] for s in g.checks]
    if len(rest) > 1:
        kinds = sorted({k for g in out if g.hint == LIVE[3:] for k in _kinds(g.reason)}, key=str.lower)
        shown = ", ".join(kinds[:5]) + (f" and {len(kinds) - 5} more kinds" if len(kinds) > 5 else "")
        named.append(SkipGroup(f"other node state ({shown})", tuple(rest), LIVE[3:]))
    elif rest:
        named += [g for g in out if g.hint == LIVE[3:]]
    return named


def _kinds(reason: str) -> list[str]:
    if reason.startswith("none of: "):
        return [k.strip() for k in reason[9:].split(" (", 1)[0].split(",")]
    return [reason[3:].split(" (", 1)[0]] if reason.startswith("no ") else []


def _hint(reason: str) -> str:
    """How to give what is missing: the command for one kind of evidence, and --live always."""
    if reason.startswith("no "):
        how = HOW_TO_GIVE.get(reason[3:].split(" (", 1)[0])
        return f"{how}, {LIVE}" if how else LIVE[3:]
    if reason.startswith("none of: "):
        return LIVE[3:]
    return ""


def grouped_ok(rows: list[Row]) -> list[Row]:
    """``verify --all`` on a large node: every problem row, and the ok rows one per namespace
    (a terminal of 10,000 ok lines hides the few that matter; -v, JSON and HTML list each)."""
    ok = [r for r in rows if r.status == "ok"]
    if len(ok) <= verification.TABLE_LIMIT:
        return rows
    by_ns: dict[str, int] = {}
    for r in ok:
        ns = r.service.split("/", 1)[0] if "/" in r.service else "(no namespace)"
        by_ns[ns] = by_ns.get(ns, 0) + 1
    if len(by_ns) > verification.TABLE_LIMIT // 2:  # Services spread over many namespaces: one line
        grouped = [Row(f"{len(ok)} Service ports in {len(by_ns)} namespaces", "ok", "every traffic class ok", [])]
    else:
        grouped = [
            Row(f"{ns}/* ({n} Service port{'s' if n > 1 else ''})", "ok", "every traffic class ok", [])
            for ns, n in sorted(by_ns.items())
        ]
    return [r for r in rows if r.status != "ok"] + grouped


def build(report: Report) -> View:
    """The view of ``report`` (see the module docstring)."""
    causes = report.visible()
    below: list[Finding] = []
    if not causes and not report.threshold_explicit and report.min_severity > Severity.INFO:
        below = [f for f in report.findings if f.severity < report.min_severity]
    ver = report.verification
    rows: list[Row] = []
    hidden = 0
    if ver is not None:
        rows, hidden = verification.rows(ver, report.show_all)
        if report.command != "verify":  # diagnose: the problems only, the verify command has the rest
            hidden += sum(1 for r in rows if r.status == "ok")
            rows = [r for r in rows if r.status != "ok"]
        elif report.show_all and not report.verbose:
            rows = grouped_ok(rows)
    return View(
        report=report,
        verdict=verdict(report),
        causes=causes,
        below=below,
        unused=list(report.problems),
        unused_first=not causes and bool(report.problems),
        inputs=list(report.inputs),
        skipped=group_skipped(report.skipped, every=report.verbose) if report.command != "verify" else [],
        rows=rows,
        rows_hidden=hidden,
        verbose=report.verbose,
        evidence_shown=None if report.verbose else EVIDENCE_SHOWN,
    )
