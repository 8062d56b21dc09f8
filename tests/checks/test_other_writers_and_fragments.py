"""Readings learnt from the first held-out rounds: felix's escaped restore stderr (microk8s#5022), a
lock path that is a directory (k/k#46132), leader-election Endpoints events in another watcher's
log (k/k#35794), and a firewall fragment with a rule commented out (openshift/origin#1607)."""

from __future__ import annotations

from collections.abc import Callable

from conftest import one

from kpdoctor.model import Confidence, Report, Severity

Diagnose = Callable[..., Report]

FELIX = (
    " [WARNING][23257] felix/table.go 1321: Failed to execute ip(6)tables-restore command error=exit status 2 "
    'errorOutput="ip6tables-restore v1.8.4 (legacy): unknown option \\"--set-mark\\"\\nError occurred at line: 7\\n'
    "Try `ip6tables-restore -h' or 'ip6tables-restore --help' for more information.\\n\" "
    'input="*mangle\\n:cali-f<...SNIP...> --jump cali-PREROUTING\\nCOMMIT\\n" ipVersion=0x6 output=""\n'
)
UNAME = "Linux node03 6.8.0-57-generic #59-Ubuntu SMP PREEMPT_DYNAMIC Sat Mar 15 17:40:59 UTC 2025 x86_64 x86_64 x86_64 GNU/Linux\n"
LOCK_DIR = (
    "E0522 16:56:34.117350       5 proxier.go:1538] Failed to execute iptables-restore: failed to open iptables "
    "lock /run/xtables.lock: open /run/xtables.lock: is a directory\n"
)
TRAEFIK = (
    'time="2016-10-28T15:21:56Z" level=debug msg="Skipping event from kubernetes map[object:map[metadata:'
    "map[resourceVersion:8260905 annotations:map[control-plane.alpha.kubernetes.io/leader:"
    '{\\"holderIdentity\\":\\"ip-172-20-93-113\\",\\"leaseDurationSeconds\\":15}] name:kube-controller-manager '
    "namespace:kube-system selfLink:/api/v1/namespaces/kube-system/endpoints/kube-controller-manager] subsets:[] "
    'kind:Endpoints apiVersion:v1] type:MODIFIED]"\n'
)
SYSCONFIG = (
    "-A INPUT -j REJECT --reject-with icmp-host-prohibited\n#-A FORWARD -j REJECT --reject-with icmp-host-prohibited\n"
)


def test_felix_escaped_quotes_still_name_the_mark_regression(diagnose: Diagnose) -> None:
    f = one(diagnose({"calico-node.log": FELIX, "uname.txt": UNAME}), "KP114")
    assert f.severity == Severity.CRITICAL and "6.8.0-57-generic" in f.summary


def test_a_lock_path_that_is_a_directory_is_an_unshared_lock(diagnose: Diagnose) -> None:
    f = one(diagnose({"kube-proxy.log": LOCK_DIR}), "KP102")
    assert f.confidence == Confidence.HIGH and "is a directory" in f.summary


def test_a_watchers_endpoints_event_with_the_leader_annotation(diagnose: Diagnose) -> None:
    f = one(diagnose({"traefik.log": TRAEFIK}), "KP128")
    assert "kube-system/kube-controller-manager" in f.summary and f.confidence == Confidence.LOW


def test_a_rule_commented_out_does_not_hide_the_fragment(diagnose: Diagnose) -> None:
    f = one(diagnose({"iptables": SYSCONFIG}), "KP210")
    assert f.evidence[0].line == 1
