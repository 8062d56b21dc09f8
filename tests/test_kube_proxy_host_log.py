"""kube-proxy's log when it runs on the host, not in a Pod the container runtime logs.

A node root is planted the way /proc shows a process: ``cmdline``, ``status``, ``exe`` (a link to
a root-owned binary), ``root`` (the process's root: a folder here), ``cgroup``, and ``fd/1``,
``fd/2`` as the kernel names them (``/var/log/kube-proxy.log``, ``pipe:[123]``,
``socket:[456]``...). Files are read through the process's root by the confined reader
(``Runner.read_as``: chroot, then the process's identity), so these tests need root.

Sources: the files its standard streams are, klog's ``--log-file``/``--log-dir``, journald by unit
or by PID, and k3s (kube-proxy inside ``k3s server``). Then why there is no log, and hostile
targets: a FIFO (never opened), a device, a huge file (only its tail), links out of its root.
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
import threading
import time
from pathlib import Path

import pytest

from kpdoctor.bundle.writer import Bundle
from kpdoctor.collect.kube_proxy import (
    LOG,
    LOG_STDOUT,
    LOG_TAIL,
    KubeProxyCollection,
    collect_kube_proxy,
    find_embedding,
)
from kpdoctor.collect.live import _one_log_entry
from kpdoctor.collect.record import Budget, Collected, NotCollected, quiet
from kpdoctor.collect.runner import Host, Runner

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="reading through a process's root (chroot) needs root")

PID = 4242
# kube-proxy v1.20.2's own lines (tests/lab/test_host_service_log.py runs the binary that logs them)
KP_LINES = (
    'I1129 01:32:42.332219   4242 flags.go:59] FLAG: --hostname-override="lab-node"\n'
    "W1129 01:32:42.332308   4242 server.go:226] WARNING: all flags other than --config, --write-config-to, "
    "and --cleanup are deprecated. Please begin using a config file ASAP.\n"
    'E1129 01:32:42.333357   4242 node.go:161] Failed to retrieve node info: Get "https://127.0.0.1:6443/api/v1/'
    'nodes/lab-node": dial tcp 127.0.0.1:6443: connect: connection refused\n'
)
ERRORS_ONLY = KP_LINES.splitlines(keepends=True)[2]
JOURNAL = (
    "Nov 29 01:32:42.333357 node-1 kube-proxy[4242]: E1129 01:32:42.333357    4242 node.go:161] Failed to retrieve "
    'node info: Get "https://10.0.0.1:6443/api/v1/nodes/node-1": dial tcp 10.0.0.1:6443: connect: connection '
    "refused\n"
)
K3S_JOURNAL = (
    'Mar 01 10:00:00.123456 node-1 k3s[812]: time="2024-03-01T10:00:00Z" level=info msg="Running kube-proxy '
    "--cluster-cidr=10.42.0.0/16 --conntrack-max-per-core=0 --conntrack-tcp-timeout-close-wait=0s "
    "--conntrack-tcp-timeout-established=0s --healthz-bind-address=127.0.0.1 --hostname-override=node-1 "
    '--kubeconfig=/var/lib/rancher/k3s/agent/kubeproxy.kubeconfig --proxy-mode=iptables"\n'
    "Mar 01 10:00:00.223456 node-1 k3s[812]: I0301 10:00:00.223456     812 server_others.go:185] Using iptables Proxier.\n"
)
SESSION = "0::/user.slice/user-0.slice/session-3.scope\n"  # a shell's: not a unit


class JournalRunner(Runner):
    """The node's journal, as journalctl prints it: what it was asked is kept, and it answers
    with ``lines`` (real journalctl is exercised by the lab; these nodes are folders)."""

    def __init__(self, host: Host, lines: str = "") -> None:
        super().__init__(host, Budget(30))
        self.lines = lines
        self.asked: list[list[str]] = []

    def command(
        self, path: str, argv: list[str], timeout: float = 15.0, *, root: str | None = None
    ) -> Collected | NotCollected:
        if argv[0] != "journalctl":
            return super().command(path, argv, timeout, root=root)
        self.asked.append(argv)
        return Collected(path, self.lines.encode(), shlex.join(argv), 0, "")


def binary(tmp: Path, where: str) -> Path:
    """A root-owned program only root may write, as kube-proxy's and k3s's are."""
    exe = tmp / where.lstrip("/")
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 57)
    exe.chmod(0o755)
    return exe


def plant(
    node: Path,
    argv: list[str] | bytes,
    *,
    exe: Path,
    root: Path,
    fds: dict[int, str],
    cgroup: str = SESSION,
    pid: int = PID,
) -> None:
    d = node / "proc" / str(pid)
    (d / "fd").mkdir(parents=True)
    raw = argv if isinstance(argv, bytes) else b"\0".join(a.encode() for a in argv) + b"\0"
    (d / "cmdline").write_bytes(raw)
    (d / "status").write_text(
        f"Name:\t{exe.name}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t1\n"
        "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t \n"
    )
    (d / "exe").symlink_to(exe)
    (d / "root").symlink_to(root)
    (d / "cgroup").write_text(cgroup)
    for fd, target in fds.items():
        (d / "fd" / str(fd)).symlink_to(target)


def kube_proxy(tmp: Path, fds: dict[int, str], *flags: str, cgroup: str = SESSION) -> tuple[Path, Path]:
    """A node with a host kube-proxy (``/usr/local/bin/kube-proxy FLAGS``) whose root is ``ctr``."""
    node, ctr = tmp / "node", tmp / "ctr"
    ctr.mkdir(parents=True, exist_ok=True)
    exe = binary(tmp, "/opt/bin/kube-proxy")
    argv = ["/usr/local/bin/kube-proxy", "--kubeconfig=/etc/kubernetes/kube-proxy.kubeconfig", *flags]
    plant(node, argv, exe=exe, root=ctr, fds=fds, cgroup=cgroup)
    return node, ctr


def put(ctr: Path, inside: str, text: str) -> Path:
    f = ctr / inside.lstrip("/")
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    return f


def collect(node: Path, runner: Runner | None = None, tail: int = 1024**2) -> KubeProxyCollection:
    r = runner or JournalRunner(Host(str(node)))
    return collect_kube_proxy(r, quiet, in_node_netns=False, log_tail=tail)


def got(kp: KubeProxyCollection, path: str = LOG) -> Collected:
    found = [a for a in kp.artifacts if a.path == path]
    assert len(found) == 1, (kp.artifacts, kp.skipped)
    return found[0]


def why(kp: KubeProxyCollection, path: str = LOG) -> str:
    found = [s.reason for s in kp.skipped if s.path == path]
    assert len(found) == 1, (kp.artifacts, kp.skipped)
    assert not [a for a in kp.artifacts if a.path == path]
    return found[0]


# -- its standard streams ----------------------------------------------------------------------


def test_a_log_its_standard_streams_are_redirected_to_is_read_through_its_root(tmp_path: Path) -> None:
    """``nohup kube-proxy ... > /var/log/kube-proxy.log 2>&1``: both streams are one file."""
    node, ctr = kube_proxy(tmp_path, {1: "/var/log/kube-proxy.log", 2: "/var/log/kube-proxy.log"})
    put(ctr, "/var/log/kube-proxy.log", KP_LINES)
    put(node, "/var/log/kube-proxy.log", "the node's own file of that name, not kube-proxy's\n")
    kp = collect(node)
    log = got(kp)
    assert log.data.decode() == KP_LINES
    assert log.source == (
        f"read /var/log/kube-proxy.log in /proc/{PID}/root: the file kube-proxy (pid {PID}) "
        "writes its standard error to (fd 2)"
    )
    assert kp.logs_found
    assert not [a for a in kp.artifacts if a.path == LOG_STDOUT]
    assert LOG not in {s.path for s in kp.skipped}


def test_two_files_give_two_artifacts_its_stderr_being_the_log(tmp_path: Path) -> None:
    """klog writes to stderr: that file is the log; stdout's own file is kept beside it."""
    node, ctr = kube_proxy(tmp_path, {1: "/var/log/kube-proxy.out", 2: "/var/log/kube-proxy.err"})
    put(ctr, "/var/log/kube-proxy.err", KP_LINES)
    put(ctr, "/var/log/kube-proxy.out", "stdout line\n")
    kp = collect(node)
    assert got(kp).data.decode() == KP_LINES and "(fd 2)" in got(kp).source
    out = got(kp, LOG_STDOUT)
    assert out.data == b"stdout line\n"
    assert out.source.startswith("read /var/log/kube-proxy.out in ") and out.source.endswith("(fd 1)")


