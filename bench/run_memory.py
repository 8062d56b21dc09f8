"""Does a process that runs kpdoctor again and again keep its memory flat?

Runs the whole pipeline (``kpdoctor.run``) N times in this process on one input and prints the
resident set size after chosen runs, then the largest growth tracemalloc sees between two late
runs (what a leak would be made of). One command:

    .venv/bin/python bench/run_memory.py --demo tke-backend-mismatch --runs 1000
    .venv/bin/python bench/run_memory.py --services 1000 --runs 1000     # a generated node, verified
    .venv/bin/python bench/run_memory.py PATH --runs 200 --json          # any evidence; JSON for tests

Exit 1 when RSS after the last run is more than --max-growth MB above RSS after run 100.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import kpdoctor  # noqa: E402
from kpdoctor import memo  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def marks_for(runs: int) -> list[int]:
    return sorted({m for m in (1, 10, 50, 100, 200, 300, 500, 700, 1000, runs) if m <= runs})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", help="evidence to diagnose (a file, folder or bundle)")
    ap.add_argument("--demo", help="a built-in example (kpdoctor demo NAME)")
    ap.add_argument("--services", type=int, help="generate a node with this many Services (bench/gen_cluster.py)")
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--max-growth", type=float, default=10.0, help="MB allowed between run 100 and the last")
    ap.add_argument("--json", action="store_true", help="print one JSON line (for tests)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kpdoctor-mem-") as tmp:
        if args.services:
            target = Path(tmp) / "node"
            subprocess.run(
                [sys.executable, str(ROOT / "bench" / "gen_cluster.py"), "--services", str(args.services), str(target)],
                check=True,
                capture_output=True,
            )
        elif args.demo:
            target = ROOT / "src" / "kpdoctor" / "demo" / "bundles" / args.demo
        elif args.path:
            target = Path(args.path)
        else:
            ap.error("give PATH, --demo NAME or --services N")
        marks = marks_for(args.runs)
        rss: dict[int, float] = {}
        leaks: list[str] = []
        started = time.perf_counter()
        for i in range(1, args.runs + 1):
            report = kpdoctor.run([target])
            if i in marks:
                gc.collect()
                rss[i] = rss_mb()
        per_run = (time.perf_counter() - started) / args.runs
        # one more run, traced (after the RSS marks: tracemalloc's own bookkeeping would inflate
        # them): what is still allocated after it that was not before, the report aside
        del report
        gc.collect()
        tracemalloc.start(8)
        snap = tracemalloc.take_snapshot()
        report = kpdoctor.run([target])
        del report
        gc.collect()
        stats = tracemalloc.take_snapshot().compare_to(snap, "lineno")
        tracemalloc.stop()
        leaks = [f"{s.size_diff / 1024:+.1f} KiB {s.traceback[0]}" for s in stats[:3]]
        report = kpdoctor.run([target]) if args.json else None
    base = rss.get(100, rss[min(rss)])
    growth = rss[args.runs] - base
    out = {
        "runs": args.runs,
        "rss_mb": {str(k): round(v, 1) for k, v in rss.items()},
        "growth_after_100_mb": round(growth, 1),
        "memo_entries_left": memo.size(),
        "findings": [f.code for f in report.findings] if report is not None else [],
        "seconds_per_run": round(per_run, 4),
        "largest_growth_last_run": leaks,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{args.runs} runs on {target.name}: {per_run * 1000:.1f} ms per run")
        print("RSS MB after run: " + ", ".join(f"{k}: {v:.1f}" for k, v in rss.items()))
        first = 100 if 100 in rss else min(rss)
        print(f"growth from run {first} to {args.runs}: {growth:+.1f} MB (limit {args.max_growth})")
        print(f"memo entries left after the last run: {memo.size()}")
        print("largest tracemalloc growth over one more run (what it left allocated):")
        for line in leaks:
            print("  " + line)
    return 1 if growth > args.max_growth else 0


if __name__ == "__main__":
    sys.exit(main())
