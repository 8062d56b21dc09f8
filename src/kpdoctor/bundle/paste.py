"""Take the wrapping off a paste: what users post is rarely the bytes a command printed.

Markdown list items and quotes indent or ``>``-prefix every line, ``grep -n``/``-H`` glue a file
name and line number to each line (and put ``--`` between groups), and a single line often sits
in backticks. Each of these is undone line by line, never joining, splitting or dropping a line,
so line N of the result is line N of the user's file and evidence citations stay right.

A hard wrap (a terminal or a mail client that broke every long line at the same column) is one
exception to "never joining": each broken line is joined back onto its first piece and the lines
its other pieces were on are left empty, so that line N is still line N. The other is a message
of the catalogue broken across lines at any column (an editor's or a tracker's word wrap): the
lines are joined where their join, and neither line, reads as one of the programs' messages.

Used only for text that is not recognised as it is, or that reads better without its wrapping.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.parse.shellwords import PROMPT, reads_on

# What a wrapper must cover to be taken off: most lines, not one that happens to look like it.
_MOST = 0.8

_QUOTE = lazy_re.compile(r"^[ \t]*>[ \t]?")
_GREP_N = lazy_re.compile(r"^(?P<n>\d{1,12})[:-]")  # grep -n: "12:match", "13-context"
_GREP_HN = lazy_re.compile(r"^(?P<file>[^\s:]+?)[:-](?P<n>\d{1,12})[:-]")  # grep -Hn: "kube-proxy.log:12:match"
_GREP_H = lazy_re.compile(r"^(?P<file>[^\s:`'\"]+|\(standard input\)):")  # grep -H: "kube-proxy.log:match"
_BACKTICKED = lazy_re.compile(r"^(?P<indent>[ \t]*)`(?P<inner>[^`]+)`[ \t]*$")
# Output a blog post or a runbook wrote as a comment under its command ("# Output:
# net.ipv4.ip_forward = 0", "# 输出：0  <-- here"), on the comment's line or, after a label
# alone, on the comment lines that follow it.
_OUTPUT_COMMENT = lazy_re.compile(
    r"^(?P<indent>[ \t]*)#[ \t]*(?:(?:output|result|returns?|prints?|输出(?:结果)?|结果|返回|显示)[ \t]*[:：]|=>)"
    r"[ \t]*(?P<out>.*)$",
    re.IGNORECASE,
)
_COMMENTED = lazy_re.compile(r"^(?P<indent>[ \t]*)#[ \t]?(?P<out>.*)$")
# the writer's note after an output line: "0   <-- the culprit", "0  # <- here", "0 ← 这里"
_ARROW_NOTE = lazy_re.compile(r"[ \t]+(?:#[ \t]*)?(?:<-+|<=+|←)(?:[ \t].*)?$")
# An escaped "\#" at a line's start (a root prompt the editor would have made a heading).
# ECMA-48 SGR sequences (colour, bold, reset): ESC [ parameters m
_COLOUR = lazy_re.compile(r"\x1b\[[0-9;]*m")
_ESCAPED_HASH = lazy_re.compile(r"^(?P<indent>[ \t]*)\\(?=#)")


def _unbold(line: str) -> str:
    """A line (or a block's first or last line) in markdown bold, without the ``**``: only
    where it opens the line or closes it, unpaired inside it (never "a ** b", "**x** y")."""
    n = line.count("**")
    body = line.strip()
    if n == 2 and body.startswith("**") and body.endswith("**") and len(body) > 4:
        return line.replace("**", "", 1)[::-1].replace("**", "", 1)[::-1]
    if n == 1 and (body.startswith("**") or body.endswith("**")):
        return line.replace("**", "", 1)
    return line


@dataclass(frozen=True, slots=True)
class Unwrapped:
    """The paste without its wrapping, and what was taken off (for the report's inputs)."""

    text: str
    removed: tuple[str, ...]


_MIN_QUOTED = 2  # lines a quoted block holds at least (one `>` line is a remark, or a redirect)


def _quoted_blocks(lines: list[str]) -> list[str] | None:
    """The lines with the markers of each quoted block taken off (a run of lines every one of
    which starts with `>`), when a block of two lines or more is there; None otherwise. The
    lines under a command the shell reads on after (an open quote) are its continuation
    prompts, not a quote."""
    out: list[str] | None = None
    i = 0
    while i < len(lines):
        j = i
        while j < len(lines) and _QUOTE.match(lines[j]):
            j += 1
        if j - i >= _MIN_QUOTED and not (i and (m := PROMPT.match(lines[i - 1])) and reads_on(m.group("cmd"))):
            out = out if out is not None else list(lines)
            out[i:j] = [_QUOTE.sub("", ln, count=1) for ln in lines[i:j]]
        i = max(j, i + 1)
    return out


def _share(lines: list[str], test: re.Pattern[str]) -> float:
    content = [ln for ln in lines if ln.strip() and ln.strip() != "--"]
    if not content:
        return 0.0
    return sum(1 for ln in content if test.match(ln)) / len(content)


def _same_file(lines: list[str], rx: re.Pattern[str]) -> bool:
    """grep -H names one file (or a few, with a path or an extension): not "Name:" of a table."""
    files = {m.group("file") for ln in lines if (m := rx.match(ln))}
    return 0 < len(files) <= 3 and all("." in f or "/" in f or f == "(standard input)" for f in files)


def _line_numbers(lines: list[str], rx: re.Pattern[str]) -> bool:
    """grep -n numbers rise line by line (per file): a column of dates or times does not."""
    last: dict[str, int] = {}
    for ln in lines:
        m = rx.match(ln)
        if m is None:
            continue
        f, n = m.groupdict().get("file") or "", int(m.group("n"))
        if n <= last.get(f, 0):
            return False
        last[f] = n
    return True


def _strip_grep(lines: list[str]) -> tuple[list[str], str] | None:
    """grep's prefixes, on two lines at least: one "word:" line is as likely "key: value"."""
    if sum(1 for ln in lines if ln.strip() and ln.strip() != "--") < 2:
        return None
    for rx, what in ((_GREP_HN, "grep -Hn prefixes"), (_GREP_N, "grep -n prefixes"), (_GREP_H, "grep -H prefixes")):
        if _share(lines, rx) < _MOST:
            continue
        numbered = rx is not _GREP_H
        if (not numbered or _line_numbers(lines, rx)) and (rx is _GREP_N or _same_file(lines, rx)):
            out = ["" if ln.strip() == "--" else rx.sub("", ln, count=1) for ln in lines]
            return out, what
    return None


# A file written from a heredoc, as people post a config: "cat <<EOF > /tmp/kube-proxy.yaml".
_HEREDOC = lazy_re.compile(
    r"""^[ \t]*(?:\$[ \t]*)?(?:sudo[ \t]+)?(?:cat|tee)\b[^<\n]*<<-?[ \t]*(['"]?)(?P<end>\w+)\1"""
)


def _strip_heredoc(lines: list[str]) -> list[str] | None:
    """Each heredoc's body: its opening command and closing delimiter lines blanked (the body
    keeps its line numbers), wherever it sits in the paste; None when there is none."""
    out: list[str] | None = None
    i = 0
    while i < len(lines):
        m = _HEREDOC.match(lines[i])
        end = m.group("end") if m else None
        close = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == end), None) if end else None
        if close is None or not any(ln.strip() for ln in lines[i + 1 : close]):
            i += 1
            continue
        out = out if out is not None else list(lines)
        out[i] = out[close] = ""
        i = close + 1
    return out


