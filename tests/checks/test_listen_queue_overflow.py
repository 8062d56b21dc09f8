"""KP304 listen-queue-overflow: a listener at its backlog."""

from __future__ import annotations

from pathlib import Path

from checks.helpers import run
from conftest import one, write

from kpdoctor.model import Severity


def test_a_listener_at_its_backlog_is_a_warning_on_its_own(tmp_path: Path) -> None:
    ss = write(
        tmp_path,
        "ss.txt",
        "State  Recv-Q Send-Q Local Address:Port Peer Address:PortProcess\n"
        'LISTEN 129    128          0.0.0.0:8080      0.0.0.0:*    users:(("java",pid=4242,fd=99))\n'
        'LISTEN 0      128          0.0.0.0:22        0.0.0.0:*    users:(("sshd",pid=1,fd=3))\n',
    )
    f = one(run([ss]), "KP304")
    assert f.severity == Severity.WARNING
    assert "listener 0.0.0.0:8080 (java, pid 4242) has 129 connections waiting for a backlog of 128" in f.summary
    assert f.evidence[0].line == 2
