"""KP130: what kube-proxy, its node tools and the kernel print is read from the messages catalogue,
so a failure no check was written for is still named (proven, suspected or unexplained), a routine
line never alarms, and a dedicated check keeps the lines it reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checks.helpers import run

from kpdoctor.checks.logged import UNATTRIBUTED, reading
from kpdoctor.messages import catalogue
from kpdoctor.messages.match import Matcher
from kpdoctor.model import Severity


def _causes_of(line: str) -> set[str]:
    """Every cause the catalogue's messages read in ``line`` name or point to."""
    out: set[str] = set()
    for x in Matcher(catalogue()).match(line):
        at = x
        while at is not None:
            out.update(c for c in [at.message.cause, *at.message.suggests] if c)
            at = at.payload
    return out


POSTED = [m for m in catalogue() if m.example and m.kind != "benign"]
ROUTINE = [m for m in catalogue() if m.example and m.kind == "benign"]


def test_real_posted_lines_are_named_with_a_cause_their_messages_give(tmp_path: Path) -> None:
    """Every real line the catalogue quotes (posted in an upstream issue, or printed here by the
    real binary) is named first with a cause its messages give (a failure they give no cause for,
    as unattributed). The figure may only rise."""
    named, missed = 0, []
    for m in POSTED:
        f = tmp_path / f"{m.component}-{m.id}.log"
        f.write_text(m.example + "\n")
        first = next(iter(run([f]).findings), None)
        wanted = _causes_of(m.example)
        # a failure whose messages point to no cause (CoreDNS's loop, a SERVFAIL) is named as such
        if first is not None and (first.cause in wanted or (not wanted and first.cause == UNATTRIBUTED)):
            named += 1
        else:
            missed.append(f"{m.key}: {first.cause if first else None} not in {sorted(wanted)}")
    assert named / len(POSTED) >= 0.90, "\n".join(missed)


def test_routine_lines_never_alarm(tmp_path: Path) -> None:
    for m in ROUTINE:
        f = tmp_path / f"{m.component}-{m.id}.log"
        f.write_text(m.example + "\n")
        loud = [x.cause for x in run([f]).findings if x.severity >= Severity.WARNING]
        assert loud == [], (m.key, m.example)


# kube-proxy 1.29+'s nftables proxier: knftables' "nft" error as the payload of the sync failure.
NFT_SYNC = (
    'E0312 10:21:33.123456       1 proxier.go:1809] "nftables sync failed" '
    'err="/dev/stdin:2:43-53: Error: conflicting intervals specified"\n'
)
UNKNOWN_PAYLOAD = (
    'E0312 10:21:33.123456       1 proxier.go:1809] "nftables sync failed" err="a reason nobody catalogued"\n'
)


def test_a_sync_failure_is_named_by_its_payload(tmp_path: Path) -> None:
    f = tmp_path / "kube-proxy.log"
    f.write_text(NFT_SYNC)
    top = run([f]).findings[0]
    assert top.code == "KP130"
    assert top.cause in _causes_of(NFT_SYNC) and top.cause != UNATTRIBUTED
    assert "conflicting intervals" in top.summary  # the payload's message, quoted
    assert any("nftables sync failed" in c.text for c in top.evidence)


def test_a_wrapper_whose_payload_nobody_knows_still_gives_its_class_finding(tmp_path: Path) -> None:
    f = tmp_path / "kube-proxy.log"
    f.write_text(UNKNOWN_PAYLOAD)
    report = run([f])
    assert report.findings, "an error line must never leave the report empty"
    top = report.findings[0]
    wrapper = catalogue().get("kube-proxy/nftables-sync-failed")
    assert wrapper is not None
    assert top.cause in {c for c in [wrapper.cause, *wrapper.suggests] if c} | {UNATTRIBUTED}
    assert top.suspected and top.confidence.label == "low"


