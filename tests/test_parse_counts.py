"""Counting pipelines as users type them (parse/counts.py)."""

from __future__ import annotations

from kpdoctor.parse.counts import counting_command, parse_line_count, pipeline


def test_pipeline_stages_spaced_or_not_and_quoted_bars_kept() -> None:
    assert pipeline("iptables-save|grep -c KUBE-FIREWALL") == [["iptables-save"], ["grep", "-c", "KUBE-FIREWALL"]]
    assert pipeline("grep 'a|b' x | wc -l") == [["grep", "a|b", "x"], ["wc", "-l"]]
    assert pipeline("true || false") == [["true", "||", "false"]]


def test_which_commands_count() -> None:
    assert counting_command("iptables -L -n | grep X | wc -l")
    assert counting_command("iptables -S | grep -c X")
    assert counting_command("grep --count X file")
    assert not counting_command("iptables -S | grep X")
    assert not counting_command("wc -c file")


def test_the_count_with_notices_and_the_patterns_kept() -> None:
    out = "# Warning: iptables-legacy tables present, use iptables-legacy to see them\n4190\n"
    c = parse_line_count(out, 'iptables -L -v -n | grep "kubernetes firewall" | grep -v ACCEPT | wc -l', 7)
    assert c is not None
    assert (c.count, c.line, c.program, c.patterns) == (4190, 8, "iptables", ("kubernetes firewall",))
    assert c.notices == ("# Warning: iptables-legacy tables present, use iptables-legacy to see them",)
    assert parse_line_count("12\nsomething else\n", "iptables -S | wc -l") is None
    assert parse_line_count("12\n", "iptables -S") is None
    g = parse_line_count("3\n", "grep -c KUBE-FIREWALL dump.txt")
    assert g is not None and g.source == () and g.patterns == ("KUBE-FIREWALL",)
