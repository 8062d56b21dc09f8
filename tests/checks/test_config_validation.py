"""KP131 from the configuration itself: what kube-proxy's start-up validation refuses, release by
release, and a part of a KubeProxyConfiguration read as one (what it leaves out is unknown).

The refusals are checked against what kube-proxy printed for the same values in posted logs.
"""

from __future__ import annotations

from pathlib import Path

from checks.helpers import Diag
from conftest import all_findings, none_of, one

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.checks.sync.config_invalid import judged
from kpdoctor.model import Confidence, Severity
from kpdoctor.parse.kpconfig import parse_config_file, partial_in

REALWORLD = Path(__file__).resolve().parents[1] / "realworld"
HEADER = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
# k8s#76289 (kube-proxy v1.14.0): the reporter's two lines, and what kube-proxy logged for them
BRACKETLESS = "healthzBindAddress: ':::10256'\nmetricsBindAddress: '::1:10249'\n"
LOGGED_76289 = (
    "F0412 01:11:14.285591       1 server.go:466] failed validate: [KubeProxyConfiguration.HealthzBindAddress: "
    'Invalid value: ":::10256": must be IP:port, KubeProxyConfiguration.MetricsBindAddress: Invalid value: '
    '"::1:10249": must be IP:port]\n'
)


def _messages(text: str) -> dict[str, str]:
    cf = parse_config_file(text, "config.yaml")
    assert cf is not None
    return {j.field: j.message for j in judged(cf)}


def test_the_refusals_are_worded_as_kube_proxy_logs_them(diagnose: Diag) -> None:
    """The two addresses of k8s#76289, judged from the file alone: the same words kube-proxy
    printed before exiting, each in every release."""
    said = _messages(HEADER + BRACKETLESS)
    for message in said.values():
        assert message in LOGGED_76289
    f = one(diagnose({"kube-proxy-config.yaml": BRACKETLESS}), "KP131")
    assert f.severity == Severity.CRITICAL and not f.suspected
    assert f.confidence == Confidence.MEDIUM  # a part of a file: whether it is the one in use is not shown
    assert [c.line for c in f.evidence] == [1, 2]
    assert "(every release)" in f.summary and "`[::]:10249`" in f.fix[0]


def test_with_the_log_the_file_lines_join_the_logged_refusal(diagnose: Diag) -> None:
    r = diagnose({"kube-proxy.log": LOGGED_76289, "kube-proxy-config.yaml": BRACKETLESS})
    f = one(r, "KP131")
    assert f.confidence == Confidence.HIGH and f.severity == Severity.CRITICAL
    assert {c.artifact.rsplit("/", 1)[-1] for c in f.evidence} == {"kube-proxy.log", "kube-proxy-config.yaml"}


def test_values_the_defaulting_completes_are_accepted() -> None:
    """Defaulting runs before validation: an address without a port gets kube-proxy's port, an
    empty or zero field its default (k8s#68669's `0.0.0.0` was refused only before 1.14)."""
    text = HEADER + (
        'bindAddress: 0.0.0.0\nhealthzBindAddress: "0.0.0.0"\nmetricsBindAddress: ""\nclusterCIDR: ""\n'
        "iptables:\n  syncPeriod: 0s\n  minSyncPeriod: 0s\n  masqueradeBit: null\nconfigSyncPeriod: 0s\n"
        "conntrack:\n  maxPerCore: 0\n  min: null\n"
    )
    assert _messages(text) == {}


def test_numbers_of_any_length_are_judged_never_a_crash() -> None:
    """A prefix length or a port of thousands of digits (a fuzzed file) is refused like any other
    bad value; leading zeros are what Go's parsers skip."""
    huge = "9" * 5000
    bad = _messages(HEADER + f'clusterCIDR: "127.0.0.0/{huge}"\nmetricsBindAddress: "127.0.0.1:{huge}"\n')
    assert set(bad) == {"clusterCIDR", "metricsBindAddress"}, bad
    assert _messages(HEADER + 'clusterCIDR: "10.244.0.0/0016"\nmetricsBindAddress: "127.0.0.1:0010249"\n') == {}


