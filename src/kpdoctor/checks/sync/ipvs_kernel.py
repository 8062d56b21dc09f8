"""KP127: the kernel's IPVS netlink interface differs from what kube-proxy's IPVS library reads."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, apply_remedy, kube_proxy_remedy, start
from kpdoctor.facts import Facts
from kpdoctor.knowledge import VersionRow, check, signature
from kpdoctor.model import Confidence, Finding, Severity
from kpdoctor.versions import FixRow

# `Failed to list IPVS destinations, error: parseIP Error ip=[10 244 2 2 0 0 ...]`
PARSE_IP = signature("ipvs-parseip-error", "parseIP Error", r"parseIP Error ip=\[", failure=True)
FIXES = [
    FixRow((1, 18), "v1.18.3"),
    FixRow((1, 18), status="unaffected", above=True),
    FixRow((1, 18), status="unaffected", below=True),
]
FAMILY_ATTR_SINCE = (3, 18, 0)  # kernels before this send no address family per destination


@check(
    "KP127",
    cause="ipvs-kernel-incompatible",
    title="kube-proxy cannot read the kernel's IPVS destinations",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=RESTORE_SYMPTOMS,
    versions=(
        VersionRow(
            "kube-proxy",
            "1.18.0-1.18.2 on kernels before 3.18",
            "1.18.3",
            "https://github.com/kubernetes/kubernetes/pull/90678",
        ),
    ),
)
def ipvs_kernel_incompatible(facts: Facts) -> Iterator[Finding]:
    """kube-proxy's IPVS library misreads what an older kernel sends, so endpoints never sync.

    Symptom: in IPVS mode `Failed to list IPVS destinations, error: parseIP Error ip=[10 244 2
        2 0 0 0 0 0 0 0 0 0 0 0 0]` and `Failed to sync endpoint for service: ...`; NodePorts
        work only on the node that runs the Pod.
    Cause: kube-proxy 1.18.0-1.18.2 read each destination's address family from a netlink
        attribute that kernels before 3.18 (CentOS 7's 3.10) do not send.
    How it is detected: the parseIP error; the kube-proxy version and the node's kernel.
    Fix: kube-proxy 1.18.3 or later (k/k#90678), or a newer kernel.
    References: https://github.com/kubernetes/kubernetes/issues/89520;
        https://github.com/kubernetes/kubernetes/pull/90678
    """
    hits = facts.log.hits(PARSE_IP.id)
    if not hits:
        return
    f = start(facts, "KP127", hits, confidence=Confidence.HIGH)
    f.summary = (
        "kube-proxy cannot parse the IPVS destinations the kernel lists (parseIP Error), so it never syncs "
        "real servers: kube-proxy 1.18.0-1.18.2 on kernels older than 3.18."
    )
    k = facts.node_kernel
    if k is not None:
        f.versions_found["kernel"] = str(k.value)
        f.evidence.append(k.cite)
        if k.value.base < FAMILY_ATTR_SINCE:
            f.summary += f" Kernel {k.value} is one of them."
    rem, found, where = kube_proxy_remedy(facts, FIXES)
    apply_remedy(f, rem, found, where)
    yield f
