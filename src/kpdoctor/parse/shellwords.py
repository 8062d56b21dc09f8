"""Splitting a command line into words as a POSIX shell (and ``shlex.split``) does, in linear time.

Command lines, transcript prompts and iptables rules all need it, and ``shlex`` is quadratic in
a word's length (it builds each word a character at a time): a 1 MB command line took 20 s.
"""

from __future__ import annotations

import re

# A POSIX shell word as shlex (posix, whitespace_split) reads it: runs of plain characters,
# '...' (no escapes), "..." (where only a backslash before " or a backslash escapes) and a
# backslash before any character, with nothing between them.
_SHELL_WORD = re.compile(r"""(?:[^ \t\r\n'"\\]+|'[^']*'|"[^"\\]*(?:\\.[^"\\]*)*"|\\.)+""", re.S)
_SHELL_PIECE = re.compile(r"""'(?P<sq>[^']*)'|"(?P<dq>[^"\\]*(?:\\.[^"\\]*)*)"|(?P<plain>(?:[^'"\\]|\\.)+)""", re.S)
_ESCAPED = re.compile(r"\\(.)", re.S)
_SHELL_SPACE = re.compile(r"[ \t\r\n]+")


# A shell prompt and the command typed after it, as users paste them: `[root@node3 ~]# cmd`,
# `root@node3:~# cmd`, `user@host$ cmd`, `/some/path # cmd` (a container's shell), or a bare `#`,
# `%`, `>` or `$` (the group "strong" is set for the first four: those run any command word).
PROMPT = re.compile(
    r"^[ \t]*(?:\*\*|__)?(?:"  # a prompt pasted in markdown bold: **[root@node ~]$ ...
    r"(?P<strong>\[[^\]\n]{1,80}\]\s?[#$]"  # [root@node3 ~]#
    r"|[\w.\-]+@[\w.\-]+:[^\s#$]*\s?[#$]"  # root@node3:~#  user@host:/tmp$
    r"|[\w.\-]+@[\w.\-]+\s?[#$%>]"  # user@host$
    r"|/[\w./-]*\s[#$])\s+"  # /some/path # (a container's shell)
    r"|[#%>]\s+|\$\s*"  # bare # or $ ($ also glued to the command: "$kubectl get pods")
    r")(?P<cmd>[^\s#$].*)$"
)


# What runs another command in front of it (`sudo iptables-save`, `time docker stop x`).
COMMAND_WRAPPERS = frozenset({"sudo", "time", "command", "env", "nice"})


def unwrapped(words: list[str], wrappers: frozenset[str] = COMMAND_WRAPPERS) -> list[str]:
    """The words from the command actually run: leading wrappers (by name or path) and
    ``VAR=value`` assignments taken off."""
    i = 0
    while i < len(words) and (
        words[i].rsplit("/", 1)[-1] in wrappers or ("=" in words[i] and not words[i].startswith("-"))
    ):
        i += 1
    return words[i:]


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
