"""KP112 config-overrides-flags: flags next to --config, and a config file alone."""

from __future__ import annotations

from checks.helpers import CASES, HEREDOC_98302, SEED2, Diag
from conftest import all_findings, none_of, one

from kpdoctor.model import Confidence, Severity


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


def test_a_flag_that_differs_from_the_file_is_a_warning(diagnose: Diag) -> None:
    """k8s#98302: `--profiling=true` next to --config has no effect (pprof answers 404)."""
    posted = (CASES / "k8s-98302" / "kube-proxy-config.txt").read_text().splitlines()
    conf = "\n".join(ln for ln in posted if not ln.startswith(("cat <<EOF", "EOF"))) + "\n"
    flags = "kube-proxy --config=/tmp/kube-proxy.yaml --master=https://localhost:6443 --profiling=true\n"
    r = diagnose({"kube-proxy.yaml": conf, "cmdline.txt": flags})
    (f,) = [g for g in all_findings(r) if g.code == "KP112"]
    assert f.severity == Severity.WARNING and f.confidence == Confidence.HIGH
    assert "--profiling=true (config: unset (default))" in f.summary
    assert "master" not in f.summary  # honoured with --config
    assert any(c.artifact.endswith("kube-proxy.yaml") and c.line == 2 for c in f.evidence)


def test_flags_equal_to_the_file_are_only_info(diagnose: Diag) -> None:
    """Seed 002's config has `bindAddress: 0.0.0.0`; the same flag ignored changes nothing."""
    conf = (SEED2 / "kube-proxy" / "config.yaml").read_text()
    flags = "kube-proxy --v=2 --config=/var/lib/kube-proxy-config/config --bind-address=0.0.0.0\n"
    (f,) = [g for g in all_findings(diagnose({"config.yaml": conf, "cmdline.txt": flags})) if g.code == "KP112"]
    assert f.severity == Severity.INFO and "same values" in f.summary
