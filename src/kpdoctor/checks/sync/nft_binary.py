"""KP124: the nft binary kube-proxy runs has a known bug that breaks its syncs or listings."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start
from kpdoctor.facts import Facts
from kpdoctor.knowledge import VersionRow, check, signature
from kpdoctor.model import Confidence, Finding, Severity

NFT_SEGFAULT = signature(
    "nft-segfault",
    "segmentation fault",
    r"(failed to run nft: |nftables sync failed.*)signal: segmentation fault",
    failure=True,
)
NFT_NO_JSON = signature(
    "nft-without-json", "JSON support not compiled-in", r"JSON support not compiled-in", failure=True
)


@check(
    "KP124",
    cause="nft-binary-known-bug",
    title="the nft binary kube-proxy runs has a known bug",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=RESTORE_SYMPTOMS,
    versions=(
        VersionRow(
            "kube-proxy",
            "nftables mode, image nft older than 1.1.2 with host nft 1.1.3+",
            "1.33.11, 1.34.7, 1.35.4",
            "https://github.com/kubernetes/kubernetes/pull/137501",
        ),
        VersionRow(
            "k3s",
            "1.33.4 and others with k3s-root nft 1.0.8 (no JSON)",
            "1.34.1, 1.33.5, 1.31.13",
            "https://github.com/k3s-io/k3s/issues/12852",
        ),
        VersionRow(
            "rke2", "1.33.4+rke2r1 (bundled nft without JSON)", "", "https://github.com/rancher/rke2/issues/8840"
        ),
    ),
)
def nft_binary_known_bug(facts: Facts) -> Iterator[Finding]:
    """nftables mode fails because the nft binary in use crashes or lacks JSON output.

    Symptom: in nftables mode every sync fails: `"Failed to list existing sets" err="failed to
        run nft: signal: segmentation fault (core dumped)"`, `"nftables sync failed"
        err="signal: segmentation fault (core dumped)"`, or `"Failed to list nftables
        elements" err=< failed to run nft: JSON support not compiled-in >`.
    Cause: an nft older than 1.1.2 (the kube-proxy image's) crashes reading sets that a newer
        host nft (1.1.3+, e.g. Fedora 43) wrote with its user data; k3s/RKE2 shipped an nft
        (1.0.8, k3s-root) built without JSON support, which kube-proxy's nftables library needs
        to list rules and set elements.
    How it is detected: the crash or the missing-JSON error in kube-proxy's log; the nft
        versions when given (`nft --version` on the host and in the image).
    Fix: crash: kube-proxy 1.33.11, 1.34.7, 1.35.4 or later (lists with --terse, k/k#137501),
        or keep the host's nft from writing kube-proxy's table. No JSON: k3s 1.34.1, 1.33.5,
        1.31.13 or later (k3s-root rebuilt with JSON); or an nft built with JSON support.
    References: https://github.com/kubernetes/kubernetes/issues/136786;
        https://github.com/kubernetes/kubernetes/pull/137501; https://github.com/k3s-io/k3s/issues/12852;
        https://github.com/rancher/rke2/issues/8840
    """
    crash = facts.log.hits(NFT_SEGFAULT.id)
    nojson = facts.log.hits(NFT_NO_JSON.id)
    if not crash and not nojson:
        return
    f = start(facts, "KP124", crash or nojson, confidence=Confidence.HIGH)
    if crash:
        f.summary = (
            "The nft kube-proxy runs crashes (segmentation fault) listing or loading its sets: an nft older than "
            "1.1.2 (the kube-proxy image's) cannot read sets a newer nft on the host (1.1.3+) wrote."
        )
        f.fix = [
            "Upgrade kube-proxy to 1.33.11, 1.34.7, 1.35.4 or later (it lists with --terse, k/k#137501).",
            "Until then, keep the host's newer nft from touching kube-proxy's table (no `nft list`/`nft -f` "
            "of it by host tools that rewrite sets).",
        ]
        f.fixed_in = ["v1.33.11", "v1.34.7", "v1.35.4"]
    else:
        f.summary = (
            "The nft kube-proxy runs was built without JSON support, which kube-proxy's nftables mode needs to "
            "list its rules and set elements (k3s/RKE2's bundled nft 1.0.8)."
        )
        f.fix = [
            "k3s: upgrade to 1.34.1, 1.33.5, 1.31.13 or later (k3s-root rebuilt with JSON). RKE2 and others: use "
            "an nft built with JSON support, or iptables mode until then.",
        ]
        f.fixed_in = ["v1.34.1+k3s1", "v1.33.5+k3s1", "v1.31.13+k3s1"]
    yield f
