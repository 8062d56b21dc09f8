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
from dataclasses import dataclass
from typing import Any

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.checks.common import start
from kpdoctor.dataplane.session import Verified
from kpdoctor.facts import Facts
from kpdoctor.facts.workloads import Served, is_fragment, served_workloads
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.entrypoint import SHELLS, analyse

DEFAULT_GRACE = 30  # terminationGracePeriodSeconds when unset
DRAIN_ALLOWANCE = 5  # seconds an application needs after SIGTERM to finish in-flight requests
SUGGESTED_PRESTOP = 5  # seed 004: sleep 5, enough for kube-proxy (and load balancers) to stop sending


NO_SERVICE_NOTE = (
    " No Service object was given, so whether it backs a Service is not known: it is taken as "
    "serving because it declares a port, a readiness probe or a preStop hook (add the Services to confirm)."
)
_LOWER = {Confidence.HIGH: Confidence.MEDIUM, Confidence.MEDIUM: Confidence.LOW, Confidence.LOW: Confidence.LOW}


def _subject(w: Served) -> dict[str, str | None]:
    return {"service": w.services[0] if w.services else None, "workload": w.ref}


def _confidence(w: Served, sure: Confidence) -> Confidence:
    """One step lower when the workload is only assumed to serve (no Service in the evidence)."""
    return _LOWER[sure] if w.assumed else sure


