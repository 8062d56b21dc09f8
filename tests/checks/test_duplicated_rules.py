"""Rules a checking writer appended twice: a binary whose `-C` fails (KP122: kube-router#1676 on
iptables 1.8.10) or kube-proxy's userspace proxier re-appending its jumps (KP123: k/k#14870); and
rules a terminal wrapped at its width, joined again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conftest import UPSTREAM, none_of, one

from kpdoctor.facts.duplicates import duplicated_rules
from kpdoctor.model import Report, Severity
from kpdoctor.parse.iptables import parse_save

Diagnose = Callable[..., Report]

# as posted in kube-router#1676: three rules, two of them wrapped by the terminal
KUBE_ROUTER = """-A KUBE-ROUTER-INPUT -d 10.96.0.0/12 -m comment --comment "allow traffic to primary/secondary cluster IP range - BVHX2PIHDXXEO43X" -j RETURN
-A KUBE-ROUTER-INPUT -p tcp -m comment --comment "allow LOCAL TCP traffic to node ports - LR7XO7NXDBGQJD2M" -m addrtype --dst-type LOCAL -m multiport --d
ports 30000:32767 -j RETURN
-A KUBE-ROUTER-INPUT -p udp -m comment --comment "allow LOCAL UDP traffic to node ports - 76UCBPIZNGJNWNUZ" -m addrtype --dst-type LOCAL -m multiport --d
ports 30000:32767 -j RETURN
-A KUBE-ROUTER-INPUT -p tcp -m comment --comment "allow LOCAL TCP traffic to node ports - LR7XO7NXDBGQJD2M" -m addrtype --dst-type LOCAL -m multiport --d
ports 30000:32767 -j RETURN
"""
# as posted in k/k#14870 (`iptables -L -t nat`, kube-proxy's userspace proxier)
PORTALS = (Path(__file__).parents[1] / "data" / "duplicated_rules" / "iptables-L-nat.txt").read_text()


def test_wrapped_rules_are_joined_where_the_terminal_cut_them() -> None:
    rs = parse_save(KUBE_ROUTER, "paste", None, 4, fragment=True)
    rules = rs.all_rules()
    assert [r.line for r in rules] == [1, 2, 4, 6]
    assert rules[1].body.endswith("-m multiport --dports 30000:32767 -j RETURN")
    assert "--dports" in rules[1].args


def test_a_rule_appended_twice_by_a_checking_writer(diagnose: Diagnose) -> None:
    f = one(diagnose({"iptables-save.txt": KUBE_ROUTER}), "KP122")
    assert f.summary.startswith("2 copies of one rule in KUBE-ROUTER-INPUT") and f.severity == Severity.WARNING
    assert "1.8.10" in f.summary and "iptables 1.8.11" in f.fixed_in  # no version given: the known ones


def test_with_the_version_the_fix_is_that_releases(diagnose: Diagnose) -> None:
    f = one(diagnose({"iptables-save.txt": KUBE_ROUTER, "v.txt": "iptables v1.8.10 (nf_tables)\n"}), "KP122")
    assert f.fixed_in == ["iptables 1.8.11"]


def test_userspace_jumps_reappended_are_kube_proxys_own(diagnose: Diagnose) -> None:
    report = diagnose({"iptables-nat.txt": PORTALS})
    f = one(report, "KP123")
    assert "3 copies of the jump to KUBE-PORTALS-CONTAINER in PREROUTING" in f.summary
    none_of(report, "KP122")


# `iptables-legacy -t nat -L -v | grep "PORTALS-CONTAINER  all"` (iptables 1.8.9, in a network
# namespace holding the userspace proxier's jump three times): the rows without their "Chain" line
GREPPED_PORTALS = (
    "    0     0 KUBE-PORTALS-CONTAINER  all  --  any    any     anywhere             anywhere             "
    "/* handle ClusterIPs; NOTE: this must be before the NodePort rules */\n"
) * 3


def test_userspace_jumps_grepd_out_of_their_chain_are_still_its(diagnose: Diagnose) -> None:
    """Only PREROUTING jumps to KUBE-PORTALS-CONTAINER (the userspace proxier's iptablesInit):
    the rows a grep kept are that chain's, and their copies the same bug."""
    f = one(diagnose({"nat-grep.txt": GREPPED_PORTALS}), "KP123")
    assert "3 copies of the jump to KUBE-PORTALS-CONTAINER in PREROUTING" in f.summary
    other = GREPPED_PORTALS.replace("KUBE-PORTALS-CONTAINER", "KUBE-SVC-ABCDEF", 3)  # a chain anything may jump to
    none_of(diagnose({"nat-grep.txt": other}), "KP123")


def test_one_copy_each_is_nothing(diagnose: Diagnose) -> None:
    lines = KUBE_ROUTER.splitlines()
    none_of(diagnose({"iptables-save.txt": "\n".join(lines[:5]) + "\n"}), "KP122")


def test_a_node_s_whole_dump_has_its_repeated_rules_found_in_the_core(diagnose: Diagnose) -> None:
    """A node's own iptables-save dump is read whole by the native core, which finds its repeated
    rules without a Python object per rule: the same copies as the Python parser's reading, and
    the same finding."""
    rules = (UPSTREAM / "iptables" / "TestOverallIPTablesRules.legacy.save").read_text()
    jump = "-A INPUT -j KUBE-FIREWALL\n"
    health = '-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS\n'
    dump = rules.replace(jump, jump * 3, 1).replace(health, health * 2, 1)
    core = parse_save(dump, "iptables-save.txt", "legacy", 4)
    listed = parse_save(dump, "iptables-save.txt", "legacy", 4, reuse={})  # the Python parser's reading
    assert core.scanned() and not listed.scanned()
    found = duplicated_rules([core])
    assert [(d.copies, d.rule.text) for d in found] == [(3, jump.strip()), (2, health.strip())]
    assert found == duplicated_rules([listed])
    f = one(diagnose({"iptables-save.txt": dump}), "KP122")
    assert f.summary.startswith("3 copies of one rule in INPUT")
