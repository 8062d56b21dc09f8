"""One node in iptables mode and in another proxy mode, `kpdoctor verify` timed on each in one run.

Shared by bench/verify_nft.py and bench/verify_ipvs.py: for each size, both forms are generated
(bench/gen_cluster.py writes the same cluster in every mode), then verified in fresh processes,
interleaved (iptables, other, iptables...), each required to be clean; it prints min/median/max of
each, the ratio of each pair and the peak memory, and checks the targets every proxy-mode backend
is held to: other / iptables at N = 10,000 <= 1.0 (median of the pairs), time(30,000) /
time(10,000) <= 3.3 (linear) and peak memory < 1 GB at 10,000.
"""

from __future__ import annotations

import compileall
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gen_cluster import write  # noqa: E402
from verify import _timed  # noqa: E402


class Row(NamedTuple):
    n: int
    size: int  # bytes of the other mode's node files
    times: dict[str, list[float]]
    peak: dict[str, int]  # KB
    ratios: list[float]  # other / iptables, per pair


def spread(xs: list[float]) -> str:
    return f"{min(xs):.2f}/{statistics.median(xs):.2f}/{max(xs):.2f}"


def measure(mode: str, n: int, pairs: int, tmp: Path, node_files: Callable[[Path, int], list[Path]]) -> Row:
    """Time ``pairs`` interleaved verifications of N Services in iptables mode and in ``mode``,
    whose node files (and cluster.json, last) ``node_files(dir, n)`` writes."""
    kpdoctor = [sys.executable, "-m", "kpdoctor"]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # as bench/verify.py: measure kpdoctor, not CPython compiling its sources in every run
    compileall.compile_dir(str(HERE.parent / "src" / "kpdoctor"), quiet=1)
    save, cluster = write(tmp / f"iptables{n}", n, 5)
    other = node_files(tmp / f"{mode}{n}", n)
    runs = {"iptables": [save, cluster], mode: other}
    times: dict[str, list[float]] = {"iptables": [], mode: []}
    peak = {"iptables": 0, mode: 0}
    for _ in range(pairs):
        for name, files in runs.items():
            wall, code, rss = _timed([*kpdoctor, "verify", *map(str, files)], env)
            if code != 0:
                raise SystemExit(f"kpdoctor verify: the generated {name} node is not clean (exit {code})")
            times[name].append(wall)
            peak[name] = max(peak[name], rss)
    ratios = [b / t for t, b in zip(times["iptables"], times[mode], strict=True)]
    size = sum(p.stat().st_size for p in other[:-1])
    print(
        f"N={n:,} ({size / 1e6:.0f} MB {mode} node files): seconds min/median/max "
        f"iptables {spread(times['iptables'])}, {mode} {spread(times[mode])}; "
        f"{mode}/iptables per pair {spread(ratios)}; peak RSS iptables {peak['iptables'] / 1024:.0f} MB, "
        f"{mode} {peak[mode] / 1024:.0f} MB",
        flush=True,
    )
    return Row(n, size, times, peak, ratios)


def targets(mode: str, rows: list[Row], pairs: int) -> list[str]:
    """Print the targets against the rows measured; the names of those missed."""
    failed = []
    by = {r.n: r for r in rows}
    if 10000 in by:
        r = statistics.median(by[10000].ratios)
        print(f"{mode} / iptables at N=10,000 (median of {pairs} pairs): {r:.2f} (target <= 1.0)")
        if r > 1.0:
            failed.append("time vs iptables")
        mem = by[10000].peak[mode] / 1024
        print(f"peak memory at N=10,000 ({mode}): {mem:.0f} MB (< 1024 MB)")
        if mem >= 1024:
            failed.append("memory")
    if 10000 in by and 30000 in by:
        g = statistics.median(by[30000].times[mode]) / statistics.median(by[10000].times[mode])
        print(f"{mode} time(30,000) / time(10,000): {g:.2f} (linear: <= 3.3)")
        if g > 3.3:
            failed.append("growth")
    if failed:
        print("missed: " + ", ".join(failed))
    return failed
