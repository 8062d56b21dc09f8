"""KP403: a container that takes its whole stop timeout to stop: PID 1 ignored SIGTERM and was killed.

The Pod spec is not always what users paste. ``time docker stop X`` printing ``real 0m10.4s``,
``time kubectl delete pod X`` taking 41 s, or dockerd's "failed to exit within 10 seconds of
signal 15 - using the force" say the same thing from the outside: the stop signal changed
nothing, and the runtime killed the process when its timeout ran out (parse/timing.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.checks.common import start, suspect
from kpdoctor.facts import Facts, containers_of
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.entrypoint import (
    SHELLS,
    Entrypoint,
    analyse,
    init_child,
    inline_script,
    script_as_printed,
    traps_term,
)
from kpdoctor.parse.k8s import pod_template
from kpdoctor.parse.shellwords import exec_parts, shell_split
from kpdoctor.parse.system import Process, parse_processes, read_processes
from kpdoctor.parse.timing import RuntimeStop, TimedStop, is_term, run_command, runtime_stops, timed_stops

FIX_EXEC = (
    "Make the container's PID 1 stop on SIGTERM: start the application with exec "
    "(`sh -c 'exec /app/server'`), or run it under an init that forwards signals "
    '(`docker run --init`, `tini`, `dumb-init`: `command: ["dumb-init", "--", "/start.sh"]`), '
    "or trap TERM in the script (`trap 'kill -TERM $pid' TERM; /app & pid=$!; wait $pid`)."
)
FIX_APP = "Make sure the application handles SIGTERM: stop accepting, finish in-flight requests, exit."


@check(
    "KP403",
    cause="sigterm-not-forwarded",
    title="A container stopped only when its stop timeout ran out: PID 1 did not exit on SIGTERM",
    severity=Severity.WARNING,
    needs=[Kind.STOP_TIMING, Kind.RUNTIME_LOG, Kind.PROCESSES],
)
def killed_at_timeout(facts: Facts) -> Iterator[Finding]:
    """Stopping a container takes exactly its stop timeout: SIGTERM did nothing and the process was killed.

    Symptom: `docker stop` takes 10 s (`real 0m10.4s`), `kubectl delete pod` takes the grace
        period (30 s by default) or more; Pods end with exit code 137; in-flight requests of a
        Service's backends break at every rollout; the runtime logs that it had to use SIGKILL.
    Cause: the container's PID 1 does not exit on SIGTERM. A shell as PID 1 (`sh -c 'while
        true; do sleep 1; done'`, `bash -c "sleep ..."`) has no TERM handler and does not pass
        the signal to its children, and the kernel drops signals that PID 1 does not handle; an
        application without a SIGTERM handler as PID 1 ignores it too. The runtime waits for its
        timeout, then kills.
    How it is detected: a timed stop (`time docker|podman|nerdctl stop|restart [-t N] X`,
        `time crictl stop -t N X`, `time kubectl delete pod X [--grace-period=N]`, also zsh's
        and GNU time's formats, kubectl's `pod "X" deleted` with a `real` time, or `date` read
        before and after the stop: `date; kubectl delete pod X && date`) that took
        the runtime's stop timeout (10 s for docker, podman and nerdctl unless `-t` says
        otherwise) or the grace period (30 s unless `--grace-period` says otherwise: the Pod's
        own is then assumed to be the default, and the summary says so) or longer; and the
        runtimes' own lines: dockerd "failed to exit within N seconds of signal 15 - using the
        force", podman "StopSignal SIGTERM failed to stop container X in N seconds, resorting
        to SIGKILL", containerd "An error occurs during waiting for container ... to be stopped
        ... stop timeout". When the command that started the container is in the same transcript
        (`docker run ... sh -c '...'`), or the deleted Pod's spec is in the evidence, its PID 1
        is named (high confidence when it is a shell that does not pass SIGTERM on); otherwise
        medium: an application that shuts down slower than the timeout looks the same.
        dockerd's "failed to exit within 10 seconds of kill" (not even SIGKILL worked) is not
        this. From a process list taken inside a container (`docker exec X ps`, `kubectl exec
        ... -- ps`, or a listing nothing says the place of whose PID 1 is a shell: a node's PID
        1 is its init) whose PID 1 is a shell while the application runs as its child: the
        shell did not `exec` it, and a shell as PID 1 passes SIGTERM on only when its script
        traps it. A `-c` script is on the line (ps joins the words): without a trap on TERM this
        is shown (high); a script file's content is not, so that is suspected (the script, or a
        timed stop, decides). The same from a container's PID 1 read while it runs (`kubectl
        exec POD -- cat /proc/1/cmdline`, its words NUL-separated or run together as a terminal
        shows them): a shell still PID 1 did not `exec` the application; it also names PID 1 for
        a timed deletion of a Pod of the same ReplicaSet. A listing whose PID 1 is an init that
        signals its child alone (tini and docker's --init unless `-g`, dumb-init
        --single-child: tini.c's `kill(kill_process_group ? -child_pid : child_pid, sig)`) and
        whose child is a shell still running the init's command beside the application (busybox
        `ps` shows a script run through its #! line as `{name} /bin/sh /script.sh`): SIGTERM
        kills the shell only, the init exits with it, and the application dies with the
        container, never asked to stop (suspected unless its `-c` script is on the line).
    Fix: start the application with `exec`, or under an init that forwards signals (`docker run
        --init`, tini, dumb-init), or trap TERM and forward it; make the application handle
        SIGTERM. If it does and simply needs longer, raise the timeout (`docker stop -t`,
        `--stop-timeout`, terminationGracePeriodSeconds).
    References: https://docs.docker.com/reference/cli/docker/container/stop/;
        https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination;
        https://github.com/kubernetes/kubernetes/pull/64015; https://github.com/krallin/tini
    """
    cited: set[tuple[str, int | None]] = set()  # a PID 1 a timed stop's finding names is not said again
    for a in facts.of(Kind.STOP_TIMING):
        killed = [s for s in timed_stops(a.read_text(), a.attrs.get("command")) if s.killed]
        if killed:
            timed = _timed(facts, a, max(killed, key=lambda s: s.seconds - s.command.timeout))
            cited.update((c.artifact, c.line) for c in timed.evidence)
            yield timed
    for a in facts.of(Kind.RUNTIME_LOG):
        hits = runtime_stops(a.read_text())
        if hits:
            yield _runtime(facts, a, hits)
    for a in facts.of(Kind.PROCESSES):
        # a container's listing: said so by the command that printed it, or, when nothing says
        # where it was taken, by its PID 1 being a shell (a node's PID 1 is its init)
        said = "scope" in a.attrs or "command" in a.attrs
        if a.attrs.get("format") == "cmdline":
            shell = _cmdline_pid1(facts, a) if a.attrs.get("scope") == "container" else None
            if shell is not None and not cited.intersection((c.artifact, c.line) for c in shell.evidence[1:]):
                yield shell
        else:
            listed = _shell_as_pid1(facts, a) if a.attrs.get("scope") == "container" or not said else None
            if (f := listed or _shell_under_init(facts, a)) is not None:
                yield f


def _container_pid1(a: Artifact) -> tuple[Process, Cite, str | None] | None:
    """A container's PID 1 read from ``/proc/1/cmdline`` when it is a shell that does not pass
    SIGTERM on (still PID 1 while the container runs, it did not `exec` what it started; a
    ``-c`` script that traps TERM does): the process, its line as printed (NULs lost or not),
    and its ``-c`` script (None: a script file, whose content is not shown)."""
    procs = read_processes(a.read_text(), a.first_line, a.attrs)
    pid1 = next((p for p in procs if p.pid == 1), None)
    if pid1 is None or pid1.program not in SHELLS:
        return None
    inline = inline_script(pid1.argv)
    if inline is not None and traps_term(inline):
        return None
    printed = a.read_text().splitlines()[pid1.line - a.first_line].strip()
    return pid1, Cite(a.name, pid1.line, printed), inline


def _exec_of(a: Artifact) -> tuple[str, str | None]:
    """The tool of the command that printed ``a`` and the Pod or container it ran in
    (``kubectl exec POD ...``: kubectl, POD)."""
    command = a.attrs.get("command", "")
    try:
        words = shell_split(command)
    except ValueError:
        words = command.split()
    tool = words[0].rsplit("/", 1)[-1] if words else ""
    return tool, exec_parts(words)[0]


def _cmdline_pid1(facts: Facts, a: Artifact) -> Finding | None:
    """A container's PID 1 is a shell, read from its /proc/1/cmdline while it runs: SIGTERM
    stops at the shell unless its script traps TERM (shown for a ``-c`` script; a script file's
    content is not, so that is suspected)."""
    got = _container_pid1(a)
    if got is None:
        return None
    pid1, printed, inline = got
    tool, target = _exec_of(a)
    kube = tool in ("kubectl", "k", "oc")
    where = (f"Pod {target}" if kube else f"container {target}") if target else "this container"
    f = start(facts, "KP403", [], confidence=Confidence.LOW, severity=Severity.WARNING)
    f.evidence = [Cite(a.name, max(a.first_line - 1, 1), a.attrs.get("command", "")), printed]
    f.subject = {"service": None, "workload": (f"Pod/{target}" if kube else target) if target else None}
    f.summary = (
        f"In {where}, PID 1 is `{_short(pid1.command)}` (its /proc/1/cmdline), a shell, while the container runs: "
        "the shell did not `exec` the application, so on a stop SIGTERM reaches the shell only, which passes it on "
        "only when its script traps TERM; otherwise the application is killed when the grace period runs out."
    )
    f.fix = [FIX_EXEC, FIX_APP]
    if inline is not None:
        f.confidence = Confidence.HIGH
        f.summary += " Its script, on that line, has no `trap` on TERM."
        return f
    script = next((w for w in pid1.argv[1:] if not w.startswith("-")), None)
    name = target or ("<pod>" if kube else "<container>")
    shown = f"kubectl exec {name} -- cat {script}" if kube else f"{tool or 'docker'} exec {name} cat {script}"
    stop = f"time kubectl delete pod {name}" if kube else f"time {tool or 'docker'} stop {name}"
    suspect(
        f,
        "a shell as PID 1 running a script file; whether the script traps TERM is not shown",
        ([shown] if script else []) + [stop],
    )
    decides = f" `cat {script}` inside the container decides (a `trap` on TERM clears it)" if script else ""
    f.summary += (decides or " The script decides") + (
        "; so does a timed deletion: one that takes the whole grace period means SIGTERM did nothing."
    )
    return f


def _shell_as_pid1(facts: Facts, a: Artifact) -> Finding | None:
    """A container's process list whose PID 1 is a shell with the application as its child
    (a script that did not `exec` it): the stop signal reaches the shell only, which passes it
    on only if the script traps it. What proves it (a timed stop, the script) is not shown."""
    procs = parse_processes(a.read_text(), a.first_line)
    pid1 = next((p for p in procs if p.pid == 1), None)
    if pid1 is None or pid1.program not in SHELLS:
        return None
    children = [p for p in procs if p.pid != 1 and p.program not in ("ps", *SHELLS) and p.ppid in (None, 1)]
    if not children:
        return None
    inline = script_as_printed(pid1.command)
    judged = analyse([pid1.argv[0], "-c", inline], []) if inline is not None else None
    if inline is not None and judged is not None and (judged.forwards is True or traps_term(inline)):
        return None  # a script that forwards the signal itself (or execs the application next)
    child = children[0]
    f = start(facts, "KP403", [], confidence=Confidence.LOW, severity=Severity.WARNING)
    f.evidence = [Cite(a.name, pid1.line, pid1.command), Cite(a.name, child.line, child.command)]
    f.summary = (
        f"In this container PID 1 is `{_short(pid1.command)}`, a shell, and the application runs as its child "
        f"(PID {child.pid}: `{_short(child.command)}`): the script did not `exec` it. On a stop, SIGTERM goes to "
        "PID 1 only; a shell passes it on only when the script traps TERM, so the application is killed when the "
        "stop timeout (the grace period) runs out, mid-request."
    )
    if judged is not None:  # the whole script is on the line, and no trap passes TERM on: shown, not suspected
        f.confidence = Confidence.HIGH
        f.summary += " Its script, on the line above, has no `trap` on TERM."
        f.fix = [FIX_EXEC, FIX_APP]
        return f
    _script_decides(
        f,
        pid1.argv,
        "a shell as PID 1 with the application as its child; whether the script traps TERM is not shown",
        "; so does a timed stop: one that takes the whole timeout means SIGTERM did nothing.",
    )
    f.fix = [FIX_EXEC, FIX_APP]
    return f


def _script_decides(f: Finding, argv: list[str], why: str, then: str) -> None:
    """A shell running a script file: suspected, decided by the script (its `exec` of the
    application, or a `trap` on TERM, clears it) or by a timed stop."""
    script = next((w for w in argv[1:] if not w.startswith("-")), None)
    suspect(f, why, ([f"cat {script}"] if script else []) + ["time docker stop <container>"])
    f.summary += (
        f" `cat {script}` inside the container decides (an `exec` of the application, or a `trap` on TERM, clears it)"
        if script
        else " The script decides"
    ) + then


def _shell_under_init(facts: Facts, a: Artifact) -> Finding | None:
    """A container's process list whose PID 1 is an init that passes a stop signal to its child
    alone (tini, docker's --init; dumb-init --single-child), and that child is a shell still
    running the init's command while the application runs beside it: the script did not `exec`
    the application. SIGTERM reaches the shell, which dies of it (a shell that is not PID 1 keeps
    the default action) unless its script traps TERM; the init then exits with its child and the
    application is killed with the container, never asked to shut down."""
    procs = parse_processes(a.read_text(), a.first_line)
    pid1 = next((p for p in procs if p.pid == 1), None)
    child = init_child(pid1.argv) if pid1 is not None else None
    if pid1 is None or not child:
        return None
    shells = [p for p in procs if p.pid != 1 and p.program in SHELLS and p.ppid in (None, 1) and _runs(p, child)]
    if not shells:
        return None
    shell = shells[0]
    inline = inline_script(shell.argv)
    judged = analyse(shell.argv, []) if inline is not None else None
    if inline is not None and (traps_term(inline) or judged is None or judged.forwards is not False):
        return None  # a -c script that passes TERM on (or execs the application), or one not judged
    apps = [p for p in procs if p.pid not in (1, shell.pid) and p.program not in ("ps", *SHELLS)]
    if not apps:
        return None
    app = apps[0]
    f = start(facts, "KP403", [], confidence=Confidence.LOW, severity=Severity.WARNING)
    f.evidence = [Cite(a.name, p.line, p.command) for p in (pid1, shell, app)]
    f.summary = (
        f"In this container PID 1 is `{_short(pid1.command)}`, which passes a stop signal to its child alone, and "
        f"that child is a shell still running (PID {shell.pid}: `{_short(shell.command)}`) beside the application "
        f"(PID {app.pid}: `{_short(app.command)}`): the script did not `exec` it. On a stop SIGTERM reaches the "
        f"shell only, which dies of it unless the script traps TERM; {pid1.program} then exits with it and the "
        "application is killed with the container, never asked to shut down."
    )
    f.fix = [
        "Start the application with exec at the end of the script (`exec node app.js`), or let the init signal "
        "the whole process group (`tini -g`, dumb-init without --single-child).",
        FIX_APP,
    ]
    if inline is not None:  # the whole script is on the line, and it does not pass TERM on
        f.confidence = Confidence.HIGH
        f.summary += " Its script, on that line, has no `trap` on TERM."
        return f
    _script_decides(
        f,
        shell.argv,
        "an init that signals its child alone, whose child is a shell running a script file beside the application; "
        "whether the script traps TERM is not shown",
        ".",
    )
    return f


def _runs(shell: Process, child: list[str]) -> bool:
    """Is ``shell`` the init's child: the command the init started (``tini -- /entrypoint.sh`` runs
    ``/bin/sh /entrypoint.sh`` through its #! line), or that command itself a shell's?"""
    if shell.argv == child:
        return True
    target = child[0].rsplit("/", 1)[-1]
    return any(w.rsplit("/", 1)[-1] == target for w in shell.argv[1:] if not w.startswith("-"))


def _pid1(facts: Facts, a: Artifact, stop: TimedStop) -> tuple[Entrypoint, Cite] | None:
    """What runs as PID 1 in the stopped container, when the evidence says: the transcript's
    `docker run`, or the deleted Pod's spec."""
    started = a.attrs.get("started")
    if started:
        run = run_command(started)
        if run is not None:
            line = int(a.attrs.get("started_line") or a.first_line)
            cite = Cite(a.name, line, started)
            if run.init:
                return Entrypoint(True, None, "--init runs an init as PID 1 that forwards signals", started), cite
            verdict = analyse(run.command, [])
            return (verdict, cite) if verdict is not None else None
    if stop.command.tool == "kubectl":
        # a shell read as PID 1 of the same Pod, or of a Pod of the same ReplicaSet (the same
        # containers), from its /proc/1/cmdline while it ran
        templates = {pod_template(t) or t for t in stop.command.targets}
        for other in facts.of(Kind.PROCESSES):
            target = _exec_of(other)[1] if other.attrs.get("format") == "cmdline" else None
            got = _container_pid1(other) if target and (pod_template(target) or target) in templates else None
            if got is not None:
                shell, cite, inline = got
                said = "" if inline is None else " and no trap on TERM in its script"
                reason = (
                    f"a shell, read as PID 1 of Pod {target} while it ran: it did not `exec` the application"
                    f"{said}, so SIGTERM stops at the shell"
                )
                return Entrypoint(False, shell.program, reason, shell.command), cite
        for pod in facts.objects.of("Pod"):
            if pod.name not in stop.command.targets:
                continue
            for c in containers_of(pod):
                cmd = c.get("command")
                args = c.get("args")
                verdict = analyse(
                    [str(x) for x in cmd] if isinstance(cmd, list) else [],
                    [str(x) for x in args] if isinstance(args, list) else [],
                )
                if verdict is not None:
                    return verdict, Cite(
                        pod.artifact, pod.line, f"{pod.ref} container {c.get('name')}: {verdict.command}"
                    )
    return None


def _timed(facts: Facts, a: Artifact, stop: TimedStop) -> Finding:
    cmd = stop.command
    what = f"`{cmd.text}`" if cmd.text else f"deleting Pod {', '.join(cmd.targets) or '?'}"
    pid1 = _pid1(facts, a, stop)
    over = stop.seconds - cmd.timeout
    took = f"took {stop.seconds:g} s, {cmd.what}" + (
        f" plus {over:.1f} s" if over >= 0.05 else "" if over >= 0 else f" (just under it: {-over:.1f} s)"
    )
    if stop.start_line is not None:
        took += " (timed by the clock before and after it" + (", to the second)" if stop.resolution else ")")
    summary = f"{what} {took}: the process did not exit on SIGTERM and was killed when the time ran out."
    confidence = Confidence.MEDIUM
    if pid1 is not None:
        verdict, _ = pid1
        if verdict.forwards is False:
            confidence = Confidence.HIGH
            summary += f" PID 1 is `{_short(verdict.command)}`: {verdict.reason}."
        elif verdict.forwards is None:
            summary += f" PID 1 is `{_short(verdict.command)}`: {verdict.reason}."
        else:
            summary += (
                f" PID 1 is `{_short(verdict.command)}` ({verdict.reason}): it has no SIGTERM handler, "
                "and as PID 1 it ignores signals it does not handle."
            )
    else:
        summary += (
            " Either PID 1 ignores SIGTERM (a shell, or an application without a handler) "
            "or it shuts down slower than that."
        )
    f = start(facts, "KP403", [], confidence=confidence, summary=summary)
    f.subject = {
        "service": None,
        "workload": (f"Pod/{cmd.targets[0]}" if cmd.tool == "kubectl" else cmd.targets[0]) if cmd.targets else None,
    }
    if stop.command_line is not None and stop.command_line != stop.line:
        f.evidence.append(Cite(a.name, a.first_line + stop.command_line, stop.command_text))
    elif a.attrs.get("command"):
        f.evidence.append(Cite(a.name, max(a.first_line - 1, 1), a.attrs["command"]))
    if stop.start_line is not None:
        f.evidence.append(Cite(a.name, a.first_line + stop.start_line, stop.start_text))
    f.evidence.append(Cite(a.name, a.first_line + stop.line, stop.text))
    f.evidence.sort(key=lambda c: c.line or 0)
    if pid1 is not None:
        f.evidence.insert(0, pid1[1])
    f.fix = [FIX_EXEC, FIX_APP]
    return f


def _runtime(facts: Facts, a: Artifact, hits: list[RuntimeStop]) -> Finding:
    first, last = hits[0], hits[-1]
    containers = sorted({h.container[:12] for h in hits if h.container})
    names = ", ".join(containers[:5]) + (f" and {len(containers) - 5} more" if len(containers) > 5 else "")
    sig = "SIGTERM" if all(is_term(h.signal) for h in hits) else "their stop signal"
    within = f" within {first.seconds:g} s" if first.seconds is not None else " within the stop timeout"
    f = start(
        facts,
        "KP403",
        [],
        confidence=Confidence.MEDIUM,
        summary=(
            f"{first.runtime} had to kill {len(hits)} container stop(s)"
            + (f" ({names})" if names else "")
            + f": they did not exit on {sig}{within}. Their PID 1 ignores the signal (a shell, or an "
            "application without a handler) or shuts down slower than the timeout."
        ),
    )
    f.occurrences = len(hits)
    f.evidence = [Cite(a.name, a.first_line + h.line, h.text) for h in ([first, last] if len(hits) > 1 else [first])]
    f.fix = [FIX_EXEC, FIX_APP]
    return f


def _short(text: str, limit: int = 100) -> str:
    t = " ".join(text.split())
    return t if len(t) <= limit else t[: limit - 3] + "..."