def _uncommented_output(lines: list[str]) -> list[str] | None:
    """Output written as comments under its command (``_OUTPUT_COMMENT``), as the command
    printed it: the label and the writer's trailing note taken off. A label alone opens a block
    of comment lines, which ends at the first line that is not one."""
    out = list(lines)
    block = False
    for i, ln in enumerate(lines):
        m = _OUTPUT_COMMENT.match(ln)
        if m is None and block and (m := _COMMENTED.match(ln)) is not None and m.group("out").strip():
            out[i] = m.group("indent") + _ARROW_NOTE.sub("", m.group("out"))
            continue
        block = False
        if m is not None:
            body = _ARROW_NOTE.sub("", m.group("out")).rstrip()
            out[i] = m.group("indent") + body
            block = not body
    return out if out != lines else None


def _dedent(lines: list[str]) -> tuple[list[str], int]:
    """Remove the indentation every non-empty line shares (a paste indented as a whole)."""
    indents = [len(ln) - len(ln.lstrip(" \t")) for ln in lines if ln.strip()]
    cut = min(indents) if indents else 0
    if not cut:
        return lines, 0
    return [ln[cut:] if ln.strip() else "" for ln in lines], cut


# Columns terminals and mail clients wrap at: a single line broken there is a wrap.
_TERMINAL_WIDTHS = frozenset({80, 100, 120, 132, 140, 150, 160, 180, 200, 220, 240})
# What starts a line of its own, never a wrapped line's next piece: a log record's header or
# timestamp, a dmesg time, a rule, a table line, a prompt, a comment, an indented block's line
# (a tab or two spaces: a piece may start with the one space the break fell before), an
# ipvsadm virtual server, a markdown fence (the block's last line may be a terminal's width), a
# row of a /proc/net/stat file (8-digit hex counters).
_STARTS_A_LINE = lazy_re.compile(
    r"^(?:[IWEF]\d{4} \d\d:|\d{4}-\d\d-\d\d[T ]|[A-Z][a-z]{2} [ \d]?\d \d\d:|\[\s*\d+\.\d+\]|time=\"|"
    r"-[AIN] \S|:[\w-]+ |\*[a-z]+\s*$|COMMIT|#|```|~~~|\$ |[\w.-]+@[\w.-]+[:~]|\t|  |\{|\}|(?:TCP|UDP|SCTP|FWM) +\S|"
    r"[0-9a-f]{8}(?: +[0-9a-f]{8}){3}|$)"
)
_MIN_WRAP = 60
_TABLE_SHARE = 0.9


