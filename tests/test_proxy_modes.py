"""The mode kube-proxy really runs in decides how the node's rules are verified.

A healthy IPVS or nftables node is not an iptables node with its Service rules missing: its
verification is *not evaluated* (with the reason) and the checks on it abstain. After a mode
switch, the old mode's state still forwarding is reported as stale rules, against the mode that
runs. Inputs: upstream kube-proxy's own rule dumps (tests/data/upstream, loaded into real
iptables and nft), real-format log lines, and ``ipvsadm -Ln`` in its printed format.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import UPSTREAM, write

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.dataplane.modes import ModeState, running_mode
from kpdoctor.diagnose import pipeline
from kpdoctor.facts import Facts
from kpdoctor.model import Cite, Report, Severity
from kpdoctor.parse.nft import foreign_tables, parse_tables

NFT = UPSTREAM / "nftables" / "TestOverallNFTablesRules"
MODES = UPSTREAM.parent / "modes"  # real node output of healthy IPVS / nftables nodes (SOURCES.md there)
IPT = UPSTREAM / "iptables" / "TestOverallIPTablesRules"
VERIFY_CHECKS = ("KP200", "KP202", "KP203", "KP204", "KP205")

# `ipvsadm -Ln` as it prints (header, then virtual servers and their real servers)
IPVSADM = """IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  172.30.0.41:80 rr
  -> 10.180.0.1:80                Masq    1      0          0
TCP  172.30.0.99:8080 rr
  -> 10.180.0.77:8080             Masq    1      0          3
  -> 10.180.0.78:8080             Masq    1      0          2
"""
IPTABLES_LOG = "I0513 15:57:17.443803       1 server_others.go:185] Using iptables Proxier.\n"
IPVS_LOG = "I0611 16:36:28.730111     216 server_others.go:183] Using ipvs Proxier.\n"


def diagnose(paths: list[Path], command: str = "diagnose") -> tuple[Facts, Report]:
    done = pipeline(load(paths), min_severity=Severity.INFO, command=command, free=False)
    report, facts = done.report, done.facts
    assert isinstance(facts, Facts)
    return facts, report


def loud(report: Report) -> list[str]:
    return [f"{f.code} {f.summary}" for f in report.findings if f.severity >= Severity.WARNING]


def state(mode: str, what: str = "x") -> ModeState:
    return ModeState(mode, what, Cite("a", 1, "t"))


# -- deciding the mode --------------------------------------------------------------------------
def test_the_log_says_which_mode_runs_whatever_is_configured() -> None:
    cite = Cite("kube-proxy.log", 3, "Using iptables Proxier")
    got = running_mode(("iptables", cite), ("ipvs", None), [state("ipvs")], True)
    assert (got.mode, got.requested, got.cite) == ("iptables", "ipvs", cite)
    assert [s.mode for s in got.leftovers] == ["ipvs"]


def test_without_a_log_the_state_only_one_mode_writes_decides() -> None:
    assert running_mode(None, None, [state("nftables")], False).mode == "nftables"
    # configured for IPVS, but only iptables Service chains on the node: it fell back
    got = running_mode(None, ("ipvs", None), [state("iptables")], True)
    assert (got.mode, got.requested) == ("iptables", "ipvs")


def test_iptables_dispatch_beside_ipvs_virtual_servers_is_iptables_running() -> None:
    """KUBE-SERVICES is rewritten whole by the mode that synced last: when it dispatches to
    iptables Service chains, the virtual servers are what the switch from IPVS left."""
    got = running_mode(None, None, [state("iptables"), state("ipvs", "2 IPVS virtual server(s)")], True)
    assert got.mode == "iptables" and [s.mode for s in got.leftovers] == ["ipvs"]


def test_two_modes_state_and_nothing_else_is_not_a_guess() -> None:
    got = running_mode(None, None, [state("iptables"), state("nftables")], True)
    assert got.mode is None and "several modes" in got.how
    assert running_mode(None, ("nftables", None), [state("iptables"), state("nftables")], True).mode == "nftables"


def test_the_default_needs_kube_proxy_or_its_rules_in_the_evidence() -> None:
    assert running_mode(None, None, [], True).mode == "iptables"
    assert running_mode(None, None, [], False).mode is None


# -- nftables listings ----------------------------------------------------------------------------
def test_nft_list_ruleset_text_and_json_give_the_same_tables() -> None:
    text = parse_tables(NFT.with_suffix(".ruleset.txt").read_text())
    js = parse_tables(NFT.with_suffix(".ruleset.json").read_text())
    assert [(t.family, t.name) for t in text] == [(t.family, t.name) for t in js] == [("ip", "kube-proxy")]
    assert text[0].chains == js[0].chains > 10
    assert sorted(text[0].base_chains) == sorted(js[0].base_chains)
    assert any("nat prerouting" in c for c in text[0].base_chains)
    assert text[0].line == 1 and text[0].text == "table ip kube-proxy {"
    assert foreign_tables(NFT.with_suffix(".ruleset.txt").read_text()) == []


def test_nft_list_ruleset_text_is_recognised_by_content() -> None:
    ev = load([NFT.with_suffix(".ruleset.txt")])
    assert [a.kind for a in ev.artifacts] == [Kind.NFT_RULESET_TEXT]


# -- healthy nodes in other modes ---------------------------------------------------------------------
@pytest.mark.parametrize("listing", [".ruleset.txt", ".ruleset.json"])
def test_a_healthy_nftables_node_verifies_clean_in_nftables_mode(listing: str) -> None:
    """Upstream's nftables expectation, as real nft lists it back: every Service evaluated in the
    mode kube-proxy runs in, nothing reported."""
    facts, report = diagnose([NFT.with_suffix(listing), NFT.with_suffix(".cluster.json")])
    ver = report.verification
    assert facts.running_mode.mode == "nftables"
    assert ver is not None and ver.evaluated and ver.clean and ver.mode == "nftables", ver.reason
    assert len(ver.results) == 26 and not ver.stale
    assert loud(report) == []


def test_verify_without_the_state_of_the_mode_that_runs_is_inconclusive() -> None:
    """IPVS mode told by kube-proxy's log, and no `ipvsadm -Ln` output: nothing to evaluate it with."""
    from click.testing import CliRunner

    from kpdoctor.cli import app

    paths = [str(p) for p in sorted((MODES / "ipvs-healthy").iterdir()) if p.name != "ipvsadm.txt"]
    res = CliRunner().invoke(app, ["verify", *paths])
    assert res.exit_code == 3, res.output
    assert "inconclusive: verification not evaluated: kube-proxy runs in ipvs mode" in res.stderr
    assert "no `ipvsadm -Ln` output" in res.stderr
    assert "Verification not evaluated" in res.stdout


