"""kube-proxy's side of a bundle, found from the node itself: its process, command line, config
file, version, the iptables in its image, its logs, and its healthz/metrics on loopback.

The process is found in /proc (whatever runs it: a DaemonSet, a static Pod, systemd), and trusted
only when it runs as root from a root-owned kube-proxy binary: any local user can start a process
that calls itself kube-proxy (docs/security.md). Its files are read through ``/proc/PID/root``
(the container's own view, so ``--config=/var/lib/kube-proxy/config.conf`` means the file
kube-proxy reads) with its own identity, and kept only when they are what the flag names (a
KubeProxyConfiguration); its binaries run chrooted there as ``nobody``. Logs come from the
container runtime's files (``/var/log/pods``), else journald for a systemd unit; when neither has
them the caller asks the API.
"""

from __future__ import annotations

import http.client
import os
import re
import shlex
import stat
import time
from dataclasses import dataclass

from kpdoctor.collect.node_files import NodeFileError, node_text, read_node_file, resolve_dir
from kpdoctor.collect.record import Collected, Gathered, NotCollected, Progress, utc_now
from kpdoctor.collect.runner import Identity, Runner, same_file
from kpdoctor.parse.kpconfig import Source, kube_proxy_args, parse_argv
from kpdoctor.parse.structured import StructuredError, load_yaml_all

PODS_DIR = "/var/log/pods"  # the kubelet's Pod logs: NAMESPACE_POD_UID/CONTAINER/N.log
LOG_TAIL = 32 * 1024**2  # the newest part of a log is the part that explains "now"
CONFIG_LIMIT = 4 * 1024**2
HEALTHZ_PORT = 10256
METRICS_PORT = 10249
LAUNCHERS = ("kube-proxy", "hyperkube", "go-runner")
# The binaries kube-proxy really runs from: its own, hyperkube, and the multi-call binaries of
# k3s, rke2 and k0s (a kube-proxy symlink to them). go-runner only starts it: its child is the one.
PROGRAMS = ("kube-proxy", "hyperkube", "k3s", "rke2", "k0s")


@dataclass
class KubeProxyCollection(Gathered):
    pid: int | None = None
    logs_found: bool = False


def find_kube_proxy(root: str) -> list[tuple[int, list[str]]]:
    """(pid, argv) of every kube-proxy process in the node's /proc (``root``: the node's /)."""
    found = []
    proc = resolve_dir(root, "/proc")
    try:
        pids = [int(d) for d in os.listdir(proc) if d.isdigit()] if proc else []
    except OSError:
        return []
    for pid in sorted(pids):
        try:
            raw = read_node_file(root, f"/proc/{pid}/cmdline", 256 * 1024)[0]
        except NodeFileError:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        # The program itself (or its wrapper), not any process that merely names it (pgrep).
        if argv and argv[0].rsplit("/", 1)[-1] in LAUNCHERS and kube_proxy_args(argv) is not None:
            found.append((pid, argv))
    return found


def distrust(root: str, pid: int) -> str | None:
    """Why process ``pid`` is not to be trusted as kube-proxy; None when it is.

    kube-proxy always runs as root (real and effective) from a binary that root owns and only root
    may write. Anything else calling itself kube-proxy may be any user's program: its binary must
    not be run, nor the files its flags name read, by a collector running as root."""
    base = os.path.join(root, "proc", str(pid))
    who = Identity.of(root, pid)
    if who is None:
        return "its /proc/PID/status cannot be read"
    if not who.root:
        return f"it runs as uid {who.uid} (effective {who.euid}), and kube-proxy runs as root"
    try:
        exe = os.readlink(os.path.join(base, "exe")).removesuffix(" (deleted)")
        st = os.stat(os.path.join(base, "exe"))
    except OSError as exc:
        return f"its binary cannot be looked at ({exc.strerror or exc})"
    if exe.rsplit("/", 1)[-1] not in PROGRAMS:
        return f"its binary is {exe}, not {', '.join(PROGRAMS[:-1])} or {PROGRAMS[-1]}"
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0:
        return f"its binary {exe} is owned by uid {st.st_uid}, not root"
    if st.st_mode & 0o022:
        return f"its binary {exe} may be written by others (mode {stat.filemode(st.st_mode)})"
    return None