def test_a_routine_payload_inside_a_tool_banner_is_routine() -> None:
    line = "conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted."
    found = Matcher(catalogue()).match(line)
    assert found and reading(found[0]) is None


def test_a_dedicated_check_keeps_the_lines_it_reads(tmp_path: Path) -> None:
    """The conntrack lookup failure is KP118's: the catalogue's reading of the same line is folded
    under it, never a second root cause."""
    f = tmp_path / "kube-proxy.log"
    f.write_text(
        'E0411 11:44:45.784424       1 proxier.go:760] "Failed to delete nodeport-related endpoint connections" '
        'err="error deleting conntrack entries for UDP port: 32504, error: error looking for path of conntrack: '
        'executable file not found in $PATH" servicePortName="wazuh/wazuh-syslog:syslog-udp"\n'
    )
    findings = run([f]).findings
    assert [x.code for x in findings] == ["KP118"]


def test_a_structured_message_is_found_in_a_docker_json_log(tmp_path: Path) -> None:
    """The needle leaves the quotes out: docker's JSON log escapes them."""
    f = tmp_path / "kube-proxy-json.log"
    lines = [NFT_SYNC, 'I0312 10:21:34.123456       1 proxier.go:1200] "SyncProxyRules complete" elapsed="12ms"\n']
    f.write_text(
        "".join(json.dumps({"log": x, "stream": "stderr", "time": "2024-03-12T10:21:33Z"}) + "\n" for x in lines)
    )
    assert any(x.code == "KP130" for x in run([f]).findings)


def test_recovered_failures_are_information(tmp_path: Path) -> None:
    f = tmp_path / "kube-proxy.log"
    # the failed sync's own "complete", then a sync that succeeded
    f.write_text(
        NFT_SYNC
        + 'I0312 10:21:34.123456       1 proxier.go:1200] "SyncProxyRules complete" elapsed="12ms"\n'
        + 'I0312 10:22:04.123456       1 proxier.go:1200] "SyncProxyRules complete" elapsed="11ms"\n'
    )
    logged = [x for x in run([f]).findings if x.code == "KP130"]
    assert logged and all(x.severity == Severity.INFO for x in logged)


@pytest.mark.parametrize("line", ["apiVersion: discovery.k8s.io/v1", "Error: something", "Version: v1.2.3"])
def test_a_short_plain_message_does_not_make_a_text_kube_proxys(tmp_path: Path, line: str) -> None:
    f = tmp_path / "notes.txt"
    f.write_text(line + "\n")
    report = run([f])
    assert not report.findings and not any(i.kind == "kube-proxy log" for i in report.inputs)


# KP131 (kube-proxy-config-invalid): kube-proxy's own start-up messages about its configuration.
LENIENT = (  # posted: kube-proxy 1.26+ reading a config with a field it does not know
    'I0304 05:51:01.545533       1 server.go:432] "Using lenient decoding as strict decoding failed" '
    'err="strict decoding error: unknown field \\"udpIdleTimeout\\""\n'
)
VALIDATE = (  # glog era: cmd/kube-proxy/app/server.go's Fatalf on a validation error
    'F0312 10:21:33.123456       1 server.go:495] failed validate: KubeProxyConfiguration.Mode: Invalid value: '
    '"ipvsx": must be iptables,ipvs or blank (blank means the best-available proxy [currently iptables])\n'
)


def test_kube_proxy_exiting_on_its_configuration_is_critical(tmp_path: Path) -> None:
    f = tmp_path / "kube-proxy.log"
    f.write_text(VALIDATE)
    top = run([f]).findings[0]
    assert (top.code, top.cause, top.severity) == ("KP131", "kube-proxy-config-invalid", Severity.CRITICAL)
    assert "exits" in top.summary and "failed validate" in top.summary


