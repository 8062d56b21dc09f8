"""The one view of a report that every renderer draws.

What a reader sees first, what is grouped, and the verdict (the exit code's) are decided here,
once; the text, Markdown, HTML and SARIF renderers only lay the view out. The view keeps the
complete report (``view.report``): caps and grouping are for human readers, and JSON is the
report itself, never shortened.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kpdoctor.bundle.artifacts import HOW_TO_GIVE, LIVE_RUN
from kpdoctor.collect.redact import redact_secrets
from kpdoctor.dataplane.expected import TRAFFIC_CLASSES
from kpdoctor.dataplane.results import Result
from kpdoctor.model import Cite, Finding, InputProblem, InputRead, Report, Severity, Skipped
from kpdoctor.report import verification
from kpdoctor.report.verification import Row

LIVE = f"or run {LIVE_RUN}"
EVIDENCE_SHOWN = 4  # evidence lines per finding on a human's first screen (-v: all)
CONTEXT_LINES = 3  # lines of its artifact shown before and after an evidence line (the HTML report)
CONTEXT_READ_LIMIT = 256 * 2**20  # bytes of one artifact read to find its evidence lines, at most
CONTEXT_LINE_CHARS = 2000  # characters of one context line kept (a hostile log has megabyte lines)
PATHS_SHOWN = 100  # failing Service port x traffic class paths drawn (the HTML report); the rest counted
BRANCHES_DRAWN = 20  # branches of one path drawn in full; the rest folded (a Service of 5,000 endpoints)


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
        if what.startswith("no "):
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
    def not_checked(self) -> str:
        """How many checks did not run, of how many (the ones that ran said beside them: "2 of
        64 ran" and "62 not checked" must not read as contradicting each other)."""
        total = sum(len(g.checks) for g in self.skipped)
        return f"{total} of {total + self.report.checks_run} check(s)"

    @property
    def verification(self) -> Any:
        return self.report.verification

    @property
    def verification_summary(self) -> str | None:
        ver = self.report.verification
        return None if ver is None else verification.summary(ver)

    def table(self) -> list[Row]:
        """Every Service port's row, ok ones too, worst first (``rows`` is the human first screen's
        cut): for a renderer that lets its reader filter and sort a long table."""
        ver = self.report.verification
        return [] if ver is None else verification.rows(ver, True)[0]

    def paths(self) -> tuple[list[ServicePath], int]:
        """The failing Service ports' paths to draw (see :func:`failing_paths`), and how many more
        there are."""
        ver = self.report.verification
        return ([], 0) if ver is None else failing_paths(ver, traces=self.report.traces)

    def excerpts(self) -> dict[Cite, Excerpt]:
        """Each evidence line of the causes (and what they explain) and of the findings below the
        threshold, among its artifact's lines (see :func:`excerpts`). Read on demand: only a
        renderer that shows context pays for reading the files again."""
        cites = [c for top in [*self.causes, *self.below] for f in top.with_folded() for c in f.evidence]
        return excerpts(cites, files=self.report.files)


@dataclass(frozen=True, slots=True)
class Excerpt:
    """An evidence line among its neighbours in the artifact it was cited from, so a reader sees
    what surrounds it. ``lines`` are (line number, text), the cited line among them; empty when
    the artifact could not be read again here (``why`` says why), and the cited line is all there
    is."""

    cite: Cite
    lines: tuple[tuple[int, str], ...] = ()
    why: str = ""


def excerpts(
    cites: Iterable[Cite], around: int = CONTEXT_LINES, files: dict[str, str] | None = None
) -> dict[Cite, Excerpt]:
    """The lines around each cited line, read lazily from the artifact's file when there is one
    here (``files``: a folder bundle's artifact by its name in the bundle; else a file named as
    the artifact: the user's own, as given) and the line there is still the cited one; otherwise
    the cited line alone. The report keeps no artifact text: what was pasted or extracted is gone
    once the run ends. One pass per file, at most :data:`CONTEXT_READ_LIMIT` bytes."""
    by_file: dict[str, list[Cite]] = {}
    out: dict[Cite, Excerpt] = {}
    for c in cites:
        if c in out:
            continue
        if c.line is None or c.line < 1:
            out[c] = Excerpt(c, why="the evidence names no line")
            continue
        out[c] = Excerpt(c, why="the artifact is not a file here (part of a bundle, or pasted)")
        by_file.setdefault(c.artifact, []).append(c)
    for name, cs in by_file.items():
        path = Path((files or {}).get(name, name))
        try:
            if not path.is_file():
                continue
            got = _lines_around(path, {c.line for c in cs if c.line is not None}, around)
        except (OSError, ValueError):
            continue
        for c in cs:
            assert c.line is not None
            line = got.get(c.line)
            if line is None:
                out[c] = Excerpt(c, why=f"{name} here has no line {c.line} in its first {CONTEXT_READ_LIMIT >> 20} MiB")
                continue
            if not _same_line(c.text, line):
                out[c] = Excerpt(c, why=f"{name} here no longer holds this line")
                continue
            window = [n for n in range(max(1, c.line - around), c.line + around + 1) if n in got]
            out[c] = Excerpt(c, _scrubbed([(n, got[n]) for n in window], c.line))
    return out


def _scrubbed(lines: list[tuple[int, str]], cited: int) -> tuple[tuple[int, str], ...]:
    """The lines around a cited one without secrets, as a bundle loses them (collect/redact.py):
    they were not evidence, and the page goes to tickets. The cited line stays as cited."""
    text = "\n".join(t for _, t in lines).encode("utf-8", errors="surrogateescape")
    clean = redact_secrets("context.txt", text).decode("utf-8", errors="replace").split("\n")
    if len(clean) != len(lines):  # nothing it could keep line for line: no context rather than a leak
        return tuple((n, t) for n, t in lines if n == cited)
    return tuple((n, t if n == cited else c) for (n, t), c in zip(lines, clean, strict=True))


def _lines_around(path: Path, wanted: set[int], around: int) -> dict[int, str]:
    """Lines of ``path`` within ``around`` of a wanted one, by number (``\n`` ends a line, as
    the loader counts them)."""
    keep = {n for w in wanted for n in range(max(1, w - around), w + around + 1)}
    last = max(keep)
    got: dict[int, str] = {}
    read = 0
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, 1):
            read += len(raw)
            if n in keep:
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if n == 1:
                    text = text.removeprefix("\ufeff")
                if len(text) > CONTEXT_LINE_CHARS:
                    text = f"{text[:CONTEXT_LINE_CHARS]} [... {len(text) - CONTEXT_LINE_CHARS:,} more characters]"
                got[n] = text
            if n >= last or read > CONTEXT_READ_LIMIT:
                break
    return got