def test_each_rule_and_the_releases_that_apply_it() -> None:
    cases = {
        # every release
        'mode: "IPVS"': ("mode", 'Mode.ProxyMode: Invalid value: "IPVS"', range(14, 37)),
        'healthzBindAddress: ":10256"': ("healthzBindAddress", 'Invalid value: "": must be a valid IP', range(14, 37)),
        'metricsBindAddress: "127.0.0.1:0"': ("metricsBindAddress", '"0": must be a valid port', range(14, 37)),
        "bindAddress: 0.0.0.0:10256": ("bindAddress", "not a valid textual representation", range(14, 37)),
        "iptables:\n  masqueradeBit: 32": ("iptables.masqueradeBit", "[0, 31]", range(14, 37)),
        "oomScoreAdj: -1001": ("oomScoreAdj", "[-1000, 1000]", range(14, 37)),
        "conntrack:\n  maxPerCore: -1": (
            "conntrack.maxPerCore",
            "-1: must be greater than or equal to 0",
            range(14, 37),
        ),
        "conntrack:\n  tcpCloseWaitTimeout: -1h": ("conntrack.tcpCloseWaitTimeout", "-1h0m0s", range(14, 37)),
        'clusterCIDR: "10.244.0.0/16, fd00::/56"': ("clusterCIDR", '" fd00::/56"', range(14, 37)),
        'clusterCIDR: "10.244.0.0"': ("clusterCIDR", "must be a valid CIDR block", range(14, 37)),
        "nodePortAddresses: [192.168.1.10]": ("nodePortAddresses", "192.168.1.10", range(14, 37)),
        # removed, added, or validated from some release on
        "mode: userspace": ("mode", "or blank", range(26, 37)),  # accepted until 1.25
        "mode: nftables": ("mode", "or blank", range(14, 31)),  # 1.29-1.30 only with its feature gate
        "nodePortAddresses: [primary]": ("nodePortAddresses", '"primary"', range(14, 31)),
        "detectLocalMode: BridgeInterfaces": ("detectLocalMode", "BridgeInterfaces", range(18, 37)),
        "iptables:\n  syncPeriod: 500ms": ("iptables.syncPeriod", "must be greater than or equal to", range(20, 37)),
        "udpIdleTimeout: -1s": ("udpIdleTimeout", "-1s: must be greater than 0", range(14, 26)),
        # a scheduler is checked only in IPVS mode, and only until 1.26
        "mode: ipvs\nipvs:\n  scheduler: roundrobin": ("ipvs.scheduler", '"roundrobin"', range(14, 27)),
    }
    for line, (fld, said, releases) in cases.items():
        cf = parse_config_file(HEADER + line + "\n", "config.yaml")
        assert cf is not None
        (j,) = [j for j in judged(cf) if j.field == fld]
        assert said in j.message, (line, j.message)
        assert j.minors == tuple(releases), (line, j.minors)
    # the mode's message as each era words it
    cf = parse_config_file(HEADER + "mode: userspace\n", "c.yaml")
    assert cf is not None
    (j,) = judged(cf)
    assert "must be iptables, ipvs, nftables or blank (blank means the best-available proxy" in j.message
    # a value hidden or templated in the paste is not the one kube-proxy was given
    hidden = 'bindAddress: "<redacted>"\nclusterCIDR: 10.x.x.x/16\nmetricsBindAddress: ${NODE_IP}:10249\n'
    assert _messages(HEADER + hidden + "nodePortAddresses: [xxx.xxx.xxx.xxx]\n") == {}
    # Windows' configuration: its own modes, not judged here
    assert _messages(HEADER + "mode: kernelspace\nclusterCIDR: x\n") == {}


def test_a_refusal_some_releases_make_is_suspected_until_the_release_is_known(diagnose: Diag) -> None:
    conf = HEADER + "mode: userspace\n"
    f = one(diagnose({"config.yaml": conf}), "KP131")
    assert f.suspected and f.severity == Severity.WARNING and "1.26 and later" in f.summary
    assert any("--version" in d for d in f.decided_by)
    old = one(diagnose({"config.yaml": conf, "version.txt": "Kubernetes v1.24.3\n"}), "KP131")
    assert old.severity == Severity.INFO and "an upgrade stops it" in old.summary
    new = one(diagnose({"config.yaml": conf, "version.txt": "Kubernetes v1.27.1\n"}), "KP131")
    assert new.severity == Severity.CRITICAL and not new.suspected and "v1.27.1" in new.summary
    # a mode only newer releases know says which releases the file is for: nothing to report
    none_of(diagnose({"config.yaml": HEADER + "mode: nftables\n"}), "KP131")


def test_a_log_that_shows_no_refusal_makes_the_file_a_suspect(diagnose: Diag) -> None:
    log = 'I0412 01:11:14.285591       1 server_others.go:186] "Using iptables Proxier"\n'
    f = one(diagnose({"kube-proxy.log": log, "config.yaml": HEADER + 'mode: "IPVS"\n'}), "KP131")
    assert f.suspected and f.severity == Severity.WARNING and f.confidence == Confidence.LOW