def _shape(text: str) -> str:
    """A line's opening, as its kinds of characters ("[ 1] 22/tcp" -> "[ 9] 9")."""
    return re.sub(r"[A-Za-z]", "a", re.sub(r"\d", "9", text[:6]))


def _continues(line: str, nxt: str) -> bool:
    """Can ``nxt`` be the next piece of ``line`` broken at its end? Not when it starts a line of
    its own, when it opens as ``line`` does (the next row of a table), when ``line`` ends in
    padding (a table's column filled to the width), or when both are rows of one aligned table
    (their cells start at the same columns: kubectl's tab writer pads every row to them)."""
    body = line.rstrip("\r")
    return (
        bool(nxt.strip())
        and not _STARTS_A_LINE.match(nxt)
        and _shape(nxt) != _shape(body)
        and not body.endswith("  ")
        and not _aligned(body, nxt)
    )


def _opens_a_message(text: str) -> bool:
    """Does ``text`` read, from its first character, as a message of the catalogue (a program's
    line of its own, as iptables' "Another app is currently holding the xtables lock..." after a
    first line that happened to be a terminal's width)? Only asked of a lone line at the width:
    where many lines are, a piece may well open with an error text nested in its line's message."""
    from kpdoctor.messages import matcher  # the catalogue is read only when a paste asks

    return any(m.start == 0 for m in matcher().match(text.strip()))


_CELL_START = lazy_re.compile(r"(?<=\S)[ \t]{2,}(?=\S)")


def _aligned(a: str, b: str) -> bool:
    """Do ``a`` and ``b`` have cells starting at two or more of the same columns (rows of a
    table: a header and its rows, padded to the widest cell)?"""
    starts_a = {m.end() for m in _CELL_START.finditer(a)}
    starts_b = {m.end() for m in _CELL_START.finditer(b)}
    return len(starts_a & starts_b) >= 2


def _hard_wrapped(lines: list[str]) -> list[str] | None:
    """Lines broken at one column joined back (see the module docstring), or None. The column
    is the longest line's length when several lines end exactly there (a wall no natural text
    has), or one line does at a terminal's width (not a prompt's: its output follows); a line is
    joined to the next only when the next does not start a line of its own (a record's header,
    a rule, an indented line)."""
    lengths = [len(ln.rstrip("\r")) for ln in lines]
    width = max(lengths, default=0)
    if width < _MIN_WRAP:
        return None
    if sum(1 for n in lengths if n == width) >= _TABLE_SHARE * sum(1 for ln in lines if ln.strip()):
        return None  # nearly every line as long: an aligned table, not broken text (a wrap's last pieces are shorter)
    at_wall = [i for i, n in enumerate(lengths[:-1]) if n == width and _continues(lines[i], lines[i + 1])]
    # one line at a terminal's width is a wrap, unless it is a command line (its output follows)
    if not at_wall or (len(at_wall) < 2 and (width not in _TERMINAL_WIDTHS or PROMPT.match(lines[at_wall[0]]))):
        return None
    if len(at_wall) < 2 and _opens_a_message(lines[at_wall[0] + 1]):
        return None  # one line as wide as a terminal, then a program's line of its own: no wrap
    out = list(lines)
    i = 0
    while i < len(out) - 1:
        if len(out[i].rstrip("\r")) != width or not _continues(out[i], out[i + 1]):
            i += 1
            continue
        head, j = out[i].rstrip("\r"), i + 1
        while j < len(out) and out[j] and _continues(lines[i], out[j]):
            piece = out[j].rstrip("\r")
            head += piece
            out[j] = ""
            j += 1
            if len(piece) != width:
                break  # the last piece of this line
        out[i] = head
        i = j
    return out


