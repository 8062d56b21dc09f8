"""KP300 conntrack-insert-race: insert_failed growing between snapshots, or since boot with its share."""

from __future__ import annotations

from pathlib import Path

from checks.helpers import REPO, TIMES, Diag, bundle, case, conntrack_s, of, run
from conftest import one, write

from kpdoctor.model import Confidence, Severity


def test_insert_failed_growing_between_snapshots_is_the_race(tmp_path: Path) -> None:
    root = bundle(
        tmp_path,
        {
            "node/counters/T0/conntrack-stats.txt": conntrack_s(1200),
            "node/counters/T1/conntrack-stats.txt": conntrack_s(1450, drop=30),
            "node/uname.txt": "Linux node-1 4.15.0-1050-aws #52-Ubuntu SMP x86_64 GNU/Linux\n",
            "node/iptables-nft-save.txt": "*nat\n:POSTROUTING ACCEPT [0:0]\n"
            '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j MASQUERADE\nCOMMIT\n',
        },
        TIMES,
    )
    f = one(run([root]), "KP300")
    assert f.severity == Severity.WARNING and f.ongoing
    assert "(conntrack.insert_failed) grew by 250 in 10.0 s (25.00/s) (1200 -> 1450)" in f.summary
    assert f.evidence[0].artifact == "node/counters/T0/conntrack-stats.txt"
    assert any("Upgrade the kernel (4.15.0-1050-aws) to 5.6" in x for x in f.fix)
    assert any("--random-fully" in x for x in f.fix)
    assert any(c.text.endswith("-j MASQUERADE") for c in f.evidence)


def test_a_single_conntrack_snapshot_is_info_since_boot(tmp_path: Path) -> None:
    p = write(tmp_path, "ct.txt", conntrack_s(37))
    f = one(run([p]), "KP300")
    assert f.severity == Severity.INFO
    assert "total since boot" in f.summary


def test_unanswered_dns_in_the_table_corroborates_one_snapshot(tmp_path: Path) -> None:
    ct = write(tmp_path, "ct.txt", conntrack_s(37))
    table = write(
        tmp_path,
        "ct-list.txt",
        "udp      17 21 src=10.244.1.7 dst=10.96.0.10 sport=44512 dport=53 [UNREPLIED] src=10.244.2.9 dst=10.244.1.7 "
        "sport=53 dport=44512 mark=0 use=1\n"
        "tcp      6 86398 ESTABLISHED src=10.244.1.7 dst=10.96.0.1 sport=40000 dport=443 src=192.168.0.10 "
        "dst=10.244.1.7 sport=6443 dport=40000 [ASSURED] mark=0 use=1\n",
    )
    f = one(run([ct, table]), "KP300")
    assert f.severity == Severity.WARNING
    assert "1 DNS query in the conntrack table never got an answer" in f.summary
    assert f.evidence[-1].line == 1


def test_two_conntrack_outputs_in_a_transcript_pair_by_date(tmp_path: Path) -> None:
    text = (
        "$ date\nSat Nov 21 10:00:00 UTC 2026\n$ conntrack -S\n"
        + conntrack_s(10)
        + "$ date\nSat Nov 21 10:00:05 UTC 2026\n$ conntrack -S\n"
        + conntrack_s(60)
    )
    f = one(run([write(tmp_path, "session.txt", text)]), "KP300")
    assert f.severity == Severity.WARNING
    assert "grew by 50 in 5.0 s" in f.summary
    assert f.evidence[0].line == 4 and f.evidence[1].line == 9  # lines of the user's file


SEED2_SAVE = (
    REPO / "src" / "kpdoctor" / "demo" / "bundles" / "config-ignores-hostname" / "node" / "iptables-legacy-save.txt"
)


def test_a_small_share_of_failed_inserts_stays_info(diagnose: Diag) -> None:
    """weave#3287: 199 failed inserts against 3.3 million since boot."""
    (f,) = of(diagnose(case("weave-3287", "conntrack-S.txt")), "KP300")
    assert f.severity == Severity.INFO and f.confidence == Confidence.MEDIUM
    assert "199 failed conntrack inserts (conntrack.insert_failed) since boot, 0.0061% of 3,266,123" in f.summary
    assert "run `conntrack -S` twice a minute apart" in f.summary


def test_failed_inserts_with_dns_dnat_rules_are_a_warning(diagnose: Diag) -> None:
    """weave#3287's counters with seed 002's rules, which DNAT UDP DNS to two CoreDNS Pods."""
    r = diagnose({**case("weave-3287", "conntrack-S.txt"), "iptables-save.txt": SEED2_SAVE.read_text()})
    (f,) = of(r, "KP300")
    assert f.severity == Severity.WARNING
    assert "DNATs UDP DNS to 2 backend(s)" in f.summary
    assert any("--to-destination 10.188.171.9:53" in c.text and "-p udp" in c.text for c in f.evidence)