def collect_kube_proxy(
    runner: Runner, progress: Progress, *, in_node_netns: bool, log_tail: int = LOG_TAIL
) -> KubeProxyCollection:
    host = runner.host
    out = KubeProxyCollection()
    progress("kube-proxy: process")
    trusted: list[tuple[int, list[str]]] = []
    for pid, argv in find_kube_proxy(host.root):
        why = distrust(host.root, pid)
        if why is None:
            trusted.append((pid, argv))
        elif argv[0].rsplit("/", 1)[-1] != "go-runner":  # it starts kube-proxy: its child is checked
            shown = shlex.join(argv)[:200]
            out.skipped.append(
                NotCollected("kube-proxy/", f"process {pid} (`{shown}`) is not trusted as kube-proxy: {why}; "
                             "nothing of it was run or read")
            )
    if not trusted:
        out.skipped.append(NotCollected("kube-proxy/", "no kube-proxy process runs on this node"))
        _logs(runner, out, None, log_tail)
        return out
    pid, argv = trusted[0]
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
        out.add(_config(runner, croot, config, Identity.of(host.root, pid)))
    else:
        out.skipped.append(NotCollected("kube-proxy/config.yaml", "kube-proxy runs without --config"))
    progress("kube-proxy: version")
    out.add(_version(runner, host.path(f"/proc/{pid}/exe"), croot))
    if not same_file(croot, host.path("/")):
        out.add(runner.command("kube-proxy/iptables-version.txt", ["iptables", "--version"], 5, root=croot))
    _logs(runner, out, pid, log_tail)
    if in_node_netns:
        progress("kube-proxy: healthz and metrics")
        _http(out, "kube-proxy/healthz.json", _port(flags, "healthz-bind-address", HEALTHZ_PORT), "/healthz")
        _http(out, "kube-proxy/metrics.txt", _port(flags, "metrics-bind-address", METRICS_PORT), "/metrics")
    else:
        for path in ("kube-proxy/healthz.json", "kube-proxy/metrics.txt"):
            out.skipped.append(NotCollected(path, "not in the node's network namespace: its loopback is not reachable"))
    return out


def _config(runner: Runner, croot: str, config: str, who: Identity | None) -> Collected | NotCollected:
    """The file ``--config`` names, read as kube-proxy would read it, kept only when it is a
    KubeProxyConfiguration: a flag must not turn the bundle into a copy of any file on the node."""
    path = "kube-proxy/config.yaml"
    if who is None:
        return NotCollected(path, "kube-proxy exited before its config file could be read")
    got = runner.read_as(path, croot, config, who, CONFIG_LIMIT)
    if not isinstance(got, Collected):
        return NotCollected(path, f"--config={config}: {got.reason}")
    try:
        docs = load_yaml_all(got.data.decode("utf-8", errors="replace"))
    except StructuredError as exc:
        return NotCollected(path, f"--config={config} is not a KubeProxyConfiguration ({exc}): not stored")
    kind = docs[0].get("kind") if docs and isinstance(docs[0], dict) else None
    if kind != "KubeProxyConfiguration":
        return NotCollected(path, f"--config={config} is not a KubeProxyConfiguration (kind {kind!r}): not stored")
    return got