# A message no longer than this many lines is joined back (a wrap breaks a line in few places).
_MAX_PIECES = 4


def _rejoin_messages(lines: list[str]) -> list[str] | None:
    """Lines that hold one message of the catalogue between them joined back onto the first (the
    others left empty); None when no message is broken. A line that starts a line of its own (a
    log record's header, a rule, a prompt) is never another's piece; the indentation the first
    line has (a quoted block's) is not what starts one."""
    from kpdoctor.messages import matcher  # the catalogue is read only when a paste asks

    m = matcher()
    out: list[str] | None = None
    i = 0
    while i < len(lines) - 1:
        head, j = lines[i], i + 1
        indent = head[: len(head) - len(head.lstrip(" \t"))]
        while (
            j < len(lines)
            and j - i < _MAX_PIECES
            and head.strip()
            and not _STARTS_A_LINE.match(lines[j].removeprefix(indent))
            and m.broken_between(head, lines[j])
        ):
            head = head.rstrip() + " " + lines[j].lstrip()
            j += 1
        if j > i + 1:
            out = out if out is not None else list(lines)
            out[i:j] = [head] + [""] * (j - i - 1)
        i = j
    return out


def unwrap_paste(text: str) -> Unwrapped:
    """The text as the command printed it, as far as the wrapping can be told from the text."""
    removed: list[str] = []
    if "\x1b[" in text:  # a terminal's colours, as a program wrote them to a file (k3s check-config)
        plain = _COLOUR.sub("", text)
        if plain != text:
            text = plain
            removed.append("terminal colour codes")
    lines = text.split("\n")
    for _ in range(3):  # a quoted, indented grep: each layer once, outermost first
        before = len(removed)
        joined = _hard_wrapped(lines) if "hard line breaks" not in removed else None
        if joined is not None:
            lines = joined
            removed.append("hard line breaks")
        if _share(lines, _QUOTE) >= _MOST:
            while _share(lines, _QUOTE) >= _MOST:  # "> > nested" quotes
                lines = [_QUOTE.sub("", ln, count=1) for ln in lines]
            removed.append("markdown quote markers")
        elif (unquoted := _quoted_blocks(lines)) is not None:
            lines = unquoted  # a quoted block under a line of prose (a GitHub comment's)
            removed.append("the markdown quote markers of the paste's quoted blocks")
        lines, cut = _dedent(lines)
        if cut:
            removed.append(f"an indentation of {cut}")
        ticked = [m.group("indent") + m.group("inner") if (m := _BACKTICKED.match(ln)) else ln for ln in lines]
        if ticked != lines:
            lines = ticked
            removed.append("backticks")
        marked = [_ESCAPED_HASH.sub(r"\g<indent>", _unbold(ln), count=1) for ln in lines]
        if marked != lines:
            lines = marked
            removed.append("markdown escapes")
        grep = _strip_grep(lines)
        if grep is not None:
            lines, what = grep
            removed.append(what)
        commented = _uncommented_output(lines) if "output written as comments" not in removed else None
        if commented is not None:
            lines = commented
            removed.append("output written as comments")
        heredoc = _strip_heredoc(lines)
        if heredoc is not None:
            lines = heredoc
            removed.append("a heredoc's command and delimiter")
        if len(removed) == before:
            break
    # last: a message still broken once every wrapper is off (a hard wrap is joined whole above)
    rejoined = _rejoin_messages(lines)
    if rejoined is not None:
        lines = rejoined
        removed.append("line breaks inside a message")
    return Unwrapped("\n".join(lines), tuple(removed))
