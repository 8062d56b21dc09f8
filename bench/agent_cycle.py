"""The node agent's cost per cycle, and its memory over a long run, on a node whose rules change.

    sudo .venv/bin/python bench/agent_cycle.py                      # 10,000 Services, 1 % changing, 20 cycles
    sudo .venv/bin/python bench/agent_cycle.py --services 2000 --cycles 5
    sudo .venv/bin/python bench/agent_cycle.py --soak 3600 --services 2000   # an hour: RSS per cycle

A lab node is a network namespace holding kube-proxy-shaped rules for N Services
(``gen_cluster.py``, loaded with real ``iptables-legacy-restore``); the cluster is the live replay
API server (tests/kubeapi_replay.py). Everything runs inside the namespace (this script re-executes
itself there), so the agent reaches the API on the namespace's loopback and reads the namespace's
rules with the node's own commands. The namespace is deleted at the end, also on failure.

Each cycle, ``--change`` of the Services (1 %) lose or regain their last endpoint, both in the
rules (an ``iptables-restore --noflush`` partial sync, as kube-proxy does it) and in their
EndpointSlices (watched by the agent). Then, interleaved and alternating which goes first:

* **agent**: ``POST /run?wait`` on a running ``kpdoctor agent``; its CPU is read from
  ``/proc/PID/stat`` (user + system of the agent and of the commands it ran and waited for),
  from the end of one cycle to the end of the next, so the watch threads' work is counted;
* **verify --live**: ``kpdoctor verify --live`` on the same node and API (what answering the same
  question without the agent costs: collection included), CPU from ``getrusage(RUSAGE_CHILDREN)``;
* **verify (files)**: ``kpdoctor verify`` of the same rules and objects saved as files.

It prints min / median / max of each and the median ratios agent / baseline. ``--against SRC``
(another checkout's ``src/``, its native core built in place) runs a second agent from that code
beside this one, on the same node and API, and cycles the two in alternating order after each
change: the agent's CPU and RSS as ratios against that code's, measured in the same run.
``--soak`` runs
cycles for that many seconds instead, printing the agent's RSS after each, and fails if the
median RSS of the last tenth of the run is more than ``--max-growth-mb`` above the median of its
second tenth (RSS after a cycle swings: what the allocator returns to the system varies).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]

import gen_cluster as gen  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int, children: bool = True) -> float:
    """User + system seconds of ``pid`` and of its waited-for children (``/proc/PID/stat``;
    ``children`` False: of the process alone, without the node's commands it ran)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + (cutime + cstime if children else 0)) / CLK


def _rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident MB of ``pid`` now (``VmHWM``: its peak so far)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _http(url: str, method: str = "GET", timeout: float = 600) -> tuple[int, str]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def stats(xs: list[float]) -> str:
    return f"{min(xs):.3f} / {statistics.median(xs):.3f} / {max(xs):.3f}"


class Churn:
    """Which Services change each cycle, and how: the same ``count`` Services toggle between
    their full endpoints and one fewer (a different set each cycle, round robin)."""

    def __init__(self, svcs: list[Any], count: int) -> None:
        self.svcs = svcs
        self.count = max(1, count)
        self.current = {i: list(s.eps) for i, s in enumerate(svcs)}
        self.offset = 0

    def next(self) -> tuple[str, list[dict[str, object]]]:
        n = len(self.svcs)
        picked = [(self.offset + k * (n // self.count)) % n for k in range(self.count)]
        self.offset += 1
        svcs, now, before, slices = [], [], [], []
        for i in picked:
            s = self.svcs[i]
            was = self.current[i]
            eps = list(s.eps) if len(was) < len(s.eps) else list(s.eps[:-1])
            self.current[i] = eps
            svcs.append(s)
            now.append(eps)
            before.append(was)
            slices.append(gen.slice_of(s, eps))
        return gen.resync(svcs, now, before), slices


def inside(a: argparse.Namespace) -> int:
    """The benchmark proper, run inside the lab namespace."""
    from kubeapi_replay import LiveCluster, ReplayServer

    work = Path(a.work)
    cluster = json.loads((work / "cluster.json").read_text())
    live = LiveCluster(cluster["items"])
    svcs = gen._services(a.services, a.endpoints)
    churn = Churn(svcs, round(a.services * a.change))
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    with ReplayServer(cluster=live) as api:
        kubeconfig = work / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
            f"clusters:\n- name: lab\n  cluster:\n    server: {api.url}\n"
            "contexts:\n- name: lab\n  context:\n    cluster: lab\n    user: lab\n"
            "users:\n- name: lab\n  user:\n    token: bench\n"
        )
        agents: list[tuple[subprocess.Popen[bytes], str]] = []
        logs = []
        try:
            for i, src in enumerate([None, a.against] if a.against else [None]):
                port = 19847 + i
                argv = [sys.executable, "-m", "kpdoctor", "agent", "--kubeconfig", str(kubeconfig), "--node", gen.NODE]
                argv += ["--every", "100000", "--full-every", str(a.full_every), "--listen", f"127.0.0.1:{port}"]
                logs.append(open(work / f"agent{i}.log", "w"))  # noqa: SIM115
                run_env = env if src is None else {**env, "PYTHONPATH": str(Path(src).resolve())}
                proc = subprocess.Popen(argv, stdout=logs[-1], stderr=subprocess.STDOUT, env=run_env, cwd=ROOT)
                agents.append((proc, f"http://127.0.0.1:{port}"))
            deadline = time.monotonic() + 900
            for i, (proc, base) in enumerate(agents):
                while not (_up(base) and _http(base + "/readyz", timeout=5)[0] == 200):
                    if proc.poll() is not None or time.monotonic() > deadline:
                        log = (work / f"agent{i}.log").read_text()[-3000:]
                        raise SystemExit(f"the agent did not become ready: {log}")
                    time.sleep(0.5)
            print(f"agent ready (first cycle, a full verification); {a.services} Services", flush=True)
            if a.soak:
                return soak(a, agents[0][0].pid, agents[0][1], churn, live)
            if a.against:
                return measure_against(a, [(p.pid, b) for p, b in agents], churn, live)
            return measure(a, agents[0][0].pid, agents[0][1], churn, live, kubeconfig, work, env)
        finally:
            for proc, _ in agents:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
            for log in logs:
                log.close()


def _up(base: str) -> bool:
    try:
        _http(base + "/healthz", timeout=5)
        return True
    except OSError:
        return False


def _change(churn: Churn, live: Any) -> None:
    payload, slices = churn.next()
    subprocess.run(["iptables-legacy-restore", "--noflush"], input=payload, text=True, check=True, timeout=120)
    for s in slices:
        live.apply(s)


def _stages(base: str) -> str:
    """How many cases the agent's last cycle evaluated, and its CPU by stage (its metrics)."""
    _, m = _http(base + "/metrics")
    key = 'kpdoctor_verification_cases{how="evaluated"}'
    ev = next((ln for ln in m.splitlines() if ln.startswith(key)), "")
    stages = [ln for ln in m.splitlines() if ln.startswith("kpdoctor_cycle_stage_cpu_seconds{")]
    split = ", ".join(ln.split('"')[1] + f" {float(ln.rsplit(' ', 1)[-1]):.2f}" for ln in stages)
    return (ev.rsplit(" ", 1)[-1] if ev else "?") + f" cases evaluated; {split}"


def _agent_cycle(pid: int, base: str, before: float) -> tuple[float, float, dict[str, Any]]:
    """One cycle on demand: (CPU since ``before``'s reading, wall seconds, its answer)."""
    t0 = time.monotonic()
    status, body = _http(base + "/run?wait=600", method="POST")
    wall = time.monotonic() - t0
    if status != 200:
        raise SystemExit(f"/run: {status} {body}")
    return _cpu_of(pid) - before, wall, json.loads(body)


def measure(
    a: argparse.Namespace, pid: int, base: str, churn: Churn, live: Any, kubeconfig: Path, work: Path,
    env: dict[str, str],
) -> int:  # fmt: skip
    agent_cpu: list[float] = []
    live_cpu: list[float] = []
    files_cpu: list[float] = []
    reuse: list[str] = []
    mark = _cpu_of(pid)
    for i in range(a.cycles):
        _change(churn, live)
        order = ["agent", "live", "files"] if i % 2 == 0 else ["files", "live", "agent"]
        for what in order:
            if what == "agent":
                cpu, _, _ = _agent_cycle(pid, base, mark)
                mark = _cpu_of(pid)
                agent_cpu.append(cpu)
                reuse.append(_stages(base))
            elif what == "live" and not a.no_live_baseline:
                c0 = _children_cpu()
                argv = [sys.executable, "-m", "kpdoctor", "verify", "--live", "--kubeconfig", str(kubeconfig)]
                argv += ["--node", gen.NODE, "--interval", "0", "--format", "json", "-o", os.devnull]
                subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, timeout=900)
                live_cpu.append(_children_cpu() - c0)
            elif what == "files":
                _save_files(work, live)
                c0 = _children_cpu()
                argv = [sys.executable, "-m", "kpdoctor", "verify", str(work / "now-rules.txt"), str(work / "now.json")]
                subprocess.run([*argv, "--node", gen.NODE, "--format", "json", "-o", os.devnull], env=env, cwd=ROOT,
                               capture_output=True, timeout=900)  # fmt: skip
                files_cpu.append(_children_cpu() - c0)
        print(
            f"cycle {i + 1}: agent {agent_cpu[-1]:.3f} s CPU ({reuse[-1]})"
            + (f", verify --live {live_cpu[-1]:.3f} s" if live_cpu else "")
            + f", verify (files) {files_cpu[-1]:.3f} s",
            flush=True,
        )
    print(f"\nCPU per cycle, min / median / max of {a.cycles} (seconds, process + children):")
    print(f"  agent            {stats(agent_cpu)}")
    if live_cpu:
        print(f"  verify --live    {stats(live_cpu)}")
    print(f"  verify (files)   {stats(files_cpu)}")
    med = statistics.median(agent_cpu)
    if live_cpu:
        print(f"agent / verify --live (medians): {med / statistics.median(live_cpu):.3f}")
    print(f"agent / verify (files) (medians): {med / statistics.median(files_cpu):.3f}")
    print(f"agent RSS: {_rss_mb(pid):.0f} MB")
    return 0


def measure_against(a: argparse.Namespace, agents: list[tuple[int, str]], churn: Churn, live: Any) -> int:
    """This code's agent and ``--against``'s, each cycle after the same change, in alternating
    order (the one that goes second reads the node a moment later, with the same rules)."""
    cpu: list[list[float]] = [[], []]
    own: list[list[float]] = [[], []]  # the agent's process alone: without the node's commands
    marks = [_cpu_of(pid) for pid, _ in agents]
    own_marks = [_cpu_of(pid, children=False) for pid, _ in agents]
    stages = ["", ""]
    for i in range(a.cycles):
        _change(churn, live)
        for k in (0, 1) if i % 2 == 0 else (1, 0):
            pid, base = agents[k]
            got, _, _ = _agent_cycle(pid, base, marks[k])
            marks[k] = _cpu_of(pid)
            cpu[k].append(got)
            mine = _cpu_of(pid, children=False)
            own[k].append(mine - own_marks[k])
            own_marks[k] = mine
            stages[k] = _stages(base)
        print(
            f"cycle {i + 1}: agent {cpu[0][-1]:.3f} s CPU ({own[0][-1]:.3f} its own; {stages[0]}), "
            f"against {cpu[1][-1]:.3f} s ({own[1][-1]:.3f}; {stages[1]})",
            flush=True,
        )
    rss = [_rss_mb(pid) for pid, _ in agents]
    print(f"\nCPU per cycle, min / median / max of {a.cycles} (seconds):")
    for label, k in (("agent", 0), ("against", 1)):
        commands = [x - y for x, y in zip(cpu[k], own[k], strict=True)]
        print(f"  {label:<8} {stats(cpu[k])}: its own {stats(own[k])}, the node's commands {stats(commands)}")
    for label, xs in (("process + commands", cpu), ("its own", own)):
        ratios = [x / y for x, y in zip(xs[0], xs[1], strict=True)]
        print(f"agent / against, {label}, per cycle: {stats(ratios)}")
    print(f"RSS: agent {rss[0]:.0f} MB, against {rss[1]:.0f} MB ({rss[0] / rss[1]:.3f})")
    return 0


def _save_files(work: Path, live: Any) -> None:
    rules = subprocess.run(["iptables-legacy-save"], capture_output=True, text=True, check=True, timeout=120).stdout
    (work / "now-rules.txt").write_text(rules)
    items = [o for kind in ("Service", "EndpointSlice", "Node") for o in live.objects(kind)]
    (work / "now.json").write_text(json.dumps({"kind": "List", "apiVersion": "v1", "items": items}))


def soak(a: argparse.Namespace, pid: int, base: str, churn: Churn, live: Any) -> int:
    t_end = time.monotonic() + a.soak
    rss: list[float] = []
    cpu: list[float] = []
    mark = _cpu_of(pid)
    while time.monotonic() < t_end:
        _change(churn, live)
        c, wall, _ = _agent_cycle(pid, base, mark)
        mark = _cpu_of(pid)
        cpu.append(c)
        rss.append(_rss_mb(pid))
        print(f"cycle {len(rss)}: {wall:.2f} s, CPU {c:.3f} s, RSS {rss[-1]:.0f} MB", flush=True)
        time.sleep(a.pause)
    # RSS after a cycle swings by tens of MB (what the allocator gives back to the system varies):
    # compare the median of the second tenth of the run (settled) with the median of the last
    tenth = max(1, len(rss) // 10)
    settled = statistics.median(rss[tenth : 2 * tenth] or rss)
    last = statistics.median(rss[-tenth:])
    growth = last - settled
    print(f"\n{len(rss)} cycles in {a.soak:.0f} s; CPU per cycle {stats(cpu)}")
    print(f"RSS: {rss[0]:.0f} MB after the first cycle; median {settled:.0f} MB in the second tenth of the run, "
          f"{last:.0f} MB in the last; min {min(rss):.0f}, max {max(rss):.0f}; "
          f"peak during the run, the first full pass included: {_rss_mb(pid, 'VmHWM'):.0f} MB")  # fmt: skip
    print(json.dumps({"cycles": len(rss), "rss_first": rss[0], "rss_settled": settled, "rss_last": last,
                      "rss_max": max(rss), "growth_mb": growth, "cpu_median": statistics.median(cpu)}))  # fmt: skip
    return 0 if growth <= a.max_growth_mb else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--services", type=int, default=10_000)
    p.add_argument("--endpoints", type=int, default=5)
    p.add_argument("--change", type=float, default=0.01, help="share of the Services changing per cycle")
    p.add_argument("--cycles", type=int, default=20)
    p.add_argument("--full-every", type=int, default=1000, help="the agent's --full-every")
    p.add_argument("--no-live-baseline", action="store_true", help="skip `verify --live` (faster)")
    p.add_argument("--soak", type=float, default=0.0, metavar="SECONDS")
    p.add_argument("--pause", type=float, default=0.0, help="seconds between soak cycles")
    p.add_argument("--max-growth-mb", type=float, default=20.0)
    p.add_argument("--against", metavar="SRC", help="another checkout's src/: its agent, cycled interleaved")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.inside:
        return inside(a)
    if os.geteuid() != 0:
        print("needs root (a network namespace, iptables)", file=sys.stderr)
        return 2
    from lab.netns import Netns

    with tempfile.TemporaryDirectory(prefix="kpd-agent-bench-") as tmp, Netns("kpdab") as ns:
        work = Path(tmp)
        gen.write(work, a.services, a.endpoints)
        for argv in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1"],
            ["ip", "addr", "add", f"{gen.NODE_IP}/24", "dev", "eth0"],
            ["ip", "link", "set", "eth0", "up"],
        ):
            ns.check(argv)
        with open(work / "restore.txt") as fh:
            ns.check(["iptables-legacy-restore"], input=fh.read(), timeout=600)
        me = [sys.executable, str(Path(__file__).resolve()), "--inside", "--work", str(work)]
        for k, v in vars(a).items():
            if k in ("inside", "work") or v is False or v is None:
                continue
            me += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
        return subprocess.run(ns.exec_argv(me), timeout=None).returncode


if __name__ == "__main__":
    raise SystemExit(main())
