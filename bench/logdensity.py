"""Benchmark: does a log's error density change what ``kpdoctor diagnose`` costs? (D10)

Two logs of the same size from ``gen_kubeproxy_log.py``: the sparse bench log (one failure record
in 50,000 lines) and a dense one (``--failure-every N``: one record in N is a failure, as a
kube-proxy that has been failing for days writes). ``kpdoctor diagnose -f json LOG`` runs on
each, end to end in a fresh process, alternately (sparse, dense, then dense, sparse, ...) so a
noisy machine slows both alike. For each log: wall time and CPU (user + sys of the process and
its scan workers) as min / median / max, and peak RSS: the largest ``ru_maxrss`` of the process
tree, from ``wait4`` (what ``/usr/bin/time -f %M`` prints). Then dense / sparse.

Targets (robustness-defects.md D10): dense within 2x of sparse in wall time, peak RSS under
300 MB. ``--check`` exits 1 when the median ratio or the largest RSS misses them.

Usage: python bench/logdensity.py [--size-mb 2048] [--failure-every 20] [--runs 3] [--keep]
       python bench/logdensity.py --sparse FILE --dense FILE [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))

from gen_kubeproxy_log import generate  # noqa: E402

RATIO_MAX = 2.0
RSS_MAX_MB = 300


def run_diagnose(log: Path, out: Path) -> dict[str, Any]:
    """One ``kpdoctor diagnose -f json LOG`` in a fresh interpreter: wall, CPU, peak RSS, report."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "kpdoctor", "diagnose", "-f", "json", str(log)]
    with open(out, "wb") as fh:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.PIPE, env=env)
        # wait4: the child's rusage, its ru_maxrss the largest of it and its reaped scan workers
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 1):  # 1: findings at or above --min-severity
        raise SystemExit(f"kpdoctor diagnose {log} exited {proc.returncode}:\n{err}")
    report = json.loads(out.read_bytes())
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
        "report": report,
    }


def summary(findings: list[dict[str, Any]]) -> str:
    """code x occurrences (first_seen .. last_seen, ongoing) of each finding, folded ones too."""
    out = []
    stack = list(findings)
    while stack:
        f = stack.pop(0)
        occ = f.get("occurrences")
        if occ:
            seen = f"{f.get('first_seen')} .. {f.get('last_seen')}"
            out.append(f"{f['code']} x{occ:,} ({seen}, ongoing={f.get('ongoing')})")
        else:
            out.append(f["code"])
        stack.extend(f.get("folded") or [])
    return "; ".join(out)


def stats(values: list[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=2048, help="size of each generated log (MiB)")
    ap.add_argument("--failure-every", type=int, default=20, metavar="N", help="dense log: one failure record in N")
    ap.add_argument("--runs", type=int, default=3, help="runs of each log, interleaved")
    ap.add_argument("--sparse", type=Path, help="an existing sparse log (with --dense: nothing is generated)")
    ap.add_argument("--dense", type=Path, help="an existing dense log")
    ap.add_argument("--keep", action="store_true", help="write the logs to bench/out/ and keep them")
    ap.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 if the median dense/sparse wall ratio is above {RATIO_MAX} or a peak RSS above {RSS_MAX_MB} MB",
    )
    args = ap.parse_args()
    if (args.sparse is None) != (args.dense is None):
        ap.error("give both --sparse and --dense, or neither")

    work = HERE / "out" if args.keep else Path(tempfile.mkdtemp(prefix="kpdoctor-density-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.sparse is not None and args.dense is not None:
            logs = {"sparse": args.sparse.resolve(), "dense": args.dense.resolve()}
        else:
            logs = {
                "sparse": work / f"kube-proxy-{args.size_mb}mb.log",
                "dense": work / f"kube-proxy-{args.size_mb}mb-dense{args.failure_every}.log",
            }
            for kind, path in logs.items():
                t = time.perf_counter()
                generate(path, args.size_mb, failure_every=args.failure_every if kind == "dense" else None)
                print(f"generated {path} ({path.stat().st_size:,} bytes) in {time.perf_counter() - t:.1f}s")
        sizes = {kind: path.stat().st_size for kind, path in logs.items()}
        for path in logs.values():  # warm the page cache (untimed)
            with open(path, "rb") as fh:
                while fh.read(16 << 20):
                    pass
        results: dict[str, list[dict[str, Any]]] = {"sparse": [], "dense": []}
        for i in range(args.runs):
            order = ("sparse", "dense") if i % 2 == 0 else ("dense", "sparse")
            for kind in order:
                r = run_diagnose(logs[kind], work / f"report-{kind}.json")
                results[kind].append(r)
                line = f"run {i + 1} {kind:6} {r['wall']:7.2f} s wall {r['cpu']:7.2f} s cpu {r['rss_mb']:6.0f} MB"
                print(line, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    cores = os.cpu_count() or 1
    print(f"\n{cores} cores; {args.runs} runs each, interleaved; `kpdoctor diagnose -f json LOG` end to end")
    print(f"{'':8}{'size':>14}   {'wall s min/median/max':>24}   {'cpu s min/median/max':>24}   peak RSS MB max")
    table: dict[str, dict[str, tuple[float, float, float]]] = {}
    for kind in ("sparse", "dense"):
        rs = results[kind]
        table[kind] = {k: stats([r[k] for r in rs]) for k in ("wall", "cpu", "rss_mb")}
        w, c, m = table[kind]["wall"], table[kind]["cpu"], table[kind]["rss_mb"]
        print(
            f"{kind:8}{sizes[kind]:>14,}   "
            f"{w[0]:7.2f} {w[1]:7.2f} {w[2]:7.2f}   {c[0]:7.2f} {c[1]:7.2f} {c[2]:7.2f}   {m[2]:6.0f}"
        )
    ratio_med = table["dense"]["wall"][1] / table["sparse"]["wall"][1]
    ratio_min = table["dense"]["wall"][0] / table["sparse"]["wall"][0]
    ratio_cpu = table["dense"]["cpu"][1] / table["sparse"]["cpu"][1]
    rss = max(table["dense"]["rss_mb"][2], table["sparse"]["rss_mb"][2])
    print(
        f"\ndense/sparse: wall {ratio_med:.2f} (medians), {ratio_min:.2f} (minima); cpu {ratio_cpu:.2f} (medians); "
        f"target wall <= {RATIO_MAX}"
    )
    print(f"largest peak RSS: {rss:.0f} MB (target < {RSS_MAX_MB} MB)")
    print(f"\ndense findings: {summary(results['dense'][-1]['report'].get('findings') or [])}")
    print(f"sparse findings: {summary(results['sparse'][-1]['report'].get('findings') or [])}")
    if args.check and (ratio_med > RATIO_MAX or rss >= RSS_MAX_MB):
        print("CHECK FAILED")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
