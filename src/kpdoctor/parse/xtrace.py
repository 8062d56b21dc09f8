"""A shell script's trace (``set -x``): the commands a container's entry script ran, as the shell
printed them before running each.

Users paste it as the log of a Pod whose script exits (`kubectl logs svclb-...`): k3s' ServiceLB
runs klipper-lb, an ``sh -ex`` script, in a Pod per node and LoadBalancer Service, and its trace is
the Pod's whole log. What a trace proves beyond the commands is the values the script read: the
shell prints a command substitution's command (``cat /proc/sys/...``) before the command that uses
its output, with the output already in place, so ``[ $(cat F) != 1 ]`` traces as ``cat F`` and then
``[ 0 != 1 ]``: F held 0.

How each shell prints the trace (bash 5.2, dash 0.5.12, busybox 1.36 ash, run here in a network
namespace): one line per simple command after ``PS4`` (``+ ``), repeated per nesting level in bash
(``++ cat F`` inside ``$(...)``); bash and busybox quote a word that needs it (``'['``, ``'!='``,
``'!'``), dash never does; bash closes the test with ``']'``, busybox with a bare ``]``. Nothing
here raises.
"""

from __future__ import annotations

from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.parse.evidence_shape import EvidenceShape
from kpdoctor.parse.shellwords import shell_split

# A traced command a script's trace holds and prose does not start with: a test, a file read, a
# setting read, the commands entry scripts of network Pods run (what types a text as a trace)
TRACED_LINE = lazy_re.compile(
    r"^\+{1,4} (?:'\['|\[\[?|test|cat|sysctl|echo|exit|trap|iptables|ip6tables|ip6?tables-(?:legacy|nft|save|restore)"
    r"|nft|ip|grep|sed|awk|ln|mkfifo|lsmod|modprobe)(?: |$)"
)
# any other traced command
_OTHER_LINE = lazy_re.compile(r"^\+{1,4} \S")
_TRACE = lazy_re.compile(r"^(?P<depth>\+{1,4}) (?P<cmd>\S.*)$")
_TESTS = frozenset({"[", "[[", "test"})
_COMPARE = frozenset({"=", "==", "!=", "-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_VALUE = lazy_re.compile(r"^-?\d{1,20}$")
_PROC_SYS = "/proc/sys/"


@dataclass(frozen=True, slots=True)
class Traced:
    """One command of the trace: its words as the shell ran them (quoting off)."""

    line: int
    text: str
    depth: int  # 1 at the script's level, 2 inside a command substitution (bash)
    words: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TracedSetting:
    """A kernel setting the script read, the value it compared, and whether it exited right after."""

    name: str  # sysctl's name: net.ipv6.conf.all.forwarding
    value: str
    read: Traced  # the command that printed it
    test: Traced  # the compare that shows the value
    exit: Traced | None  # the `exit N` traced right after the compare; None when the script went on

    @property
    def exit_status(self) -> int | None:
        return int(self.exit.words[1]) if self.exit is not None else None


def parse_trace(text: str, first_line: int = 1) -> list[Traced]:
    """Every traced command of the text, at its line."""
    out = []
    for i, line in enumerate(text.splitlines()):
        m = _TRACE.match(line.strip())
        if m is None:
            continue
        cmd = m.group("cmd")
        try:
            words = shell_split(cmd)
        except ValueError:
            words = cmd.split()
        out.append(Traced(first_line + i, line.strip(), len(m.group("depth")), tuple(words)))
    return out


def _setting_read(words: tuple[str, ...]) -> str | None:
    """The sysctl a traced command printed (``cat /proc/sys/X``, ``sysctl -n X``), by its name."""
    if len(words) == 2 and words[0] == "cat" and words[1].startswith(_PROC_SYS):
        return words[1][len(_PROC_SYS) :].replace("/", ".")
    if len(words) == 3 and words[0] == "sysctl" and words[1] in ("-n", "-b"):
        return words[2].replace("/", ".")
    return None


def _compared(words: tuple[str, ...]) -> str | None:
    """The value a traced test compares first (``[ 0 != 1 ]``, ``test 0 -eq 1``)."""
    if len(words) >= 4 and words[0] in _TESTS and words[2] in _COMPARE and _VALUE.match(words[1]):
        return words[1]
    return None


def settings_read(trace: list[Traced]) -> list[TracedSetting]:
    """The settings the script read and compared: a traced read of a setting, then the test its
    output was substituted into, the next command traced (and ``exit N`` if the script left)."""
    out = []
    for i, t in enumerate(trace[:-1]):
        name = _setting_read(t.words)
        if name is None:
            continue
        test = trace[i + 1]
        value = _compared(test.words)
        if value is None:
            continue
        after = trace[i + 2] if i + 2 < len(trace) else None
        left = after is not None and len(after.words) == 2 and after.words[0] == "exit" and after.words[1].isdigit()
        out.append(TracedSetting(name, value, t, test, after if left else None))
    return out


SHAPE = EvidenceShape(
    Kind.SHELL_TRACE,
    "shell trace",
    TRACED_LINE,
    parse_trace,
    around=_OTHER_LINE,
    # busybox 1.36 `sh -ex` running an entry script's forwarding test in a new network namespace
    # (ip_forward set to 1 there, IPv6 forwarding left at the namespace's default 0)
    example=(
        "+ trap exit TERM INT\n"
        "+ echo 10.43.107.199\n"
        "+ grep -Eq :\n"
        "+ cat /proc/sys/net/ipv4/ip_forward\n"
        "+ '[' 1 '!=' 1 ]\n"
        "+ iptables -t nat -I PREROUTING '!' -s 10.43.107.199/32 -p TCP --dport 443 -j DNAT --to 10.43.107.199:443\n"
        "+ echo fd00:43::10\n"
        "+ grep -Eq :\n"
        "+ cat /proc/sys/net/ipv6/conf/all/forwarding\n"
        "+ '[' 0 '!=' 1 ]\n"
        "+ exit 1\n"
    ),
)