def test_a_part_of_a_kube_proxy_configuration_is_read_as_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # from the ConfigMap through grep: indented as it was inside `config.conf: |`
    grep = (
        "$ kubectl -n kube-system get cm kube-proxy -o yaml | grep -A4 ' ipvs:'\n"
        '    ipvs:\n      excludeCIDRs: null\n      minSyncPeriod: 0s\n      scheduler: ""\n      strictARP: false\n'
    )
    (tmp_path / "grep.txt").write_text(grep)
    (tmp_path / "part.yaml").write_text('mode: "ipvs"\nipvs:\n  strictARP: true\n')
    ev = load([tmp_path / "grep.txt", tmp_path / "part.yaml"])
    kinds = {a.kind for a in ev.artifacts}
    assert kinds == {Kind.KUBE_PROXY_CONFIG}, [(a.name, a.kind) for a in ev.artifacts]
    # another component's fields, or one field any configuration has, are not kube-proxy's
    assert not partial_in("healthzBindAddress: 0.0.0.0:10251\nmetricsBindAddress: 0.0.0.0:10251\n")
    assert partial_in("healthzBindAddress: 0.0.0.0:10256\nmetricsBindAddress: 127.0.0.1:10249\n", named=True)
    assert not partial_in("mode: ipvs\nreplicas: 3\n")
    assert not partial_in("ipvs:\n  replicas: 3\nmode: ipvs\n")


def test_what_a_part_leaves_out_is_unknown_not_unset(diagnose: Diag) -> None:
    """A whole file without clusterCIDR says kube-proxy runs without one; a part of it does not."""
    whole = HEADER + "mode: ipvs\n"
    part = "mode: ipvs\nipvs:\n  strictARP: true\n"
    assert any(f.code == "KP112" for f in all_findings(diagnose({"config.yaml": whole})))
    r = diagnose({"config.yaml": part})
    assert not [f for f in all_findings(r) if "clusterCIDR" in f.summary]
    cf = parse_config_file(part, "config.yaml")
    assert cf is not None and cf.partial and cf.shows("ipvs.strictARP") and not cf.shows("clusterCIDR")
    # a part that does not show syncPeriod: the relation to minSyncPeriod is not judged
    assert _messages("iptables:\n  minSyncPeriod: 1m\n") == {}
    assert "iptables.syncPeriod" in _messages(HEADER + "iptables:\n  minSyncPeriod: 1m\n")


def test_fields_kube_proxy_does_not_read_are_named_with_the_one_meant(diagnose: Diag) -> None:
    """A misspelt field (`strictArp`), a name the internal configuration has but the file format
    never had (top-level `syncPeriod`), a field a release removed (`conntrack.max`, 1.14 only):
    kube-proxy goes on without them (lenient decoding), so their settings are not in effect."""
    conf = HEADER + "mode: ipvs\nipvs:\n  strictArp: true\nsyncPeriod: 30s\nconntrack:\n  max: 262144\n  min: null\n"
    f = one(diagnose({"config.yaml": conf}), "KP131")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.HIGH and not f.suspected
    assert "`ipvs.strictArp` (no release has it; meant `ipvs.strictARP`?)" in f.summary
    assert "`syncPeriod` (no release has it)" in f.summary and "`conntrack.max` (kube-proxy 1.14 only)" in f.summary
    assert [c.line for c in f.evidence] == [5, 6, 8]  # `min: null` sets nothing
    # what `--write-config-to` prints for a field nobody set loses nothing where the field is gone
    none_of(diagnose({"config.yaml": HEADER + "udpIdleTimeout: 0s\nconntrack:\n  max: null\n"}), "KP131")
    # a field only newer releases have, on a release that lacks it
    newer = HEADER + "mode: ipvs\ndetectLocal:\n  bridgeInterface: cbr0\n"
    g = one(diagnose({"config.yaml": newer, "version.txt": "Kubernetes v1.22.4\n"}), "KP131")
    assert "`detectLocal.bridgeInterface` (1.24 and later)" in g.summary
    none_of(diagnose({"config.yaml": newer}), "KP131")  # written for a release that has it
    # next to a refusal, kube-proxy does not start at all: the refusal alone is reported
    refused = one(diagnose({"config.yaml": conf + 'metricsBindAddress: ":::1"\n'}), "KP131")
    assert refused.severity == Severity.CRITICAL and "strictArp" not in refused.summary


# k8s#76329: the ConfigMap as posted (`kubectl get cm kube-proxy -o yaml`, cut before its kind and
# metadata), and what kube-proxy 1.14.1 logged with it
CONFIGMAP_76329 = (REALWORLD / "fresh-6" / "k8s-76329" / "kube-proxy-configmap.yaml").read_text()
LOGGED_76329 = (REALWORLD / "fresh-6" / "k8s-76329" / "kube-proxy.log").read_text()


