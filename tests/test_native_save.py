"""The native core reads a plain ``iptables-save`` dump exactly as the Python parser does.

``parse_save`` hands a whole dump to ``kpdoctor._core.scan_save`` (a quarter of a million lines
at 10,000 Services, read without a Python step per line) and reads line by line in Python only
what the core declines (a paste, a spliced warning, unusual quoting). Both must give the same
ruleset: tables, chains in the same order with their policies and lines, policy lines and
counters, every rule's chain, line, text, body and counters, the diagnostics, the header's
variant and the truncation. Checked over every dump the tests know and over generated dumps
built from every kind of line a dump (or a damaged copy of one) holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpdoctor.facts.duplicates import duplicated_rules
from kpdoctor.parse import iptables
from kpdoctor.parse.iptables import Ruleset, parse_save
from tests.test_native_parity import gen_cluster, rule_files, verify_json

pytestmark = pytest.mark.skipif(iptables._scan_save is None, reason="the native core is not built")


def _shape(rs: Ruleset) -> object:
    """Everything a ruleset says, dictionaries in their order."""
    tables = [
        (
            name,
            list(t.chains.items()),
            list(t.chain_lines.items()),
            list(t.policy_lines.items()),
            list(t.policy_packets.items()),
            [(r.table, r.chain, r.line, r.text, r.body, r.packets, r.bytes, r.args) for r in t.rules],
        )
        for name, t in rs.tables.items()
    ]
    return (
        tables,
        [(d.line, d.message) for d in rs.diagnostics],
        rs.variant,
        rs.generator,
        rs.legacy_warning_line,
        rs.incompatible,
        sorted(rs.truncated),
        rs.form,
    )


def _python(text: str, first_line: int = 1) -> Ruleset:
    return iptables._parse_lines(text, "dump", None, 4, first_line, False, None, None)


def _looked_up_alike(core: Ruleset, python: Ruleset) -> None:
    """The core's reading answers what a verification asks without going through every rule (a
    rule by its place, the rules holding a text, the rules of some chains) as the list does."""
    for name, t in core.tables.items():
        listed = python.tables[name].rules
        n = len(listed)
        assert len(t.rules) == n
        if n:
            assert t.rules[n - 1] == listed[-1] and t.rules[-1] is t.rules[n - 1]
            assert t.rules[1:3] == listed[1:3]
        for needle in ("DNAT", "-j KUBE-", "has no endpoints", '"', "COMMIT"):
            assert list(t.containing(needle)) == [r for r in listed if needle in r.text], needle
        both = [r for r in listed if "cluster IP" in r.text and "KUBE-MARK-MASQ" in r.text]
        assert list(t.containing("cluster IP", "KUBE-MARK-MASQ")) == both
        chains = {"KUBE-SERVICES", "POSTROUTING", next(iter(t.chains), "")}
        assert list(t.in_chains(chains)) == [r for r in listed if r.chain in chains]
        assert t.rules == listed
    if core.scanned():  # the agent finds a carried result's rule by its text, in every table
        by_text: dict[str, list[int]] = {}
        for t in python.tables.values():
            for r in t.rules:
                by_text.setdefault(r.text, []).append(r.line)
        line_of = core.line_finder()
        for text, lines in by_text.items():
            assert line_of(text) == (lines[0] if len(lines) == 1 else None), text
        assert line_of("-A NOWHERE -j ACCEPT") is None
    fresh = [r for t in python.tables.values() for r in t.rules]
    python._kube_rules = None
    want = sum(1 for r in fresh if r.chain.startswith("KUBE-") or (r.target or "").startswith("KUBE-"))
    assert core.kube_rule_count() == python.kube_rule_count() == want
    assert duplicated_rules([core]) == duplicated_rules([python])  # repeated rules found in the core alike


def read_alike(text: str, first_line: int = 1) -> bool:
    """Assert both readings agree; whether the core read the dump."""
    core, python = parse_save(text, "dump", None, 4, first_line), _python(text, first_line)
    _looked_up_alike(core, python)
    assert _shape(core) == _shape(python)
    return iptables._scan_save is not None and iptables._scan_save(text, first_line) is not None


def test_every_dump_the_tests_know_is_read_alike() -> None:
    read = declined = 0
    for path in rule_files():
        text = path.read_text(errors="surrogateescape")
        if read_alike(text, 3):
            read += 1
        else:
            declined += 1
    assert read >= 40, (read, declined)


def test_a_generated_node_s_dump_is_read_by_the_core(tmp_path: Path) -> None:
    save, _ = gen_cluster.write(tmp_path, 300, 3)
    text = save.read_text()
    assert read_alike(text)
    counted = "\n".join(
        f"[{i}:{i * 60}] {line}" if line.startswith("-A ") else line for i, line in enumerate(text.splitlines())
    )
    assert read_alike(counted + "\n")


def test_a_dump_with_counters_verifies_as_its_plain_twin(tmp_path: Path) -> None:
    """The core walks a counted rule by its text after the counters (`iptables-save -c`)."""
    save, cluster = gen_cluster.write(tmp_path, 60, 3)
    counted = tmp_path / "counted.txt"
    counted.write_text(
        "\n".join(
            f"[{i}:{i * 60}] {ln}" if ln.startswith("-A ") else ln for i, ln in enumerate(save.read_text().splitlines())
        )
        + "\n"
    )
    runs = []
    for dump in (save, counted):
        ver = verify_json(dump, cluster, "native")["verification"]
        runs.append((ver["services_checked"], ver["ok"], ver["mismatches"], ver["uncertain"]))
    assert runs[0] == runs[1] and runs[0][0] == 60 and runs[0][2:] == (0, 0)


LINES = st.sampled_from(
    [
        "*nat",
        "*filter",
        "* mangle ",
        "COMMIT",
        "",
        "   ",
        "# Generated by iptables-save v1.8.7 on Tue Jan  2 10:00:00 2024",
        "# Generated by iptables-nft-save v1.8.9 (nf_tables) on Tue Jan  2 10:00:00 2024",
        "# Generated by iptables-save v1.8.4 (legacy)",
        "# Warning: iptables-legacy tables present, use iptables-legacy-save to see them",
        "# Table `nat' is incompatible, use 'nft' tool.",
        "# Completed on Tue Jan  2 10:00:00 2024",
        ":PREROUTING ACCEPT [0:0]",
        ":INPUT DROP [12:3456]",
        ":FORWARD DROP [123456789012345678901:1]",
        ":OUTPUT ACCEPT",
        ":KUBE-SERVICES - [0:0]",
        ":KUBE-SVC-ABC -",
        ":KUBE-SEP-XYZ - [0:0] extra",
        ":BROKEN",
        ": SPACED - [0:0]",
        ":KUBE-NODEPORTS  -  [0:0]",
        ":INPUT ACCEPT [1:2] ",
        '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        "-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j KUBE-SVC-ABC",
        "-A KUBE-SVC-ABC -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-XYZ",
        "-A KUBE-SEP-XYZ -p tcp -m tcp -j DNAT --to-destination 10.244.1.5:8443",
        "-A UNDECLARED -j ACCEPT",
        '-A INPUT -m comment --comment "odd quote -j DROP',
        '-A INPUT -m comment --comment "it\'s" -j DROP',
        "-A  DOUBLE -j ACCEPT",
        "-A INPUT -j ACCEPT ",
        " -A INPUT -j ACCEPT",
        "-A INPUT",
        "-I INPUT 1 -j ACCEPT",
        "-N NEWCHAIN",
        "[0:0] -A INPUT -j ACCEPT",
        "[5:300]  -A KUBE-SERVICES -j RETURN",
        "[99999999999999999999999:1] -A INPUT -j DROP",
        "[18446744073709551616:0] -A INPUT -j DROP",
        "[1:2]-A INPUT -j DROP",
        "[x:2] -A INPUT -j DROP",
        "[3:4] -I INPUT -j DROP",
        "Chain INPUT (policy ACCEPT)",
        "root@node:~# iptables-save",
        "-A INPUT -j ACCEPT # Warning: iptables-legacy tables present",
        "-A INPUT -s 10.0.0.0/8\t-j ACCEPT",
        '-A INPUT -m comment --comment "caf\u00e9" -j ACCEPT',
        '-A INPUT -m comment --comment "a\\\\b" -j ACCEPT',
        '-A KUBE-SERVICES -m comment --comment "ns/svc:http has no endpoints" -j REJECT',
        '-A INPUT -m comment --comment "\udcff" -j ACCEPT',  # a byte read as a surrogate escape
    ]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(LINES, max_size=40),
    ending=st.sampled_from(["\n", "\r\n", ""]),
    first_line=st.integers(1, 5),
)
def test_any_dump_is_read_alike(lines: list[str], ending: str, first_line: int) -> None:
    """Lines of every kind in any order (a damaged dump, a paste): the core reads the dump as
    the Python parser does, or declines it and the Python parser reads it."""
    read_alike(ending.join(lines) + (ending if lines else ""), first_line)


def test_the_core_reads_plain_dumps_and_declines_what_only_python_reads() -> None:
    plain = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n"
    assert read_alike(plain)
    assert read_alike(plain.replace("-A PREROUTING", "[7:420] -A PREROUTING"))
    for declined in (
        plain.replace("\n", "\r\n"),  # CRLF: a paste from another system
        plain.replace("-j KUBE", "-j\tKUBE"),
        plain.replace("-A PREROUTING", "-I PREROUTING"),
        plain.replace("COMMIT", "-A PREROUTING -j ACCEPT# Warning: iptables-legacy tables present\nCOMMIT"),
    ):
        assert not read_alike(declined), declined


def test_a_rule_s_line_is_found_by_its_text_only_where_one_rule_reads_so() -> None:
    """The agent moves a carried result's citation to its rule's line in the next dump: a text
    one rule reads is found at its line, whatever table holds it; a text two rules read (in one
    table or two) is no one line, nor is a text no rule reads."""
    dump = (
        "*mangle\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -j KPD-A\n-A OUTPUT -j KPD-M\nCOMMIT\n"
        "*filter\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -j KPD-A\n-A OUTPUT -j KPD-F\n-A OUTPUT -j KPD-F\nCOMMIT\n"
    )
    rs = parse_save(dump, "iptables-save.txt", "legacy", 4, first_line=10)
    assert rs.scanned()
    line_of = rs.line_finder()
    assert [line_of(t) for t in ("-A OUTPUT -j KPD-M", "-A OUTPUT -j KPD-A", "-A OUTPUT -j KPD-F")] == [13, None, None]
    assert line_of("-A OUTPUT -j KPD") is None and line_of("") is None
