"""The neighbour (ARP) table's own counters name its overflow without the kernel's message.

The kernel counts each refused entry in ``table_fulls`` (/proc/net/stat/arp_cache, ``ip -s
ntable``) at the moment it would log "neighbor table overflow!" (rate-limited, often lost from a
ring buffer long since). The formats: this machine's own files and ``ip -s ntable`` output, read
at test time; a CentOS node's posted ``cat /proc/net/stat/arp_cache`` (the header spaced as
kernels before 6.1 print it, two CPUs, table_fulls 0x39c + 0x240); and the collector's counter
snapshots with seed-style values.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from checks.helpers import TIMES, bundle, codes, run
from conftest import write

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Finding, Report
from kpdoctor.parse.neigh_stats import parse_neigh_stats

OLD_HEADER = (
    "entries  allocs destroys hash_grows  lookups hits  res_failed  rcv_probes_mcast rcv_probes_ucast  "
    "periodic_gc_runs forced_gc_runs unresolved_discards table_fulls"
)
POSTED = (
    "[root@centos ~]# cat /proc/net/stat/arp_cache \n"
    f"{OLD_HEADER}\n"
    "00000002  0000000d 0000000d 00000000  00000515 00000089  00000015  00000000 00000000  00000267 000003a1 "
    "00000023 0000039c\n"
    "00000002  0000001c 0000001a 00000000  00001675 00000374  00000093  00000000 00000000  000003bf 00000252 "
    "00000046 00000240\n"
)
NEW_HEADER = (
    "entries  allocs   destroys hash_grows lookups  hits     res_failed rcv_probes_mcast rcv_probes_ucast "
    "periodic_gc_runs forced_gc_runs unresolved_discards table_fulls\n"
)


# neigh_stat_seq_show's row format since Linux 6.1 (net/core/neighbour.c), its columns aligned to the header's
ROW = (
    "{:08x} {:08x} {:08x} {:08x}   {:08x} {:08x} {:08x}   {:08x}         {:08x}         {:08x}         "
    "{:08x}       {:08x}            {:08x}\n"
)


def _row(entries: int, table_fulls: int, unresolved: int = 0) -> str:
    return ROW.format(entries, 0x11, 0x20, 0, 0x62, 4, 0, 0, 0, 0x4C, 0, unresolved, table_fulls)


def _kp313(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.code == "KP313"]


def test_this_machine_s_own_counters_are_read_and_say_nothing_is_wrong(tmp_path: Path) -> None:
    proc = Path("/proc/net/stat/arp_cache")
    if not proc.exists() or shutil.which("ip") is None:
        pytest.skip("no /proc/net/stat/arp_cache or ip here")
    ntable = subprocess.run(["ip", "-s", "ntable", "show"], capture_output=True, text=True, timeout=10, check=True)
    for name, text in (("arp_cache.txt", proc.read_text()), ("ntable.txt", ntable.stdout)):
        tables = parse_neigh_stats(text)
        assert tables and all(t.entries is not None for t in tables), (name, text[:400])
        report, _ = diagnose_paths([write(tmp_path, name, text)])
        assert [i.kind for i in report.inputs] == [Kind.NEIGH_STATS.value], name
        if all(t.table_fulls == 0 for t in tables):  # a test machine's table is never near its limit
            assert _kp313(report) == []
    by_table = {t.table: t for t in parse_neigh_stats(ntable.stdout)}
    assert by_table["arp_cache"].thresh3 is not None and by_table["arp_cache"].thresh3 > 0


def test_a_posted_count_of_refused_entries_is_the_overflow_since_boot(tmp_path: Path) -> None:
    (t,) = parse_neigh_stats(POSTED)
    assert (t.entries, t.table_fulls, t.unresolved_discards) == (2, 0x39C + 0x240, 0x23 + 0x46)
    report = run([write(tmp_path, "paste.txt", POSTED)])
    (f,) = _kp313(report)
    assert f.confidence.name == "MEDIUM" and f.ongoing is None and not f.suspected
    assert "1,500" in f.summary and "cat /proc/net/stat/arp_cache" in f.summary  # how to tell whether it goes on
    assert f.evidence[0].line == 2


def test_refusals_growing_between_the_collector_s_snapshots_happen_now(tmp_path: Path) -> None:
    root = bundle(
        tmp_path,
        {
            "node/counters/T0/arp_cache-stat.txt": NEW_HEADER + _row(1024, 40) + _row(1024, 2),
            "node/counters/T1/arp_cache-stat.txt": NEW_HEADER + _row(1024, 95) + _row(1024, 3),
        },
        TIMES,
    )
    (f,) = _kp313(run([root]))
    assert f.ongoing and f.confidence.name == "HIGH" and "ARP table" in f.summary


def test_a_table_at_its_limit_is_the_suspected_cause(tmp_path: Path) -> None:
    at_limit = NEW_HEADER + _row(1024, 0) + _row(1024, 0)
    report = run([write(tmp_path, "arp_cache", at_limit)])
    (f,) = _kp313(report)
    assert f.suspected and "1024 entries, gc_thresh3 1024" in f.summary, f.summary
    assert any("table overflow" in c for c in f.decided_by)
    # a node whose threshold is higher has room
    sysctl = "net.ipv4.neigh.default.gc_thresh3 = 4096\n"
    assert _kp313(run([write(tmp_path, "arp_cache", at_limit), write(tmp_path, "sysctl.txt", sysctl)])) == []


def test_packets_dropped_awaiting_resolution_are_unexplained_not_an_overflow(tmp_path: Path) -> None:
    report = run([write(tmp_path, "arp_cache.txt", NEW_HEADER + _row(4, 0) + _row(4, 0, unresolved=5))])
    assert "KP313" not in codes(report)
    (f,) = [f for f in report.findings if f.code == "KP140"]
    assert "awaiting ARP resolution" in f.summary


def test_conntrack_s_and_the_neighbour_table_s_proc_files_in_one_paste_are_read_apart(tmp_path: Path) -> None:
    conntrack = (
        "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop "
        "icmp_error  expect_new expect_create expect_delete search_restart\n" + " ".join(["00000010"] * 17) + "\n"
    )
    paste = (
        "# cat /proc/net/stat/nf_conntrack\n" + conntrack + "# cat /proc/net/stat/arp_cache\n" + NEW_HEADER
        + _row(2, 0x39C)
    )  # fmt: skip
    report, _ = diagnose_paths([write(tmp_path, "paste.txt", paste)])
    assert [i.kind for i in report.inputs] == [Kind.NF_CONNTRACK_STAT.value, Kind.NEIGH_STATS.value]
    (f,) = _kp313(report)
    assert "ARP table" in f.summary  # the command named the table


@pytest.fixture(scope="module")
def listings() -> dict[str, str]:
    """ip neigh (whole, one device, with -s) and net-tools' arp -n of five entries made in a
    network namespace: three permanent, one that failed to resolve, one stale."""
    from lab.netns import Netns, cleanup_stale, lab_available

    if lab_available() is not None:
        pytest.skip(str(lab_available()))
    cleanup_stale()
    with Netns() as ns:
        ns.check(["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"])
        ns.check(["ip", "addr", "add", "10.9.0.1/24", "dev", "eth0"])
        ns.check(["ip", "link", "set", "eth0", "up"])
        for i in (2, 3, 4):
            ns.check(["ip", "neigh", "add", f"10.9.0.{i}", "lladdr", f"02:00:00:00:00:0{i}", "dev", "eth0", "nud", "permanent"])
        ns.check(["ip", "neigh", "add", "10.9.0.5", "dev", "eth0", "nud", "failed"])
        ns.check(["ip", "neigh", "replace", "10.9.0.6", "lladdr", "02:00:00:00:00:06", "dev", "eth0", "nud", "stale"])
        out = {
            "ip neigh": ns.check(["ip", "neigh"]),
            "ip neigh show dev eth0": ns.check(["ip", "neigh", "show", "dev", "eth0"]),
            "ip -s neigh": ns.check(["ip", "-s", "neigh"]),
        }
        arp = ns.run(["arp", "-n"])
        if arp.returncode == 0:
            out["arp -n"] = arp.stdout
        return out


def test_neighbour_listings_are_read_entry_by_entry(listings: dict[str, str], tmp_path: Path) -> None:
    from kpdoctor.parse.neighbours import parse_neighbours

    for command, text in listings.items():
        got = {str(n.address): n for n in parse_neighbours(text)}  # the kernel's hash order
        assert sorted(got) == [f"10.9.0.{i}" for i in (2, 3, 4, 5, 6)], (command, text)
        assert got["10.9.0.5"].mac is None and got["10.9.0.2"].mac == "02:00:00:00:00:02"
        report, _ = diagnose_paths([write(tmp_path, "out.txt", f"[root@node01 ~]# {command}\n{text}")])
        assert [i.kind for i in report.inputs] == [Kind.NEIGHBOURS.value], command


def test_as_many_entries_listed_as_gc_thresh3_allows_is_the_suspected_cause(
    listings: dict[str, str], tmp_path: Path
) -> None:
    neigh = write(tmp_path, "neigh.txt", listings["ip neigh"])
    assert _kp313(run([neigh])) == []  # 5 of the default 1024
    sysctl = write(tmp_path, "sysctl.txt", "net.ipv4.neigh.default.gc_thresh3 = 4\n")
    (f,) = _kp313(run([neigh, sysctl]))
    assert f.suspected and "5 entries listed, gc_thresh3 4" in f.summary, f.summary
