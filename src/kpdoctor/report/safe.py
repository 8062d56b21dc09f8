"""Evidence is shown, never obeyed: text from logs, file and archive names reaches the reader's
terminal only with its control characters made visible.

A hostile or merely dirty bundle can hold escape sequences (``ESC]0;`` sets the window title,
``ESC[2J`` clears the screen, OSC 52 writes the clipboard on some terminals) and bytes that are not
UTF-8 (names on a Linux file system need not be). Every renderer passes evidence text through here.
"""

from __future__ import annotations

import re

from rich.markup import escape as _markup_escape

from kpdoctor import lazy_re

# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), lone surrogates
_CONTROL = lazy_re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_JSON_UNSAFE = lazy_re.compile("[\x7f-\x9f\ud800-\udfff]")


def _visible(m: re.Match[str]) -> str:
    c = m.group()
    return "\ufffd" if "\ud800" <= c <= "\udfff" else f"\\x{ord(c):02x}"


def printable(text: str) -> str:
    """``text`` with control characters shown as ``\\x1b`` and undecodable bytes as U+FFFD."""
    return _CONTROL.sub(_visible, text) if _CONTROL.search(text) else text


MAX_SHOWN = 4000  # characters of one string on a terminal: Rich's escaping is quadratic in some shapes


def escape(text: str) -> str:
    """For Rich: at most :data:`MAX_SHOWN` characters, control characters made visible, then
    markup escaped."""
    if len(text) > MAX_SHOWN:
        text = f"{text[:MAX_SHOWN]} [... {len(text) - MAX_SHOWN:,} more characters]"
    return _markup_escape(printable(text))


def plain(text: str) -> str:
    """For a Rich ``Text`` (no markup read): at most :data:`MAX_SHOWN` characters, control
    characters made visible."""
    if len(text) > MAX_SHOWN:
        text = f"{text[:MAX_SHOWN]} [... {len(text) - MAX_SHOWN:,} more characters]"
    return printable(text)


def json_safe(text: str) -> str:
    """JSON text as valid UTF-8 with no raw C1 control: those characters (only ever inside JSON
    strings) become ``\\uXXXX`` escapes, which mean the same."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _JSON_UNSAFE.search(text) else text


# -- Markdown: a name or a line from the evidence is text, never structure -----------------------
#
# A report pasted into a ticket is rendered: a file name holding a ``` fence, a log line holding
# "# heading" or "<img onerror=...>", a Service name with "](http://..." must show as written and
# end nothing. Prose is split into its `code spans` (literal already) and text; in text, what could
# start markup is backslash-escaped (CommonMark: any ASCII punctuation may be), "<" and "&" become
# entities (no raw HTML, no entity tricks), and a line break becomes a space (a new line could
# start a block). An underscore inside a word (nf_conntrack_max) starts nothing and stays.
_CODE_SPAN = lazy_re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)
_MD_ALWAYS = lazy_re.compile(r"[\\*\[\]|~]")
_MD_UNDERSCORE = lazy_re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# what starts a block at a line's start: a heading, a quote, a list item, a setext underline or a
# thematic break (``10.0.4.17`` is no list item: a marker is followed by a space)
_MD_LINE_START = lazy_re.compile(r"^(#{1,6}(?=[ \t]|$)|>|[-+](?=[-+ \t]|$)|=|\d{1,9}[.)](?=[ \t]|$))")


def _md_plain(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    text = _MD_ALWAYS.sub(lambda m: "\\" + m.group(), text)
    text = _MD_UNDERSCORE.sub(r"\\_", text)
    return text.replace("`", "\\`")


def md_text(text: str) -> str:
    """``text`` (a name, a message, a line of prose that may quote evidence) as inline Markdown
    that renders as written, wherever it is put: a line's start, a list item's or a heading's
    (a marker or indentation at its start would start a block there)."""
    text = printable(" ".join(text.splitlines()) if "\n" in text or "\r" in text else text)
    out, pos = [], 0
    for m in _CODE_SPAN.finditer(text):
        out.append(_md_plain(text[pos : m.start()]))
        out.append(m.group())  # a code span shows its content literally: nothing in it is markup
        pos = m.end()
    out.append(_md_plain(text[pos:]))
    joined = "".join(out)
    joined = joined.lstrip(" \t")  # (indentation at a line's start would make it a code block)
    return _MD_LINE_START.sub(lambda m: m.group(1)[:-1] + "\\" + m.group(1)[-1], joined)


def md_cell(text: str) -> str:
    """``text`` in a table cell: :func:`md_text`, ``|`` escaped even inside code spans (GFM splits
    the row at any unescaped pipe)."""
    return re.sub(r"(?<!\\)\|", r"\\|", md_text(text))


def md_fence(lines: list[str], info: str = "") -> list[str]:
    """``lines`` as a fenced code block whose fence no line can close: longer than any run of
    backticks in them (CommonMark closes a fence only with one at least as long)."""
    body = [printable(line) for line in lines]
    longest = max((len(run) for line in body for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, *body, fence]