def test_stdout_alone_in_a_file_is_the_log_when_stderr_leads_nowhere(tmp_path: Path) -> None:
    node, ctr = kube_proxy(tmp_path, {1: "/var/log/kube-proxy.log", 2: "pipe:[77120]"})
    put(ctr, "/var/log/kube-proxy.log", KP_LINES)
    kp = collect(node)
    assert got(kp).data.decode() == KP_LINES and got(kp).source.endswith("(fd 1)")


def test_systemd_standard_error_to_a_file_beats_the_units_journal(tmp_path: Path) -> None:
    """``StandardOutput=append:/var/log/kube-proxy.log``: the unit's journal holds none of its lines."""
    cgroup = "0::/system.slice/kube-proxy.service\n"
    node, ctr = kube_proxy(tmp_path, {1: "/var/log/kube-proxy.log", 2: "/var/log/kube-proxy.log"}, cgroup=cgroup)
    put(ctr, "/var/log/kube-proxy.log", KP_LINES)
    runner = JournalRunner(Host(str(node)), JOURNAL)
    kp = collect(node, runner)
    assert got(kp).data.decode() == KP_LINES and runner.asked == []


# -- klog's own files ------------------------------------------------------------------------------


def test_klog_log_file_is_read_when_klog_writes_there_only(tmp_path: Path) -> None:
    """With --logtostderr=false stderr gets only errors: the --log-file holds every line."""
    fds = {1: "/var/log/kube-proxy.out", 2: "/var/log/kube-proxy.out"}
    node, ctr = kube_proxy(tmp_path, fds, "--logtostderr=false", "--log-file=/var/log/kubernetes/kube-proxy.log")
    put(ctr, "/var/log/kube-proxy.out", ERRORS_ONLY)
    put(ctr, "/var/log/kubernetes/kube-proxy.log", KP_LINES)
    kp = collect(node)
    assert got(kp).data.decode() == KP_LINES
    assert got(kp).source == (
        f"read /var/log/kubernetes/kube-proxy.log in /proc/{PID}/root: its log file by "
        "--log-file=/var/log/kubernetes/kube-proxy.log (klog, --logtostderr=false)"
    )


