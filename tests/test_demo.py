"""Every built-in example diagnoses to its seed's root cause, first, with the right fix."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kpdoctor.cli import app
from kpdoctor.demo import DEMOS, demo_path
from kpdoctor.diagnose import diagnose_paths

EXPECTED = {
    "tke-backend-mismatch": ("iptables-backend-mismatch", "v1.18.4-tke.35"),
    "ipvs-graceful-deadlock": ("ipvs-sync-deadlock", "v1.13.2"),
    "config-ignores-hostname": ("config-overrides-flags", "v1.13.0"),
    "kernel-mark-regression": ("kernel-mark-target-regression", "5.15.0-126"),
    "ipvs-prerequisites-missing": ("ipvs-prerequisites-missing", None),
    "xtables-lock-contention": ("xtables-lock-held-too-long", None),
    "node-packet-loss": ("conntrack-insert-race", "kernel 5.6"),
}


def test_every_seed_scenario_has_a_demo() -> None:
    assert {d.name for d in DEMOS} == set(EXPECTED)
    assert all(d.description for d in DEMOS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_demo_ranks_its_root_cause_first(name: str) -> None:
    cause, fixed = EXPECTED[name]
    report, evidence = diagnose_paths([demo_path(name)])
    assert not [p for p in evidence.problems if "not collected" not in p.message]
    first = report.visible()[0]
    assert first.cause == cause
    if fixed:
        assert any(fixed in x for x in first.fixed_in), first.fixed_in
    assert first.evidence and all(c.artifact for c in first.evidence)


def test_config_demo_folds_the_node_ip_symptom() -> None:
    report, _ = diagnose_paths([demo_path("config-ignores-hostname")])
    first = report.visible()[0]
    assert first.explains == ["KP111", "KP203"] and "2048-game/service-2048" in first.folded[0].summary


def test_lock_demo_names_the_holder() -> None:
    report, _ = diagnose_paths([demo_path("xtables-lock-contention")])
    assert "kube-router" in report.visible()[0].summary


def test_demo_command_lists_and_diagnoses() -> None:
    res = CliRunner().invoke(app, ["demo"])
    assert res.exit_code == 1  # findings
    assert "Built-in examples" in res.output and "Root cause" in res.output
    for d in DEMOS:
        assert d.name in res.output
    assert CliRunner().invoke(app, ["demo", "nope"]).exit_code == 2


def test_seed002_demo_verifies_the_local_drop() -> None:
    """The ETP=Local NodePort drop of seed 002 is found by evaluating the rules, not only from
    the log: folded under the root cause, with the DROP's line."""
    from kpdoctor.demo import demo_path
    from kpdoctor.diagnose import diagnose_paths

    report, _ = diagnose_paths([demo_path("config-ignores-hostname")])
    top = report.findings[0]
    assert top.cause == "config-overrides-flags"
    [kp203] = [f for f in top.folded if f.code == "KP203"]
    assert kp203.subject["service"] == "2048-game/service-2048" and "NodePort" in kp203.summary
    ver = report.verification
    assert ver is not None and ver.count("uncertain") == 0 and ver.count("mismatch") == 1
