"""Running the node's own programs and reading its files, without changing anything.

Every command is a fixed argv (never a shell), runs with a timeout taken from the collection's
:class:`~kpdoctor.collect.record.Budget`, with ``LC_ALL=C`` and a fixed ``PATH``, its stdin closed,
in a process group that is killed whole on timeout. Only ELF executables are run: a script could
be anything (kube-proxy images ship an ``iptables-wrapper`` script that rewrites its own
symlinks on first use), so a binary that resolves to one is reported, not run.

From a privileged Pod the node's root is mounted at ``--host-root`` (``/host``): commands then run
as ``chroot /host ARGV`` so the node's own iptables reads the node's rules (an older iptables in
the image misreads rules written by a newer one), and, when the Pod is not in the node's network
namespace, as ``chroot /host nsenter --net=/proc/1/ns/net -- ARGV``.

Another root (a container's: kube-proxy's image) is never trusted with privileges: its programs
run as ``nobody`` with no new privileges (a setuid binary in an image cannot regain root), and its
files are read by a child that enters that root and takes the identity of the process whose files
they are (docs/security.md).
"""

from __future__ import annotations

import os
import shlex
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass

from kpdoctor.collect.node_files import (
    NodeFileError,
    file_kind,
    node_text,
    read_node_file,
    resolve_in_root,
    tail_note,
)
from kpdoctor.collect.record import Budget, Collected, NotCollected, utc_now

SEARCH_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
ENV = {"PATH": ":".join(SEARCH_PATH), "LC_ALL": "C", "LANG": "C"}
# Where the node's iptables keeps its lock, when it is not /run/xtables.lock. The reads here take
# no lock at all; passing it on keeps them on the node's lock if an iptables ever wanted one.
PASSED_ENV = ("XTABLES_LOCKFILE",)
MAX_OUTPUT = 512 * 1024**2  # one command's stdout; rule dumps at 10,000 Services are ~100 MB
MAX_STDERR = 64 * 1024
NOBODY = 65534  # the overflow uid/gid: owns nothing, so a program run as it can change nothing
# The programs whose version decides how they read the kernel's rules, and how each says it.
VERSION_ARGV = {
    "iptables": ["--version"],
    "iptables-save": ["--version"],
    "iptables-legacy-save": ["--version"],
    "iptables-nft-save": ["--version"],
    "ip6tables-save": ["--version"],
    "ip6tables-legacy-save": ["--version"],
    "ip6tables-nft-save": ["--version"],
    "nft": ["--version"],
    "ipset": ["--version"],
    "ipvsadm": ["--version"],
    "conntrack": ["--version"],
}
# (root, path inside it, size, mtime) -> first line of its version output; a node agent asks
# again only when the binary is replaced (a node upgrade)
_VERSIONS: dict[tuple[str, str, int, int], str] = {}


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a process is (``/proc/PID/status``): real and effective uid, gid and groups."""

    uid: int
    euid: int
    gid: int
    egid: int
    groups: tuple[int, ...] = ()

    @property
    def root(self) -> bool:
        return self.uid == 0 and self.euid == 0

    @classmethod
    def of(cls, root: str, pid: int) -> Identity | None:
        """Read from the node's ``/proc/PID/status`` (``root``: the node's /); None if it is gone
        or unreadable."""
        text = node_text(root, f"/proc/{pid}/status")
        if text is None:
            return None
        try:
            fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
            uids = [int(x) for x in fields["Uid"].split()]
            gids = [int(x) for x in fields["Gid"].split()]
            groups = tuple(int(x) for x in fields.get("Groups", "").split())
        except (KeyError, ValueError):
            return None
        if len(uids) < 2 or len(gids) < 2:
            return None
        return cls(uids[0], uids[1], gids[0], gids[1], groups)


# The confined reader: enters ROOT, becomes UID:GID (with GROUPS) and only then looks at PATH, so
# the kernel resolves every link inside ROOT and checks the permissions of that identity. Only a
# regular file is opened (a FIFO would block, a device never end, and opening some devices does
# something): what else is there is named by its mode and left shut. At most LIMIT bytes are read,
# with TAIL the last ones (a log), after a line saying the file's size on stderr.
_CONFINED_READ = """
import os, stat, sys
root, uid, gid, groups, path, limit, tail = sys.argv[1:8]
os.chroot(root)
os.chdir("/")
os.setgroups([int(g) for g in groups.split(",") if g])
os.setresgid(int(gid), int(gid), int(gid))
os.setresuid(int(uid), int(uid), int(uid))
def refuse(mode):
    sys.stderr.write("mode %o\\n" % mode)
    sys.exit(5)
