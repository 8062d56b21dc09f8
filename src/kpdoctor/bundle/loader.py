"""Turn what the user handed over (files, folders, tarballs, a pipe) into typed artifacts.

Bundle folders (with ``manifest.json``) are typed by path; everything else by content. Nothing
here raises on bad input: every unusable input becomes a one-line ``InputProblem`` and the rest
is still used. Named FIFOs, devices and sockets are refused without being opened (opening a FIFO
blocks until someone writes); ``-``, ``/dev/stdin`` and ``/dev/fd/N`` are read as streams, bounded
in size (and in time by the run's ``--timeout``). A bug met while reading one path is recorded as
an internal error naming that path, and the other paths are still read.

Folders are walked without recursion, at most :data:`~kpdoctor.bundle.archive.MAX_DEPTH` folders
deep: a deeper folder is refused with a one-line reason and the rest is read; so is a file the
system cannot reach by its path (longer than ``PATH_MAX``), and a file that cannot be read is a
problem of its own, not of the whole folder.

Temporary folders (an archive's extraction, a spooled pipe) are made by :func:`private_tempdir`:
``$TMPDIR/kpdoctor-<pid>-XXXX/`` holds one process's folders, with a lock file the process holds
(``flock``) for as long as they exist. :meth:`Evidence.close` removes them, and the CLI removes
whatever is left on every way out (errors, ``--timeout``, SIGINT/SIGTERM/SIGHUP, see ``cli.main``).
A process killed outright (SIGKILL, the OOM killer) cannot clean up: the next run that makes a
temporary folder removes such folders (:func:`sweep_stale`), but only a folder of its own user,
whose process is gone and whose lock is free, and not changed for a minute. A folder of a run in
another PID namespace sharing ``$TMPDIR`` is kept: its lock is still held.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

from kpdoctor import deadline, lazy_re
from kpdoctor.bundle.archive import MAX_DEPTH, TOO_DEEP, ArchiveError, extract, is_archive
from kpdoctor.bundle.artifacts import NETNS_KINDS, Artifact, Kind
from kpdoctor.bundle.contents import Collected, NotCollected
from kpdoctor.bundle.layout import BUNDLE_PATHS, KNOWN_UNUSED_PREFIXES
from kpdoctor.bundle.paste import unwrap_paste
from kpdoctor.bundle.segments import Segmented, segment
from kpdoctor.bundle.sniff import (
    HEAD_BYTES,
    Typed,
    kubectl_object,
    looks_binary,
    save_attrs,
    sniff,
    sniff_command,
    sniff_named,
)
from kpdoctor.bundle.transcript import Part, has_prompt, hint_from_command, split_transcript
from kpdoctor.knowledge import Signature, catalogue, require_declared
from kpdoctor.model import InputProblem, InternalError
from kpdoctor.parse.counts import parse_line_count
from kpdoctor.parse.logwrap import ALL_IN_ONE, writer_of
from kpdoctor.parse.lookups import is_timed_lookup, runs_a_client
from kpdoctor.parse.structured import StructuredError, load_json
from kpdoctor.parse.timing import started_by

MAX_TRANSCRIPT_BYTES = 64 * 1024**2  # a pasted session is small; a huge file is a log
MAX_INLINE_BYTES = 256 * 1024**2  # non-log artifacts are read into memory up to this size
MAX_PASTE_BYTES = 4 * 1024**2  # a paste whose wrapping (indent, quotes, grep) is taken off
LAZY_BYTES = 4 * 1024**2  # above this, rule dumps and object lists are read when parsed, not kept
LAZY_KINDS = (Kind.IPTABLES_SAVE, Kind.K8S_OBJECTS)
MAX_STREAM_BYTES = 2 * 1024**3  # a pipe is spooled to a temporary file up to this (a 2 GB log)
MAX_MANIFEST_BYTES = 16 * 1024**2  # a 10,000-Service node's manifest is ~20 kB
MAX_DIR_FILES = 20_000  # files read from one folder (a bundle has ~40; a cluster-info dump a few thousand)
MAX_REFUSED_LISTED = 20  # folders refused for their depth listed one by one; the rest are counted
STREAM = lazy_re.compile(r"^(?:-|/dev/stdin|/dev/fd/\d+|/proc/self/fd/\d+)$")
# Commands whose output is never evidence; their parts are passed over without a word.
_NOT_EVIDENCE = frozenset(("exit", "logout", "cd", "clear", "history", "pwd"))
# What users write where a command printed nothing: "(nothing)", "<no output>", "[empty]"
_EMPTY_OUTPUT = lazy_re.compile(
    r"^[(<\[]?\s*(?:nothing|no output|empty|none|no results?|no match(?:es)?)\s*[)>\]]?$", re.I
)


@dataclass
class Evidence:
    """The immutable set of artifacts a run works on, plus what could not be used."""

    artifacts: list[Artifact] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)
    errors: list[InternalError] = field(default_factory=list)  # bugs met while reading (exit 4)
    damaged: list[str] = field(default_factory=list)  # inputs that lost part of themselves: never "clean"
    node: str | None = None
    collected_at: str | None = None
    # what a collection says it could not read: bundle path -> why (a listing that failed is
    # unknown, never empty: an EndpointSlice list that failed does not mean no endpoints)
    not_collected: dict[str, str] = field(default_factory=dict)
    # the log signatures its texts are typed with, and the logs are scanned for (None: every one
    # known, :func:`catalogue`, read when first needed: a run given only rules and objects never
    # reads the messages catalogue)
    given_signatures: tuple[Signature, ...] | None = field(default=None, repr=False)
    _tempdirs: list[str] = field(default_factory=list)

    @property
    def signatures(self) -> tuple[Signature, ...]:
        if self.given_signatures is None:
            self.given_signatures = catalogue()
        return self.given_signatures

    def lazy_signatures(self) -> tuple[Signature, ...]:
        """:attr:`signatures`, as typing a file takes them (read when a text needs them)."""
        return self.signatures

    def of(self, kind: Kind) -> list[Artifact]:
        return [a for a in self.artifacts if a.kind == kind]

    def has(self, kind: Kind) -> bool:
        return any(a.kind == kind for a in self.artifacts)

    def close(self) -> None:
        for d in self._tempdirs:
            remove_tempdir(d)
        self._tempdirs.clear()

    def tempdir(self) -> str:
        """A new private temporary folder, removed by :meth:`close`."""
        tmp = private_tempdir()
        self._tempdirs.append(tmp)
        return tmp


TEMP_PREFIX = "kpdoctor-"
STALE_AFTER = 60.0  # seconds a dead process's temporary folder is left alone (it may be being made)
_LOCK_FILE = ".lock"
_STALE_NAME = lazy_re.compile(re.escape(TEMP_PREFIX) + r"(\d+)-[A-Za-z0-9_]+")
_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM}


@dataclass
class _Root:
    """One process's folder in one $TMPDIR: the temporary folders it holds, and its lock."""

    path: str
    pid: int
    fd: int  # the open lock file (-1: no lock could be taken)
    children: set[str] = field(default_factory=set)