def test_a_setting_kube_proxy_ignored_is_information(tmp_path: Path) -> None:
    f = tmp_path / "kube-proxy.log"
    f.write_text(LENIENT)
    found = [x for x in run([f]).findings if x.cause == "kube-proxy-config-invalid"]
    assert found and found[0].severity == Severity.INFO and found[0].code == "KP131"


@pytest.mark.parametrize(
    "line",
    [
        # klog.Fatal(opts.Run()) (1.10-1.22) with client-go's ErrEmptyConfig of 1.10-1.16 and of 1.18+
        "F0119 08:02:11.201375   10943 server.go:475] invalid configuration: no configuration has been provided\n",
        "F0119 08:02:11.201375       1 server.go:495] invalid configuration: no configuration has been provided, "
        "try setting KUBERNETES_MASTER environment variable\n",
        # structured era: "Error running ProxyServer" with clientcmd's aggregate of two reasons
        'E0823 17:40:52.933169       1 server.go:558] "Error running ProxyServer" err="invalid configuration: '
        '[context was not found for specified context: kube-proxy, cluster has no server defined]"\n',
        'F0823 17:40:52.933169       1 server.go:495] error loading config file "/var/lib/kube-proxy/kubeconfig.conf": '
        "yaml: line 5: mapping values are not allowed in this context\n",
    ],
)
def test_kube_proxy_exiting_on_an_unusable_kubeconfig_is_named(tmp_path: Path, line: str) -> None:
    """client-go's kubeconfig errors (tools/clientcmd), as kube-proxy prints them when it exits."""
    f = tmp_path / "kube-proxy.log"
    f.write_text(line)
    top = run([f]).findings[0]
    assert (top.code, top.cause) == ("KP131", "kube-proxy-config-invalid")
    assert "invalid configuration: %v" not in top.summary  # the reason is quoted, not the wrapper


# KP132 (kube-proxy-not-privileged) and KP313 (neighbour-table-overflow): causes read from the
# tools' and the kernel's own messages.
REFUSED = (  # posted: ysdragon/Pterodactyl-VPS-Egg#37 (iptables 1.8.10 without CAP_NET_ADMIN)
    "iptables v1.8.10 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)"
)


def test_kube_proxy_refused_by_iptables_is_not_privileged(tmp_path: Path) -> None:
    f = tmp_path / "kube-proxy.log"
    f.write_text(
        'E0115 10:00:00.000000       1 proxier.go:1557] "Failed to execute iptables-restore" err=<\n'
        f"\texit status 4: {REFUSED}\n >\n"
    )
    top = run([f]).findings[0]
    assert (top.code, top.cause, top.severity) == ("KP132", "kube-proxy-not-privileged", Severity.CRITICAL)


def test_a_typed_command_without_root_is_only_a_missing_output(tmp_path: Path) -> None:
    f = tmp_path / "session.txt"
    f.write_text(REFUSED + "\n")
    found = [x for x in run([f]).findings if x.cause == "kube-proxy-not-privileged"]
    assert found and found[0].severity == Severity.INFO and "sudo" in " ".join(found[0].fix)


def test_the_neighbour_table_overflow_is_named(tmp_path: Path) -> None:
    f = tmp_path / "dmesg.txt"
    f.write_text(  # posted: rtr7/router7#31
        "[843041.359054] neighbour: arp_cache: neighbor table overflow!\n"
        "[843041.360011] neighbour: arp_cache: neighbor table overflow!\n"
    )
    top = run([f]).findings[0]
    assert (top.code, top.cause) == ("KP313", "neighbour-table-overflow") and top.occurrences == 2


