"""The kernel's build configuration as evidence (parse/kernel_config.py; KP116 and KP113).

A kernel built without an option has no module of it: ``modprobe`` cannot load it. What a user
pastes to show that: the configuration itself (``zcat /proc/config.gz``, a grep of it) or Docker's
and k3s's ``check-config`` verdicts, often with their terminal colours. Every file here is real
output of those programs on this project's build machine (tests/data/kernel_config/SOURCES.md).
"""

from __future__ import annotations

from pathlib import Path

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Confidence, Severity
from kpdoctor.parse.kernel_config import parse_kernel_config

DATA = Path(__file__).parent / "data" / "kernel_config"


def _report(tmp_path: Path, *files: Path | str):  # type: ignore[no-untyped-def]
    paths = []
    for i, f in enumerate(files):
        if isinstance(f, str):
            p = tmp_path / f"paste-{i}.txt"
            p.write_text(f)
            paths.append(p)
        else:
            paths.append(f)
    return diagnose_paths(paths)[0]


def _codes(report) -> list[str]:  # type: ignore[no-untyped-def]
    return [f.code for f in report.findings]


def test_a_whole_config_file_says_every_option_and_that_it_is_whole() -> None:
    opts = parse_kernel_config((DATA / "config-6.18.44.txt").read_text())
    by = {o.name: o for o in opts}
    assert len(opts) > 3000 and all(o.whole and o.source == "config" for o in opts)
    assert by["CONFIG_NETFILTER_XT_MATCH_COMMENT"].value == "y"
    assert by["CONFIG_IP_VS"].value == "n" and by["CONFIG_IP_VS"].text == "# CONFIG_IP_VS is not set"
    assert by["CONFIG_CC_VERSION_TEXT"].built is None  # a string option is neither


def test_check_config_verdicts_are_read_whatever_their_indentation() -> None:
    text = (DATA / "check-config-docker-20.10.txt").read_text()
    plain = "\n".join(
        ln.replace("\x1b[1m", "")
        .replace("\x1b[m", "")
        .replace("\x1b[37m", "")
        .replace("\x1b[32m", "")
        .replace("\x1b[1;31m", "")
        for ln in text.splitlines()
    )
    by = {o.name: o for o in parse_kernel_config(plain)}
    assert by["CONFIG_VETH"].value == "y"
    assert by["CONFIG_IP_VS"].value == "n" and by["CONFIG_IP_VS"].source == "check-config"
    assert by["CONFIG_VXLAN"].value in ("y", "m")  # under "Network Drivers:", indented by the script's sed
    assert not any(o.whole for o in by.values())  # it checks only its own list


def test_k3s_check_configs_fail_suffix() -> None:
    # k3s's contrib/util/check-config.sh: wrap_bad "CONFIG_$1" 'missing' prints "$2 (fail)"
    (o,) = parse_kernel_config("- CONFIG_NETFILTER_XT_MATCH_COMMENT: missing (fail)\n")
    assert (o.name, o.value) == ("CONFIG_NETFILTER_XT_MATCH_COMMENT", "n")
    (o,) = parse_kernel_config("/boot/config-5.15.0-91-generic:CONFIG_NETFILTER_XT_MATCH_STATISTIC=m\n")
    assert (o.name, o.value) == ("CONFIG_NETFILTER_XT_MATCH_STATISTIC", "m")


def test_colour_coded_check_config_is_read_as_the_kernels_configuration(tmp_path: Path) -> None:
    report = _report(tmp_path, DATA / "check-config-docker-20.10.txt")
    (inp,) = report.inputs
    assert inp.kind == Kind.KERNEL_CONFIG.value
    assert "terminal colour codes" in inp.details.get("paste", "")
    assert "KP116" not in _codes(report)  # every part kube-proxy's rules use is built here


