"""`kpdoctor verify` at cluster scale, against iptables' own parser, in the same run.

For N Services x 5 endpoints (bench/gen_cluster.py), times

* the baseline: `iptables-legacy-restore --test` merely parsing the same rules, inside a
  throw-away network namespace (root needed; without it the baseline is skipped and said so);
* `kpdoctor verify SAVE CLUSTER` end to end (a fresh process: start-up, loading, parsing,
  evaluating every Service port x traffic class, the report), with its peak memory;

and prints the ratios the project holds itself to: kpdoctor / baseline at N = 10,000 (target
<= 1.0, aim 0.5), time(30,000) / time(10,000) (linear: <= 3.3) and peak memory (< 1 GB).

    .venv/bin/python bench/verify.py                  # N = 10,000 and 30,000, best of 3
    .venv/bin/python bench/verify.py --sizes 2000 --repeat 1   # quick
    .venv/bin/python bench/verify.py --check          # exit 1 when a target is missed
"""

from __future__ import annotations

import argparse
import compileall
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gen_cluster import write  # noqa: E402


def _timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, int]:
    """Wall time, exit status and peak RSS (kB) of the process and its worker processes."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err.strip()}")
    return wall, proc.returncode, usage.ru_maxrss


def _baseline(restore: Path, repeat: int) -> float | None:
    if os.geteuid() != 0:
        return None
    ns = f"kpd-bench-{os.getpid()}-{secrets.token_hex(3)}"
    if subprocess.run(["ip", "netns", "add", ns], capture_output=True, timeout=10).returncode != 0:
        return None
    try:
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            with open(restore, "rb") as fh:
                res = subprocess.run(
                    ["ip", "netns", "exec", ns, "iptables-legacy-restore", "--test"],
                    stdin=fh,
                    capture_output=True,
                    timeout=600,
                )
            if res.returncode != 0:
                raise SystemExit(f"iptables-legacy-restore --test failed: {res.stderr.decode().strip()}")
            best = min(best, time.perf_counter() - t)
        return best
    finally:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 30000])
    ap.add_argument("--repeat", type=int, default=3, help="best of this many timed runs")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    a = ap.parse_args()
    kpdoctor = [sys.executable, "-m", "kpdoctor"]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # An installed kpdoctor has its bytecode compiled (pip does it); so that each timed run
    # measures kpdoctor rather than CPython compiling its sources again (PYTHONDONTWRITEBYTECODE
    # is set in some environments), compile it once here.
    compileall.compile_dir(str(HERE.parent / "src" / "kpdoctor"), quiet=1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kpd-bench-") as tmp:
        for n in a.sizes:
            out = Path(tmp) / str(n)
            save, cluster = write(out, n, 5)
            rules = sum(1 for line in save.read_text().splitlines() if line.startswith("-A "))
            base = _baseline(out / "restore.txt", a.repeat)
            best, peak, code = float("inf"), 0, 0
            for _ in range(a.repeat):
                wall, code, rss = _timed([*kpdoctor, "verify", str(save), str(cluster)], env)
                best, peak = min(best, wall), max(peak, rss)
            if code != 0:
                raise SystemExit(f"kpdoctor verify did not verify the generated node clean (exit {code})")
            rows.append((n, rules, save.stat().st_size, base, best, peak))
    print(
        f"{'services':>9} {'rules':>8} {'MB':>6} {'legacy-restore --test':>22} {'kpdoctor verify':>16} "
        f"{'ratio':>6} {'peak RSS':>9}"
    )
    for n, rules, size, base, best, peak in rows:
        b = f"{base:.2f} s" if base is not None else "n/a (root)"
        ratio = f"{best / base:.2f}" if base else "-"
        print(f"{n:>9} {rules:>8} {size / 1e6:>6.1f} {b:>22} {best:>14.2f} s {ratio:>6} {peak / 1024:>6.0f} MB")
    failed = []
    by = {r[0]: r for r in rows}
    if 10000 in by and by[10000][3]:
        r = by[10000][4] / by[10000][3]
        print(f"kpdoctor / iptables-legacy-restore --test at N=10,000: {r:.2f} (target <= 1.0, aim 0.5)")
        if r > 1.0:
            failed.append("time vs baseline")
    if 10000 in by and 30000 in by:
        g = by[30000][4] / by[10000][4]
        print(f"time(30,000) / time(10,000): {g:.2f} (linear: <= 3.3)")
        if g > 3.3:
            failed.append("growth")
    worst = max(r[5] for r in rows) / 1024
    print(f"peak memory: {worst:.0f} MB (< 1024 MB)")
    if worst >= 1024:
        failed.append("memory")
    if failed:
        print("missed: " + ", ".join(failed))
    return 1 if failed and a.check else 0


if __name__ == "__main__":
    sys.exit(main())