def _version(runner: Runner, exe_link: str, croot: str) -> Collected | NotCollected:
    """``kube-proxy --version`` of the binary the process runs, run unprivileged in its root. A
    binary replaced on disk since the process started (an upgrade) would tell another version:
    then the log or the image tag tell it instead."""
    path = "kube-proxy/version.txt"
    try:
        exe = os.readlink(exe_link)
        running = os.stat(exe_link)
    except OSError as exc:
        return NotCollected(path, f"kube-proxy's binary cannot be looked at ({exc.strerror or exc})")
    if exe.endswith(" (deleted)"):
        return NotCollected(path, f"kube-proxy's binary {exe.removesuffix(' (deleted)')} was replaced since it started")
    try:
        # a root the collector can see (a chroot) shows in the link from the outside: make it inner
        outer = os.readlink(croot).rstrip("/")
    except OSError:
        outer = ""
    if outer and exe.startswith(outer + "/"):
        exe = exe[len(outer) :]
    try:
        on_disk = os.stat(os.path.join(croot, exe.lstrip("/")), follow_symlinks=False)
    except OSError:
        on_disk = None
    if on_disk is None or (on_disk.st_dev, on_disk.st_ino) != (running.st_dev, running.st_ino):
        return NotCollected(path, f"{exe} in kube-proxy's root is not the binary it runs: not run")
    return runner.command(path, [exe, "--version"], 5, root=croot)


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


def _logs(runner: Runner, out: KubeProxyCollection, pid: int | None, tail: int = LOG_TAIL) -> None:
    host = runner.host
    logs = _cri_logs(host.root)
    if logs:
        current, previous = logs
        out.add(runner.read("kube-proxy/log.txt", current, limit=tail, tail=True))
        if previous:
            out.add(runner.read("kube-proxy/log-previous.txt", previous, limit=tail, tail=True))
        out.logs_found = True
        return
    unit = _systemd_unit(host.root, pid) if pid is not None else None
    if unit:
        lines = "200000" if tail >= LOG_TAIL else str(max(1000, tail // 200))  # about 200 bytes a line
        cmd = ["journalctl", "-u", unit, "--no-pager", "-q", "-o", "short-precise", "-n", lines]
        got = out.add(runner.command("kube-proxy/log.txt", cmd, 20))
        out.logs_found = isinstance(got, Collected) and bool(got.data)


def _cri_logs(root: str) -> tuple[str, str | None] | None:
    """(current, previous) log files (paths on the node) of the newest kube-proxy Pod the runtime
    logged. A log may be a link (dockershim's point into /var/lib/docker), dangling after the
    runtime changed: it still counts here, and reading it says why it was not read."""
    pods_dir = resolve_dir(root, PODS_DIR)
    try:
        dirs = [d for d in os.listdir(pods_dir) if d.startswith("kube-system_kube-proxy")] if pods_dir else []
    except OSError:
        return None
    best: tuple[float, list[tuple[int, str]]] | None = None
    for d in dirs:
        cdir = os.path.join(pods_dir or "", d, "kube-proxy")
        try:
            names = [f for f in os.listdir(cdir) if re.fullmatch(r"\d+\.log", f)]
        except OSError:
            continue
        if not names:
            continue
        files = [(int(f[:-4]), f"{PODS_DIR}/{d}/kube-proxy/{f}") for f in names]
        mtime = max(_mtime(os.path.join(cdir, f)) for f in names)
        if best is None or mtime > best[0]:
            best = (mtime, sorted(files))
    if best is None:
        return None
    files = best[1]
    return files[-1][1], (files[-2][1] if len(files) > 1 else None)


def _mtime(path: str) -> float:
    """When a log (or, for a dangling link, the link) last changed; 0 if it cannot be told."""
    for follow in (True, False):
        try:
            return os.stat(path, follow_symlinks=follow).st_mtime
        except OSError:
            continue
    return 0.0


def _systemd_unit(root: str, pid: int) -> str | None:
    text = node_text(root, f"/proc/{pid}/cgroup", 64 * 1024)
    if text is None:
        return None
    m = re.search(r"/([\w@.-]+\.service)(?:/|$)", text, re.M)
    return m.group(1) if m else None
