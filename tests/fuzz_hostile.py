"""Hostile inputs that are not mutated evidence files: a damaged node root, deep trees, YAML alias
bombs, a hung or slow API server and planted secrets, each run through the real CLI.

``tests/fuzzing.py`` mutates the bytes of real evidence; the defects of docs/security.md's other
classes come from where evidence lives and who answers: a FIFO or a dangling link where kube-proxy's
Pod log should be, a bundle folder thousands of directories deep, a 1 KB YAML that expands to a
billion nodes, an apiserver that accepts and never answers (or sends a byte a second), a password
in the middle of a log line. A case is rebuilt from ``(seed, index)`` alone, like a mutation case.

Every case runs ``python -m kpdoctor ...`` with ``TMPDIR`` pointed at a fresh folder and holds it to
the promises: it ends within its ``--timeout`` (plus a grace), never with exit code 4 or a
traceback, leaves no temporary folder, writes the bundle or report it was asked for, keeps the
rest of a bundle readable when one part is hostile, never copies a file from outside the node root,
and never lets a planted secret into a bundle, plain or base64.
"""

from __future__ import annotations

import base64
import io
import json
import os
import random
import re
import signal
import socket
import stat
import string
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzzing import BUNDLES_ROOT, Finding, where_from_traceback_text

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"  # the kpdoctor run (PYTHONPATH, when set, says which: tests of an older tree)
CLASSES = ("collect-paths", "deep-tree", "alias-bomb", "slow-api", "secrets")
GRACE = 15.0  # seconds a run may overrun its --timeout (interpreter start, writing the report)
LOG_DIR = "var/log/pods/kube-system_kube-proxy-fz8k2_0c9a7e7e-5d3b-4e0e-9a51-3f1f2f6c7a10/kube-proxy"


@dataclass
class HostileCase:
    seed: int
    index: int
    cls: str  # one of CLASSES
    kind: str  # the class and its variant, as counted in reports ("collect-paths/fifo")
    detail: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def ident(self) -> str:
        return f"{self.seed}:{self.index}"


def make_hostile(seed: int, index: int, classes: tuple[str, ...] = CLASSES) -> HostileCase:
    """Hostile case ``index`` of run ``seed`` (drawn from ``classes``): rebuilt from these alone."""
    rng = random.Random(f"kpdoctor-hostile:{seed}:{index}")
    cls = classes[index % len(classes)] if rng.random() < 0.5 else rng.choice(classes)
    p: dict[str, Any] = {"token_seed": rng.getrandbits(64)}
    if cls == "collect-paths":
        p["what"] = rng.choice(("fifo", "dangling-link", "outside-link", "link-loop", "char-device", "socket",
                                "directory", "sparse-huge", "relative-outside-link"))  # fmt: skip
        p["where"] = rng.choice((f"{LOG_DIR}/0.log", f"{LOG_DIR}/1.log", "etc/os-release", "proc/modules",
                                 "proc/locks", "proc/sys/kernel/hostname", "usr/lib/os-release"))  # fmt: skip
        p["command"] = rng.choice(("collect", "collect", "diagnose-live", "agent-once"))
        p["timeout"] = rng.choice((8, 12, 20))
        detail = f"{p['what']} at /{p['where']}, {p['command']} --timeout {p['timeout']}"
        kind = f"{cls}/{p['what']}"
    elif cls == "deep-tree":
        p["depth"] = rng.choice((63, 65, 200, 1000, 2000, 3000))
        p["form"] = rng.choice(("folder", "tar.gz", "tar"))
        p["bundle"] = rng.choice(sorted(d.name for d in BUNDLES_ROOT.iterdir() if d.is_dir()))
        p["segment"] = rng.choice(("d", "x" * 8, "cluster"))
        detail = f"{p['form']} of demo/{p['bundle']} with a member {p['depth']} directories deep"
        kind = f"{cls}/{p['form']}"
    elif cls == "alias-bomb":
        p["levels"] = rng.randint(3, 9)
        p["fanout"] = rng.choice((5, 9, 10))
        p["where"] = rng.choice(("loose-config", "loose-list", "bundle-config", "bundle-tar", "bundle-cluster"))
        p["key"] = rng.choice(("items", "items", "spec", "featureGates", "bomb"))
        detail = f"{p['levels']} alias levels of {p['fanout']} at {p['key']}, {p['where']}"
        kind = f"{cls}/{p['where']}"
    elif cls == "slow-api":
        p["mode"] = rng.choice(("hang", "trickle-body", "trickle-headers", "half-json", "no-accept"))
        p["command"] = rng.choice(("collect", "agent-once", "diagnose-live"))
        p["timeout"] = rng.choice((10, 15, 20))
        detail = f"apiserver {p['mode']}, {p['command']} --timeout {p['timeout']}"
        kind = f"{cls}/{p['mode']}"
    else:
        p["forms"] = rng.sample(sorted(SECRET_FORMS), rng.randint(3, len(SECRET_FORMS)))
        p["via"] = rng.choice(("pod-log", "pod-log", "cluster"))
        detail = f"{len(p['forms'])} planted secret forms via {p['via']}: {', '.join(p['forms'])}"
        kind = f"{cls}/{p['via']}"
    return HostileCase(seed, index, cls, kind, detail, p)


