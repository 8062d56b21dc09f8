"""`kpdoctor verify` of an IPVS-mode node against the same node in iptables mode, in one run.

For N Services x 5 endpoints (bench/gen_cluster.py writes the same cluster in both modes: an
`iptables-save` dump, and the IPVS node's `ipvsadm -Sn`, `ipset save`, `iptables-save` and
`ip addr`), runs `kpdoctor verify` on each form in fresh processes, interleaved (iptables, ipvs,
iptables...), and prints min/median/max of each, the ratio of each pair, and the targets the
project holds the IPVS backend to: ipvs / iptables at N = 10,000 <= 1.0 (median of the pairs),
time(30,000) / time(10,000) <= 3.3 (linear) and peak memory < 1 GB at 10,000.

    .venv/bin/python bench/verify_ipvs.py                       # N = 10,000 and 30,000, 5 pairs
    .venv/bin/python bench/verify_ipvs.py --sizes 2000 --pairs 3   # quick
    .venv/bin/python bench/verify_ipvs.py --check               # exit 1 when a target is missed

The IPVS run is given the node's four files (ipvsadm-save.txt, ipset-save.txt, iptables-save.txt,
ip-addr.txt) and cluster.json; the iptables run iptables-save.txt and cluster.json. Both must verify
clean (exit 0).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gen_cluster import IPVS_FILES, write  # noqa: E402
from mode_pairs import Row, measure, targets  # noqa: E402


def _ipvs_node(out: Path, n: int) -> list[Path]:
    _, cluster = write(out, n, 5, mode="ipvs")
    return [*(out / name for name in IPVS_FILES), cluster]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 30000])
    ap.add_argument("--pairs", type=int, default=5, help="interleaved iptables/ipvs runs per size")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    a = ap.parse_args()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="kpd-bench-ipvs-") as tmp:
        for n in a.sizes:
            rows.append(measure("ipvs", n, a.pairs, Path(tmp), _ipvs_node))
    failed = targets("ipvs", rows, a.pairs)
    return 1 if failed and a.check else 0


if __name__ == "__main__":
    sys.exit(main())
