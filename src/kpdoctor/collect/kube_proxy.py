"""kube-proxy's side of a bundle, found from the node itself: its process, command line, config
file, version, the iptables in its image, its logs, and its healthz/metrics on loopback.

The process is found in /proc (whatever runs it: a DaemonSet, a static Pod, systemd), its files
are read through ``/proc/PID/root`` (the container's own view, so ``--config=/var/lib/kube-proxy/
config.conf`` means the file kube-proxy reads), and its binaries run chrooted there. Logs come
from the container runtime's files (``/var/log/pods``), else journald for a systemd unit; when
neither has them the caller asks the API.
"""

from __future__ import annotations

import http.client
import os
import re
import shlex
import time
from dataclasses import dataclass

from kpdoctor.collect.record import Collected, Gathered, NotCollected, Progress, utc_now
from kpdoctor.collect.runner import Runner, resolve_in_root, same_file
from kpdoctor.parse.kpconfig import Source, kube_proxy_args, parse_argv

LOG_TAIL = 32 * 1024**2  # the newest part of a log is the part that explains "now"
HEALTHZ_PORT = 10256
METRICS_PORT = 10249
LAUNCHERS = ("kube-proxy", "hyperkube", "go-runner")


@dataclass
class KubeProxyCollection(Gathered):
    pid: int | None = None
    logs_found: bool = False


def find_kube_proxy(proc_root: str) -> list[tuple[int, list[str]]]:
    """(pid, argv) of every kube-proxy process under ``proc_root`` (the node's /proc)."""
    found = []
    try:
        pids = [int(d) for d in os.listdir(proc_root) if d.isdigit()]
    except OSError:
        return []
    for pid in sorted(pids):
        try:
            with open(os.path.join(proc_root, str(pid), "cmdline"), "rb") as fh:
                raw = fh.read(256 * 1024)
        except OSError:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        # The program itself (or its wrapper), not any process that merely names it (pgrep).
        if argv and argv[0].rsplit("/", 1)[-1] in LAUNCHERS and kube_proxy_args(argv) is not None:
            found.append((pid, argv))
    return found


def collect_kube_proxy(runner: Runner, progress: Progress, *, in_node_netns: bool) -> KubeProxyCollection:
    host = runner.host
    out = KubeProxyCollection()
    progress("kube-proxy: process")
    procs = find_kube_proxy(host.path("/proc"))
    if not procs:
        out.skipped.append(NotCollected("kube-proxy/", "no kube-proxy process runs on this node"))
        _logs(runner, out, None)
        return out
    pid, argv = procs[0]
    out.pid = pid
    started, t0 = utc_now(), time.monotonic()
    out.add(
        Collected(
            "kube-proxy/cmdline.txt",
            (shlex.join(argv) + "\n").encode(),
            f"read /proc/{pid}/cmdline",
            0,
            "",
            started,
            round((time.monotonic() - t0) * 1000),
        )
    )
    flags = {k: v.value for k, v in parse_argv(kube_proxy_args(argv) or [], Source("", None, "")).items()}
    croot = host.path(f"/proc/{pid}/root")
    config = flags.get("config")
    if config:
        progress("kube-proxy: config file")
        where = resolve_in_root(croot, config)
        out.add(
            runner.read("kube-proxy/config.yaml", os.path.join(croot, where.lstrip("/")), limit=4 * 1024**2)
            if where
            else NotCollected("kube-proxy/config.yaml", f"--config={config} does not exist in kube-proxy's root")
        )
    else:
        out.skipped.append(NotCollected("kube-proxy/config.yaml", "kube-proxy runs without --config"))
    progress("kube-proxy: version")
    try:
        exe = os.readlink(host.path(f"/proc/{pid}/exe"))
    except OSError:
        exe = argv[0]
    exe = exe.removesuffix(" (deleted)")
    out.add(runner.command("kube-proxy/version.txt", [exe, "--version"], 5, root=croot))
    if not same_file(croot, host.path("/")):
        out.add(runner.command("kube-proxy/iptables-version.txt", ["iptables", "--version"], 5, root=croot))
    _logs(runner, out, pid)
    if in_node_netns:
        progress("kube-proxy: healthz and metrics")
        _http(out, "kube-proxy/healthz.json", _port(flags, "healthz-bind-address", HEALTHZ_PORT), "/healthz")
        _http(out, "kube-proxy/metrics.txt", _port(flags, "metrics-bind-address", METRICS_PORT), "/metrics")
    else:
        for path in ("kube-proxy/healthz.json", "kube-proxy/metrics.txt"):
            out.skipped.append(NotCollected(path, "not in the node's network namespace: its loopback is not reachable"))
    return out