# ------------------------------------------------------------------------------------- running


@dataclass
class Run:
    argv: list[str]
    code: int | None  # None: killed after the deadline
    seconds: float
    stdout: bytes
    stderr: str


def as_from_a_shell() -> None:
    """The signal state a shell gives a command: nothing blocked, nothing ignored (not what the
    test process holds after in-process tests of code that handles signals)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


def run_kpdoctor(args: list[str], tmp: Path, limit: float, cwd: Path | None = None) -> Run:
    """``python -m kpdoctor ARGS`` with TMPDIR=tmp, killed (with a stack dump) after ``limit`` s."""
    env = dict(os.environ, TMPDIR=str(tmp), NO_COLOR="1", PYTHONPATH=os.environ.get("PYTHONPATH") or str(SRC))
    env.pop("KPDOCTOR_DEBUG", None)
    env.pop("KUBECONFIG", None)
    argv = [sys.executable, "-X", "faulthandler", "-m", "kpdoctor", *args]
    t0 = time.monotonic()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          env=env, cwd=cwd or tmp, start_new_session=True,
                          preexec_fn=as_from_a_shell) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(timeout=limit)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            proc.send_signal(6)  # SIGABRT: faulthandler prints where it is
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                out, err = proc.communicate()
            code = None
    return Run(argv, code, time.monotonic() - t0, out, err.decode("utf-8", "replace"))


def judge(case: HostileCase, run: Run, tmp: Path, phase: str) -> list[Finding]:
    """What every hostile run must hold: in time, no exit 4 or traceback, no temporary folder left."""
    out: list[Finding] = []
    tag = f"{case.kind}: {phase}"
    if run.code is None:
        where, line = where_from_traceback_text(run.stderr)
        out.append(Finding("hostile-timeout", case.cls, where if where != "?" else phase, line,
                           f"{tag}: still running after {run.seconds:.0f} s", run.stderr[-6000:]))  # fmt: skip
        return out
    internal = re.search(r"internal error(?: in ([^:\n]+))?: (\w+)", run.stderr)
    if run.code == 4 or internal or "Traceback (most recent call last)" in run.stderr:
        exc = internal.group(2) if internal else ""
        where = f"stage:{internal.group(1)}" if internal and internal.group(1) else phase
        said = (run.stderr.strip().splitlines() or [""])[-1]
        out.append(Finding("hostile-internal-error", f"{case.cls}:{exc}", where, "",
                           f"{tag} (exit {run.code}): {said[:240]}", run.stderr[-6000:]))  # fmt: skip
    if run.code not in (0, 1, 2, 3, 4):
        out.append(Finding("hostile-bad-exit", case.cls, phase, "", f"{tag}: exit {run.code}", run.stderr[-2000:]))
    left = sorted(p.name for p in tmp.iterdir() if p.name.startswith("kpdoctor"))
    if left:
        out.append(Finding("hostile-temp-leak", case.cls, phase, "", f"{tag}: left in TMPDIR: {left[:5]}"))
    return out


def run_hostile(case: HostileCase, work: Path) -> list[Finding]:
    """Build the case under ``work`` (an empty folder), run it, and return what broke a promise."""
    runner: dict[str, Callable[[HostileCase, Path], list[Finding]]] = {
        "collect-paths": _collect_paths, "deep-tree": _deep_tree, "alias-bomb": _alias_bomb,
        "slow-api": _slow_api, "secrets": _secrets,
    }  # fmt: skip
    return runner[case.cls](case, work)


# --------------------------------------------------------------------------------- node roots


def fake_root(root: Path, hostname: str = "fuzz-node") -> Path:
    """A node's / as a debug Pod mounts it, with only what the collector reads first."""
    (root / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/hostname").write_text(hostname + "\n")
    (root / "proc/modules").write_text("nf_conntrack 172032 3 - Live 0x0000000000000000\n")
    (root / "proc/locks").write_text("")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/os-release").write_text('NAME="Fuzz Linux"\nID=fuzz\nVERSION_ID="1"\n')
    (root / LOG_DIR).mkdir(parents=True, exist_ok=True)
    (root / LOG_DIR / "0.log").write_text(KLOG_LINES)
    return root


KLOG_LINES = (
    "2024-03-01T10:00:00.000000000Z stderr F I0301 10:00:00.000000       1 server_others.go:185] "
    '"Using iptables Proxier"\n'
    "2024-03-01T10:00:01.000000000Z stderr F I0301 10:00:01.000000       1 proxier.go:1000] "
    '"Syncing iptables rules"\n'
)


def plant(path: Path, what: str, outside: Path) -> None:
    """Put the hostile thing ``what`` at ``path`` (replacing whatever is there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    if what == "fifo":
        os.mkfifo(path)
    elif what == "dangling-link":
        path.symlink_to("/var/lib/docker/containers/0123abcd/0123abcd-json.log.removed")
    elif what == "outside-link":
        path.symlink_to(outside)  # absolute: outside the node root, as this process sees it
    elif what == "relative-outside-link":
        path.symlink_to(os.path.relpath(outside, path.parent))
    elif what == "link-loop":
        path.symlink_to(path.name)
    elif what == "char-device":
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero: endless bytes
    elif what == "socket":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:  # named through the folder's descriptor: a socket's own path may hold only 107 bytes
            s.bind(f"/proc/self/fd/{dfd}/{path.name}")
        finally:
            s.close()
            os.close(dfd)
    elif what == "directory":
        path.mkdir()
    elif what == "sparse-huge":
        with open(path, "wb") as fh:
            fh.truncate(6 * 1024**3)
    else:
        raise ValueError(what)


def _live_args(command: str, root: Path, timeout: float, tmp: Path, cluster: list[str]) -> tuple[list[str], Path]:
    out = tmp.parent / f"out-{command}.tar.gz"
    live = ["--host-root", str(root), *cluster, "--timeout", str(timeout)]
    if command == "collect":
        return ["collect", *live, "--interval", "1", "-o", str(out)], out
    if command == "agent-once":
        return ["agent", "--once", "--node", "fuzz-node", "--no-events", "--no-condition", "--every", "5",
                "--listen", "127.0.0.1:0", *live], out  # fmt: skip
    return ["diagnose", "--live", "-f", "json", *live], out


def _live_findings(case: HostileCase, command: str, run: Run, tmp: Path, out: Path, timeout: float) -> list[Finding]:
    found = judge(case, run, tmp, command)
    if run.code is not None and run.seconds > timeout + GRACE:
        found.append(Finding("hostile-overrun", case.cls, command, "",
                             f"{case.kind}: {command} took {run.seconds:.0f} s with --timeout {timeout:g}"))  # fmt: skip
    if run.code is None:
        return found
    if command == "collect" and run.code != 2 and not out.exists():
        found.append(Finding("hostile-no-bundle", case.cls, command, "",
                             f"{case.kind}: exit {run.code}, no bundle: {run.stderr.strip()[-200:]}"))  # fmt: skip
    if command != "collect" and run.code in (0, 1, 3) and not run.stdout.strip():
        found.append(Finding("hostile-no-report", case.cls, command, "", f"{case.kind}: exit {run.code}, no output"))
    if command == "diagnose-live" and run.code in (0, 1, 3, 4):
        try:
            doc = json.loads(run.stdout)
            assert isinstance(doc, dict) and "schema" in doc
        except (ValueError, AssertionError):
            found.append(Finding("hostile-no-report", case.cls, command, "",
                                 f"{case.kind}: exit {run.code}, no JSON report: {run.stderr.strip()[-200:]}"))  # fmt: skip
    return found


def _collect_paths(case: HostileCase, work: Path) -> list[Finding]:
    p = case.params
    root = fake_root(work / "root")
    canary = f"OUTSIDE-THE-NODE-ROOT-{p['token_seed']:x}"
    outside = work / "outside.txt"
    outside.write_text(canary + "\n")
    plant(root / p["where"], p["what"], outside)
    tmp = work / "tmp"
    tmp.mkdir()
    args, out = _live_args(p["command"], root, p["timeout"], tmp, ["--no-cluster"])
    run = run_kpdoctor(args, tmp, p["timeout"] + GRACE + 30)
    found = _live_findings(case, p["command"], run, tmp, out, p["timeout"])
    if out.exists() and canary.encode() in bundle_bytes(out):
        found.append(Finding("hostile-read-outside-root", case.cls, p["command"], "",
                             f"{case.kind}: the bundle holds a file from outside the node root"))  # fmt: skip
    if canary.encode() in run.stdout:
        found.append(Finding("hostile-read-outside-root", case.cls, p["command"], "",
                             f"{case.kind}: the report quotes a file from outside the node root"))  # fmt: skip
    return found


def bundle_bytes(path: Path) -> bytes:
    """Every byte a bundle holds: each archive member's content and name, or each file's in a folder."""
    parts: list[bytes] = []
    if path.is_dir():
        for dirpath, _dirs, files in os.walk(path):
            for f in files:
                parts += [f.encode(), Path(dirpath, f).read_bytes()]
        return b"\n".join(parts)
    with tarfile.open(path) as tf:
        for m in tf:
            parts.append(m.name.encode())
            if m.isfile():
                fh = tf.extractfile(m)
                if fh is not None:
                    parts.append(fh.read())
    return b"\n".join(parts)


# -------------------------------------------------------------------------------- deep trees


def make_deep(base: Path, depth: int, segment: str = "d", leaf: str = "log.txt", data: bytes = b"") -> None:
    """base/seg/seg/.../leaf, ``depth`` folders deep, made through directory descriptors (a path
    that long could not be given to os.makedirs, which also recurses once per level)."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            with suppress(FileExistsError):
                os.mkdir(segment, dir_fd=fd)
            nfd = os.open(segment, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        wfd = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=fd)
        with os.fdopen(wfd, "wb") as fh:
            fh.write(data)
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    """Remove a tree however deep: one directory descriptor at a time, no recursion and no long path
    (shutil.rmtree recurses once per level, and a path 2,000 levels deep is too long to name)."""
    if not path.is_dir() or path.is_symlink():
        path.unlink(missing_ok=True)
        return
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd, names = os.open(path, flags), []
    while True:
        sub = None
        with os.scandir(fd) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    sub = e.name
                    break
                os.unlink(e.name, dir_fd=fd)
        if sub is not None:
            child = os.open(sub, flags, dir_fd=fd)
            os.close(fd)
            fd = child
            names.append(sub)
            continue
        if not names:
            os.close(fd)
            os.rmdir(path)
            return
        parent = os.open("..", flags, dir_fd=fd)
        os.close(fd)
        fd = parent
        os.rmdir(names.pop(), dir_fd=fd)


def _bundle_files(name: str) -> dict[str, bytes]:
    root = BUNDLES_ROOT / name
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


_BASELINE: dict[str, str] = {}


def first_cause(name: str, tmp: Path) -> str:
    """The first cause of an intact demo bundle (the answer a hostile addition must not change)."""
    if name not in _BASELINE:
        run = run_kpdoctor(["diagnose", "-f", "json", str(BUNDLES_ROOT / name)], tmp, 120)
        _BASELINE[name] = _first(run.stdout)
    return _BASELINE[name]


def _first(stdout: bytes) -> str:
    try:
        doc = json.loads(stdout)
        return str((doc.get("findings") or [{}])[0].get("cause", "-")) if isinstance(doc, dict) else "?"
    except ValueError:
        return "?"


def _tar_blob(files: dict[str, bytes], top: str, deep: tuple[str, bytes], gz: bool) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz" if gz else "w", format=tarfile.GNU_FORMAT) as tf:
        for rel, data in [*files.items(), deep]:
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mtime = len(data), 1_700_000_000
            tf.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def _deep_tree(case: HostileCase, work: Path) -> list[Finding]:
    p = case.params
    name, depth = p["bundle"], p["depth"]
    tmp = work / "tmp"
    tmp.mkdir()
    files = _bundle_files(name)
    if p["form"] == "folder":
        target = work / name
        for rel, data in files.items():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).write_bytes(data)
        make_deep(target, depth, p["segment"], "log.txt", KLOG_LINES.encode())
    else:
        target = work / f"{name}.{p['form']}"
        target.write_bytes(_tar_blob(files, name, ("/".join([p["segment"]] * depth) + "/log.txt", KLOG_LINES.encode()),
                                     p["form"] == "tar.gz"))  # fmt: skip
    try:
        run = run_kpdoctor(["diagnose", "-f", "json", str(target)], tmp, 120)
        found = judge(case, run, tmp, "diagnose")
        (work / "tmp-base").mkdir()
        want = first_cause(name, work / "tmp-base")
        got = _first(run.stdout)
        if run.code is not None and got != want:
            found.append(Finding("hostile-bundle-lost", case.cls, "diagnose", "",
                                 f"{case.kind}: first cause {got!r}, the intact bundle's is {want!r}",
                                 run.stderr[-3000:]))  # fmt: skip
        return found
    finally:
        remove_tree(target)