def test_feature_gates_a_release_does_not_know_stop_it(diagnose: Diag) -> None:
    """kube-proxy sets its feature gates before validating (`failed complete: ...`): a gate its
    release removed, or spelt otherwise, stops it; a gate locked to its default cannot be turned."""
    conf = HEADER + "featureGates:\n  SupportIPVSProxyMode: true\n  AllAlpha: false\nmode: ipvs\n"
    f = one(diagnose({"config.yaml": conf, "version.txt": "Kubernetes v1.21.3\n"}), "KP131")
    assert f.severity == Severity.CRITICAL and not f.suspected
    assert "failed complete: unrecognized feature gate: SupportIPVSProxyMode (1.20 and later)" in f.summary
    assert "AllAlpha" not in f.summary and [c.line for c in f.evidence][:1] == [4]
    assert one(diagnose({"config.yaml": conf}), "KP131").suspected  # which release runs decides
    assert one(diagnose({"config.yaml": conf, "version.txt": "Kubernetes v1.18.2\n"}), "KP131").severity == (
        Severity.INFO
    )
    # gate names are case-sensitive: no release has this one
    assert (
        "unrecognized feature gate: nftablesProxyMode"
        in _messages(HEADER + "featureGates:\n  nftablesProxyMode: true\n")["featureGates.nftablesProxyMode"]
    )
    locked = one(
        diagnose(
            {"config.yaml": HEADER + "featureGates:\n  NFTablesProxyMode: false\n", "v.txt": "Kubernetes v1.33.1\n"}
        ),
        "KP131",
    )
    assert "cannot set feature gate NFTablesProxyMode to false, feature is locked to true" in locked.summary


def test_a_configmap_cut_before_its_metadata_is_still_kube_proxys(diagnose: Diag) -> None:
    """The command names the object (`get cm kube-proxy`); its embedded configuration, cut before
    its kind, is a part of one. What it holds is worded as kube-proxy logged it, and the release
    that removed the gate is said to be unsure (the facts say 1.14 or 1.15), never to accept it."""
    f = one(diagnose({"cm.yaml": CONFIGMAP_76329, "version.txt": "Kubernetes v1.14.1\n"}), "KP131")
    assert f.suspected and f.severity == Severity.WARNING and "may refuse" in f.summary
    said = "failed complete: unrecognized feature gate: MountPropagation"
    assert said in f.summary and said in LOGGED_76329
    assert "VolumeScheduling (1.16 and later)" in f.summary
    with_log = one(diagnose({"cm.yaml": CONFIGMAP_76329, "kube-proxy.log": LOGGED_76329}), "KP131")
    assert with_log.severity == Severity.CRITICAL and with_log.confidence == Confidence.HIGH


def test_a_grep_of_the_configmap_pasted_in_a_markdown_fence_is_read(diagnose: Diag) -> None:
    """A question as people post it: prose, a fence, the command, its indented output with a
    misspelt field. One finding: the gate newer releases refuse, and the field not read."""
    paste = (
        "kube-proxy keeps crashing after the upgrade, here is our config:\n\n```\n"
        "$ kubectl -n kube-system get cm kube-proxy -o yaml | grep -A6 'mode\\|featureGates'\n"
        '    featureGates:\n      EndpointSliceProxying: true\n    mode: "ipvs"\n    ipvs:\n'
        '      scheduler: "rr"\n      strictArp: true\n```\n'
    )
    f = one(diagnose({"question.md": paste}), "KP131")
    assert f.suspected and "unrecognized feature gate: EndpointSliceProxying (1.25 and later)" in f.summary
    assert "meant `ipvs.strictARP`?" in f.summary and [c.line for c in f.evidence] == [6, 10]


def test_a_configmap_cut_after_its_kind_takes_its_name_from_the_command(diagnose: Diag) -> None:
    """kubectl prints `apiVersion`, `data`, `kind`, `metadata`: a paste that ends after `kind:`
    has no name; `get cm kube-proxy` says whose it is."""
    paste = (
        "$ kubectl -n kube-system get cm kube-proxy -o yaml\napiVersion: v1\ndata:\n  config.conf: |-\n"
        "    apiVersion: kubeproxy.config.k8s.io/v1alpha1\n    mode: IPVS\nkind: ConfigMap\n"
    )
    f = one(diagnose({"paste.txt": paste}), "KP131")
    assert f.severity == Severity.CRITICAL and '"IPVS"' in f.summary
    # without the name nothing says it is kube-proxy's
    none_of(diagnose({"paste.txt": paste.replace("get cm kube-proxy", "get cm")}), "KP131")
