"""/proc/net/softnet_stat read as each CPU's receive backlog: packets dropped there, before any
protocol counted them, are a loss no other counter shows.

The formats: this machine's file (Linux 6.18: 15 columns), read at test time; a posted listing from
a 3.x kernel (10 columns: before flow_limit_count), as a paste under its command; and the
collector's two snapshots in this machine's format with the drops column growing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from checks.helpers import TIMES, bundle, run
from conftest import write

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.parse.softnet import parse_softnet

POSTED_3X = (
    "$ cat /proc/net/softnet_stat\n"
    "6dcad223 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n"
    "6f0e1565 00000000 00000002 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n"
    "660774ec 00000000 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n"
)
# Linux 5.10+: ... received_rps flow_limit_count backlog_len cpu_index [input_qlen process_qlen]
ROW = "{:08x} {:08x} 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 {:08x} 00000000 00000000\n"


def test_this_machine_s_file_is_read_and_quiet(tmp_path: Path) -> None:
    proc = Path("/proc/net/softnet_stat")
    if not proc.exists():
        pytest.skip("no /proc/net/softnet_stat here")
    text = proc.read_text()
    rows = parse_softnet(text)
    assert rows and [r.cpu for r in rows] == sorted(r.cpu for r in rows)
    report, _ = diagnose_paths([write(tmp_path, "softnet_stat", text)])
    assert [i.kind for i in report.inputs] == [Kind.SOFTNET_STAT.value]
    if all(r.dropped == 0 and r.flow_limit_count == 0 for r in rows):
        assert [f for f in report.findings if f.code == "KP140"] == []


def test_an_old_kernel_s_ten_columns_under_their_command(tmp_path: Path) -> None:
    rows = parse_softnet(POSTED_3X)
    first = rows[0]
    assert (first.line, first.processed, first.dropped, first.time_squeeze) == (2, 0x6DCAD223, 0, 1)
    report, _ = diagnose_paths([write(tmp_path, "paste.txt", POSTED_3X)])
    assert [i.kind for i in report.inputs] == [Kind.SOFTNET_STAT.value]


def test_backlog_drops_growing_between_snapshots_are_an_ongoing_loss(tmp_path: Path) -> None:
    root = bundle(
        tmp_path,
        {
            "node/counters/T0/softnet_stat.txt": ROW.format(0x7402, 0x10, 0) + ROW.format(0xB4AA, 0, 1),
            "node/counters/T1/softnet_stat.txt": ROW.format(0x9402, 0x2F0, 0) + ROW.format(0xC4AA, 0, 1),
        },
        TIMES,
    )
    (f,) = [f for f in run([root]).findings if f.code == "KP140"]
    assert f.severity.name == "WARNING" and "netdev_max_backlog" in f.summary, f.summary