def test_trace_on_an_nftables_node_follows_kube_proxys_table(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kpdoctor.cli import app

    res = CliRunner().invoke(app, ["trace", "--to", "172.30.0.41:80", str(NFT.with_suffix(".ruleset.txt"))])
    assert res.exit_code == 0, res.output
    assert "DNAT to 10.180.0.1:80" in res.stdout and "ip kube-proxy/services" in res.stdout
    # both modes' rules and nothing saying which runs: the iptables rules are traced, and it says so
    both = [str(NFT.with_suffix(".ruleset.txt")), str(IPT.with_suffix(".nft.save"))]
    res = CliRunner().invoke(app, ["trace", "--to", "172.30.0.41:80", *both])
    assert res.exit_code == 0, res.output
    assert "the proxy mode is not known" in res.stderr and "tracing the iptables rules" in res.stderr


# -- leftovers of a mode switch ----------------------------------------------------------------
def test_iptables_rules_still_live_on_an_ipvs_node_are_leftovers(tmp_path: Path) -> None:
    """kube-proxy runs in IPVS mode, but the legacy backend still holds iptables mode's Service
    rules (written before the switch, by a kube-proxy that used the other backend): they DNAT
    before IPVS sees the packet."""
    log = write(tmp_path, "kube-proxy.log", IPVS_LOG)
    _, report = diagnose([log, IPT.with_suffix(".legacy.save"), IPT.with_suffix(".cluster.json")])
    ver = report.verification
    assert ver is not None and not ver.evaluated and "ipvs mode" in ver.reason
    assert ver.stale and {s.leftover_of for s in ver.stale} == {"iptables"}
    (f,) = [f for f in report.findings if f.code == "KP201"]  # one mode switch, one finding
    assert f.summary.startswith(f"iptables mode's state, left behind by a mode switch, still forwards {len(ver.stale)}")
    assert "although kube-proxy runs in ipvs mode: " in f.summary and "172.30.0.41:80/tcp -> 10.180.0.1:80" in f.summary
    assert "kube-proxy --cleanup" in f.fix[0]
    assert not [f for f in report.findings if f.code in VERIFY_CHECKS]
    skipped = {s.code: s.reason for s in report.skipped}
    assert skipped["KP200"] == "verification not evaluated (kube-proxy runs in ipvs mode)"
    js = ver.to_json()
    assert js["stale_rules"][0]["leftover_of"] == "iptables"
    assert js["proxy_mode"] == {"mode": "ipvs", "how": "kube-proxy's log says so"}


def test_ipvs_virtual_servers_no_service_owns_on_an_iptables_node_are_leftovers(tmp_path: Path) -> None:
    log = write(tmp_path, "kube-proxy.log", IPTABLES_LOG)
    ipvs = write(tmp_path, "ipvsadm.txt", IPVSADM)
    facts, report = diagnose([log, ipvs, IPT.with_suffix(".legacy.save"), IPT.with_suffix(".cluster.json")])
    ver = report.verification
    assert ver is not None and ver.evaluated and facts.running_mode.mode == "iptables"
    # 172.30.0.41:80 is svc1's (iptables DNATs it first); 172.30.0.99:8080 is nobody's
    assert [(s.destination, s.leftover_of, s.backends) for s in ver.stale] == [
        ("172.30.0.99:8080", "ipvs", ["10.180.0.77:8080", "10.180.0.78:8080"])
    ]
    f = next(f for f in report.findings if f.code == "KP201")
    assert f.summary == (
        "ipvs mode's state, left behind by a mode switch, still forwards 1 destination(s) on this node although "
        "kube-proxy runs in iptables mode: 172.30.0.99:8080/tcp -> 10.180.0.77:8080, 10.180.0.78:8080."
    )
    assert f.evidence[0].text == "TCP  172.30.0.99:8080 rr" and f.evidence[0].line == 6
    assert "ipvsadm -C" in f.fix[0]


def test_a_healthy_iptables_node_verifies_as_before() -> None:
    facts, report = diagnose([IPT.with_suffix(".nft.save"), IPT.with_suffix(".cluster.json")], command="verify")
    ver = report.verification
    assert ver is not None and ver.evaluated and ver.mode == "iptables"
    assert facts.running_mode.how.startswith("only its state is on the node: kube-proxy's iptables Service chains")
    assert json.loads(json.dumps(ver.to_json()))["proxy_mode"]["mode"] == "iptables"


def test_a_healthy_nftables_node_with_its_real_log() -> None:
    """kube-proxy 1.36 in nftables mode, its posted start-up log (tests/data/logs/SOURCES.md)."""
    log = UPSTREAM.parent / "logs" / "healthy-nftables.log"
    facts, report = diagnose([log, NFT.with_suffix(".ruleset.txt"), NFT.with_suffix(".cluster.json")])
    assert facts.running_mode.mode == "nftables" and facts.running_mode.how == "kube-proxy's log says so"
    ver = report.verification
    assert ver is not None and ver.evaluated and ver.clean
    assert loud(report) == []


def test_ipvs_requested_iptables_running_keeps_the_kernel_regression_first(tmp_path: Path) -> None:
    """Seed 003: IPVS was configured, kube-proxy fell back to iptables (no ipset binary), and the
    kernel's MARK regression is what breaks the syncs. The fallback is reported under
    ipvs-prerequisites-missing; it does not displace the kernel regression."""
    from kpdoctor.demo import demo_path

    bundle = demo_path("kernel-mark-regression")
    fallback = UPSTREAM.parent / "logs" / "ipvs-prerequisites.log"
    config = write(
        tmp_path,
        "kube-proxy.yaml",
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n",
    )
    facts, report = diagnose([bundle, fallback, config])
    assert facts.running_mode.mode == "iptables" and facts.running_mode.requested == "ipvs"
    codes = [f.code for f in report.findings]
    assert codes[0] == "KP114", codes
    assert "KP113" in codes
    kp113 = next(f for f in report.findings if f.code == "KP113")
    assert "configured for ipvs but runs in iptables mode" in kp113.summary




@pytest.mark.parametrize("with_log", [True, False])
def test_a_healthy_ipvs_node_verifies_clean_in_ipvs_mode(with_log: bool) -> None:
    """kube-proxy's IPVS-mode iptables rules (ipset matches, no DNAT), its virtual servers and
    kube-ipvs0: once read as iptables mode with every Service's rules missing (KP200, critical);
    now verified as IPVS mode, through the ipsets and the virtual servers."""
    node = MODES / "ipvs-healthy"
    paths = [p for p in sorted(node.iterdir()) if with_log or not p.name.startswith("kube-proxy")]
    facts, report = diagnose(paths)
    assert facts.running_mode.mode == "ipvs"
    if not with_log:  # the state only IPVS mode writes tells it
        assert facts.running_mode.how.startswith("only its state is on the node: IPVS mode's ipset rules")
    ver = report.verification
    assert ver is not None and ver.evaluated and ver.mode == "ipvs" and ver.clean, ver.reason
    assert len(ver.results) == 11 and not ver.stale
    assert loud(report) == []


def test_a_healthy_nftables_node_with_kubelets_iptables_chains() -> None:
    """An nftables-mode node also has kubelet's chains in iptables (no kube-proxy chain there)."""
    facts, report = diagnose(sorted((MODES / "nftables-healthy").iterdir()))
    assert facts.running_mode.mode == "nftables"
    ver = report.verification
    assert ver is not None and ver.evaluated and ver.clean and not ver.stale
    assert loud(report) == []


# -- kube-proxy's own answer: /proxyMode -----------------------------------------------------------
# cmd/kube-proxy/app/server.go serves the mode its proxier was built for (after 1.20-1.25's
# fallback from IPVS to iptables) with fmt.Fprintf(w, "%s", proxyMode): one word, no newline, so in
# a terminal the next prompt follows on its line.
def test_kube_proxys_proxy_mode_answer_says_which_mode_runs(tmp_path: Path) -> None:
    facts, _ = diagnose([write(tmp_path, "proxyMode.txt", "ipvs")])
    got = facts.running_mode
    assert (got.mode, got.how) == ("ipvs", "kube-proxy says so (/proxyMode)")
    assert got.cite is not None and (got.cite.line, got.cite.text) == (1, "ipvs")
    # beside a log that says otherwise (another run, another node), the log's dated line stands, as before
    facts, _ = diagnose([write(tmp_path, "proxyMode.txt", "iptables"), write(tmp_path, "kp.log", IPVS_LOG)])
    assert facts.running_mode.mode == "ipvs"


def test_configured_ipvs_but_iptables_served_is_the_fallback(tmp_path: Path) -> None:
    config = write(tmp_path, "config.conf", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n")
    facts, _ = diagnose([config, write(tmp_path, "proxy-mode.txt", "iptables\n")])
    assert (facts.running_mode.mode, facts.running_mode.requested) == ("iptables", "ipvs")


@pytest.mark.parametrize(
    "session",
    [
        "[root@node01 ~]# curl -s localhost:10249/proxyMode\nipvs[root@node01 ~]# uname -r\n3.10.0-1160.el7.x86_64\n",
        "root@node01:~# curl 127.0.0.1:10249/proxyMode\nipvsroot@node01:~# uname -r\n3.10.0-1160.el7.x86_64\n",
    ],
    ids=["bracketed", "user-at-host"],
)
def test_proxy_mode_with_the_next_prompt_glued_to_it_is_read(tmp_path: Path, session: str) -> None:
    facts, report = diagnose([write(tmp_path, "session.txt", session)])
    assert facts.running_mode.mode == "ipvs" and facts.running_mode.how == "kube-proxy says so (/proxyMode)"
    kinds = [(i.kind, i.details.get("command")) for i in report.inputs]
    assert kinds[0][0] == Kind.KUBE_PROXY_MODE.value and "proxyMode" in (kinds[0][1] or "")
    assert kinds[1] == (Kind.UNAME.value, "uname -r")  # the glued prompt's command is its own part
    assert facts.kernel is not None and str(facts.kernel.value).startswith("3.10.0")


def test_a_word_that_only_starts_like_a_mode_is_not_one() -> None:
    from kpdoctor.parse.health import parse_proxy_mode

    assert parse_proxy_mode("ipvs\n") == ("ipvs", 1, "ipvs")
    assert parse_proxy_mode("nftables") == ("nftables", 1, "nftables")
    assert parse_proxy_mode("iptables[root@n1 ~]# ", 7) == ("iptables", 7, "iptables[root@n1 ~]#")
    assert parse_proxy_mode("iptables-save v1.8.4") is None and parse_proxy_mode("ipvsadm -Ln") is None
    assert parse_proxy_mode("404 page not found") is None
