"""kube-proxy's side of a bundle, found from the node itself: its process, command line, config
file, version, the iptables in its image, its logs, and its healthz/metrics on loopback.

The process is found in /proc (whatever runs it: a DaemonSet, a static Pod, systemd, a shell's
``nohup``), and trusted only when it runs as root from a root-owned kube-proxy binary: any local
user can start a process that calls itself kube-proxy (docs/security.md). Its files are read
through ``/proc/PID/root`` (the container's own view, so ``--config=/var/lib/kube-proxy/config.conf``
means the file kube-proxy reads) with its own identity, and kept only when they are what the flag
names (a KubeProxyConfiguration); its binaries run chrooted there as ``nobody``. k3s runs
kube-proxy inside its own ``k3s server``/``k3s agent`` process: then that process (trusted by the
same rule) is the one whose log is read, and nothing of k3s's command line is taken for
kube-proxy's.

Its log, the newest part (:data:`LOG_TAIL`), comes from the first of these that has it:

- the container runtime's files of its Pod (``/var/log/pods``);
- klog's own file, when ``--logtostderr=false`` sends it there only: ``--log-file``, else
  ``--log-dir``'s ``kube-proxy.INFO`` (klog's link to its current file);
- the file its standard error is (``/proc/PID/fd/2``: ``> /var/log/kube-proxy.log 2>&1``,
  systemd's ``StandardError=append:``), read through its root like its config;
- journald: its systemd unit's (``journalctl -u UNIT``), else its own lines (``_PID=``) when its
  standard streams are sockets (journald's stream, ``systemd-cat``);
- the file its standard output is, when it is another one (``kube-proxy/log-stdout.txt``, or the
  log itself when nothing above had it);
- klog's file when it also writes to stderr (``--alsologtostderr``).

Only a regular file is read (a pipe, a socket, a terminal, ``/dev/null`` or a deleted file is not
a log on the node), and each source says in the manifest where the log came from. When none has
it, ``kube-proxy/log.txt`` is listed as not collected with why (its streams go to a pipe...), and
the caller asks the API for its Pod's log.
"""

from __future__ import annotations

import http.client
import os
import posixpath
import re
import shlex
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass

from kpdoctor.collect.node_files import NodeFileError, node_text, read_node_file, resolve_dir
from kpdoctor.collect.record import Collected, Gathered, NotCollected, Progress, utc_now
from kpdoctor.collect.runner import Host, Identity, Runner, same_file
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
# Where kube-proxy runs inside another program's process: k3s's server and agent (rke2 runs it as a
# static Pod, k0s as a process of its own). k3s sets its title to "ARGV0 server" (its flags hidden),
# so /proc/PID/cmdline is that one string; a k3s that could not set it shows its whole argv.
EMBEDDING = ("k3s",)
EMBEDDING_COMMANDS = ("server", "agent")
EMBEDDING_OFF = ("--disable-kube-proxy", "--disable-agent")  # seen only when the title was not set
LOG = "kube-proxy/log.txt"
LOG_PREVIOUS = "kube-proxy/log-previous.txt"
LOG_STDOUT = "kube-proxy/log-stdout.txt"  # its standard output, when another file than its log
STREAMS = {2: "standard error", 1: "standard output"}
_FALSE = ("0", "f", "F", "false", "FALSE", "False")  # Go's strconv.ParseBool


@dataclass
class KubeProxyCollection(Gathered):
    pid: int | None = None
    logs_found: bool = False


