"""KP306 source-port-exhaustion: SNAT entries using most ports to one destination."""

from __future__ import annotations

from pathlib import Path

from checks.helpers import run
from conftest import one, write

from kpdoctor.model import Severity


def test_snat_entries_using_most_ports_to_one_destination(tmp_path: Path) -> None:
    lines = [
        f"tcp      6 110 TIME_WAIT src=10.244.1.{i % 200 + 2} dst=52.1.2.3 sport={20000 + i} dport=443 "
        f"src=52.1.2.3 dst=192.168.0.2 sport=443 dport={1024 + i} [ASSURED] mark=0 use=1"
        for i in range(40000)
    ]
    lines.append("conntrack v1.4.7 (conntrack-tools): 40000 flow entries have been shown.")
    f = one(run([write(tmp_path, "ct-list.txt", "\n".join(lines) + "\n")]), "KP306")
    assert f.severity == Severity.WARNING
    assert "40000 SNATed tcp connections from 192.168.0.2 to 52.1.2.3:443 hold 62%" in f.summary
