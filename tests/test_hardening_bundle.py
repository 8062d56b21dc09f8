"""Issue 36, items 5 and 6, staged as the attacks were: trees thousands of folders deep (a tar member,
a folder bundle on disk), names longer than the system takes, YAML alias bombs ("billion laughs"),
and runs killed or interrupted while they hold a temporary folder.

Promises held here (docs/security.md, "Reading evidence"): a deep member or folder is refused with a
one-line reason and the rest of the bundle is diagnosed as if it were not there; an alias bomb is
refused before any object is built, in a fraction of a second; no run leaves a temporary folder in
``$TMPDIR``, whether it ends normally, by --timeout, by SIGTERM, SIGINT or SIGHUP, and a folder left
by a run killed outright (SIGKILL) is removed by the next run.

The CLI runs as a subprocess (``python -m kpdoctor``, ``TMPDIR`` a fresh folder, ``PYTHONPATH``
passed through so that the code under test is the one imported here).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fuzz_hostile import as_from_a_shell, remove_tree
from fuzz_hostile import make_deep as hostile_make_deep

from kpdoctor import deadline
from kpdoctor.bundle.archive import extract
from kpdoctor.bundle.loader import load
from kpdoctor.demo import demo_path
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.parse.k8s import parse_objects
from kpdoctor.parse.kpconfig import parse_config_file
from kpdoctor.parse.structured import StructuredError, load_json, load_yaml_all

BUNDLE = "config-ignores-hostname"  # a demo bundle with a kube-proxy config and cluster objects
TOO_DEEP = "nested more than 64 folders deep"
ALIASES = "YAML aliases expand past 10,000 nodes: refused"
KLOG = (
    'I0301 10:00:00.000000       1 server_others.go:185] "Using iptables Proxier"\n'
    'I0301 10:00:01.000000       1 proxier.go:1000] "Syncing iptables rules"\n'
)
LIST_HEAD = "apiVersion: v1\nkind: List\nitems: []\n"
ITEMS_HEAD = "apiVersion: v1\nkind: List\n"  # the bomb goes under items
KPCONFIG_HEAD = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n"


# ------------------------------------------------------------------------------------- helpers


@dataclass
class Run:
    code: int
    stdout: bytes
    stderr: str
    seconds: float

    @property
    def report(self) -> dict[str, Any]:
        doc = json.loads(self.stdout)
        assert isinstance(doc, dict)
        return doc

    def problems(self) -> list[str]:
        return [f"{p['source']}: {p['message']}" for p in self.report["input_problems"]]

    def causes(self) -> list[str]:
        return [f["cause"] for f in self.report["findings"]]


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ, TMPDIR=str(tmp), NO_COLOR="1")  # PYTHONPATH, if set, passes through
    env.pop("KPDOCTOR_DEBUG", None)
    return env


def run_cli(args: list[str], tmp: Path, limit: float = 60, stdin: bytes = b"") -> Run:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "kpdoctor", *args], input=stdin, capture_output=True,
                       env=_env(tmp), timeout=limit, cwd=tmp)  # fmt: skip
    return Run(p.returncode, p.stdout, p.stderr.decode("utf-8", "replace"), time.monotonic() - t0)


def left(tmp: Path) -> list[str]:
    """kpdoctor's temporary folders left in ``tmp``."""
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("kpdoctor"))


@pytest.fixture
def tmpdir_env(tmp_path: Path) -> Iterator[Path]:
    """A fresh $TMPDIR for the runs of one test (in-process too); it must end empty."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    old = tempfile.tempdir
    tempfile.tempdir = str(tmp)
    try:
        yield tmp
    finally:
        tempfile.tempdir = old
        for p in tmp.iterdir():  # what a failing run left (maybe too deep for pytest's own cleanup)
            remove_tree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The causes the intact demo bundle is diagnosed with (what a hostile addition must not change)."""
    tmp = tmp_path_factory.mktemp("baseline")
    run = run_cli(["diagnose", "-f", "json", str(demo_path(BUNDLE))], tmp)
    assert run.code == 1 and run.causes()
    return run.causes()