def test_klog_log_dir_is_read_by_its_info_link(tmp_path: Path) -> None:
    """klog's --log-dir holds PROGRAM.INFO, a relative link to the current file (every level)."""
    node, ctr = kube_proxy(tmp_path, {1: "/dev/null", 2: "/dev/null"}, "--logtostderr=false", "--log_dir=/var/log/kp")
    current = "kube-proxy.node-1.root.log.INFO.20241129-013242.4242"
    put(ctr, f"/var/log/kp/{current}", KP_LINES)
    (ctr / "var/log/kp/kube-proxy.INFO").symlink_to(current)
    kp = collect(node)
    assert got(kp).data.decode() == KP_LINES
    assert "/var/log/kp/kube-proxy.INFO" in got(kp).source and "--log-dir=/var/log/kp" in got(kp).source


def test_klog_file_flags_do_nothing_while_logtostderr_is_true(tmp_path: Path) -> None:
    fds = {1: "/var/log/kube-proxy.log", 2: "/var/log/kube-proxy.log"}
    node, ctr = kube_proxy(tmp_path, fds, "--log-file=/var/log/kubernetes/kube-proxy.log")
    put(ctr, "/var/log/kube-proxy.log", KP_LINES)
    put(ctr, "/var/log/kubernetes/kube-proxy.log", "a stale file klog does not write\n")
    assert got(collect(node)).data.decode() == KP_LINES