# -------------------------------------------------------------------------------- alias bombs


def alias_bomb(levels: int, fanout: int, head: str, key: str = "items") -> str:
    """A "billion laughs" YAML: level k is a list of ``fanout`` aliases of level k-1; ``key``
    (``items``: where a List's objects are read) holds the last level."""
    lines = [head.rstrip("\n"), f"l0: &l0 [{', '.join(['lol'] * fanout)}]"]
    for k in range(1, levels + 1):
        lines.append(f"l{k}: &l{k} [{', '.join([f'*l{k - 1}'] * fanout)}]")
    lines.append(f"{key}: *l{levels}")
    return "\n".join(lines) + "\n"


KPCONFIG_HEAD = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n"
LIST_HEAD = "apiVersion: v1\nkind: List\n"


def _alias_bomb(case: HostileCase, work: Path) -> list[Finding]:
    p = case.params
    tmp = work / "tmp"
    tmp.mkdir()
    where = p["where"]
    head = LIST_HEAD if where in ("loose-list", "bundle-cluster") else KPCONFIG_HEAD
    bomb = alias_bomb(p["levels"], p["fanout"], head, p["key"]).encode()
    name = "config-ignores-hostname"
    if where.startswith("loose"):
        target = work / ("kube-proxy-config.yaml" if where == "loose-config" else "services.yaml")
        target.write_bytes(bomb)
    else:
        files = _bundle_files(name)
        files["cluster/services.json" if where == "bundle-cluster" else "kube-proxy/config.yaml"] = bomb
        if where == "bundle-tar":
            target = work / f"{name}.tar.gz"
            target.write_bytes(_tar_blob(files, name, ("README", b"hostile\n"), True))
        else:
            target = work / name
            for rel, data in files.items():
                (target / rel).parent.mkdir(parents=True, exist_ok=True)
                (target / rel).write_bytes(data)
    budget = 60.0
    run = run_kpdoctor(["diagnose", "-f", "json", "--timeout", str(budget), str(target)], tmp, budget + GRACE)
    found = judge(case, run, tmp, "diagnose")
    if run.code is not None and run.seconds > 20:
        found.append(Finding("hostile-slow", case.cls, "diagnose", "",
                             f"{case.kind}: {run.seconds:.0f} s for a {len(bomb)}-byte YAML"))  # fmt: skip
    return found