def _same_line(cited: str, line: str) -> bool:
    """The cited text is (a part of) the file's line: a pasted line cited without its quoting, or
    a long line cited cut."""
    a, b = cited.strip(), line.strip()
    if not a:
        return not b
    return a in b or (b in a and len(b) > len(a) // 2) or a[:200] in b


@dataclass(frozen=True, slots=True)
class PathBranch:
    """One way a failing Service port's packet goes: its share, the rule that decided it (its
    chain, file and line, and who wrote it), and where it ends: a DNAT to a backend, a drop or
    reject, no translation, or not known."""

    probability: float
    end: str  # dnat | drop | through | uncertain
    outcome: str  # "DNAT to 10.0.0.5:8080", "DROP", "not translated", "uncertain"
    rule: Cite | None
    chain: str | None
    owner: str | None  # kube-proxy, kubelet, calico...: who wrote the deciding rule
    ruleset: str | None  # the iptables backend (legacy, nft), when Service rules are in both
    unexpected: bool = False  # a DNAT to a backend that is not a ready endpoint (stale)


@dataclass(frozen=True, slots=True)
class ServicePath:
    """What verify recorded for one failing Service port x traffic class, to draw as a path: the
    packet it sent (where it enters), each branch's deciding rule with its share, and where each
    ends, against what the cluster expects. The report keeps the deciding rules, not every step:
    ``command`` is the ``kpdoctor trace`` that shows the path step by step."""

    service: str  # NS/NAME:PORT
    traffic: str  # pod-to-clusterip, external-to-nodeport...
    traffic_text: str  # "outside clients to the NodePort"
    protocol: str
    source: str | None
    destination: str
    hook: str  # PREROUTING (arriving) or OUTPUT (sent by the node itself)
    expected: str  # "10.0.0.1:80, 10.0.0.2:80 (50% each)" or "refused"
    kind: str  # the mismatch kind: no-rules, refused, backends... ("" when not said)
    branches: tuple[PathBranch, ...]
    missing: tuple[str, ...]  # ready endpoints no branch reaches
    note: str
    command: str
    # the same packet traced step by step (dataplane/trace.Trace, one per iptables backend with
    # Service rules), when the run traced it (Report.traces): the path chain by chain
    traces: tuple[Any, ...] = ()


def failing_paths(
    ver: Any, limit: int = PATHS_SHOWN, traces: dict[tuple[str, str], list[Any]] | None = None
) -> tuple[list[ServicePath], int]:
    """The mismatched results as paths, by Service port, at most ``limit``, and how many more
    there are; with the step-by-step ``traces`` the run made of them (Report.traces)."""
    bad = sorted((r for r in ver.problems() if r.status == "mismatch"), key=lambda r: r.label)
    paths = [_path(r) for r in bad[:limit]]
    if traces:
        paths = [replace(p, traces=tuple(traces.get((p.service, p.traffic), ()))) for p in paths]
    return paths, max(0, len(bad) - limit)


def branch_end(verdict: str, backend: str | None) -> str:
    """Where a branch of a path ends: "dnat" (to a backend), "through" (not translated), "drop"
    (dropped or rejected) or "uncertain"."""
    if verdict == "ACCEPT":
        return "dnat" if backend else "through"
    return "drop" if verdict in ("DROP", "REJECT") else "uncertain"


def _path(r: Result) -> ServicePath:
    branches = []
    for e in r.actual:
        end = branch_end(e.verdict, e.endpoint)
        outcome = {
            "dnat": f"DNAT to {e.endpoint}",
            "through": "not translated: leaves for its original destination",
            "drop": e.verdict + (" (no Service rule for it)" if e.no_service_rule else ""),
        }.get(end, "uncertain")
        stale = end == "dnat" and e.endpoint in r.stale_backends
        branches.append(PathBranch(e.probability, end, outcome, e.rule, e.chain, e.owner, e.ruleset, stale))
    expected = []
    for alt in r.expected[:1]:
        if alt.refused:
            expected.append("refused")
        elif alt.backends:
            share = f" ({1 / len(alt.backends):.0%} each)" if len(alt.backends) > 1 else ""
            expected.append(", ".join(sorted(alt.backends)) + share)
    short, text = TRAFFIC_CLASSES.get(r.traffic, (r.traffic, r.traffic))
    traffic = short.lower()
    command = f"kpdoctor trace --service {r.label}"
    if traffic in ("node", "nodeport", "externalip", "lb", "lb-denied"):
        command += f" --traffic {traffic}"
    return ServicePath(
        service=r.label,
        traffic=r.traffic,
        traffic_text=text,
        protocol=r.protocol,
        source=r.source,
        destination=r.destination,
        hook="OUTPUT" if r.traffic == "node-to-clusterip" else "PREROUTING",
        expected=" or ".join(expected) or "?",
        kind=r.kind,
        branches=tuple(branches),
        missing=tuple(r.missing_backends),
        note=r.note,
        command=command + " [PATH]...",
    )


def finding_meta(f: Finding, times: str = "{n}x") -> str:
    """The line under a finding's summary, the same in every renderer: whether it is suspected
    and what decides it, its confidence and why, whether it is an alternative reading, how often
    and when, whether it still happens."""
    meta = []
    if f.suspected:
        said = "; ".join(c if "`" in c else f"`{c}`" for c in f.decided_by)
        meta.append("SUSPECTED" + (f", decided by {said}" if said else ""))
    meta.append(f"confidence {f.confidence.label}" + (f" ({f.confidence_reason})" if f.confidence_reason else ""))
    if f.alternative_to:
        meta.append(f"an alternative to {f.alternative_to}")
    if f.occurrences:
        meta.append(times.format(n=f.occurrences))
    if f.first_seen:
        last = f", last {f.last_seen}" if f.last_seen and f.last_seen != f.first_seen else ""
        meta.append(f"first {f.first_seen}{last}")
    if f.ongoing is not None:
        meta.append("ONGOING" if f.ongoing else "recovered")
    return ", ".join(meta)


def verdict(report: Report) -> Verdict:
    """The exit code and its word (DESIGN.md): 4 a bug met (the report still stands), 2 nothing
    usable, 1 findings at or above the threshold (``verify``: a mismatch or stale rules), 3
    inconclusive (a run cut short, damaged evidence, only versions given, nothing checked, or
    uncertain results), else 0: "healthy" only when every family of causes could be checked
    and nothing suspected or unexplained was found (kpdoctor.coverage), else "nothing found in
    what was given"."""
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
        if not ver.rows or ver.count("uncertain") or ver.unverified or report.timed_out:
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
    nothing = f"nothing at or above {report.min_severity.label}"
    cov = report.coverage
    if cov is not None and not cov.complete:
        return Verdict(0, "nothing found in what was given", f"{nothing}; {cov.why()}")
    return Verdict(0, "healthy", f"{nothing}, and every family of causes could be checked")


def group_skipped(skipped: list[Skipped], every: bool = False) -> list[SkipGroup]:
    """Skipped checks by the evidence they lacked, largest group first. Unless ``every``, the
    groups a command cannot be named for (node state a live run collects) are one group."""
    groups: dict[str, list[Skipped]] = {}
    for s in skipped:  # giving the same evidence runs them all: "no X", "no X (needed together with Y)"
        groups.setdefault(_need(s), []).append(s)
    out = [SkipGroup(reason, tuple(checks), _hint(checks[0])) for reason, checks in groups.items()]
    out.sort(key=lambda g: (-len(g.checks), g.reason))
    if every:
        return out
    named = [g for g in out if g.hint != LIVE[3:]]
    rest = [s for g in out if g.hint == LIVE[3:] for s in g.checks]
    if len(rest) > 1:
        kinds = sorted({k for s in rest for k in s.lacking}, key=str.lower)
        shown = ", ".join(kinds[:5]) + (f" and {len(kinds) - 5} more kinds" if len(kinds) > 5 else "")
        named.append(SkipGroup(f"other node state ({shown})", tuple(rest), LIVE[3:]))
    elif rest:
        named += [g for g in out if g.hint == LIVE[3:]]
    return named


def _need(s: Skipped) -> str:
    """What a skipped check needs, said as the group's reason (its own reason when that is not
    missing evidence)."""
    if not s.lacking:
        return s.reason
    too = f" (needs {' and '.join(s.also)} too)" if s.also else ""
    if len(s.lacking) == 1:
        return f"no {s.lacking[0]}{too}"
    return ("no " + " and no ".join(s.lacking)) if s.given else f"none of: {', '.join(s.lacking)}{too}"


def _hint(s: Skipped) -> str:
    """How to give what is missing: the command for one kind of evidence, and --live always."""
    if not s.lacking:
        return ""
    how = HOW_TO_GIVE.get(s.lacking[0]) if len(s.lacking) == 1 else None
    return f"{how}, {LIVE}" if how else LIVE[3:]


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
