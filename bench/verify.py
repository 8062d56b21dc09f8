"""`kpdoctor verify` at cluster scale, against iptables' own parser, interleaved in one run.

For N Services x 5 endpoints (bench/gen_cluster.py), runs in turn, ``--pairs`` times:

* the baseline: `iptables-legacy-restore --test` merely parsing the same rules, inside a
  throw-away network namespace (root needed; without it the baseline is skipped and said so);
* `kpdoctor verify SAVE CLUSTER` end to end (a fresh process: start-up, loading, parsing,
  evaluating every Service port x traffic class, the report), once per walk given with
  ``--cores`` (``native``: the Rust core, the default; ``python``: ``KPDOCTOR_CORE=python``);

and prints, per size, the wall and CPU seconds (user + system, of every process of the run) as
min/median/max, each pair's kpdoctor/baseline ratio (CPU and wall), and peak memory. The targets
(issue 42): CPU kpdoctor/baseline at N = 10,000 <= 0.5 (median of the pairs), time(30,000) /
time(10,000) <= 3.3, peak RSS <= 200 MB at 10,000 and <= 600 MB at 50,000.

    .venv/bin/python bench/verify.py                          # N = 10,000 and 30,000, 5 pairs
    .venv/bin/python bench/verify.py --sizes 10000 --cores native python --pairs 7
    .venv/bin/python bench/verify.py --sizes 2000 --pairs 1   # quick
    .venv/bin/python bench/verify.py --check                  # exit 1 when a target is missed
"""

from __future__ import annotations

import argparse
import compileall
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gen_cluster import write  # noqa: E402


def _run(
    argv: list[str], env: dict[str, str] | None = None, stdin: Path | None = None
) -> tuple[float, float, int, int]:
    """Wall seconds, CPU seconds (user + system of the process and every process it waited
    for), exit status and peak RSS (kB) of one command."""
    t = time.perf_counter()
    with open(stdin or os.devnull, "rb") as fh:
        proc = subprocess.Popen(argv, stdin=fh, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err.strip()}")
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode, usage.ru_maxrss


def _timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, int]:
    """Wall time, exit status and peak RSS (kB) (bench/mode_pairs.py)."""
    wall, _, code, rss = _run(argv, env)
    return wall, code, rss


def spread(xs: list[float]) -> str:
    return f"{min(xs):.2f}/{statistics.median(xs):.2f}/{max(xs):.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 30000])
    ap.add_argument("--pairs", type=int, default=5, help="interleaved rounds per size")
    ap.add_argument("--cores", nargs="+", choices=["native", "python"], default=["native"])
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    a = ap.parse_args()
    kpdoctor = [sys.executable, "-m", "kpdoctor"]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # An installed kpdoctor has its bytecode compiled (pip does it); so that each timed run
    # measures kpdoctor rather than CPython compiling its sources again (PYTHONDONTWRITEBYTECODE
    # is set in some environments), compile it once here.
    compileall.compile_dir(str(HERE.parent / "src" / "kpdoctor"), quiet=1)
    ns = None
    if os.geteuid() == 0:
        ns = f"kpd-bench-{os.getpid()}-{secrets.token_hex(3)}"
        if subprocess.run(["ip", "netns", "add", ns], capture_output=True, timeout=10).returncode != 0:
            ns = None
    if ns is None:
        print("baseline skipped: iptables-legacy-restore --test needs root and a network namespace")
    failed = []
    medians: dict[tuple[str, int], float] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="kpd-bench-") as tmp:
            for n in a.sizes:
                out = Path(tmp) / str(n)
                save, cluster = write(out, n, 5)
                rules = sum(1 for line in save.read_text().splitlines() if line.startswith("-A "))
                runs: dict[str, list[tuple[float, float, int]]] = {k: [] for k in ["restore", *a.cores]}
                for _ in range(a.pairs):
                    if ns is not None:
                        argv = ["ip", "netns", "exec", ns, "iptables-legacy-restore", "--test"]
                        wall, cpu, code, rss = _run(argv, stdin=out / "restore.txt")
                        if code != 0:
                            raise SystemExit("iptables-legacy-restore --test refused the generated rules")
                        runs["restore"].append((wall, cpu, rss))
                    for core in a.cores:
                        wall, cpu, code, rss = _run(
                            [*kpdoctor, "verify", str(save), str(cluster)], dict(env, KPDOCTOR_CORE=core)
                        )
                        if code != 0:
                            raise SystemExit(f"kpdoctor verify ({core}) did not verify the generated node clean")
                        runs[core].append((wall, cpu, rss))
                print(f"N = {n:,} Services ({rules:,} rules, {save.stat().st_size / 1e6:.1f} MB), {a.pairs} rounds")
                print(f"  {'':<28} {'wall s min/med/max':>20} {'CPU s min/med/max':>20} {'peak RSS':>9}")
                for name, rs in runs.items():
                    if not rs:
                        continue
                    label = "iptables-legacy-restore --test" if name == "restore" else f"kpdoctor verify ({name})"
                    walls, cpus, peak = [r[0] for r in rs], [r[1] for r in rs], max(r[2] for r in rs)
                    print(f"  {label:<28} {spread(walls):>20} {spread(cpus):>20} {peak / 1024:>6.0f} MB")
                    medians[(name, n)] = statistics.median(walls)
                    if name != "restore":
                        limit = 200 if n <= 10000 else 600 if n <= 50000 else None
                        if limit and peak / 1024 > limit:
                            failed.append(f"peak RSS {peak / 1024:.0f} MB > {limit} MB at {n:,} ({name})")
                for core in a.cores:
                    if runs["restore"]:
                        cpu = [k[1] / b[1] for k, b in zip(runs[core], runs["restore"], strict=True)]
                        wall = [k[0] / b[0] for k, b in zip(runs[core], runs["restore"], strict=True)]
                        print(f"  {core} / baseline per round: CPU {spread(cpu)}, wall {spread(wall)} (min/med/max)")
                        if n == 10000 and statistics.median(cpu) > 0.5:
                            failed.append(
                                f"CPU {statistics.median(cpu):.2f}x the baseline at 10,000 ({core}; target 0.5)"
                            )
                if len(a.cores) == 2:
                    r = [x[1] / y[1] for x, y in zip(runs[a.cores[0]], runs[a.cores[1]], strict=True)]
                    print(f"  {a.cores[0]} / {a.cores[1]} CPU per round: {spread(r)}")
    finally:
        if ns is not None:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=10)
    for core in a.cores:
        if (core, 10000) in medians and (core, 30000) in medians:
            g = medians[(core, 30000)] / medians[(core, 10000)]
            print(f"time(30,000) / time(10,000), {core}: {g:.2f} (linear: <= 3.3)")
            if g > 3.3:
                failed.append(f"growth {g:.2f} ({core})")
    if failed:
        print("missed: " + "; ".join(failed))
    return 1 if failed and a.check else 0


if __name__ == "__main__":
    sys.exit(main())