_ROOTS: dict[str, _Root] = {}  # $TMPDIR -> this process's folder in it
_SWEPT: set[str] = set()  # the $TMPDIRs swept for stale folders already


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP/SIGALRM (delivered on leaving) while a temporary folder and its
    record are made or dropped together: an interruption between the two would leak the folder."""
    try:  # the mask as it is (nothing changed yet: an exception here leaves nothing blocked)
        old: set[int | signal.Signals] | None = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    except (OSError, ValueError, AttributeError):
        old = None
    try:
        # blocked inside the try: a handler of a signal that came just before (the --timeout's
        # SIGALRM) may raise right after this call, and the mask must still be restored; a mask
        # left blocked is inherited by every process started later (they ignore Ctrl-C)
        if old is not None:
            signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def private_tempdir() -> str:
    """A new empty folder only this user can read, under this process's ``kpdoctor-<pid>-`` folder
    in ``$TMPDIR`` (made, and locked, with the first)."""
    base = tempfile.gettempdir()
    if base not in _SWEPT:
        _SWEPT.add(base)
        sweep_stale(base)
    with _signals_held():
        root = _ROOTS.get(base)
        if root is not None and root.pid == os.getpid() and not os.path.isdir(root.path):
            _drop(base, root)  # removed under our feet: start a new one
            root = None
        if root is None or root.pid != os.getpid():  # none yet, or the parent's (a forked child)
            path = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=base)
            root = _ROOTS[base] = _Root(path, os.getpid(), _lock(path))
        tmp = tempfile.mkdtemp(dir=root.path)
        root.children.add(tmp)
    return tmp


def _lock(folder: str) -> int:
    """Create ``folder``'s lock file and hold it (flock: released by the kernel however the process
    ends); the open file, or -1 when it cannot be (the folder is then judged by its pid alone)."""
    try:
        fd = os.open(os.path.join(folder, _LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return -1
    return fd


def remove_tempdir(tmp: str) -> None:
    """Remove a folder :func:`private_tempdir` made, and this process's folder with its last one."""
    shutil.rmtree(tmp, ignore_errors=True)
    with _signals_held():
        for base, root in list(_ROOTS.items()):
            if tmp in root.children:
                root.children.discard(tmp)
                if not root.children and root.pid == os.getpid():
                    _drop(base, root)


def remove_tempdirs() -> None:
    """Remove every temporary folder this process made and still has (its last step)."""
    with _signals_held():
        for base, root in list(_ROOTS.items()):
            if root.pid == os.getpid():  # a forked child leaves its parent's alone
                _drop(base, root)


def _drop(base: str, root: _Root) -> None:
    shutil.rmtree(root.path, ignore_errors=True)  # removed while still locked
    if root.fd >= 0:
        with contextlib.suppress(OSError):
            os.close(root.fd)
    root.children.clear()
    _ROOTS.pop(base, None)