def test_with_alsologtostderr_the_stream_comes_first_and_the_file_after(tmp_path: Path) -> None:
    flags = ("--logtostderr=false", "--alsologtostderr", "--log-file=/var/log/kubernetes/kube-proxy.log")
    node, ctr = kube_proxy(tmp_path, {1: "/var/log/kube-proxy.log", 2: "/var/log/kube-proxy.log"}, *flags)
    put(ctr, "/var/log/kube-proxy.log", KP_LINES)
    put(ctr, "/var/log/kubernetes/kube-proxy.log", "the same lines, klog's copy\n")
    assert got(collect(node)).data.decode() == KP_LINES
    node2, ctr2 = kube_proxy(tmp_path / "b", {1: "pipe:[5]", 2: "pipe:[5]"}, *flags)
    put(ctr2, "/var/log/kubernetes/kube-proxy.log", KP_LINES)
    kp = collect(node2)
    assert got(kp).data.decode() == KP_LINES and "--alsologtostderr" in got(kp).source


def test_a_missing_klog_file_leaves_the_errors_on_stderr_with_a_note(tmp_path: Path) -> None:
    fds = {1: "/var/log/kube-proxy.out", 2: "/var/log/kube-proxy.out"}
    node, ctr = kube_proxy(tmp_path, fds, "--logtostderr=false", "--log-file=/var/log/gone.log")
    put(ctr, "/var/log/kube-proxy.out", ERRORS_ONLY)
    log = got(collect(node))
    assert log.data.decode() == ERRORS_ONLY
    assert "klog sends only errors to standard error" in log.note and "/var/log/gone.log does not exist" in log.note


# -- journald ------------------------------------------------------------------------------------


def test_journald_by_pid_when_its_streams_are_sockets_and_no_unit(tmp_path: Path) -> None:
    """``systemd-cat kube-proxy ...`` from a shell: journald's stream socket, a session scope."""
    node, _ = kube_proxy(tmp_path, {1: "socket:[48213]", 2: "socket:[48213]"})
    runner = JournalRunner(Host(str(node)), JOURNAL)
    kp = collect(node, runner, tail=LOG_TAIL)
    assert runner.asked == [["journalctl", f"_PID={PID}", "--no-pager", "-q", "-o", "short-precise", "-n", "200000"]]
    assert got(kp).data.decode() == JOURNAL and kp.logs_found
    assert got(kp).source.startswith(f"journalctl _PID={PID} ") and "sockets" in got(kp).source


def test_a_systemd_unit_is_read_first_and_journald_by_pid_not_at_all(tmp_path: Path) -> None:
    cgroup = "0::/system.slice/kube-proxy.service\n"
    node, _ = kube_proxy(tmp_path, {1: "socket:[48213]", 2: "socket:[48213]"}, cgroup=cgroup)
    runner = JournalRunner(Host(str(node)), JOURNAL)
    kp = collect(node, runner)
    assert [a[:3] for a in runner.asked] == [["journalctl", "-u", "kube-proxy.service"]]
    assert got(kp).data.decode() == JOURNAL


def test_an_empty_journal_for_its_pid_is_why_there_is_no_log(tmp_path: Path) -> None:
    node, _ = kube_proxy(tmp_path, {1: "socket:[48213]", 2: "socket:[48213]"})
    kp = collect(node, JournalRunner(Host(str(node)), ""))
    reason = why(kp)
    assert reason.startswith(
        f"kube-proxy (pid {PID}) writes its standard output and error to socket:[48213] and is "
        "not in a systemd unit: no log of it could be read (journald holds no line of _PID="
    )
    assert not kp.logs_found


