"""Fuzz kpdoctor with mutated real evidence, in-process and through the CLI, for as long as asked.

Every input is made by the seeded mutation engine of ``tests/fuzzing.py`` from the repository's
own corpus (``tests/data/**``, the demo bundles): truncations, bit flips, inserted and deleted
bytes, duplicated and shuffled lines, other encodings (UTF-16, Latin-1, BOMs, CRLF, NULs), deep
JSON/YAML, huge lines, numbers and line counts, spliced files, wrong-typed JSON values, and demo
bundles with files deleted, swapped, emptied or corrupted, or packed as damaged archives.

Each input runs

1. in a forked child: ``diagnose_paths`` (and ``command="verify"``), the exit code, every report
   format (an escaped exception, a check that raised, a temp folder left behind, bad JSON);
2. through the CLI, ``python -m kpdoctor diagnose -f json PATH...`` (and ``verify -f json`` when
   the in-process verify had something to verify), with a timeout: a traceback or "internal
   error" on stderr, an exit code outside 0-4, output that is not UTF-8 JSON, a timeout.

With ``--hostile SHARE`` that share of the inputs are hostile cases of ``tests/fuzz_hostile.py``
instead: links, FIFOs and devices at the paths the collector reads, bundles with trees thousands of
directories deep, YAML alias bombs, a hung or byte-a-second API server, and secrets planted in logs
and cluster objects; each runs through the real CLI (``collect``, ``agent --once``, ``diagnose``)
and is held to docs/security.md (in time, no exit 4, no temporary folder left, nothing read from
outside the node root, no planted secret in the bundle, the rest of a bundle still read).
``--classes`` narrows them (``--hostile 1 --classes slow-api``).

Case N of seed S is rebuilt from (S, N) alone: ``--replay S:N`` runs one case again and keeps its
files. Findings are saved under ``bench/out/fuzz/`` (git-ignored): the first inputs of each kind
of finding, each with ``finding.txt``, plus one line per finding in ``findings.txt``.

    .venv/bin/python bench/fuzz.py --minutes 10            # random seed, printed
    .venv/bin/python bench/fuzz.py --inputs 500 --seed 7   # a fixed set of inputs
    .venv/bin/python bench/fuzz.py --minutes 30 --jobs 2   # one worker per core
    .venv/bin/python bench/fuzz.py --replay 7:123          # one case again, files kept
    .venv/bin/python bench/fuzz.py --minutes 30 --hostile 0.3   # with hostile cases
    .venv/bin/python bench/fuzz.py --replay 7:123 --hostile 1   # one hostile case again
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "src"))
from fuzz_hostile import CLASSES as HOSTILE_CLASSES  # noqa: E402
from fuzz_hostile import make_hostile, remove_tree, run_hostile  # noqa: E402
from fuzzing import (  # noqa: E402
    Case,
    Finding,
    finding_from_exception,
    innermost_in_dump,
    load_corpus,
    make_case,
    run_in_process,
    where_from_traceback_text,
)

OUT = HERE / "out" / "fuzz"
EXIT_CODES = {0, 1, 2, 3, 4}
SAVE_PER_KEY = 5  # inputs kept per kind of finding


@dataclass
class Result:
    ident: str
    kind: str
    source: str
    detail: str
    seconds: float
    findings: list[Finding] = field(default_factory=list)
    cli_runs: int = 0


def cli_env(tmp: Path, debug: bool = False) -> dict[str, str]:
    env = dict(os.environ, TMPDIR=str(tmp), NO_COLOR="1", PYTHONPATH=str(REPO / "src"))
    env.pop("KPDOCTOR_DEBUG", None)
    if debug:
        env["KPDOCTOR_DEBUG"] = "1"
    return env


def run_cli(command: str, paths: list[Path], tmp: Path, timeout: float) -> list[Finding]:
    """One CLI run: ``python -m kpdoctor COMMAND -f json PATH...``, judged on what a script sees."""
    argv = [sys.executable, "-m", "kpdoctor", command, "-f", "json", *map(str, paths)]
    phase = f"cli {command}"
    with subprocess.Popen(
        [sys.executable, "-X", "faulthandler", *argv[1:]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(tmp), cwd=tmp,
    ) as popen:  # fmt: skip
        try:
            stdout, stderr = popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            popen.send_signal(signal.SIGABRT)  # faulthandler prints where it is, then it dies
            try:
                _, stderr = popen.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                popen.kill()
                _, stderr = popen.communicate()
            dump = stderr.decode("utf-8", errors="replace")
            where, line = innermost_in_dump(dump)
            where = where if where != "in-process" else phase
            return [Finding("cli-timeout", "", where, line, f"{phase}: still running after {timeout:.0f} s", dump)]
    proc = subprocess.CompletedProcess(argv, popen.returncode, stdout, stderr)
    out: list[Finding] = []
    err = proc.stderr.decode("utf-8", errors="replace")
    # "internal error: E: ..." (until exit code 4) or "internal error in STAGE: E: ..." (contained or not)
    internal = list(re.finditer(r"internal error(?: in ([^:\n]+))?: (\w+)", err))
    if "Traceback (most recent call last)" in err and not internal:
        exc = (re.findall(r"^(\w+(?:Error|Exception|Exit)\w*)", err, re.M) or ["?"])[-1]
        where, line = where_from_traceback_text(err)
        said = err.strip().rsplit("\n", 1)[-1]
        out.append(Finding("cli-traceback", exc, where, line, f"{phase} (exit {proc.returncode}): {said[:240]}", err))
    trace, traced = "", ("?", "")
    if internal:  # once more with KPDOCTOR_DEBUG: an error that escaped to the top shows its traceback
        try:
            again = subprocess.run(
                argv, capture_output=True, timeout=timeout, env=cli_env(tmp, debug=True), cwd=tmp, check=False
            )
            trace = again.stderr.decode("utf-8", errors="replace")[-6000:]
            traced = where_from_traceback_text(trace)
        except subprocess.TimeoutExpired:
            pass
    for m in internal[:5]:
        stage, exc = m.group(1), m.group(2)
        # the traceback is the escaped error's (the last one said); contained ones are named by stage
        where, line = traced if (m is internal[-1] and traced[0] != "?") else (f"stage:{stage or '?'}", "")
        said = err[m.start() :].split("\n", 1)[0][:240]
        out.append(Finding("cli-internal-error", exc, where, line, f"{phase} (exit {proc.returncode}): {said}", trace))
    if proc.returncode not in EXIT_CODES:
        out.append(Finding("cli-bad-exit", "", phase, "", f"exit code {proc.returncode}: {err.strip()[-200:]}"))
    if proc.stdout.strip() or proc.returncode in (0, 1, 3, 4):
        try:
            doc = json.loads(proc.stdout.decode("utf-8"))
            if not isinstance(doc, dict) or "schema" not in doc:
                raise ValueError("not a kpdoctor report")
        except (UnicodeDecodeError, ValueError) as exc:
            out.append(
                Finding("cli-invalid-json", type(exc).__name__, phase, "", f"exit {proc.returncode}: {str(exc)[:200]}")
            )
    left = sorted(p.name for p in tmp.iterdir() if p.name.startswith("kpdoctor"))
    if left:
        out.append(Finding("cli-temp-leak", "", phase, "", f"left in TMPDIR: {left[:5]}"))
    return out


def run_case(case: Case, timeout: float, cli: bool) -> Result:
    start = time.perf_counter()
    outcome = run_in_process(case, timeout=timeout)
    res = Result(case.ident, case.kind, case.source, case.detail, 0.0, list(outcome.findings))
    if cli and not any(f.category == "timeout" for f in outcome.findings):  # (it would time out too)
        base = Path(tempfile.mkdtemp(prefix="kpd-fuzz-cli-"))
        try:
            paths = case.write(base / "in")
            commands = ["diagnose"] + (["verify"] if outcome.exit_codes.get("verify", 2) != 2 else [])
            for command in commands:
                tmp = base / f"tmp-{command}"
                tmp.mkdir()
                res.findings += run_cli(command, paths, tmp, timeout)
                res.cli_runs += 1
        finally:
            shutil.rmtree(base, ignore_errors=True)
    unique: dict[tuple[str, str, str], Finding] = {}  # the same crash in diagnose and verify is one
    for f in res.findings:
        unique.setdefault(f.key, f)
    res.findings = list(unique.values())
    res.seconds = time.perf_counter() - start
    return res


def is_hostile(seed: int, index: int, share: float) -> bool:
    """Whether case ``index`` of run ``seed`` is a hostile case (decided by the two numbers alone)."""
    return share > 0 and random.Random(f"kpdoctor-fuzz-share:{seed}:{index}").random() < share


def run_hostile_case(seed: int, index: int, classes: tuple[str, ...], keep: Path | None = None) -> Result:
    case = make_hostile(seed, index, classes)
    work = keep or Path(tempfile.mkdtemp(prefix="kpd-fuzz-hostile-"))
    start = time.perf_counter()
    try:
        found = run_hostile(case, work)
    except Exception as exc:  # the harness's own bug: say so, and go on
        found = [finding_from_exception("fuzzer-error", exc, "tests/fuzz_hostile.py run_hostile")]
    finally:
        if keep is None:
            remove_tree(work)
    return Result(case.ident, case.kind, "hostile", case.detail, time.perf_counter() - start, found, 1)


def _worker(
    conn: Any, seed: int, indices: range, deadline: float | None, timeout: float, cli: bool, limit: int,
    hostile: float, classes: tuple[str, ...],
) -> None:  # fmt: skip
    corpus = load_corpus()
    try:
        for index in indices:
            if deadline is not None and time.time() >= deadline:
                break
            if is_hostile(seed, index, hostile):
                conn.send(asdict(run_hostile_case(seed, index, classes)))
                continue
            case = make_case(seed, index, corpus, limit)
            try:
                res = run_case(case, timeout, cli)
            except Exception as exc:  # the harness's own bug: say so, and go on with the next input
                res = Result(case.ident, case.kind, case.source, case.detail, 0.0)
                res.findings.append(finding_from_exception("fuzzer-error", exc, "bench/fuzz.py run_case"))
            conn.send(asdict(res))
    except KeyboardInterrupt:
        pass
    finally:
        conn.send(None)
        conn.close()


def _slug(key: tuple[str, str, str]) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(k for k in key if k)).strip("-")[:120]


class Collector:
    def __init__(self, seed: int, limit: int, out: Path) -> None:
        self.seed, self.limit, self.out = seed, limit, out
        self.ran = 0
        self.cli_runs = 0
        self.kinds: Counter[str] = Counter()
        self.kinds_found: Counter[str] = Counter()
        self.stacked = 0
        self.groups: dict[tuple[str, str, str], list[tuple[Result, Finding]]] = {}
        self.slow: list[tuple[float, str]] = []
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = (self.out / "findings.txt").open("a", encoding="utf-8")

    def add(self, res: Result) -> None:
        self.ran += 1
        self.cli_runs += res.cli_runs
        base = res.kind.split("+")[0]
        self.stacked += "+" in res.kind
        self.kinds[base] += 1
        if res.findings:
            self.kinds_found[base] += 1
        if res.seconds > 10:
            self.slow.append((res.seconds, res.ident))
        for f in res.findings:
            group = self.groups.setdefault(f.key, [])
            group.append((res, f))
            line = f"{res.ident} {res.kind} {f.summary()}"
            if len(group) <= SAVE_PER_KEY:
                line += f" -> {self.save(res, f)}"
            self.log.write(line + "\n")
            self.log.flush()

    def save(self, res: Result, f: Finding) -> Path:
        seed, index = (int(x) for x in res.ident.split(":"))
        if res.source == "hostile":  # built by the CLI run itself: the case is its two numbers
            dest = self.out / _slug(f.key) / f"{seed}-{index}"
            dest.mkdir(parents=True, exist_ok=True)
            (dest / "finding.txt").write_text(
                f"{f.summary()}\n\nhostile case {res.ident} ({res.kind}): {res.detail}\n"
                f"reproduce: .venv/bin/python bench/fuzz.py --replay {res.ident} --hostile 1\n\n{f.trace}\n",
                encoding="utf-8", errors="backslashreplace",
            )  # fmt: skip
            return dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest
        case = make_case(seed, index, load_corpus(), self.limit)
        dest = self.out / _slug(f.key) / f"{seed}-{index}"
        shutil.rmtree(dest, ignore_errors=True)
        case.write(dest / "in")
        paths = " ".join(f"in/{p}" for p in case.paths)
        (dest / "finding.txt").write_text(
            f"{f.summary()}\n\ncase {res.ident} ({res.kind}) from {res.source}: {res.detail}\n"
            f"reproduce: .venv/bin/python bench/fuzz.py --replay {res.ident}"
            + (f" --limit-mb {self.limit / 1024**2:g}" if self.limit != DEFAULT_LIMIT else "")
            + f"\n  or, in this folder: kpdoctor diagnose -f json {paths}\n\n{f.trace}\n",
            encoding="utf-8",
            errors="backslashreplace",
        )
        return dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest

    def report(self, seconds: float) -> str:
        lines = [
            f"\n== {self.ran} inputs in {seconds:.0f} s ({self.ran / max(seconds, 1e-9):.1f}/s), seed {self.seed}; "
            f"{self.cli_runs} CLI runs; {sum(len(g) for g in self.groups.values())} findings of "
            f"{len(self.groups)} kinds",
            "",
            "inputs by mutation kind (with a finding):",
        ]
        for kind, n in sorted(self.kinds.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {kind:24} {n:6}  ({self.kinds_found[kind]})")
        lines.append(f"  ({self.stacked} file inputs had a second mutation stacked)")
        if self.slow:
            lines.append(f"slowest inputs: {sorted(self.slow, reverse=True)[:5]}")
        lines.append("")
        if not self.groups:
            lines.append("no findings")
        else:
            lines.append("findings by kind (category, exception, where), most frequent first:")
        for key, items in sorted(self.groups.items(), key=lambda kv: -len(kv[1])):
            res, f = items[0]
            kinds = Counter(r.kind.split("+")[0] for r, _ in items)
            lines.append(f"  {len(items):5}  {' '.join(k for k in key if k)}" + (f"  ({f.line})" if f.line else ""))
            lines.append(f"         e.g. {res.ident} {res.kind}: {f.message[:160]}")
            lines.append(f"         from: {', '.join(f'{k} {n}' for k, n in kinds.most_common(4))}")
            lines.append(f"         saved: {self.out.relative_to(REPO) if self.out.is_relative_to(REPO) else self.out}"
                         f"/{_slug(key)}/")  # fmt: skip
        return "\n".join(lines)


DEFAULT_LIMIT = 8 * 1024**2


def replay(ident: str, timeout: float, cli: bool, limit: int, out: Path, hostile: float = 0.0,
           classes: tuple[str, ...] = HOSTILE_CLASSES) -> int:  # fmt: skip
    seed, index = (int(x) for x in ident.split(":"))
    if hostile >= 1 or is_hostile(seed, index, hostile):
        dest = out / f"replay-{seed}-{index}"
        remove_tree(dest)
        dest.mkdir(parents=True)
        case = make_hostile(seed, index, classes)
        print(f"hostile case {case.ident}: {case.kind}: {case.detail}\nfiles: {dest}")
        res = run_hostile_case(seed, index, classes, keep=dest)
        for f in res.findings:
            print(f"\n{f.summary()}\n{f.trace}")
        print(f"\n{len(res.findings)} finding(s) in {res.seconds:.1f} s")
        return 1 if res.findings else 0
    case = make_case(seed, index, load_corpus(), limit)
    dest = out / f"replay-{seed}-{index}"
    shutil.rmtree(dest, ignore_errors=True)
    paths = case.write(dest / "in")
    print(f"case {case.ident}: {case.kind} from {case.source}: {case.detail}")
    print(f"files: {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest}/in ({case.size()} bytes)")
    print(f"run:   .venv/bin/python -m kpdoctor diagnose -f json {' '.join(map(str, paths))}")
    res = run_case(case, timeout, cli)
    for f in res.findings:
        print(f"\n{f.summary()}\n{f.trace}")
    print(f"\n{len(res.findings)} finding(s) in {res.seconds:.1f} s")
    return 1 if res.findings else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--minutes", type=float, help="run for this long (default: 10, unless --inputs is given)")
    p.add_argument("--inputs", type=int, help="run this many inputs (with --minutes: whichever comes first)")
    p.add_argument("--seed", type=int, help="run seed (default: from the clock, printed)")
    p.add_argument("--start", type=int, default=0, help="first case index (default 0)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per input, per run (default 30)")
    p.add_argument("--limit-mb", type=float, default=DEFAULT_LIMIT / 1024**2, help="max size of a mutated file")
    p.add_argument("--no-cli", action="store_true", help="in-process only (about 10x more inputs per second)")
    p.add_argument("--out", type=Path, default=OUT, help=f"where findings go (default {OUT.relative_to(REPO)})")
    p.add_argument("--replay", metavar="SEED:INDEX", help="run one case again, keep its files, show its findings")
    p.add_argument("--hostile", type=float, default=0.0, metavar="SHARE",
                   help="share of the inputs that are hostile cases (0-1; default 0: mutations only)")
    p.add_argument("--classes", default=",".join(HOSTILE_CLASSES),
                   help=f"hostile classes to draw from (default: all: {','.join(HOSTILE_CLASSES)})")
    a = p.parse_args()
    limit = int(a.limit_mb * 1024**2)
    classes = tuple(c for c in a.classes.split(",") if c)
    unknown = sorted(set(classes) - set(HOSTILE_CLASSES))
    if unknown or not classes:
        p.error(f"--classes: unknown {unknown}; known: {', '.join(HOSTILE_CLASSES)}")
    if a.replay:
        return replay(a.replay, a.timeout, not a.no_cli, limit, a.out, a.hostile, classes)
    seed = a.seed if a.seed is not None else int(time.time()) % 1_000_000
    minutes = a.minutes if a.minutes is not None else (None if a.inputs else 10.0)
    deadline = time.time() + minutes * 60 if minutes else None
    count = a.inputs if a.inputs else 10**9
    jobs = max(1, a.jobs)
    col = Collector(seed, limit, a.out)
    print(
        f"fuzzing kpdoctor: seed {seed}, "
        + (f"{minutes:g} min" if minutes else "")
        + (" or " if minutes and a.inputs else "")
        + (f"{a.inputs} inputs" if a.inputs else "")
        + f", {jobs} job(s), {'in-process only' if a.no_cli else 'in-process + CLI'}, timeout {a.timeout:g} s"
        + (f", hostile share {a.hostile:g} ({','.join(classes)})" if a.hostile else "") + "; "
        f"findings in {a.out}",
        flush=True,
    )
    load_corpus()
    ctx = multiprocessing.get_context("fork")
    conns = []
    procs = []
    for k in range(jobs):
        parent, child = ctx.Pipe(duplex=False)
        indices = range(a.start + k, a.start + count, jobs)
        pr = ctx.Process(target=_worker, args=(child, seed, indices, deadline, a.timeout, not a.no_cli, limit,
                                               a.hostile, classes))  # fmt: skip
        pr.start()
        child.close()
        conns.append(parent)
        procs.append(pr)
    start = time.time()
    last = start
    try:
        while conns:
            for c in multiprocessing.connection.wait(conns, timeout=5):
                try:
                    msg = c.recv()
                except EOFError:
                    msg = None
                if msg is None:
                    conns.remove(c)
                    continue
                findings = [Finding(**f) for f in msg.pop("findings")]
                col.add(Result(**msg, findings=findings))
            if time.time() - last >= 10:
                last = time.time()
                el = last - start
                print(
                    f"[{int(el) // 60}:{int(el) % 60:02d}] {col.ran} inputs ({col.ran / el:.1f}/s), "
                    f"{sum(len(g) for g in col.groups.values())} findings of {len(col.groups)} kinds",
                    flush=True,
                )
    except KeyboardInterrupt:
        print("interrupted: stopping the workers", flush=True)
        for pr in procs:
            pr.terminate()
    for pr in procs:
        pr.join()
    print(col.report(time.time() - start))
    return 1 if col.groups else 0


if __name__ == "__main__":
    sys.exit(main())