def bundle_files() -> dict[str, bytes]:
    root = demo_path(BUNDLE)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def tar_blob(files: dict[str, bytes], top: str = BUNDLE, gz: bool = True, dirs: Sequence[str] = ()) -> bytes:
    """A tar(.gz) of ``files`` under ``top/`` (GNU long names: any length), ``dirs`` as folder entries first."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz" if gz else "w", format=tarfile.GNU_FORMAT) as tf:
        for d in dirs:
            info = tarfile.TarInfo(f"{top}/{d}")
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1_700_000_000
            tf.addfile(info)
        for rel, data in files.items():
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mtime = len(data), 1_700_000_000
            tf.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def deep_name(depth: int, segment: str = "d") -> str:
    return "/".join([segment] * depth)


def make_deep(base: Path, depth: int, segment: str = "d", leaf: str = "kube-proxy.log", data: bytes = KLOG.encode(),
              ) -> None:  # fmt: skip
    """base/seg/seg/.../leaf, ``depth`` folders deep (tests/fuzz_hostile.make_deep, a kube-proxy log at the bottom)."""
    hostile_make_deep(base, depth, segment, leaf, data)


@pytest.fixture
def short_base() -> Iterator[Path]:
    """A short folder under /tmp: a 2,000-deep path of one-letter names then stays below PATH_MAX
    (4,096), so the tree really is made (and walked) to the bottom, as in the attack."""
    base = Path(tempfile.mkdtemp(prefix="h", dir="/tmp"))
    try:
        yield base
    finally:
        for p in base.iterdir():
            remove_tree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        base.rmdir()


def alias_bomb(levels: int, fanout: int, head: str = LIST_HEAD, key: str = "bomb") -> str:
    """A "billion laughs": level k is a list of ``fanout`` aliases of level k-1 (10 levels of 10
    fit in 1 KB), the last one aliased once more under ``key`` (``items``: where a List's objects
    are, which every reader walks)."""
    lines = [head.rstrip("\n"), f"l0: &l0 [{', '.join(['lol'] * fanout)}]"]
    for k in range(1, levels + 1):
        lines.append(f"l{k}: &l{k} [{', '.join([f'*l{k - 1}'] * fanout)}]")
    lines.append(f"{key}: *l{levels}")
    return "\n".join(lines) + "\n"


def expansion(levels: int, fanout: int) -> int:
    """The nodes the aliases of :func:`alias_bomb` add when expanded, worked out apart from the
    code under test: level k (k >= 1) expands to s_k = 1 + fanout * s_(k-1) nodes (s_0 = 1 + fanout)
    of which only its own list node is written, and ``bomb`` adds all s_levels of the last."""
    sizes = [1 + fanout]
    for _ in range(levels):
        sizes.append(1 + fanout * sizes[-1])
    return sum(s - 1 for s in sizes[1:]) + sizes[-1]


# ------------------------------------------------------------------- deep archives (in-process)


@pytest.mark.parametrize("depth", [10, 63, 65, 200, 2000])
@pytest.mark.parametrize("dir_entries", [False, True], ids=["file-only", "with-folder-entries"])
def test_a_deep_tar_member_is_refused_and_the_rest_extracted(short_base: Path, depth: int, dir_entries: bool) -> None:
    files = {"kube-proxy/log.txt": KLOG.encode(), f"{deep_name(depth)}/x.log": KLOG.encode(), "node/hostname": b"n1\n"}
    dirs = [deep_name(k) for k in range(1, depth + 1)] if dir_entries else []
    tgz = short_base / "a.tar.gz"
    tgz.write_bytes(tar_blob(files, top="b", dirs=dirs))
    out = short_base / "x"
    out.mkdir()
    got = extract(tgz, out)
    deep = [(n, r) for n, r in got.refused if TOO_DEEP in r]
    assert (out / "b/kube-proxy/log.txt").read_bytes() == KLOG.encode()
    assert (out / "b/node/hostname").read_bytes() == b"n1\n"
    assert not got.damaged
    if depth + 1 <= 64:  # the top folder "b" counts: 1 + depth folders above x.log
        assert not got.refused
        assert (out / "b" / deep_name(depth) / "x.log").read_bytes() == KLOG.encode()
    else:
        # one line for the first folder too deep, however many entries are below it
        assert len(deep) == 1 and len(got.refused) == 1, got.refused
        assert deep[0][0].startswith("b/d/d/") and len(deep[0][0]) <= 512
        assert (out / "b" / deep_name(63)).is_dir() == dir_entries  # folder entries up to the limit are made
        assert not (out / "b" / deep_name(64)).exists()


def test_names_too_long_to_extract_are_refused_entries(tmp_path: Path) -> None:
    """ENAMETOOLONG, both ways: one name longer than NAME_MAX (255), and a path of 30 folders of
    200 characters (6,000, past PATH_MAX) nowhere near the depth limit."""
    files = {
        "kube-proxy/log.txt": KLOG.encode(),
        "n" * 300 + "/x.log": b"x\n",
        "/".join(["p" * 200] * 30) + "/y.log": b"y\n",
    }
    tgz = tmp_path / "long.tar.gz"
    tgz.write_bytes(tar_blob(files, top="b"))
    out = tmp_path / "x"
    out.mkdir()
    got = extract(tgz, out)
    reasons = [r for _, r in got.refused]
    assert reasons == ["name too long to extract", "name too long to extract"], got.refused
    assert (out / "b/kube-proxy/log.txt").exists()
    report, ev = diagnose_paths([tgz])
    assert not report.errors and not ev.errors
    assert sum("refused: name too long" in p.message for p in ev.problems) == 2


@pytest.mark.parametrize("depth", [65, 2000])
def test_a_deep_member_in_the_demo_bundle_keeps_its_diagnosis_in_process(
    short_base: Path, tmpdir_env: Path, depth: int
) -> None:
    intact, _ = diagnose_paths([demo_path(BUNDLE)])
    tgz = short_base / f"{BUNDLE}.tar.gz"
    files = bundle_files() | {f"{deep_name(depth)}/log.txt": KLOG.encode()}
    tgz.write_bytes(tar_blob(files, dirs=[deep_name(k) for k in range(1, depth + 1)]))
    report, ev = diagnose_paths([tgz])
    assert not report.errors and not ev.errors
    assert [f.cause for f in report.visible()] == [f.cause for f in intact.visible()]
    assert sum(TOO_DEEP in p.message for p in ev.problems) == 1
    assert left(tmpdir_env) == []


# ---------------------------------------------------------------------- deep folders on disk


@pytest.mark.parametrize("depth", [10, 63, 65, 200, 2000])
def test_a_deep_folder_in_a_bundle_folder_is_refused_and_the_rest_read(short_base: Path, depth: int) -> None:
    bundle = short_base / BUNDLE
    shutil.copytree(demo_path(BUNDLE), bundle)
    make_deep(bundle, depth)
    intact, _ = diagnose_paths([demo_path(BUNDLE)])
    report, ev = diagnose_paths([bundle])
    assert not report.errors and not ev.errors
    assert [f.cause for f in report.visible()] == [f.cause for f in intact.visible()]
    refused = [p for p in ev.problems if TOO_DEEP in p.message]
    if depth <= 64:
        assert not refused
    else:
        assert len(refused) == 1
        assert refused[0].source == f"{bundle}:{deep_name(65)}"
        assert refused[0].message == f"refused: {TOO_DEEP} (nothing below it is read)"


@pytest.mark.parametrize("depth", [63, 1000])
def test_a_loose_folder_with_a_deep_tree_is_read_without_it(short_base: Path, depth: int) -> None:
    """A plain folder of evidence (no manifest), given as a path: the log beside the deep tree is read."""
    folder = short_base / "evidence"
    folder.mkdir()
    (folder / "kube-proxy.log").write_text(KLOG)
    make_deep(folder, depth, leaf="other.log")
    ev = load([folder])
    try:
        assert not ev.errors
        logs = sorted(a.name for a in ev.artifacts)
        assert any(n.endswith("kube-proxy.log") for n in logs)
        assert (len(logs) == 2) == (depth <= 64)
        assert sum(TOO_DEEP in p.message for p in ev.problems) == (depth > 64)
    finally:
        ev.close()


def test_many_deep_folders_are_listed_up_to_a_bound(short_base: Path) -> None:
    folder = short_base / "wide"
    folder.mkdir()
    (folder / "kube-proxy.log").write_text(KLOG)
    make_deep(folder, 64, leaf="x.log")
    bottom = folder / deep_name(64)
    for i in range(30):
        (bottom / f"sub{i:02d}").mkdir()
        (bottom / f"sub{i:02d}" / "y.log").write_text(KLOG)
    ev = load([folder])
    try:
        deep = [p for p in ev.problems if TOO_DEEP in p.message]
        assert len(deep) == 21  # 20 named, then one line for the other 10
        assert deep[-1].message.startswith("10 more folder(s) refused")
        assert len(ev.artifacts) == 2  # the log at the top and the one 64 folders down
    finally:
        ev.close()


def test_a_folder_path_past_path_max_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    folder = tmp_path / "long"
    folder.mkdir()
    (folder / "kube-proxy.log").write_text(KLOG)
    make_deep(folder, 30, segment="p" * 200, leaf="x.log")  # 6,000 characters, 30 folders deep
    try:
        ev = load([folder])
        try:
            assert not ev.errors
            assert [a.name for a in ev.artifacts] == [str(folder / "kube-proxy.log")]
            assert any("path longer than the system allows" in p.message for p in ev.problems)
        finally:
            ev.close()
    finally:
        remove_tree(folder)


# ------------------------------------------------------------------------ deep trees, real CLI


@pytest.mark.parametrize(
    ("form", "depth", "dirs"),
    [("tar.gz", 65, False), ("tar.gz", 2000, False), ("tar.gz", 2000, True), ("tar", 1000, True),
     ("folder", 65, False), ("folder", 2000, False)],
)  # fmt: skip
def test_the_cli_diagnoses_a_bundle_with_a_deep_member(
    short_base: Path, baseline: list[str], form: str, depth: int, dirs: bool
) -> None:
    tmp = short_base / "t"  # short: the extracted tree stays below PATH_MAX, as in the attack
    tmp.mkdir()
    if form == "folder":
        target = short_base / BUNDLE
        shutil.copytree(demo_path(BUNDLE), target)
        make_deep(target, depth, leaf="log.txt")
    else:
        target = short_base / f"{BUNDLE}.{form}"
        files = bundle_files() | {f"{deep_name(depth)}/log.txt": KLOG.encode()}
        target.write_bytes(tar_blob(files, gz=form == "tar.gz", dirs=[deep_name(k) for k in range(1, depth + 1)]
                                    if dirs else []))  # fmt: skip
    run = run_cli(["diagnose", "-f", "json", str(target)], tmp)
    assert run.code not in (4, None) and "internal error" not in run.stderr, run.stderr
    assert run.code == 1 and run.causes() == baseline
    deep = [p for p in run.problems() if TOO_DEEP in p]
    assert len(deep) == 1 and deep[0].startswith(str(target) + ":"), run.problems()
    assert not run.report["internal_errors"]
    assert left(tmp) == []


# -------------------------------------------------------------------------------- alias bombs


@pytest.mark.parametrize("levels", range(3, 10))
@pytest.mark.parametrize("fanout", [2, 3, 10])
@pytest.mark.parametrize("libyaml", [True, False], ids=["libyaml", "pure-python"])
def test_alias_expansion_is_refused_past_the_budget(
    monkeypatch: pytest.MonkeyPatch, levels: int, fanout: int, libyaml: bool
) -> None:
    import yaml

    if not libyaml:
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    elif not hasattr(yaml, "CSafeLoader"):
        pytest.skip("PyYAML without libyaml")
    text = alias_bomb(levels, fanout)
    t0 = time.monotonic()
    if expansion(levels, fanout) > 10_000:
        with pytest.raises(StructuredError, match=ALIASES):
            load_yaml_all(text)
    else:
        docs = load_yaml_all(text)  # a modest use of aliases is read as before
        assert len(docs[0]["bomb"]) == fanout
    assert time.monotonic() - t0 < 1.0


def test_the_expansion_arithmetic(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`expansion` against a brute-force count of the nodes PyYAML's own graph expands to."""
    import yaml

    def tree_size(node: Any) -> int:
        if isinstance(node, yaml.ScalarNode):
            return 1
        kids = [x for kv in node.value for x in kv] if isinstance(node, yaml.MappingNode) else node.value
        return 1 + sum(tree_size(k) for k in kids)

    def distinct(node: Any, seen: set[int]) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if not isinstance(node, yaml.ScalarNode):
            for k in [x for kv in node.value for x in kv] if isinstance(node, yaml.MappingNode) else node.value:
                distinct(k, seen)

    for levels, fanout in [(3, 2), (3, 3), (4, 3), (5, 2)]:
        node = yaml.compose(alias_bomb(levels, fanout))
        seen: set[int] = set()
        distinct(node, seen)
        assert tree_size(node) - len(seen) == expansion(levels, fanout)


