"""Accuracy on real bug reports: how often kpdoctor names the cause a public thread established.

Runs every case of the real-world corpus (``tests/realworld/cases``) through ``kpdoctor diagnose
--min-severity info --format json`` with the case's evidence as loose files, exactly as a user
would, and prints:

- **top-1 / top-3** over the positive cases: the first finding's cause (or one of the first
  three's) is in the case's ``accept`` list; a cause folded under such a finding counts with it;
- **negatives clean**: no finding at critical (any confidence) and no warning at high confidence
  that names a kube-proxy or node cause (the workload family excepted);
- **not read**: no check could run on anything in the case (every input unrecognised, or typed
  to a kind that parsed to nothing a check consumes);
- **no finding**: positives that got no finding at all (not even an unexplained signal or a
  suspected cause: the report called them clean); **accepted at any rank**: positives whose
  findings (folded ones included) name an accepted cause anywhere; **negatives warned**:
  negatives with any finding at warning or above, and of those, with an unexplained-signal
  (KP140) warning;
- a per-cause table, and each figure for all positive cases and for those whose cause has a
  check today; both at ``--min-severity info`` and at the default threshold (warning).

One command: ``.venv/bin/python bench/accuracy.py`` (``--help`` for options). Pure measurement:
kpdoctor is run, never changed. ``tests/test_realworld.py`` uses the same functions in process.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
CORPUS = REPO / "tests" / "realworld"
CASES = CORPUS / "cases"

SEVERITIES = {"info": 0, "warning": 1, "critical": 2}
REQUIRED = ("id", "source", "title", "evidence", "established", "accept", "negative", "outside")
OUTSIDE = {
    "cni",
    "dns",
    "network-policy",
    "application",
    "cloud-network",
    "benign",
    "other-component",
    "cluster-config",
}
ESTABLISHED_BY = ("maintainer", "fix-pr", "reporter-confirmed")
# The TAXONOMY family whose causes are not "kube-proxy or node" causes (for a negative to be clean).
WORKLOAD_FAMILY = "Workloads that lose connections when Pods stop"


class CorpusError(Exception):
    """A case that does not follow tests/realworld/README.md."""


@dataclass(frozen=True)
class Case:
    id: str
    folder: Path
    files: tuple[Path, ...]
    accept: tuple[str, ...]
    negative: bool
    outside: str | None
    meta: dict[str, Any]

    @property
    def primary(self) -> str:
        return self.accept[0] if self.accept else "(negative)"


def causes(path: Path = CORPUS / "causes.txt") -> dict[str, str]:
    """Every TAXONOMY slug -> its family (the ``## family`` line above it)."""
    family, out = "", {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            family = line[3:].strip()
        elif line.strip() and not line.startswith("#"):
            out[line.strip()] = family
    return out


def load_case(folder: Path, slugs: dict[str, str]) -> Case:
    """One case, checked against the corpus README's rules (a CorpusError says what is wrong)."""
    where = f"{folder.name}/case.yaml"
    try:
        meta = yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CorpusError(f"{where}: {exc}") from exc
    if not isinstance(meta, dict):
        raise CorpusError(f"{where}: not a mapping")
    missing = [k for k in REQUIRED if k not in meta]
    if missing:
        raise CorpusError(f"{where}: missing {', '.join(missing)}")
    if meta["id"] != folder.name:
        raise CorpusError(f"{where}: id {meta['id']!r} is not the folder's name")
    accept = meta["accept"] or []
    if not isinstance(accept, list) or any(a not in slugs for a in accept):
        raise CorpusError(f"{where}: accept {accept!r} names a slug not in causes.txt")
    negative = meta["negative"] is True
    if negative != (not accept):
        raise CorpusError(f"{where}: a negative has accept: [] and a positive names its cause")
    if negative != (meta["outside"] in OUTSIDE):
        raise CorpusError(f"{where}: outside must be one of {sorted(OUTSIDE)} for a negative, null otherwise")
    established = meta["established"] if isinstance(meta["established"], dict) else {}
    if established.get("by") not in ESTABLISHED_BY or not established.get("how"):
        raise CorpusError(f"{where}: established needs by ({' | '.join(ESTABLISHED_BY)}), where and how")
    listed = [e.get("file") for e in meta["evidence"] or [] if isinstance(e, dict)]
    if not listed or len(set(listed)) != len(listed):
        raise CorpusError(f"{where}: evidence must list each evidence file once")
    present = sorted(p.name for p in folder.iterdir() if p.name != "case.yaml")
    if sorted(listed) != present:
        raise CorpusError(f"{where}: evidence lists {sorted(listed)} but the folder holds {present}")
    files = tuple(folder / name for name in listed)
    for f in files:
        if not f.read_bytes().strip():
            raise CorpusError(f"{folder.name}/{f.name}: empty")
    return Case(meta["id"], folder, files, tuple(accept), negative, meta["outside"], meta)


def load_cases(root: Path = CASES, only: Sequence[str] = ()) -> list[Case]:
    slugs = causes()
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    cases = [load_case(f, slugs) for f in folders if not only or f.name in only]
    seen: dict[str, str] = {}
    for c in cases:
        src = str(c.meta["source"]).rstrip("/")
        if src in seen:
            raise CorpusError(f"{c.id}: same source as {seen[src]} ({src})")
        seen[src] = c.id
    return cases


# -- running kpdoctor ---------------------------------------------------------------------------


@dataclass
class Outcome:
    case: Case
    exit_code: int
    report: dict[str, Any] | None
    seconds: float
    error: str = ""


def run_cli(case: Case, timeout: float = 60) -> Outcome:
    """The real command line, in its own process, as a user runs it."""
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("KPDOCTOR_DEBUG", None)
    argv = [sys.executable, "-m", "kpdoctor", "diagnose", "--min-severity", "info", "--format", "json"]
    argv += ["--timeout", str(timeout), *map(str, case.files)]
    t0 = time.monotonic()
    try:
        res = subprocess.run(argv, capture_output=True, timeout=timeout * 2, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Outcome(case, -1, None, time.monotonic() - t0, "no answer within twice --timeout")
    seconds = time.monotonic() - t0
    try:
        report = json.loads(res.stdout.decode("utf-8")) if res.stdout.strip() else None
    except ValueError as exc:
        return Outcome(case, res.returncode, None, seconds, f"not JSON: {exc}")
    # Exit 2 without a report is kpdoctor's answer "nothing usable was given": not read, no error.
    failed = report is None and res.returncode != 2
    err = res.stderr.decode("utf-8", "replace").strip()[-300:] if failed else ""
    return Outcome(case, res.returncode, report, seconds, err)


def run_in_process(case: Case) -> Outcome:
    """The same diagnosis without a process per case (the test suite's way: same report)."""
    sys.path.insert(0, str(SRC))
    from kpdoctor.diagnose import diagnose_paths, exit_code
    from kpdoctor.model import Severity

    t0 = time.monotonic()
    report, _evidence = diagnose_paths(case.files, min_severity=Severity.INFO)
    return Outcome(case, exit_code(report), report.to_json(), time.monotonic() - t0)


# -- judging ------------------------------------------------------------------------------------


def _causes_of(finding: dict[str, Any]) -> set[str]:
    """A finding's cause and every cause folded under it (its symptoms, at any depth)."""
    out = {str(finding.get("cause"))}
    for sub in finding.get("folded") or []:
        out |= _causes_of(sub)
    return out


def ranked(report: dict[str, Any] | None, threshold: str = "info") -> list[dict[str, Any]]:
    """The report's top-level findings at or above ``threshold``, in their ranked order."""
    least = SEVERITIES[threshold]
    return [f for f in (report or {}).get("findings") or [] if SEVERITIES.get(f.get("severity"), 0) >= least]


@dataclass(frozen=True)
class Verdict:
    case: Case
    read: bool
    top1: bool
    top3: bool
    clean: bool
    first: str  # the first finding's cause, or "-"
    found: bool = False  # any finding at all (at this threshold)
    anywhere: bool = False  # an accepted cause at any rank, folded ones included
    warned: bool = False  # a finding at warning or above
    unexplained_warning: bool = False  # an unexplained-signal (KP140) finding at warning or above


def judge(out: Outcome, slugs: dict[str, str], threshold: str = "info") -> Verdict:
    rep = out.report
    read = bool(rep) and int(rep.get("checks_run") or 0) > 0  # type: ignore[union-attr]
    top = ranked(rep, threshold)
    accept = set(out.case.accept)
    top1 = bool(top) and bool(_causes_of(top[0]) & accept)
    top3 = any(_causes_of(f) & accept for f in top[:3])
    node_causes = {s for s, fam in slugs.items() if fam != WORKLOAD_FAMILY}
    alarming = [
        f
        for f in top
        if f.get("severity") == "critical"
        or (f.get("severity") == "warning" and f.get("confidence") == "high" and f.get("cause") in node_causes)
    ]
    warnings = [f for f in top if SEVERITIES.get(str(f.get("severity")), 0) >= SEVERITIES["warning"]]
    return Verdict(
        out.case,
        read,
        top1,
        top3,
        not alarming,
        str(top[0].get("cause")) if top else "-",
        found=bool(top),
        anywhere=any(_causes_of(f) & accept for f in top),
        warned=bool(warnings),
        unexplained_warning=any(f.get("code") == "KP140" for f in warnings),
    )


# -- figures ------------------------------------------------------------------------------------


@dataclass
class Figures:
    positives: int = 0
    top1: int = 0
    top3: int = 0
    negatives: int = 0
    clean: int = 0
    not_read: int = 0
    cases: int = 0
    no_finding: int = 0  # positives with no finding at all
    anywhere: int = 0  # positives with an accepted cause at any rank
    negatives_warned: int = 0
    negatives_unexplained_warning: int = 0
    by_cause: dict[str, list[int]] = field(default_factory=dict)  # slug -> [cases, top1, top3]

    def pct(self, n: int, of: int) -> str:
        return f"{n}/{of} ({100 * n / of:.0f}%)" if of else "0/0"


def figures(verdicts: Iterable[Verdict], keep: Callable[[Case], bool] = lambda c: True) -> Figures:
    f = Figures()
    for v in verdicts:
        if not keep(v.case):
            continue
        f.cases += 1
        f.not_read += not v.read
        if v.case.negative:
            f.negatives += 1
            f.clean += v.clean
            f.negatives_warned += v.warned
            f.negatives_unexplained_warning += v.unexplained_warning
            continue
        f.positives += 1
        f.no_finding += not v.found
        f.anywhere += v.anywhere
        f.top1 += v.top1
        f.top3 += v.top3
        row = f.by_cause.setdefault(v.case.primary, [0, 0, 0])
        row[0] += 1
        row[1] += v.top1
        row[2] += v.top3
    return f


def checked_causes() -> set[str]:
    """The causes kpdoctor has a check for today."""
    sys.path.insert(0, str(SRC))
    from kpdoctor.checks import CHECKS

    return {spec.cause for spec in CHECKS.values()}


def coverage(cases: Sequence[Case]) -> str:
    """How the cases spread over proxy modes, klog eras, distributions and negatives' causes."""
    parts = []
    for key in ("proxy_mode", "klog_era", "distribution", "outside"):
        counts: dict[str, int] = {}
        for c in cases:
            value = c.meta.get(key)
            if value is not None:
                counts[str(value)] = counts.get(str(value), 0) + 1
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        parts.append(f"{key}: " + ", ".join(f"{k} {n}" for k, n in ordered))
    return "\n  ".join(parts)


def render(
    info: list[Verdict], default: list[Verdict], checked: set[str], outcomes: list[Outcome], details: bool
) -> str:
    has_check: Callable[[Case], bool] = lambda c: bool(set(c.accept) & checked)  # noqa: E731
    lines = []
    for name, verdicts in (("--min-severity info", info), ("default threshold (warning)", default)):
        every, with_check = figures(verdicts), figures(verdicts, has_check)
        lines += [
            f"== {name}",
            f"  top-1  all {every.pct(every.top1, every.positives):>15}   cause has a check "
            f"{with_check.pct(with_check.top1, with_check.positives)}",
            f"  top-3  all {every.pct(every.top3, every.positives):>15}   cause has a check "
            f"{with_check.pct(with_check.top3, with_check.positives)}",
            f"  accepted at any rank {every.pct(every.anywhere, every.positives)}",
            f"  no finding at all    {every.pct(every.no_finding, every.positives)} of positives",
            f"  negatives clean {every.pct(every.clean, every.negatives)}",
            f"  negatives warned     {every.pct(every.negatives_warned, every.negatives)} "
            f"(an unexplained-signal warning: {every.negatives_unexplained_warning})",
            f"  nothing read    {every.pct(every.not_read, every.cases)}",
            "",
        ]
    every = figures(info)
    lines.append(f"{'cause (primary)':44} {'cases':>5} {'top-1':>6} {'top-3':>6}  check")
    for slug, (n, t1, t3) in sorted(every.by_cause.items(), key=lambda kv: (-kv[1][0], kv[0])):
        lines.append(f"{slug:44} {n:5} {t1:6} {t3:6}  {'yes' if slug in checked else 'no'}")
    lines.append("\ncoverage: " + coverage([o.case for o in outcomes]))
    secs = sorted(o.seconds for o in outcomes)
    if secs:
        lines.append(
            f"\n{len(outcomes)} cases; seconds per case min {secs[0]:.2f} median {secs[len(secs) // 2]:.2f} "
            f"max {secs[-1]:.2f}"
        )
    errors = [o for o in outcomes if o.error or o.exit_code == 4]
    for o in errors:
        lines.append(f"  ! {o.case.id}: exit {o.exit_code} {o.error}")
    if details:
        lines.append("\nper case (info threshold): id, accept, first finding, read, top-1, top-3 / clean")
        for v in info:
            if v.case.negative:
                mark = "clean" if v.clean else "ALARM"
            else:
                mark = "top1" if v.top1 else "top3" if v.top3 else "miss"
            lines.append(
                f"  {v.case.id:32} {','.join(v.case.accept) or '(negative)':40} {v.first:36} "
                f"{'read' if v.read else 'NOT-READ':8} {mark}"
            )
    return "\n".join(lines)


def redacted(cases: list[Case], dest: Path) -> tuple[list[Case], list[str]]:
    """The cases with every file passed through the collector's secret redaction (as a bundle
    artifact: a JSON file as ``cluster/NAME``, anything else as ``NAME``), written under ``dest``;
    and the files it changed."""
    sys.path.insert(0, str(SRC))
    from kpdoctor.collect.redact import redact_secrets

    out, changed = [], []
    for c in cases:
        folder = dest / c.id
        folder.mkdir(parents=True)
        files = []
        for f in c.files:
            data = f.read_bytes()
            scrubbed = redact_secrets(f"cluster/{f.name}" if f.suffix == ".json" else f.name, data)
            if scrubbed != data:
                changed.append(f"{c.id}/{f.name}")
            (folder / f.name).write_bytes(scrubbed)
            files.append(folder / f.name)
        out.append(dataclasses.replace(c, folder=folder, files=tuple(files)))
    return out, changed


def evaluate(cases: list[Case], jobs: int, in_process: bool, timeout: float) -> list[Outcome]:
    if in_process:
        return [run_in_process(c) for c in cases]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda c: run_cli(c, timeout), cases))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", type=Path, default=CASES, help="the corpus' cases folder (default: %(default)s)")
    ap.add_argument("--case", action="append", default=[], metavar="ID", help="only this case (repeatable)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cases run at once (default: cores)")
    ap.add_argument("--in-process", action="store_true", help="diagnose in this process (faster; same report)")
    ap.add_argument("--timeout", type=float, default=60, help="kpdoctor's --timeout per case (default: 60)")
    ap.add_argument("--details", action="store_true", help="one line per case")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write every case's verdict to FILE")
    ap.add_argument(
        "--redact",
        action="store_true",
        help="diagnose copies of the files scrubbed by the collector's secret redaction (the figures must not move)",
    )
    args = ap.parse_args(argv)
    try:
        cases = load_cases(args.cases, args.case)
    except CorpusError as exc:
        print(f"corpus error: {exc}", file=sys.stderr)
        return 2
    if not cases:
        print(f"no cases in {args.cases}", file=sys.stderr)
        return 2
    print(f"{len(cases)} cases ({sum(c.negative for c in cases)} negatives), running...", file=sys.stderr)
    slugs = causes()
    with tempfile.TemporaryDirectory(prefix="kpdoctor-accuracy-") as tmp:
        if args.redact:
            cases, changed = redacted(cases, Path(tmp))
            print(f"redacted: {len(changed)} of {sum(len(c.files) for c in cases)} files changed", file=sys.stderr)
            for name in changed:
                print(f"  {name}", file=sys.stderr)
        outcomes = evaluate(cases, args.jobs, args.in_process, args.timeout)
    info = [judge(o, slugs, "info") for o in outcomes]
    default = [judge(o, slugs, "warning") for o in outcomes]
    print(render(info, default, checked_causes(), outcomes, args.details))
    if args.json:
        rows = [
            {
                "id": v.case.id,
                "accept": list(v.case.accept),
                "negative": v.case.negative,
                "first": v.first,
                "read": v.read,
                "top1": v.top1,
                "top3": v.top3,
                "clean": v.clean,
                "found": v.found,
                "anywhere": v.anywhere,
                "warned": v.warned,
                "unexplained_warning": v.unexplained_warning,
                "top1_default": d.top1,
                "top3_default": d.top3,
                "clean_default": d.clean,
                "exit_code": o.exit_code,
            }
            for v, d, o in zip(info, default, outcomes, strict=True)
        ]
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
