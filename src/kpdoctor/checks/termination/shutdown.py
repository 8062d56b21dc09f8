"""KP400-KP402: Pods behind Services that drop connections when they stop (seed 004).

kubelet and every node's kube-proxy learn that a Pod is terminating at the same moment: kubelet
runs the preStop hook and then sends SIGTERM to PID 1, while each kube-proxy removes the Pod
from its rules in its next sync. Without a delay, the application stops accepting while
connections are still sent to it; with a shell as PID 1 it never hears SIGTERM and is
SIGKILLed mid-request at the end of the grace period.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start
from kpdoctor.checks.registry import check
from kpdoctor.facts import Facts
from kpdoctor.facts.workloads import Served, served_workloads
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.entrypoint import analyse

DEFAULT_GRACE = 30  # terminationGracePeriodSeconds when unset
DRAIN_ALLOWANCE = 5  # seconds an application needs after SIGTERM to finish in-flight requests
SUGGESTED_PRESTOP = 5  # seed 004: sleep 5, enough for kube-proxy (and load balancers) to stop sending


def _subject(w: Served) -> dict[str, str | None]:
    return {"service": w.services[0], "workload": w.ref}


@check(
    "KP400",
    cause="sigterm-not-forwarded",
    title="A shell is PID 1 and does not pass SIGTERM to the application",
    severity=Severity.WARNING,
    needs=[Kind.K8S_OBJECTS],
)
def sigterm(facts: Facts) -> Iterator[Finding]:
    """The container's PID 1 is a shell that never passes SIGTERM on, so the application is killed instead of stopping.

    Symptom: every rollout or scale-down of the workload breaks in-flight requests; Pods take
        the whole terminationGracePeriodSeconds (30 s by default) to stop and end with exit code
        137 (SIGKILL).
    Cause: kubelet signals PID 1 only. A shell started with `sh -c "app ..."` that runs the
        application in the background, in a pipeline, or not as its last command stays PID 1;
        it has no SIGTERM handler, and PID 1 ignores signals it does not handle, so the
        application never starts its graceful shutdown.
    How it is detected: the `command`/`args` of each container of the workloads that back a
        Service (Deployments, StatefulSets, DaemonSets, and Pods without a controller in the
        evidence). A shell with `-c` whose script backgrounds the application without a
        `trap ... TERM` and `wait`, pipes it, or ends with another command is a warning (high
        confidence). `sh -c "app"` without `exec` is a warning with medium confidence: Debian's
        and Ubuntu's dash stays PID 1, busybox ash and bash exec the command; bash execs the
        last command of a list only from 5.1. Images whose ENTRYPOINT is a script (not in the
        spec) cannot be judged and are not reported.
    Fix: start the application with `exec` (`sh -c "exec /app/server"`), or run an init that
        forwards signals (`tini`, `dumb-init`: `command: ["dumb-init", "--", "/start.sh"]`), or
        trap and forward: `trap 'kill -TERM $pid' TERM; /app & pid=$!; wait $pid`. The
        application itself must handle SIGTERM (as PID 1 it otherwise ignores it).
    References: https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination;
        https://github.com/Yelp/dumb-init
    """
    for w in served_workloads(facts):
        bad = []
        for c in w.containers():
            cmd = [str(x) for x in c.get("command") or []]
            args = [str(x) for x in c.get("args") or []]
            v = analyse(cmd, args)
            if v is not None and v.forwards is not True:
                bad.append((str(c.get("name") or "?"), v))
        if not bad:
            continue
        certain = any(v.forwards is False for _, v in bad)
        name, v = next(((n, v) for n, v in bad if v.forwards is False), bad[0])
        f = start(
            facts,
            "KP400",
            [],
            confidence=Confidence.HIGH if certain else Confidence.MEDIUM,
            summary=(
                f"{w.ref} (serves {', '.join(w.services)}): container {name} runs `{v.command}`: {v.reason}. "
                "On termination the application gets no SIGTERM and is killed after the grace period."
            ),
        )
        f.subject = _subject(w)
        f.evidence = [w.cite, Cite(w.obj.artifact, w.obj.line, f"container {name}: {v.command}")]
        f.fix = [
            "Start the application with exec, e.g.\n"
            f'  command: ["{v.shell or "sh"}", "-c", "exec <the application command>"]\n'
            "or run it under an init that forwards signals:\n"
            '  command: ["dumb-init", "--", "/start.sh"]',
            "Make sure the application handles SIGTERM: stop accepting, finish in-flight requests, exit.",
        ]
        yield f


def _prestop_seconds(c: dict[str, Any]) -> tuple[int | None, bool]:
    """(seconds the preStop hook sleeps if known, whether there is a preStop hook at all)."""
    lifecycle = c.get("lifecycle")
    hook = lifecycle.get("preStop") if isinstance(lifecycle, dict) else None
    if not isinstance(hook, dict):
        return None, False
    sleep = hook.get("sleep")
    if isinstance(sleep, dict) and isinstance(sleep.get("seconds"), int):
        return int(sleep["seconds"]), True
    cmd = (hook.get("exec") or {}).get("command") if isinstance(hook.get("exec"), dict) else None
    if isinstance(cmd, list):
        m = re.search(r"\bsleep\s+(\d+)\b", " ".join(str(x) for x in cmd))
        if m:
            return int(m.group(1)), True
    return None, True


def _stale_services(facts: Facts) -> set[str]:
    """Services whose rules still send traffic to backends that are gone (a rollout that hurts)."""
    if not facts.has(Kind.IPTABLES_SAVE):
        return set()
    ver = facts.verification
    if ver is None:
        return set()
    return {r.service for r in ver.results if r.stale_backends}


@check(
    "KP401",
    cause="no-prestop-delay",
    title="Pods stop serving before every kube-proxy has removed them",
    severity=Severity.INFO,
    needs=[Kind.K8S_OBJECTS],
)
def no_prestop(facts: Facts) -> Iterator[Finding]:
    """Workloads behind Services have no preStop delay, so a stopping Pod still receives new connections it refuses.

    Symptom: a few requests fail at every rollout or scale-down (connection refused or reset),
        although the application shuts down gracefully.
    Cause: kubelet sends SIGTERM as soon as the Pod is marked terminating, while each node's
        kube-proxy removes the Pod from its rules only at its next sync (and external load
        balancers later still). Connections keep arriving for a moment after the application
        stopped accepting.
    How it is detected: containers of workloads that back a Service without a
        `lifecycle.preStop` hook. Info by default (many applications tolerate it); a warning for
        a Service whose node rules still send traffic to backends that are gone (the
        verification's stale backends: the evidence of errors during a rollout).
    Fix: add a short preStop delay so the Pod keeps serving until the rules are updated:
        `lifecycle: {preStop: {exec: {command: ["sleep", "5"]}}}` (or `sleep: {seconds: 5}`
        on Kubernetes 1.29+), and keep terminationGracePeriodSeconds above the delay plus the
        shutdown time.
    References: https://kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/;
        https://learnk8s.io/graceful-shutdown
    """
    stale = _stale_services(facts)
    missing = [w for w in served_workloads(facts) if not any(_prestop_seconds(c)[1] for c in w.containers())]
    if not missing:
        return
    hurting = [w for w in missing if any(s in stale for s in w.services)]
    for group, sev in ((hurting, Severity.WARNING), ([w for w in missing if w not in hurting], Severity.INFO)):
        if not group:
            continue
        names = ", ".join(f"{w.ref} ({', '.join(w.services)})" for w in group[:8])
        f = start(
            facts,
            "KP401",
            [],
            confidence=Confidence.MEDIUM,
            severity=sev,
            summary=(
                f"{len(group)} workload(s) behind Services have no preStop delay: {names}"
                + (f" and {len(group) - 8} more" if len(group) > 8 else "")
                + (
                    ". The node's rules still send their Services' traffic to backends that are gone."
                    if sev == Severity.WARNING
                    else ". A stopping Pod may still get new connections for a moment."
                )
            ),
        )
        f.subject = _subject(group[0])
        f.evidence = [w.cite for w in group[:5]]
        f.fix = [
            "Add a preStop delay to each container that serves traffic:\n"
            f'  lifecycle:\n    preStop:\n      exec:\n        command: ["sleep", "{SUGGESTED_PRESTOP}"]\n'
            f"(Kubernetes 1.29+: `preStop: {{sleep: {{seconds: {SUGGESTED_PRESTOP}}}}}`), keeping "
            "terminationGracePeriodSeconds above it."
        ]
        yield f


@check(
    "KP402",
    cause="grace-period-too-short",
    title="preStop plus shutdown do not fit in terminationGracePeriodSeconds",
    severity=Severity.WARNING,
    needs=[Kind.K8S_OBJECTS],
)
def grace_period(facts: Facts) -> Iterator[Finding]:
    """The grace period ends before preStop and the application's shutdown are over: SIGKILL mid-drain.

    Symptom: Pods of the workload end with exit code 137 at every rollout; in-flight requests
        fail although preStop and SIGTERM handling are in place.
    Cause: terminationGracePeriodSeconds (default 30) counts from the start of preStop; SIGTERM
        comes only after preStop returns, so the application has what is left to drain.
    How it is detected: per container of a workload behind a Service, the preStop sleep
        (`exec: sleep N`, `sh -c "sleep N"`, or `sleep: {seconds: N}`) plus a drain allowance
        of 5 s (the least an application needs to finish in-flight requests) compared with
        terminationGracePeriodSeconds; more than it is a warning.
    Fix: raise terminationGracePeriodSeconds to at least preStop + the application's drain
        time + a margin, or shorten the preStop sleep.
    References: https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination
    """
    for w in served_workloads(facts):
        raw = w.pod_spec.get("terminationGracePeriodSeconds")
        grace = int(raw) if isinstance(raw, int) else DEFAULT_GRACE
        worst = max(
            ((s, str(c.get("name") or "?")) for c in w.containers() if (s := _prestop_seconds(c)[0]) is not None),
            default=None,
        )
        if worst is None or worst[0] + DRAIN_ALLOWANCE <= grace:
            continue
        sleep, name = worst
        need = sleep + DRAIN_ALLOWANCE + 10
        f = start(
            facts,
            "KP402",
            [],
            confidence=Confidence.HIGH,
            summary=(
                f"{w.ref} (serves {', '.join(w.services)}): container {name} sleeps {sleep} s in preStop, "
                f"and terminationGracePeriodSeconds is {grace}"
                + (" (the default)" if raw is None else "")
                + f": after preStop the application has {max(grace - sleep, 0)} s to drain "
                f"(at least {DRAIN_ALLOWANCE} s needed) before SIGKILL."
            ),
        )
        f.subject = _subject(w)
        f.evidence = [
            w.cite,
            Cite(w.obj.artifact, w.obj.line, f"container {name}: preStop sleep {sleep}; grace {grace}"),
        ]
        f.fix = [
            "Raise the grace period above preStop plus the drain time:\n"
            f"  spec:\n    terminationGracePeriodSeconds: {need}"
        ]
        yield f
