"""Benchmark: ``redact_secrets`` throughput on a kube-proxy log, one code tree against another.

The same input is scrubbed by each ``--src`` tree (default: a pre-change copy, if given, and this
checkout's ``src/``) in a fresh child process per run, the trees taking turns (A B, then B A, ...)
so that a noisy machine slows both alike. Each child reads the file, then times
``redact_secrets(path, data)`` alone (wall and CPU); the parent prints min / median / max per tree
and input, and whether the trees' outputs are identical.

Inputs: the sparse 64 MiB log of ``gen_kubeproxy_log.py`` (no line holds a secret; about one in 8
holds a trigger word, ``://``), and the same log with a secret-bearing line (klog lines quoting
kubeconfigs, request bodies, headers, ``ps`` lines with passwords) after every ``--dense-every``
lines: what the line rules cost when they fire. ``--rules`` adds a kube-proxy iptables-save of
``gen_cluster.py`` (10,000 Services, 25 MB), which the agent scrubs every cycle.

Usage: python bench/redact.py [--src DIR]... [--size-mb 64] [--runs 5] [--dense-every 1000]
       [--rules] [--log FILE] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))

from gen_kubeproxy_log import generate  # noqa: E402

CHILD = r"""
import hashlib, json, sys, time
from kpdoctor.collect.redact import redact_secrets
data = open(sys.argv[1], "rb").read()
w, c = time.perf_counter(), time.process_time()
out = redact_secrets(sys.argv[2], data)
w, c = time.perf_counter() - w, time.process_time() - c
changed = sum(a != b for a, b in zip(data.split(b"\n"), out.split(b"\n")))
print(json.dumps({"wall": w, "cpu": c, "bytes": len(data), "sha": hashlib.sha256(out).hexdigest(),
                  "lines_changed": changed, "lines_equal": out.count(b"\n") == data.count(b"\n")}))
"""

K = "I1113 16:20:{s:02d}.{u:06d}       1 "
SECRET_LINES = [
    K + "round_trippers.go:553]     Authorization: Bearer {t}\n",
    K + "round_trippers.go:553]     X-Auth-Token: {t}\n",
    K + 'loader.go:372] "Config loaded" content="users: - user: client-key-data: {t}"\n',
    K + 'request.go:1] "Request Body" body="{{\\"kind\\":\\"TokenRequest\\",\\"token\\":\\"{t}\\"}}"\n',
    K + "rest.go:1] config &{{Host:https://10.96.0.1:443 Username:admin Password:{t} QPS:5}}\n",
    K + "proxier.go:1] headers=map[Accept:[*/*] Cookie:[session={t}]]\n",
    K + "exec.go:1] running mysqladmin -uroot -p{t} ping\n",
    K + "client.go:1] connecting to https://admin:{t}@10.96.0.1:443/api\n",
]


def dense(src: Path, dst: Path, every: int) -> int:
    """``src`` with a secret-bearing line after every ``every`` lines; how many were added."""
    n = added = 0
    with src.open("rb") as fi, dst.open("wb") as fo:
        for line in fi:
            fo.write(line)
            n += 1
            if n % every == 0:
                t = f"tok{n:012d}QkZ8xYpLm3"
                fo.write(SECRET_LINES[added % len(SECRET_LINES)].format(s=n % 60, u=n % 10**6, t=t).encode())
                added += 1
    return added


def run(src: Path, path: Path, name: str) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(src))
    res = subprocess.run([sys.executable, "-c", CHILD, str(path), name], capture_output=True, env=env, check=True)
    out: dict[str, object] = json.loads(res.stdout)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", type=Path, help="a tree's src/ (repeatable; default: this checkout)")
    ap.add_argument("--size-mb", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dense-every", type=int, default=1000, help="a secret line after every N lines (0: none)")
    ap.add_argument("--rules", action="store_true", help="also a 10,000-Service iptables-save (gen_cluster.py)")
    ap.add_argument("--log", type=Path, help="an existing kube-proxy log instead of a generated one")
    ap.add_argument("--keep", action="store_true", help="write the inputs to bench/out/ and keep them")
    args = ap.parse_args()
    srcs = [s.resolve() for s in (args.src or [SRC])]
    out_dir = HERE / "out" if args.keep else Path(tempfile.mkdtemp(prefix="kpdoctor-redact-"))
    out_dir.mkdir(exist_ok=True)
    inputs: list[tuple[str, Path, str]] = []
    log = args.log
    if log is None:
        log = out_dir / f"kube-proxy-{args.size_mb}mb.log"
        if not log.exists():
            generate(log, args.size_mb)
    inputs.append(("sparse log", log, "kube-proxy/log.txt"))
    if args.dense_every:
        d = out_dir / f"{log.stem}-secrets{args.dense_every}.log"
        added = dense(log, d, args.dense_every)
        inputs.append((f"log + {added:,} secret lines", d, "kube-proxy/log.txt"))
    if args.rules:
        rules = out_dir / "cluster-10000"
        if not (rules / "iptables-save.txt").exists():
            gen = [sys.executable, str(HERE / "gen_cluster.py"), str(rules), "--services", "10000"]
            subprocess.run(gen, check=True, stdout=subprocess.DEVNULL)
        inputs.append(("iptables-save, 10,000 Services", rules / "iptables-save.txt", "node/iptables-legacy-save.txt"))
    for label, path, name in inputs:
        path.read_bytes()  # page cache
        size = path.stat().st_size
        results: dict[Path, list[dict[str, object]]] = {s: [] for s in srcs}
        for r in range(args.runs):
            for s in srcs if r % 2 == 0 else srcs[::-1]:
                results[s].append(run(s, path, name))
        print(f"\n{label}: {path.name}, {size / 1e6:.1f} MB, {args.runs} runs per tree, interleaved")
        head = f"{'wall s min / median / max':>28} {'MB/s (median)':>14} {'cpu s median':>13}"
        print(f"  {'tree':44} {head}  lines changed")
        for s in srcs:
            walls = sorted(float(str(x["wall"])) for x in results[s])
            cpu = statistics.median(float(str(x["cpu"])) for x in results[s])
            med = statistics.median(walls)
            last = results[s][-1]
            print(
                f"  {s!s:44} {walls[0]:8.3f} / {med:.3f} / {walls[-1]:.3f} {size / 1e6 / med:14.1f} {cpu:13.3f}"
                f"  {last['lines_changed']:,}{'' if last['lines_equal'] else ' (LINE COUNT CHANGED)'}"
            )
        shas = {str(x["sha"]) for s in srcs for x in results[s]}
        print(f"  outputs: {'identical' if len(shas) == 1 else 'differ'} across trees and runs")
    if not args.keep:
        for f in sorted(out_dir.rglob("*"), reverse=True):
            f.unlink() if f.is_file() else f.rmdir()
        out_dir.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
