"""Splitting a command line into words as a POSIX shell (and ``shlex.split``) does, in linear time.

Command lines, transcript prompts and iptables rules all need it, and ``shlex`` is quadratic in
a word's length (it builds each word a character at a time): a 1 MB command line took 20 s.
"""

from __future__ import annotations

import re

from kpdoctor import lazy_re

# A POSIX shell word as shlex (posix, whitespace_split) reads it: runs of plain characters,
# '...' (no escapes), "..." (where only a backslash before " or a backslash escapes) and a
# backslash before any character, with nothing between them.
_SHELL_WORD = lazy_re.compile(r"""(?:[^ \t\r\n'"\\]+|'[^']*'|"[^"\\]*(?:\\.[^"\\]*)*"|\\.)+""", re.S)
_SHELL_PIECE = lazy_re.compile(
    r"""'(?P<sq>[^']*)'|"(?P<dq>[^"\\]*(?:\\.[^"\\]*)*)"|(?P<plain>(?:[^'"\\]|\\.)+)""", re.S
)
_ESCAPED = lazy_re.compile(r"\\(.)", re.S)
_SHELL_SPACE = lazy_re.compile(r"[ \t\r\n]+")


# A shell prompt and the command typed after it, as users paste them: `[root@node3 ~]# cmd` (also
# `[root@node3 ~]#cmd`, a PS1 without its trailing space), `root@node3:~# cmd`, `user@host$ cmd`,
# zsh's default `user@host dir % cmd`, `/some/path # cmd` (a container's shell), or a bare `#`,
# `%`, `>`, `$` or zsh themes' `❯`/`➜` (the group "strong" is set for the forms with a host or a
# path: those run any command word).
PROMPT = lazy_re.compile(
    r"^[ \t]*(?:\*\*|__)?(?:"  # a prompt pasted in markdown bold: **[root@node ~]$ ...
    r"(?P<strong>(?P<glued>\[[\w.\-]+@[^\]\n]{1,80}\][#$])(?=[a-z])"  # [root@node3 ~]#cmd
    r"|\[[^\]\n]{1,80}\]\s?[#$]"  # [root@node3 ~]#
    r"|[\w.\-]+@[\w.\-]+:[^\s#$]*\s?[#$]"  # root@node3:~#  user@host:/tmp$
    r"|[\w.\-]+@[\w.\-]+\s?[#$%>]"  # user@host$
    r"|[\w.\-]+@[\w.\-]+ [^\s#$%]{1,80} %"  # zsh's default (%n@%m %1~ %#): tim@mbp kubernetes %
    r"|[\w.\-]+:[~/][^\s#$]*\s?[#$]"  # busybox ash's default (\h:\w\$): web-7d9c-x2kq:~#
    r"|/[\w./-]*\s[#$])(?(glued)|\s+)"  # /some/path # (a container's shell)
    r"|[#%>\u276f\u279c]\s+|\$\s*"  # bare # or $ ($ also glued to the command: "$kubectl get pods"); zsh's ❯ ➜
    r")(?P<cmd>[^\s#$].*)$"
)


# What runs another command in front of it (`sudo iptables-save`, `time docker stop x`).
COMMAND_WRAPPERS = frozenset({"sudo", "time", "command", "env", "nice"})
# The CLIs whose `exec` runs a command in a Pod or container and whose `logs` prints one's log.
RUNTIME_CLIS = frozenset({"kubectl", "k", "oc", "docker", "crictl", "nerdctl", "podman"})


def unwrapped(words: list[str], wrappers: frozenset[str] = COMMAND_WRAPPERS) -> list[str]:
    """The words from the command actually run: leading wrappers (by name or path) and
    ``VAR=value`` assignments taken off."""
    i = 0
    while i < len(words) and (
        words[i].rsplit("/", 1)[-1] in wrappers or ("=" in words[i] and not words[i].startswith("-"))
    ):
        i += 1
    return words[i:]


# nsenter's options that take a value as the next word (util-linux): the target and the ids.
_NSENTER_VALUED = frozenset({"-t", "--target", "-S", "--setuid", "-G", "--setgid", "-r", "--root", "-w", "--wd"})