def test_an_alias_of_itself_is_refused() -> None:
    with pytest.raises(StructuredError, match="recursive"):
        load_yaml_all("apiVersion: v1\nkind: List\nitems: &x\n- *x\n")


def test_aliases_within_the_budget_and_large_alias_free_yaml_still_read() -> None:
    text = "apiVersion: v1\nkind: List\nx-common: &common {app: web, tier: front}\nitems:\n" + "".join(
        f"- apiVersion: v1\n  kind: Service\n  metadata: {{name: s{i}, namespace: default, labels: *common}}\n"
        f"  spec: {{clusterIP: 10.96.0.{i + 1}, ports: [{{port: 80}}]}}\n"
        for i in range(50)
    )
    objs = parse_objects(text, "services.yaml")
    assert len(objs.items) == 50 and not objs.diagnostics
    assert objs.items[49].body["metadata"]["labels"] == {"app": "web", "tier": "front"}
    merged = load_yaml_all("base: &b {a: 1, b: 2}\nchild:\n  <<: *b\n  c: 3\n")[0]
    assert merged["child"] == {"a": 1, "b": 2, "c": 3}
    big = "items:\n" + "".join(f"- {{name: n{i}, note: 'a&b *c'}}\n" for i in range(20_000))  # 60,000 nodes
    assert len(load_yaml_all(big)[0]["items"]) == 20_000
    assert load_json('{"a": "&x *x"}') == {"a": "&x *x"}


