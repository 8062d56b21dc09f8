"""The node agent's memory for a large cluster: one list of N Services and their EndpointSlices.

    .venv/bin/python bench/agent_memory.py                                   # 100,000 Services, 3 runs
    .venv/bin/python bench/agent_memory.py --services 300000 --runs 5
    .venv/bin/python bench/agent_memory.py --base HEAD --runs 3              # against a base commit, interleaved
    .venv/bin/python bench/agent_memory.py --services 20000 --check 300      # exit 1 above 300 MB per 100k

A loopback API server (``tests/kubeapi_replay.BulkServer``, in a process of its own) serves N
Services and one EndpointSlice each, shaped as kube-apiserver returns them (``managedFields``,
kubectl's last-applied annotation: ``bulk_service``/``bulk_slice``), in the pages the client asks
for. Each run is a fresh child interpreter that imports the agent, reads its resident size (the
baseline), runs the agent's list-and-watch (``agent/cluster.ClusterCache``) until every resource
is listed, then hands a cycle its artifacts once (``snapshot``: the objects parsed, as a cycle
gets them), and prints its peak resident size after each step (``VmHWM``, which is the child's
``ru_maxrss``; the parent is kept small so that none of it is inherited).

It prints min / median / max of the growth above the baseline per 100,000 Services, after the
lists (``list``: what the agent keeps, and the pages in flight) and after the snapshot. With
``--base COMMIT`` the same runs use that commit's ``src/`` (a temporary git worktree, as
bench/regress.py does), alternating which side goes first, and the ratio of the medians is given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, re, resource, sys, time

def mem():
    text = open("/proc/self/status").read()
    return {k: int(re.search(k + r":\s+(\d+)", text)[1]) / 1024 for k in ("VmHWM", "VmRSS")}

from kubernetes import client as k8s
from kpdoctor.agent.cluster import ClusterCache
from kpdoctor.agent.loop import Agent, AgentOptions
url, node, cycle = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
base = mem()
api = k8s.ApiClient(k8s.Configuration(host=url))
cache = ClusterCache(api, node)
t0 = time.monotonic()
cache.start()
synced = cache.wait_synced(3600)
took = time.monotonic() - t0
listed = mem()
got, absent = cache.snapshot()
count = {a.path: len(a.parsed.items) for a in got if a.parsed is not None}
del got, absent
snap = mem()
out = {"synced": synced, "errors": cache.errors(), "seconds": round(took, 2), "base": base, "listed": listed,
       "snapshot": snap, "objects": count, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if cycle:
    agent = Agent(AgentOptions(node=node, nice=0), cluster=cache, collect=lambda: ([], []))
    agent.run_cycle()
    out["cycle"] = mem()
print(json.dumps(out), flush=True)
os._exit(0)  # the watch threads are still reading: no interpreter teardown under them
"""


def _serve(services: int, portfile: Path) -> int:
    """The API server's process: serve until killed."""
    sys.path.insert(0, str(REPO / "tests"))
    from kubeapi_replay import BulkServer, bulk_objects

    with BulkServer(bulk_objects(services)) as server:
        tmp = portfile.with_suffix(".tmp")
        tmp.write_text(server.url)
        tmp.replace(portfile)
        while True:
            time.sleep(3600)


def _run(src: Path, url: str, cycle: bool) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(src))
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env.pop(var, None)
    res = subprocess.run([sys.executable, "-c", CHILD, url, "bulk-node", "1" if cycle else "0"], env=env,
                         capture_output=True, text=True, timeout=3600)  # fmt: skip
    if res.returncode != 0:
        raise SystemExit(f"{src}: the child failed: {res.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    if not out["synced"] or out["errors"]:
        raise SystemExit(f"{src}: the lists did not end: {out['errors']}")
    return out


def _per100k(out: dict[str, Any], step: str, services: int) -> float:
    return (out[step]["VmHWM"] - out["base"]["VmRSS"]) * 100_000 / services


def _mmm(xs: list[float]) -> str:
    return f"{min(xs):7.1f} / {statistics.median(xs):7.1f} / {max(xs):7.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--services", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--base", help="a commit to compare with (its src/, from a temporary git worktree)")
    ap.add_argument("--cycle", action="store_true", help="also run one agent cycle (no node evidence) after the lists")
    ap.add_argument("--check", type=float, default=0.0, metavar="MB",
                    help="exit 1 when the median growth after the lists is above MB per 100,000 Services")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--portfile", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        return _serve(a.services, a.portfile)

    with tempfile.TemporaryDirectory(prefix="kpd-agent-mem-") as tmp:
        portfile = Path(tmp) / "url"
        server = subprocess.Popen([sys.executable, __file__, "--serve", "--services", str(a.services),
                                   "--portfile", str(portfile)])  # fmt: skip
        tree = Path(tmp) / "base"
        try:
            deadline = time.monotonic() + 600
            while not portfile.exists():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the API server did not start")
                time.sleep(0.2)
            url = portfile.read_text()
            sides: dict[str, Path] = {"new": REPO / "src"}
            if a.base:
                subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), a.base], check=True,
                               capture_output=True, timeout=120)  # fmt: skip
                sides["base"] = tree / "src"
            print(f"{a.services} Services + {a.services} EndpointSlices at {url}; {a.runs} runs per side", flush=True)
            results: dict[str, list[dict[str, Any]]] = {k: [] for k in sides}
            for i in range(a.runs):
                order = list(sides) if i % 2 == 0 else list(reversed(sides))
                for side in order:
                    out = _run(sides[side], url, a.cycle)
                    results[side].append(out)
                    listed, snap = _per100k(out, "listed", a.services), _per100k(out, "snapshot", a.services)
                    steps = f"list {listed:.0f}, snapshot {snap:.0f}"
                    if a.cycle:
                        steps += f", cycle {_per100k(out, 'cycle', a.services):.0f}"
                    print(f"run {i + 1} {side:4}: {out['seconds']:.1f} s to list; MB per 100k Services above the "
                          f"baseline ({out['base']['VmRSS']:.0f} MB): {steps}; peak {out['maxrss_mb']:.0f} MB "
                          f"(ru_maxrss)", flush=True)  # fmt: skip
        finally:
            server.kill()
            server.wait(timeout=30)
            if a.base:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                               capture_output=True, timeout=120)  # fmt: skip
    print("\nMB of resident memory per 100,000 Services (and their EndpointSlices) above the baseline, "
          "min / median / max:")
    steps = ["listed", "snapshot", *(["cycle"] if a.cycle else [])]
    med: dict[tuple[str, str], float] = {}
    for side, outs in results.items():
        for step in steps:
            xs = [_per100k(o, step, a.services) for o in outs]
            med[(side, step)] = statistics.median(xs)
            print(f"  {side:4} {step:8} {_mmm(xs)}")
        secs, base = [o["seconds"] for o in outs], statistics.median([o["base"]["VmRSS"] for o in outs])
        print(f"  {side:4} seconds to list {_mmm(secs)}; baseline {base:.0f} MB")
    if "base" in results:
        for step in steps:
            print(f"  new/base ({step}, medians): {med[('new', step)] / med[('base', step)]:.3f}")
    if a.check and med[("new", "listed")] > a.check:
        print(f"above {a.check:g} MB per 100,000 Services after the lists")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