def entered(words: list[str]) -> tuple[list[str], str | None]:
    """The command run inside another namespace, and whose network state it then shows: ``ip
    netns exec NAME CMD`` (a named network namespace: a Pod's, ``cni-...``) and ``nsenter
    [--net[=FILE] | -n] ... CMD`` give "netns" (another network namespace), except ``nsenter -t 1
    -n`` or ``--net=/proc/1/ns/net`` (the node's own, entered from a debug Pod) and ``chroot
    /host`` (a debug Pod's view of the node) and ``ssh HOST CMD`` (CMD run on that host) which give
    "host". Anything else: ``(words, None)``."""
    prog = words[0].rsplit("/", 1)[-1] if words else ""
    if prog == "ssh":  # the command run on the host logged into: that host's own state
        inner = _remote(words)
        return (inner, "host") if inner is not words else (words, None)
    if prog == "ip" and words[1:3] == ["netns", "exec"] and len(words) > 4:
        return words[4:], "netns"
    if prog == "chroot" and len(words) > 2 and words[1].rstrip("/") == "/host":
        return words[2:], "host"
    if prog != "nsenter":
        return words, None
    i, target, net = 1, "", None
    while i < len(words) and words[i].startswith("-") and words[i] != "--":
        w = words[i]
        name, eq, value = w.partition("=")
        if name in _NSENTER_VALUED and not eq:
            value, i = (words[i + 1] if i + 1 < len(words) else ""), i + 1
        if name in ("-t", "--target"):
            target = value
        elif w.startswith("-t") and len(w) > 2 and w[2:].isdigit():  # -t1
            target = w[2:]
        elif name in ("-n", "--net"):
            net = value or ""
        elif not w.startswith("--") and "n" in w[1:] and w[1:].isalpha():  # -mnu
            net = ""
        i += 1
    inner = words[i + 1 :] if i < len(words) and words[i] == "--" else words[i:]
    if net is None:  # the network namespace is not entered: the one nsenter ran in
        return inner, None
    node = net == "/proc/1/ns/net" or (not net and target == "1")
    return inner, "host" if node else "netns"


# OpenSSH's options that take a value as the next word (ssh(1))
_SSH_VALUED = frozenset("BbcDEeFIiJLlmOoPpQRSWw")


def _remote(words: list[str]) -> list[str]:
    """The command ``ssh [options] HOST COMMAND...`` runs on HOST (its words joined and split
    again, as the remote shell does); ``words`` itself when there is none (a login)."""
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] != "--":
        w = words[i]
        i += 2 if len(w) == 2 and w[1] in _SSH_VALUED else 1
    i += 1 if i < len(words) and words[i] == "--" else 0
    if i + 1 >= len(words):
        return words
    try:
        return shell_split(" ".join(words[i + 1 :]))
    except ValueError:
        return " ".join(words[i + 1 :]).split()


# the options of `kubectl exec`/`docker exec` that take a value (the rest are flags)
_EXEC_VALUED = frozenset(
    {"-c", "--container", "-n", "--namespace", "-u", "--user", "-w", "--workdir", "-e", "--env", "--context",
     "--kubeconfig", "-f", "--filename", "--pod-running-timeout", "--env-file", "--detach-keys", "-s", "--server"}
)  # fmt: skip


def exec_parts(words: list[str]) -> tuple[str | None, list[str]]:
    """The Pod or container a runtime's ``exec`` enters and the command it runs there
    (``kubectl exec -it web-0 -c app -- cat /proc/1/cmdline``, the older form without ``--``,
    ``docker exec web cat ...``); (None, []) for no exec."""
    if "exec" not in words:
        return None, []
    rest = words[words.index("exec") + 1 :]
    target: str | None = None
    i = 0
    while i < len(rest) and rest[i] != "--":
        w = rest[i]
        if w.startswith("-"):  # an option, before or after the Pod
            i += 1 if "=" in w or w not in _EXEC_VALUED else 2
        elif target is None:
            target, i = w, i + 1
        else:
            return target, rest[i:]  # the older form: the command right after the Pod
    return target, rest[i + 1 :]


