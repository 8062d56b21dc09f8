"""Node evidence in the shapes users post: a sysctl written by hand in a transcript, a resolver's
"reply from unexpected source", a widened ephemeral port range alone, `ufw status` output.

The lines are real: the corpus cases' evidence (tests/realworld/cases/k8s-33798, rke-368,
bottlerocket-1386, k3s-1280) and `ufw status` printed by ufw 0.36 (Debian 12) in a throw-away
network namespace on this machine (`unshare -n`, `ufw --force enable`, the rules shown), kept
in tests/data/node/ufw/."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import write

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.sniff import sniff
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.knowledge import catalogue
from kpdoctor.model import Confidence, Finding, Report, Severity
from kpdoctor.parse.firewall import parse_ufw_status
from kpdoctor.parse.shellwords import shell_split
from kpdoctor.parse.sysctl import sysctl_write


def run(paths: list[Path]) -> Report:
    return diagnose_paths(paths, min_severity=Severity.INFO)[0]


def found(report: Report, code: str) -> list[Finding]:
    return [f for f in report.findings if f.code == code] + [
        g for f in report.findings for g in f.folded if g.code == code
    ]


# -- bridge-netfilter-disabled --------------------------------------------------------------------

K8S_33798 = "net.bridge.bridge-nf-call-iptables = 0\nnet.bridge.bridge-nf-call-ip6tables = 0\n"
RKE_368 = """\
[root@aws-ec1-dev-paas1 services]# echo 0 >  /proc/sys/net/bridge/bridge-nf-call-iptables
[root@aws-ec1-dev-paas1 services]# kubectl exec -it test-6b7687dfdd-clrzf -- /bin/bash
[root@test-6b7687dfdd-clrzf /]# nslookup www.google.com
;; reply from unexpected source: 10.233.64.4#53, expected 10.233.0.3#53
^C
[root@test-6b7687dfdd-clrzf /]# exit
command terminated with exit code 1
"""


def _links(*links: dict[str, object]) -> str:
    return json.dumps(
        [{"ifindex": i + 1, "flags": ["UP"], "mtu": 1500, "operstate": "UP", **ln} for i, ln in enumerate(links)]
    )


def test_bridge_nf_call_iptables_zero_alone_is_a_warning_that_says_the_bridge_is_unknown(tmp_path: Path) -> None:
    (f,) = found(run([write(tmp_path, "sysctl.txt", K8S_33798)]), "KP309")
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.MEDIUM)
    assert "ip -d link" in f.summary and "not in the evidence" in f.summary
    assert [(c.line, c.text) for c in f.evidence] == [(1, "net.bridge.bridge-nf-call-iptables = 0")]


def test_bridge_nf_call_iptables_zero_on_a_routed_cni_is_not_reported(tmp_path: Path) -> None:
    # Calico: Pod veths with no bridge master: bridged traffic does not exist
    links = _links(
        {"ifname": "eth0"},
        {"ifname": "cali1234abcd", "linkinfo": {"info_kind": "veth"}, "link_netnsid": 0},
    )
    rep = run([write(tmp_path, "sysctl.txt", K8S_33798), write(tmp_path, "links.json", links)])
    assert found(rep, "KP309") == []


def test_a_value_written_to_proc_sys_and_the_dns_symptom_are_critical(tmp_path: Path) -> None:
    (f,) = found(run([write(tmp_path, "transcript.txt", RKE_368)]), "KP309")
    assert (f.severity, f.confidence) == (Severity.CRITICAL, Confidence.HIGH)
    assert "10.233.64.4" in f.summary and "10.233.0.3" in f.summary
    assert [c.line for c in f.evidence] == [1, 4]
    assert f.evidence[0].text.endswith("echo 0 >  /proc/sys/net/bridge/bridge-nf-call-iptables")


def test_the_dns_symptom_alone_asks_for_the_sysctl(tmp_path: Path) -> None:
    text = "$ nslookup www.google.com\n;; reply from unexpected source: 10.233.64.4#53, expected 10.233.0.3#53\n"
    (f,) = found(run([write(tmp_path, "t.txt", text)]), "KP309")
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.MEDIUM)
    assert "sysctl net.bridge.bridge-nf-call-iptables" in f.summary


def test_setting_it_back_to_one_later_in_the_transcript_wins(tmp_path: Path) -> None:
    text = (
        "[root@node services]# echo 0 >  /proc/sys/net/bridge/bridge-nf-call-iptables\n"
        "[root@node services]# echo 1 >  /proc/sys/net/bridge/bridge-nf-call-iptables\n"
    )
    assert found(run([write(tmp_path, "t.txt", text)]), "KP309") == []


def test_commands_that_write_a_sysctl() -> None:
    def w(cmd: str) -> tuple[str, str | None] | None:
        return sysctl_write(shell_split(cmd))

    assert w("echo 0 >  /proc/sys/net/bridge/bridge-nf-call-iptables") == ("net.bridge.bridge-nf-call-iptables", "0")
    assert w('echo "1" >/proc/sys/net/ipv4/ip_forward') == ("net.ipv4.ip_forward", "1")
    assert w("echo 1 | sudo tee /proc/sys/net/ipv4/ip_forward") == ("net.ipv4.ip_forward", "1")
    assert w("sysctl -w net.ipv4.conf.all.route_localnet=1") == ("net.ipv4.conf.all.route_localnet", "1")
    assert w("echo hello > /tmp/x") is None
    assert w("cat /proc/sys/net/ipv4/ip_forward") is None


# -- listen-port-in-ephemeral-range ---------------------------------------------------------------


def test_a_range_from_1025_overlaps_the_nodeport_range_and_kubernetes_ports(tmp_path: Path) -> None:
    (f,) = found(run([write(tmp_path, "sysctl.txt", "net.ipv4.ip_local_port_range = 1025 65000\n")]), "KP302")
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.MEDIUM)
    assert "2768 of the 2768 NodePort ports" in f.summary
    assert "6443 (kube-apiserver)" in f.summary
    assert "ip_local_reserved_ports=30000-32767" in f.fix[0] and '"32768 60999"' in f.fix[0]
    assert f.evidence[0].text == "net.ipv4.ip_local_port_range = 1025 65000"


def test_a_small_overlap_is_info_and_the_default_range_is_quiet(tmp_path: Path) -> None:
    (f,) = found(run([write(tmp_path, "a.txt", "net.ipv4.ip_local_port_range = 32700 60999\n")]), "KP302")
    assert f.severity == Severity.INFO and "68 of the 2768 NodePort ports" in f.summary
    assert found(run([write(tmp_path, "b.txt", "net.ipv4.ip_local_port_range = 32768 60999\n")]), "KP302") == []
    reserved = "net.ipv4.ip_local_port_range = 32000 60999\nnet.ipv4.ip_local_reserved_ports = 30000-32767\n"
    assert found(run([write(tmp_path, "c.txt", reserved)]), "KP302") == []


# -- ufw ------------------------------------------------------------------------------------------

UFW = Path(__file__).parent / "data" / "node" / "ufw"
K3S_1280 = (Path(__file__).parent / "realworld" / "cases" / "k3s-1280" / "ufw-status.txt").read_text()
UFW_VERBOSE_DENY = (UFW / "status-verbose-deny.txt").read_text()
UFW_NUMBERED_PODS = (UFW / "status-numbered-pods.txt").read_text()
UFW_VERBOSE_ALLOW = (UFW / "status-verbose-allow.txt").read_text()


def test_ufw_status_is_read_as_a_host_firewall() -> None:
    assert sniff(K3S_1280, catalogue()).kind == Kind.HOST_FIREWALL
    st = parse_ufw_status(UFW_NUMBERED_PODS)
    assert st is not None and st.active and len(st.rules) == 7
    assert st.rules[2].source == "10.42.0.0/16" and st.rules[2].any_port
    assert st.rules[3].interface == "cni0"
    v = parse_ufw_status(UFW_VERBOSE_DENY)
    assert v is not None and v.defaults == {"incoming": "deny", "outgoing": "allow", "routed": "disabled"}
    assert v.rules[1].ports == [(30000, 32767, "tcp")]
    # a rule whose "port" runs to thousands of digits (a damaged paste) is no port, and no error
    huge = UFW_NUMBERED_PODS.replace("22/tcp", "9" * 5000 + "/tcp", 1)
    h = parse_ufw_status(huge)
    assert h is not None and h.rules[0].ports == [] and st.rules[0].ports == [(22, 22, "tcp")]


def test_active_ufw_without_its_policy_is_a_low_confidence_warning(tmp_path: Path) -> None:
    (f,) = found(run([write(tmp_path, "ufw-status.txt", K3S_1280)]), "KP311")
    assert f.cause == "iptables-drop-rule"
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.LOW)
    assert "allow only 443, 22/tcp" in f.summary and "6443/tcp" in f.summary
    assert "ufw status verbose" in f.summary
    assert [c.line for c in f.evidence] == [1, 4, 5]


def test_ufw_denying_incoming_with_no_pod_rule_is_critical(tmp_path: Path) -> None:
    (f,) = found(run([write(tmp_path, "ufw.txt", UFW_VERBOSE_DENY)]), "KP311")
    assert (f.severity, f.confidence) == (Severity.CRITICAL, Confidence.MEDIUM)
    assert "the kubelet (10250/tcp)" in f.summary and "6443" not in f.summary.split("No rule allows")[1]
    assert any(c.text.startswith("Default: deny (incoming)") for c in f.evidence)


def test_ufw_letting_pods_in_is_a_warning_about_the_ports_it_lacks(tmp_path: Path) -> None:
    (f,) = found(run([write(tmp_path, "ufw.txt", UFW_NUMBERED_PODS)]), "KP311")
    assert f.severity == Severity.WARNING and "Pod traffic is allowed" in f.summary


def test_inactive_or_allowing_ufw_is_quiet(tmp_path: Path) -> None:
    assert found(run([write(tmp_path, "a.txt", "Status: inactive\n")]), "KP311") == []
    assert found(run([write(tmp_path, "b.txt", UFW_VERBOSE_ALLOW)]), "KP311") == []


def test_ufw_active_is_seen_in_iptables_save(tmp_path: Path) -> None:
    # iptables-save of the same netns with ufw enabled and `ufw allow 22/tcp`
    (f,) = found(run([UFW / "iptables-save-ufw-active.txt"]), "KP311")
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.LOW)
    assert "accepts only 22/tcp" in f.summary and "NodePorts (30000-32767/tcp)" in f.summary
    assert [c.line for c in f.evidence] == [3, 100]