def _processes(root: str) -> Iterator[tuple[int, list[str]]]:
    """(pid, argv) of every process in the node's /proc (``root``: the node's /), by pid."""
    proc = resolve_dir(root, "/proc")
    try:
        pids = [int(d) for d in os.listdir(proc) if d.isdigit()] if proc else []
    except OSError:
        return
    for pid in sorted(pids):
        try:
            raw = read_node_file(root, f"/proc/{pid}/cmdline", 256 * 1024)[0]
        except NodeFileError:
            continue
        yield pid, [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def find_kube_proxy(root: str) -> list[tuple[int, list[str]]]:
    """(pid, argv) of every kube-proxy process in the node's /proc (``root``: the node's /)."""
    found = []
    for pid, argv in _processes(root):
        # The program itself (or its wrapper), not any process that merely names it (pgrep).
        if argv and argv[0].rsplit("/", 1)[-1] in LAUNCHERS and kube_proxy_args(argv) is not None:
            found.append((pid, argv))
    return found


def find_embedding(root: str) -> list[tuple[int, list[str]]]:
    """(pid, argv) of every process that runs kube-proxy inside itself: a k3s server or agent
    (not its ``k3s init`` parent, its containerd, nor a ``k3s kubectl``), unless its visible
    flags turn the proxy off."""
    found = []
    for pid, argv in _processes(root):
        words = argv[0].split() if len(argv) == 1 else argv  # the title is one string
        if not words or words[0].rsplit("/", 1)[-1] not in EMBEDDING:
            continue
        command = next((w for w in words[1:] if not w.startswith("-")), "")
        flags = [w.partition("=") for w in words]
        off = any(name in EMBEDDING_OFF and value not in _FALSE for name, _, value in flags)  # "" is on
        if command in EMBEDDING_COMMANDS and not off:
            found.append((pid, argv))
    return found


def other_netns(host: Host, pid: int) -> str | None:
    """The network namespace process ``pid`` runs in (``net:[4026532...]``) when it is not the
    node's; None when it is the node's, or when that cannot be told (it is then taken as the
    node's: a host-network kube-proxy shares it)."""
    theirs = host.path(f"/proc/{pid}/ns/net")
    if same_file(theirs, host.path(host.net_proc("ns/net"))):
        return None
    try:
        return os.readlink(theirs)
    except OSError:
        return "another network namespace"


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
        elsewhere = other_netns(host, pid)
        if elsewhere is not None:  # a nested cluster's node (kind), another node's namespace
            out.skipped.append(NotCollected("kube-proxy/", f"process {pid} runs in another network namespace "
                                            f"({elsewhere}): it programs that namespace's rules, not this node's"))
            continue
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
        embedding = _trusted_embedding(host.root, out)
        if embedding is not None:
            _embedded(runner, out, progress, embedding, in_node_netns=in_node_netns, log_tail=log_tail)
            return out
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
    who = Identity.of(host.root, pid)
    config = flags.get("config")
    if config:
        progress("kube-proxy: config file")
        out.add(_config(runner, croot, config, who))
    else:
        out.skipped.append(NotCollected("kube-proxy/config.yaml", "kube-proxy runs without --config"))
    progress("kube-proxy: version")
    out.add(_version(runner, host.path(f"/proc/{pid}/exe"), croot))
    if not same_file(croot, host.path("/")):
        out.add(runner.command("kube-proxy/iptables-version.txt", ["iptables", "--version"], 5, root=croot))
    progress("kube-proxy: log")
    program = argv[0].rsplit("/", 1)[-1]  # klog names its files after it (hyperkube's are hyperkube.INFO)
    _logs(runner, out, _Logger(pid, who, klog=_klog_file(flags, program)), log_tail)
    _endpoints(out, progress, flags, in_node_netns=in_node_netns)
    return out


def _endpoints(out: KubeProxyCollection, progress: Progress, flags: dict[str, str], *, in_node_netns: bool) -> None:
    if in_node_netns:
        progress("kube-proxy: healthz and metrics")
        _http(out, "kube-proxy/healthz.json", _port(flags, "healthz-bind-address", HEALTHZ_PORT), "/healthz")
        metrics = _port(flags, "metrics-bind-address", METRICS_PORT)
        _http(out, "kube-proxy/metrics.txt", metrics, "/metrics")
        _http(out, "kube-proxy/proxy-mode.txt", metrics, "/proxyMode")  # the mode it runs (after any fallback)
    else:
        for path in ("kube-proxy/healthz.json", "kube-proxy/metrics.txt", "kube-proxy/proxy-mode.txt"):
            out.skipped.append(NotCollected(path, "not in the node's network namespace: its loopback is not reachable"))


def _trusted_embedding(root: str, out: KubeProxyCollection) -> tuple[int, list[str]] | None:
    """The k3s process kube-proxy runs inside, trusted as kube-proxy would be (root, from a
    root-owned k3s binary only root may write); the others are listed as not trusted."""
    for pid, argv in find_embedding(root):
        why = distrust(root, pid)
        if why is None:
            return pid, argv
        shown = " ".join(argv)[:200]
        out.skipped.append(
            NotCollected("kube-proxy/", f"process {pid} (`{shown}`) is not trusted as k3s, which runs kube-proxy "
                         f"inside: {why}; nothing of it was run or read")
        )
    return None


def _embedded(runner: Runner, out: KubeProxyCollection, progress: Progress, found: tuple[int, list[str]], *,
              in_node_netns: bool, log_tail: int) -> None:
    """kube-proxy inside k3s: its log is k3s's (all of k3s's components in one stream) and its
    healthz and metrics are on their default ports; k3s's command line, binary and (absent)
    config file are k3s's, not kube-proxy's, so they are not taken for kube-proxy's."""
    pid, argv = found
    out.pid = pid
    shown = " ".join(argv)[:200]
    inside = f"kube-proxy runs inside k3s (pid {pid}, `{shown}`), not as a process of its own"
    for path, why in (
        ("kube-proxy/cmdline.txt", "k3s's command line is not kube-proxy's (k3s hides its flags from its process "
                                   "title, and logs the flags it gives kube-proxy: \"Running kube-proxy ...\")"),
        ("kube-proxy/config.yaml", "k3s gives kube-proxy flags, not a KubeProxyConfiguration file"),
        ("kube-proxy/version.txt", "its binary is k3s's, whose --version is not kube-proxy's (k3s's log or the "
                                   "Node's kubeletVersion tell the Kubernetes version)"),
    ):
        out.skipped.append(NotCollected(path, f"{inside}: {why}"))
    progress("kube-proxy: log (k3s's)")
    _logs(runner, out, _Logger(pid, Identity.of(runner.host.root, pid), "k3s"), log_tail)
    _endpoints(out, progress, {}, in_node_netns=in_node_netns)


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


@dataclass(frozen=True)
class _KlogFile:
    """Where klog writes kube-proxy's log itself (``--logtostderr=false``)."""

    path: str  # in kube-proxy's root
    flag: str  # which flag said so, for the manifest
    only: bool  # nothing but errors goes to stderr as well (no --alsologtostderr)


def _klog_file(flags: dict[str, str], program: str) -> _KlogFile | None:
    """klog's own log file, from kube-proxy's flags: none unless ``--logtostderr=false`` (klog's
    default is true, and then ``--log-file`` and ``--log-dir`` do nothing); then ``--log-file``,
    else ``PROGRAM.INFO`` in ``--log-dir`` (the temporary directory by default), the link klog
    keeps to its current file, which holds every level. A KubeProxyConfiguration names no log file."""
    norm = {k.replace("_", "-"): v for k, v in flags.items()}  # --log_file is --log-file
    if norm.get("logtostderr", "true") not in _FALSE:
        return None
    only = norm.get("alsologtostderr", "false") in _FALSE
    if norm.get("log-file"):
        return _KlogFile(norm["log-file"], f"--log-file={norm['log-file']}", only)
    where = norm.get("log-dir") or ""
    flag = f"--log-dir={where}" if where else "klog's default --log-dir, /tmp"
    return _KlogFile(posixpath.join(where or "/tmp", f"{program}.INFO"), flag, only)


@dataclass(frozen=True)
class _Logger:
    """The process whose log holds kube-proxy's: kube-proxy's own, or k3s's (kube-proxy inside)."""

    pid: int
    who: Identity | None
    name: str = "kube-proxy"
    klog: _KlogFile | None = None

    @property
    def said(self) -> str:
        return f"{self.name} (pid {self.pid})"

    @property
    def whole(self) -> str:
        """What a source adds when this is not kube-proxy's own log."""
        if self.name == "kube-proxy":
            return ""
        return (f" [{self.name}'s whole log: kube-proxy runs inside {self.name} (pid {self.pid}) and its lines "
                f"are among those of all of {self.name}'s components]")


def _journal_lines(tail: int) -> str:
    return "200000" if tail >= LOG_TAIL else str(max(1000, tail // 200))  # about 200 bytes a line


def _logs(runner: Runner, out: KubeProxyCollection, proc: _Logger | None, tail: int = LOG_TAIL) -> None:
    host = runner.host
    logs = _cri_logs(host.root)
    if logs:
        current, previous = logs
        out.add(runner.read(LOG, current, limit=tail, tail=True))
        if previous:
            out.add(runner.read(LOG_PREVIOUS, previous, limit=tail, tail=True))
        out.logs_found = True
        return
    if proc is None:
        why = "no kube-proxy process runs on this node, and the container runtime has no kube-proxy Pod log in "
        out.skipped.append(NotCollected(LOG, why + PODS_DIR))
        return
    _host_logs(runner, out, proc, tail)


def _host_logs(runner: Runner, out: KubeProxyCollection, proc: _Logger, tail: int) -> None:
    """The log of kube-proxy running on the host (not in a Pod the runtime logs): the sources of
    the module's docstring in their order; when none has it, why, as not collected."""
    host = runner.host
    said: list[str] = []  # what each source tried said, for the reason when none had the log
    partial = ""  # why the log found is only part of it
    done = False

    def take(got: Collected | NotCollected, path: str = LOG) -> bool:
        if isinstance(got, NotCollected):
            if path == LOG:
                said.append(got.reason)
            else:  # the log is in; its standard output's own file is not
                out.add(NotCollected(path, got.reason))
            return False
        got.path = path
        got.source += proc.whole
        if path == LOG and partial:
            got.note = f"{got.note}; {partial}" if got.note else partial
        out.add(got)
        if path == LOG:
            out.logs_found = bool(got.data)
        return True

    klog = proc.klog
    if klog is not None and klog.only:
        what = f"its log file by {klog.flag} (klog, --logtostderr=false)"
        if take(_read_log(runner, proc, klog.path, what, tail)):
            return
        partial = f"klog sends only errors to standard error (--logtostderr=false); its file was not read: {said[-1]}"
    streams = {fd: _stream(host.root, proc.pid, fd) for fd in STREAMS}
    err, std = streams[2], streams[1]
    if err is not None and _is_file(err):
        done = take(_read_log(runner, proc, err, f"the file {proc.said} writes its standard error to (fd 2)", tail))
    unit = _systemd_unit(host.root, proc.pid)
    lines = _journal_lines(tail)
    if not done and unit:
        cmd = ["journalctl", "-u", unit, "--no-pager", "-q", "-o", "short-precise", "-n", lines]
        done = take(runner.command(LOG, cmd, 20))
    if not done and not unit and any(t and t.startswith("socket:") for t in streams.values()):
        cmd = ["journalctl", f"_PID={proc.pid}", "--no-pager", "-q", "-o", "short-precise", "-n", lines]
        got = runner.command(LOG, cmd, 20)
        if isinstance(got, Collected) and got.exit_code == 0 and not got.data.strip():
            said.append(f"journald holds no line of _PID={proc.pid} (`{shlex.join(cmd)}`)")
        else:
            if isinstance(got, Collected):
                got.source += f" [{proc.said} writes its standard streams to sockets, and is in no systemd unit]"
            done = take(got)
    if std is not None and _is_file(std) and std != err:
        got = _read_log(runner, proc, std, f"the file {proc.said} writes its standard output to (fd 1)", tail)
        done = take(got, LOG_STDOUT if done else LOG) or done
    if not done and klog is not None and not klog.only:
        what = f"its log file by {klog.flag} (klog, --logtostderr=false, --alsologtostderr)"
        done = take(_read_log(runner, proc, klog.path, what, tail))
    if not done:
        out.skipped.append(NotCollected(LOG, _no_log(host.root, proc, streams, unit, said)))


def _stream(root: str, pid: int, fd: int) -> str | None:
    """What the process's descriptor ``fd`` is, as the kernel names it (``/var/log/x.log``,
    ``pipe:[123]``, ``socket:[456]``, ``/dev/null``, ``/x (deleted)``); None if it cannot be told."""
    try:
        return os.readlink(os.path.join(root, "proc", str(pid), "fd", str(fd)))
    except OSError:
        return None


def _is_file(target: str) -> bool:
    """Whether a descriptor names a file that may be a log on the node: a path, not a pipe, a
    socket or another kernel object, not a deleted file nor /dev/null (what else is at the path,
    a terminal, a FIFO, a device, is told when it is looked at, and not read)."""
    return target.startswith("/") and not target.endswith(" (deleted)") and target != "/dev/null"


def _read_log(runner: Runner, proc: _Logger, inside: str, what: str, tail: int) -> Collected | NotCollected:
    """The last ``tail`` bytes of the file ``inside`` (a path as the process sees it), read in its
    root with its identity: links resolve inside that root, and only a regular file is opened."""
    if proc.who is None:
        return NotCollected(LOG, f"{proc.said} exited before {inside} could be read")
    croot = runner.host.path(f"/proc/{proc.pid}/root")
    got = runner.read_as(LOG, croot, inside, proc.who, tail, tail=True)
    if isinstance(got, Collected):
        got.source = f"read {inside} in /proc/{proc.pid}/root: {what}"
    return got


def _no_log(root: str, proc: _Logger, streams: dict[int, str | None], unit: str | None, said: list[str]) -> str:
    """Why no log of ``proc`` was found, as precisely as the node tells it."""
    if streams[1] is not None and streams[1] == streams[2]:
        where = f"writes its standard output and error to {streams[1]}"
    else:
        parts = [f"its {name} to {streams[fd]}" for fd, name in STREAMS.items() if streams[fd] is not None]
        where = "writes " + " and ".join(parts) if parts else "has standard streams that cannot be looked at"
    pod = _pod_cgroup(root, proc.pid)
    if pod is not None and not said:
        return (f"{proc.said} runs in a Pod's container (cgroup {pod}) and {where}: its log is the container "
                f"runtime's, and {PODS_DIR} holds no kube-proxy Pod's; only the API can give it")
    text = f"{proc.said} {where}" + ("" if unit else " and is not in a systemd unit")
    if proc.name == "k3s" and any(t and t.startswith("pipe:") for t in streams.values()):
        text += " (a k3s started with --log writes its log to that file through a pipe to its parent process)"
    if said:
        return f"{text}: no log of it could be read ({'; '.join(said)})"
    return f"{text}: its log is not on this node"


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


def _cgroups(root: str, pid: int) -> str | None:
    """The process's ``/proc/PID/cgroup``, or None when it cannot be read."""
    return node_text(root, f"/proc/{pid}/cgroup", 64 * 1024)


def _pod_cgroup(root: str, pid: int) -> str | None:
    """The cgroup of a Pod's container the process is in (the kubelet's ``kubepods`` tree, either
    cgroup driver); None for a process of the host."""
    text = _cgroups(root, pid)
    m = re.search(r"^[^:\n]*:[^:\n]*:(/[^\n]*kubepods[^\n]*)$", text or "", re.M)
    return m.group(1) if m else None


def _systemd_unit(root: str, pid: int) -> str | None:
    text = _cgroups(root, pid)
    if text is None:
        return None
    m = re.search(r"/([\w@.-]+\.service)(?:/|$)", text, re.M)
    return m.group(1) if m else None