def test_the_refusal_is_a_diagnostic_of_the_objects_and_of_the_config() -> None:
    objs = parse_objects(alias_bomb(9, 10), "services.yaml")
    assert not objs.items and any(ALIASES in d.message for d in objs.diagnostics)
    cf = parse_config_file(alias_bomb(9, 10, KPCONFIG_HEAD), "config.yaml")
    assert cf is not None and not cf.data and any(ALIASES in d.message for d in cf.diagnostics)


@pytest.mark.parametrize(
    "where",
    ["loose-list", "loose-items", "loose-config", "bundle-cluster", "bundle-services-json", "bundle-config",
     "bundle-tar"],
)  # fmt: skip
def test_the_cli_refuses_an_alias_bomb_in_moments(tmp_path: Path, baseline: list[str], where: str) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    if where in ("loose-config", "bundle-config"):
        bomb = alias_bomb(9, 10, KPCONFIG_HEAD).encode()
    elif where in ("loose-items", "bundle-services-json", "bundle-tar"):
        bomb = alias_bomb(9, 10, ITEMS_HEAD, key="items").encode()
    else:
        bomb = alias_bomb(9, 10).encode()
    assert len(bomb) < 1100
    if where.startswith("loose"):
        target = tmp_path / ("kube-proxy-config.yaml" if where == "loose-config" else "services.yaml")
        target.write_bytes(bomb)
    else:
        rel = {"bundle-cluster": "cluster/more-services.yaml", "bundle-services-json": "cluster/services.json",
               "bundle-config": "kube-proxy/config.yaml", "bundle-tar": "cluster/more-services.yaml"}[where]  # fmt: skip
        files = bundle_files() | {rel: bomb}
        if where == "bundle-tar":
            target = tmp_path / f"{BUNDLE}.tar.gz"
            target.write_bytes(tar_blob(files))
        else:
            target = tmp_path / BUNDLE
            for r, data in files.items():
                (target / r).parent.mkdir(parents=True, exist_ok=True)
                (target / r).write_bytes(data)
    run = run_cli(["diagnose", "-f", "json", "--timeout", "30", str(target)], tmp, limit=60)
    assert run.seconds < 10, f"{run.seconds:.1f} s for a {len(bomb)}-byte YAML"
    assert run.code not in (4, None) and "internal error" not in run.stderr, run.stderr
    assert not run.report.get("timed_out") and "gave up after" not in run.stderr
    if where != "loose-config":  # the reason is listed (a config in a bundle: by the checks that read it)
        assert any(ALIASES in p for p in run.problems()), run.problems()
    else:  # alone, no check reads it: the report says no setting could be read from it
        assert any("KubeProxyConfiguration" in p or ALIASES in p for p in run.problems()), run.problems()
    if where in ("bundle-cluster", "bundle-tar"):  # an extra file: the bundle's own diagnosis stands
        assert run.causes() == baseline
    assert left(tmp) == []


