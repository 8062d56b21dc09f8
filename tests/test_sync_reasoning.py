"""Sync checks that decide from one side of the evidence (issue 15, parts 1 and 3).

Every input below is output someone posted in a public thread (the corpus case or upstream issue
is named next to it); the combinations with a version are ours, each to exercise one rule.
"""

from __future__ import annotations

from collections.abc import Callable

from conftest import none_of, one

from kpdoctor.bundle.paste import unwrap_paste
from kpdoctor.model import Confidence, Report, Severity

Diag = Callable[..., Report]






# -- KP113: the kernel's ENOENT for a virtual server without its scheduler module ------------------

# k8s-92033 (kubernetes#92033, Gentoo without the ip_vs_* modules), as posted (no klog header).
ENOENT_92033 = (
    'proxier.go:1907] Adding new service "default/kubernetes:https" 10.96.0.1:443/TCP\n'
    'proxier.go:1909] Failed to add IPVS service "default/kubernetes:https": no such file or directory\n'
    "proxier.go:1195] Failed to sync service: 10.96.0.1:443/TCP, err: no such file or directory\n"
    'proxier.go:1909] Failed to add IPVS service "kube-system/kube-dns:dns": no such file or directory\n'
)


def test_ipvs_add_service_enoent_is_a_missing_scheduler_module(diagnose: Diag) -> None:
    f = one(diagnose({"kube-proxy.log": ENOENT_92033}), "KP113")
    assert f.severity == Severity.CRITICAL and f.confidence == Confidence.HIGH
    assert "ip_vs_rr" in f.summary and "ENOENT" in f.summary
    assert f.evidence[0].line == 2 and "Failed to add IPVS service" in f.evidence[0].text
    # The scheduler in the config file is the module named.
    cfg = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nipvs:\n  scheduler: sh\n"
    g = one(diagnose({"kube-proxy.log": ENOENT_92033, "config.yaml": cfg}), "KP113")
    assert "ip_vs_sh" in g.summary


def test_other_ipvs_errors_are_not_a_missing_module(diagnose: Diag) -> None:
    # k8s-71071: a real server that could not be found, not ENOENT from the kernel.
    log = (
        "E1129 21:09:11.422553       1 proxier.go:1485] Failed to get IPVS service, error: Expected only one "
        "service obtained=0\n"
    )
    none_of(diagnose({"kube-proxy.log": log}), "KP113")


# -- KP107 and KP101: the legacy-tables warning, spliced into a rule or alone -----------------------

# k8s-78443 (kubernetes#78443): iptables-nft-save's stderr landed in the middle of a DNAT rule.
SPLICED_78443 = (
    "-A KUBE-SEP-UTOQBKGE7K7Y45HY -p tcp -m tcp -j DNAT --to-destina# Warning: iptables-legacy tables present, "
    "use iptables-legacy-save to see them\n"
    "tion 10.131.0.45:443\n"
)
WARNING_ALONE = "# Warning: iptables-legacy tables present, use iptables-legacy-save to see them\n"


def test_a_spliced_warning_is_the_parse_panic_corruption(diagnose: Diag) -> None:
    r = diagnose({"iptables-save-garbled.txt": SPLICED_78443})
    f = one(r, "KP107")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.MEDIUM  # version unknown
    assert "kube-proxy --version" in f.summary
    assert f.evidence[0].line == 1 and "--to-destina# Warning" in f.evidence[0].text
    assert r.findings[0].code == "KP107"
    # kube-proxy 1.14 (before the fix): critical; 1.15+ reads stderr apart: nothing to say.
    old = one(diagnose({"d.txt": SPLICED_78443, "v.txt": "Kubernetes v1.14.3\n"}), "KP107")
    assert old.severity == Severity.CRITICAL and old.confidence == Confidence.HIGH
    assert "1.15" in old.fix[0] and old.fixed_in == ["v1.15.0"]
    none_of(diagnose({"d.txt": SPLICED_78443, "v.txt": "Kubernetes v1.15.0\n"}), "KP107")


def test_the_warning_alone_says_both_backends_hold_rules(diagnose: Diag) -> None:
    f = one(diagnose({"iptables-save-stderr.txt": WARNING_ALONE}), "KP101")
    assert f.confidence == Confidence.LOW and f.severity == Severity.WARNING
    assert "legacy backend holds tables" in f.summary
    assert f.evidence and f.evidence[-1].line == 1


def test_an_nft_node_alone_is_a_note_and_an_old_kube_proxy_decides(diagnose: Diag) -> None:
    # raspberry-pi-dramble#156: Debian Buster's iptables, nothing else.
    version = "root@kube1:/home/vagrant# iptables --version\niptables v1.8.2 (nf_tables)\n"
    note = one(diagnose({"iptables-version.txt": version}), "KP101")
    assert note.severity == Severity.INFO and note.confidence == Confidence.LOW
    assert "iptables --version" in note.summary and "before 1.17" in note.summary
    old = one(diagnose({"iptables-version.txt": version, "kp.txt": "Kubernetes v1.15.3\n"}), "KP101")
    assert old.severity == Severity.WARNING and "predates 1.17" in old.summary
    none_of(diagnose({"iptables-version.txt": version, "kp.txt": "Kubernetes v1.28.2\n"}), "KP101")
    none_of(diagnose({"iptables-version.txt": "iptables v1.8.7 (legacy)\n"}), "KP101")


