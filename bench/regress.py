"""Is this change slower than a base commit? `verify` and the log scan, old and new interleaved.

A change may cost speed only on purpose. This checks out the base commit into a temporary git
worktree and runs the same end-to-end commands with the base's sources and with this working
tree's, alternating (base, new, base, new...) so that the machine's load falls on both alike,
and prints min / median / max seconds of each, wall and CPU (user + system, from wait4), and the
ratio of the medians (new / base):

* ``verify``: ``kpdoctor verify iptables-save.txt cluster.json`` on a generated cluster
  (bench/gen_cluster.py, N Services x 5 endpoints);
* ``diagnose log``: ``kpdoctor diagnose`` on a generated kube-proxy log (bench/gen_kubeproxy_log.py,
  a failure record every 4 lines: the scan's worst case) — the log scan end to end.

    .venv/bin/python bench/regress.py --base HEAD~3                 # 5 pairs each (default)
    .venv/bin/python bench/regress.py --base c534843 --pairs 7 --services 10000 --log-mb 64
    .venv/bin/python bench/regress.py --base c534843 --check        # exit 1 above --max-ratio (1.05)

Both sides run the same interpreter and installed dependencies; only ``src/`` differs (put first
on ``PYTHONPATH``), and each walks rules with the native core of its own ``rust/`` (the base's
built with cargo when it differs). The worktree is removed afterwards.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gen_cluster  # noqa: E402
import gen_kubeproxy_log  # noqa: E402


def _core_for_base(tree: Path, base: str) -> str:
    """The native core (``kpdoctor._core``, built by ``pip install``, not in git) for the base's
    sources: this tree's build when the base's ``rust/`` is the same; otherwise built from the
    base's own ``rust/`` with cargo (its target folder outside the work tree), so that each side
    walks the rules with its own core; the base's Python walk only when that cannot be done."""
    built = sorted((REPO / "src" / "kpdoctor").glob("_core*.so"))
    if not (tree / "rust").is_dir():
        return "the base has no native core: both sides as they are"
    same = subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", base, "--", "rust"], capture_output=True)
    if built and same.returncode == 0:
        shutil.copy2(built[0], tree / "src" / "kpdoctor" / built[0].name)
        return f"the base's rust/ is this tree's: both sides use the core built here ({built[0].name})"
    cargo = shutil.which("cargo")
    if cargo is None:
        return "the base's rust/ differs and cargo is not here: the base walks rules in Python"
    target = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kpdoctor" / "cargo-target-regress"
    t0 = time.perf_counter()
    res = subprocess.run(
        [cargo, "build", "--release", "--locked", "--quiet", "--manifest-path", str(tree / "rust" / "Cargo.toml")],
        env=dict(os.environ, CARGO_TARGET_DIR=str(target)),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    lib = target / "release" / "lib_core.so"
    if res.returncode != 0 or not lib.exists():
        return f"the base's rust/ differs and its core did not build ({res.stderr.strip()[-300:]}): Python walk"
    shutil.copy2(lib, tree / "src" / "kpdoctor" / "_core.abi3.so")
    return f"the base's rust/ differs: its own core built from it ({time.perf_counter() - t0:.0f} s)"


def _run(src: Path, argv: Sequence[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system of the process, from wait4) of one run."""
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("KPDOCTOR_DEBUG", None)
    t0 = time.perf_counter()
    with subprocess.Popen(
        [sys.executable, "-m", "kpdoctor", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    took = time.perf_counter() - t0
    if proc.returncode not in (0, 1, 3):
        raise SystemExit(f"{src}: kpdoctor {' '.join(argv)} exited {proc.returncode}: {err.decode()[-500:]}")
    return took, usage.ru_utime + usage.ru_stime


Runs = list[tuple[float, float]]


def _pairs(base: Path, new: Path, argv: Sequence[str], pairs: int) -> tuple[Runs, Runs]:
    # both sides' bytecode compiled first: a run would not write it under PYTHONDONTWRITEBYTECODE,
    # and the side without it would pay for compiling every module in each timed run
    for src in (base, new):
        compileall.compile_dir(str(src / "kpdoctor"), quiet=1)
    _run(base, argv), _run(new, argv)  # warm the page cache, untimed
    b: Runs = []
    n: Runs = []
    for i in range(pairs):
        first, second = (base, new) if i % 2 == 0 else (new, base)  # alternate which goes first
        t1, t2 = _run(first, argv), _run(second, argv)
        (b if first is base else n).append(t1)
        (n if first is base else b).append(t2)
    return b, n


def _line(name: str, b: Runs, n: Runs) -> tuple[str, float]:
    """Wall and CPU min / median / max of each side, and the ratio of the medians (the larger of
    the two is what --check holds)."""

    def mmm(xs: list[float]) -> str:
        return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}"

    out, worst = [], 0.0
    for i, what in ((0, "wall"), (1, "CPU")):
        bs, ns = [r[i] for r in b], [r[i] for r in n]
        ratio = statistics.median(ns) / statistics.median(bs)
        worst = max(worst, ratio)
        out.append(f"{name:14} {what:4} base {mmm(bs)} s   new {mmm(ns)} s   new/base (medians) {ratio:.3f}")
    return "\n".join(out), worst


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the commit to compare with (e.g. HEAD~3, a hash)")
    ap.add_argument("--pairs", type=int, default=5, help="interleaved base/new pairs per command (default 5)")
    ap.add_argument("--services", type=int, default=10000, help="Services in the verify cluster (default 10,000)")
    ap.add_argument("--log-mb", type=int, default=64, help="size of the generated log (default 64 MB)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a ratio is above --max-ratio")
    ap.add_argument("--max-ratio", type=float, default=1.05)
    a = ap.parse_args(argv)
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", a.base], capture_output=True, text=True)
    if rev.returncode:
        print(f"no such commit: {a.base}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kpdoctor-regress-") as tmp:
        work = Path(tmp)
        tree = work / "base"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), a.base], check=True, capture_output=True
        )
        try:
            print(f"base {rev.stdout.strip()} vs this working tree; {a.pairs} interleaved pairs each", flush=True)
            print(_core_for_base(tree, a.base), flush=True)
            save, cluster = gen_cluster.write(work / "cluster", a.services, 5)
            log = work / "kube-proxy.log"
            gen_kubeproxy_log.generate(log, a.log_mb, failure_every=4)
            worst = 0.0
            for name, args in (
                (f"verify {a.services}", ["verify", str(save), str(cluster)]),
                (f"diagnose {a.log_mb} MB", ["diagnose", str(log)]),
            ):
                b, n = _pairs(tree / "src", REPO / "src", args, a.pairs)
                text, ratio = _line(name, b, n)
                print(text, flush=True)
                worst = max(worst, ratio)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True)
    if a.check and worst > a.max_ratio:
        print(f"slower than the base: {worst:.3f} > {a.max_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
