"""KP120: the ipset binary or the kernel's ip_set lacks something IPVS mode's sets need."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start
from kpdoctor.facts import Facts
from kpdoctor.facts.log import cite_line
from kpdoctor.knowledge import check, signature
from kpdoctor.model import Confidence, Finding, Severity
from kpdoctor.parse.logscan import Hit

# kube-proxy's IPVS proxier (ipset.go): `Failed to make sure ip set: &{{KUBE-LOOP-BACK hash:ip,port,ip
# inet 1024 65536 0-65535 Kubernetes endpoints dst ip:port, ...} map[] 0xc42073e1d0} exist, error:
# error creating ipset KUBE-LOOP-BACK, error: exit status 2`. The set and its type are captured.
ENSURE_SET_FAILED = signature(
    "ipvs-ensure-ipset-failed",
    "Failed to make sure ip set",
    r"Failed to make sure ip set: &\{\{([A-Z0-9-]+) ([a-z:,]+) ",
    failure=True,
)
# ipset's own complaint, as a user reproduces it (`ipset create foo hash:ip comment`) or as
# kube-proxy quotes it: an extension it does not know, a protocol name it cannot resolve
# (no /etc/protocols in the image), a kernel/userspace protocol mismatch.
IPSET_ERROR = signature(
    "ipset-error",
    "ipset v",
    r"ipset v([0-9.]+): (Unknown argument: .([a-z-]+).|Syntax error: (.+)|Kernel error received: (.+)"
    r"|Kernel support protocol versions (.+))",
)
PROTOCOL_UNPARSABLE = signature(
    "ipset-protocol-unparsable", "as a protocol", r"cannot parse .([a-z0-9]+). as a protocol"
)


def _reason(h: Hit) -> tuple[str, str] | None:
    """(what is missing, fix) from one ipset error line."""
    if h.sig == PROTOCOL_UNPARSABLE.id or (h.groups and h.groups[3] and "invalid as number" in str(h.groups[3])):
        name = h.groups[0] if h.sig == PROTOCOL_UNPARSABLE.id else "tcp"
        return (
            f"ipset cannot resolve the protocol name '{name}': the image has no /etc/protocols",
            "Add /etc/protocols to the kube-proxy image (Debian's netbase package), as upstream images do "
            "since k/k#68703.",
        )
    if h.groups and h.groups[2]:
        ext = h.groups[2]
        return (
            f"ipset {h.groups[0]} does not know the `{ext}` extension kube-proxy's sets use",
            "Use an ipset (and kernel ip_set modules) with comment support: CentOS/RHEL 7's ipset 6.29 lacks it; "
            "take the distribution's newer ipset or a kube-proxy image that carries its own ipset.",
        )
    if h.groups and (h.groups[4] or h.groups[5]):
        return (
            f"ipset {h.groups[0]} and the kernel's ip_set disagree ({h.groups[4] or h.groups[5]})",
            "Use an ipset built for this kernel's ip_set protocol (the node's package, or a matching image).",
        )
    if h.groups and h.groups[3]:
        return (f"ipset {h.groups[0]} rejects the set definition ({h.groups[3]})", "")
    return None


@check(
    "KP120",
    cause="ipset-incompatible",
    title="ipset cannot create IPVS mode's sets",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=RESTORE_SYMPTOMS,
)
def ipset_incompatible(facts: Facts) -> Iterator[Finding]:
    """kube-proxy (IPVS mode) cannot create its ipsets: ipset or ip_set lacks a feature.

    Symptom: in IPVS mode, `ipset.go:156] Failed to make sure ip set: &{{KUBE-LOOP-BACK
        hash:ip,port,ip ...} ...} exist, error: error creating ipset KUBE-LOOP-BACK, error: exit
        status 2` for every set, every sync; Services do not work (masquerade, NodePorts).
        Reproducing by hand: `ipset v6.29: Unknown argument: `comment'` or `Syntax error:
        cannot parse 'tcp' as a protocol`.
    Cause: kube-proxy creates its sets with the `comment` extension and protocol names; an
        ipset (or kernel ip_set) without comment support (CentOS/RHEL 7's 6.29), an image
        without /etc/protocols, or an ipset built for another kernel protocol cannot.
    How it is detected: kube-proxy's set-creation failure (the set and its type) and ipset's
        own error line when given. A failure whose reason is not in the evidence is reported
        at medium confidence, with the commands that show the reason. A set left behind by
        another kube-proxy release with another type is a rule-generation bug (KP123).
    Fix: the line's reason decides: an ipset with comment support, /etc/protocols in the
        image (netbase), an ipset matching the kernel. Check with `ipset --version` and
        `ipset create kpdoctor-test hash:ip,port comment && ipset destroy kpdoctor-test`.
    References: https://github.com/kubernetes/kubernetes/issues/65461;
        https://github.com/kubernetes/kubernetes/issues/68703; https://github.com/kubernetes/kubernetes/issues/79400
    """
    fails = facts.log.hits(ENSURE_SET_FAILED.id)
    errors = facts.log.hits(IPSET_ERROR.id, PROTOCOL_UNPARSABLE.id)
    if not fails and not errors:
        return
    reasons = [(h, r) for h in errors if (r := _reason(h)) is not None]
    known = [(h, r) for h, r in reasons if r[1]]
    f = start(
        facts, "KP120", fails or [h for h, _ in reasons], confidence=Confidence.HIGH if known else Confidence.MEDIUM
    )
    sets = list(dict.fromkeys(f"{h.groups[0]} ({h.groups[1]})" for h in fails if h.groups and h.groups[0]))
    if known:
        f.summary = known[0][1][0] + "."
        f.fix = [known[0][1][1]]
    elif reasons:
        f.summary = reasons[0][1][0] + "."
    else:
        f.summary = "kube-proxy cannot create its ipsets and the log does not say why."
    if sets:
        f.summary += f" kube-proxy failed to create {', '.join(sets[:4])}" + (" and more." if len(sets) > 4 else ".")
    for h, _r in reasons[:2]:
        c = cite_line(h)
        if c not in f.evidence:
            f.evidence.append(c)
    f.fix.append(
        "Check with `ipset --version` and `ipset create kpdoctor-test hash:ip,port comment && ipset destroy "
        "kpdoctor-test` where kube-proxy runs (its image, or the node)."
    )
    if not fails:
        f.severity = Severity.WARNING  # ipset's complaint alone: kube-proxy's own failure not shown
    yield f