def test_a_kernel_built_without_xt_conntrack_is_the_root_cause(tmp_path: Path) -> None:
    report = _report(tmp_path, DATA / "check-config-docker-20.10-no-xt-conntrack.txt")
    f = report.findings[0]
    assert f.code == "KP116" and f.severity == Severity.CRITICAL
    assert f.confidence == Confidence.MEDIUM  # the mode is not shown: nftables mode would not use it
    assert "xt_conntrack" in f.summary
    assert [(c.line, c.text) for c in f.evidence] == [(24, "- CONFIG_NETFILTER_XT_MATCH_CONNTRACK: missing")]


def test_a_grep_of_the_configuration_proves_comment_and_statistic_absent(tmp_path: Path) -> None:
    flags = "root@node:~# ps -ef | grep kube-proxy\nroot 812 1 0 09:12 ? 00:00:03 /usr/local/bin/kube-proxy --proxy-mode=iptables\n"
    report = _report(tmp_path, DATA / "grep-xt-no-comment-statistic.txt", flags)
    f = report.findings[0]
    assert f.code == "KP116" and f.confidence == Confidence.HIGH
    assert "xt_comment" in f.summary and "xt_statistic" in f.summary
    assert {c.text for c in f.evidence} >= {
        "# CONFIG_NETFILTER_XT_MATCH_COMMENT is not set",
        "# CONFIG_NETFILTER_XT_MATCH_STATISTIC is not set",
    }


def test_nftables_mode_needs_no_xtables_match(tmp_path: Path) -> None:
    flags = "root@node:~# ps -ef | grep kube-proxy\nroot 812 1 0 09:12 ? 00:00:03 /usr/local/bin/kube-proxy --proxy-mode=nftables\n"
    report = _report(tmp_path, DATA / "grep-xt-no-comment-statistic.txt", flags)
    assert "KP116" not in _codes(report)


def test_an_option_a_grep_does_not_show_is_not_missing(tmp_path: Path) -> None:
    # the grep shows MARK and ADDRTYPE built; comment, statistic and conntrack are not shown at all
    report = _report(tmp_path, "CONFIG_NETFILTER_XT_MARK=y\nCONFIG_NETFILTER_XT_MATCH_ADDRTYPE=y\n")
    assert "KP116" not in _codes(report)


def test_ipvs_mode_on_a_kernel_built_without_ipvs(tmp_path: Path) -> None:
    flags = "root@node:~# ps -ef | grep kube-proxy\nroot 812 1 0 09:12 ? 00:00:03 /usr/local/bin/kube-proxy --proxy-mode=ipvs\n"
    for evidence in ("config-6.18.44.txt", "check-config-docker-20.10.txt"):
        report = _report(tmp_path, DATA / evidence, flags)
        f = report.findings[0]
        assert (f.code, f.severity, f.confidence) == ("KP113", Severity.CRITICAL, Confidence.HIGH), evidence
        assert "ip_vs" in f.summary
        assert any("CONFIG_IP_VS" in c.text for c in f.evidence)


def test_the_same_kernel_in_iptables_mode_is_fine(tmp_path: Path) -> None:
    flags = "root@node:~# ps -ef | grep kube-proxy\nroot 812 1 0 09:12 ? 00:00:03 /usr/local/bin/kube-proxy --proxy-mode=iptables\n"
    report = _report(tmp_path, DATA / "config-6.18.44.txt", flags)
    assert not [f for f in report.findings if f.severity in (Severity.CRITICAL, Severity.WARNING)]


def test_a_configuration_alone_rules_no_family_out() -> None:
    """KP116 and KP113 run on a kernel's configuration, but judge from it only the parts the
    kernel cannot load, not the failures kube-proxy's log shows: run on it alone, they do not
    count toward ruling "rule sync failures" out (a live bundle without kube-proxy's log, which
    now holds the configuration, must not read as if the log had been seen)."""
    from kpdoctor.coverage import _judged

    for code in ("KP116", "KP113"):
        assert not _judged(code, frozenset({Kind.KERNEL_CONFIG}))
        assert _judged(code, frozenset({Kind.KERNEL_CONFIG, Kind.KUBE_PROXY_LOG}))
