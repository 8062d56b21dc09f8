"""ssh attempts a user pasted (`ssh root@192.168.1.3` and what it answered): the address of a
machine they reach as a host, and whether the connection failed, which a Service that captured
that address explains."""

from __future__ import annotations

from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.dataplane.addresses import host_address
from kpdoctor.parse.shellwords import PROMPT, shell_split, unwrapped

# ssh options that take a value (OpenSSH's `ssh -h`): the word after them is not the target
_SSH_VALUE_OPTIONS = set("BbcDEeFIiJLlmOopQRSWw")
_FAILED = lazy_re.compile(
    r"Connection reset by peer|Connection refused|Connection timed out|No route to host|"
    r"Connection closed by (?:remote host|[\d.:a-fA-F]+ port \d+)|kex_exchange_identification|"
    r"Operation timed out|Network is unreachable"
)


@dataclass(frozen=True, slots=True)
class SshAttempt:
    line: int  # 0-based line of the command
    command: str
    host: str  # the target address, as written
    failure: str | None  # the first failure line after it, or None
    failure_line: int | None


def _target(command: str) -> str | None:
    """The address an ssh command connects to, when it is an IP literal (names are not resolved)."""
    try:
        words = unwrapped(shell_split(command))
    except ValueError:
        return None
    if not words or words[0].rsplit("/", 1)[-1] != "ssh":
        return None
    i = 1
    while i < len(words):
        w = words[i]
        if w.startswith("-") and len(w) > 1:
            i += 2 if len(w) == 2 and w[1] in _SSH_VALUE_OPTIONS else 1
            continue
        host = w.rsplit("@", 1)[-1]
        if host.startswith("ssh://"):
            host = host[6:].rsplit("@", 1)[-1].split(":", 1)[0]
        host = host.strip("[]")
        return host if host_address(host) is not None else None
    return None


def ssh_attempts(text: str, command: str | None = None) -> list[SshAttempt]:
    """Every ssh command with an IP target in ``text`` (or ``command``, the transcript part's
    own command, whose output ``text`` is), each with the failure printed after it."""
    lines = text.splitlines()
    found: list[tuple[int, str, str]] = []
    if command is not None and (host := _target(command)) is not None:
        found.append((-1, command, host))
    for i, ln in enumerate(lines):
        if "ssh" not in ln:
            continue
        m = PROMPT.match(ln)  # typed after a prompt, or alone on its line
        cmd = m.group("cmd").strip() if m else ln.strip()
        if (host := _target(cmd)) is not None:
            found.append((i, cmd, host))
    out = []
    for n, (i, cmd, host) in enumerate(found):
        end = found[n + 1][0] if n + 1 < len(found) else len(lines)
        fail = next(((j, lines[j].strip()) for j in range(i + 1, end) if _FAILED.search(lines[j])), None)
        out.append(SshAttempt(i, cmd, host, fail[1] if fail else None, fail[0] if fail else None))
    return out


def looks_like_failed_ssh(lines: list[str], command: str | None = None) -> bool:
    """A short text of ssh commands, at least one of which failed (a session's log is not that)."""
    if len(lines) > 40:
        return False
    return any(a.failure for a in ssh_attempts("\n".join(lines), command))