# -------------------------------------------------------------------------------- slow apiserver


@contextmanager
def slow_apiserver(mode: str) -> Iterator[str]:
    """An HTTP server on loopback that misbehaves as ``mode`` says; yields its URL.

    ``hang``: reads the request, never answers. ``trickle-body``: a 200 with JSON headers, then
    one byte a second forever. ``trickle-headers``: the status line and headers a byte a second.
    ``half-json``: half a ServiceList, then silence. ``no-accept``: listens, never accepts (the
    kernel completes handshakes until the backlog is full)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1 if mode == "no-accept" else 64)
    stop = threading.Event()
    conns: list[socket.socket] = []

    def serve(c: socket.socket) -> None:
        try:
            c.settimeout(1.0)
            with suppress(OSError):
                c.recv(65536)
            if mode == "hang":
                stop.wait()
                return
            if mode == "half-json":
                body = b'{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[{"meta'
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n" + body)
                stop.wait()
                return
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
            data = head + b'{"kind":"ServiceList","items":[' + b" " * 10**6
            start = 0 if mode == "trickle-headers" else len(head)
            if start:
                c.sendall(data[:start])
            for i in range(start, len(data)):
                if stop.wait(1.0):
                    return
                c.sendall(data[i : i + 1])
        except OSError:
            return
        finally:
            c.close()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            if mode == "no-accept":
                stop.wait(0.2)
                continue
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            conns.append(c)
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(timeout=5)
        srv.close()
        for c in conns:
            with suppress(OSError):
                c.close()


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + server + "\n"
        "users:\n- name: u\n  user:\n    token: fuzz\ncontexts:\n- name: x\n  context:\n    cluster: c\n"
        "    user: u\ncurrent-context: x\n"
    )
    return path


def _slow_api(case: HostileCase, work: Path) -> list[Finding]:
    p = case.params
    root = fake_root(work / "root")
    tmp = work / "tmp"
    tmp.mkdir()
    with slow_apiserver(p["mode"]) as url:
        kc = kubeconfig(work / "kubeconfig", url)
        args, out = _live_args(p["command"], root, p["timeout"], tmp, ["--kubeconfig", str(kc)])
        run = run_kpdoctor(args, tmp, p["timeout"] + GRACE + 60)
    return _live_findings(case, p["command"], run, tmp, out, p["timeout"])


# -------------------------------------------------------------------------------- planted secrets


def token(rng: random.Random, n: int = 28) -> str:
    """A random secret, as a real one looks (no marker a rule could key on)."""
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


def _pem_body(rng: random.Random) -> tuple[str, str]:
    body = base64.b64encode(rng.randbytes(96)).decode()
    return body, f"-----BEGIN RSA PRIVATE KEY-----\n{body[:64]}\n{body[64:]}\n-----END RSA PRIVATE KEY-----"


def _klog(msg: str) -> str:
    return f"2024-03-01T10:00:02.000000000Z stderr F E0301 10:00:02.000000       1 reflector.go:138] {msg}\n"


# Each form plants one secret somewhere a user's evidence really carries one; returns (log line, secret).
SECRET_FORMS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "yaml-mid-line": lambda r: (lambda t: (_klog(f"loaded kubeconfig: client-key-data: {t}"), t))(token(r, 40)),
    "password-quoted": lambda r: (lambda t: (_klog(f'config dump: password: "{t}" user: admin'), t))(token(r)),
    "json-mid-line": lambda r: (lambda t: (_klog(f'request body {{"user":"a","password":"{t}"}}'), t))(token(r)),
    "auth-header": lambda r: (lambda t: (_klog(f"GET /api headers: Authorization: Bearer {t}"), t))(token(r, 36)),
    "basic-header": lambda r: (lambda t: (_klog(f"Authorization: Basic {t}"), t))(token(r, 32)),
    "x-auth-token": lambda r: (lambda t: (_klog(f"proxy request X-Auth-Token: {t} upstream=a"), t))(token(r)),
    "cookie": lambda r: (lambda t: (_klog(f"headers Cookie: session={t}; theme=dark"), t))(token(r)),
    "argv-p": lambda r: (lambda t: (_klog(f"exec mysql -uroot -p{t} -h db"), t))(token(r, 20)),
    "argv-flag": lambda r: (lambda t: (_klog(f"cmdline: /bin/agent --password={t} --v=2"), t))(token(r)),
    "env": lambda r: (lambda t: (_klog(f"env DB_PASSWORD={t} HOME=/root"), t))(token(r)),
    "url-credentials": lambda r: (lambda t: (_klog(f"dial https://admin:{t}@registry.example:5000/v2/"), t))(token(r)),
    "pem-mid-line": lambda r: (lambda b_p: (_klog("key " + b_p[1].replace("\n", "\\n")), b_p[0][10:50]))(_pem_body(r)),
    "pem-block": lambda r: (lambda b_p: (b_p[1] + "\n", b_p[0][10:50]))(_pem_body(r)),
}


def leaked(blob: bytes, secret: str) -> str | None:
    """How ``secret`` survives in ``blob``: plain, or inside base64 at any alignment; None if not."""
    s = secret.encode()
    if s in blob:
        return "plain"
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + s)[4 if pad else 0 :]
        core = enc[: max(8, len(enc) - 4)]
        if len(core) >= 12 and core in blob:
            return f"base64 (alignment {pad})"
    return None


def _secrets(case: HostileCase, work: Path) -> list[Finding]:
    p = case.params
    rng = random.Random(p["token_seed"])
    planted = [(form, *SECRET_FORMS[form](rng)) for form in p["forms"]]
    root = fake_root(work / "root")
    tmp = work / "tmp"
    tmp.mkdir()
    text = KLOG_LINES + "".join(line for _, line, _ in planted)
    if p["via"] == "pod-log":
        (root / LOG_DIR / "0.log").write_text(text)
        args, out = _live_args("collect", root, 20, tmp, ["--no-cluster"])
        run = run_kpdoctor(args, tmp, 20 + GRACE + 30)
    else:  # the same forms inside cluster objects: annotations, env values, a ConfigMap's data
        sys.path.insert(0, str(REPO / "tests"))
        from kubeapi_replay import ReplayServer, cluster_exchanges

        node = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "fuzz-node", "annotations": {
            "note": text}}, "status": {"addresses": [{"type": "Hostname", "address": "fuzz-node"}]}}  # fmt: skip
        pod = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "kube-proxy-fz8k2", "namespace": "kube-system",
               "labels": {"k8s-app": "kube-proxy"}, "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
               json.dumps({"note": text})}}, "spec": {"nodeName": "fuzz-node", "containers": [{"name": "kube-proxy",
               "image": "registry.k8s.io/kube-proxy:v1.29.0", "command": ["/usr/local/bin/kube-proxy", "--v=2"],
               "env": [{"name": "NOTE", "value": text}]}]}, "status": {"phase": "Running"}}  # fmt: skip
        cm = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
              "data": {"config.conf": KPCONFIG_HEAD, "kubeconfig.conf": text}}  # fmt: skip
        logs = {("kube-system", "kube-proxy-fz8k2", "kube-proxy", False): text}
        with ReplayServer(cluster_exchanges(nodes=[node], pods=[pod], configmaps=[cm], logs=logs)) as srv:
            kc = kubeconfig(work / "kubeconfig", srv.url)
            args, out = _live_args("collect", root, 20, tmp, ["--kubeconfig", str(kc), "--node", "fuzz-node"])
            run = run_kpdoctor(args, tmp, 20 + GRACE + 30)
    found = _live_findings(case, "collect", run, tmp, out, 20)
    if out.exists():
        blob = bundle_bytes(out)
        for form, _line, secret in planted:
            how = leaked(blob, secret)
            if how:
                found.append(Finding("hostile-secret-leak", f"{case.cls}:{form}", p["via"], "",
                                     f"{case.kind}: the {form} secret is in the bundle ({how})"))  # fmt: skip
    return found
