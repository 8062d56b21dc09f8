"""Fixtures of the lab: a real control plane (etcd + kube-apiserver v1.20) in a network namespace.

``lab_binaries`` builds the binaries into the cache on first use (a few minutes, progress shown
live even under pytest's capture) and finds them there afterwards; ``control_plane`` runs etcd
and kube-apiserver in a namespace of their own for one test module. See :mod:`.control_plane`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .control_plane import Binaries, ControlPlane, control_plane_unavailable, ensure_binaries
from .netns import cleanup_stale


def _require_control_plane() -> None:
    """Skip when not root or without network namespaces; in CI (``$CI`` set) fail instead."""
    reason = control_plane_unavailable()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the control plane lab must run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def lab_binaries(request: pytest.FixtureRequest) -> Binaries:
    """kube-apiserver, kube-proxy (built from Debian's source) and etcd, from the cache."""
    _require_control_plane()
    cleanup_stale()  # namespaces a killed run left (its etcd and apiserver died with it)
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        return ensure_binaries()
    with capture.global_and_fixture_disabled():  # a cold build's progress lines, live
        return ensure_binaries()


@pytest.fixture(scope="module")
def control_plane(lab_binaries: Binaries) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver in a fresh network namespace; stopped and deleted afterwards."""
    with ControlPlane(lab_binaries) as cp:
        yield cp


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A root-owned folder every user may enter (tmp_path is root's alone), removed afterwards:
    for programs the lab runs as another user, or whose files it plants."""
    d = Path(tempfile.mkdtemp(prefix="kpd-work-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