# -- why there is no log -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fds", "said"),
    [
        ({1: "pipe:[123]", 2: "pipe:[123]"}, "writes its standard output and error to pipe:[123]"),
        ({1: "/dev/null", 2: "/dev/null"}, "writes its standard output and error to /dev/null"),
        ({1: "pipe:[9]", 2: "/dev/null"}, "writes its standard error to /dev/null and its standard output to pipe:[9]"),
        (
            {1: "/var/log/kp.log (deleted)", 2: "/var/log/kp.log (deleted)"},
            "writes its standard output and error to /var/log/kp.log (deleted)",
        ),
        ({}, "has standard streams that cannot be looked at"),
    ],
)
def test_no_log_says_where_its_streams_go(tmp_path: Path, fds: dict[int, str], said: str) -> None:
    node, _ = kube_proxy(tmp_path, fds)
    kp = collect(node)
    assert why(kp) == f"kube-proxy (pid {PID}) {said} and is not in a systemd unit: its log is not on this node"
    assert not kp.logs_found


def test_a_containers_kube_proxy_without_its_pod_log_is_the_apis_to_give(tmp_path: Path) -> None:
    """In a Pod (the kubelet's cgroup), its streams are the runtime's pipes: the log exists, but
    not where this node shows it (a debug Pod without /var/log mounted): not "not on this node"."""
    cgroup = ("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0c9a7e7e_5d3b.slice/"
              "cri-containerd-4f1c2a.scope\n")  # fmt: skip
    node, _ = kube_proxy(tmp_path, {1: "pipe:[31337]", 2: "pipe:[31338]"}, cgroup=cgroup)
    reason = why(collect(node))
    assert reason == (
        f"kube-proxy (pid {PID}) runs in a Pod's container (cgroup {cgroup.strip()[3:]}) and writes "
        "its standard error to pipe:[31338] and its standard output to pipe:[31337]: its log is the "
        "container runtime's, and /var/log/pods holds no kube-proxy Pod's; only the API can give it"
    )


def test_no_process_and_no_pod_log_is_said(tmp_path: Path) -> None:
    (tmp_path / "proc/1").mkdir(parents=True)
    (tmp_path / "proc/1/cmdline").write_bytes(b"/sbin/init\0")
    kp = collect(tmp_path)
    assert why(kp) == (
        "no kube-proxy process runs on this node, and the container runtime has no kube-proxy Pod log in /var/log/pods"
    )


# -- hostile targets -----------------------------------------------------------------------------


def test_a_fifo_is_never_opened(tmp_path: Path) -> None:
    """kube-proxy's stdout a FIFO at a path: opening it to read would block. A writer probing it
    the whole time never finds a reader."""
    node, ctr = kube_proxy(tmp_path, {1: "/var/log/kube-proxy.log", 2: "/var/log/kube-proxy.log"})
    fifo = ctr / "var/log/kube-proxy.log"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    stop, opened = threading.Event(), []

    def probe() -> None:
        while not stop.is_set():
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                opened.append(time.monotonic())
            except OSError as exc:
                assert exc.errno == errno.ENXIO  # no reader
            time.sleep(0.001)

    t = threading.Thread(target=probe)
    t.start()
    try:
        t0 = time.monotonic()
        kp = collect(node)
        took = time.monotonic() - t0
    finally:
        stop.set()
        t.join()
    assert not opened and took < 10
    assert "/var/log/kube-proxy.log in " in why(kp) and "is a FIFO: not read" in why(kp)


