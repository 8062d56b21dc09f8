"""Reading one node file (collect/node_files.py): links inside the node's root only, regular files
only, bounded in bytes and time, every refusal one line that says why."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from fuzz_hostile import LOG_DIR, fake_root, plant
from test_collect_hostile_paths import KINDS

from kpdoctor.collect.node_files import NodeFileError, read_node_file
from kpdoctor.collect.record import Budget, Collected, NotCollected
from kpdoctor.collect.runner import Host, Runner

PATHS = (f"/{LOG_DIR}/0.log", "/proc/modules", "/etc/os-release", "/proc/sys/kernel/hostname")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return fake_root(tmp_path / "root")


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("inside", PATHS)
def test_a_thing_that_is_not_a_file_is_refused_with_why(root: Path, tmp_path: Path, kind: str, inside: str) -> None:
    plant(root / inside.lstrip("/"), kind, tmp_path / "outside")
    t0 = time.monotonic()
    with pytest.raises(NodeFileError) as err:
        read_node_file(str(root), inside, 1024**2, tail=inside.endswith(".log"))
    assert KINDS[kind] in str(err.value) and inside in str(err.value)
    assert time.monotonic() - t0 < 2  # a FIFO is never waited on, a device never read


@pytest.mark.parametrize("absolute", [True, False])
@pytest.mark.parametrize("depth", [0, 1, 3])
def test_links_are_followed_inside_the_node_root_only(root: Path, tmp_path: Path, absolute: bool, depth: int) -> None:
    """A link resolves as it would on the node: an absolute target is the node's /, and ``..``
    stops at the node's root; a link chain ``depth`` long is followed all the way."""
    (tmp_path / "secret.txt").write_text("the collector's own file\n")
    (root / "data").mkdir()
    (root / "data/real.log").write_text("inside the node root\n")
    (root / "secret.txt").write_text("the node's own secret.txt\n")
    log = root / LOG_DIR / "0.log"
    log.unlink()
    hops = [root / f"data/hop{i}" for i in range(depth)]
    target = "/data/real.log"
    for hop in reversed(hops):
        hop.symlink_to(target if absolute else os.path.relpath(root / target.lstrip("/"), hop.parent))
        target = "/" + str(hop.relative_to(root))
    log.symlink_to(target if absolute else os.path.relpath(root / target.lstrip("/"), log.parent))
    assert read_node_file(str(root), f"/{LOG_DIR}/0.log", 4096)[0] == b"inside the node root\n"
    # out of the root: the same number of ".." as the collector's path has, and then some
    log.unlink()
    log.symlink_to("../" * (LOG_DIR.count("/") + 2 + depth) + "secret.txt")
    assert read_node_file(str(root), f"/{LOG_DIR}/0.log", 4096)[0] == b"the node's own secret.txt\n"
    log.unlink()
    log.symlink_to(str(tmp_path / "secret.txt"))  # absolute, as the collector sees it: not on the node
    with pytest.raises(NodeFileError, match="which does not exist"):
        read_node_file(str(root), f"/{LOG_DIR}/0.log", 4096)


@pytest.mark.parametrize("size", [0, 100, 4096, 10_000])
@pytest.mark.parametrize("limit", [1, 1000, 5000])
def test_reads_are_bounded_in_bytes(root: Path, size: int, limit: int) -> None:
    data = b"".join(b"%07d\n" % i for i in range(size // 8 + 1))[:size]
    (root / "etc/big").write_bytes(data)
    head, note = read_node_file(str(root), "/etc/big", limit)
    assert head == data[:limit] and (note != "") == (size > limit)
    tail, note = read_node_file(str(root), "/etc/big", limit, tail=True)
    assert len(tail) <= limit and data.endswith(tail)
    if size > limit:
        assert "last" in note and (b"\n" not in data[-limit:-1] or tail.startswith(b"0"))  # whole lines only


def test_a_huge_sparse_log_costs_only_its_tail(root: Path) -> None:
    with open(root / LOG_DIR / "0.log", "r+b") as fh:
        fh.truncate(8 * 1024**3)
        fh.seek(8 * 1024**3 - 14)
        fh.write(b"\nthe last one\n")
    t0 = time.monotonic()
    got = Runner(Host(str(root)), Budget(10)).read("kube-proxy/log.txt", f"/{LOG_DIR}/0.log", 1024**2, tail=True)
    assert isinstance(got, Collected) and got.data.endswith(b"the last one\n") and "of 8192 MiB" in got.note
    assert time.monotonic() - t0 < 2


def test_a_read_stops_at_the_collections_time_bound(root: Path) -> None:
    (root / "etc/big").write_bytes(b"x" * (3 << 20))
    got = Runner(Host(str(root)), Budget(0)).read("node/x", "/etc/big", 8 << 20)
    assert isinstance(got, Collected) and "time bound" in got.note and len(got.data) < 3 << 20


def test_a_failure_is_one_artifact_not_the_run(root: Path) -> None:
    plant(root / "proc/locks", "fifo", root / "x")
    got = Runner(Host(str(root)), Budget(10)).read("node/locks.txt", "/proc/locks")
    assert isinstance(got, NotCollected) and got.reason == "/proc/locks is a FIFO: not read"