try:
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        refuse(mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
except FileNotFoundError:
    sys.exit(3)
except PermissionError:
    sys.exit(4)
st = os.fstat(fd)
if not stat.S_ISREG(st.st_mode):
    refuse(st.st_mode)
left, out = int(limit) + 1, sys.stdout.buffer
if tail == "tail" and st.st_size > int(limit):
    os.lseek(fd, st.st_size - int(limit), os.SEEK_SET)
    left = int(limit)
    sys.stderr.write("size %d\\n" % st.st_size)
while left > 0:
    chunk = os.read(fd, min(left, 1 << 20))
    if not chunk:
        break
    out.write(chunk)
    left -= len(chunk)
"""
_CONFINED_EXIT = {3: "does not exist", 4: "is not readable by it", 5: "is not a regular file"}


def find_program(root: str, name: str) -> str | None:
    """``name`` (a path, or looked up in :data:`SEARCH_PATH`) resolved inside ``root``."""
    if name.startswith("/"):
        return resolve_in_root(root, name)
    for d in SEARCH_PATH:
        found = resolve_in_root(root, f"{d}/{name}")
        if found:
            return found
    return None


def same_file(a: str, b: str) -> bool:
    """Whether two paths are one file (a namespace, a root); True when it cannot be told, so an
    unreadable /proc keeps the collector where it is."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return True
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def is_elf(path: str) -> bool:
    """Whether ``path`` is a regular file that starts like an ELF executable (a FIFO there is
    not opened for reading: that would block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, 4) == b"\x7fELF"
    except OSError:
        return False
    finally:
        os.close(fd)


@dataclass
class Host:
    """Where the node is: its root filesystem, and whether commands must enter its network
    namespace (the collector's own is a Pod's)."""

    root: str = "/"
    enter_netns: bool = False

    @classmethod
    def detect(cls, host_root: str | None) -> Host:
        root = os.path.abspath(host_root) if host_root else "/"
        if root == "/":
            return cls("/", False)
        enter = not same_file(os.path.join(root, "proc/1/ns/net"), "/proc/self/ns/net")
        return cls(root, enter)

    @property
    def chrooted(self) -> bool:
        return self.root != "/"

    def path(self, inside: str) -> str:
        """A path on the node (``/proc/locks``) as this process reaches it."""
        return os.path.join(self.root, inside.lstrip("/")) if self.chrooted else inside

    def net_proc(self, name: str) -> str:
        """A per-network-namespace /proc file (``net/stat/nf_conntrack``) of the node's namespace,
        as a path on the node: ``/proc/self/...`` is this process's namespace, ``/proc/1/...`` the
        node's init's."""
        pid = "1" if self.enter_netns else "self"
        return f"/proc/{pid}/{name}"

    def which(self, name: str) -> str | None:
        """The node's own binary ``name`` (path inside the node's root), if it is installed."""
        return find_program(self.root, name)

    def argv(self, argv: list[str]) -> list[str]:
        prefix: list[str] = []
        if self.chrooted:
            prefix = ["chroot", self.root]
        if self.enter_netns:
            prefix += ["nsenter", "--net=/proc/1/ns/net", "--"]
        return prefix + argv


class Runner:
    """Runs the allowlisted reads of one collection, recording each like the manifest wants."""

    def __init__(self, host: Host, budget: Budget) -> None:
        self.host = host
        self.budget = budget

    def command(
        self, path: str, argv: list[str], timeout: float = 15.0, *, root: str | None = None
    ) -> Collected | NotCollected:
        """Run ``argv`` (its program looked up on the node) and keep stdout as artifact ``path``.

        ``root`` runs it in another root instead (a container's, for kube-proxy's own binaries),
        as ``nobody`` with no new privileges: a program from an image is never run as root.
        A missing program, a script, or a spent budget gives :class:`NotCollected`; a failing or
        timed-out command gives :class:`Collected` with its exit code and stderr.
        """
        program = argv[0]
        where = root if root is not None else self.host.root
        found = find_program(where, program)
        if found is None:
            return NotCollected(path, f"{program} is not installed")
        if not is_elf(os.path.join(where, found.lstrip("/"))):
            return NotCollected(path, f"{program} resolves to {found}, not an executable binary: not run")
        limit = self.budget.timeout(timeout)
        if limit <= 0.05:
            return NotCollected(path, f"`{shlex.join(argv)}` not run: the collection's time bound was reached")
        if root is None:
            got = run_argv(path, self.host.argv(argv), limit, shown=shlex.join(argv))
            got.binary = found  # links already followed inside the node's root
            got.binary_version = self.version_of(program, found)
            return got
        if find_program("/", "setpriv") is None:
            why = "setpriv (util-linux) is needed to run it unprivileged"
            return NotCollected(path, f"`{shlex.join(argv)}` not run: {why}")
        ids = f"--userspec={NOBODY}:{NOBODY}"
        full = ["setpriv", "--no-new-privs", "chroot", ids, f"--groups={NOBODY}", root, *argv]
        return run_argv(path, full, limit, shown=f"{shlex.join(argv)} (as nobody, in {root})")

    def version_of(self, program: str, found: str) -> str:
        """What the node's ``program`` (at ``found`` in the node's root) says its version is, for
        the programs whose version matters (VERSION_ARGV); asked once per binary file."""
        args = VERSION_ARGV.get(os.path.basename(program))
        if args is None:
            return ""
        try:
            st = os.stat(self.host.path(found))
        except OSError:
            return ""
        key = (self.host.root, found, st.st_size, st.st_mtime_ns)
        got = _VERSIONS.get(key)
        if got is None:
            limit = self.budget.timeout(5.0)
            if limit <= 0.05:
                return ""
            out = run_argv("version", self.host.argv([program, *args]), limit)
            text = (out.data or out.stderr.encode()).decode("utf-8", "replace").strip()
            got = text.splitlines()[0][:200] if text and out.exit_code == 0 else ""
            if len(_VERSIONS) > 256:
                _VERSIONS.clear()
            _VERSIONS[key] = got
        return got

    def read_as(
        self, path: str, root: str, inside: str, who: Identity, limit: int, *, tail: bool = False
    ) -> Collected | NotCollected:
        """Read ``inside`` (a path as seen in ``root``) with the identity ``who``, as the process
        whose file it is would: a file that process could not read is not read for it either.
        At most ``limit`` bytes: the first ones, or with ``tail`` the last ones (a log; the cut
        first line dropped, as :meth:`read` does)."""
        limit_s = self.budget.timeout(5.0)
        if limit_s <= 0.05:
            return NotCollected(path, f"{inside} not read: the collection's time bound was reached")
        groups = ",".join(str(g) for g in who.groups)
        argv = [sys.executable, "-I", "-S", "-c", _CONFINED_READ, root, str(who.euid), str(who.egid), groups]
        argv += [inside, str(limit), "tail" if tail else "head"]
        got = run_argv(path, argv, limit_s, shown=f"read {inside} in {root} as uid {who.euid}")
        said = got.stderr.strip().splitlines()
        if got.exit_code == 5 and said and said[-1].startswith("mode "):
            return NotCollected(path, f"{inside} in {root} is {file_kind(int(said[-1][5:], 8))}: not read")
        if got.exit_code in _CONFINED_EXIT:
            return NotCollected(path, f"{inside} {_CONFINED_EXIT[got.exit_code]} in {root}")
        if got.exit_code != 0:
            last = (said or [f"exit {got.exit_code}"])[-1]
            return NotCollected(path, f"cannot read {inside} in {root}: {last}")
        if tail and said and said[0].startswith("size ") and said[0][5:].isdigit():
            size = int(said[0][5:])
            got.stderr = ""
            got.data = got.data.split(b"\n", 1)[1] if b"\n" in got.data else got.data  # the partial first line
            got.note = tail_note(limit, size)
        elif len(got.data) > limit:
            got.data, got.note = got.data[:limit], f"first {limit} bytes only"
        return got

    def read(self, path: str, inside: str, limit: int = MAX_OUTPUT, tail: bool = False) -> Collected | NotCollected:
        """Read the node file ``inside`` (a path on the node: ``/proc/locks``) into artifact ``path``.

        Links are followed only inside the node's root, only a regular file is read, at most
        ``limit`` bytes (``tail``: the last ones, for logs) and not past the collection's time
        bound (collect/node_files.py); anything else is one artifact not collected, with why."""
        started, t0 = utc_now(), time.monotonic()
        try:
            data, note = read_node_file(self.host.root, inside, limit, tail=tail, deadline=self.budget.deadline)
        except NodeFileError as exc:
            return NotCollected(path, str(exc))
        return Collected(path, data, f"read {inside}", 0, "", started, _ms(t0), note)


def run_argv(path: str, argv: list[str], timeout: float, shown: str | None = None) -> Collected:
    """Run a complete argv with a timeout; the whole process group dies when it overruns."""
    started, t0 = utc_now(), time.monotonic()
    shown = shown or shlex.join(argv)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV | {k: os.environ[k] for k in PASSED_ENV if k in os.environ},
            close_fds=True,
            start_new_session=True,
        )
    except OSError as exc:
        return Collected(path, b"", shown, None, f"cannot run: {exc.strerror or exc}", started, _ms(t0))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        out, err = proc.communicate()
        msg = f"timed out after {timeout:.1f}s (killed)"
        return Collected(path, out[:MAX_OUTPUT], shown, None, _text(err) + msg, started, _ms(t0), msg)
    note = ""
    if len(out) > MAX_OUTPUT:
        out, note = out[:MAX_OUTPUT], f"first {MAX_OUTPUT // 1024**2} MiB only"
    return Collected(path, out, shown, proc.returncode, _text(err), started, _ms(t0), note)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _text(err: bytes) -> str:
    return err[:MAX_STDERR].decode("utf-8", errors="replace")


def _ms(t0: float) -> int:
    return round((time.monotonic() - t0) * 1000)

