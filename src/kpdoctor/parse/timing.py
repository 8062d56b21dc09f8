"""How long a container took to stop, and the runtimes' own word that it had to be killed.

A process that exits on SIGTERM stops a container in well under a second. One that ignores it
(a shell as PID 1 without a TERM trap, an application without a handler: PID 1 ignores every
signal it does not handle) is killed only when the stop timeout runs out, so the stop takes the
whole timeout: ``time docker stop X`` prints ``real 0m10.4s`` (docker, podman and nerdctl wait
10 s unless ``-t/--time N`` says otherwise), ``time kubectl delete pod X`` takes the Pod's grace
period (30 s unless set) or more (``kubectl delete`` waits until the Pod is gone). A stop timed
with ``date`` before and after it (``date; kubectl delete pod X && date``) says the same, to the
second. Runtimes also say so in their logs:

* dockerd: ``Container 6d62... failed to exit within 10 seconds of signal 15 - using the force``
  (since 20.10: ``msg="Container failed to exit within 10s of signal 15 - using the force"
  container=1ab1...``);
* podman: ``StopSignal SIGTERM failed to stop container redlib in 10 seconds, resorting to SIGKILL``;
* containerd (CRI): ``An error occurs during waiting for container "99a9..." to be stopped``
  ``error="wait container \\"99a9...\\" stop timeout"``, then ``Kill container "99a9..."``.

dockerd's ``failed to exit within 10 seconds of kill - trying direct SIGKILL`` is another story
(the container did not die even of the kill) and is not read as a stop timeout.

Nothing here raises on bad input; line numbers are 0-based offsets into the text given.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.parse.entrypoint import commands
from kpdoctor.parse.shellwords import COMMAND_WRAPPERS, PROMPT, shell_split, unwrapped

RUNTIME_STOP_DEFAULT = 10.0  # docker, podman, nerdctl: seconds between the stop signal and SIGKILL
POD_GRACE_DEFAULT = 30.0  # terminationGracePeriodSeconds when the Pod does not set it
_RUNTIMES = frozenset({"docker", "podman", "nerdctl"})
_WRAPPERS = COMMAND_WRAPPERS | {"-p"}  # `time -p docker stop x`
MAX_LINES = 400  # a timed stop is a few lines; a long text is not one
MAX_LINE = 4096  # characters of a timing line (`time`'s output, with zsh's command)


@dataclass(frozen=True, slots=True)
class StopCommand:
    """A command that stops containers: which tool, what it stops, and after how long it kills."""

    tool: str  # docker | podman | nerdctl | crictl | kubectl
    targets: tuple[str, ...]
    timeout: float  # seconds between the stop signal and SIGKILL
    stated: bool  # False: the tool's default (or, for kubectl, the default grace period assumed)
    text: str  # the command as written

    @property
    def what(self) -> str:
        """``the stop timeout (10 s, docker's default)`` / ``the grace period (30 s, assumed)``."""
        n = f"{self.timeout:g} s"
        if self.tool == "kubectl":
            how = "given with --grace-period" if self.stated else "the default, assumed: the Pod's own is not known"
            return f"the grace period ({n}, {how})"
        how = "given with -t" if self.stated else f"{self.tool}'s default"
        return f"the stop timeout ({n}, {how})"


@dataclass(frozen=True, slots=True)
class TimedStop:
    """A stop that was timed: the command (read from the prompt, the text, or ``pod "x" deleted``)."""

    command: StopCommand
    seconds: float
    line: int  # 0-based line of the elapsed time in the text
    text: str  # that line, stripped
    command_line: int | None = None  # 0-based line of the command (or `pod "x" deleted`) in the text
    command_text: str = ""  # that line, stripped
    # timed by two clock readings (`date` before and after): the first one's line and text, and
    # how coarse the readings are (whole seconds: the time taken is known to within one)
    start_line: int | None = None
    start_text: str = ""
    resolution: float = 0.0

    @property
    def killed(self) -> bool:
        """Did it take the whole timeout (so the process was killed, not stopped by the signal)?"""
        return self.seconds + self.resolution >= self.command.timeout * 0.98


@dataclass(frozen=True, slots=True)
class RuntimeStop:
    """A runtime's log line saying a container outlived its stop signal and was killed."""

    runtime: str  # dockerd | podman | containerd
    container: str  # id or name, as the line gives it ("" when it names none)
    seconds: float | None
    signal: str  # "SIGTERM", "signal 15", ... as the line says
    line: int
    text: str


def _words(cmdline: str) -> list[str]:
    try:
        words = shell_split(cmdline)
    except ValueError:
        words = cmdline.split()
    out = []
    for w in words:
        if w in ("|", "&&", ";", "||") or w.startswith("|"):
            break
        out.append(w)
    return unwrapped(out, _WRAPPERS)


def _number(v: str) -> float | None:
    try:
        n = float(v.rstrip("s"))
    except ValueError:
        return None
    return n if 0 <= n < 10**7 else None


def _option(words: list[str], names: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """The value of the first of ``names`` (``-t 5``, ``-t=5``, ``--time=5``, ``-t5``) and the other words."""
    value: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        hit = next((n for n in names if w == n or w.startswith(n + "=") or (len(n) == 2 and w.startswith(n))), None)
        if hit is not None and value is None:
            if w == hit:
                value = words[i + 1] if i + 1 < len(words) else ""
                i += 2
                continue
            value = w[len(hit) :].lstrip("=")
            i += 1
            continue
        rest.append(w)
        i += 1
    return value, rest


def stop_command(cmdline: str) -> StopCommand | None:
    """The stop a command line asks for: ``[time] docker|podman|nerdctl stop|restart [-t N] X``,
    ``crictl stop -t N X`` (its default timeout is 0: an immediate kill, nothing to time), or
    ``kubectl delete pod X`` (``--grace-period=N``, ``--now``; ``--force`` / ``--wait=false``
    say nothing about the process). None for anything else."""
    words = _words(cmdline.strip())
    if len(words) < 2:
        return None
    prog = words[0].rsplit("/", 1)[-1]
    args = words[1:]
    if prog in _RUNTIMES:
        if args[:2] == ["container", "stop"] or args[:2] == ["container", "restart"]:
            args = args[1:]
        if not args or args[0] not in ("stop", "restart"):
            return None
        value, rest = _option(args[1:], ("--time", "--timeout", "-t"))
        targets = tuple(w for w in rest if not w.startswith("-"))
        if value is None:
            return StopCommand(prog, targets, RUNTIME_STOP_DEFAULT, False, cmdline.strip())
        n = _number(value)
        return StopCommand(prog, targets, n, True, cmdline.strip()) if n else None
    if prog == "crictl":
        if not args or args[0] != "stop":
            return None
        value, rest = _option(args[1:], ("--timeout", "-t"))
        n = _number(value) if value is not None else None
        return (
            StopCommand(prog, tuple(w for w in rest if not w.startswith("-")), n, True, cmdline.strip()) if n else None
        )
    if prog in ("kubectl", "k", "oc"):
        return _kubectl_delete(args, cmdline.strip())
    return None


def _kubectl_delete(args: list[str], text: str) -> StopCommand | None:
    if "delete" not in args[:3]:
        return None
    if any(a in ("--wait=false", "--force") for a in args):
        return None
    grace, rest = _option(args, ("--grace-period",))
    rest = [a for a in rest if a != "delete"]
    targets: list[str] = []
    pods = False
    for i, a in enumerate(rest):
        if a.startswith("-"):
            continue
        low = a.lower()
        if low in ("pod", "pods", "po"):
            pods = True
        elif low.startswith(("pod/", "pods/", "po/")):
            pods = True
            targets.append(a.split("/", 1)[1])
        elif pods and (i == 0 or not rest[i - 1].startswith("-")):
            targets.append(a)
    if not pods and "-f" not in rest and "--filename" not in rest:
        return None
    if "--now" in rest:
        return None  # a grace period of 1 s: nothing to read from the time it took
    if grace is not None:
        n = _number(grace)
        if n is None or n <= 0:
            return None  # 0 (with --force) kills at once; -1 is the Pod's own
        return StopCommand("kubectl", tuple(targets), n, True, text)
    return StopCommand("kubectl", tuple(targets), POD_GRACE_DEFAULT, False, text)


# bash/ksh `time`: "real\t0m10.408s"; `time -p` and POSIX: "real 10.41"
_REAL = lazy_re.compile(r"^\s*real\s+(?:(\d{1,9})m\s*)?(\d{1,12}(?:[.,]\d{1,12})?)s?\s*$")
# zsh: "docker stop test  0.05s user 0.02s system 0% cpu 10.408 total" (the command leads the line)
# (found from its numbers, the command being what precedes them: a pattern for the command first
# backtracked over every run of blanks, minutes for one crafted 4 KB line)
_ZSH = lazy_re.compile(r"(?<!\S)[\d.]+s user [\d.]+s system [\d.]+% cpu (?P<t>[\d:.]+) total\s*$")
# GNU time: "0.04user 0.01system 0:10.41elapsed 0%CPU"
_GNU = lazy_re.compile(r"^\s*[\d.]+user [\d.]+system (?P<t>[\d:.]+)elapsed\b")
# what kubectl prints for a deleted Pod (1.31+ adds " from NAMESPACE namespace")
_DELETED = lazy_re.compile(r'^\s*pod[s]?(?:/|\s+)"?(?P<name>[a-z0-9][\w.-]*)"?\s+deleted\b')


def _clock(t: str) -> float | None:
    """``10.408`` / ``1:02.34`` / ``0:10.41`` -> seconds."""
    try:
        parts = [float(p) for p in t.split(":")]
    except ValueError:
        return None
    total = 0.0
    for p in parts:
        total = total * 60 + p
    return total


def elapsed(line: str) -> tuple[float, str | None] | None:
    """Seconds of a timing line, and the command zsh prints on it (a line of a few hundred
    characters at most: zsh's pattern backtracks over a long run of blanks)."""
    if len(line) > MAX_LINE:
        return None
    m = _REAL.match(line) if "real" in line else None
    if m:
        return int(m.group(1) or 0) * 60 + float(m.group(2).replace(",", ".")), None
    z = _ZSH.search(line) if "s user " in line else None
    if z:
        t = _clock(z.group("t"))
        return (t, line[: z.start()].strip()) if t is not None else None
    g = _GNU.match(line) if "elapsed" in line else None
    if g:
        t = _clock(g.group("t"))
        return (t, None) if t is not None else None
    return None


def timed_stops(text: str, command: str | None = None) -> list[TimedStop]:
    """Every timed stop in ``text``: the output of ``command`` (a transcript's prompt), or a text
    that holds the command line itself, or kubectl's ``pod "x" deleted`` (the grace period then
    taken as the default); timed by ``time`` (bash, zsh, GNU) or by ``date`` before and after."""
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        return []
    cmd = stop_command(command) if command else None
    listed = _dated_stop(command) if command and cmd is None else None
    if listed is not None:
        cmd = listed[0]
    cmd_line: int | None = None
    cmd_text = ""
    out: list[TimedStop] = []
    clocks: list[tuple[int, float, str, float]] = []  # `date` readings: line, seconds, text, resolution
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            continue
        reading = _clock_reading(stripped)
        if reading is not None:
            clocks.append((i, reading[0], stripped, reading[1]))
            continue
        el = elapsed(line)
        if el is None:
            typed = _command_on(stripped)
            here = stop_command(typed) if typed is not None else None
            dated = _dated_stop(typed) if typed is not None and here is None else None
            if here is None and dated is not None:
                here = dated[0]
            if here is not None:
                cmd, cmd_line, cmd_text, listed = here, i, stripped, dated
                continue
            m = _DELETED.match(line)
            if m and cmd is None:
                cmd = StopCommand("kubectl", (m.group("name"),), POD_GRACE_DEFAULT, False, "")
                cmd_line, cmd_text = i, stripped
            continue
        seconds, zsh_cmd = el
        use = stop_command(zsh_cmd) if zsh_cmd else cmd
        if use is not None:
            where = (i, stripped) if zsh_cmd else (cmd_line, cmd_text)
            out.append(TimedStop(use, seconds, i, stripped, *where))
    if out or cmd is None:
        return out
    # timed by the clock: the readings the command list's `date`s printed around the stop, or
    # the last reading before the stop's line and the first after it
    after = [c for c in clocks if cmd_line is None or c[0] > cmd_line]
    if listed is not None:
        before = listed[1]
        pair = (after[before - 1], after[before]) if len(after) > before else None
    elif cmd_line is not None:
        earlier = [c for c in clocks if c[0] < cmd_line]
        pair = (earlier[-1], after[0]) if earlier and after else None
    else:
        pair = None
    if pair is not None:
        (l0, t0, s0, r0), (l1, t1, s1, r1) = pair
        seconds = t1 - t0
        if 0 <= seconds < _DAY:
            out.append(TimedStop(cmd, round(seconds, 3), l1, s1, cmd_line, cmd_text, l0, s0, max(r0, r1)))
    return out


def _command_on(line: str) -> str | None:
    """The command on a line of a text, without its shell prompt (a bare line is taken as
    typed too); None for a line too long to be one."""
    if len(line) >= MAX_LINE:
        return None
    m = PROMPT.match(line)
    return m.group("cmd") if m else re.sub(r"^(?:[$#>%]\s*)", "", line)


def _dated_stop(cmdline: str) -> tuple[StopCommand, int] | None:
    """A prompt's command list that times a stop with ``date`` (``date; kubectl delete pod x &&
    date``): the stop, and how many ``date``s print before it (one at least, and one after)."""
    if len(cmdline) > MAX_LINE:
        return None
    found: tuple[StopCommand, int] | None = None
    dates = 0
    for words, _ in commands(cmdline)[0]:
        words = unwrapped(words, _WRAPPERS)
        if words and words[0].rsplit("/", 1)[-1] == "date":
            dates += 1
            if found is not None:
                return found if found[1] else None
        elif found is None and (stop := stop_command(shlex.join(words))) is not None:
            found = (stop, dates)
    return None


# What `date` prints, read to the second of the month (a stop takes seconds: a reading's day and
# time of day say how long): coreutils' and BSD's default ("Tue Nov 29 10:34:44 CET 2022"; the
# en_US locale's "Tue Nov 29 10:34:44 AM CET 2022"), `date -R` ("Tue, 29 Nov 2022 10:34:44
# +0100"), `date -Is`/`--rfc-3339` ("2022-11-29T10:34:44+01:00", fractions with `-Ins`).
_DATE = lazy_re.compile(
    r"(?:[A-Z][a-z]{2},?\s+(?:[A-Z][a-z]{2}\s+(?P<d1>\d{1,2})|(?P<d2>\d{1,2})\s+[A-Z][a-z]{2}\s+\d{4})"
    r"|\d{4}-\d{2}-(?P<d3>\d{2})[T ])"
    r"\s*(?P<h>\d{1,2}):(?P<m>\d{2}):(?P<s>\d{2}(?:[.,]\d+)?)(?:\s*(?P<ampm>[AaPp][Mm]))?"
    r"(?:\s*(?:Z|[+-]\d{2}:?\d{2}|[A-Z]{2,5}(?:[+-]\d{1,2})?))?(?:\s+\d{4})?"
)
_DAY = 86400.0


def _clock_reading(line: str) -> tuple[float, float] | None:
    """A line that is a whole `date` reading: (seconds since the start of its month, how coarse
    the reading is); None for anything else."""
    if len(line) > 80 or ":" not in line:
        return None
    m = _DATE.fullmatch(line)
    if m is None:
        return None
    day = int(m.group("d1") or m.group("d2") or m.group("d3"))
    hour, minute, sec = int(m.group("h")), int(m.group("m")), m.group("s").replace(",", ".")
    ampm = (m.group("ampm") or "").upper()
    if not 1 <= day <= 31 or minute > 59 or hour > (12 if ampm else 23):
        return None
    if ampm:
        hour = hour % 12 + (12 if ampm == "PM" else 0)
    return day * _DAY + hour * 3600 + minute * 60 + float(sec), (0.0 if "." in sec else 1.0)


_DOCKERD = lazy_re.compile(
    r"Container (?:(?P<id>[0-9a-f]{12,64}) )?failed to exit within (?P<n>\d+)(?: seconds|s) of "
    r"(?P<sig>signal \d+|SIG[A-Z]+) - using the force(?:.*?\bcontainer=(?P<id2>[0-9a-f]{12,64}))?"
)
_PODMAN = lazy_re.compile(
    r"StopSignal (?P<sig>SIG[A-Z]+|\d+) failed to stop container (?P<id>\S+) in (?P<n>\d+) seconds, "
    r"resorting to SIGKILL"
)
_CONTAINERD = lazy_re.compile(
    r'An error occurs during waiting for container \\?"(?P<id>[0-9a-f]{12,64})\\?" to be stopped\b'
    r".*(?:stop timeout|deadline exceeded)"
)
# what a text must hold to be worth a closer look (cheap substring tests first)
NEEDLES = ("using the force", "resorting to SIGKILL", "to be stopped")


def runtime_stops(text: str) -> list[RuntimeStop]:
    """The runtimes' stop-timeout lines in a log (dockerd, podman, containerd)."""
    if not any(n in text for n in NEEDLES):
        return []
    out: list[RuntimeStop] = []
    for i, line in enumerate(text.splitlines()):
        if not any(n in line for n in NEEDLES):
            continue
        m = _DOCKERD.search(line)
        if m:
            sig = m.group("sig")
            out.append(
                RuntimeStop("dockerd", m.group("id") or m.group("id2") or "", float(m.group("n")), sig, i, line.strip())
            )
            continue
        m = _PODMAN.search(line)
        if m:
            out.append(RuntimeStop("podman", m.group("id"), float(m.group("n")), m.group("sig"), i, line.strip()))
            continue
        m = _CONTAINERD.search(line)
        if m:
            out.append(RuntimeStop("containerd", m.group("id"), None, "the stop signal", i, line.strip()))
    return out


def is_term(signal: str) -> bool:
    return signal in ("SIGTERM", "signal 15", "15", "TERM")


# -- the command that started the container ---------------------------------------------------------
# docker/podman/nerdctl run options that take no value (every other option takes one)
_FLAGS = frozenset(
    {
        "-d", "--detach", "--rm", "-i", "--interactive", "-t", "--tty", "--init", "--privileged",
        "--read-only", "-P", "--publish-all", "--no-healthcheck", "--oom-kill-disable", "-q", "--quiet",
        "--sig-proxy", "--replace", "--systemd",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class RunCommand:
    """``docker run [OPTIONS] IMAGE [COMMAND...]`` read: its name, image, command and init."""

    name: str | None
    image: str
    command: list[str]  # the ENTRYPOINT override (if any) and the command after the image
    init: bool  # --init: docker-init/tini is PID 1 and forwards signals
    text: str


def run_command(cmdline: str) -> RunCommand | None:
    """A ``docker|podman|nerdctl [container] run`` (or ``create``) command line, read."""
    words = _words(cmdline.strip())
    if len(words) < 3 or words[0].rsplit("/", 1)[-1] not in _RUNTIMES:
        return None
    args = words[1:]
    if args[0] == "container":
        args = args[1:]
    if not args or args[0] not in ("run", "create"):
        return None
    name: str | None = None
    entrypoint: str | None = None
    init = False
    i = 1
    while i < len(args):
        a = args[i]
        if not a.startswith("-") or a == "-":
            break
        key, eq, value = a.partition("=")
        if key in _FLAGS or (not eq and re.fullmatch(r"-[ditP]+", a)):
            init = init or key == "--init"
            i += 1
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        i += 1
        if key == "--name":
            name = value
        elif key == "--entrypoint":
            entrypoint = value
    if i >= len(args):
        return None
    image, rest = args[i], args[i + 1 :]
    command = ([entrypoint] if entrypoint else []) + rest
    return RunCommand(name, image, command, init, cmdline.strip())


def started_by(earlier: list[tuple[str, int]], stop: str) -> dict[str, str]:
    """The ``docker run`` (of the same transcript, before the stop) that started the container a
    stop names: ``{"started": command, "started_line": N}``, or nothing. ``earlier``: (command,
    its line number) of the commands before the stop."""
    cmd = stop_command(stop)
    if cmd is None or cmd.tool == "kubectl":
        return {}
    runs = [(r, line) for c, line in earlier if (r := run_command(c)) is not None]
    named = [(r, line) for r, line in runs if r.name is not None and r.name in cmd.targets]
    pick = named[-1] if named else (runs[-1] if len(runs) == 1 and not any(r.name for r, _ in runs) else None)
    if pick is None:
        return {}
    return {"started": pick[0].text, "started_line": str(pick[1])}