def test_an_alias_bomb_in_process_is_refused_before_the_deadline(tmp_path: Path) -> None:
    target = tmp_path / "services.yaml"
    target.write_text(alias_bomb(9, 10, ITEMS_HEAD, key="items"))
    deadline.arm(20)  # the pre-fix code would walk 10**10 nodes: bounded, so that this fails rather than hangs
    t0 = time.monotonic()
    try:
        report, _ = diagnose_paths([target])
    finally:
        deadline.disarm()
    assert time.monotonic() - t0 < 5 and not report.timed_out
    assert any(ALIASES in p.message for p in report.problems)


# ------------------------------------------------------------------------- temporary folders


def _wait_for_folder(tmp: Path, proc: subprocess.Popen[bytes], seconds: float = 20) -> Path:
    """The run's temporary folder, once it holds something (the spool or the extraction)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert proc.poll() is None, "the run ended before it could be signalled"
        for p in tmp.iterdir():
            if p.name.startswith("kpdoctor") and any(p.iterdir()):
                return p
        time.sleep(0.02)
    raise AssertionError("no temporary folder appeared")


def _reading_stdin(tmp: Path, extra: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """``diagnose -`` on a pipe that stays open: the run spools it into a temporary folder and waits."""
    proc = subprocess.Popen([sys.executable, "-m", "kpdoctor", "diagnose", "-f", "json", *extra, "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env(tmp), cwd=tmp, preexec_fn=as_from_a_shell)  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(KLOG.encode() * 200)
    proc.stdin.flush()
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_while_reading_a_pipe_leaves_no_temporary_folder(tmp_path: Path, sig: signal.Signals) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _reading_stdin(tmp)
    try:
        _wait_for_folder(tmp, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode not in (4, -sig), err.decode()  # not killed by it: it unwound
    assert left(tmp) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_while_extracting_a_large_archive_leaves_no_temporary_folder(
    tmp_path: Path, sig: signal.Signals
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    files = {f"logs/{i:05d}.log": f"I0101 00:00:00.000000 1 proxier.go:1] line {i}\n".encode() for i in range(8000)}
    tgz = tmp_path / "large.tar.gz"
    tgz.write_bytes(tar_blob(files, top="b"))
    proc = subprocess.Popen([sys.executable, "-m", "kpdoctor", "diagnose", "-f", "json", str(tgz)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp), cwd=tmp,
                            preexec_fn=as_from_a_shell)  # fmt: skip
    try:
        _wait_for_folder(tmp, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, err.decode()
    assert f"terminated by {sig.name}" in err.decode()
    assert left(tmp) == []


def test_an_ignored_sighup_stays_ignored(tmp_path: Path) -> None:
    """Under nohup, SIGHUP must not stop the run (nor lose its temporary folder)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "kpdoctor", "diagnose", "-f", "json", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp),
                            cwd=tmp, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))  # fmt: skip
    assert proc.stdin is not None
    try:
        proc.stdin.write(KLOG.encode())
        proc.stdin.flush()
        _wait_for_folder(tmp, proc)
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert proc.poll() is None
        out, _ = proc.communicate(timeout=30)  # closes stdin: the run goes on to its report
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, 1, 3) and json.loads(out)["inputs"]
    assert left(tmp) == []


