"""Who is PID 1 in a container, judged from the Pod spec's ``command``/``args``, and does SIGTERM reach the app.

kubelet sends SIGTERM to the container's PID 1 only. When that is a shell running the
application as a child, the application never hears it (a shell has no SIGTERM handler and PID 1
ignores signals it does not handle) and is SIGKILLed at the end of the grace period. Whether a
shell replaces itself with its last command depends on the shell (observed with bash 5.2 and
Debian's dash 0.5.12):

* bash execs a lone simple command, and from 5.1 the last simple command of a ``-c`` list
  (not when a trap is set);
* Debian's and Ubuntu's dash never does (a Debian patch disables it); upstream dash and
  busybox ash exec the last simple command;
* ``exec app`` always replaces the shell; ``trap ... TERM`` plus ``app & wait`` forwards by hand.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

SHELLS = frozenset({"sh", "bash", "ash", "dash", "zsh", "ksh", "mksh"})
INITS = frozenset({"tini", "tini-static", "dumb-init", "catatonit", "docker-init", "s6-svscan", "pid1", "init"})
_SEPARATORS = frozenset({";", "&&", "||", "&", "|", "\n"})
_COMPOUND = frozenset({"if", "for", "while", "until", "case", "{", "(", "select", "function"})
MAX_SCRIPT = 64 * 1024  # shlex takes quadratic time in token length; a Pod's script is a few lines


# Options of the inits that take a value (tini -p SIGNAL, -e CODE; dumb-init -r s:s).
_INIT_VALUED = frozenset({"-p", "-e", "-r", "--rewrite"})


def init_child(argv: list[str]) -> list[str] | None:
    """The command an init (``argv[0]``) starts, when the init passes a stop signal to that child
    alone: tini (and docker's ``--init``, which is tini) unless ``-g`` (tini.c: ``kill(kill_process_group ?
    -child_pid : child_pid, sig)``), dumb-init only with ``--single-child``/``-c`` (by default it
    signals the child's whole process group). None for any other init, or no command."""
    if not argv:
        return None
    prog = argv[0].rsplit("/", 1)[-1]
    words, i, flags = argv[1:], 0, []
    while i < len(words) and words[i].startswith("-") and words[i] != "--":
        flags.append(words[i])
        i += 2 if words[i] in _INIT_VALUED else 1
    rest = words[i + 1 :] if i < len(words) and words[i] == "--" else words[i:]
    short = "".join(f[1:] for f in flags if not f.startswith("--"))
    if prog in ("tini", "tini-static", "docker-init") or argv[0] == "/dev/init":
        child_only = "g" not in short
    elif prog == "dumb-init":
        child_only = "c" in short or "--single-child" in flags
    else:
        child_only = False
    return (rest or None) if child_only else None


@dataclass(frozen=True, slots=True)
class Entrypoint:
    """The verdict on one container's command line."""

    forwards: bool | None  # True: SIGTERM reaches the app; False: it does not; None: depends on /bin/sh
    shell: str | None  # the shell that is PID 1, if any
    reason: str
    command: str  # the command line as written, for citing


def analyse(command: list[str], args: list[str]) -> Entrypoint | None:
    """None when the spec does not say (no command: the image's ENTRYPOINT runs) or only names a script."""
    argv = [str(a) for a in [*command, *args]]
    if not argv:
        return None
    shown = shlex.join(argv)
    prog = argv[0].rsplit("/", 1)[-1]
    if prog in INITS:
        child = init_child(argv)
        inner = analyse(child, []) if child else None
        if inner is not None and inner.forwards is False and inner.shell:
            why = f"{prog} passes SIGTERM to its child alone, `{inner.shell} -c`, whose script does not pass it on"
            return Entrypoint(False, inner.shell, why, shown)
        return Entrypoint(True, None, f"{prog} runs as PID 1 and forwards signals", shown)
    if prog == "busybox" and len(argv) > 1 and argv[1] in ("sh", "ash"):
        prog, argv = "ash", argv[1:]
    if prog not in SHELLS:
        return Entrypoint(True, None, "the application itself is PID 1", shown)
    script = _script(argv[1:])
    if script is None:
        return None  # `sh /start.sh`: the script is not in the spec
    return _judge(prog, script, shown)


def _script(opts: list[str], printed: bool = False) -> str | None:
    """The string after ``-c`` (``-c``, ``-ec``, ``-xc``... or ``-c`` after other options);
    ``printed``: the words as ``ps`` shows them, quoting lost, so the script is all that follows."""
    for i, o in enumerate(opts):
        if o.startswith("-") and not o.startswith("--") and "c" in o[1:]:
            if printed:
                return " ".join(opts[i + 1 :])
            return opts[i + 1] if i + 1 < len(opts) else ""
        if not o.startswith("-"):
            return None
    return None


def inline_script(argv: list[str]) -> str | None:
    """A shell's ``-c`` script from its argv (``["/bin/sh", "-c", "exec app"]``); None when the
    shell runs a script file or reads standard input."""
    return _script(argv[1:]) if len(argv) > 1 else None


def script_as_printed(command: str) -> str | None:
    """A shell's ``-c`` script from its command line as ``ps`` prints it (its words joined by
    spaces: the rest of the line after ``-c``); None when it runs no ``-c`` script."""
    words = command.split()
    return _script(words[1:], printed=True) if words else None


_TERM = ("TERM", "SIGTERM", "15")


def _traps(words: list[str], signals: tuple[str, ...]) -> bool:
    return "trap" in words and any(w in signals for w in words)


def traps_term(script: str) -> bool:
    """Does the script set a trap on SIGTERM?"""
    return _traps([w for c, _ in commands(script)[0] for w in c], _TERM)


def commands(script: str) -> tuple[list[tuple[list[str], str]], bool]:
    """Top-level simple commands with the separator after each, and whether parsing was clean
    (a script, or a prompt's command list: ``date; kubectl delete pod x && date``)."""
    lex = shlex.shlex(script.replace("\n", " ; "), posix=True, punctuation_chars=";&|()")
    lex.whitespace_split = True
    out: list[tuple[list[str], str]] = []
    cur: list[str] = []
    try:
        for tok in lex:
            if tok in _SEPARATORS or (tok and set(tok) <= set(";&|")):
                if cur:
                    out.append((cur, tok))
                    cur = []
                continue
            cur.append(tok)
    except ValueError:
        return out, False
    if cur:
        out.append((cur, ""))
    return out, True


def _judge(shell: str, script: str, shown: str) -> Entrypoint:
    if len(script) > MAX_SCRIPT:
        return Entrypoint(None, shell, f"{shell} -c runs a script of {len(script)} characters: not judged", shown)
    cmds, clean = commands(script)
    words = [w for c, _ in cmds for w in c]
    has_trap = "trap" in words
    if _traps(words, (*_TERM, "EXIT")) and "wait" in words:
        return Entrypoint(True, shell, "the shell traps SIGTERM and waits for its children", shown)
    if not cmds or not clean:
        return Entrypoint(False, shell, f"{shell} runs a script it cannot hand over to", shown)
    last, last_sep = cmds[-1]
    first_word = last[0]
    if first_word == "exec":
        return Entrypoint(True, shell, "the application is started with exec (it replaces the shell)", shown)
    background = [c for c, sep in cmds if sep == "&"]
    if background or last_sep == "&":
        app = " ".join((background or [last])[0])
        return Entrypoint(
            False, shell, f"`{app}` runs in the background; {shell} stays PID 1 and does not pass SIGTERM on", shown
        )
    if any(sep == "|" for _, sep in cmds) or first_word in _COMPOUND or any(c[0] in _COMPOUND for c, _ in cmds):
        return Entrypoint(
            False, shell, f"{shell} stays PID 1 (pipeline or compound command) and does not pass SIGTERM on", shown
        )
    if first_word in ("sleep", "wait", "tail", "echo", "true", ":") and len(cmds) > 1:
        return Entrypoint(
            False,
            shell,
            f"the last command is `{' '.join(last)}`: the application is not what the shell ends with",
            shown,
        )
    single = len(cmds) == 1
    if shell == "bash":
        if has_trap:
            return Entrypoint(
                False, shell, "bash with a trap set keeps running as PID 1 and does not pass SIGTERM on", shown
            )
        if single:
            return Entrypoint(True, shell, "bash execs a lone command", shown)
        return Entrypoint(
            None,
            shell,
            "bash 5.1+ execs the last command of the list; older bash stays PID 1 and does not pass SIGTERM on",
            shown,
        )
    if shell == "dash":
        return Entrypoint(False, shell, "Debian's dash never replaces itself with the command: dash stays PID 1", shown)
    if shell == "ash":
        return Entrypoint(True, shell, "busybox ash execs the last command", shown)
    return Entrypoint(
        None,
        shell,
        f"{shell} -c without exec: on Debian/Ubuntu-based images /bin/sh is dash, which stays PID 1 and does not "
        "pass SIGTERM on (busybox and bash would exec the command)",
        shown,
    )
