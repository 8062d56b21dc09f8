"""Counts a pasted pipeline printed: `iptables -L -n | grep "..." | wc -l` -> `4190`.

Users count instead of pasting thousands of lines; the number, the command that produced it and
what that command filtered on are the evidence (a rule that exists once on a healthy node,
counted in thousands, is a duplicating writer)."""

from __future__ import annotations

from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.parse.iptables import LEGACY_WARNING
from kpdoctor.parse.numbers import to_int
from kpdoctor.parse.shellwords import shell_split, unwrapped

MAX_COMMAND = 4096
_COUNT = lazy_re.compile(r"^\s*(\d{1,12})\s*$")
# what a counting command may print besides its number: iptables-nft's notice about the other
# backend, grep's complaints
_NOTICE = lazy_re.compile(r"^\s*(?:#\s*)?(?:Warning:|grep:|wc:)")


@dataclass(frozen=True, slots=True)
class LineCount:
    count: int
    command: str
    source: tuple[str, ...]  # the first stage's argv (what was counted)
    patterns: tuple[str, ...]  # what the grep stages kept (`grep -v` stages not included)
    line: int  # the number's line in the user's file
    text: str
    notices: tuple[str, ...]  # other lines the pipeline printed (iptables-nft's legacy-tables warning)

    @property
    def program(self) -> str:
        """The counted program (`sudo`, `time` and `env` passed over)."""
        words = unwrapped(list(self.source))
        return words[0].rsplit("/", 1)[-1] if words else ""

    @property
    def legacy_warning(self) -> bool:
        """Did the counted iptables print iptables-nft's notice that legacy tables exist too?"""
        return any(LEGACY_WARNING.lstrip("# ") in n for n in self.notices)


def pipeline(command: str) -> list[list[str]]:
    """The stages of a shell pipeline, each split into words (`a|b` unspaced too)."""
    if len(command) > MAX_COMMAND:
        return []
    spaced: list[str] = []
    quote = ""
    for i, ch in enumerate(command):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "|" and command[i - 1 : i] != "|" and command[i + 1 : i + 2] != "|":
            spaced.append(" | ")
            continue
        spaced.append(ch)
    try:
        words = shell_split("".join(spaced))
    except ValueError:
        return []
    stages: list[list[str]] = [[]]
    for w in words:
        if w == "|":
            stages.append([])
        else:
            stages[-1].append(w)
    return [s for s in stages if s]


def _grep_patterns(stage: list[str]) -> tuple[list[str], bool, bool]:
    """(patterns, inverted, counting) of a grep stage."""
    patterns: list[str] = []
    inverted = counting = False
    args = iter(stage[1:])
    for a in args:
        if a in ("-e", "--regexp"):
            patterns.append(next(args, ""))
        elif a.startswith("--regexp="):
            patterns.append(a.split("=", 1)[1])
        elif a.startswith("-") and not a.startswith("--") and len(a) > 1:
            inverted |= "v" in a
            counting |= "c" in a
        elif a in ("--invert-match",):
            inverted = True
        elif a == "--count":
            counting = True
        elif not a.startswith("-") and not patterns:
            patterns.append(a)
    return patterns, inverted, counting


def counting_command(command: str) -> bool:
    """Does the pipeline print a count of lines (`| wc -l`, a last `grep -c`)?"""
    stages = pipeline(command)
    if not stages:
        return False
    last = stages[-1]
    prog = last[0].rsplit("/", 1)[-1]
    if prog == "wc":
        return "-l" in last[1:] or "--lines" in last[1:]
    return prog in ("grep", "egrep", "fgrep") and _grep_patterns(last)[2]


def parse_line_count(text: str, command: str, first_line: int = 1) -> LineCount | None:
    """The count a counting pipeline printed, when its output is one number (and notices)."""
    if not counting_command(command):
        return None
    stages = pipeline(command)
    number: tuple[int, int, str] | None = None
    notices: list[str] = []
    for i, raw in enumerate(text.splitlines()):
        if not raw.strip():
            continue
        m = _COUNT.match(raw)
        if m and number is None:
            n = to_int(m.group(1))
            if n is None:
                return None
            number = (n, first_line + i, raw.strip())
        elif _NOTICE.match(raw):
            notices.append(raw.strip())
        else:
            return None  # more than a count: not this shape
    if number is None:
        return None
    patterns: list[str] = []
    for stage in stages:
        if stage[0].rsplit("/", 1)[-1] in ("grep", "egrep", "fgrep"):
            found, inverted, _counting = _grep_patterns(stage)
            if not inverted:
                patterns.extend(found)
    source = tuple(stages[0])
    if source and source[0].rsplit("/", 1)[-1] in ("grep", "egrep", "fgrep"):
        source = ()  # `grep -c X file`: the file is the source, the pattern is above
    return LineCount(number[0], command, source, tuple(patterns), number[1], number[2], tuple(notices))
