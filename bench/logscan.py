"""Benchmark: kpdoctor's log scan against ``grep -E -c -f`` with the same patterns, same file.

Every signature the checks read (``knowledge.read_by_checks``: their own, info-level ones
included, and the catalogue messages they declared) has its ``pattern`` written to a pattern file;
grep and kpdoctor's ``Scanner`` each read the same synthetic kube-proxy log, in the same run,
after one untimed ``cat`` has put the file in the page cache. kpdoctor runs in a child process
(on one core, then with its default worker count) so its peak RSS can be read.

Agreement: grep counts lines matching any pattern; kpdoctor counts hits per signature per line.
An untimed ``grep -n`` pass lists grep's matching lines, and each pattern is then grepped over just
those lines, giving grep's count per signature; both are compared with kpdoctor's. kpdoctor keeps
a bounded sample of hits per signature (every hit is counted): its kept lines must be among grep's.

Usage: python bench/logscan.py [--size-mb 1024] [--keep] [--check] [--log FILE] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(SRC))

from gen_kubeproxy_log import generate  # noqa: E402

RATIO_MIN = 0.33
RSS_MAX_MB = 300

SCAN_CHILD = r"""
import importlib, json, resource, sys, time
importlib.import_module(sys.argv[3])  # registers the signatures
from kpdoctor.bundle.artifacts import Artifact, Kind
import os
from kpdoctor.parse.logscan import PARALLEL_MIN_BYTES, Scanner
from kpdoctor.knowledge import read_by_checks
workers = int(sys.argv[2]) if sys.argv[2] != "default" else None
scanner = Scanner(read_by_checks(), workers=workers)
t = time.perf_counter()
res = scanner.scan([Artifact("kube-proxy.log", Kind.KUBE_PROXY_LOG, path=sys.argv[1])])
dt = time.perf_counter() - t
hwm = 0
with open("/proc/self/status") as fh:
    for line in fh:
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
lines = sorted({h.line for hs in res.hits.values() for h in hs})
print(json.dumps({
    "seconds": dt,
    "workers": scanner.workers,
    "parallel": scanner.workers > 1 and os.path.getsize(sys.argv[1]) >= PARALLEL_MIN_BYTES,
    "rss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "vmhwm_mb": hwm,
    "rss_workers_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    "counts": res.counts,
    "bytes": res.bytes_read,
    "lines_read": sum(res.lines.values()),
    "hit_lines": lines,
    "sampled": sum(res.counts.values()) > len(lines),
}))
"""


def load_registry() -> tuple[str, dict[str, Any], bool]:
    """Import the checks (every signature); fall back to the common signatures only."""
    try:
        import kpdoctor.checks

        module, complete = "kpdoctor.checks", True
    except Exception as exc:  # the checks are work in progress
        print(
            f"WARNING: importing kpdoctor.checks failed ({exc!r}); only the common signatures of "
            "kpdoctor.facts.log are benchmarked",
            file=sys.stderr,
        )
        import kpdoctor.facts.log  # noqa: F401

        module, complete = "kpdoctor.facts.log", False
    from kpdoctor.knowledge import read_by_checks

    # what the checks read: their own signatures and the catalogue messages they declared
    return module, {s.id: s for s in read_by_checks()}, complete


def run_grep(patterns: Path, log: Path, repeat: int) -> tuple[float, int]:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        t = time.perf_counter()
        done = subprocess.run(["grep", "-E", "-c", "-f", str(patterns), str(log)], capture_output=True, text=True)
        best = min(best, time.perf_counter() - t)
        if done.returncode > 1:
            raise SystemExit(f"grep failed: {done.stderr.strip()}")
        count = int(done.stdout.strip() or 0)
    return best, count


def grep_per_signature(
    registry: dict[str, Any], patterns: Path, log: Path, work: Path
) -> tuple[set[int], dict[str, int]]:
    """Untimed: grep's matching line numbers, and grep's own count per signature over those lines."""
    done = subprocess.run(["grep", "-n", "-E", "-f", str(patterns), str(log)], capture_output=True)
    if done.returncode > 1:
        raise SystemExit(f"grep -n failed: {done.stderr.decode(errors='replace').strip()}")
    numbers: set[int] = set()
    body = []
    for raw in done.stdout.splitlines():
        num, _, text = raw.partition(b":")
        numbers.add(int(num))
        body.append(text + b"\n")
    matched = work / "grep-matched.txt"
    matched.write_bytes(b"".join(body))
    one = work / "one-pattern.txt"
    counts = {}
    for sid, sig in registry.items():
        one.write_text(sig.pattern + "\n")
        r = subprocess.run(["grep", "-E", "-c", "-f", str(one), str(matched)], capture_output=True, text=True)
        counts[sid] = int(r.stdout.strip() or 0)
    return numbers, counts


def run_kpdoctor(log: Path, module: str, workers: str, repeat: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    best: dict[str, Any] | None = None
    for _ in range(repeat):
        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", SCAN_CHILD, str(log), workers, module], capture_output=True, text=True, env=env
        )
        wall = time.perf_counter() - t
        if done.returncode != 0:
            raise SystemExit(f"kpdoctor scan failed:\n{done.stderr}")
        out: dict[str, Any] = json.loads(done.stdout)
        out["wall"] = wall
        if best is None or out["seconds"] < best["seconds"]:
            best = out
    assert best is not None
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024, help="size of the generated log (MiB)")
    ap.add_argument("--keep", action="store_true", help="write to bench/out/ and keep the log and pattern file")
    ap.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 if kpdoctor's throughput is below {RATIO_MIN} of grep's or its RSS above {RSS_MAX_MB} MB",
    )
    ap.add_argument("--log", type=Path, help="benchmark this existing file instead of generating one")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs of each tool; the best is reported")
    args = ap.parse_args()

    module, registry, complete = load_registry()
    work = HERE / "out" if args.keep else Path(tempfile.mkdtemp(prefix="kpdoctor-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.log:
            log = args.log.resolve()
        else:
            log = work / f"kube-proxy-{args.size_mb}mb.log"
            t = time.perf_counter()
            generate(log, args.size_mb)
            print(f"generated {log} in {time.perf_counter() - t:.1f}s")
        size = log.stat().st_size
        mb = size / 1e6
        patterns = work / "patterns.txt"
        patterns.write_text("".join(s.pattern + "\n" for s in registry.values()))

        with open(log, "rb") as fh:  # warm the page cache (untimed)
            while fh.read(16 << 20):
                pass
        grep_s, grep_lines = run_grep(patterns, log, args.repeat)
        one = run_kpdoctor(log, module, "1", args.repeat)
        multi = run_kpdoctor(log, module, "default", args.repeat)
        grep_numbers, grep_counts = grep_per_signature(registry, patterns, log, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    kp_s = multi["seconds"]
    ratio = grep_s / kp_s  # = (MB/s kpdoctor) / (MB/s grep)
    ratio1 = grep_s / one["seconds"]
    rss_peak = max(multi["rss_self_mb"], multi["rss_workers_mb"], one["rss_self_mb"])
    hits = sum(multi["counts"].values())
    cores = os.cpu_count() or 1

    print(
        f"\nfile: {size:,} bytes ({mb:,.0f} MB), {multi['lines_read']:,} lines; {len(registry)} signatures "
        f"({'all checks' if complete else 'COMMON ONLY'}); {cores} cores"
    )
    print(f"\n{'':34}{'seconds':>9}{'MB/s':>8}{'vs grep':>9}   peak RSS MB")
    print(f"{'grep -E -c -f':34}{grep_s:>9.2f}{mb / grep_s:>8.0f}{1:>9.2f}")
    print(
        f"{'kpdoctor Scanner(workers=1)':34}{one['seconds']:>9.2f}{mb / one['seconds']:>8.0f}{ratio1:>9.2f}"
        f"   {one['rss_self_mb']:.0f}"
    )
    if multi["parallel"]:
        label = f"kpdoctor Scanner() ({multi['workers']} workers)"
        rss_txt = f"{multi['rss_self_mb']:.0f} parent, {multi['rss_workers_mb']:.0f} largest worker"
    else:
        label = "kpdoctor Scanner() (serial)"
        rss_txt = f"{multi['rss_self_mb']:.0f}  (file < PARALLEL_MIN_BYTES or 1 core: one process)"
    print(f"{label:34}{kp_s:>9.2f}{mb / kp_s:>8.0f}{ratio:>9.2f}   {rss_txt}")
    print(
        f"(child process wall incl. interpreter start and imports: 1 worker {one['wall']:.2f}s, "
        f"{multi['workers']} workers {multi['wall']:.2f}s)"
    )

    print(f"\n{'signature':40}{'kpdoctor':>10}{'grep':>8}")
    mismatched = []
    for sid in sorted(registry, key=lambda s: (-multi["counts"].get(s, 0), s)):
        k, g = multi["counts"].get(sid, 0), grep_counts[sid]
        flag = "" if k == g else "   <-- differs"
        if k != g:
            mismatched.append(sid)
        print(f"{sid:40}{k:>10,}{g:>8,}{flag}")
    kp_lines = set(multi["hit_lines"])
    print(
        f"\ngrep matching lines (grep -c): {grep_lines:,}   kpdoctor total hits: {hits:,} "
        f"(per signature per line; sum of grep's per-signature counts: {sum(grep_counts.values()):,})"
    )
    print(
        f"distinct lines with a kept kpdoctor hit: {len(kp_lines):,}"
        + ("  (a sample: every hit is counted, a bounded number kept per signature)" if multi["sampled"] else "")
    )
    only_kp = sorted(kp_lines - grep_numbers)
    only_grep = [] if multi["sampled"] else sorted(grep_numbers - kp_lines)
    agree = not mismatched and not only_grep and not only_kp and grep_lines == len(grep_numbers)
    if agree:
        same = "kept lines among grep's" if multi["sampled"] else "same lines"
        print(f"agreement: exact ({same}, same count per signature)")
    else:
        print(
            f"agreement: DIFFERS: signatures {mismatched}; lines only grep matched {only_grep[:10]}"
            f"{'...' if len(only_grep) > 10 else ''}; lines only kpdoctor matched {only_kp[:10]}"
            f"{'...' if len(only_kp) > 10 else ''}"
        )
    if one["counts"] != multi["counts"]:
        print("WARNING: the 1-worker and multi-worker scans counted different hits")
        agree = False

    print(
        f"\nthroughput ratio kpdoctor/grep: {ratio:.2f} (Scanner() default), {ratio1:.2f} (1 worker); "
        f"target >= {RATIO_MIN}"
    )
    print(f"kpdoctor peak RSS: {rss_peak:.0f} MB (largest single process; limit {RSS_MAX_MB} MB)")
    if not complete:
        print("WARNING: only the common signatures (kpdoctor.facts.log) were benchmarked")
    if args.check and (ratio < RATIO_MIN or rss_peak > RSS_MAX_MB):
        print("CHECK FAILED")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