def _unescape_double_quoted(text: str) -> str:
    """Inside double quotes a backslash escapes only " and a backslash (and stays otherwise)."""
    if "\\" not in text:
        return text
    if "\x00" in text:
        return re.sub(r'\\(["\\])', r"\1", text)
    return text.replace("\\\\", "\x00").replace('\\"', '"').replace("\x00", "\\")


def shell_split(line: str) -> list[str]:
    """``shlex.split(line)`` in linear time.

    shlex builds each word a character at a time (``token += c``), which is quadratic in a
    word's length: a 1 MB command line took 20 s. Here a regex reads whole words: the same
    words, and the same ValueError for an unclosed quote or a trailing backslash.
    """
    if "'" not in line and '"' not in line and "\\" not in line:
        return [w for w in _SHELL_SPACE.split(line) if w]
    words: list[str] = []
    pos = 0
    for m in _SHELL_WORD.finditer(line):
        if line[pos : m.start()].strip(" \t\r\n"):
            raise ValueError("No closing quotation")  # a quote or backslash that opens nothing
        word = m.group()
        if "'" in word or '"' in word or "\\" in word:
            parts = []
            for piece in _SHELL_PIECE.finditer(word):
                kind = piece.lastgroup
                if kind == "sq":
                    parts.append(piece.group("sq"))
                elif kind == "dq":
                    parts.append(_unescape_double_quoted(piece.group("dq")))
                else:
                    plain = piece.group("plain")
                    parts.append(_ESCAPED.sub(r"\1", plain) if "\\" in plain else plain)
            word = "".join(parts)
        words.append(word)
        pos = m.end()
    if line[pos:].strip(" \t\r\n"):
        raise ValueError("No closing quotation")
    return words


MAX_CONTINUED = 16  # lines one typed command may span (a loop or an awk program over a few lines)
_MAX_TYPED = 16384  # characters of such a command: longer, it is not one a person typed


# a compound command's first word, and its opening and closing words: the shell reads on until
# each opened is closed
_COMPOUND_START = frozenset({"for", "while", "until", "select", "if", "case"})
_COMPOUND = (("do", "done"), ("then", "fi"), ("case", "esac"))
_OPERATORS = lazy_re.compile(r"[;&|()]+")


def reads_on(cmd: str) -> bool:
    """Would the shell read another line for this command: a quote still open, a backslash at
    the line's end, a loop, ``if`` or ``case`` it starts not closed yet (bash then shows its
    ``> `` continuation prompt)?"""
    if cmd.endswith("\\") and (len(cmd) - len(cmd.rstrip("\\"))) % 2:
        return True
    try:
        words = shell_split(cmd)
    except ValueError:
        return True
    if not words or _OPERATORS.split(words[0])[0] not in _COMPOUND_START:
        return False
    tokens = [t for w in words for t in _OPERATORS.split(w)]
    return any(tokens.count(opening) > tokens.count(closing) for opening, closing in _COMPOUND)


def typed_over(lines: list[str]) -> str:
    """A command typed over several lines as the shell reads it: a backslash at a line's end
    joins the next line on, a newline inside quotes stays; the ``> `` continuation prompt off."""
    cmd = lines[0]
    for line in lines[1:]:
        line = line[2:] if line.startswith("> ") else line
        cmd = f"{cmd[:-1]}{line}" if cmd.endswith("\\") else f"{cmd}\n{line}"
    return cmd


def continued_on(cmd: str, after: list[str]) -> int:
    """How many of the lines ``after`` the line a command was typed on (``cmd``, without its
    prompt) are the rest of it: while the shell reads on (:func:`reads_on`) they are the
    command's, not its output. 0 when it ends on its line, or is not closed within a few lines."""
    n = 0
    while reads_on(typed := typed_over([cmd, *after[:n]])):
        n += 1
        if n > len(after) or n > MAX_CONTINUED or len(typed) > _MAX_TYPED:
            return 0
    return n
