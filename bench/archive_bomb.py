"""Benchmark: how fast a gzip bomb bundle is refused, and how much it writes to $TMPDIR.

The bomb is D12's: a 5.9 MB ``.tar.gz`` holding three 1.9 GiB zero-filled members (5.7 GiB
uncompressed). It is built in about two seconds without compressing 5.7 GiB: deflate restarts
from scratch after a full flush, so the compressed form of one 8 MiB block of zeros, made once,
is repeated as many times as needed (the CRC is still computed over every byte, so the file is a
valid gzip that ``gzip -t`` accepts).

Each run happens in a child process with its own empty TMPDIR:

1. ``extract`` alone (the API the loader calls): wall time, bytes the process wrote
   (``wchar`` of ``/proc/self/io``), bytes on disk under the extraction folder afterwards, peak RSS;
2. ``kpdoctor diagnose BOMB`` end to end: wall time, exit code, the peak size of TMPDIR during
   the run (sampled every 10 ms) and what is left in it after the run (must be nothing).

Usage: python bench/archive_bomb.py [--repeat 5] [--members 3] [--member-gib 1.9] [--fill zeros|text] [--keep]
       python bench/archive_bomb.py --baseline REV   # also one run of REV's archive.py (slow: minutes, GBs)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fuzzing import gzip_bomb

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

EXTRACT_CHILD = r"""
import json, os, resource, sys, tempfile, time
from pathlib import Path
if len(sys.argv) > 2:  # a baseline: another revision's archive.py, loaded as a module
    import importlib.util
    spec = importlib.util.spec_from_file_location("baseline_archive", sys.argv[2])
    archive = importlib.util.module_from_spec(spec)
    sys.modules["baseline_archive"] = archive
    spec.loader.exec_module(archive)
else:
    from kpdoctor.bundle import archive

def wchar():
    with open("/proc/self/io") as fh:
        return int(next(l for l in fh if l.startswith("wchar:")).split()[1])

dest = Path(tempfile.mkdtemp(prefix="kpdoctor-"))
w0, t = wchar(), time.perf_counter()
try:
    out = archive.extract(Path(sys.argv[1]), dest)
    result = {"refused": out.refused, "damaged": getattr(out, "damaged", [])}
except archive.ArchiveError as exc:
    result = {"error": str(exc)}
dt, w1 = time.perf_counter() - t, wchar()
on_disk = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
print(json.dumps({"seconds": dt, "wchar": w1 - w0, "on_disk": on_disk,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **result}))
"""


def _tree_bytes(root: Path) -> int:
    total = 0
    for here, _, names in os.walk(root):
        for n in names:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += os.lstat(os.path.join(here, n)).st_size
    return total


def run_extract(bomb: Path, baseline: Path | None = None) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="kpd-bomb-tmp-"))
    env = {**os.environ, "TMPDIR": str(tmp),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    try:
        argv = [sys.executable, "-c", EXTRACT_CHILD, str(bomb)] + ([str(baseline)] if baseline else [])
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"extract child failed:\n{done.stderr}")
        out: dict[str, Any] = json.loads(done.stdout)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_cli(bomb: Path) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="kpd-bomb-tmp-"))
    env = {**os.environ, "TMPDIR": str(tmp),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_bytes(tmp))
            stop.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "kpdoctor", "diagnose", str(bomb)],
                              capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t
        stop.set()
        sampler.join()
        left = sorted(p.name for p in tmp.iterdir())
        lines = [line for line in (done.stdout + done.stderr).splitlines() if "bomb" in line or "expands" in line]
        return {"seconds": wall, "exit": done.returncode, "peak_tmpdir": peak, "left_in_tmpdir": left,
                "lines": lines[:4]}
    finally:
        stop.set()
        shutil.rmtree(tmp, ignore_errors=True)


def _stats(values: list[float]) -> str:
    return f"min {min(values):.3g}  median {statistics.median(values):.3g}  max {max(values):.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--member-gib", type=float, default=1.9)
    ap.add_argument("--fill", choices=["zeros", "text"], default="zeros",
                    help="what the members hold: zeros (binary, D12) or the letter a (text, written out)")
    ap.add_argument("--keep", action="store_true", help="build into bench/out/ and keep the bomb")
    ap.add_argument("--baseline", metavar="REV", help="also one run of REV's archive.py (git show)")
    args = ap.parse_args()

    work = HERE / "out" if args.keep else Path(tempfile.mkdtemp(prefix="kpd-bomb-"))
    work.mkdir(parents=True, exist_ok=True)
    bomb = work / "bomb.tar.gz"
    member_bytes = int(args.member_gib * 1024**3)
    try:
        t = time.perf_counter()
        gzip_bomb(bomb, args.members, member_bytes, b"\0" if args.fill == "zeros" else b"a")
        print(f"bomb: {bomb.stat().st_size:,} bytes, {args.members} x {member_bytes:,} bytes of {args.fill} "
              f"({args.members * member_bytes / bomb.stat().st_size:,.0f}:1), built in {time.perf_counter() - t:.1f} s")
        ex = [run_extract(bomb) for _ in range(args.repeat)]
        print(f"\nextract(), {args.repeat} runs")
        print(f"  seconds          {_stats([r['seconds'] for r in ex])}")
        print(f"  bytes written    {_stats([r['wchar'] for r in ex])}   (wchar)")
        print(f"  bytes on disk    {_stats([r['on_disk'] for r in ex])}")
        print(f"  peak RSS MB      {_stats([r['rss_mb'] for r in ex])}")
        print(f"  refused          {ex[0].get('refused') or ex[0].get('error')}")
        cli = [run_cli(bomb) for _ in range(args.repeat)]
        print(f"\nkpdoctor diagnose, {args.repeat} runs")
        print(f"  seconds          {_stats([r['seconds'] for r in cli])}")
        print(f"  peak TMPDIR      {_stats([r['peak_tmpdir'] for r in cli])}   (bytes, sampled every 10 ms)")
        print(f"  exit codes       {sorted({r['exit'] for r in cli})}")
        print(f"  left in TMPDIR   {sorted({n for r in cli for n in r['left_in_tmpdir']}) or 'nothing'}")
        for line in cli[0]["lines"]:
            print(f"  | {line}")
        if args.baseline:
            old = work / "baseline_archive.py"
            text = subprocess.run(["git", "show", f"{args.baseline}:src/kpdoctor/bundle/archive.py"],
                                  capture_output=True, text=True, check=True, cwd=HERE.parent).stdout
            old.write_text(text)
            r = run_extract(bomb, old)
            print(f"\nbaseline {args.baseline}: extract() {r['seconds']:.1f} s, wrote {r['wchar']:,} bytes, "
                  f"{r['on_disk']:,} on disk; {r.get('refused') or r.get('error')}")
        bad = [r for r in cli if r["left_in_tmpdir"]]
        if bad:
            raise SystemExit("FAIL: kpdoctor left files in TMPDIR")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