def sweep_stale(base: str) -> list[str]:
    """Remove from ``base`` the temporary folders of kpdoctor runs that were killed outright
    (SIGKILL, the OOM killer): ``kpdoctor-<pid>-*`` folders owned by this user, unchanged for
    :data:`STALE_AFTER` seconds, whose process is not alive and whose lock nobody holds. Returns
    the folders removed. Never raises."""
    removed: list[str] = []
    try:
        with os.scandir(base) as it:
            candidates = [e for e in it if e.name.startswith(TEMP_PREFIX)]
    except OSError:
        return removed
    uid, now = os.geteuid(), time.time()
    for e in candidates:
        m = _STALE_NAME.fullmatch(e.name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or now - st.st_mtime < STALE_AFTER:
            continue
        if _alive(int(m.group(1))) or _locked(e.path):
            continue
        shutil.rmtree(e.path, ignore_errors=True)
        removed.append(e.path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0  # another user's process (or a number no process has)
    return True


def _locked(folder: str) -> bool:
    """Whether a live process holds ``folder``'s lock (a run in another PID namespace: its pid
    means nothing here). No lock file: not locked (killed before it was made)."""
    try:
        fd = os.open(os.path.join(folder, _LOCK_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def load(paths: Iterable[str | Path], signatures: tuple[Signature, ...] | None = None) -> Evidence:
    """Load every path; unusable ones become problems, never exceptions. ``signatures``: the log
    lines that tell kube-proxy's world (every one declared: :func:`kpdoctor.knowledge.catalogue`)."""
    if signatures is None:
        require_declared()  # said at once, not as an error met while reading a text
    ev = Evidence(given_signatures=signatures)
    seen: set[tuple[int, int]] = set()  # (device, inode) of every file read: a file given twice is read once
    try:
        for raw in paths:
            label = "stdin" if str(raw) == "-" else _printable(os.fsdecode(raw))
            deadline.stage(f"reading {label}")
            try:
                _load_path(ev, str(raw), label, seen)
            except deadline.TimedOut as exc:
                ev.problems.append(InputProblem(label, f"not read completely: {exc}"))
                break
            except PermissionError:
                ev.problems.append(InputProblem(label, "permission denied"))
            except OSError as exc:
                ev.problems.append(InputProblem(label, f"cannot read: {exc.strerror or exc}"))
            except Exception as exc:  # a bug: named, and the other paths are still read
                ev.errors.append(InternalError.of(f"reading {label}", exc))
    except BaseException:  # Ctrl-C: no temporary folder outlives the run
        ev.close()
        raise
    return ev


def _printable(name: str) -> str:
    """A path as text that can be shown and written as UTF-8 (undecodable bytes become U+FFFD)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _load_path(ev: Evidence, raw: str, label: str, seen: set[tuple[int, int]]) -> None:
    if raw == "-":
        _load_stream(ev, sys.stdin.buffer, label, seen)
        return
    try:
        st = os.stat(raw)
    except FileNotFoundError:
        ev.problems.append(InputProblem(label, "no such file or directory"))
        return
    path = Path(raw)
    real = os.path.realpath(raw)
    kernel = real.startswith(KERNEL_FS) or real + "/" in KERNEL_FS
    if real == "/proc/kmsg":
        ev.problems.append(InputProblem(label, "reading it takes the kernel's messages from the logger: use dmesg"))
    elif stat.S_ISDIR(st.st_mode) and kernel:
        ev.problems.append(InputProblem(label, f"a kernel file system folder: name its files instead{_KERNEL_HINT}"))
    elif stat.S_ISDIR(st.st_mode):
        _load_dir(ev, path, label, seen=seen)
    elif stat.S_ISREG(st.st_mode) and kernel:
        # /proc and /sys files say they are empty, and some never end or block (/proc/kmsg):
        # read them as streams, without waiting
        fd = os.open(raw, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as fh:
            _load_stream(ev, fh, label, seen)
    elif stat.S_ISREG(st.st_mode):
        if _seen(seen, st):
            return
        if is_archive(path):
            _load_archive(ev, path, label, seen)
        else:
            _load_file(ev, path, label)
    elif STREAM.match(raw):
        with open(raw, "rb") as fh:  # a pipe, or a terminal: read as the stream it is
            _load_stream(ev, fh, label, seen)
    else:
        ev.problems.append(InputProblem(label, f"{_special(st.st_mode)}: refused without opening it{_PIPE_HINT}"))


_PIPE_HINT = " (to read a command's output, pipe it: `... | kpdoctor diagnose -`)"
_KERNEL_HINT = " (/proc/locks, /proc/modules, /proc/net/stat/nf_conntrack...), or collect with --live"
KERNEL_FS = ("/proc/", "/sys/")


def _special(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device, not a file"


def _seen(seen: set[tuple[int, int]], st: os.stat_result) -> bool:
    key = (st.st_dev, st.st_ino)
    if key in seen:
        return True
    seen.add(key)
    return False


def _load_stream(ev: Evidence, src: BinaryIO, label: str, seen: set[tuple[int, int]]) -> None:
    """A pipe (``kubectl logs ... | kpdoctor diagnose -``): spooled to a private temporary file,
    at most :data:`MAX_STREAM_BYTES`, then typed by content like any file. Binary data is refused
    from its first bytes, without reading on (``/dev/zero`` never ends)."""
    if src.isatty():
        print(f"kpdoctor: reading evidence from {label}: paste it, then Ctrl-D", file=sys.stderr)
    tmp = ev.tempdir()
    spool = Path(tmp) / "stdin"
    size, cut = 0, False
    with open(spool, "wb") as out:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                break
            if size == 0 and looks_binary(chunk[:HEAD_BYTES]):
                ev.problems.append(InputProblem(label, "binary data, not text evidence: skipped"))
                return
            if size + len(chunk) > MAX_STREAM_BYTES:
                out.write(chunk[: MAX_STREAM_BYTES - size])
                size, cut = MAX_STREAM_BYTES, True
                break
            out.write(chunk)
            size += len(chunk)
    if cut:
        ev.problems.append(InputProblem(label, f"only its first {MAX_STREAM_BYTES // 1024**3} GiB were read"))
    if size == 0:
        ev.problems.append(InputProblem(label, "nothing was read from it (empty input)"))
        return
    if is_archive(spool):
        _load_archive(ev, spool, label, seen)
    else:
        _load_file(ev, spool, label)


def _load_archive(ev: Evidence, path: Path, label: str, seen: set[tuple[int, int]]) -> None:
    tmp = ev.tempdir()
    try:
        out = extract(path, Path(tmp))
    except ArchiveError as exc:
        ev.problems.append(InputProblem(label, str(exc)))
        return
    for name, reason in out.refused:
        ev.problems.append(InputProblem(f"{label}:{_printable(name)}", f"refused: {reason}"))
    for damage in out.damaged:
        ev.problems.append(InputProblem(label, damage))
        ev.damaged.append(label)
    root = Path(tmp)
    entries = [p for p in root.iterdir()]
    if len(entries) == 1 and entries[0].is_dir():
        root = entries[0]
    _load_dir(ev, root, label, display_root=label, seen=seen)


def _walk(ev: Evidence, root: Path, label: str) -> list[Path]:
    """The regular files under ``root``, in ``os.walk`` order (top-down, sorted), at most
    :data:`MAX_DIR_FILES`. Links and special files are not followed or opened. Walked without
    recursion: folders more than :data:`~kpdoctor.bundle.archive.MAX_DEPTH` deep are refused, one
    line each (at most :data:`MAX_REFUSED_LISTED`); folders that cannot be read and files whose
    path the system cannot take (``ENAMETOOLONG``) are counted, never fatal."""
    files: list[Path] = []
    unreadable = too_long = 0
    deep: list[str] = []
    cut = False
    stack: list[tuple[str, int]] = [(os.fspath(root), 0)]  # a folder, and how many folders deep it is
    while stack and not cut:
        here, depth = stack.pop()
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                too_long += 1
            else:
                unreadable += 1
            continue
        subdirs: list[str] = []
        for e in entries:
            try:
                mode = os.lstat(e.path).st_mode  # by its whole path: the one it is read by
            except OSError as exc:
                too_long += exc.errno == errno.ENAMETOOLONG
                continue
            if stat.S_ISDIR(mode):
                subdirs.append(e.path)
            elif stat.S_ISREG(mode):
                if len(files) >= MAX_DIR_FILES:
                    cut = True
                    break
                files.append(Path(e.path))
        if subdirs and depth >= MAX_DEPTH:
            deep += subdirs
            continue
        stack.extend((d, depth + 1) for d in reversed(subdirs))
    if cut:
        ev.problems.append(InputProblem(label, f"more than {MAX_DIR_FILES:,} files: the rest were not read"))
    for d in deep[:MAX_REFUSED_LISTED]:
        rel = _printable(os.path.relpath(d, root))
        rel = rel if len(rel) <= 512 else rel[:509] + "..."
        ev.problems.append(InputProblem(f"{label}:{rel}", f"refused: {TOO_DEEP}"))
    if len(deep) > MAX_REFUSED_LISTED:
        more = len(deep) - MAX_REFUSED_LISTED
        ev.problems.append(InputProblem(label, f"{more:,} more folder(s) refused: {TOO_DEEP}"))
    if unreadable:
        ev.problems.append(InputProblem(label, f"{unreadable} folder(s) could not be read (permission denied)"))
    if too_long:
        ev.problems.append(
            InputProblem(label, f"{too_long} file(s) or folder(s) not read: path longer than the system allows")
        )
    return files


def _load_dir(
    ev: Evidence,
    root: Path,
    label: str,
    display_root: str | None = None,
    seen: set[tuple[int, int]] | None = None,
) -> None:
    manifest_path = root / "manifest.json"
    manifest: dict[str, dict[str, object]] = {}
    bundle = manifest_path.is_file() and not manifest_path.is_symlink()
    if bundle:
        manifest = _read_manifest(ev, manifest_path, label)
    files = _walk(ev, root, label)
    dump = _is_cluster_info_dump(root)
    ignored_logs = 0
    arrived: set[str] = set()
    for f in files:
        rel = f.relative_to(root).as_posix()
        arrived.add(rel)
        shown = f"{display_root}:{rel}" if display_root else str(f)
        if rel == "manifest.json":
            continue
        name = _printable(rel if bundle or display_root else shown)  # what the file is called in the report
        try:
            ignored_logs += _load_member(ev, f, rel, shown, name, manifest if bundle else None, dump, seen)
        except OSError as exc:  # this file, not the whole folder (removed meanwhile, unreadable)
            why = "permission denied" if isinstance(exc, PermissionError) else f"cannot read: {exc.strerror or exc}"
            ev.problems.append(InputProblem(name, why))
    if ignored_logs:
        ev.problems.append(InputProblem(label, f"cluster-info dump: {ignored_logs} logs of other Pods not read"))
    if bundle and _compare_manifest(ev, root, manifest, arrived):
        ev.damaged.append(label)


def _load_member(
    ev: Evidence,
    f: Path,
    rel: str,
    shown: str,
    name: str,
    manifest: dict[str, dict[str, object]] | None,
    dump: bool,
    seen: set[tuple[int, int]] | None,
) -> int:
    """Read one file of a folder (``manifest``: the bundle's, None when not a bundle); 1 when it is
    a log of a cluster-info dump that is passed over, else 0."""
    bundle = manifest is not None
    if seen is not None and _seen(seen, f.stat()):
        return 0
    deadline.stage(f"reading {_printable(shown)}")
    if manifest is not None and rel in BUNDLE_PATHS:
        kind, attrs = BUNDLE_PATHS[rel]
        entry = manifest.get(rel, {})
        exit_code = entry.get("exit_code")
        if isinstance(exit_code, int) and exit_code != 0 and f.stat().st_size == 0:
            stderr = str(entry.get("stderr") or "").strip().splitlines()
            why = stderr[0] if stderr else ""
            _not_collected(ev, rel, why, exit_code)
            return 0
        attrs = dict(attrs)
        when = entry.get("collected_at") or entry.get("started_at")
        if isinstance(when, str) and when:
            attrs["time"] = when  # counter snapshots: the interval between T0 and T1
        _add_typed(ev, f, rel, Typed(kind, attrs))
        return 0
    if bundle and rel.startswith(KNOWN_UNUSED_PREFIXES):
        return 0
    if dump and rel.endswith("logs.txt") and "kube-proxy" not in rel:
        return 1
    _load_file(ev, f, name)
    return 0


def _compare_manifest(ev: Evidence, root: Path, manifest: dict[str, dict[str, object]], arrived: set[str]) -> bool:
    """A bundle is what its manifest says it is: an artifact listed but absent, or of another size,
    means a damaged or edited bundle, and the report must not look as if that evidence was clean.
    True when something differs."""
    differs = False
    for rel, entry in manifest.items():
        if rel not in arrived:
            ev.problems.append(InputProblem(rel, "listed in the bundle's manifest, but missing (damaged bundle?)"))
            differs = True
            continue
        want = entry.get("bytes")
        if isinstance(want, int) and not isinstance(want, bool):
            got = (root / rel).stat().st_size
            if got != want:
                ev.problems.append(
                    InputProblem(rel, f"{got:,} bytes, but the manifest says {want:,} (damaged or edited since)")
                )
                differs = True
    return differs


def _is_cluster_info_dump(root: Path) -> bool:
    return (root / "nodes.json").is_file() and any(root.glob("*/pods.json"))


def _not_collected(ev: Evidence, path: str, why: str, exit_code: int | None = None) -> None:
    """``path`` could not be collected: a problem the report shows, and a fact the checks read
    (what was not read is unknown, never empty)."""
    if exit_code is None:
        reason, said = why, f"not collected: {why}"
    else:
        reason = f"exit {exit_code}{': ' + why if why else ''}"
        said = f"not collected ({reason})"
    ev.problems.append(InputProblem(path, said))
    ev.not_collected[path] = reason


def add_collected(
    ev: Evidence,
    artifacts: Iterable[Collected],
    absent: Iterable[NotCollected] = (),
    node: str | None = None,
    collected_at: str | None = None,
) -> Evidence:
    """A live collection as evidence, in memory (no bundle written and read back): each artifact
    typed by its bundle path, as a bundle folder's would be, and each absent one a problem. The
    collected artifacts come first, as a bundle given before the other paths does."""
    got = Evidence(node=node, collected_at=collected_at)
    for a in artifacts:
        rel = a.path
        if rel not in BUNDLE_PATHS:
            continue  # collected for a person reading the bundle (KNOWN_UNUSED_PREFIXES)
        kind, attrs = BUNDLE_PATHS[rel]
        if a.exit_code not in (0, None) and not a.data:
            why = a.stderr.strip().splitlines()[0] if a.stderr.strip() else ""
            _not_collected(got, rel, why, a.exit_code)
            continue
        attrs = {**attrs, **({"time": a.started_at} if a.started_at else {})}
        _add_inline(got, rel, Typed(kind, attrs), a.data.decode("utf-8-sig", errors="replace"), parsed=a.parsed)
    for n in absent:
        _not_collected(got, n.path, n.reason)
    ev.artifacts[:0] = got.artifacts
    ev.problems[:0] = got.problems
    ev.not_collected.update(got.not_collected)
    ev.node = ev.node or got.node
    ev.collected_at = ev.collected_at or got.collected_at
    return ev


def _read_manifest(ev: Evidence, path: Path, label: str) -> dict[str, dict[str, object]]:
    where = f"{label}/manifest.json"
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        too_big = f"larger than {MAX_MANIFEST_BYTES // 1024**2} MiB: bundle typed by path only"
        ev.problems.append(InputProblem(where, too_big))
        return {}
    try:
        doc = load_json(path.read_text(encoding="utf-8", errors="replace"))
    except StructuredError as exc:
        ev.problems.append(InputProblem(where, f"{exc}; bundle typed by path only"))
        return {}
    if not isinstance(doc, dict):
        ev.problems.append(InputProblem(where, "not a JSON object"))
        return {}
    node = doc.get("node") or doc.get("node_name")
    if isinstance(node, str) and node:
        ev.node = ev.node or node
    collected = doc.get("collected_at")
    if isinstance(collected, str):
        ev.collected_at = ev.collected_at or collected
    entries: dict[str, dict[str, object]] = {}
    absent = doc.get("not_collected")
    if isinstance(absent, list):
        for a in absent:
            if isinstance(a, dict) and isinstance(a.get("path"), str):
                why = a.get("reason") or "no reason given"
                _not_collected(ev, str(a["path"]), str(why))
    arts = doc.get("artifacts")
    if isinstance(arts, list):
        for a in arts:
            if isinstance(a, dict) and isinstance(a.get("path"), str) and a["path"] in BUNDLE_PATHS:
                entries[str(a["path"])] = a
    return entries


def _read_head(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(HEAD_BYTES)


def _load_file(ev: Evidence, path: Path, label: str) -> None:
    size = path.stat().st_size
    if size == 0:
        ev.problems.append(InputProblem(label, "empty file, skipped"))
        return
    head = _read_head(path)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 with its BOM: PowerShell's `>` writes it
        if size > MAX_INLINE_BYTES:
            ev.problems.append(InputProblem(label, f"UTF-16 text of {size // 1024**2} MiB: too large, skipped"))
            return
        path = _as_utf8(ev, path)
        size = path.stat().st_size
        head = _read_head(path)
    if looks_binary(head):
        ev.problems.append(InputProblem(label, "binary data, not text evidence: skipped"))
        return
    head_text = head.decode("utf-8-sig", errors="replace")
    whole = head_text if size <= len(head) else None  # the whole text, read once when needed
    # why each command of a wrapped (quoted, indented) session was not read: said instead of
    # "not recognised" when nothing else reads the file, as for the same session unwrapped
    unread: list[InputProblem] = []
    if size <= MAX_PASTE_BYTES:
        whole = whole if whole is not None else path.read_text(encoding="utf-8-sig", errors="replace")
        if _load_unwrapped(ev, label, whole, unread):
            return
    # A pasted session starts with its first command; a big file with no prompt in its head is
    # one command's output, and is not read whole just to look for prompts.
    if size <= MAX_TRANSCRIPT_BYTES and (size <= len(head) or has_prompt(head_text)):
        text = whole if whole is not None else path.read_text(encoding="utf-8-sig", errors="replace")
        parts = split_transcript(text)
        if parts is not None:
            _load_transcript(ev, label, parts)
            return
    typed = sniff(head_text, ev.lazy_signatures)
    if typed.kind is None:  # a shell script its name says a preStop hook runs (prestop.sh)
        typed = sniff_named(label, head_text) or typed
    if whole is not None and _load_untyped(ev, label, whole, typed):
        return
    if typed.kind is None:
        ev.problems.extend(unread or [InputProblem(label, typed.reason)])
        return
    _add_typed(ev, path, label, typed)


def _load_untyped(ev: Evidence, label: str, text: str, typed: Typed, paste: tuple[str, ...] = ()) -> bool:
    """What a paste its content does not type whole (or only as mere log lines) is, read so;
    True when it was. The same steps for a file as for a paste without its wrapping (``paste``:
    what was taken off)."""
    if typed.kind is None or (typed.kind is Kind.KUBE_PROXY_LOG and typed.attrs.get("fragment") == "true"):
        # output first, then the command that counted it: a transcript after all (before reading
        # the text as a mere fragment of log lines for the messages it holds)
        parts = split_transcript(text, lenient=True) if has_prompt(text) else None
        if parts is not None and _load_transcript(ev, label, parts, report_unused=False, paste=paste):
            return True
        # a command pasted without its prompt, above what it printed: read as that command's
        # (`sudo dmesg -T` over the kernel's lines is the kernel's log, not mere log lines)
        parts = split_transcript(text, lenient=True, bare=True)
        if parts is not None and _load_transcript(ev, label, parts, report_unused=False, paste=paste):
            return True
    # several kinds of output in one paste, each read as what it is
    extra = {"paste": ", ".join(paste)} if paste else None
    return _load_segmented(ev, label, text, extra=extra, hint=typed)


def _load_segmented(
    ev: Evidence,
    label: str,
    text: str,
    first_line: int = 1,
    extra: dict[str, str] | None = None,
    hint: Typed | None = None,
    netns: str = "",
) -> bool:
    """A paste of several kinds of output (bundle/segments.py), each part read as the kind it is;
    True when it is one and a part of it was read. A part nothing reads is said, with its lines;
    so is a part of the dataplane when the paste is another network namespace's (``netns``: what
    entered it)."""
    seg: Segmented | None = segment(text, ev.lazy_signatures, hint) if len(text) <= MAX_PASTE_BYTES else None
    if seg is None or not any(s.typed.kind is not None for s in seg.segments):
        return False
    aside = f"{seg.asides} line(s) of headings, fences or notes left out" if seg.asides else ""
    said = f"one of {len(seg.segments)} parts of the paste, read apart by the shape of its lines"
    said = aside if len(seg.segments) == 1 else f"{said}; {aside}" if aside else said
    for n, s in enumerate(seg.segments):
        # the command printed the first part; what follows a heading or another kind of output
        # may be anything the user added (its scope still holds: never the node's if not)
        hints = {k: v for k, v in (extra or {}).items() if n == 0 or k in ("scope", "paste")}
        start = first_line + s.first_line - 1
        end = start + s.text.count("\n") - 1
        if s.typed.kind is None:
            # a command pasted without its prompt above what it printed: read as its output
            parts = split_transcript(s.text, lenient=True, bare=True)
            moved = [replace(p, first_line=p.first_line + start - 1) for p in parts or []]
            if moved and _load_transcript(ev, label, moved, report_unused=False):
                continue
            ev.problems.append(InputProblem(f"{label}:{start}-{end}", s.typed.reason or "not read"))
        elif netns and s.typed.kind in NETNS_KINDS:
            ev.problems.append(InputProblem(f"{label}:{start}-{end}", _other_netns(s.typed.kind, netns)))
        else:
            _add_inline(ev, label, s.typed, s.text, {**hints, "part": said}, first_line=start)
    return True


def _other_netns(kind: Kind, where: str) -> str:
    """Why the node's dataplane read in another network namespace is not read as the node's."""
    return f"{kind} of another network namespace (`{where}`: a Pod's), not the node's dataplane: not read as the node's"


def _load_unwrapped(ev: Evidence, label: str, text: str, unread: list[InputProblem]) -> bool:
    """A paste read without its wrapping (markdown indentation or quotes, grep prefixes,
    backticks: bundle/paste.py), when it has one and is evidence without it; True when so.
    Taken off first: an indented log would otherwise be read as one record of continuation
    lines, and a grep'd one not at all. ``unread`` gets why a session's commands were not read
    when none was."""
    un = unwrap_paste(text)
    if not un.removed:
        return False
    parts = split_transcript(un.text)
    if parts is not None:
        return _load_transcript(ev, label, parts, report_unused=False, paste=un.removed, unread=unread)
    typed = sniff(un.text[:HEAD_BYTES], ev.lazy_signatures)
    if _load_untyped(ev, label, un.text, typed, paste=tuple(un.removed)):
        return True
    if typed.kind is None:
        return False
    _add_inline(ev, label, typed, un.text, {"paste": ", ".join(un.removed)})
    return True


def _as_utf8(ev: Evidence, path: Path) -> Path:
    """A UTF-16 file re-encoded as UTF-8 in a private temporary folder (line numbers unchanged)."""
    tmp = ev.tempdir()
    out = Path(tmp) / "utf8"
    out.write_text(path.read_bytes().decode("utf-16", errors="replace"), encoding="utf-8")
    return out


def _add_typed(ev: Evidence, path: Path, label: str, typed: Typed) -> None:
    assert typed.kind is not None
    size = path.stat().st_size
    if typed.kind == Kind.KUBE_PROXY_LOG:
        ev.artifacts.append(Artifact(label, typed.kind, path=os.fspath(path), attrs=typed.attrs, size=size))
        return
    if size > MAX_INLINE_BYTES:
        ev.problems.append(InputProblem(label, f"{size // 1024**2} MiB is too large for {typed.kind.value}: skipped"))
        return
    if typed.kind in LAZY_KINDS and size > LAZY_BYTES:
        # Parsed once into facts: keep the path, not a second copy of 100 MB of text in memory.
        attrs = typed.attrs
        if typed.kind == Kind.IPTABLES_SAVE and "backend" not in attrs:
            attrs = {**attrs, **save_attrs(_read_head(path).decode("utf-8", errors="replace"))}
        ev.artifacts.append(Artifact(label, typed.kind, path=os.fspath(path), attrs=attrs, size=size))
        return
    raw = path.read_bytes()
    text = raw.decode("utf-8-sig", errors="replace")  # a BOM is not content
    _add_inline(ev, label, typed, text, origin=os.fspath(path))


def _kube_proxy_writes(log_of: str | None) -> bool:
    """May the log a command printed be kube-proxy's (its Pod, container or unit, or a binary
    that runs it, or nothing named)?"""
    return not log_of or writer_of(log_of, "") in ("kube-proxy", *ALL_IN_ONE)


def _add_inline(
    ev: Evidence,
    label: str,
    typed: Typed,
    text: str,
    extra: dict[str, str] | None = None,
    first_line: int = 1,
    parsed: object | None = None,
    origin: str | None = None,
) -> None:
    kind = typed.kind
    assert kind is not None
    attrs = {**typed.attrs, **(extra or {})}
    if kind == Kind.KUBE_PROXY_LOG and (
        not _kube_proxy_writes(attrs.get("log_of")) or runs_a_client(attrs.get("command", ""))
    ):
        # another program's log (`kubectl logs coredns-...`), a client's output (`nslookup x`):
        # read for its lines, never as kube-proxy's log
        attrs["fragment"] = "true"
    if kind == Kind.IPTABLES_SAVE and "backend" not in attrs:
        attrs.update({k: v for k, v in save_attrs(text).items() if k not in attrs})
    art = Artifact(label, kind, text=text, first_line=first_line, attrs=attrs, size=len(text), parsed=parsed)
    ev.artifacts.append(dataclasses.replace(art, origin=origin) if origin else art)


def _load_transcript(
    ev: Evidence,
    label: str,
    parts: list[Part],
    report_unused: bool = True,
    paste: tuple[str, ...] = (),
    unread: list[InputProblem] | None = None,
) -> bool:
    """Each command's output typed on its own (an output not recognised as it is, read again
    without its wrapping); True when any was used. ``paste``: what was taken off the whole file
    before it could be split (``report_unused`` False: the caller reports the file instead,
    with what this adds to ``unread``: why each command's output was not read)."""
    used = 0
    problems: list[InputProblem] = []
    when: str | None = None  # the output of the last `date`: when the following commands ran
    for p in parts:
        if not p.text.strip():
            continue
        if p.argv and p.argv[0].rsplit("/", 1)[-1] == "date":
            when = p.text.strip().splitlines()[0]
            continue
        hints = hint_from_command(p.argv) if p.argv else {}
        if p.scope is not None and (p.scope in ("host", "netns") or "scope" not in hints):
            hints["scope"] = p.scope  # nsenter/ip netns exec over kubectl exec, kubectl exec over the prompt
        if when is not None:
            hints["time"] = when
        if paste:
            hints["paste"] = ", ".join(paste)
        kind = hints.pop("kind", "")
        forced = Kind(kind) if kind else None  # what only the command types (hint_from_command)
        if parse_line_count(p.text, p.command, p.first_line) is not None:
            # `... | wc -l`: the number is the output, the command what it counts (`cat
            # /proc/net/nf_conntrack | wc -l` prints no entry of the file, only how many)
            forced = Kind.LINE_COUNT
        if forced is None and is_timed_lookup(p.text, p.command):
            forced = Kind.LOOKUP_TIMING  # how long a lookup took: read with its command (dig's lines too)
        text = p.text
        un = unwrap_paste(text)  # a part's own wrapping (grep -n of one command) comes off first too
        retyped = sniff(un.text, ev.lazy_signatures) if un.removed and not forced else Typed(None, {})
        if retyped.kind is not None or (forced and un.removed):
            # typed without its wrapping; or what the command types, read without it
            typed, text = retyped if retyped.kind is not None else Typed(forced, {}), un.text
            hints["paste"] = ", ".join((*paste, *un.removed))
        else:
            typed = Typed(forced, {}) if forced else sniff(text, ev.lazy_signatures)
        by_command = None
        if typed.kind is None:  # what only the command tells: a timed stop, a preStop script shown
            by_command = sniff_command(p.command, text)
            typed = by_command or typed
        elif typed.kind == Kind.K8S_OBJECTS and "kind" not in typed.attrs:
            hints.update(kubectl_object(p.command))  # its object's kind and name, where the paste cut them
        if typed.kind == Kind.STOP_TIMING:  # the `docker run` that started the stopped container
            hints.update(started_by([(q.command, q.first_line - 1) for q in parts[: parts.index(p)]], p.command))
        extra = {**hints, "command": p.command}
        netns = p.where if hints.get("scope") == "netns" else ""
        if not forced and by_command is None and _load_segmented(ev, label, text, p.first_line, extra, typed, netns):
            used += 1
            continue
        if typed.kind is None and p.argv and p.argv[0].rsplit("/", 1)[-1] in _NOT_EVIDENCE:
            continue  # `exit`, `cd`: what they print says nothing about the node
        if typed.kind is None and _EMPTY_OUTPUT.match(text.strip()):
            typed = Typed(None, {}, "printed nothing (the placeholder says so): nothing matched")
        if typed.kind is None:
            what = f"output of `{p.command}`" if p.argv else "the text before the first command"
            where = f"{label}:{p.first_line - 1}" if p.argv else f"{label}:1"
            problems.append(InputProblem(where, f"{what}: {typed.reason}"))
            continue
        if netns and typed.kind in NETNS_KINDS:
            why = f"output of `{p.command}`: {_other_netns(typed.kind, netns)}"
            ev.problems.append(InputProblem(f"{label}:{p.first_line - 1}", why))
            used += 1
            continue
        _add_inline(ev, label, typed, text, {**hints, "command": p.command}, first_line=p.first_line)
        used += 1
    if used or report_unused:
        ev.problems.extend(problems)
    if not used:
        said = InputProblem(label, "terminal transcript, but no command output kpdoctor reads")
        if report_unused:
            ev.problems.append(said)
        elif unread is not None and problems:
            unread.extend([*problems, said])
    return used > 0
