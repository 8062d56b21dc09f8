"""KP131: kube-proxy refuses its own configuration or flags at start-up."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, note_version
from kpdoctor.checks.logged import innermost, messages_naming, start_logged
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check
from kpdoctor.model import Confidence, Finding, Severity

CAUSE = "kube-proxy-config-invalid"
# What kube-proxy logs as it exits on a start-up error, at level E or with no level: server.go's
# "Error running ProxyServer" (1.24+), component-base's "command failed" (cli/run.go, then
# os.Exit(1)), and a flag value pflag cannot parse (cobra prints it with the usage and exits).
EXITS = frozenset(
    {"server-error-running-proxyserver", "component-base-command-failed", "pflag-invalid-argument",
     "pflag-invalid-argument-old"}
)  # fmt: skip


@check(
    "KP131",
    cause=CAUSE,
    title="kube-proxy rejects its configuration or flags",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    reads_messages=True,
    explains=RESTORE_SYMPTOMS,
)
def config_invalid(facts: Facts) -> Iterator[Finding]:
    """kube-proxy stops at start-up (or falls back to a default) because its configuration is invalid.

    Symptom: kube-proxy restarts in a loop (CrashLoopBackOff) or runs in another mode than
        configured; Services do not answer on the node; its log ends with an error about the
        config file or a flag (`failed validate: ...`, `invalid config: Conntrack Max and
        Conntrack MaxPerCore are mutually exclusive`, `unknown detect-local-mode`, `cluster is
        IPv4 but healthzBindAddress is IPv6`).
    Cause: the KubeProxyConfiguration (the kube-proxy ConfigMap) or the command line holds a value
        kube-proxy cannot use: a field of the wrong type or family, settings that exclude each
        other, a mode or detect-local mode missing what it needs, an unreadable config file.
        kube-proxy then exits before it programs anything, and the node keeps whatever rules the
        previous instance left, or none.
    How it is detected: kube-proxy's own start-up messages about its configuration, read from the
        messages catalogue (every release's wording, both klog eras). A fatal line (kube-proxy
        exits, or its "Error running ProxyServer"/"command failed" wraps the refusal) is critical;
        an error line, a setting refused while it went on, a warning; an
        info line (lenient decoding ignoring an unknown field, a fallback) is information. A
        later successful sync shows that a corrected instance started.
    Fix: correct the field the message names in the kube-proxy ConfigMap (`kubectl -n kube-system
        edit configmap kube-proxy`) or on its command line, then restart the kube-proxy Pods
        (`kubectl -n kube-system rollout restart daemonset kube-proxy`). `kube-proxy --config FILE
        --cleanup=false --v=2` run by hand prints the same validation errors.
    References: https://kubernetes.io/docs/reference/config-api/kube-proxy-config.v1alpha1/;
        https://kubernetes.io/docs/reference/command-line-tools-reference/kube-proxy/
    """
    logged = messages_naming(facts, CAUSE, wrappers=True)
    if not logged:
        return
    levels = {h.level or lm.match.message.level or "E" for lm in logged for h in lm.hits}
    if "F" in levels or any(lm.match.message.id in EXITS for lm in logged):  # kube-proxy exits
        f = start_logged(facts, "KP131", logged, confidence=Confidence.HIGH)
        f.summary = "kube-proxy exits at start-up: it refuses its configuration"
    elif "E" in levels:
        f = start_logged(facts, "KP131", logged, confidence=Confidence.MEDIUM, severity=Severity.WARNING)
        f.summary = "kube-proxy refuses part of its configuration"
    else:  # an info or warning line: it went on without the setting (lenient decoding, a fallback)
        f = start_logged(facts, "KP131", logged, confidence=Confidence.MEDIUM, severity=Severity.INFO)
        f.summary = "kube-proxy went on without part of its configuration"
    # what the message says most about (a wrapper's payload: "invalid configuration: %v" says little)
    shown = dict.fromkeys(f"`{m.template}` ({m.meaning.rstrip('.')})" for m in (innermost(lm.match) for lm in logged))
    said = "; ".join(list(shown)[:3])
    f.summary += f": {said}."
    if f.ongoing is False and f.severity > Severity.INFO:
        f.severity = Severity.INFO
        f.summary += " A later sync succeeded: a corrected instance is running."
    note_version(f, facts.kube_proxy_version, "kube-proxy")
    f.fix = [
        "Correct the setting the message names in the kube-proxy ConfigMap or command line, then restart "
        "the kube-proxy Pods (`kubectl -n kube-system rollout restart daemonset kube-proxy`).",
    ]
    yield f
