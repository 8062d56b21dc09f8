"""`kpdoctor verify` of an nftables-mode node against the same node in iptables mode, in one run.

For N Services x 5 endpoints (bench/gen_cluster.py writes the same cluster in both modes: an
`iptables-save` dump and an `nft -j list ruleset` listing of kube-proxy's table), runs
`kpdoctor verify` on each form in fresh processes, interleaved (iptables, nftables, iptables...),
and prints min/median/max of each, the ratio of each pair, and the targets the project holds the
nftables backend to: nftables / iptables at N = 10,000 <= 1.0 (median of the pairs),
time(30,000) / time(10,000) <= 3.3 (linear) and peak memory < 1 GB at 10,000.

    .venv/bin/python bench/verify_nft.py                       # N = 10,000 and 30,000, 5 pairs
    .venv/bin/python bench/verify_nft.py --sizes 2000 --pairs 3   # quick
    .venv/bin/python bench/verify_nft.py --check               # exit 1 when a target is missed
    .venv/bin/python bench/verify_nft.py --sizes 10000 --nft-baseline   # also nft's own check

--nft-baseline also times `nft -c -f` on the same rules (nft checking them against the kernel
without applying them, in a throw-away network namespace; root needed): what reading the rules
costs nft itself. It takes minutes at 10,000 Services, so it is run once per size, not per pair.
"""

from __future__ import annotations

import argparse
import compileall
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gen_cluster import write  # noqa: E402
from verify import _timed  # noqa: E402


def _nft_check(rules: Path) -> float | None:
    """Seconds `nft -c -f RULES` takes in a throw-away network namespace (None without root)."""
    if os.geteuid() != 0 or shutil.which("nft") is None:
        return None
    ns = f"kpd-bench-nft-{os.getpid()}-{secrets.token_hex(3)}"
    if subprocess.run(["ip", "netns", "add", ns], capture_output=True, timeout=10).returncode != 0:
        return None
    try:
        t = time.perf_counter()
        res = subprocess.run(
            ["ip", "netns", "exec", ns, "nft", "-c", "-f", str(rules)], capture_output=True, timeout=3600
        )
        if res.returncode != 0:
            raise SystemExit(f"nft -c -f failed: {res.stderr.decode(errors='replace').strip()[:300]}")
        return time.perf_counter() - t
    finally:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=10)


def _spread(xs: list[float]) -> str:
    return f"{min(xs):.2f}/{statistics.median(xs):.2f}/{max(xs):.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 30000])
    ap.add_argument("--pairs", type=int, default=5, help="interleaved iptables/nftables runs per size")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--nft-baseline", action="store_true", help="also time `nft -c -f` on the rules (slow)")
    a = ap.parse_args()
    kpdoctor = [sys.executable, "-m", "kpdoctor"]
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    compileall.compile_dir(str(HERE.parent / "src" / "kpdoctor"), quiet=1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kpd-bench-nft-") as tmp:
        for n in a.sizes:
            ipt_dir, nft_dir = Path(tmp) / f"ipt{n}", Path(tmp) / f"nft{n}"
            save, cluster = write(ipt_dir, n, 5)
            listing, _ = write(nft_dir, n, 5, mode="nftables")
            times: dict[str, list[float]] = {"iptables": [], "nftables": []}
            peak = {"iptables": 0, "nftables": 0}
            for _ in range(a.pairs):
                for mode, rules in (("iptables", save), ("nftables", listing)):
                    wall, code, rss = _timed([*kpdoctor, "verify", str(rules), str(cluster)], env)
                    if code != 0:
                        raise SystemExit(f"kpdoctor verify: the generated {mode} node is not clean (exit {code})")
                    times[mode].append(wall)
                    peak[mode] = max(peak[mode], rss)
            ratios = [b / t for t, b in zip(times["iptables"], times["nftables"], strict=True)]
            if a.nft_baseline:
                check = _nft_check(nft_dir / "ruleset.nft")
                if check is not None:
                    med = statistics.median(times["nftables"])
                    print(f"N={n:,}: nft -c -f {check:.1f} s; kpdoctor verify (nftables) / nft -c: {med / check:.3f}")
            rows.append((n, listing.stat().st_size, times, peak, ratios))
            print(
                f"N={n:,} ({listing.stat().st_size / 1e6:.0f} MB nft -j): seconds min/median/max "
                f"iptables {_spread(times['iptables'])}, nftables {_spread(times['nftables'])}; "
                f"nftables/iptables per pair {_spread(ratios)}; peak RSS iptables {peak['iptables'] / 1024:.0f} MB, "
                f"nftables {peak['nftables'] / 1024:.0f} MB",
                flush=True,
            )
    failed = []
    by = {r[0]: r for r in rows}
    if 10000 in by:
        r = statistics.median(by[10000][4])
        print(f"nftables / iptables at N=10,000 (median of {a.pairs} pairs): {r:.2f} (target <= 1.0)")
        if r > 1.0:
            failed.append("time vs iptables")
        mem = by[10000][3]["nftables"] / 1024
        print(f"peak memory at N=10,000 (nftables): {mem:.0f} MB (< 1024 MB)")
        if mem >= 1024:
            failed.append("memory")
    if 10000 in by and 30000 in by:
        g = statistics.median(by[30000][2]["nftables"]) / statistics.median(by[10000][2]["nftables"])
        print(f"nftables time(30,000) / time(10,000): {g:.2f} (linear: <= 3.3)")
        if g > 3.3:
            failed.append("growth")
    if failed:
        print("missed: " + ", ".join(failed))
    return 1 if failed and a.check else 0


if __name__ == "__main__":
    sys.exit(main())