def test_conntrack_invalid_packets_are_named_and_the_liberal_setting_weighs(tmp_path: Path) -> None:
    dmesg = tmp_path / "dmesg.txt"
    dmesg.write_text(  # the kernel's wording with nf_conntrack_log_invalid set (net/netfilter/nf_conntrack_proto_tcp.c)
        "[ 1234.567890] nf_ct_proto_6: SEQ is over the upper bound (over the window of the receiver) IN= OUT=eth0 "
        "SRC=10.244.1.5 DST=10.96.0.10 LEN=1500 TOS=0x00 PREC=0x00 TTL=64 ID=0 DF PROTO=TCP SPT=443 DPT=51234\n"
    )
    top = run([dmesg]).findings[0]
    assert (top.code, top.cause, top.severity) == ("KP314", "conntrack-invalid-packets", Severity.WARNING)
    sysctl = tmp_path / "sysctl.txt"
    sysctl.write_text("net.netfilter.nf_conntrack_tcp_be_liberal = 1\nnet.ipv4.ip_forward = 1\n")
    liberal = run([dmesg, sysctl]).findings[0]
    assert liberal.code == "KP314" and liberal.severity == Severity.INFO


def test_a_failed_probe_is_kubelets_own_not_a_services(tmp_path: Path) -> None:
    """kubelet probes a Pod at its own address (pkg/kubelet/prober): a failed probe, in the Pod's
    events or kubelet's log (the printf era and the structured one), is named as the probe's
    failure, never as a Service's rules being wrong (its dial error alone would suggest that)."""
    events = (
        "Events:\n"
        "  Type     Reason     Age                From     Message\n"
        "  ----     ------     ----               ----     -------\n"
        '  Warning  Unhealthy  3m (x12 over 5m)   kubelet  Readiness probe failed: Get "http://10.244.2.7:8080/health": '
        "dial tcp 10.244.2.7:8080: connect: connection refused\n"
    )
    logs = (
        'I0302 09:12:01.123456    1234 prober.go:116] Liveness probe for "web-0_default(0a1b):web" failed (failure): '
        "Get http://10.244.2.7:8080/: net/http: request canceled (Client.Timeout exceeded while awaiting headers)\n"
        'I0302 09:12:11.123456    1234 prober.go:107] "Probe failed" probeType="Readiness" pod="default/web-0" '
        'podUID=0a1b containerName="web" probeResult=failure output="Get \\"http://10.244.2.7:8080/\\": context '
        'deadline exceeded"\n'
    )
    for name, text in (("events.txt", events), ("kubelet.log", logs)):
        f = tmp_path / name
        f.write_text(text)
        found = run([f]).findings
        assert [x.cause for x in found] == [UNATTRIBUTED], (name, [(x.code, x.cause) for x in found])
        assert found[0].severity == Severity.INFO and "probe" in found[0].summary


# kubelet 1.25+'s start-up lines when iptables-nft cannot make a chain (klog 2: the error quoted
# in err="...", its quotes escaped), with iptables-nft 1.8.7's own words inside
KUBELET_NFT_REFUSED = (
    'I1130 10:00:01.123456     812 kubelet_network_linux.go:58] "Failed to initialize iptables rules; some '
    'functionality may be missing." protocol=IPv4\n'
    'E1130 10:00:01.123456     812 kubelet_network_linux.go:69] "Failed to ensure that iptables hint chain exists" '
    'err="error creating chain \\"KUBE-IPTABLES-HINT\\": exit status 4: iptables v1.8.7 (nf_tables): CHAIN_ADD '
    'failed (Operation not supported): chain KUBE-IPTABLES-HINT"\n'
)


def test_a_wrapper_s_escaped_payload_is_still_read_and_two_suspected_alternatives_both_stay(tmp_path: Path) -> None:
    """kubelet's structured line wraps iptables' message in an escaped err="..." that its own
    form does not read: the message the line holds after kubelet's is its payload. The two
    suspected causes the lines point to name each other as alternatives: both are reported, not
    folded under each other and lost."""
    log = tmp_path / "kubelet.log"
    log.write_text(KUBELET_NFT_REFUSED)
    found = {(f.code, f.cause) for f in run([log]).findings}
    assert {("KP130", "kernel-netfilter-feature-missing"), ("KP130", "iptables-binary-missing")} <= found
