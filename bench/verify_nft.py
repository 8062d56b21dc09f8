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
from mode_pairs import Row, measure, targets  # noqa: E402


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


def _nft_node(out: Path, n: int) -> list[Path]:
    listing, cluster = write(out, n, 5, mode="nftables")
    return [listing, cluster]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 30000])
    ap.add_argument("--pairs", type=int, default=5, help="interleaved iptables/nftables runs per size")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--nft-baseline", action="store_true", help="also time `nft -c -f` on the rules (slow)")
    a = ap.parse_args()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="kpd-bench-nft-") as tmp:
        for n in a.sizes:
            row = measure("nftables", n, a.pairs, Path(tmp), _nft_node)
            rows.append(row)
            if a.nft_baseline:
                check = _nft_check(Path(tmp) / f"nftables{n}" / "ruleset.nft")
                if check is not None:
                    med = statistics.median(row.times["nftables"])
                    print(f"N={n:,}: nft -c -f {check:.1f} s; kpdoctor verify (nftables) / nft -c: {med / check:.3f}")
    failed = targets("nftables", rows, a.pairs)
    return 1 if failed and a.check else 0


if __name__ == "__main__":
    sys.exit(main())