def _serving(w: Served) -> str:
    return f"{w.ref} ({w.serves})"


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
        evidence; with no Service in the evidence at all, the workloads that declare a port, a
        readiness probe or a preStop hook, one confidence step lower, saying so). A shell with
        `-c` whose script backgrounds the application without a `trap ... TERM` and `wait`,
        pipes it, or ends with another command is a warning (high confidence). `sh -c "app"`
        without `exec` is a warning with medium confidence: Debian's and Ubuntu's dash stays
        PID 1, busybox ash and bash exec the command; bash execs the last command of a list
        only from 5.1. Images whose ENTRYPOINT is a script (not in the
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
            confidence=_confidence(w, Confidence.HIGH if certain else Confidence.MEDIUM),
            summary=(
                f"{_serving(w)}: container {name} runs `{v.command}`: {v.reason}. "
                "On termination the application gets no SIGTERM and is killed after the grace period."
                + (NO_SERVICE_NOTE if w.assumed else "")
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


@dataclass(frozen=True, slots=True)
class PreStop:
    """What a container's preStop hook does to the time before SIGTERM."""

    present: bool | None  # None: a pasted fragment that leaves lifecycle out (unknown)
    seconds: float | None = None  # the sleeps added up, when that is all it waits
    loop: str | None = None  # an unbounded wait (`while ...; do sleep 5; done`): only the grace period ends it
    text: str = ""  # the hook as written, for citing
    fails: str | None = None  # the hook fails at once (a `sleep` given words that are not durations)


_SLEEP = lazy_re.compile(r"(?<![\w-])sleep\s+((?:[0-9]+(?:\.[0-9]+)?[smhd]?(?=[\s;&|)]|$)\s*)+)")
_SLEEP_FOREVER = lazy_re.compile(r"(?<![\w-])sleep\s+(infinity|inf)\b")
_LOOP = lazy_re.compile(r"(?<![\w-])(while|until)\s")
# what bounds a loop: a `timeout N` wrapper, or a counter compared in the loop's condition
_BOUNDED = lazy_re.compile(r"(?:^|[;&|(\s])timeout\s+[0-9]|-(?:lt|le|gt|ge)\s|\(\(.*[<>]")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "": 1}
_LOOP_CONDITION = lazy_re.compile(r"(?<![\w-])(?:while|until)\s+(.*?)\s*;?\s*do\b", re.S)
# a loop that waits for a process to be gone (`nginx -s quit; while killall -0 nginx; do sleep 1;
# done`, the Kubernetes docs' example) is the application's own shutdown, started by the hook
_WAITS_FOR_EXIT = lazy_re.compile(r"(?<![\w-])(?:kill|killall|pkill)\s+-0\b|(?<![\w-])(?:pgrep|pidof|ps)\b|/proc/")


def _sleep_seconds(words: str) -> float:
    """GNU/busybox ``sleep 1m 30s``: every argument added up."""
    total = 0.0
    for m in re.finditer(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)", words):
        total += float(m.group(1)) * _UNIT[m.group(2)]
    return total


def prestop(c: dict[str, Any], fragment: bool = False) -> PreStop:
    """The preStop hook of a container: present, how long its sleeps add up to, or an unbounded loop.

    ``exec`` hooks are read as a shell script when they run a shell with ``-c`` (``sh -c "sleep 5;
    nginx -s quit; sleep 10"`` waits 15 s), else as one command line (``["sleep", "5"]``); the
    ``sleep: {seconds: N}`` action (1.29+) is N. A ``while``/``until`` loop without a bound waits
    until its condition holds, however long: only the grace period stops it (unless it waits for
    a process to exit: then the hook already stopped the application and this is its shutdown).
    """
    lifecycle = c.get("lifecycle")
    if fragment and "lifecycle" not in c:
        return PreStop(None)
    hook = lifecycle.get("preStop") if isinstance(lifecycle, dict) else None
    if not isinstance(hook, dict):
        return PreStop(False)
    sleep = hook.get("sleep")
    if isinstance(sleep, dict) and isinstance(sleep.get("seconds"), int):
        return PreStop(True, float(sleep["seconds"]), text=f"sleep: {{seconds: {sleep['seconds']}}}")
    ex = hook.get("exec")
    if not isinstance(ex, dict) and isinstance(hook.get("command"), list):
        ex = {"command": hook["command"]}  # a paste that lost an indent: `exec:` and `command:` side by side
    cmd = ex.get("command") if isinstance(ex, dict) else None
    if not isinstance(cmd, list) or not cmd:
        return PreStop(True)
    argv = [str(x) for x in cmd]
    shell = argv[0].rsplit("/", 1)[-1] in SHELLS
    script = argv[-1] if shell and len(argv) >= 3 and argv[-2].startswith("-") and "c" in argv[-2] else " ".join(argv)
    return judge_script(script, " ".join(argv))


def script_file(argv: list[str]) -> str | None:
    """The file name of the script a hook runs (``["/bin/sh", "/hooks/pre-stop.sh"]`` ->
    ``pre-stop.sh``), or None when it runs none."""
    for word in argv[1:] if argv and argv[0].rsplit("/", 1)[-1] in SHELLS else argv[:1]:
        if (not word.startswith("-") and "/" in word) or word.endswith(".sh"):
            return word.rsplit("/", 1)[-1]
    return None


def judge_script(script: str, text: str) -> PreStop:
    """What a preStop script does to the time before SIGTERM (see :func:`prestop`). Comment lines
    are left out (a shebang, "# wait for the drain")."""
    script = "\n".join(ln for ln in script.splitlines() if not ln.lstrip().startswith("#"))
    conditions = _LOOP_CONDITION.findall(script)
    if conditions and all(_WAITS_FOR_EXIT.search(c) for c in conditions):
        return PreStop(True, text=text)  # it stopped the application and waits for it to exit
    if _LOOP.search(script) and not _BOUNDED.search(script):
        return PreStop(True, loop=script.strip(), text=text)
    if _SLEEP_FOREVER.search(script):
        return PreStop(True, loop=script.strip(), text=text)
    counted = _for_loops(script)
    if counted is not None:
        return PreStop(True, counted, text=text)
    if _LOOP.search(script) or re.search(r"(?<![\w-])for\s", script):
        return PreStop(True, text=text)  # a bounded loop: how long it runs is not read
    broken = _broken_sleep(script)
    if broken is not None:
        return PreStop(True, 0.0, text=text, fails=broken)
    sleeps = _SLEEP.findall(script)
    if not sleeps:
        return PreStop(True, text=text)
    return PreStop(True, sum(_sleep_seconds(w) for w in sleeps), text=text)


_SIMPLE = lazy_re.compile(r"[^;&|\n]+")
_NOT_A_DURATION = lazy_re.compile(r"^(?:[/A-Za-z]|-)(?!nf(?:inity)?$)")


def _broken_sleep(script: str) -> str | None:
    """A ``sleep`` given a word that is no duration (``sleep 20 /usr/sbin/nginx -s quit``, what a
    YAML folded scalar ``>`` makes of two lines): GNU sleep then prints "invalid time interval"
    (or "invalid option" for a word starting with -) and exits at once, so the hook waits nothing
    and the rest never runs. The command,
    or None (a variable, ``$DELAY``, is not judged)."""
    for m in _SIMPLE.finditer(script):
        words = m.group(0).split()
        if len(words) < 2 or words[0].rsplit("/", 1)[-1] != "sleep":
            continue
        if any(_NOT_A_DURATION.match(w) and w not in ("inf", "infinity") for w in words[1:]):
            return " ".join(words)
    return None


_FOR = lazy_re.compile(r"(?<![\w-])for\s+\w+\s+in\s+([^;\n]*?)\s*(?:;|\n)\s*do\b(.*?)(?<![\w-])done\b", re.S)
_SEQ = lazy_re.compile(r"^(?:\$\(\s*seq\s+(?:1\s+)?(\d+)\s*\)|`seq\s+(?:1\s+)?(\d+)`|\{1\.\.(\d+)\})$")


def _for_loops(script: str) -> float | None:
    """The sleeps of a script whose loops are ``for`` over a literal list (``for i in 1 2 3``,
    ``$(seq 10)``, ``{1..10}``): each loop's sleeps times its iterations, plus the sleeps outside
    loops. None when the script has no such loop, or another loop."""
    loops = list(_FOR.finditer(script))
    if not loops or _LOOP.search(_FOR.sub(" ", script)):
        return None
    total = 0.0
    for m in loops:
        words = m.group(1).split()
        seq = _SEQ.match(m.group(1).strip())
        n = int(next(g for g in seq.groups() if g)) if seq else len(words)
        if not seq and any(w.startswith(("$", "`")) for w in words):
            return None  # iterates over something computed: how many times is not known
        total += n * sum(_sleep_seconds(w) for w in _SLEEP.findall(m.group(2)))
    rest = _FOR.sub(" ", script)
    return total + sum(_sleep_seconds(w) for w in _SLEEP.findall(rest))


def _stale_services(facts: Facts, verified: Verified) -> set[str]:
    """Services whose rules still send traffic to backends that are gone (a rollout that hurts)."""
    if not facts.has(Kind.IPTABLES_SAVE):
        return set()
    ver = verified.verification
    if ver is None:
        return set()
    return {r.service for r in ver.problems() if r.stale_backends}


@check(
    "KP401",
    cause="no-prestop-delay",
    title="Pods stop serving before every kube-proxy has removed them",
    severity=Severity.INFO,
    needs=[Kind.K8S_OBJECTS],
    reads_verification=True,
)
def no_prestop(facts: Facts, verified: Verified) -> Iterator[Finding]:
    """Workloads behind Services have no preStop delay, so a stopping Pod still receives new connections it refuses.

    Symptom: a few requests fail at every rollout or scale-down (connection refused or reset),
        although the application shuts down gracefully.
    Cause: kubelet sends SIGTERM as soon as the Pod is marked terminating, while each node's
        kube-proxy removes the Pod from its rules only at its next sync (and external load
        balancers later still). Connections keep arriving for a moment after the application
        stopped accepting.
    How it is detected: containers of workloads that back a Service (without Services in the
        evidence: workloads that look like servers, at low confidence) without a
        `lifecycle.preStop` hook, or one that fails at once (a `sleep` given words that are no
        duration: `sleep 20 /usr/sbin/nginx -s quit`, what a YAML folded scalar makes of two
        lines); a pasted fragment that leaves `lifecycle` out is not judged.
        Info by default (many applications tolerate it); a warning for
        a Service whose node rules still send traffic to backends that are gone (the
        verification's stale backends: the evidence of errors during a rollout).
    Fix: add a short preStop delay so the Pod keeps serving until the rules are updated:
        `lifecycle: {preStop: {exec: {command: ["sleep", "5"]}}}` (or `sleep: {seconds: 5}`
        on Kubernetes 1.29+), and keep terminationGracePeriodSeconds above the delay plus the
        shutdown time.
    References: https://kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/;
        https://learnk8s.io/graceful-shutdown
    """
    stale = _stale_services(facts, verified)
    missing = []
    for w in served_workloads(facts):
        hooks = [prestop(c, is_fragment(w.obj)) for c in w.containers()]
        # a fragment without lifecycle: unknown; a hook that fails at once waits nothing
        if hooks and all(h.present is False or h.fails is not None for h in hooks):
            missing.append(w)
    if not missing:
        return
    hurting = [w for w in missing if any(s in stale for s in w.services)]
    for group, sev in ((hurting, Severity.WARNING), ([w for w in missing if w not in hurting], Severity.INFO)):
        if not group:
            continue
        names = ", ".join(f"{w.ref} ({', '.join(w.services) or 'no Service given'})" for w in group[:8])
        assumed = all(w.assumed for w in group)
        f = start(
            facts,
            "KP401",
            [],
            confidence=Confidence.LOW if assumed else Confidence.MEDIUM,
            severity=sev,
            summary=(
                f"{len(group)} workload(s) {'that look like servers' if assumed else 'behind Services'} "
                f"have no preStop delay: {names}"
                + (f" and {len(group) - 8} more" if len(group) > 8 else "")
                + (
                    ". The node's rules still send their Services' traffic to backends that are gone."
                    if sev == Severity.WARNING
                    else ". A stopping Pod may still get new connections for a moment."
                )
                + (NO_SERVICE_NOTE if assumed else "")
            ),
        )
        failing = [h.fails for w in group for c in w.containers() if (h := prestop(c, is_fragment(w.obj))).fails]
        if failing:
            f.summary += (
                f" Its preStop hook fails at once: `{failing[0]}` gives sleep words that are no duration, so sleep "
                "exits at once with an error (GNU sleep: \"invalid time interval\", or \"invalid option\" for a "
                "word starting with -) without waiting (a YAML folded scalar `>` joins the "
                "script's lines into one command: use `|`, or separate the commands with `;`)."
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
    needs=[Kind.K8S_OBJECTS, Kind.PRESTOP_SCRIPT],
)
def grace_period(facts: Facts) -> Iterator[Finding]:
    """The grace period ends before preStop and the application's shutdown are over: SIGKILL mid-drain.

    Symptom: Pods of the workload end with exit code 137 at every rollout; in-flight requests
        fail although preStop and SIGTERM handling are in place.
    Cause: terminationGracePeriodSeconds (default 30) counts from the start of preStop; SIGTERM
        comes only after preStop returns, so the application has what is left to drain.
    How it is detected: per container of a workload behind a Service (without Services in the
        evidence: one that looks like a server, one confidence step lower), the preStop sleeps
        added up (`exec: sleep N`, `sh -c "sleep 5; nginx -s quit; sleep 10"` = 15 s,
        `sleep 1m 30s`, or `sleep: {seconds: N}`) plus a drain allowance of 5 s (the least an
        application needs to finish in-flight requests) compared with
        terminationGracePeriodSeconds; more than it is a warning. A preStop that loops until a
        condition holds (`while ! curl .../drain; do sleep 5; done`, `sleep infinity`) with no
        bound (`timeout N`, a counter) is a warning too: only the grace period ends it, and then
        with SIGKILL (a loop that waits for a process to exit, `nginx -s quit; while killall -0
        nginx; do sleep 1; done`, is the application's own shutdown and is not). A hook that runs
        a script file (`["/bin/sh", "/hooks/pre-stop.sh"]`) is judged by that script when it is
        given (a file whose name, or the `cat` that showed it, says preStop); a script given
        without its Pod is judged against the default grace period, said to be assumed (an
        unbounded wait: medium confidence; sleeps longer than the default: low). A YAML fragment
        without apiVersion/kind (a `lifecycle:` block, a `containers:` list) that leaves
        terminationGracePeriodSeconds out is judged against the default, one confidence step
        lower, and says so.
    Fix: raise terminationGracePeriodSeconds to at least preStop + the application's drain
        time + a margin, or shorten the preStop sleep.
    References: https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination
    """
    scripts = _scripts(facts)
    used: set[str] = set()
    for w in served_workloads(facts):
        raw = w.pod_spec.get("terminationGracePeriodSeconds")
        grace = int(raw) if isinstance(raw, int) else DEFAULT_GRACE
        unknown = raw is None and is_fragment(w.obj)  # a fragment that leaves the grace period out
        how = ": not in the fragment, the default assumed" if unknown else " (the default)" if raw is None else ""
        hooks = []
        for c in w.containers():
            hook, cite = prestop(c), Cite(w.obj.artifact, w.obj.line, "")
            ran = script_file(_hook_argv(c))
            if hook.seconds is None and hook.loop is None and ran in scripts:
                _, hook, cite = scripts[ran]  # the script the hook runs, given as its own file
                used.add(ran)
            hooks.append((hook, f"container {c['name']}" if c.get("name") else "the container", cite))
        looping = next(((p, n, c) for p, n, c in hooks if p.loop is not None), None)
        worst = max(
            ((p.seconds, n, p, c) for p, n, c in hooks if p.seconds is not None), default=None, key=lambda t: t[0]
        )
        if looping is not None:
            hook, name, cite = looping
            f = start(
                facts,
                "KP402",
                [],
                confidence=_confidence(w, Confidence.MEDIUM),
                summary=(
                    f"{_serving(w)}: {name}'s preStop waits without a bound (`{_short(hook.loop)}`): "
                    f"whenever its condition takes longer than terminationGracePeriodSeconds ({grace}"
                    + (", the default" if raw is None and not unknown else how if unknown else "")
                    + ") the kubelet kills the container there, and SIGTERM, which comes only after preStop "
                    "returns, never reaches the application: SIGKILL mid-drain."
                    + (NO_SERVICE_NOTE if w.assumed else "")
                ),
            )
            f.subject = _subject(w)
            f.evidence = [w.cite, Cite(w.obj.artifact, w.obj.line, f"{name}: preStop {_short(hook.text)}")]
            if cite.text:
                f.evidence.append(cite)
            f.fix = [_bound_fix(grace)]
            yield f
            continue
        if worst is None or worst[0] + DRAIN_ALLOWANCE <= grace:
            continue
        seconds, name, hook, cite = worst
        sleep = int(seconds + 0.999)
        need = sleep + DRAIN_ALLOWANCE + 10
        several = len(_SLEEP.findall(hook.text)) > 1
        sure = _confidence(w, Confidence.HIGH)
        f = start(
            facts,
            "KP402",
            [],
            confidence=_LOWER[sure] if unknown else sure,
            summary=(
                f"{_serving(w)}: {name} sleeps {sleep} s in preStop"
                + (f" (its sleeps added up: `{_short(hook.text)}`)" if several else "")
                + f", and terminationGracePeriodSeconds is {grace}"
                + (" (not in the fragment: the default, assumed)" if unknown else how)
                + f": after preStop the application has {max(grace - sleep, 0)} s to drain "
                f"(at least {DRAIN_ALLOWANCE} s needed) before SIGKILL." + (NO_SERVICE_NOTE if w.assumed else "")
            ),
        )
        f.subject = _subject(w)
        f.evidence = [
            w.cite,
            Cite(w.obj.artifact, w.obj.line, f"{name}: preStop sleep {sleep}; grace {grace}"),
            *([cite] if cite.text else []),
        ]
        f.fix = [
            "Raise the grace period above preStop plus the drain time:\n"
            f"  spec:\n    terminationGracePeriodSeconds: {need}"
        ]
        yield f
    for ran, (art, hook, cite) in scripts.items():
        if ran not in used:
            lone = _lone_script(facts, art, hook, cite)
            if lone is not None:
                yield lone


def _bound_fix(grace: int) -> str:
    return (
        "Bound the preStop wait below the grace period, leaving time for the application's own shutdown, "
        f"e.g. `timeout {max(grace - DRAIN_ALLOWANCE - 10, 5)} sh -c '<the loop>'`; or raise "
        "terminationGracePeriodSeconds above the longest drain plus the shutdown time."
    )


def _hook_argv(c: dict[str, Any]) -> list[str]:
    lifecycle = c.get("lifecycle")
    hook = lifecycle.get("preStop") if isinstance(lifecycle, dict) else None
    ex = hook.get("exec") if isinstance(hook, dict) else None
    cmd = ex.get("command") if isinstance(ex, dict) else None
    return [str(x) for x in cmd] if isinstance(cmd, list) else []


def _scripts(facts: Facts) -> dict[str, tuple[Artifact, PreStop, Cite]]:
    """preStop scripts given as files (or shown with ``cat``), by file name: each read, with the
    line that decides it (the loop, the longest sleep) to cite."""
    out: dict[str, tuple[Artifact, PreStop, Cite]] = {}
    for a in facts.of(Kind.PRESTOP_SCRIPT):
        command = a.attrs.get("command", "")
        name = (command.split()[-1] if command else a.name).rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        text = a.read_text()
        hook = judge_script(text, _short(text))
        pick = _LOOP if hook.loop is not None else _SLEEP
        lines = text.splitlines()
        at = next((i for i, ln in enumerate(lines) if pick.search(ln) or _SLEEP_FOREVER.search(ln)), 0)
        cite = Cite(a.name, a.first_line + at, lines[at].strip() if lines else "")
        out.setdefault(name, (a, hook, cite))
    return out


def _lone_script(facts: Facts, art: Artifact, hook: PreStop, cite: Cite) -> Finding | None:
    """A preStop script given without the Pod that runs it: the grace period is not known, and
    the default is assumed (said so)."""
    where = f"The preStop script {art.name}"
    said = "not given: the default, 30 s, assumed"
    if hook.loop is not None:
        f = start(
            facts,
            "KP402",
            [],
            confidence=Confidence.MEDIUM,
            summary=(
                f"{where} waits without a bound (`{_short(hook.loop)}`): nothing but the grace period "
                f"(terminationGracePeriodSeconds, {said}) ends it, and then the kubelet kills the container "
                "there; SIGTERM, which comes only after preStop returns, never reaches the application: "
                "SIGKILL mid-drain whenever the wait outlasts it."
            ),
        )
        f.fix = [_bound_fix(DEFAULT_GRACE)]
    elif hook.seconds is not None and hook.seconds + DRAIN_ALLOWANCE > DEFAULT_GRACE:
        sleep = int(hook.seconds + 0.999)
        f = start(
            facts,
            "KP402",
            [],
            confidence=Confidence.LOW,
            summary=(
                f"{where} sleeps {sleep} s, and terminationGracePeriodSeconds is {said}: after preStop the "
                f"application would have {max(DEFAULT_GRACE - sleep, 0)} s to drain (at least {DRAIN_ALLOWANCE} s "
                "needed) before SIGKILL. Give the Pod spec to confirm."
            ),
        )
        f.fix = [
            "Raise the grace period above preStop plus the drain time:\n"
            f"  spec:\n    terminationGracePeriodSeconds: {sleep + DRAIN_ALLOWANCE + 10}"
        ]
    else:
        return None
    f.subject = {"service": None, "workload": None}
    f.evidence = [cite]
    return f


def _short(text: str | None, limit: int = 100) -> str:
    t = " ".join((text or "").split())
    return t if len(t) <= limit else t[: limit - 3] + "..."