def test_the_timeout_while_reading_a_pipe_leaves_no_temporary_folder(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _reading_stdin(tmp, ["--timeout", "1.5"])
    assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
    try:
        proc.wait(timeout=30)  # stdin stays open (communicate would close it): only the --timeout ends the run
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode in (1, 3), err.decode()  # a partial report (what was read may hold a finding)
    assert "not read completely" in out.decode() and "gave up after 1.5 s" in err.decode()
    assert left(tmp) == []


def test_normal_runs_and_errors_leave_no_temporary_folder(tmp_path: Path, tmpdir_env: Path) -> None:
    tgz = tmp_path / "b.tar.gz"
    tgz.write_bytes(tar_blob(bundle_files()))
    run = run_cli(["diagnose", "-f", "json", str(tgz)], tmpdir_env)
    assert run.code == 1 and left(tmpdir_env) == []
    # a bug in the middle of the run: exit 4, and still nothing left
    code = ("import sys, kpdoctor.cli as c\n"
            "def boom(*a, **k): raise RuntimeError('boom')\n"
            "c.pipeline = boom\nsys.argv = ['kpdoctor', 'diagnose', sys.argv[1]]\nc.main()\n")  # fmt: skip
    p = subprocess.run([sys.executable, "-c", code, str(tgz)], capture_output=True, env=_env(tmpdir_env), timeout=60)
    assert p.returncode == 4 and b"boom" in p.stderr
    assert left(tmpdir_env) == []
    # in-process: evidence never closed (a caller cut short) is removed by the CLI's last step
    ev = load([tgz])
    assert left(tmpdir_env) != []
    from kpdoctor.bundle import loader

    loader.remove_tempdirs()
    assert left(tmpdir_env) == []
    ev.close()  # and closing it afterwards is harmless


def test_a_run_killed_outright_is_cleaned_up_by_the_next_one(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _reading_stdin(tmp)
    try:
        stale = _wait_for_folder(tmp, proc)
    finally:
        proc.kill()  # SIGKILL: nothing can run
        proc.communicate()
    assert stale.exists()
    old = time.time() - 120
    os.utime(stale, (old, old))
    run = run_cli(["diagnose", "-f", "json", "-"], tmp, stdin=KLOG.encode())  # a run that makes a folder
    assert run.code in (0, 1, 3), run.stderr
    assert left(tmp) == []


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_only_stale_folders_of_dead_runs_are_swept(tmp_path: Path) -> None:
    import fcntl

    from kpdoctor.bundle.loader import sweep_stale

    base = tmp_path / "tmp"
    base.mkdir()
    dead, now = _dead_pid(), time.time()

    def folder(name: str, age: float = 120, lock: bool = False) -> Path:
        p = base / name
        p.mkdir()
        (p / "x").mkdir()
        (p / "x" / "stdin").write_text("data")
        if lock:
            (p / ".lock").touch()
        os.utime(p, (now - age, now - age))
        return p

    gone = folder(f"kpdoctor-{dead}-abc123")
    gone_unlocked = folder(f"kpdoctor-{dead}-def456", lock=True)  # its lock is free: its process is gone
    young = folder(f"kpdoctor-{dead}-young1", age=5)
    alive = folder(f"kpdoctor-{os.getppid()}-alive1")
    held = folder(f"kpdoctor-{dead}-held01", lock=True)  # a run in another PID namespace holds it
    other = folder("kpdoctor-notapid")
    (base / f"kpdoctor-{dead}-file").write_text("not a folder")
    (base / f"kpdoctor-{dead}-link").symlink_to(other)
    fd = os.open(held / ".lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        removed = sweep_stale(str(base))
    finally:
        os.close(fd)
    assert sorted(removed) == sorted([str(gone), str(gone_unlocked)])
    assert not gone.exists() and not gone_unlocked.exists()
    assert young.exists() and alive.exists() and held.exists() and other.exists()
    assert (base / f"kpdoctor-{dead}-file").exists() and (base / f"kpdoctor-{dead}-link").is_symlink()


def test_temporary_folders_are_named_for_their_process_and_locked(tmpdir_env: Path) -> None:
    import fcntl

    from kpdoctor.bundle.loader import private_tempdir, remove_tempdir

    a, b = private_tempdir(), private_tempdir()
    root = Path(a).parent
    assert Path(b).parent == root and root.parent == tmpdir_env
    assert root.name.startswith(f"kpdoctor-{os.getpid()}-")
    assert (root.stat().st_mode & 0o777) == 0o700
    fd = os.open(root / ".lock", os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    remove_tempdir(a)
    assert root.exists() and not Path(a).exists()
    remove_tempdir(b)
    assert left(tmpdir_env) == []


def _blocked() -> str:
    with open("/proc/self/status") as fh:
        return fh.read().split("SigBlk:")[1].split()[0]


def test_a_timeout_at_a_temporary_folder_never_leaves_signals_blocked() -> None:
    """The --timeout's SIGALRM may strike as signals are held for a temporary folder: the mask is
    restored all the same (a blocked mask is inherited by every process started afterwards: they
    then ignore Ctrl-C and SIGHUP)."""
    from kpdoctor.bundle.loader import _signals_held

    before, struck = _blocked(), 0
    for _ in range(200):
        deadline.arm(0.0005)
        try:
            for _ in range(1000):
                with _signals_held():
                    pass
        except deadline.TimedOut:
            struck += 1
        finally:
            deadline.disarm()
    deadline.arm(None)  # the bound's state is the process's: no later test may find it expired
    assert struck > 0 and _blocked() == before