# -- KP105: the v0.x watch channels stuck on a history etcd has cleared ------------------------------

# k8s-3216 (kubernetes#3216), indented as posted.
WATCH_3216 = (
    "    W0105 17:28:25.587865    5051 api.go:188] Got error status on WatchEndpoints channel: &{TypeMeta:{Kind: "
    "APIVersion:} ListMeta:{SelfLink:/api/v1beta1/endpoints ResourceVersion:} Status:Failure Message:401: The event "
    "in requested index is outdated and cleared (the requested history has been cleared [578/235]) [1577] Reason: "
    "Details:<nil> Code:0}\n"
)


def test_old_watch_channels_stuck_on_a_cleared_history(diagnose: Diag) -> None:
    f = one(diagnose({"kube-proxy.log": WATCH_3216}), "KP105")
    assert f.confidence == Confidence.HIGH and "Endpoints" in f.summary and "before 1.0" in f.summary
    assert any("3410" in x for x in f.fix)
    # Modern client-go relists on an expired version: benign.
    modern = (
        "W0105 17:28:25.587865       1 reflector.go:441] k8s.io/client-go/informers/factory.go:134: watch of "
        "*v1.EndpointSlice ended with: too old resource version: 1577 (1580)\n"
        'I0105 17:28:26.100000       1 proxier.go:832] "SyncProxyRules complete" elapsed="75ms"\n'
    )
    none_of(diagnose({"kube-proxy.log": modern}), "KP105")


# -- KP112: a config file alone, and the heredoc it is posted in -----------------------------------

# k8s-98302 (kubernetes#98302): the config written from a heredoc, as posted.
HEREDOC_98302 = (
    "cat <<EOF > /tmp/kube-proxy.yaml\n"
    "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n"
    "kind: KubeProxyConfiguration\n"
    "clientConnection:\n"
    "  kubeconfig: /var/run/kubernetes/kube-proxy.kubeconfig\n"
    "hostnameOverride: 127.0.0.1\n"
    "mode:\n"
    "featureGates:\n"
    "  AllAlpha: false\n"
    "EOF\n"
)


def test_a_heredoc_is_read_as_the_file_it_writes() -> None:
    u = unwrap_paste(HEREDOC_98302)
    lines = u.text.split("\n")
    assert lines[0] == "" and lines[9] == "" and lines[2] == "kind: KubeProxyConfiguration"
    assert "a heredoc's command and delimiter" in u.removed
    # Not a heredoc: a delimiter that is not the last line, or no delimiter at all.
    assert unwrap_paste("cat <<EOF > x\na: 1\nEOF\nmore\n").removed == ()
    assert unwrap_paste("cat <<EOF > x\na: 1\nb: 2\n").removed == ()


def test_a_config_file_alone_names_the_settings_a_flag_cannot_change(diagnose: Diag) -> None:
    f = one(diagnose({"kube-proxy-config.txt": HEREDOC_98302}), "KP112")
    assert f.severity == Severity.INFO and f.confidence == Confidence.LOW
    assert "mode (--proxy-mode) -> iptables" in f.summary and "enableProfiling (--profiling)" in f.summary
    assert f.evidence[0].line == 7 and f.evidence[0].text == "mode:"
    # Everything set in the file: nothing to note.
    full = (
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n"
        "clusterCIDR: 10.244.0.0/16\nenableProfiling: true\nmetricsBindAddress: 0.0.0.0:10249\n"
    )
    none_of(diagnose({"config.yaml": full}), "KP112")


# -- KP202 without the cluster's objects: the Services rejected as "has no endpoints" ---------------

# k8s-93682 (kubernetes#93682): iptables -L rows, as posted (no Chain or column header).
REJECT_93682 = (
    "REJECT     udp  --  anywhere             172.17.17.78         /* kube-system/kube-dns:dns has no endpoints */ "
    "udp dpt:domain reject-with icmp-port-unreachable\n"
    "REJECT     tcp  --  anywhere             172.17.17.4          /* core/kube-registry:registry has no endpoints */ "
    "tcp dpt:commplex-main reject-with icmp-port-unreachable\n"
)


def test_rejected_services_without_objects_are_a_note_with_dns_first(diagnose: Diag) -> None:
    r = diagnose({"iptables-L.txt": REJECT_93682})
    f = one(r, "KP202")
    assert f.severity == Severity.INFO and f.confidence == Confidence.LOW
    assert "kube-system/kube-dns:dns among them: every DNS lookup" in f.summary
    assert [c.line for c in f.evidence] == [1, 2]
    assert "endpointslices" in f.summary
    # The check still says it could not verify: skipped, with what it needs.
    assert any(s.code == "KP202" and "Kubernetes objects" in s.reason for s in r.skipped)
    # The same rule in iptables-save form.
    save = (
        '-A KUBE-SERVICES -d 172.17.17.78/32 -p udp -m comment --comment "kube-system/kube-dns:dns has no '
        'endpoints" -m udp --dport 53 -j REJECT --reject-with icmp-port-unreachable\n'
    )
    assert "kube-system/kube-dns:dns" in one(diagnose({"filter.txt": save}), "KP202").summary
    # Rules without such comments: nothing.
    none_of(diagnose({"iptables-version.txt": "iptables v1.8.7 (legacy)\n"}), "KP202")
