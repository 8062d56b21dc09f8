"""KP122 iptables-known-bug, KP124 nft-binary-known-bug, KP125 nft-rules-incompatible-with-iptables-nft,
KP121 kubelet-chains-missing: posted lines (k/k#112477, k/k#82361, k/k#136786, rke2#8840,
ubicloud#2966, k/k#67398, cilium#30666) and when the backend mismatch keeps the error."""

from __future__ import annotations

from collections.abc import Callable

from conftest import none_of, one

from kpdoctor.model import Confidence, Report, Severity

Diagnose = Callable[..., Report]

LOST_MARK = '-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" -j DROP\n'
KEPT_MARK = (
    '-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" '
    "-m mark --mark 0x8000/0x8000 -j DROP\n"
)


def test_firewall_rule_without_its_mark_drops_everything(diagnose: Diagnose) -> None:
    f = one(diagnose({"rule-after.txt": LOST_MARK}), "KP122")
    assert f.severity == Severity.CRITICAL and "mark" in f.summary
    none_of(diagnose({"rule-before.txt": KEPT_MARK}), "KP122")


def test_duplicated_rule_with_a_broken_iptables(diagnose: Diagnose) -> None:
    dump = "*filter\n:KUBE-FIREWALL - [0:0]\n" + KEPT_MARK * 40 + "COMMIT\n"
    f = one(diagnose({"iptables-save.txt": dump, "version.txt": "iptables v1.8.2 (nf_tables)\n"}), "KP122")
    assert f.confidence == Confidence.HIGH and "40 copies" in f.summary and "iptables 1.8.3" in f.fixed_in


def test_debian_buster_alone_is_a_low_note(diagnose: Diagnose) -> None:
    lsb = (
        "# lsb_release  -a\nNo LSB modules are available.\nDistributor ID:\tDebian\n"
        "Description:\tDebian GNU/Linux 10 (buster)\nRelease:\t10\nCodename:\tbuster\n"
    )
    f = one(diagnose({"transcript.txt": lsb}), "KP122")
    assert f.confidence == Confidence.LOW and f.severity == Severity.WARNING


def test_nft_segfault_and_missing_json(diagnose: Diagnose) -> None:
    crash = (
        'E0205 20:24:21.385767       1 proxier.go:1217] "Failed to list existing sets" err="failed to run nft: '
        'signal: segmentation fault (core dumped)" ipFamily="IPv4"\n'
    )
    f = one(diagnose({"kube-proxy.log": crash}), "KP124")
    assert "v1.34.7" in f.fixed_in
    nojson = (
        'E0831 18:28:16.184670       1 proxier.go:1095] "Failed to list nftables elements" err=<\n'
        "        failed to run nft: JSON support not compiled-in\n"
        ' > ipFamily="IPv4" containerName="cluster-ips" containerType="set"\n'
    )
    assert "JSON" in one(diagnose({"kube-proxy.log": nojson}), "KP124").summary


def test_native_nft_rules_in_iptables_tables(diagnose: Diagnose) -> None:
    line = "iptables v1.8.7 (nf_tables): chain POSTROUTING in table nat is incompatible, use 'nft' tool.\n"
    f = one(diagnose({"iptables-error.txt": line}), "KP125")
    assert "chain POSTROUTING in table nat" in f.summary


def test_chain_in_one_family_only(diagnose: Diagnose) -> None:
    files = {
        "kube-proxy.log": "E0814 18:20:56.733818     227 proxier.go:1306] Failed to execute iptables-restore: exit "
        "status 2 (ip6tables-restore v1.6.2: Couldn't load target `KUBE-MARK-DROP':No such file or directory\n",
        "iptables-S.txt": "# ip6tables -t nat -S | grep KUBE-MARK-DROP\n(nothing)\n"
        "# iptables -t nat -S | grep KUBE-MARK-DROP\n-N KUBE-MARK-DROP\n"
        "-A KUBE-MARK-DROP -j MARK --set-xmark 0x8000/0x8000\n",
    }
    report = diagnose(files)
    assert report.findings[0].code == "KP121"
    assert one(report, "KP121").confidence == Confidence.HIGH


MISSING_DROP_CHAIN = (
    "E0723 07:41:15.295733     243 proxier.go:1234] Failed to execute iptables-restore: exit status 2 "
    "(iptables-restore v1.8.2 (legacy): Couldn't load target `KUBE-MARK-DROP':No such file or directory\n"
)


def test_same_error_without_anything_telling_them_apart_is_both_readings(diagnose: Diagnose) -> None:
    """k/k#80462's line alone: the backend question first, the never-created chain second, and
    the second reading takes nothing under it (it is not known to be the cause)."""
    report = diagnose({"kube-proxy.log": MISSING_DROP_CHAIN})
    assert [f.code for f in report.findings][:2] == ["KP101", "KP121"]
    alt = report.findings[1]
    assert alt.alternative_to == "iptables-backend-mismatch" and not alt.folded
    assert alt.confidence == Confidence.LOW and alt.severity == Severity.WARNING
    assert "KP100" in report.findings[0].explains
    assert report.to_json()["findings"][1]["alternative_to"] == "iptables-backend-mismatch"


def test_same_backend_on_the_host_means_the_chain_was_never_made(diagnose: Diagnose) -> None:
    report = diagnose({"kube-proxy.log": MISSING_DROP_CHAIN, "host-iptables.txt": "iptables v1.8.2 (legacy)\n"})
    none_of(report, "KP101")
    f = report.findings[0]
    assert f.code == "KP121" and f.alternative_to is None and f.confidence == Confidence.MEDIUM
    assert "same backend" in f.summary
