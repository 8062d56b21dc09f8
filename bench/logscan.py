"""Benchmark: kpdoctor's log scan against ``grep -E -c -f`` with the same patterns, same file.

Every signature the checks use (info-level ones included) is written to a pattern file; grep
and kpdoctor's Scanner each read the same synthetic log, in the same run, after the file is in
the page cache. Prints throughput, the ratio, and kpdoctor's peak memory.

Usage: python bench/logscan.py [--size-mb 1024] [--keep] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from gen_kubeproxy_log import generate  # noqa: E402

SCAN_CHILD = r"""
import json, resource, sys, time
import kpdoctor.checks  # registers every signature
from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.parse.logscan import REGISTRY, Scanner
t = time.perf_counter()
workers = int(sys.argv[2]) if len(sys.argv) > 2 else None
res = Scanner(REGISTRY.values(), workers=workers).scan([Artifact("log", Kind.KUBE_PROXY_LOG, path=sys.argv[1])])
dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": dt, "rss_mb": rss, "counts": res.counts, "bytes": res.bytes_read}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--keep", action="store_true", help="keep the generated log in bench/out/")
    ap.add_argument("--check", action="store_true", help="exit 1 below 1/3 of grep's throughput or above 300 MB RSS")
    args = ap.parse_args()

    import kpdoctor.checks  # noqa: F401
    from kpdoctor.parse.logscan import REGISTRY

    outdir = HERE / "out" if args.keep else Path(tempfile.mkdtemp(prefix="kpdoctor-bench-"))
    outdir.mkdir(exist_ok=True)
    log = outdir / f"kube-proxy-{args.size_mb}mb.log"
    if not log.exists():
        t = time.perf_counter()
        generate(log, args.size_mb)
        print(f"generated {log} in {time.perf_counter() - t:.1f}s")
    size = log.stat().st_size
    patterns = outdir / "patterns.txt"
    patterns.write_text("".join(s.pattern + "\n" for s in REGISTRY.values()))

    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    t = time.perf_counter()
    grep = subprocess.run(
        ["grep", "-E", "-c", "-f", str(patterns), str(log)], capture_output=True, text=True, check=False
    )
    grep_s = time.perf_counter() - t
    grep_lines = int(grep.stdout.strip() or 0)

    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}

    def scan(workers: int) -> dict[str, Any]:
        argv = [sys.executable, "-c", SCAN_CHILD, str(log), str(workers)]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
        out: dict[str, Any] = json.loads(done.stdout)
        return out

    cores = os.cpu_count() or 1
    one = scan(1)
    res = scan(cores)
    assert one["counts"] == res["counts"], "one-core and all-core scans disagree"
    kp_s = res["seconds"]
    hits = sum(res["counts"].values())

    mb = size / 1e6
    ratio = (mb / kp_s) / (mb / grep_s)
    print(f"\nfile: {mb:.0f} MB, {len(REGISTRY)} signatures")
    print(f"{'':12}{'seconds':>10}{'MB/s':>10}")
    print(f"{'grep -E -c':12}{grep_s:>10.2f}{mb / grep_s:>10.0f}   matching lines: {grep_lines}")
    print(f"{'kpdoctor 1c':12}{one['seconds']:>10.2f}{mb / one['seconds']:>10.0f}   (one core)")
    print(f"{'kpdoctor':12}{kp_s:>10.2f}{mb / kp_s:>10.0f}   signature hits: {hits} ({cores} cores)")
    print(f"\nthroughput ratio kpdoctor/grep: {ratio:.2f} (target >= 0.33); one core: {grep_s / one['seconds']:.2f}")
    print(f"kpdoctor peak RSS: {res['rss_mb']:.0f} MB (streaming; file is {mb:.0f} MB)")
    print("hits per signature: " + ", ".join(f"{k}={v}" for k, v in sorted(res["counts"].items())))
    if not args.keep:
        log.unlink()
    if args.check and (ratio < 0.33 or res["rss_mb"] > 300):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
