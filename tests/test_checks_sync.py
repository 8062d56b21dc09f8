"""Rule-sync findings of the seeds that involve more than one cause: seed 002's config-overrides-flags
with the unresolved node folded under it, and IPVS module noise in iptables mode. Each rule-sync
failure of seeds 000-003 on its own is tested with its cause, in tests/checks."""

from __future__ import annotations

from collections.abc import Callable

from kpdoctor.model import Report, Severity

Diag = Callable[..., Report]


def top(report: Report) -> str:
    vis = report.visible()
    assert vis, "no findings"
    return vis[0].cause


def test_seed_002_config_ignores_hostname_override(diagnose: Diag) -> None:
    log = """\
I0525 07:13:03.848460       1 flags.go:33] FLAG: --bind-address="0.0.0.0"
I0525 07:13:03.848470       1 flags.go:33] FLAG: --config="/var/lib/kube-proxy-config/config"
I0525 07:13:03.848697       1 flags.go:33] FLAG: --hostname-override="ip-10-188-166-140.ec2.internal"
W0525 07:13:03.916890       1 server.go:604] Failed to retrieve node info: nodes "ip-10-188-166-140" not found
I0525 07:13:03.916921       1 server_others.go:148] Using iptables Proxier.
W0525 07:13:03.917047       1 proxier.go:312] invalid nodeIP, initializing kube-proxy with 127.0.0.1 as nodeIP
"""
    r = diagnose({"kp.log": log}, node="ip-10-188-166-140.ec2.internal")
    f = r.visible()[0]
    assert f.cause == "config-overrides-flags" and f.severity == Severity.CRITICAL
    assert "KP111" in f.explains
    sub = f.folded[0]
    assert sub.cause == "node-ip-unresolved" and '"ip-10-188-166-140"' in sub.summary


def test_ipvs_module_noise_in_iptables_mode_is_benign(diagnose: Diag) -> None:
    log = (
        "W0116 07:00:00.000000       1 server_others.go:559] Failed to load kernel module ip_vs with modprobe. "
        "You can ignore this message when kube-proxy is running inside container without mounting /lib/modules\n"
        "I0116 07:00:00.100000       1 server_others.go:186] Using iptables Proxier.\n"
        "I0116 07:00:01.000000       1 proxier.go:790] syncProxyRules took 30ms\n"
    )
    assert diagnose({"kp.log": log}, min_severity=Severity.WARNING).visible() == []


# kube-proxy 1.28's start-up as its source prints it (cmd/kube-proxy/app/server.go: newProxyServer's
# fmt.Errorf("kube-proxy configuration is incorrect: %v", err) of checkIPConfig's "cluster is %s but
# clusterCIDRs contains only IPv%s addresses", logged by "Error running ProxyServer", then
# component-base's cli.Run "command failed" before os.Exit(1)).
CONFIG_REFUSED = (
    'I0825 16:18:19.912200       1 server.go:632] "kube-proxy running in dual-stack mode" primary ipFamily="IPv4"\n'
    'E0825 16:18:19.912228       1 server.go:537] "Error running ProxyServer" err="kube-proxy configuration is '
    'incorrect: cluster is IPv4-primary but clusterCIDRs contains only IPv6 addresses"\n'
    'E0825 16:18:19.912240       1 run.go:74] "command failed" err="kube-proxy configuration is incorrect: cluster '
    'is IPv4-primary but clusterCIDRs contains only IPv6 addresses"\n'
)


def test_a_configuration_kube_proxy_refuses_and_exits_on_is_critical(diagnose: Diag) -> None:
    """The wrapper says kube-proxy refused its configuration and exited, whatever setting its
    payload names: KP131 first, critical; the setting's own reading (the cluster CIDR's family)
    is reported beside it."""
    r = diagnose({"kube-proxy.log": CONFIG_REFUSED})
    first = r.findings[0]
    assert (first.code, first.severity) == ("KP131", Severity.CRITICAL)
    assert first.summary.startswith("kube-proxy exits at start-up: it refuses its configuration")
    assert first.summary.count("clusterCIDRs contains only") == 1  # each message said once
    assert "cluster-cidr-misconfigured" in [f.cause for f in r.findings[1:]]


def test_a_flag_value_kube_proxy_cannot_parse_stops_it(diagnose: Diag) -> None:
    """pflag's refusal as kube-proxy v1.20.2 (built here from Debian's source) printed it for
    `--healthz-port=notanumber` (cobra's "Error: " and usage), pasted with its command; and
    pflag's wording before April 2017 (the argument as given) in kube-proxy's journal. Any
    command-line program prints pflag's message: the command, or the journal's identifier, says
    it is kube-proxy's."""
    ran = (
        "$ kube-proxy --healthz-port=notanumber\n"
        'Error: invalid argument "notanumber" for "--healthz-port" flag: strconv.ParseInt: parsing "notanumber": '
        "invalid syntax\nUsage:\n  kube-proxy [flags]\n"
    )
    journal = (
        "Oct 12 07:25:58 node-3 kube-proxy[510947]: Error: invalid argument \"127.0.0.1:10249\" for "
        '--metrics-bind-address=127.0.0.1:10249: "127.0.0.1:10249" is not a valid IP address\n'
    )
    for text in (ran, journal):
        (f,) = [f for f in diagnose({"paste.txt": text}).findings if f.code == "KP131"]
        assert f.severity == Severity.CRITICAL and f.summary.startswith("kube-proxy exits at start-up")
    assert [f for f in diagnose({"paste.txt": ran.replace("kube-proxy", "other-tool")}).findings if f.code == "KP131"] == []


def test_go_s_reason_decides_what_a_failed_listen_means(diagnose: Diag) -> None:
    """"starting metrics server failed" says only that the listen failed: Go's error after it says
    why (net.SplitHostPort's "missing port in address": the address kube-proxy was given). The line
    as server.go's klog.Errorf("starting metrics server failed: %v", err) prints Go's listen error."""
    line = (
        "E0301 10:00:00.000000       1 server.go:480] starting metrics server failed: listen tcp: address 10.0.0.5: "
        "missing port in address\n"
    )
    r = diagnose({"kube-proxy.log": line})
    assert r.findings[0].cause == "kube-proxy-config-invalid"
    assert "multiple-kube-proxy" not in [f.cause for f in r.findings]