def _port(flags: dict[str, str], flag: str, default: int) -> int:
    value = flags.get(flag, "")
    m = re.search(r":(\d+)$", value)
    return int(m.group(1)) if m else default


def _http(out: KubeProxyCollection, path: str, port: int, url: str) -> None:
    """GET http://127.0.0.1:PORT/URL: loopback only, short timeout, body capped."""
    started, t0 = utc_now(), time.monotonic()
    source = f"GET http://127.0.0.1:{port}{url}"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    try:
        conn.request("GET", url)
        resp = conn.getresponse()
        body = resp.read(16 * 1024**2)
        code = 0 if resp.status == 200 else resp.status
        out.add(
            Collected(
                path,
                body,
                source,
                code,
                "" if code == 0 else f"HTTP {resp.status} {resp.reason}",
                started,
                round((time.monotonic() - t0) * 1000),
            )
        )
    except OSError as exc:
        out.add(NotCollected(path, f"{source}: {exc.strerror or exc}"))
    finally:
        conn.close()


def _logs(runner: Runner, out: KubeProxyCollection, pid: int | None) -> None:
    host = runner.host
    logs = _cri_logs(host.path("/var/log/pods"))
    if logs:
        current, previous = logs
        out.add(runner.read("kube-proxy/log.txt", current, limit=LOG_TAIL, tail=True))
        if previous:
            out.add(runner.read("kube-proxy/log-previous.txt", previous, limit=LOG_TAIL, tail=True))
        out.logs_found = True
        return
    unit = _systemd_unit(host.path(f"/proc/{pid}/cgroup")) if pid is not None else None
    if unit:
        cmd = ["journalctl", "-u", unit, "--no-pager", "-q", "-o", "short-precise", "-n", "200000"]
        got = out.add(runner.command("kube-proxy/log.txt", cmd, 20))
        out.logs_found = isinstance(got, Collected) and bool(got.data)


def _cri_logs(pods_dir: str) -> tuple[str, str | None] | None:
    """(current, previous) log files of the newest kube-proxy Pod the runtime logged."""
    try:
        dirs = [d for d in os.listdir(pods_dir) if d.startswith("kube-system_kube-proxy")]
    except OSError:
        return None
    best: tuple[float, list[tuple[int, str]]] | None = None
    for d in dirs:
        cdir = os.path.join(pods_dir, d, "kube-proxy")
        try:
            files = [(int(f[:-4]), os.path.join(cdir, f)) for f in os.listdir(cdir) if re.fullmatch(r"\d+\.log", f)]
        except OSError:
            continue
        if not files:
            continue
        mtime = max(os.stat(p).st_mtime for _, p in files)
        if best is None or mtime > best[0]:
            best = (mtime, sorted(files))
    if best is None:
        return None
    files = best[1]
    return files[-1][1], (files[-2][1] if len(files) > 1 else None)


def _systemd_unit(cgroup_file: str) -> str | None:
    try:
        with open(cgroup_file, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    m = re.search(r"/([\w@.-]+\.service)(?:/|$)", text, re.M)
    return m.group(1) if m else None
