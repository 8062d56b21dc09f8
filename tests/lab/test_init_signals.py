"""An init that passes a stop signal to its child alone, run for real: Debian's tini as PID 1 of a
fresh PID namespace starting a shell script that runs the application without `exec`.

busybox `ps` in that namespace prints what users paste from such a container (the script as
`{entry.sh} /bin/sh /…/entry.sh`); a SIGTERM to tini kills the shell and tini, and the application
is killed with the namespace without ever seeing SIGTERM, which is what KP403 reads from the
listing. With `tini -g` the whole process group is signalled, and that listing is not reported.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from .kpdoctor_run import diagnose_json

APP = """import signal, sys, time
def stop(*_):
    open(sys.argv[1], "w").write("TERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(sys.argv[2], "w").write("ready")
time.sleep(600)
"""


def _require() -> None:
    missing = [t for t in ("tini", "busybox", "unshare", "nsenter") if shutil.which(t) is None]
    why = "needs root" if os.geteuid() != 0 else f"needs {', '.join(missing)}" if missing else None
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the init-signal lab must run in CI: {why} (scripts/test installs tini and busybox)")
    pytest.skip(why)


@contextmanager
def container(tmp: Path, *tini_flags: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """tini as PID 1 of a new PID namespace, running entry.sh, which starts the app without exec."""
    _require()
    (tmp / "app.py").write_text(APP)
    entry = tmp / "entry.sh"
    entry.write_text(f"#!/bin/sh\n{sys.executable} {tmp / 'app.py'} {tmp / 'got-term'} {tmp / 'ready'}\n")
    entry.chmod(0o755)
    # --kill-child: unshare's death takes tini, PID 1 of the namespace, and with it every process in it
    argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "tini", *tini_flags, "--", str(entry)]
    proc = subprocess.Popen(argv)
    try:
        end = time.monotonic() + 30
        while not (tmp / "ready").exists():
            assert proc.poll() is None and time.monotonic() < end, "the app did not start"
            time.sleep(0.1)
        yield proc, entry
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        end = time.monotonic() + 30
        while (tmp / "ready").exists() and _alive(tmp) and time.monotonic() < end:
            time.sleep(0.1)
        assert not _alive(tmp), "a process of the namespace outlived it"


def _alive(tmp: Path) -> bool:
    """Does a process of this test's namespace still run (its app, by its command line)?"""
    marker = str(tmp / "app.py").encode()
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _tini_pid(unshare: subprocess.Popen[bytes]) -> int:
    """tini's PID as the host sees it: unshare's forked child."""
    kids = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children").read_text().split()
    return int(kids[0])


def _ps(tini: int) -> str:
    done = subprocess.run(["nsenter", "-t", str(tini), "-p", "-m", "busybox", "ps"],
                          capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
    return done.stdout


def _kp403(tmp: Path, listing: str) -> list[dict[str, Any]]:
    path = tmp / "ps.txt"
    path.write_text(listing)
    return [f for f in diagnose_json(path)["findings"] if f["code"] == "KP403"]


def test_tini_s_child_shell_keeps_sigterm_from_the_application(tmp_path: Path) -> None:
    with container(tmp_path) as (unshare, entry):
        tini = _tini_pid(unshare)
        listing = _ps(tini)
        os.kill(tini, signal.SIGTERM)
        unshare.wait(timeout=30)
    assert f"{{entry.sh}} /bin/sh {entry}" in listing, listing
    assert not (tmp_path / "got-term").exists()  # killed with the namespace, never asked to stop

    (f,) = _kp403(tmp_path, listing)
    assert f["cause"] == "sigterm-not-forwarded" and f["suspected"], f
    assert f"cat {entry}" in f["summary"] and "tini" in f["summary"]
    assert [e["line"] for e in f["evidence"]] == [2, 3, 4]


def test_tini_g_signals_the_group_and_is_not_reported(tmp_path: Path) -> None:
    """(Whether the application's handler runs before the namespace goes is a race: the shell dies
    of the same signal and tini with it. That it is signalled at all is tini.c's -g.)"""
    with container(tmp_path, "-g") as (unshare, _entry):
        listing = _ps(_tini_pid(unshare))
    assert "tini -g --" in listing
    assert _kp403(tmp_path, listing) == []