def test_a_device_is_not_read(tmp_path: Path) -> None:
    node, ctr = kube_proxy(tmp_path, {1: "/var/log/kube-proxy.log", 2: "/var/log/kube-proxy.log"})
    dev = ctr / "var/log/kube-proxy.log"
    dev.parent.mkdir(parents=True)
    os.mknod(dev, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero: endless
    t0 = time.monotonic()
    kp = collect(node)
    assert time.monotonic() - t0 < 10
    assert "is a character device: not read" in why(kp)


def test_a_huge_log_gives_its_tail_only(tmp_path: Path) -> None:
    node, ctr = kube_proxy(tmp_path, {1: "/var/log/kube-proxy.log", 2: "/var/log/kube-proxy.log"})
    big = ctr / "var/log/kube-proxy.log"
    big.parent.mkdir(parents=True)
    size = 6 * 1024**3
    with open(big, "wb") as fh:  # sparse: 6 GiB of nothing, then the newest lines
        fh.truncate(size - len(KP_LINES))
        fh.seek(size - len(KP_LINES))
        fh.write(KP_LINES.encode())
    t0 = time.monotonic()
    log = got(collect(node, tail=64 * 1024))
    assert time.monotonic() - t0 < 10
    assert log.data.endswith(KP_LINES.encode().split(b"\n", 1)[1]) and len(log.data) < 64 * 1024
    assert log.note == "last 65,536 bytes of 6144 MiB"


@pytest.mark.parametrize("absolute", [True, False])
def test_a_link_out_of_its_root_is_not_followed_out(tmp_path: Path, absolute: bool) -> None:
    canary = tmp_path / "canary.log"
    canary.write_text("the collector's machine, not kube-proxy's root\n")
    node, ctr = kube_proxy(tmp_path, {1: "/var/log/kube-proxy.log", 2: "/var/log/kube-proxy.log"})
    link = ctr / "var/log/kube-proxy.log"
    link.parent.mkdir(parents=True)
    link.symlink_to(canary if absolute else os.path.relpath(canary, link.parent))
    kp = collect(node)
    assert not any(b"not kube-proxy's root" in a.data for a in kp.artifacts)
    assert "/var/log/kube-proxy.log does not exist in " in why(kp)


# -- k3s: kube-proxy inside k3s -------------------------------------------------------------------

K3S_EXE = "/var/lib/rancher/k3s/data/9b1a2b1c8e3f/bin/k3s"
K3S_TITLE = b"/usr/local/bin/k3s server" + b"\0" * 180  # gspt's title: argv's area, zeroed after it


def k3s(
    tmp: Path, fds: dict[int, str], title: bytes | list[str] = K3S_TITLE, cgroup: str = SESSION, pid: int = 812
) -> Path:
    node = tmp / "node"
    (tmp / "host").mkdir(exist_ok=True)
    plant(node, title, exe=binary(tmp, K3S_EXE), root=tmp / "host", fds=fds, cgroup=cgroup, pid=pid)
    return node


def test_k3s_is_the_process_kube_proxy_logs_in_and_says_so(tmp_path: Path) -> None:
    node = k3s(tmp_path, {1: "socket:[3321]", 2: "socket:[3321]"}, cgroup="0::/system.slice/k3s.service\n")
    runner = JournalRunner(Host(str(node)), K3S_JOURNAL)
    kp = collect(node, runner)
    assert [a[:3] for a in runner.asked] == [["journalctl", "-u", "k3s.service"]]
    log = got(kp)
    assert log.data.decode() == K3S_JOURNAL and kp.logs_found and kp.pid == 812
    assert "k3s's whole log: kube-proxy runs inside k3s (pid 812)" in log.source
    skipped = {s.path: s.reason for s in kp.skipped}
    for path in ("kube-proxy/cmdline.txt", "kube-proxy/config.yaml", "kube-proxy/version.txt"):
        assert skipped[path].startswith("kube-proxy runs inside k3s (pid 812, `/usr/local/bin/k3s server`)"), path
        assert not [a for a in kp.artifacts if a.path == path]


def test_k3s_redirected_to_a_file(tmp_path: Path) -> None:
    """``nohup k3s agent > /var/log/k3s.log 2>&1 &``"""
    node = k3s(tmp_path, {1: "/var/log/k3s.log", 2: "/var/log/k3s.log"}, title=b"k3s agent" + b"\0" * 40)
    put(tmp_path / "host", "/var/log/k3s.log", K3S_JOURNAL)
    log = got(collect(node))
    assert log.data.decode() == K3S_JOURNAL
    assert log.source.startswith(
        "read /var/log/k3s.log in /proc/812/root: the file k3s (pid 812) writes its standard "
        "error to (fd 2) [k3s's whole log"
    )


def test_k3s_writing_to_a_pipe_says_where_its_log_may_be(tmp_path: Path) -> None:
    node = k3s(tmp_path, {1: "pipe:[881]", 2: "pipe:[881]"})
    reason = why(collect(node))
    assert reason.startswith(
        "k3s (pid 812) writes its standard output and error to pipe:[881] and is not in a "
        "systemd unit (a k3s started with --log writes its log to that file through a pipe"
    )


def test_k3s_is_recognised_by_its_title_not_its_helpers() -> None:
    def found(argv: list[str] | bytes, tmp: Path) -> bool:
        plant(tmp, argv, exe=Path("/nonexistent"), root=tmp, fds={})
        return bool(find_embedding(str(tmp)))

    import tempfile

    cases: list[tuple[list[str] | bytes, bool]] = [
        (K3S_TITLE, True),
        (b"/usr/local/bin/k3s agent" + b"\0" * 30, True),
        (["/usr/local/bin/k3s", "server", "--write-kubeconfig-mode=644"], True),  # a title not set: its argv
        (["/usr/local/bin/k3s", "--debug", "agent", "--server=https://10.0.0.1:6443"], True),
        (["/usr/local/bin/k3s", "server", "--disable-kube-proxy"], False),
        (["/usr/local/bin/k3s", "server", "--disable-agent"], False),
        (["/usr/local/bin/k3s", "server", "--disable-kube-proxy=false"], True),
        (b"/usr/local/bin/k3s init" + b"\0" * 30, False),  # the parent that writes --log's file
        (["containerd"], False),
        (["/usr/local/bin/k3s", "kubectl", "get", "pods"], False),
        (["/usr/local/bin/rke2", "server"], False),  # kube-proxy is a static Pod there
        (["grep", "k3s server"], False),
    ]
    for argv, want in cases:
        with tempfile.TemporaryDirectory() as d:
            assert found(argv, Path(d)) is want, argv


def test_a_kube_proxy_process_wins_over_k3s(tmp_path: Path) -> None:
    """k3s with --disable-kube-proxy hidden in its title, and a kube-proxy of its own."""
    node, ctr = kube_proxy(tmp_path, {1: "/var/log/kube-proxy.log", 2: "/var/log/kube-proxy.log"})
    put(ctr, "/var/log/kube-proxy.log", KP_LINES)
    plant(node, K3S_TITLE, exe=binary(tmp_path, K3S_EXE), root=ctr, fds={}, pid=812)
    kp = collect(node)
    assert kp.pid == PID and got(kp).data.decode() == KP_LINES
    assert got(kp, "kube-proxy/cmdline.txt")


def test_an_untrusted_k3s_is_not_read(tmp_path: Path) -> None:
    node = k3s(tmp_path, {1: "/var/log/k3s.log", 2: "/var/log/k3s.log"})
    put(tmp_path / "host", "/var/log/k3s.log", K3S_JOURNAL)
    (tmp_path / K3S_EXE.lstrip("/")).chmod(0o777)
    kp = collect(node)
    assert not kp.artifacts
    reasons = [s.reason for s in kp.skipped if s.path == "kube-proxy/"]
    assert any("is not trusted as k3s" in r and "may be written by others" in r for r in reasons), reasons
    assert why(kp).startswith("no kube-proxy process runs on this node")


# -- the node's and the API's word on the log, in one entry -----------------------------------------


def test_the_api_pod_log_replaces_the_nodes_reason_and_two_reasons_become_one() -> None:
    node_why = f"kube-proxy (pid {PID}) writes its standard output and error to pipe:[1]: its log is not on this node"
    api_log = Collected(LOG, b"from the API\n", "GET .../log")
    b = Bundle(artifacts=[api_log], skipped=[NotCollected(LOG, node_why), NotCollected("kube-proxy/", "x")])
    _one_log_entry(b)
    assert b.artifacts == [api_log] and [s.path for s in b.skipped] == ["kube-proxy/"]
    api_why = "no kube-proxy Pod on node n1 (kube-proxy may run as a host service)"
    b = Bundle(skipped=[NotCollected(LOG, node_why), NotCollected(LOG, api_why)])
    _one_log_entry(b)
    assert [(s.path, s.reason) for s in b.skipped] == [(LOG, f"on the node: {node_why}; from the API: {api_why}")]
    empty, full = Collected(LOG, b"", "journalctl -u kube-proxy.service"), Collected(LOG, b"x\n", "GET .../log")
    b = Bundle(artifacts=[empty, full])
    _one_log_entry(b)
    assert b.artifacts == [full]
